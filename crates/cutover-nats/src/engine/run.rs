//! `run`: the cut-over, its steps in order. See ARCHITECTURE.md for the protocol.
//!
//! Every step re-reads the server and is idempotent, and the journal is saved
//! after each one, so `run` on an interrupted migration picks up where it was.
//! Waits are conditions polled with a deadline, never timers. The steps live
//! in [`super::steps`] (strategies `source` and `mirror`, modes drain and
//! fence), `super::dual` (strategy dual-write), `super::split` (publishers
//! repointed across systems) and `super::compensate` (a guard's run); this
//! file only takes the lease, loads or starts the journal, orders the steps
//! and says what state a failure left.

use super::ctx::{Ctx, RunOptions, FOREVER};
use super::events::{Event, EventKind, Info, Sink};
use super::steps::{catch_up, commit, consumers, create, handover, recheck, retire, undo};
use crate::api::Js;
use crate::error::{Error, Result};
use crate::journal::{now_ms, JournalStore, Lease};
use cutover_core::journal::{migration_id, ConsumerPhase, Journal, Phase, RunStep, Step};
use cutover_core::plan::Plan;
use std::sync::Arc;
use tokio::sync::{watch, Mutex};

/// Runs (or resumes) the migration the plan describes. Returns the final journal.
pub async fn run(
    js: &Js,
    plan: Plan,
    opts: &RunOptions,
    sink: &dyn Sink,
    shutdown: watch::Receiver<bool>,
) -> Result<Journal> {
    js.both_sides(&plan)?;
    let id = migration_id(&plan.from, &plan.to);
    // The journal as available as the stream that continues (B).
    let replicas = plan.b_config["num_replicas"].as_i64().unwrap_or(1);
    let store = JournalStore::open_replicated(js, replicas).await?;
    let mut lease = take_lease(&store, &plan.from, &id, opts).await?;
    let journal = match store.load(&id).await? {
        Some(j) if j.phase == Phase::Done => {
            lease.release(&store).await?;
            sink.emit(Event::new(&id, Step::Done, EventKind::Info(Info::AlreadyComplete)));
            return Ok(j);
        }
        Some(j) if j.phase != Phase::RolledBack => {
            let info = Info::Resuming {
                phase: j.phase.as_str().into(),
                in_progress: j.in_progress.clone(),
            };
            sink.emit(Event::new(&id, Step::Resume, EventKind::Info(info)));
            j
        }
        _ => {
            if !plan.safe {
                lease.release(&store).await?;
                return Err(Error::Unsafe(format!(
                    "the plan is unsafe: {}",
                    plan.unsafe_reasons()
                )));
            }
            new_journal(js, plan, opts).await?
        }
    };
    let lease = Arc::new(Mutex::new(lease));
    let fenced = js.fenced(Lease::fence(lease.clone(), store.clone()));
    let js = &fenced;
    let ctx = Ctx::new(js, store, lease, journal, (sink, shutdown), opts);
    ctx.save().await?;
    let result = lease_first(&ctx, drive(&ctx).await).await;
    let mut j = ctx.journal.lock().await.clone();
    if matches!(result, Err(Error::Leased { .. })) {
        // Another runner took over while this one was stopped: the journal
        // is its now, and so are the lease and every compensation.
        return result.map(|_| j);
    }
    let held = if result.is_err() { undo::still_held(&ctx).await } else { vec![] };
    let a_info = match result.is_err() {
        true => js.stream_info_opt(&j.from).await.ok(),
        false => None,
    };
    let a_gone = matches!(a_info, Some(None));
    // A without the subjects it had (a commit window or a hand-over freeze
    // whose giving back failed): a newcomer's run then said A "still serves
    // the publishers" while every publish got no responders.
    let a_unserving = matches!(&a_info, Some(Some((_, a))) if !j.a_subjects.is_empty() && a.config.subjects != j.a_subjects)
        && !j.phase.committed();
    if let Err(e) = &result {
        j.error = Some(e.to_string());
        if j.phase == Phase::Planned && matches!(js.stream_info_opt(&j.to).await, Ok(None)) {
            // Nothing was changed (B could not be created): the migration is
            // over; `run` starts afresh and `status` shows why it failed.
            j.phase = Phase::RolledBack;
            j.in_progress = None;
        }
        if ctx.hold_lease().await.is_ok() {
            let _ = ctx.store.save(&j).await;
        }
    }
    let _ = ctx.release_lease().await;
    result.map(|_| j.clone()).map_err(|e| stopped(e, &j, &held, (a_gone, a_unserving)))
}

