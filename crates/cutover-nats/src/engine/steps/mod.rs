//! The steps of a cut-over (strategies `source` and `mirror`), one module a
//! step or step family, each over the run's context ([`super::ctx::Ctx`]).
//! `super::run` orders them; fence mode (`super::fence`), dual-write
//! (`super::dual`), split publishers (`super::split`), the guard's run
//! (`super::compensate`) and rollback build on their public faces.
//!
//! # Layout
//! - [`create`]: B, sourcing or mirroring A (`b_ready`).
//! - [`catch_up`]: B holds what A held when the step began, its duplicate
//!   window raised once it holds A's older history (`caught_up`); the
//!   progress checks every wait for sourcing uses ([`catch_up::Stall`]).
//! - [`consumers`]: every consumer moved, a bounded number at once
//!   (`consumers_moved`); drain mode's move of one.
//! - [`drain`]: drain mode's checkpoint F: paused, settled, read again.
//! - [`translate`]: F in B's sequence space.
//! - [`durable`]: the new durable created at its start (with the checkpoint
//!   evidence a resumed run checks, [`durable::checkpoint_holds`]).
//! - [`recheck`]: what plan read, read again right before the step that
//!   relies on it (durables that appeared on A).
//! - [`routes`]: the route records applications follow.
//! - [`undo`]: a consumer given back its state (the compensating action).
//! - [`handover`]: where the server drops a mirror's window (a cluster), B
//!   turned from mirroring into sourcing A with it, in a short freeze, before
//!   the commit (which checks B kept A's sequences).
//! - [`commit`]: the commit window (A releases, B takes the subjects) and
//!   its undo (`subjects_moved`).
//! - [`subjects`]: A's subjects released and given back, B's last made A's
//!   (for `commit` and `handover`).
//! - [`retire`]: A sealed, B's source removed, the old durables retired
//!   (`sealed`, `source_removed`, `done`).
//! - [`watchers`]: in place, the applications' ordered consumers (KV
//!   watchers) read before hop 1 deletes A, created again by hop 2.

pub mod catch_up;
pub mod commit;
pub mod consumers;
pub mod create;
pub mod drain;
pub mod durable;
pub mod handover;
pub mod recheck;
pub mod retire;
pub mod routes;
pub mod subjects;
pub mod translate;
pub mod undo;
pub mod watchers;
