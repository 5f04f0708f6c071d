//! The cut-over engine: reads facts, asks the core for a plan, and carries it out.
//!
//! # Layout
//! - [`prepare`]: validation and plan building, read-only (`plan`, and `run`'s
//!   first step).
//! - [`progress`]: source catch-up measured by sequences, never by `lag`.

pub mod prepare;
pub mod progress;

pub use prepare::{prepare_plan, PlanInputs};
pub use progress::{source_progress, SourceProgress};
