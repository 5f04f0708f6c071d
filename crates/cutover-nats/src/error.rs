//! Adapter errors. Each variant carries what the operator needs to act: the
//! server, the stream, the consumer, the JetStream error code.

use cutover_core::api_error::ApiErrorCode;
use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot connect to {server}: {reason}")]
    Connect { server: String, reason: String },
    #[error("{what}: {description} (JetStream error {code})")]
    Api { what: String, code: ApiErrorCode, description: String },
    #[error("{what}: no responders: is JetStream enabled on the server, and does the account have access to it?")]
    NoResponders { what: String },
    #[error("{what}: the server did not answer in time")]
    Timeout { what: String },
    #[error("{what}: {reason}")]
    Request { what: String, reason: String },
    #[error("cannot read the server's answer to {what}: {reason}")]
    Decode { what: String, reason: String },
    #[error("stream {0:?} does not exist: check the name with `nats stream ls` (or create it)")]
    StreamNotFound(String),
    #[error("consumer {consumer:?} does not exist on stream {stream:?}: check the name with `nats consumer ls {stream}`")]
    ConsumerNotFound { stream: String, consumer: String },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Name(#[from] cutover_core::names::NameError),
    #[error(transparent)]
    Plan(#[from] cutover_core::plan::PlanError),
    #[error("the plan is unsafe: {0}")]
    Unsafe(String),
    #[error("{0}")]
    Journal(String),
    #[error("migration {id} is held by runner {holder} until {until}; wait for it, or if that runner is gone, run again after the lease expires")]
    Leased { id: String, holder: String, until: String },
    #[error("interrupted at a safe point ({step}); resume with `nats-cutover run --resume {id}` or undo with `nats-cutover rollback {id}`")]
    Interrupted { id: String, step: String },
    #[error("{0}")]
    Stuck(String),
}

impl Error {
    pub fn api_code(&self) -> Option<ApiErrorCode> {
        match self {
            Error::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Errors that mean the server could not be reached or misbehaved, as opposed
    /// to input the operator must change.
    pub fn is_server(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::NoResponders { .. }
                | Error::Timeout { .. }
                | Error::Request { .. }
                | Error::Decode { .. }
        )
    }
}
