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
//! with `guard`, which calls [`drive`]). A host that dies takes its guard
//! with it: then `run --resume` after the lease lapses, as before.

use super::events::NoSink;
use super::run::{close_window, publish_moved_route, run, undo_consumer, Ctx, RunOptions};
use crate::api::Js;
use crate::error::{Error, Result};
use crate::journal::{holder_prefix, IfMissing, JournalStore, Lease};
use cutover_core::journal::{ConsumerPhase, Phase};
use cutover_core::plan::Mode;
use std::time::Duration;

#[cfg(doc)]
use super::run::Exposure;

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
                let what = format!("its lease is released: `nats-cutover run --resume {id}` continues and `nats-cutover rollback {id}` undoes it, at once");
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
        let what = match run(js, j.plan.clone(), &opts, &NoSink, rx).await {
            Ok(j) => format!("nothing was left held (phase {})", j.phase.as_str()),
            Err(e) => e.to_string(),
        };
        out.push(Closed { id: l.migration, what });
    }
    Ok(out)
}

/// A guard's run: compensates what the dead runner left held, then stops
/// (with an error saying what it did, what state remains and the command
/// that continues or undoes it).
pub(super) async fn drive(ctx: &Ctx<'_>) -> Result<()> {
    let (phase, mode, split) = {
        let j = ctx.journal.lock().await;
        let split = j.plan.external.as_ref().is_some_and(|e| e.split_publishers);
        (j.phase, j.plan.mode, split)
    };
    // (Split publishers release A after B holds the subjects: that window
    // is not marked, and its release is undone by the run itself.)
    if phase == Phase::SubjectsReleased && !split {
        return close_window(ctx).await;
    }
    if phase < Phase::ConsumersMoved && mode == Mode::Drain {
        return release_consumers(ctx).await;
    }
    Ok(())
}

/// Drain mode, runner dead while moving consumers: an old durable it paused
/// and whose new durable does not exist gets its state back (running, or
/// the operator's pause: the compensating action of a failed drain); one
/// whose new durable exists is journaled as moved and its route published,
/// so its applications follow it. Nothing is left paused.
async fn release_consumers(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, consumers) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone(), j.consumers.clone())
    };
    let (mut given_back, mut routed) = (vec![], vec![]);
    for c in consumers {
        let on_b = match c.phase {
            ConsumerPhase::Creating | ConsumerPhase::Created => {
                ctx.js.consumer_info_opt(&to, &c.name).await?.is_some()
            }
            _ => false,
        };
        match c.phase {
            ConsumerPhase::Waiting | ConsumerPhase::Settled | ConsumerPhase::Creating if !on_b => {
                let held = match ctx.js.consumer_info_opt(&from, &c.name).await? {
                    Some((_, ci)) => ci.paused != c.was_paused || c.phase != ConsumerPhase::Waiting,
                    None => false,
                };
                if held {
                    undo_consumer(ctx, &from, &c.name, &c).await?;
                    given_back.push(c.name);
                }
            }
            ConsumerPhase::Created if ctx.store.route(&from, &c.name).await?.is_some() => {}
            ConsumerPhase::Creating | ConsumerPhase::Created => {
                ctx.journal_consumer(&c.name, |p| p.phase = ConsumerPhase::Created).await?;
                publish_moved_route(ctx, &from, &to, &c).await?;
                routed.push(c.name);
            }
            _ => {}
        }
    }
    let mut did = vec![];
    if !given_back.is_empty() {
        did.push(format!(
            "gave back consumer(s) {} (not moved: running again on {from})",
            given_back.join(", ")
        ));
    }
    if !routed.is_empty() {
        did.push(format!(
            "published the route of consumer(s) {} (moved: their new durable on {to} serves)",
            routed.join(", ")
        ));
    }
    if did.is_empty() {
        return Ok(());
    }
    Err(Error::Stuck(format!(
        "its runner died while moving consumers; the guard {}",
        did.join(" and ")
    )))
}
