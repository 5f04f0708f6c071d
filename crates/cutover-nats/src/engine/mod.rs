//! The cut-over engine: reads facts, asks the core for a plan, and carries it out.
//!
//! # Layout
//! - [`prepare`]: validation and plan building, read-only (`plan`, and `run`'s
//!   first step).
//! - [`progress`]: source catch-up measured by sequences, never by `lag`.
//! - [`run`]: the cut-over itself, journaled and resumable.
//! - [`rollback`]: undo before the commit point; list journals.
//! - [`events`]: what the engine reports while it works.
//! - `bridge`: `run --answer-publishes`: the runner answers publishes
//!   during the commit window.
//! - `dual`: strategy dual-write's steps (docs/protocol.md, *Dual-write*).
//! - `fence`: fence mode's handoff (docs/protocol.md), driven by `run`.
//! - `split`: across systems, publishers repointed by the operator: B
//!   takes the subjects beside A, the run waits for the go-ahead.
//! - [`guard`]: compensates what a runner that died left held.
//! - [`inplace`]: a stream's new settings under its own name, in two mirror hops.

pub mod across;
mod bridge;
mod dual;
pub mod events;
mod fence;
pub mod guard;
pub mod inplace;
pub mod prepare;
pub mod progress;
pub mod rollback;
pub mod run;
mod split;

pub use events::{Event, EventKind, Info, Progress, Sink, StepResult, Warning, WireEvent};
pub use inplace::{
    in_place_under_way, outline_in_place, plan_in_place, run_in_place, InPlaceRequest,
};
pub use prepare::{prepare_plan, PlanInputs};
pub use progress::{source_progress, SourceProgress};
pub use rollback::{forget, instances, leases, list, rollback, Forgotten};
pub use run::{run, RunOptions};