/// A run's failure, unless its lease was lost meanwhile: a request sent by a
/// runner stopped between its lease check and the send (SIGSTOP, a VM pause)
/// reaches a server another runner has moved on, and its failure (seen in the
/// chaos loop: "stream name already in use", B created and changed
/// meanwhile) is the lease's, not the server's.
async fn lease_first(ctx: &Ctx<'_>, result: Result<()>) -> Result<()> {
    match result {
        Err(e) if !matches!(e, Error::Leased { .. }) => {
            // Asked of the bucket, not of the renewal's clock.
            match ctx.lease_still_ours().await {
                Err(lost @ Error::Leased { .. }) => Err(lost),
                _ => Err(e),
            }
        }
        r => r,
    }
}

/// The lease on `from`: taken at once from a runner known dead (a guard's
/// run), else when free or lapsed.
async fn take_lease(
    store: &JournalStore,
    from: &str,
    id: &str,
    opts: &RunOptions,
) -> Result<Lease> {
    match &opts.take_over {
        Some(dead) => Lease::take_over(store, from, id, opts.lease_ttl, dead).await,
        None => Lease::acquire(store, from, id, opts.lease_ttl).await,
    }
}

/// A new migration's journal: A's subjects and each consumer's pause as the
/// run found them (an operator's pause is kept: rollback restores it and the
/// new durable starts with it).
async fn new_journal(js: &Js, plan: Plan, opts: &RunOptions) -> Result<Journal> {
    let (_, a) = js.stream_info(&plan.from).await?;
    let mut paused = vec![];
    for c in &plan.consumers {
        let (_, ci) = js.consumer_info(&plan.from, &c.name).await?;
        paused.push((
            c.name.clone(),
            ci.paused.then(|| ci.config.pause_until.clone().unwrap_or(FOREVER.into())),
        ));
    }
    let mut j = Journal::new(plan, a.config.subjects.clone(), &paused, opts.delete_old, now_ms());
    j.keep_old_consumers = opts.keep_old_consumers && !opts.delete_old;
    Ok(j)
}

