//! The cut-over engine: reads facts, asks the core for a plan, and carries it out.
//!
//! # Layout
//! - [`prepare`]: validation and plan building, read-only (`plan`, and `run`'s
//!   first step).
//! - [`run`]: the cut-over, journaled and resumable: takes the lease, loads
//!   or starts the journal and orders the steps.
//! - `ctx`: the run's context (`Ctx`: connection, journal, events, lease,
//!   shutdown) and [`RunOptions`], which every step works through.
//! - `steps`: one module a step or step family of strategies `source` and
//!   `mirror` (create, catch-up, consumers: drain, translate, the new
//!   durable, routes, undo; the commit window; seal and retire).
//! - `fence`: fence mode's handoff (docs/protocol.md), a consumer move.
//! - `dual`: strategy dual-write's steps (docs/protocol.md, *Dual-write*).
//! - `split`: across systems, publishers repointed by the operator: B
//!   takes the subjects beside A, the run waits for the go-ahead.
//! - `bridge`: `run --answer-publishes`: the runner answers publishes
//!   during the commit window.
//! - [`guard`]: a guard process's entry: takes a dead runner's leases over
//!   and runs `compensate` (what it left held) instead of the steps.
//! - [`rollback`]: undo before the commit point; list journals.
//! - [`inplace`]: a stream's new settings under its own name, in two mirror hops.
//! - [`across`]: moves across systems (the `external` block, the probes).
//! - [`progress`]: source catch-up measured by sequences, never by `lag`.
//! - [`events`]: what the engine reports while it works.

pub mod across;
mod bridge;
mod compensate;
mod ctx;
mod dual;
pub mod events;
mod fence;
pub mod guard;
pub mod inplace;
pub mod prepare;
pub mod progress;
pub mod rollback;
mod run;
mod split;
mod steps;

pub use ctx::{Exposure, ExposureHook, RunOptions, StepHook, DEFAULT_COPY_WINDOW};
pub use events::{Event, EventKind, Info, Progress, Sink, StepResult, Warning, WireEvent};
pub use inplace::{
    in_place_done, in_place_under_way, missing_mid_change, outline_in_place, plan_in_place,
    run_in_place, InPlaceRequest,
};
pub use prepare::{prepare_plan, PlanInputs};
pub use progress::{source_progress, SourceProgress};
pub use rollback::{forget, instances, leases, list, rollback, Forgotten};
pub use run::run;
pub use steps::subjects::released_subjects;
pub use steps::translate::translate_once;
