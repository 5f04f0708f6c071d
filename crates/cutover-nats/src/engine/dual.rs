//! Strategy dual-write (docs/protocol.md, *Dual-write*): B is created with
//! subjects of its own; the runner tells publishers through the publisher
//! record `pub.<FROM>` to write each message to both streams (same
//! `Nats-Msg-Id`), waits for every live registered publisher to acknowledge,
//! proves that B holds every id A received after that point, starts each
//! consumer's new durable on B where the old one's processed ids end (by
//! msg-id), tells publishers to write B only (the commit point), seals A and
//! retires the old durables. Consumers run old and new side by side in
//! between, guarded by msg-id (`cutover_app::idempotency`).
//!
//! Phases: `b_ready` (B created), `caught_up` (dual-writing acknowledged and
//! proven), `consumers_moved`, `subjects_moved` (journaled before the record
//! says `b`: the commit), `sealed` (publishers acknowledged `b`, A sealed),
//! `done`.

use super::ctx::Ctx;
use super::events::{EventKind, Progress, StepResult, Warning};
use super::steps::durable::create_durable;
use crate::api::Js;
use crate::error::{Error, Result};
use crate::journal::{now_ms, JournalStore};
use async_nats::jetstream::kv;
use cutover_core::dual::{
    missing_in_b, publisher_instance_prefix, publisher_key, start_after, PublisherRecord,
    PublisherRegistration, SubjectMap, Writes, WritesAck, PUBLISHER_VERSION,
};
use cutover_core::journal::{ConsumerPhase, DualProgress, Phase, Route, Step, BUCKET};
use cutover_core::plan::ConsumerPlan;
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, Instant};

pub(super) async fn drive(ctx: &Ctx<'_>) -> Result<()> {
    let phase = || async { ctx.journal.lock().await.phase };
    if phase().await < Phase::CaughtUp {
        check_publishers(ctx).await?;
    }
    if phase().await < Phase::BReady {
        create_b(ctx).await?;
    }
    if phase().await < Phase::CaughtUp {
        start_dual(ctx).await?;
    }
    if phase().await < Phase::ConsumersMoved {
        move_consumers(ctx).await?;
    }
    if phase().await < Phase::SubjectsMoved {
        side_by_side(ctx).await?;
    }
    if phase().await < Phase::Sealed {
        stop_writes_to_a(ctx).await?;
    }
    if phase().await < Phase::Done {
        retire(ctx).await?;
    }
    Ok(())
}

fn step_dual() -> Step {
    Step::Other("dual_write".into())
}

/// A publisher registration as the runner sees it.
pub(crate) struct Publisher {
    pub record: PublisherRegistration,
    pub live: bool,
}

/// Every publisher registered for `from` (`pubi.<FROM>.*`), live or not
/// (the entry's server timestamp against its `ttl_ms`, as for instances).
pub(crate) async fn publishers(
    js: &Js,
    store: &JournalStore,
    from: &str,
) -> Result<Vec<Publisher>> {
    let kv_prefix = format!("$KV.{BUCKET}.");
    let filter = format!("{kv_prefix}{}>", publisher_instance_prefix(from));
    let info = js
        .api(
            "list the publishers",
            &format!("STREAM.INFO.KV_{BUCKET}"),
            &json!({ "subjects_filter": filter }),
        )
        .await?;
    let subjects = info["state"]["subjects"].as_object().cloned().unwrap_or_default();
    let mut out = vec![];
    for subject in subjects.keys() {
        let Some(k) = subject.strip_prefix(&kv_prefix) else { continue };
        let entry = store.entry(k, "cannot read a publisher").await?;
        let Some(en) = entry.filter(|e| e.operation == kv::Operation::Put) else { continue };
        let Ok(record) = serde_json::from_slice::<PublisherRegistration>(&en.value) else {
            continue;
        };
        let written_ms = (en.created.unix_timestamp_nanos() / 1_000_000) as u64;
        let live = now_ms().saturating_sub(written_ms) < record.ttl_ms;
        out.push(Publisher { record, live });
    }
    out.sort_by(|a, b| a.record.instance.cmp(&b.record.instance));
    Ok(out)
}

fn kv_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Journal(format!("cannot {what} in KV bucket {BUCKET}: {e}"))
}