/// Says, with a run's error, what state the migration is left in (after the
/// compensating actions ran; `held`: consumers this run could not give back
/// their state) and the one command that continues or undoes it.
fn stopped(e: Error, j: &Journal, held: &[String], (a_gone, a_unserving): (bool, bool)) -> Error {
    if matches!(e, Error::Interrupted { .. } | Error::Leased { .. }) {
        return e; // they say it themselves
    }
    let id = &j.id;
    let names = |p: &dyn Fn(ConsumerPhase) -> bool| -> Vec<&str> {
        j.consumers.iter().filter(|c| p(c.phase)).map(|c| c.name.as_str()).collect()
    };
    let moved = names(&|p| p >= ConsumerPhase::Created);
    // Fence mode: the new durable serves new messages, the old one is paused
    // for good and finishing up to the fence (not "as it was").
    let fenced = names(&|p| p == ConsumerPhase::Fenced);
    let (state, next) = if j.publishers_split() {
        // Hop 1 of a same-name move: its resume ends with hop 1.
        let hop2 = match j.plan.in_place {
            Some(cutover_core::plan::InPlaceHop::Out) => format!(" hop 1; then the move's own command (`run --from {0} --to {0}`, run again) makes hop 2", j.from),
            _ => String::new(),
        };
        (
            format!("publishers may be split between {} and {}: both hold the subjects, each on its own side, and {} still sources {}; no rollback is exact from here", j.from, j.to, j.to, j.from),
            format!("once every publisher publishes on the target side, `nats-cutover run --resume {id} --proceed` seals {} and finishes{hop2}", j.from),
        )
    } else if j.phase == Phase::RolledBack {
        (
            format!("nothing was changed (migration {id} ended rolled back)"),
            "fix the cause and run again".to_string(),
        )
    } else if a_gone && !j.phase.committed() && j.phase != Phase::Planned {
        (
            format!("{} is gone (a memory stream does not survive a server restart): {} holds its messages and is their only copy", j.from, j.to),
            format!("`nats-cutover run --resume {id}` makes {} take {}'s subjects once every durable moved; do not roll back (it would delete {})", j.to, j.from, j.to),
        )
    } else if a_unserving {
        (
            format!("{} does not hold its subjects ({}): it released them for the commit and did not get them back, so publishers may have no stream", j.from, j.a_subjects.join(", ")),
            format!("`nats-cutover run --resume {id}` now: it gives them back (or finishes the commit); if it cannot reach {} or {}, give {} its subjects back by hand (`nats stream edit {} --subjects ...`)", j.from, j.to, j.from, j.from),
        )
    } else if j.phase.committed() {
        (format!("past the commit point: {} serves the publishers", j.to), j.way_on())
    } else {
        (
            format!(
                "{} still serves the publishers; {}",
                j.from,
                match (moved.is_empty(), fenced.is_empty()) {
                    (true, true) if !held.is_empty() => format!("still paused by this run (the server did not take its resume): {}; every other consumer is as it was", held.join(", ")),
                    (true, true) => "every consumer is as it was".to_string(),
                    // Dual-write's B holds copies only of what publishers
                    // wrote to both: a message written to A alone is for
                    // its old durable (never paused) to process.
                    (false, true) if j.plan.strategy == cutover_core::plan::Strategy::DualWrite => format!("moved to {} (route followers read the new durable there, which holds only what publishers wrote to both; {}'s old durable keeps serving its instances): {}", j.to, j.from, moved.join(", ")),
                    (false, true) => format!("moved to {} (reading {}'s messages through it, so only as fast as {} sources them: if it stopped sourcing they get nothing new; `nats-cutover inspect {}` shows whether it catches up): {}", j.to, j.from, j.to, j.to, moved.join(", ")),
                    (true, false) => format!("fenced (the new durable on {} serves new messages, the old one is paused for good): {}", j.to, fenced.join(", ")),
                    (false, false) => format!("moved to {}: {}; fenced (the new durable serves new messages, the old one is paused for good): {}", j.to, moved.join(", "), fenced.join(", ")),
                }
            ),
            j.way_on(),
        )
    };
    Error::RunStopped { cause: Box::new(e), state, next }
}

