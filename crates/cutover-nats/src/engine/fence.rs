//! Fence mode: the handoff without a stop of consumption (docs/protocol.md).
//!
//! The old consumer is paused only as a delivery gate: instances keep
//! processing and acknowledging what they hold. Its last delivered sequence is
//! the fence F; the new durable starts right after it, and the route record
//! (state `fenced`) tells instances to process the old consumer's messages up
//! to F and everything after F from the new durable. The old consumer is done
//! when nothing up to F is unacknowledged. A dead instance's messages are
//! redelivered by resuming the old consumer briefly, which is safe only once
//! every live instance acknowledged the fence: a resumed consumer delivers
//! above F too, and instances that follow the protocol nak those.

use super::ctx::{can_pause, rfc3339_in, Ctx, FOREVER};
use super::events::{EventKind, Progress, Warning};
use super::steps::durable::{checkpoint_holds, position, settled_state};
use super::steps::routes::{fenced_route, retire_route_back};
use super::steps::undo::undo_consumer;
use crate::error::{Error, Result};
use cutover_core::journal::{
    ConsumerPhase, ConsumerProgress, ConsumerResume, FenceAck, RouteState, Step,
};
use cutover_core::model::{nanos, ConsumerInfo};
use cutover_core::plan::{ConsumerPlan, Mode};
use std::time::{Duration, Instant};

/// Refuses, before any write, a fence-mode run of a consumer that no live
/// application instance registered for: nobody would follow the fence.
pub(in crate::engine) async fn check_instances(ctx: &Ctx<'_>) -> Result<()> {
    let (from, waiting) = {
        let j = ctx.journal.lock().await;
        if !j.plan.mode.is_fenced() {
            return Ok(());
        }
        let waiting: Vec<String> = j
            .consumers
            .iter()
            .filter(|c| c.phase == ConsumerPhase::Waiting)
            .map(|c| c.name.clone())
            .collect();
        (j.from.clone(), waiting)
    };
    for name in waiting {
        let live = ctx.store.instances(Some((&from, &name))).await?.iter().any(|i| i.live);
        if !live {
            return Err(Error::NoInstances { stream: from, consumer: name });
        }
    }
    Ok(())
}

async fn publish(
    ctx: &Ctx<'_>,
    ends: (&str, &str),
    name: &str,
    pos: (u64, u64),
    state: RouteState,
) -> Result<()> {
    let r = fenced_route(ctx, ends, name, pos, state).await;
    ctx.hold_lease().await?;
    ctx.store.put_route(ends.0, name, &r).await?;
    retire_route_back(ctx, ends.0, ends.1, name).await
}