/// Before any write: at least one live publisher follows the protocol.
async fn check_publishers(ctx: &Ctx<'_>) -> Result<()> {
    let from = ctx.journal.lock().await.from.clone();
    if !publishers(ctx.js, &ctx.store, &from).await?.iter().any(|p| p.live) {
        return Err(Error::NoPublishers { stream: from });
    }
    Ok(())
}

async fn create_b(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::CreateB).await?;
    let (to, cfg, journaled, subjects) = {
        let j = ctx.journal.lock().await;
        (j.to.clone(), j.plan.b_config.clone(), j.created_b, j.plan.b_final_subjects.clone())
    };
    match ctx.js.stream_info_opt(&to).await? {
        Some((_, b)) if journaled && b.config.subjects == subjects => {}
        Some(_) => {
            return Err(Error::Unsafe(format!("stream {to} exists but was not created by this migration with subjects {subjects:?}; delete it or pick another --to")));
        }
        None => {
            // Intent first: rollback deletes B if it exists.
            ctx.journal.lock().await.created_b = true;
            ctx.save().await?;
            ctx.js.stream_create(&cfg).await?;
        }
    }
    ctx.done(Step::CreateB, t, Some(Phase::BReady), StepResult::CreateB { created: true }).await
}

/// Writes the publisher record with `writes`.
async fn put_record(ctx: &Ctx<'_>, writes: Writes) -> Result<()> {
    let rec = {
        let j = ctx.journal.lock().await;
        let map =
            SubjectMap::new(&j.a_subjects, &j.plan.b_final_subjects).map_err(Error::Unsafe)?;
        PublisherRecord {
            version: PUBLISHER_VERSION,
            migration: j.id.clone(),
            from: j.from.clone(),
            to: j.to.clone(),
            writes,
            subjects: map.pairs(),
            updated_ms: now_ms(),
        }
    };
    ctx.hold_lease().await?;
    let v = serde_json::to_vec(&rec).expect("publisher record serializes");
    ctx.store
        .kv()
        .put(publisher_key(&rec.from), v.into())
        .await
        .map_err(|e| kv_err("write the publisher record", e))?;
    Ok(())
}

/// Removes the publisher record: publishers write A only again.
pub(super) async fn delete_record(store: &JournalStore, from: &str) -> Result<()> {
    store
        .kv()
        .delete(publisher_key(from))
        .await
        .map_err(|e| kv_err("delete the publisher record", e))?;
    Ok(())
}

/// The live publishers of `from` whose acknowledgement is not `wanted`
/// (`None`: writing A only, no publisher record).
pub(super) async fn unacknowledged(
    js: &Js,
    store: &JournalStore,
    from: &str,
    wanted: Option<&WritesAck>,
) -> Result<Vec<String>> {
    Ok(publishers(js, store, from)
        .await?
        .into_iter()
        .filter(|p| p.live && p.record.ack.as_ref() != wanted)
        .map(|p| p.record.instance)
        .collect())
}

/// Waits until every live publisher acknowledged `writes` of this migration;
/// returns the ones still missing at `deadline` (empty: all did).
async fn await_acks(ctx: &Ctx<'_>, writes: Writes, deadline: Instant) -> Result<Vec<String>> {
    let (from, id) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.id.clone())
    };
    let wanted = WritesAck { migration: id, writes };
    loop {
        let missing = unacknowledged(ctx.js, &ctx.store, &from, Some(&wanted)).await?;
        if missing.is_empty() || Instant::now() > deadline {
            return Ok(missing);
        }
        ctx.tick(false).await?;
        tokio::time::sleep(ctx.opts.poll.max(Duration::from_millis(10))).await;
    }
}

