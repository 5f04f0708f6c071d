//! The NATS adapter of nats-cutover: every byte to or from the server goes
//! through here, on async-nats.
//!
//! The pure core (`cutover-core`) decides; this crate reads what it needs
//! ([`api::Js`]), carries out the steps ([`engine`]), keeps the journal
//! ([`journal`]), and verifies ([`verify`]).
//!
//! # Layout
//! - [`connect`]: connection options (nats CLI names, contexts) to a client.
//! - [`api`]: the JetStream API as raw JSON requests, so no setting the client
//!   library does not model is ever dropped on an update; message gets.
//! - [`denied`]: permission violations the server reported, to name them.
//! - [`error`]: errors carrying what the operator needs to act.
//! - [`monitor`]: the server's monitoring endpoint (varz's sync setting).
//! - [`journal`]: the migration journal and lease in a KV bucket.
//! - [`engine`]: `run`, `status`, `rollback`: the cut-over, step by step.
//! - [`verify`]: structural verification of a finished migration;
//!   [`verify_dual`]: of a dual-write migration, by msg-id.
//! - `read`: a stream read in order (verify, the dual-write proof).
//! - [`observe`]: beside a run: the event recorder, the consumer sampler, and
//!   what a run leaves for its report.
//! - [`test_hooks`]: the crash hook, only with the `test-hooks` feature.

pub mod api;
pub mod connect;
pub mod denied;
pub mod engine;
pub mod error;
pub mod journal;
pub mod monitor;
pub mod no_responders;
pub mod observe;
mod read;
pub mod test_hooks;
pub mod verify;
pub mod verify_dual;

pub use api::Js;
pub use error::{Error, ErrorKind, Result};