/// One consumer's fence handoff, or what is left of it after a resume.
pub(in crate::engine) async fn move_consumer(ctx: &Ctx<'_>, cp: &ConsumerPlan) -> Result<()> {
    let (from, to, prior) = ctx.consumer_state(&cp.name).await;
    let prior = crate::engine::steps::recheck::operator_pause(ctx, &from, prior).await?;
    let name = cp.name.as_str();
    let ends = (from.as_str(), to.as_str());
    let step = Step::Consumer(name.into());
    // The state the route already reached: a resumed run never publishes a
    // state before it (a newcomer's trial saw moved → settled → moved).
    let mut reached = RouteState::Fenced;
    let (f, start, fence_ms) = match prior.resume() {
        ConsumerResume::Fenced { f, start } => {
            // Resumed: the route may not have been written before the crash;
            // one already past `fenced` for this fence is left as it is (a
            // step back would send instances to the old consumer again).
            let r = ctx.store.route(&from, name).await?;
            match r.filter(|r| r.migration == ctx.id && r.fence == Some(f)) {
                Some(r) => reached = r.state,
                None => publish(ctx, ends, name, (f, start), RouteState::Fenced).await?,
            }
            (f, start, 0.0)
        }
        _ => fence(ctx, cp, ends, &prior).await?,
    };
    let started = Instant::now();
    let ci = settle_to_fence(ctx, &from, name, f).await?;
    let (settle_ms, ack_pending) = (started.elapsed().as_millis() as u64, ci.num_ack_pending);
    ctx.journal_consumer(name, |p| {
        p.drain_ms = Some(settle_ms);
        p.fence_settled = Some(settled_state(&ci));
    })
    .await?;
    if reached < RouteState::Settled {
        publish(ctx, ends, name, (f, start), RouteState::Settled).await?;
    }
    let settled = Progress::FenceSettled { fence: f, settle_ms, ack_pending };
    ctx.emit(step.clone(), EventKind::Progress(settled));
    if ci.ack_floor.stream_seq > f {
        // Seen by a newcomer on a cluster: F read 35 ms after a consumer
        // leader change, one message short; that message was processed twice.
        let w = Warning::AckedAboveFence { fence: f, ack_floor: ci.ack_floor.stream_seq };
        ctx.emit(step.clone(), EventKind::Warning(w));
    }
    if reached < RouteState::Moved {
        await_acks(ctx, &from, name, f).await?;
        publish(ctx, ends, name, (f, start), RouteState::Moved).await?;
    }
    if ctx.journal.lock().await.plan.mode == Mode::Rolling {
        await_rollout(ctx, &from, name).await?;
    }
    ctx.journal_consumer(name, |p| p.phase = ConsumerPhase::Created).await?;
    let gets = ctx.journal.lock().await.consumer_mut(name).and_then(|c| c.translate_gets);
    // The gate's pause, until the fence was out, is the one that held
    // consumption (none measured on a resumed run).
    let moved = Progress::Moved {
        checkpoint: f,
        b_start: start,
        translate_gets: gets.unwrap_or(0),
        gap_ms: fence_ms,
        longest_pause_ms: (fence_ms > 0.0).then_some(fence_ms as u64),
    };
    ctx.emit(step, EventKind::Progress(moved));
    if let Some(h) = &ctx.opts.after_step {
        h(&format!("consumer_created:{name}"));
    }
    Ok(())
}

/// Takes the fence, creates the new durable after it and publishes the
/// route (state `fenced`): returns F, the start and how long the old consumer
/// delivered nothing new before the new durable was announced.
async fn fence(
    ctx: &Ctx<'_>,
    cp: &ConsumerPlan,
    ends: (&str, &str),
    prior: &ConsumerProgress,
) -> Result<(u64, u64, f64)> {
    let name = cp.name.as_str();
    let started = Instant::now();
    let f = take_fence(ctx, cp, ends.0, prior).await?;
    // Its configuration as it is now (recheck::consumer_as_planned).
    let cp = &match super::steps::recheck::consumer_as_planned(ctx, cp, ends.0, prior).await {
        Ok(cp) => cp,
        Err(e) => {
            let _ = super::steps::undo::undo_consumer(ctx, ends.0, name, prior).await;
            return Err(e);
        }
    };
    // Before the new durable exists the old consumer is paused for good (the
    // gate's pause would lapse after a crash and deliver past F to instances
    // that know no fence yet), while F is translated. Then F is journaled
    // with the intent to create (one write) and the durable created.
    let forever = async { ctx.js.consumer_pause(ends.0, name, Some(FOREVER)).await.map(|_| ()) };
    let (start, gets) = position(ctx, cp, ends, f, prior, forever).await?;
    // Consumption waits for this: publish first. A runner killed before the
    // journal says `fenced` finds `creating` and an existing durable at the
    // start on resume, and publishes again.
    publish(ctx, ends, name, (f, start), RouteState::Fenced).await?;
    let fence_ms = started.elapsed().as_secs_f64() * 1000.0;
    ctx.journal_consumer(name, |p| {
        p.phase = ConsumerPhase::Fenced;
        p.b_start = Some(start);
        p.translate_gets = Some(gets);
    })
    .await?;
    let fenced = Progress::Fenced { fence: f, b_start: start, translate_gets: gets, fence_ms };
    ctx.emit(Step::Consumer(name.into()), EventKind::Progress(fenced));
    if let Some(h) = &ctx.opts.after_step {
        h(&format!("consumer_fenced:{name}"));
    }
    Ok((f, start, fence_ms))
}