/// Dual-writing on, acknowledged, and proven: the dual point P journaled.
async fn start_dual(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(step_dual()).await?;
    let (from, to, dual) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone(), j.dual.clone())
    };
    if dual.is_none() {
        // Before the record: every message written to both lands in A after it.
        let (_, a) = ctx.js.stream_info(&from).await?;
        ctx.journal.lock().await.dual =
            Some(DualProgress { before: a.state.last_seq, ..Default::default() });
        ctx.save().await?;
    }
    put_record(ctx, Writes::Dual).await?;
    let missing =
        await_acks(ctx, Writes::Dual, Instant::now() + ctx.opts.fence_ack_timeout).await?;
    if !missing.is_empty() {
        undo_dual(ctx, &from).await?;
        return Err(Error::Stuck(format!("publisher(s) {} of {from} did not acknowledge dual-writing within {:?}; the publisher record was removed again (publishers write {from} only)", missing.join(", "), ctx.opts.fence_ack_timeout)));
    }
    let point = match dual.and_then(|d| d.point) {
        Some(p) => p,
        None => {
            let (_, a) = ctx.js.stream_info(&from).await?;
            let p = a.state.last_seq;
            ctx.journal.lock().await.dual.as_mut().expect("journaled").point = Some(p);
            ctx.save().await?;
            p
        }
    };
    let proved = match prove(ctx, &from, &to, point).await {
        Ok(x) => x,
        Err(e) => {
            undo_dual(ctx, &from).await?;
            return Err(match e {
                Error::Unsafe(m) => Error::Unsafe(format!("{m}; the publisher record was removed again (publishers write {from} only): stop that publisher or make it follow the record, then run again")),
                e => e,
            });
        }
    };
    ctx.journal.lock().await.dual.as_mut().expect("journaled").proved_to = Some(proved);
    ctx.done(step_dual(), t, Some(Phase::CaughtUp), StepResult::CatchUp { origin_seq: point }).await
}

/// The compensation of `start_dual`: publishers back to A only, and the
/// dual point forgotten (messages written to A alone from now on are not in B).
async fn undo_dual(ctx: &Ctx<'_>, from: &str) -> Result<()> {
    ctx.hold_lease().await?;
    delete_record(&ctx.store, from).await?;
    if let Some(d) = ctx.journal.lock().await.dual.as_mut() {
        d.point = None;
        d.proved_to = None;
    }
    ctx.save().await
}

/// Reads `(seq, msg-id)` of `stream` from `first` to `last` (headers only).
async fn ids(js: &Js, stream: &str, first: u64, last: u64) -> Result<Vec<(u64, Option<String>)>> {
    let mut out = vec![];
    crate::read::read(js, stream, first, last, &[], true, Duration::from_secs(10), |m, seq, _| {
        let id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).map(|v| v.to_string());
        out.push((seq, id));
        true
    })
    .await?;
    Ok(out)
}

