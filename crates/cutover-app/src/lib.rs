//! The application library of nats-cutover: what an application links to keep
//! working, unchanged, while its stream is replaced under it.
//!
//! - A [`publisher::Publisher`] publishes with a `Nats-Msg-Id` and retries with the
//!   same id while the subjects move from the old stream to the new one (a few
//!   milliseconds of "no responders"); the new stream's duplicate window makes the
//!   retry land once.
//! - A [`follow::Follower`] watches the route record the engine writes in KV once
//!   the consumer's new durable is positioned exactly, and [`worker::consume`]
//!   switches fetching to it: no redeploy, no duplicate, no gap. This record is
//!   the seed of the later zero-pause "fence" handoff.
//!
//! # Layout
//! - [`publisher`]: retrying publisher with stall statistics.
//! - [`dual`]: the publisher of strategy dual-write (writes A, both, or B as
//!   the publisher record says; registered).
//! - [`follow`]: the route follower.
//! - [`worker`]: a pull-consumer loop that follows the route.
//! - [`audit`]: one audit record per processed message, for `verify --audit`.
//! - [`fence`]: a pull-consumer loop that follows the application protocol
//!   (docs/protocol.md): drain and fence mode, double acks, registered.
//! - [`idempotency`]: an optional guard that claims each message id in KV
//!   (create, with a TTL), for redeliveries and versions side by side.
//! - [`instance`]: an instance's registration with heartbeats (`status`
//!   shows them).
//!
//! The live workload the demo, benchmark and tests run is `cutover-demo`, built
//! on this crate.

pub mod audit;
pub mod dual;
pub mod fence;
pub mod follow;
pub mod idempotency;
pub mod instance;
pub mod publisher;
pub mod worker;
