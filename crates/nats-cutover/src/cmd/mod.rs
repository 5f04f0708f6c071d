//! One module per subcommand: parse arguments into library calls, render results.

pub mod apply;
pub mod demo;
pub mod inplace;
pub mod inspect;
pub mod plan;
pub mod plan_file;
pub mod progress;
pub mod prompt;
pub mod run;
pub mod verify;
pub mod watch;

use crate::cli::ConnArgs;
use crate::error::{CliError, Result};
use crate::metrics::{self, MetricsServer, Registry};
use cutover_nats::connect::ConnectOptions;
use cutover_nats::Js;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub fn connect_options(c: &ConnArgs) -> ConnectOptions {
    ConnectOptions {
        server: c.server.clone(),
        context: c.context.clone(),
        creds: c.creds.clone(),
        nkey: c.nkey.clone(),
        user: c.user.clone(),
        password: c.password.clone(),
        token: c.token.clone(),
        tlscert: c.tlscert.clone(),
        tlskey: c.tlskey.clone(),
        tlsca: c.tlsca.clone(),
        timeout: c.timeout,
    }
}

pub async fn connect(c: &ConnArgs) -> Result<Js> {
    let options = connect_options(c);
    let client = options.connect().await?;
    Ok(Js::new(client, c.timeout.unwrap_or(Duration::from_secs(5))).with_options(options))
}

/// The connection for a command about the old stream `from`: with a source
/// side given (--from-server/--from-context), a [`Js::across`] that sends the
/// requests about `from` there and the others to the target side.
pub async fn connect_across(c: &ConnArgs, from: Option<&str>) -> Result<Js> {
    if !c.across() {
        return connect(c).await;
    }
    let Some(from) = from else {
        return Err(CliError::Flag("--from-server/--from-context name the old stream's system: this command needs to know the migration (FROM.TO) too".into()));
    };
    let (js, src) = connect_sides(c).await?;
    Ok(js.across(src, from))
}

/// The target side's client and the source side's (--from-server or
/// --from-context and their credentials).
pub async fn connect_sides(c: &ConnArgs) -> Result<(Js, Js)> {
    let js = connect(c).await?;
    let source = ConnectOptions {
        server: c.from_server.clone(),
        context: c.from_context.clone(),
        creds: c.from_creds.clone(),
        user: c.from_user.clone(),
        password: c.from_password.clone(),
        timeout: c.timeout,
        ..Default::default()
    };
    let client = source.connect().await?;
    Ok((js, Js::new(client, c.timeout.unwrap_or(Duration::from_secs(5)))))
}

/// Refuses the source side's options for a command that reads one system
/// (they used to be ignored: the command read the target side and said the
/// old stream did not exist).
pub fn one_system(c: &ConnArgs, command: &str) -> Result<()> {
    if c.across() {
        return Err(CliError::Flag(format!("`{command}` reads one system: --from-server/--from-context are for plan, run, verify, rollback and status; to {command} a stream of the old system, give that system as --server (or --context)")));
    }
    Ok(())
}

/// The old stream of migration `id` (FROM.TO; stream names hold no '.').
pub fn from_of(id: &str) -> Option<&str> {
    id.split_once('.').map(|(from, _)| from)
}

/// Serves `reg` at --metrics-addr (when both are given) and says where, on stderr.
pub async fn serve_metrics(
    addr: Option<SocketAddr>,
    reg: Option<&Arc<Registry>>,
) -> Result<Option<MetricsServer>> {
    let (Some(addr), Some(reg)) = (addr, reg) else {
        return Ok(None);
    };
    let s = metrics::serve(addr, reg.clone()).await?;
    errln!("metrics: http://{}/metrics", s.addr);
    Ok(Some(s))
}