/// Proves that B holds the msg-id of every message A stored after `point`
/// (up to A's last sequence now), waiting (bounded) for copies in flight.
/// Returns the last A sequence proven.
async fn prove(ctx: &Ctx<'_>, from: &str, to: &str, point: u64) -> Result<u64> {
    let (_, a) = ctx.js.stream_info(from).await?;
    let last = a.state.last_seq;
    let a_ids = ids(ctx.js, from, point + 1, last).await?;
    let deadline = Instant::now() + ctx.opts.fence_ack_timeout;
    let (mut b_ids, mut b_read) = (HashSet::new(), 0u64);
    loop {
        let (_, b) = ctx.js.stream_info(to).await?;
        if b.state.last_seq > b_read {
            for (_, id) in ids(ctx.js, to, b_read + 1, b.state.last_seq).await? {
                b_ids.extend(id);
            }
            b_read = b.state.last_seq;
        }
        let missing = missing_in_b(a_ids.iter().cloned(), &b_ids);
        if missing.is_empty() {
            return Ok(last);
        }
        if Instant::now() > deadline {
            return Err(Error::Unsafe(format!("{} of {from}'s messages after the dual point {point} have no copy in {to} (first sequences: {:?}): some publisher of {from} does not follow docs/protocol.md (it writes {from} only)", missing.len(), &missing[..missing.len().min(5)])));
        }
        ctx.tick(true).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn move_consumers(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::MoveConsumers).await?;
    let todo: Vec<ConsumerPlan> = {
        let j = ctx.journal.lock().await;
        let waiting = |c: &ConsumerPlan| {
            j.consumers.iter().any(|p| p.name == c.name && p.phase < ConsumerPhase::Created)
        };
        j.plan.consumers.iter().filter(|c| waiting(c)).cloned().collect()
    };
    for cp in &todo {
        move_consumer(ctx, cp).await?;
    }
    // A runner killed between journaling a consumer created and writing its
    // route: every moved consumer's route again.
    let (from, to, moved) = {
        let j = ctx.journal.lock().await;
        let moved: Vec<_> =
            j.consumers.iter().filter(|c| c.phase >= ConsumerPhase::Created).cloned().collect();
        (j.from.clone(), j.to.clone(), moved)
    };
    for c in moved {
        let (f, start) = (c.checkpoint.unwrap_or(0), c.b_start.unwrap_or(0));
        ctx.hold_lease().await?;
        ctx.store
            .put_route(&from, &c.name, &Route::moved(&from, &to, &c.name, &ctx.id, f, start))
            .await?;
    }
    let result = StepResult::MoveConsumers { moved: todo.len() };
    ctx.done(Step::MoveConsumers, t, Some(Phase::ConsumersMoved), result).await
}

/// One consumer: F = what the old consumer processed (at or past the dual
/// point), the new durable on B at the first message whose id is not among
/// A's up to F, and the route. The old consumer keeps running.
async fn move_consumer(ctx: &Ctx<'_>, cp: &ConsumerPlan) -> Result<()> {
    let (from, to, prior) = ctx.consumer_state(&cp.name).await;
    let name = cp.name.as_str();
    let started = Instant::now();
    let (f, start) = match (prior.phase, prior.checkpoint, prior.b_start) {
        (ConsumerPhase::Creating, Some(f), Some(s)) => (f, s),
        _ => {
            let f = processed_to(ctx, &from, name).await?;
            let s = map_start(ctx, &from, &to, f).await?;
            ctx.journal_consumer(name, |p| {
                p.checkpoint = Some(f);
                p.b_filters = cp.b_filters.clone();
            })
            .await?;
            (f, s)
        }
    };
    let mut cfg = cp.b_config.clone();
    cfg["opt_start_seq"] = json!(start);
    if let Err(e) = create_durable(ctx, &to, name, &cfg, start).await {
        // The old consumer was never paused: only the journal goes back.
        if !matches!(e, Error::Stuck(_)) {
            ctx.journal_consumer(name, |p| {
                p.phase = ConsumerPhase::Waiting;
                p.b_start = None;
            })
            .await?;
        }
        return Err(e);
    }
    ctx.journal_consumer(name, |p| {
        p.phase = ConsumerPhase::Created;
        p.b_start = Some(start);
        p.translate_gets = Some(0);
    })
    .await?;
    ctx.hold_lease().await?;
    ctx.store.put_route(&from, name, &Route::moved(&from, &to, name, &ctx.id, f, start)).await?;
    let moved = Progress::Moved {
        checkpoint: f,
        b_start: start,
        translate_gets: 0,
        gap_ms: started.elapsed().as_secs_f64() * 1000.0,
        longest_pause_ms: None,
    };
    ctx.emit(Step::Consumer(name.into()), EventKind::Progress(moved));
    if let Some(h) = &ctx.opts.after_step {
        h(&format!("consumer_created:{name}"));
    }
    Ok(())
}

/// The old consumer's processed prefix F once it reached the dual point P:
/// its ack floor, or its delivered sequence when nothing is ack-pending
/// (and P itself when it has nothing pending at all: its filter selects
/// nothing more). Every message of A it has not processed is then after P,
/// so in B.
async fn processed_to(ctx: &Ctx<'_>, from: &str, name: &str) -> Result<u64> {
    let point = ctx.journal.lock().await.dual.as_ref().and_then(|d| d.point).unwrap_or(0);
    let deadline = Instant::now() + ctx.opts.settle_timeout.unwrap_or(Duration::from_secs(60));
    let mut last_emit = Instant::now();
    loop {
        let (_, ci) = ctx.js.consumer_info(from, name).await?;
        let mut f = ci.ack_floor.stream_seq;
        if ci.num_ack_pending == 0 {
            f = f.max(ci.delivered.stream_seq);
            if ci.num_pending == 0 {
                f = f.max(point);
            }
        }
        if f >= point {
            return Ok(f);
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!("consumer {from}/{name} has not processed {from}'s messages up to the dual point {point} (ack floor {}): its applications are stopped or slow; nothing was changed for it", ci.ack_floor.stream_seq)));
        }
        if last_emit.elapsed() > Duration::from_millis(250) {
            let p = Progress::Draining {
                ack_pending: ci.num_ack_pending,
                delivered: ci.delivered.stream_seq,
                ack_floor: ci.ack_floor.stream_seq,
            };
            ctx.emit(Step::Consumer(name.into()), EventKind::Progress(p));
            last_emit = Instant::now();
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll.max(Duration::from_millis(5))).await;
    }
}

