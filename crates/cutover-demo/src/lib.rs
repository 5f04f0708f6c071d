//! The live workload of nats-cutover: what the demo, the benchmark and the
//! end-to-end tests run beside a cut-over to measure it. Not for applications
//! (they link `cutover-app`); built on it, as an application would be.
//!
//! # Layout
//! - [`load`]: a paced publisher and K workers following their consumer's
//!   route, recording every message they process.
//! - [`scenario`]: the live cut-over scenario (`live_cutover` → `Outcome`) the
//!   demo, the benchmark and the report share.
//! - [`procedures`]: the migration procedures side by side on that workload
//!   (the manual one, naive switches, the engine's), for the benchmarks.

pub mod load;
pub mod procedures;
pub mod scenario;
