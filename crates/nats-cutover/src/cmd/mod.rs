//! One module per subcommand: parse arguments into library calls, render results.

pub mod demo;
pub mod inplace;
pub mod inspect;
pub mod plan;
pub mod progress;
pub mod run;
pub mod verify;
pub mod watch;

use crate::cli::ConnArgs;
use crate::error::Result;
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
    let client = connect_options(c).connect().await?;
    Ok(Js::new(client, c.timeout.unwrap_or(Duration::from_secs(5))))
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