/// The first B sequence whose msg-id is not one of A's messages up to `f`
/// (only those after `before` can be in B); after B's last when every id B
/// holds was processed.
async fn map_start(ctx: &Ctx<'_>, from: &str, to: &str, f: u64) -> Result<u64> {
    let before = ctx.journal.lock().await.dual.as_ref().map(|d| d.before).unwrap_or(0);
    let processed: HashSet<String> =
        ids(ctx.js, from, before + 1, f).await?.into_iter().filter_map(|(_, id)| id).collect();
    let (_, b) = ctx.js.stream_info(to).await?;
    let b_ids = ids(ctx.js, to, 1, b.state.last_seq).await?;
    let b_ids = b_ids.into_iter().map(|(s, id)| (s, id.unwrap_or_default()));
    Ok(start_after(&processed, b_ids).unwrap_or(b.state.last_seq + 1))
}

/// The operator's side-by-side period (`--side-by-side`): publishers write
/// both streams, old and new consumers run; interruptible.
async fn side_by_side(ctx: &Ctx<'_>) -> Result<()> {
    let until = Instant::now() + ctx.opts.side_by_side;
    while Instant::now() < until {
        ctx.tick(true).await?;
        tokio::time::sleep(
            Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())),
        )
        .await;
    }
    Ok(())
}

/// Waits until `from`/`name` has nothing pending or ack-pending, or its ack
/// floor stood still for a second (nobody fetches it any more).
async fn finish_tail(ctx: &Ctx<'_>, from: &str, name: &str) -> Result<()> {
    let (mut floor, mut moved_at) = (0u64, Instant::now());
    loop {
        let Some((_, ci)) = ctx.js.consumer_info_opt(from, name).await? else { return Ok(()) };
        if ci.num_pending == 0 && ci.num_ack_pending == 0 {
            return Ok(());
        }
        if ci.ack_floor.stream_seq != floor {
            (floor, moved_at) = (ci.ack_floor.stream_seq, Instant::now());
        } else if moved_at.elapsed() > Duration::from_secs(1) {
            let left = ci.num_pending + ci.num_ack_pending;
            let what = format!("waiting for {from}/{name} to finish {from}'s tail: nobody fetches it; its {left} message(s) left are in B after the new durable's start (processed there)");
            ctx.emit(Step::Retire, EventKind::Warning(Warning::Skipped { what }));
            return Ok(());
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll.max(Duration::from_millis(5))).await;
    }
}

/// The commit point: journaled first, then the record says `b`; once every
/// live publisher acknowledged it, A is sealed (a stray publish to A fails
/// instead of going unread; acks on the old consumer go on: consumer.go has
/// no sealed check, stream.go processJetStreamMsg refuses only new messages).
async fn stop_writes_to_a(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::MovePublishers).await?;
    if ctx.journal.lock().await.phase < Phase::SubjectsMoved {
        prove_again(ctx).await?;
    }
    let from = {
        let mut j = ctx.journal.lock().await;
        j.phase = j.phase.max(Phase::SubjectsMoved);
        j.from.clone()
    };
    ctx.save().await?;
    put_record(ctx, Writes::B).await?;
    let missing = await_acks(ctx, Writes::B, Instant::now() + ctx.opts.fence_ack_timeout).await?;
    let (a_raw, a) = ctx.js.stream_info(&from).await?;
    if missing.is_empty() {
        if !a.config.sealed {
            let mut cfg = a_raw["config"].clone();
            cfg["sealed"] = json!(true);
            ctx.js.stream_update(&cfg).await?;
        }
    } else {
        let what = format!("sealing {from}: publisher(s) {} did not acknowledge writing to B only and still write both streams (their messages are in B)", missing.join(", "));
        ctx.emit(Step::MovePublishers, EventKind::Warning(Warning::Skipped { what }));
    }
    let a_final_seq = a.state.last_seq;
    ctx.journal.lock().await.a_final_seq = Some(a_final_seq);
    let result =
        StepResult::MovePublishers { a_final_seq, no_stream_window_ms: None, reconciled: false };
    ctx.done(Step::MovePublishers, t, Some(Phase::Sealed), result).await
}

