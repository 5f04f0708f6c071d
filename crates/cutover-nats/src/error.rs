//! Adapter errors. Each variant carries what the operator needs to act: the
//! server, the stream, the consumer, the JetStream error code.
//!
//! Variants are named by cause; [`Error::kind`] sorts them into the few
//! [`ErrorKind`]s callers decide on (async-nats's `Error<Kind>` idea): match the
//! kind, never the message.

use cutover_core::api_error::ApiErrorCode;
use cutover_core::plan::PlanError;
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
    /// The server refused this user a subject (a permissions violation): the
    /// request was dropped unanswered. Named with the fix.
    #[error("{what}: the server denied this user permission to {op} {subject:?}; grant it in the user's permissions ({op}: {{ allow: [\"{subject}\"] }}; docs/permissions.md lists what each command needs)")]
    PermissionDenied { what: String, op: &'static str, subject: String },
    #[error("{what}: {reason}")]
    Request { what: String, reason: String },
    #[error("cannot read the server's answer to {what}: {reason}")]
    Decode { what: String, reason: String },
    /// The server's version string does not parse, so what it supports cannot
    /// be judged.
    #[error("the server reported no version it could parse")]
    UnknownServerVersion,
    #[error("stream {0:?} does not exist: check the name with `nats stream ls` (or create it)")]
    StreamNotFound(String),
    #[error("consumer {consumer:?} does not exist on stream {stream:?}: check the name with `nats consumer ls {stream}`")]
    ConsumerNotFound { stream: String, consumer: String },
    /// Options or files the operator gave that cannot be used: connection
    /// flags and credential files, a nats context, verify's `--audit` or
    /// `--consumer`. The message names the option and the fix.
    #[error("{0}")]
    Input(String),
    /// The migration asked for cannot be verified as it is: not past its commit
    /// point, a strategy or retention verify does not support, its old stream
    /// gone, a consumer not moved.
    #[error("{0}")]
    NotVerifiable(String),
    /// The old stream's state moved under verify (messages expiring or deleted
    /// while it was read): server state, not the operator's input.
    #[error("stream {stream} changed while verify read it (its messages are expiring or being deleted?): verify needs a stable old stream")]
    StreamChanged { stream: String },
    #[error(transparent)]
    Name(#[from] cutover_core::names::NameError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Refused as unsafe (by the plan, or by a step or a rollback that
    /// found the server in a state it cannot act on safely); the message says
    /// why and what to do.
    #[error("{0}")]
    Unsafe(String),
    #[error("{0}")]
    Journal(String),
    /// The migration id named is not on the server (no journal under it).
    #[error("{0}")]
    NoMigration(String),
    /// A journal written by a newer nats-cutover: its phases could be
    /// misread, so nothing acts on it.
    #[error("journal {id} was written by a newer nats-cutover (journal format {found}; this one reads up to {reads}); nothing was changed: continue, undo or forget it with the newer version")]
    NewerJournal { id: String, found: u64, reads: u32 },
    /// A stream the plan names is part of another migration not finished.
    #[error("stream {stream} is part of migration {id} ({from} -> {to}), which is not finished (phase {phase}); nothing was changed: finish it with `nats-cutover run --resume {id}` or undo it with `nats-cutover rollback {id}` first")]
    UnderWay { stream: String, id: String, from: String, to: String, phase: String },
    /// A stream that holds nats-cutover's own name for something else.
    #[error("{0}")]
    Reserved(String),
    #[error("migration {id} is held by runner {holder} until {until}; wait for it, or if that runner is gone, run again after the lease expires")]
    Leased { id: String, holder: String, until: String },
    /// `next`: what the operator can do from this state (resume or undo;
    /// with publishers split across systems, only go on).
    #[error("interrupted at a safe point ({step}) of migration {id}; {next}")]
    Interrupted { id: String, step: String, next: String },
    #[error("{0}")]
    Stuck(String),
    /// B receives A's messages slower than A stores them: the commit could
    /// never close (checked while catching up, before any commit).
    #[error("{to} is not catching up with {from}: over the last {window_s:.1} s {from} stored {a_per_s:.0} msg/s and {to} received {b_per_s:.0} msg/s of them, and its lag grew from {lag_from} to {lag_to} messages; nothing was committed: run again when {from}'s ingest is lower (plan shows the rate it measured), or roll back")]
    FallingBehind {
        from: String,
        to: String,
        window_s: f64,
        a_per_s: f64,
        b_per_s: f64,
        lag_from: u64,
        lag_to: u64,
    },
    /// Fence mode needs the consumer's applications to follow the protocol;
    /// none registered (checked before any write).
    #[error("fence mode: no live application instance of {stream}/{consumer} is registered (keys inst.{stream}.{consumer}.* in KV bucket CUTOVER, docs/protocol.md); nothing was changed; start applications that follow the protocol (every instance must), or run with --mode drain")]
    NoInstances { stream: String, consumer: String },
    /// Strategy dual-write: no live publisher of the stream is registered.
    #[error("dual-write: no live publisher of {stream} is registered (keys pubi.{stream}.* in KV bucket CUTOVER, docs/protocol.md); nothing was changed; start publishers that follow the protocol (every publisher of {stream} must), or use --strategy source")]
    NoPublishers { stream: String },
    /// A run stopped by a failure, after its compensating actions: the cause,
    /// the state the migration is left in, and the command that continues or
    /// undoes it.
    #[error("{cause}\n{state}; {next}")]
    RunStopped { cause: Box<Error>, state: String, next: String },
}

/// What kind of failure an [`Error`] is: what callers (the CLI's exit codes)
/// decide on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The operator's input: flags, names, files, or a stream, consumer or
    /// migration that does not exist or cannot be used as asked. Refused before
    /// any change.
    Input,
    /// The plan is unsafe, or the server too old or unknown. Nothing changes.
    Incompatible,
    /// The server could not be reached, refused the credentials, did not
    /// answer, failed a request or answered something unreadable.
    Server,
    /// What the server holds stops the operation: another runner's lease, a
    /// step that did not complete, a journal that is missing or incomplete, a
    /// stream that changed while it was read. The message says what to do.
    State,
    /// Stopped at a safe point on request (Ctrl-C).
    Interrupted,
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Connect { .. }
            | Error::Api { .. }
            | Error::NoResponders { .. }
            | Error::Timeout { .. }
            | Error::PermissionDenied { .. }
            | Error::Request { .. }
            | Error::Decode { .. } => ErrorKind::Server,
            Error::UnknownServerVersion | Error::Unsafe(_) => ErrorKind::Incompatible,
            Error::StreamNotFound(_)
            | Error::ConsumerNotFound { .. }
            | Error::Input(_)
            | Error::NoMigration(_)
            | Error::NotVerifiable(_)
            | Error::Name(_) => ErrorKind::Input,
            Error::Plan(p) => match p {
                PlanError::ServerTooOld { .. } => ErrorKind::Incompatible,
                // Raised for A's info from the server but also for B's planned
                // configuration, which holds the operator's --to-config values
                // (a setting of the wrong type): input until the two are told
                // apart.
                PlanError::BadServerJson { .. } => ErrorKind::Input,
                PlanError::SameStream(_)
                | PlanError::NoConsumer
                | PlanError::ForbiddenOverride { .. }
                | PlanError::UnknownSetting { .. }
                | PlanError::BadSettingValue { .. } => ErrorKind::Input,
            },
            Error::NewerJournal { .. } | Error::Reserved(_) => ErrorKind::Incompatible,
            Error::StreamChanged { .. }
            | Error::UnderWay { .. }
            | Error::Journal(_)
            | Error::Leased { .. }
            | Error::Stuck(_)
            | Error::FallingBehind { .. }
            | Error::NoInstances { .. }
            | Error::NoPublishers { .. } => ErrorKind::State,
            Error::Interrupted { .. } => ErrorKind::Interrupted,
            Error::RunStopped { cause, .. } => cause.kind(),
        }
    }

    pub fn api_code(&self) -> Option<ApiErrorCode> {
        match self {
            Error::Api { code, .. } => Some(*code),
            Error::RunStopped { cause, .. } => cause.api_code(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_state_is_not_input() {
        let changed = Error::StreamChanged { stream: "ORDERS".into() };
        assert_eq!(changed.kind(), ErrorKind::State);
        assert!(changed.to_string().starts_with("stream ORDERS changed while verify read it"));
        assert_eq!(Error::UnknownServerVersion.kind(), ErrorKind::Incompatible);
        let timeout = Error::Timeout { what: "stream info".into() };
        assert_eq!(timeout.kind(), ErrorKind::Server);
    }

    #[test]
    fn the_operators_input_is_input() {
        assert_eq!(Error::Input("--password needs --user".into()).kind(), ErrorKind::Input);
        assert_eq!(Error::StreamNotFound("NOPE".into()).kind(), ErrorKind::Input);
        assert_eq!(Error::Plan(PlanError::NoConsumer).kind(), ErrorKind::Input);
        let found = cutover_core::version::ServerVersion::parse("2.9.0").unwrap();
        let too_old = PlanError::ServerTooOld { found };
        assert_eq!(Error::Plan(too_old).kind(), ErrorKind::Incompatible);
    }
}
