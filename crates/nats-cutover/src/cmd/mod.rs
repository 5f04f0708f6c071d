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
use cutover_nats::connect::ConnectOptions;
use cutover_nats::Js;
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