/// Before the commit, the proof again over what A received since the last
/// one: B must hold every id A received while both were written (a
/// publisher that does not follow the protocol may have written A alone
/// meanwhile). Such messages will never be in B: the run stops before the
/// commit, and only a rollback is left. Until then route followers would
/// read only B and miss them (a newcomer's did, for 20 s): their routes are
/// removed first, so they go back to A's old durables, which never stopped
/// and hold those messages (the idempotency guard skips what they already
/// processed on B).
async fn prove_again(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, id, since) = {
        let j = ctx.journal.lock().await;
        let d = j.dual.as_ref();
        let since = d.and_then(|d| d.proved_to.or(d.point)).unwrap_or(0);
        (j.from.clone(), j.to.clone(), j.id.clone(), since)
    };
    let proved = match prove(ctx, &from, &to, since).await {
        Ok(p) => p,
        Err(Error::Unsafe(m)) => {
            let back = routes_back(ctx, &from).await?;
            return Err(Error::Unsafe(format!("{m}; those messages cannot reach {to} any more, so the routes of {} were removed: route followers read {from}'s old durables again, which never stopped and hold them (nothing was lost); undo with `nats-cutover rollback {id}`", back.join(", "))));
        }
        Err(e) => return Err(e),
    };
    ctx.journal.lock().await.dual.as_mut().expect("journaled").proved_to = Some(proved);
    ctx.save().await
}

/// Removes the route of every moved consumer (the compensation of a proof
/// that failed after the consumers moved); returns their names.
async fn routes_back(ctx: &Ctx<'_>, from: &str) -> Result<Vec<String>> {
    let moved: Vec<String> = {
        let j = ctx.journal.lock().await;
        j.consumers
            .iter()
            .filter(|c| c.phase >= ConsumerPhase::Created)
            .map(|c| c.name.clone())
            .collect()
    };
    for name in &moved {
        ctx.hold_lease().await?;
        ctx.store.delete_route(from, name).await?;
    }
    Ok(moved)
}

/// The proof once more, over what A stored since the last one: `false`
/// (warned, naming the sequences) when some of it has no copy in B.
async fn last_proof(ctx: &Ctx<'_>) -> Result<bool> {
    let (from, to, since) = {
        let j = ctx.journal.lock().await;
        let d = j.dual.as_ref();
        (j.from.clone(), j.to.clone(), d.and_then(|d| d.proved_to.or(d.point)).unwrap_or(0))
    };
    match prove(ctx, &from, &to, since).await {
        Ok(proved) => {
            ctx.journal.lock().await.dual.as_mut().expect("journaled").proved_to = Some(proved);
            Ok(true)
        }
        Err(Error::Unsafe(m)) => {
            let what = format!("deleting the old durables of {from}: {m}; they are kept, the only readers of those messages (process them, then delete the durables)");
            ctx.emit(Step::Retire, EventKind::Warning(Warning::Skipped { what }));
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Lets each old consumer finish A's tail while it makes progress, then
/// deletes it. Not a correctness wait: what it leaves is after its
/// checkpoint, so in B after the new durable's start (processed there), and
/// applications that followed the route to B leave it with no one fetching.
async fn retire(ctx: &Ctx<'_>) -> Result<()> {
    let (from, names, delete_old, keep) = {
        let j = ctx.journal.lock().await;
        let names: Vec<String> = j
            .consumers
            .iter()
            .filter(|c| c.phase < ConsumerPhase::Retired)
            .map(|c| c.name.clone())
            .collect();
        (j.from.clone(), names, j.delete_old, j.keep_old_consumers)
    };
    let t = ctx.begin(Step::Retire).await?;
    // What A stored after the last proof (a publisher outside the protocol,
    // or one that never acknowledged `b`, so A stayed unsealed) is in A only:
    // its old durables are its only readers and are kept (a reviewer found
    // them deleted with such messages unread).
    let stray = !last_proof(ctx).await?;
    for n in &names {
        finish_tail(ctx, &from, n).await?;
        if !keep && !stray {
            match ctx.js.consumer_delete(&from, n).await {
                Ok(()) | Err(Error::ConsumerNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            ctx.journal.lock().await.consumer_mut(n).expect("consumer").phase =
                ConsumerPhase::Retired;
        }
    }
    if delete_old && ctx.js.stream_info_opt(&from).await?.is_some() {
        ctx.js.stream_delete(&from).await?;
    }
    let result = StepResult::Retired { deleted_old_stream: delete_old, kept_old_consumers: keep };
    ctx.done(Step::Retire, t, Some(Phase::Done), result).await
}