/// F: journaled already (a resumed run), or the old consumer's last
/// delivered sequence once it is paused (two agreeing reads), recorded with
/// that evidence in the journal held in memory: the next write (the intent to
/// create the new durable) saves both. A runner killed before that write
/// finds the consumer waiting and paused: the same F again. A failure gives
/// the old consumer back its state.
async fn take_fence(
    ctx: &Ctx<'_>,
    cp: &ConsumerPlan,
    from: &str,
    prior: &ConsumerProgress,
) -> Result<u64> {
    let name = cp.name.as_str();
    if let ConsumerResume::Checkpointed { f } = prior.resume() {
        if checkpoint_holds(ctx, from, name, prior).await? {
            return Ok(f);
        }
    }
    if !can_pause(ctx.js) {
        return Err(Error::Unsafe(format!("fence mode needs consumer pause (nats-server 2.11+) to stop {from}/{name} delivering past the fence; use --mode drain")));
    }
    let ci = match gate(ctx, from, name).await {
        Ok(ci) => ci,
        Err(e) => {
            let _ = undo_consumer(ctx, from, name, prior).await;
            return Err(e);
        }
    };
    let f = ci.delivered.stream_seq;
    let mut j = ctx.journal.lock().await;
    let p = j.consumer_mut(name).expect("consumer in journal");
    p.phase = ConsumerPhase::Settled;
    p.checkpoint = Some(f);
    p.evidence = Some(settled_state(&ci));
    p.b_filters = cp.b_filters.clone();
    Ok(f)
}

/// Stops the old consumer delivering (acks go on): paused (for the drain
/// pause, renewable: a runner killed now stalls nobody for longer; paused for
/// good once the fence is published), and two reads agree on what it
/// delivered. Returns that read. Every wait here delays consumption: no
/// sleep between reads that agree at once.
async fn gate(ctx: &Ctx<'_>, from: &str, name: &str) -> Result<ConsumerInfo> {
    ctx.js.consumer_pause(from, name, Some(&rfc3339_in(ctx.opts.drain_pause))).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, ci) = ctx.js.consumer_info(from, name).await?;
        if ci.paused {
            // Paused: what it delivered before is what it will ever have
            // delivered, once every delivery in flight is applied (two
            // agreeing reads were seen one short, by up to 20 messages).
            return Ok(ctx.js.settled_read(from, name).await?.1);
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!("consumer {from}/{name} did not report a paused state for 30 s (its leader unreachable?); nothing moved")));
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
}

/// Waits until nothing up to F is unacknowledged on the old consumer: its ack
/// floor reached F, or nothing at all is ack-pending (everything up to F was
/// delivered when F was taken), in two agreeing reads. Not
/// `num_ack_pending == 0` alone: messages above F that instances nak'd stay
/// pending. Returns that read.
async fn settle_to_fence(ctx: &Ctx<'_>, from: &str, name: &str, f: u64) -> Result<ConsumerInfo> {
    let (_, first) = ctx.js.consumer_info(from, name).await?;
    let ack_wait = nanos(first.config.ack_wait).max(Duration::from_millis(1));
    let stall = ctx.opts.max_pause.min(ack_wait);
    let deadline = Instant::now()
        + ctx.opts.settle_timeout.unwrap_or((ack_wait * 10).max(Duration::from_secs(60)));
    let done = |c: &ConsumerInfo| c.ack_floor.stream_seq >= f || c.num_ack_pending == 0;
    let (mut last, mut progress_at, mut warned) = (None::<ConsumerInfo>, Instant::now(), false);
    loop {
        let (_, ci) = ctx.js.consumer_info(from, name).await?;
        if done(&ci) && last.as_ref().is_some_and(done) {
            return Ok(ci);
        }
        if last.as_ref().is_none_or(|p| p.ack_floor != ci.ack_floor) {
            progress_at = Instant::now();
        }
        if progress_at.elapsed() > stall {
            let missing = unacknowledged(ctx, from, name, f).await?;
            if missing.is_empty() {
                redeliver(ctx, from, name, f, stall, &ci).await?;
                progress_at = Instant::now();
            } else if !warned {
                let w =
                    Warning::FenceUnacknowledged { fence: f, instances: missing, waiting: true };
                ctx.emit(Step::Consumer(name.into()), EventKind::Warning(w));
                warned = true;
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!("consumer {from}/{name} still has {} unacknowledged message(s) up to the fence {f} after the settle timeout; the new durable serves the applications and the old one stays paused; check its instances, then `nats-cutover run --resume {}` continues (or roll back)", ci.num_ack_pending, ctx.id)));
        }
        last = Some(ci);
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
}

