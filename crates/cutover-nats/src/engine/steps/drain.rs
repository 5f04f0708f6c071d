//! Drain mode's checkpoint: the old consumer paused (2.11+) until nothing is
//! ack-pending, read twice, paused for good and read again; F is its last
//! delivered sequence. A worker that died holding messages cuts the pause
//! so they are redelivered. Servers without consumer pause drain only with
//! publishers stopped.

use super::durable::{checkpoint_holds, settled_state};
use super::undo::undo_consumer;
use crate::engine::ctx::{can_pause, rfc3339_in, Ctx, FOREVER};
use crate::engine::events::{EventKind, Progress, Warning};
use crate::error::{Error, Result};
use cutover_core::checkpoint::assess;
use cutover_core::journal::{ConsumerPhase, ConsumerProgress, ConsumerResume, Step};
use cutover_core::model::{nanos, ConsumerInfo};
use cutover_core::plan::ConsumerPlan;
use std::time::{Duration, Instant};

/// The consumer's checkpoint F: journaled already (a resumed run), or taken
/// now by draining it, then journaled with its evidence. A drain that fails
/// gives the old durable back before reporting.
pub(in crate::engine) async fn checkpoint(
    ctx: &Ctx<'_>,
    cp: &ConsumerPlan,
    from: &str,
    prior: &ConsumerProgress,
) -> Result<(u64, Instant)> {
    let name = cp.name.as_str();
    if let ConsumerResume::Checkpointed { f } = prior.resume() {
        if checkpoint_holds(ctx, from, name, prior).await? {
            return Ok((f, Instant::now()));
        }
    }
    let started = Instant::now();
    let (f, ci, held_since) = match drain(ctx, from, name).await {
        Ok(x) => x,
        Err(e) => {
            // Never leave applications stalled on a consumer we paused but
            // did not move: let it deliver again before reporting.
            let _ = undo_consumer(ctx, from, name, prior).await;
            return Err(e);
        }
    };
    let drain_ms = started.elapsed().as_millis() as u64;
    let journaled = ctx.journal_consumer(name, |p| {
        p.phase = ConsumerPhase::Settled;
        p.checkpoint = Some(f);
        p.drain_ms = Some(drain_ms);
        p.evidence = Some(settled_state(&ci));
        p.b_filters = cp.b_filters.clone();
    });
    if let Err(e) = journaled.await {
        // Paused for good with F unjournaled (or journaled, its answer
        // lost): given back, as every failure before the new durable.
        let _ = undo_consumer(ctx, from, name, prior).await;
        return Err(e);
    }
    let settled = Progress::Settled { checkpoint: f, drain_ms };
    ctx.emit(Step::Consumer(name.into()), EventKind::Progress(settled));
    Ok((f, held_since))
}

