//! The pure decision core of nats-cutover.
//!
//! Everything that decides *what* to do during a live cut-over lives here; nothing
//! here talks to a server, reads a file or prints. The NATS adapter feeds this crate
//! with what it read from the server (as the [`model`] types) and carries out what
//! it decides.
//!
//! # Layout
//! - [`model`]: the server's stream and consumer configuration/state, as far as
//!   decisions need them, parsed leniently from the JetStream API's JSON.
//! - [`version`]: server versions and the features each one brings.
//! - [`names`]: validation of stream and consumer names before anything is sent.
//! - [`subject`]: subject matching and mapping filters through subject transforms.
//! - [`source_header`]: the `Nats-Stream-Source` header, parsed conservatively.
//! - [`checkpoint`]: when a consumer is settled, its exact checkpoint, and the
//!   logarithmic search that translates it to the new stream's sequence.
//! - [`quiescence`]: the timer bound for the cases where no exact signal exists.
//! - [`compat`]: the compatibility report (ok / changed on purpose / unsafe).
//! - [`durability`]: the server's disk sync setting, judged for the plan.
//! - [`dual`]: strategy dual-write: the subject map, the publisher record and
//!   registration, where a new durable starts on B, the proof.
//! - [`plan`]: the plan document `plan` prints and `run` executes.
//! - [`journal`]: the migration journal, lease and route records.
//! - [`lag`]: a consumer's status over a window of reads (ok, draining,
//!   stalled, stopped), Burrow-style.
//! - [`verify`]: the streaming verification of a migration (sequence sets, not maps).
//! - [`audit`]: the audit record applications publish per processed message.
//! - [`bucket`]: KV buckets and object stores as streams, `nats kv add` options.
//! - [`desired`]: desired state for a fleet (`apply`): documents (stream JSON,
//!   NACK resources) as assets, their diff and the action each needs.

//! - [`api_error`]: JetStream API error codes as named constants.

pub mod api_error;
pub mod audit;
pub mod bucket;
pub mod catchup;
pub mod checkpoint;
pub mod compat;
pub mod desired;
pub mod dual;
pub mod durability;
pub mod journal;
pub mod lag;
pub mod model;
pub mod names;
pub mod plan;
pub mod quiescence;
pub mod source_header;
pub mod subject;
pub mod verify;
pub mod version;
pub mod watchers;