/// No ack progress with messages up to F pending: an instance died holding
/// them, and a paused consumer withholds their redelivery. Resume it until
/// they are acknowledged (or for `stall`), then pause it for good again, also
/// when reading it failed meanwhile.
async fn redeliver(
    ctx: &Ctx<'_>,
    from: &str,
    name: &str,
    f: u64,
    stall: Duration,
    ci: &ConsumerInfo,
) -> Result<()> {
    let cut =
        Warning::PauseCut { stall_ms: stall.as_millis() as u64, ack_pending: ci.num_ack_pending };
    ctx.emit(Step::Consumer(name.into()), EventKind::Warning(cut));
    ctx.js.consumer_pause(from, name, None).await?;
    let resumed = Instant::now();
    let waited: Result<()> = async {
        loop {
            let (_, n) = ctx.js.consumer_info(from, name).await?;
            if n.ack_floor.stream_seq >= f
                || n.num_ack_pending == 0
                || n.ack_floor != ci.ack_floor
                || resumed.elapsed() > stall
            {
                return Ok(());
            }
            tokio::time::sleep(ctx.opts.poll).await;
        }
    }
    .await;
    ctx.js.consumer_pause(from, name, Some(FOREVER)).await?;
    ctx.journal.lock().await.consumer_mut(name).expect("consumer in journal").nudges += 1;
    waited
}

/// The live instances of `from`/`name` that have not acknowledged fence F.
async fn unacknowledged(ctx: &Ctx<'_>, from: &str, name: &str, f: u64) -> Result<Vec<String>> {
    let want = FenceAck { migration: ctx.id.clone(), fence: f };
    Ok(ctx
        .store
        .instances(Some((from, name)))
        .await?
        .into_iter()
        .filter(|i| i.live && i.record.fence_ack.as_ref() != Some(&want))
        .map(|i| i.record.instance)
        .collect())
}

/// Waits until every live instance acknowledged F, at most the fence-ack
/// timeout; then goes on, naming the missing ones (the old consumer stays
/// paused for good, so they can only wait, not process past F).
async fn await_acks(ctx: &Ctx<'_>, from: &str, name: &str, f: u64) -> Result<()> {
    let deadline = Instant::now() + ctx.opts.fence_ack_timeout;
    loop {
        let missing = unacknowledged(ctx, from, name, f).await?;
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            let w = Warning::FenceUnacknowledged { fence: f, instances: missing, waiting: false };
            ctx.emit(Step::Consumer(name.into()), EventKind::Warning(w));
            return Ok(());
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll.max(Duration::from_millis(20))).await;
    }
}

/// Mode rolling: waits until no live instance is bound to the old consumer
/// (every instance of the old version replaced), reporting who is on which
/// side whenever it changes; with `proceed`, goes on at once and names the
/// ones left (safe: the old consumer is paused for good and settled). Ctrl-C
/// stops at this safe point; `run --resume ID --proceed` then goes on.
async fn await_rollout(ctx: &Ctx<'_>, from: &str, name: &str) -> Result<()> {
    let old = format!("{from}/{name}");
    let mut last: Option<Vec<String>> = None;
    loop {
        let live: Vec<_> = ctx.store.instances(Some((from, name))).await?;
        let live = live.into_iter().filter(|i| i.live);
        let (on_old, on_new): (Vec<_>, Vec<_>) = live.partition(|i| i.record.bound.contains(&old));
        let tag = |i: &crate::journal::Instance| {
            format!("{}@{}", i.record.instance, i.record.app_version)
        };
        let on_old: Vec<String> = on_old.iter().map(tag).collect();
        if on_old.is_empty() {
            return Ok(());
        }
        if ctx.opts.proceed {
            let w = Warning::ProceededWithout { instances: on_old };
            ctx.emit(Step::Consumer(name.into()), EventKind::Warning(w));
            return Ok(());
        }
        if last.as_ref() != Some(&on_old) {
            let on_new = on_new.iter().map(tag).collect();
            let p = Progress::Rollout { on_old: on_old.clone(), on_new };
            ctx.emit(Step::Consumer(name.into()), EventKind::Progress(p));
            last = Some(on_old);
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll.max(Duration::from_millis(100))).await;
    }
}