/// Pauses the consumer and waits until it is settled; returns F, the read
/// that settled it and when the pause that held began (a pause cut to let
/// held messages through ends an attempt: the gap is the last one's). On
/// return the consumer is paused for good (it must never deliver once B's
/// durable exists).
async fn drain(ctx: &Ctx<'_>, stream: &str, name: &str) -> Result<(u64, ConsumerInfo, Instant)> {
    if !can_pause(ctx.js) {
        let started = Instant::now();
        let (f, ci) = drain_without_pause(ctx, stream, name).await?;
        return Ok((f, ci, started));
    }
    ctx.js.consumer_pause(stream, name, Some(&rfc3339_in(ctx.opts.drain_pause))).await?;
    let (_, first) = ctx.js.consumer_info(stream, name).await?;
    let ack_wait = nanos(first.config.ack_wait).max(Duration::from_millis(1));
    let started = Instant::now();
    let mut d = Drain {
        ctx,
        cuts: 0,
        stream,
        name,
        step: Step::Consumer(name.to_string()),
        deadline: Instant::now()
            + ctx.opts.settle_timeout.unwrap_or((ack_wait * 10).max(Duration::from_secs(60))),
        // How long a pause may last without ack progress (see cut_pause).
        stall: ctx.opts.max_pause.min(ack_wait),
        paused_at: Instant::now(),
        attempt_started: Instant::now(),
        longest: Duration::ZERO,
        last_progress: Instant::now(),
        last_emit: Instant::now(),
    };
    let mut last: Option<ConsumerInfo> = None;
    loop {
        let (_, ci) = ctx.js.consumer_info(stream, name).await?;
        if let Some(prev) = &last {
            if let Some(settled) = d.try_settle(prev, &ci).await? {
                return Ok(settled);
            }
        }
        d.note_progress(last.as_ref(), &ci);
        if ci.num_ack_pending > 0 && d.last_progress.elapsed() > d.stall {
            d.cut_pause(&ci).await?;
            last = None;
            continue;
        }
        d.keep_paused().await?;
        if Instant::now() > d.deadline {
            return Err(Error::Stuck(d.unsettled(&ci, started.elapsed())));
        }
        last = Some(ci);
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
}

/// One consumer's paused drain: its state between reads.
struct Drain<'a, 'c> {
    ctx: &'a Ctx<'c>,
    stream: &'a str,
    name: &'a str,
    step: Step,
    deadline: Instant,
    stall: Duration,
    paused_at: Instant,
    attempt_started: Instant,
    longest: Duration,
    last_progress: Instant,
    last_emit: Instant,
    /// Pauses cut so the server could redeliver (`cut_pause`).
    cuts: u32,
}

impl Drain<'_, '_> {
    /// Settled: two consecutive reads that agree with nothing ack-pending
    /// (replicated consumers report state from their store, which may trail
    /// the leader by a proposal). Then the consumer is paused for good and read
    /// once more; F is final only if that read agrees.
    async fn try_settle(
        &mut self,
        prev: &ConsumerInfo,
        ci: &ConsumerInfo,
    ) -> Result<Option<(u64, ConsumerInfo, Instant)>> {
        let a = assess(ci);
        let agree = prev.delivered == ci.delivered
            && prev.ack_floor == ci.ack_floor
            && prev.num_ack_pending == 0;
        if !a.stable || !agree {
            return Ok(None);
        }
        let f = a.checkpoint.expect("stable has a checkpoint");
        // From here on the old consumer stays paused whatever happens.
        self.ctx.js.consumer_pause(self.stream, self.name, Some(FOREVER)).await?;
        // Every delivery proposed before the pause applied, then read (a
        // replicated consumer's info reads the applied state).
        let (_, again) = self.ctx.js.settled_read(self.stream, self.name).await?;
        let b = assess(&again);
        if !(b.stable && b.checkpoint == Some(f)) {
            return Ok(None);
        }
        self.longest = self.longest.max(self.attempt_started.elapsed());
        let mut j = self.ctx.journal.lock().await;
        j.consumer_mut(self.name).unwrap().longest_pause_ms = Some(self.longest.as_millis() as u64);
        Ok(Some((f, again, self.attempt_started)))
    }

    /// Ack progress restarts the stall clock; progress is reported every 250 ms.
    fn note_progress(&mut self, last: Option<&ConsumerInfo>, ci: &ConsumerInfo) {
        let progressed = last
            .map(|p| p.ack_floor != ci.ack_floor || p.num_ack_pending != ci.num_ack_pending)
            .unwrap_or(true);
        if progressed {
            self.last_progress = Instant::now();
        }
        if self.last_emit.elapsed() > Duration::from_millis(250) {
            let progress = Progress::Draining {
                ack_pending: ci.num_ack_pending,
                delivered: ci.delivered.stream_seq,
                ack_floor: ci.ack_floor.stream_seq,
            };
            self.ctx.emit(self.step.clone(), EventKind::Progress(progress));
            self.last_emit = Instant::now();
        }
    }

    /// No ack progress while paused: a worker died holding messages (a paused
    /// consumer withholds their redelivery: server consumer.go
    /// loopAndGatherMsgs stops before getNextMsg), a message was nak'd with a
    /// backoff, or a client holds a partial batch. The pause is bounded: resume
    /// for as long, so held messages are processed or redelivered and the
    /// applications keep working, then pause again.
    async fn cut_pause(&mut self, ci: &ConsumerInfo) -> Result<()> {
        let (js, stream, name) = (self.ctx.js, self.stream, self.name);
        self.longest = self.longest.max(self.attempt_started.elapsed());
        let cut = Warning::PauseCut {
            stall_ms: self.stall.as_millis() as u64,
            ack_pending: ci.num_ack_pending,
        };
        self.ctx.emit(self.step.clone(), EventKind::Warning(cut));
        js.consumer_pause(stream, name, None).await?;
        let resumed = Instant::now();
        loop {
            let (_, n) = js.consumer_info(stream, name).await?;
            // What blocked is settled (the oldest pending message acked, or
            // nothing pending), or the resumed interval is over.
            if n.num_ack_pending == 0
                || n.ack_floor != ci.ack_floor
                || resumed.elapsed() > self.stall
            {
                break;
            }
            self.ctx.tick(true).await?;
            tokio::time::sleep(self.ctx.opts.poll).await;
        }
        js.consumer_pause(stream, name, Some(&rfc3339_in(self.ctx.opts.drain_pause))).await?;
        self.paused_at = Instant::now();
        self.attempt_started = Instant::now();
        self.last_progress = Instant::now();
        self.ctx.journal.lock().await.consumer_mut(name).unwrap().nudges += 1;
        self.cuts += 1;
        Ok(())
    }

    /// The settle timeout's message: what is held, and by whom as far as
    /// the consumer's state tells (a pull consumer nobody fetches from, or
    /// workers that hold messages past `ack_wait` though the pause was cut
    /// for their redelivery).
    fn unsettled(&self, ci: &ConsumerInfo, waited: Duration) -> String {
        let (stream, name) = (self.stream, self.name);
        let ack_wait = nanos(ci.config.ack_wait).as_secs_f64();
        let cause = match &ci.config.deliver_subject {
            Some(subject) => format!("its subscribers on {subject} hold them unacknowledged past its ack_wait of {ack_wait:.0} s, or nobody is subscribed there"),
            None if ci.num_waiting == 0 => "no worker fetches from it (no pull request waits): start its workers".to_string(),
            None => format!("its workers fetch but hold them unacknowledged past its ack_wait of {ack_wait:.0} s: check that they ack each message (or nak or term it)"),
        };
        format!(
            "consumer {stream}/{name} did not settle in {:.0} s: {} message(s) still unacknowledged (ack floor {}, delivered {}; the pause was cut {} time(s) for the server to redeliver them); {cause}; the consumer was resumed, nothing moved; run again once they are acknowledged",
            waited.as_secs_f64(),
            ci.num_ack_pending,
            ci.ack_floor.stream_seq,
            ci.delivered.stream_seq,
            self.cuts,
        )
    }

    /// Keeps the drain pause from lapsing while we wait.
    async fn keep_paused(&mut self) -> Result<()> {
        if self.paused_at.elapsed() > self.ctx.opts.drain_pause / 3 {
            let until = rfc3339_in(self.ctx.opts.drain_pause);
            self.ctx.js.consumer_pause(self.stream, self.name, Some(&until)).await?;
            self.paused_at = Instant::now();
        }
        Ok(())
    }
}

/// Without a pause, A must not grow past `a0` while `name` drains.
async fn still_stopped(ctx: &Ctx<'_>, stream: &str, name: &str, a0: u64) -> Result<()> {
    let now = ctx.js.stream_info(stream).await?.1.state.last_seq;
    if now == a0 {
        return Ok(());
    }
    Err(Error::Unsafe(format!(
        "publishers are not stopped: {stream} grew from sequence {a0} to {now} while consumer {name} drained without a pause (this server cannot pause consumers); nothing moved; stop every publisher of {stream}, then run again (or roll back)"
    )))
}

/// Servers before 2.11 cannot pause a consumer. The plan allows them only when
/// the operator states that publishers are stopped: then nothing new reaches A,
/// and `num_pending == 0 && num_ack_pending == 0` (read twice, agreeing) means
/// every message was delivered and settled, exactly, with no timer. The
/// quiescent bound derived in the plan is only the deadline for giving up.
async fn drain_without_pause(
    ctx: &Ctx<'_>,
    stream: &str,
    name: &str,
) -> Result<(u64, ConsumerInfo)> {
    let (stopped, bound) = {
        let j = ctx.journal.lock().await;
        (
            j.plan.publishers_stopped,
            j.plan.quiescence.iter().find(|(c, _)| c == name).and_then(|(_, q)| q.interval),
        )
    };
    if !stopped {
        return Err(Error::Unsafe(format!("server {} cannot pause consumers: stop the publishers and run with --publishers-stopped, or upgrade to 2.11+", ctx.js.server_version().map(|v| v.to_string()).unwrap_or_default())));
    }
    let step = Step::Consumer(name.to_string());
    let deadline = Instant::now()
        + ctx
            .opts
            .settle_timeout
            .or(bound)
            .unwrap_or(Duration::from_secs(60))
            .max(Duration::from_secs(5));
    let mut last: Option<ConsumerInfo> = None;
    let mut last_emit = Instant::now();
    // The operator's statement is the evidence here: A must not grow while
    // the consumer drains (a newcomer's trial ran with publishers still on:
    // quiet reads between two publishes let messages after F be processed
    // from both streams). Checked at every read, not only at the settle.
    let a0 = ctx.js.stream_info(stream).await?.1.state.last_seq;
    loop {
        let (_, ci) = ctx.js.consumer_info(stream, name).await?;
        still_stopped(ctx, stream, name, a0).await?;
        let quiet = ci.num_pending == 0 && ci.num_ack_pending == 0;
        if quiet {
            if let Some(prev) = &last {
                if prev.delivered == ci.delivered
                    && prev.ack_floor == ci.ack_floor
                    && prev.num_pending == 0
                    && prev.num_ack_pending == 0
                {
                    let (_, a) = ctx.js.stream_info(stream).await?;
                    let f = ci.delivered.stream_seq;
                    // Publishers really are stopped only if A did not grow while we looked.
                    let (_, again) = ctx.js.consumer_info(stream, name).await?;
                    let (_, a2) = ctx.js.stream_info(stream).await?;
                    if a2.state.last_seq == a.state.last_seq
                        && again.delivered == ci.delivered
                        && again.num_pending == 0
                        && again.num_ack_pending == 0
                    {
                        return Ok((f, again));
                    }
                }
            }
        }
        if last_emit.elapsed() > Duration::from_millis(250) {
            let progress = Progress::DrainingUnpaused {
                num_pending: ci.num_pending,
                ack_pending: ci.num_ack_pending,
            };
            ctx.emit(step.clone(), EventKind::Progress(progress));
            last_emit = Instant::now();
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!(
                "consumer {stream}/{name} did not drain (pending {}, ack pending {}) within the quiescent bound; are the publishers really stopped? nothing moved",
                ci.num_pending, ci.num_ack_pending
            )));
        }
        last = Some(ci);
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
}
