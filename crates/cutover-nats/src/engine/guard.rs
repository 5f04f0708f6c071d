//! The guard: what closes a commit window whose runner died in it.
//!
//! Between A releasing its subjects and B taking them (milliseconds), no
//! stream holds the publishers' subjects. A runner killed there (SIGKILL, a
//! second Ctrl-C, an OOM kill) used to leave publishers without a stream
//! until its lease lapsed and an operator ran `run --resume`. The CLI's `run`
//! starts a guard process beside itself (`nats-cutover` again, in its own
//! process group, reading a pipe only the runner writes to): the pipe's end
//! is the runner's exit, whatever killed it. The guard then looks for
//! leases the runner held whose migration is inside the window, takes each
//! over at once (the holder is known dead) and runs its compensating action
//! ([`super::run`] with `close_window_only`). A host that dies takes its
//! guard with it: then `run --resume` after the lease lapses, as before.

use super::events::NoSink;
use super::run::{run, RunOptions};
use crate::api::Js;
use crate::error::Result;
use crate::journal::{holder_prefix, IfMissing, JournalStore};
use cutover_core::journal::{Journal, Phase};
use std::time::Duration;

/// What the guard found and did for one migration of the dead runner.
pub struct Closed {
    pub id: String,
    /// The run's outcome: its error says what state remains and the one
    /// command that continues or undoes it.
    pub result: Result<Journal>,
}

/// Closes every commit window the runner with process id `pid` (on this
/// host) left open; an empty list when it left none (its normal exit).
pub async fn close_windows(js: &Js, pid: u32, lease_ttl: Duration) -> Result<Vec<Closed>> {
    let Some(store) = JournalStore::open(js, IfMissing::ReturnNone).await? else {
        return Ok(vec![]);
    };
    let prefix = holder_prefix(pid);
    let mut out = vec![];
    for l in store.leases().await?.into_iter().filter(|l| l.holder.starts_with(&prefix)) {
        if store.phase(&l.migration).await? != Some(Phase::SubjectsReleased) {
            continue;
        }
        let Some(j) = store.load(&l.migration).await? else { continue };
        let opts = RunOptions {
            lease_ttl,
            close_window_only: true,
            take_over: Some(l.holder.clone()),
            ..RunOptions::default()
        };
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let result = run(js, j.plan.clone(), &opts, &NoSink, rx).await;
        out.push(Closed { id: l.migration, result });
    }
    Ok(out)
}
