//! The guard: what compensates a runner that died holding something.
//!
//! Two moments of a run hold what nothing else would give back before its
//! lease lapses and an operator runs `run --resume` or `rollback`
//! ([`Exposure`]): the commit window (A released its subjects, B has not
//! taken them: publishers have no stream) and drain mode's consumer moves
//! (old durables paused, for the drain or for good once settled, whose new
//! durables may not exist yet). A runner killed there (SIGKILL, a second
//! Ctrl-C, an OOM kill) used to leave publishers without a stream, or
//! consumers paused, until then. The CLI's `run` starts a guard process
//! beside itself (`nats-cutover` again, in its own process group, reading a
//! pipe the runner writes each exposure's start and end to): the pipe's end
//! is the runner's exit, whatever killed it. If an exposure was open, the
//! guard looks for the leases the runner held, takes each over at once (its
//! holder is known dead) and runs the compensating actions ([`super::run`]
//! with `guard`, which calls `super::compensate::drive`). A host that dies takes its guard
//! with it: then `run --resume` after the lease lapses, as before.

use super::ctx::RunOptions;
use super::events::NoSink;
use super::run::run;
use crate::api::Js;
use crate::error::Result;
use crate::journal::{holder_prefix, IfMissing, JournalStore, Lease};
use cutover_core::journal::Phase;
use std::time::Duration;

#[cfg(doc)]
use super::ctx::Exposure;

/// What the guard did for one migration of the dead runner.
pub struct Closed {
    pub id: String,
    /// What it did, what state remains and the one command that continues
    /// or undoes the migration.
    pub what: String,
}

/// After the runner with process id `pid` (on this host) died: with
/// `compensate` (it died holding something), runs the compensating actions
/// of each of its migrations that needs them; every other lease it still
/// held is released, so `run --resume` or `rollback` can run at once
/// instead of after the lease (the runner is known gone: the pipe only it
/// held has ended).
pub async fn close_windows(
    js: &Js,
    pid: u32,
    lease_ttl: Duration,
    compensate: bool,
) -> Result<Vec<Closed>> {
    let Some(store) = JournalStore::open(js, IfMissing::ReturnNone).await? else {
        return Ok(vec![]);
    };
    let prefix = holder_prefix(pid);
    let mut out = vec![];
    for l in store.leases().await?.into_iter().filter(|l| l.holder.starts_with(&prefix)) {
        let held = |p: Phase| p == Phase::SubjectsReleased || p < Phase::ConsumersMoved;
        let load = compensate && store.phase(&l.migration).await?.is_some_and(held);
        let j = match load {
            true => store.load(&l.migration).await?,
            false => None,
        };
        let Some(j) = j else {
            if l.live {
                let id = l.migration.clone();
                let mut lease =
                    Lease::take_over(&store, &l.stream, &id, lease_ttl, &l.holder).await?;
                lease.release(&store).await?;
                // What can be done from the journal's phase (a runner
                // killed past a commit was told "rollback undoes it").
                let way = match store.load(&id).await? {
                    Some(j) => j.way_on(),
                    None => format!("`nats-cutover run --resume {id}` continues and `nats-cutover rollback {id}` undoes it"),
                };
                let what = format!("its lease is released, so this works at once: {way}");
                out.push(Closed { id, what });
            }
            continue;
        };
        let opts = RunOptions {
            lease_ttl,
            guard: true,
            take_over: Some(l.holder.clone()),
            ..RunOptions::default()
        };
        let (_tx, rx) = tokio::sync::watch::channel(false);
        // Across systems each journal's own sides: its A on the source side,
        // or none for the second hop of a same-name move (its A, the
        // temporary stream, and its B are on the target side).
        let sides = match js.source_side() {
            Some(_) if j.plan.keeps_name_across => js.target_only(),
            Some(src) => js.target_only().across(src.clone(), &j.from),
            None => js.clone(),
        };
        let what = match run(&sides, j.plan.clone(), &opts, &NoSink, rx).await {
            Ok(j) => format!("nothing was left held (phase {})", j.phase.as_str()),
            Err(e) => e.to_string(),
        };
        out.push(Closed { id: l.migration, what });
    }
    Ok(out)
}