/// The steps in order, each skipped once the journal's phase is past it
/// (a resumed run starts where the last one stopped): the core's ladder,
/// `Phase::next_step`, which the model's runner follows too.
async fn drive(ctx: &Ctx<'_>) -> Result<()> {
    if ctx.journal.lock().await.plan.strategy == cutover_core::plan::Strategy::DualWrite {
        return super::dual::drive(ctx).await;
    }
    if ctx.opts.guard {
        return super::compensate::drive(ctx).await;
    }
    let phase = || async { ctx.journal.lock().await.phase };
    // A lost before the commit (a memory stream after a restart): B, its
    // only copy, takes the subjects if it can (commit::a_lost).
    let from = ctx.journal.lock().await.from.clone();
    let lost = (Phase::BReady..Phase::SubjectsMoved).contains(&phase().await)
        && ctx.js.stream_info_opt(&from).await?.is_none();
    if lost {
        commit::a_lost(ctx).await?;
    }
    // B lost before the commit, A there: B was a copy, made again.
    let to = ctx.journal.lock().await.to.clone();
    let b_lost = !lost
        && (Phase::BReady..=Phase::ConsumersMoved).contains(&phase().await)
        && ctx.js.stream_info_opt(&to).await?.is_none();
    if b_lost {
        recheck::b_lost(ctx).await?;
    }
    if phase().await < Phase::ConsumersMoved {
        super::fence::check_instances(ctx).await?;
    }
    if phase().await.due(RunStep::CreateB) {
        create::create_b(ctx).await?;
    }
    if phase().await.due(RunStep::CatchUp) {
        catch_up::catch_up(ctx).await?;
    }
    if phase().await.due(RunStep::MoveConsumers) {
        consumers::move_consumers(ctx).await?;
    }
    // Durables an application created on A meanwhile move too.
    if phase().await == Phase::ConsumersMoved && recheck::carry_appeared(ctx).await? > 0 {
        consumers::move_consumers(ctx).await?;
    }
    // Where the server drops a mirror's window: B turned into a stream
    // sourcing A with it, before the commit.
    let handover = {
        let j = ctx.journal.lock().await;
        j.plan.handover && j.handover.and_then(|h| h.done_ms).is_none()
    };
    if handover && phase().await.due(RunStep::Commit) {
        handover::hand_over(ctx).await?;
    }
    let split = ctx.journal.lock().await.plan.external.as_ref().is_some_and(|e| e.split_publishers);
    if split && phase().await.due(RunStep::Commit) {
        super::split::publishers(ctx).await?;
    }
    if phase().await.due(RunStep::Commit) {
        commit::move_publishers(ctx).await?;
    }
    if phase().await.due(RunStep::Seal) {
        retire::seal_a(ctx).await?;
    }
    if phase().await.due(RunStep::RemoveSource) {
        retire::remove_source(ctx).await?;
    }
    if phase().await.due(RunStep::Retire) {
        retire::retire(ctx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal() -> Journal {
        use cutover_core::plan::{build, PlanRequest, ServerFacts};
        use serde_json::json;
        let facts = ServerFacts {
            version: cutover_core::version::ServerVersion::new(2, 15, 1),
            a_raw: json!({"config": {"name": "A", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}, "state": {"messages": 1, "first_seq": 1, "last_seq": 1}}),
            b_raw: None,
            consumers_raw: vec![
                json!({"name": "c", "stream_name": "A", "config": {"durable_name": "c", "ack_policy": "explicit"}}),
            ],
            other_consumers: vec![],
            downstream: vec![],
            account: None,
            checks: Default::default(),
        };
        let plan = build(&PlanRequest::source("A", "B", &["c"]), &facts).unwrap();
        let mut j = Journal::new(plan, vec!["orders.>".into()], &[("c".into(), None)], false, 0);
        j.phase = Phase::ConsumersMoved;
        j
    }

    /// A newcomer's run whose giving back failed said A "still serves the
    /// publishers" while every publish got no responders.
    #[test]
    fn a_stop_with_a_not_holding_its_subjects_says_publishers_may_have_no_stream() {
        let j = journal();
        let e = || Error::Stuck("giving A its subjects back failed".into());
        let text = |e: Error| match e {
            Error::RunStopped { state, next, .. } => format!("{state} | {next}"),
            e => panic!("{e}"),
        };
        let unserving = text(stopped(e(), &j, &[], (false, true)));
        assert!(unserving.contains("A does not hold its subjects (orders.>)"), "{unserving}");
        assert!(unserving.contains("`nats-cutover run --resume A.B` now"), "{unserving}");
        assert!(!unserving.contains("still serves"), "{unserving}");
        let serving = text(stopped(e(), &j, &[], (false, false)));
        assert!(serving.contains("A still serves the publishers"), "{serving}");
    }
}
