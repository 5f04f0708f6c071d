//! The CLI's one error type, and the one mapping from errors to exit codes
//! ([`CliError::exit_code`]: a `match` without a wildcard, so a new variant or a
//! new adapter [`ErrorKind`] does not compile until it has a code).
//!
//! The message shown is the error and its sources joined by ": " (see
//! [`CliError::message`]); the variants that carry a `String` hold the whole
//! message, written where the cause is known.

use crate::exit::ExitCode;
use cutover_core::names::NameError;
use cutover_nats::ErrorKind;
use thiserror::Error;

pub type Result<T, E = CliError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum CliError {
    /// A flag that is missing, out of range, contradicts another, or names
    /// something that cannot be used (an address in use).
    #[error("{0}")]
    Flag(String),
    /// A file the operator named cannot be read, parsed or written.
    #[error("{0}")]
    File(String),
    /// `run` was not confirmed: no terminal to ask on, or not answered yes.
    #[error("{0}")]
    NotConfirmed(String),
    /// The migration named is not on the server.
    #[error("{0}")]
    NoMigration(String),
    /// The server given to `demo` already holds what the demo creates.
    #[error("{0}")]
    DemoLeftovers(String),
    /// The server given to `demo` cannot pause consumers (before 2.11).
    #[error("{0}")]
    DemoServerTooOld(String),
    #[error(transparent)]
    Name(#[from] NameError),
    /// The plan is unsafe: a verdict, refused before any change.
    #[error("{0}")]
    Unsafe(String),
    /// The demo's own nats-server cannot be found or started.
    #[error("{0}")]
    LocalServer(String),
    /// Connecting to the demo's own nats-server failed.
    #[error(transparent)]
    LocalConnect(#[from] async_nats::ConnectError),
    /// The async runtime did not start.
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    /// Reading the terminal or a socket's own address.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Rendering JSON output.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("cannot write the plan as TOML")]
    PlanToml(#[source] toml::ser::Error),
    /// Everything the adapter reports; its exit code follows its kind.
    #[error(transparent)]
    Nats(#[from] cutover_nats::Error),
}

impl CliError {
    /// The exit code of this failure: the only such mapping.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Flag(_)
            | CliError::File(_)
            | CliError::NotConfirmed(_)
            | CliError::NoMigration(_)
            | CliError::DemoLeftovers(_)
            | CliError::Name(_) => ExitCode::BadInput,
            CliError::Unsafe(_) | CliError::DemoServerTooOld(_) => ExitCode::Incompatible,
            CliError::LocalServer(_)
            | CliError::LocalConnect(_)
            | CliError::Runtime(_)
            | CliError::Io(_)
            | CliError::Json(_)
            | CliError::PlanToml(_) => ExitCode::Failed,
            CliError::Nats(e) => match e.kind() {
                ErrorKind::Input => ExitCode::BadInput,
                ErrorKind::Incompatible => ExitCode::Incompatible,
                ErrorKind::Server => ExitCode::Server,
                ErrorKind::State => ExitCode::Failed,
                ErrorKind::Interrupted => ExitCode::Interrupted,
            },
        }
    }

    /// The error and its causes, joined by ": ".
    pub fn message(&self) -> String {
        let mut parts = vec![self.to_string()];
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            parts.push(c.to_string());
            cause = c.source();
        }
        parts.join(": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_errors_exit_by_kind() {
        let changed = CliError::from(cutover_nats::Error::StreamChanged { stream: "A".into() });
        assert_eq!(changed.exit_code(), ExitCode::Failed, "server state is not bad input");
        let missing = CliError::from(cutover_nats::Error::StreamNotFound("A".into()));
        assert_eq!(missing.exit_code(), ExitCode::BadInput);
        let timeout = CliError::from(cutover_nats::Error::Timeout { what: "stream info".into() });
        assert_eq!(timeout.exit_code(), ExitCode::Server);
    }

    #[test]
    fn the_message_is_the_cause_chain() {
        let e = CliError::Runtime(std::io::Error::other("no threads"));
        assert_eq!(e.message(), "cannot start the async runtime: no threads");
        assert_eq!(e.exit_code(), ExitCode::Failed);
    }
}
