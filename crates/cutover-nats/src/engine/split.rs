//! Publishers split across systems (docs/cross-system.md, *What moves by
//! itself*): where publishes cross the boundary in neither direction and the
//! operator repoints the publishers (`External::split_publishers`), the
//! commit point does not take the subjects from A. After the consumers
//! moved, B takes A's subjects on the target side while it still sources A,
//! and A keeps its own: a publisher on either side is served, one still on
//! A's side reaches B through the source, and a retry sent once into each
//! lands once in B (its explicit duplicate window: server stream.go
//! `processJetStreamMsg` checks sourced messages' msg-ids too). The run then
//! waits for the operator's go-ahead (`run --resume ID --proceed`, a record
//! in the `CUTOVER` bucket the waiting runner watches) or for A to store
//! nothing for `--seal-when-idle`, and only then releases and seals A.
//!
//! Two streams with the same subjects on two systems do not conflict: the
//! overlap check is per account (server stream.go `checkStreamCfgLocked`),
//! and its source cycle check skips external sources.

use super::ctx::Ctx;
use super::events::{EventKind, Progress, StepResult, Warning};
use super::progress::source_progress;
use super::steps::subjects::{released_subjects, taking_subjects};
use crate::api::Js;
use crate::error::{Error, Result};
use cutover_core::journal::{Phase, SharedAt, Step};
use cutover_core::source_header;
use serde_json::json;
use std::time::{Duration, Instant};

/// How often the wait reports what A stored meanwhile (the first time
/// after [`FIRST_REPORT`]).
const REPORT_EVERY: Duration = Duration::from_secs(3);
const FIRST_REPORT: Duration = Duration::from_secs(1);

/// How long A must have stored nothing before an operator's go-ahead seals
/// it: a go-ahead given while a publisher still writes A (a newcomer gave
/// one with 619 messages stored in the last 3 s) would cut that publisher
/// off for good. A publisher that writes less often than this is not seen.
const GO_AHEAD_IDLE: Duration = Duration::from_secs(3);

/// The steps that replace the commit point: B takes the subjects, the
/// wait, A released once B holds its tail. Each is resumable.
pub(super) async fn publishers(ctx: &Ctx<'_>) -> Result<()> {
    let phase = || async { ctx.journal.lock().await.phase };
    if phase().await < Phase::SubjectsShared {
        share_subjects(ctx).await?;
    }
    if phase().await < Phase::SubjectsReleased {
        await_publishers(ctx).await?;
    }
    release_a(ctx).await
}

/// B takes A's subjects on the target side. The phase is journaled first:
/// from it on a rollback is refused (`Journal::publishers_split`), since a
/// publisher may be repointed at any moment after. An update that failed
/// (and did not take effect) puts the phase back: nothing is split then.
async fn share_subjects(ctx: &Ctx<'_>) -> Result<()> {
    let (to, subjects) = {
        let j = ctx.journal.lock().await;
        (j.to.clone(), j.plan.b_final_subjects.clone())
    };
    let t = ctx.begin(Step::ShareSubjects).await?;
    // A go-ahead left by an earlier migration of the same streams is not
    // this one's: the operator confirms after B took the subjects.
    ctx.store.delete_proceed(&ctx.id).await?;
    let (from, handed_over) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.handover.and_then(|h| h.x))
    };
    // B's window as planned, and (a mirror handed over) a whole retry
    // horizon since the hand-over: a publish A stored before it, mirrored
    // without its id recorded, can only be retried into A from here on.
    crate::engine::steps::recheck::window_holds(ctx, &to).await?;
    if let Some(x) = handed_over {
        // A's sequences up to the split, or it is refused (nothing shared).
        let last = ctx.js.stream_info(&to).await?.1.state.last_seq;
        crate::engine::steps::handover::sourced_aligned(ctx, &from, &to, x, last).await?;
    }
    // After the waits above: a durable created while they waited stops the
    // run here (recheck::none_appeared).
    crate::engine::steps::recheck::none_appeared(ctx).await?;
    let p = source_progress(ctx.js, &to, &from).await?;
    let at = SharedAt { b_seq: p.b_last_seq, origin_seq: p.sourced_origin_seq.unwrap_or(0) };
    {
        let mut j = ctx.journal.lock().await;
        j.phase = Phase::SubjectsShared;
        j.shared = Some(at);
    }
    ctx.save().await?;
    if let Err(e) = b_takes(ctx).await {
        let took = ctx.js.stream_info(&to).await.is_ok_and(|(_, b)| b.config.subjects == subjects);
        if !took {
            ctx.journal.lock().await.phase = Phase::ConsumersMoved;
            ctx.save().await?;
            return Err(e);
        }
    }
    let result = StepResult::SubjectsShared { subjects };
    ctx.done(Step::ShareSubjects, t, Some(Phase::SubjectsShared), result).await
}

/// B holds A's subjects (idempotent), with what the plan keeps for the
/// commit (a mirror handed over: what a mirror may not have, as its
/// promotion would set; `subjects::taking_subjects`).
async fn b_takes(ctx: &Ctx<'_>) -> Result<()> {
    let (to, subjects, promote_with) = {
        let j = ctx.journal.lock().await;
        (j.to.clone(), j.plan.b_final_subjects.clone(), j.plan.promote_with.clone())
    };
    let (raw, b) = ctx.js.stream_info(&to).await?;
    if b.config.subjects != subjects {
        ctx.js.stream_update(&taking_subjects(&raw, &subjects, &promote_with)).await?;
    }
    Ok(())
}

/// What the wait has seen of A: its last sequence, since when it has not
/// moved, and what was last reported.
struct Watch {
    started: Instant,
    a_last: u64,
    idle_since: Instant,
    reported: (Instant, u64),
    report_at: Instant,
}

impl Watch {
    fn new(a_last: u64) -> Self {
        let now = Instant::now();
        Self {
            started: now,
            a_last,
            idle_since: now,
            reported: (now, a_last),
            report_at: now + FIRST_REPORT,
        }
    }

    fn saw(&mut self, a_last: u64) {
        if a_last != self.a_last {
            self.a_last = a_last;
            self.idle_since = Instant::now();
        }
    }

    /// The progress event due now, if one is.
    fn report(&mut self, next: &str) -> Option<Progress> {
        let now = Instant::now();
        if now < self.report_at {
            return None;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let p = Progress::AwaitPublishers {
            a_stored: self.a_last.saturating_sub(self.reported.1),
            interval_ms: ms(now - self.reported.0),
            a_last_seq: self.a_last,
            idle_ms: ms(now - self.idle_since),
            waited_ms: ms(now - self.started),
            next: next.into(),
        };
        self.reported = (now, self.a_last);
        self.report_at = now + REPORT_EVERY;
        Some(p)
    }
}

/// Waits, reporting every few seconds what A stored meanwhile, until the
/// operator's go-ahead is in the `CUTOVER` bucket or A stored nothing for
/// `--seal-when-idle`. Ctrl-C stops here (a safe point: both sides serve);
/// a resumed run waits again. B takes the subjects again first: a runner
/// killed between journaling the share and B's update left B without them.
async fn await_publishers(ctx: &Ctx<'_>) -> Result<()> {
    let from = ctx.journal.lock().await.from.clone();
    // Journaled (by `begin`'s save): a resume without the flag keeps it.
    let seal_when_idle = {
        let mut j = ctx.journal.lock().await;
        if let Some(d) = ctx.opts.seal_when_idle {
            j.seal_when_idle_ms = Some(d.as_millis() as u64);
        }
        j.seal_when_idle_ms.map(Duration::from_millis)
    };
    let t = ctx.begin(Step::AwaitPublishers).await?;
    b_takes(ctx).await?;
    let next = format!("nats-cutover run --resume {} --proceed", ctx.id);
    let mut watch = Watch::new(ctx.js.stream_info(&from).await?.1.state.last_seq);
    let mut warned = false;
    let by = loop {
        watch.saw(ctx.js.stream_info(&from).await?.1.state.last_seq);
        if ctx.store.proceed_asked(&ctx.id).await? {
            if watch.idle_since.elapsed() >= GO_AHEAD_IDLE {
                break "operator";
            }
            if !std::mem::replace(&mut warned, true) {
                let what = format!("the go-ahead is recorded, but {from} is still storing messages (its last sequence {}): a publisher still writes {from} and would be cut off by the seal; sealing waits until {from} stored nothing for {GO_AHEAD_IDLE:?} (repoint or stop that publisher)", watch.a_last);
                ctx.emit(Step::AwaitPublishers, EventKind::Warning(Warning::Skipped { what }));
            }
        }
        if seal_when_idle.is_some_and(|d| watch.idle_since.elapsed() >= d) {
            break "idle";
        }
        if let Some(p) = watch.report(&next) {
            ctx.emit(Step::AwaitPublishers, EventKind::Progress(p));
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll.max(Duration::from_millis(100))).await;
    };
    let result = StepResult::PublishersConfirmed {
        by: by.into(),
        waited_ms: watch.started.elapsed().as_secs_f64() * 1000.0,
        a_last_seq: watch.a_last,
    };
    ctx.done(Step::AwaitPublishers, t, None, result).await
}

/// A releases its subjects, B is waited for until it holds every message A
/// stored (A's last sequence the same in two reads, as at a commit point:
/// see `run::commit_window`), then the run goes on as after one (seal A,
/// remove B's source, retire). A publisher still on A's side gets no
/// responders from here: the operator said none is (or A was idle). If B
/// does not catch up within the commit timeout, A takes its subjects back
/// (both sides serve again) and the go-ahead can be given again.
async fn release_a(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, a_subjects, shared) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone(), j.a_subjects.clone(), j.shared.unwrap_or_default())
    };
    let t = ctx.begin(Step::MovePublishers).await?;
    // What B received since it took the subjects is read while A still
    // takes publishes; inside the window only what arrives meanwhile.
    let mut tail = SourcedTail { cursor: shared.b_seq, origin: shared.origin_seq };
    tail.advance(ctx.js, &to, &from).await?;
    ctx.journal.lock().await.phase = Phase::SubjectsReleased;
    ctx.save().await?;
    let released = Instant::now();
    match tail_window(ctx, &from, &to, &mut tail).await {
        Ok(a_final) => {
            ctx.journal.lock().await.a_final_seq = Some(a_final);
            let result = StepResult::MovePublishers {
                a_final_seq: a_final,
                no_stream_window_ms: Some(released.elapsed().as_secs_f64() * 1000.0),
                reconciled: false,
            };
            ctx.done(Step::MovePublishers, t, Some(Phase::SubjectsMoved), result).await?;
            ctx.store.delete_proceed(&ctx.id).await
        }
        Err(e) => {
            let (raw, a) = ctx.js.stream_info(&from).await?;
            if a.config.subjects != a_subjects {
                let mut cfg = raw["config"].clone();
                cfg["subjects"] = json!(a_subjects);
                ctx.js.stream_update(&cfg).await?;
            }
            {
                let mut j = ctx.journal.lock().await;
                j.phase = Phase::SubjectsShared;
                j.a_final_seq = None;
            }
            ctx.save().await?;
            Err(Error::Stuck(format!("{to} did not take over from {from} ({e}); {from} holds its subjects again, so publishers on both sides are served; `nats-cutover run --resume {} --proceed` tries again", ctx.id)))
        }
    }
}

/// A releases its subjects; then, bounded by the commit timeout, B is read
/// until it holds every message A stored, with A's last sequence the same in
/// two reads (a publish the server had queued for A is stored after its
/// subjects are gone: stream.go processInboundJetStreamMsg → queueInbound).
/// Returns A's final sequence.
async fn tail_window(ctx: &Ctx<'_>, from: &str, to: &str, tail: &mut SourcedTail) -> Result<u64> {
    let subjects = ctx.journal.lock().await.plan.b_final_subjects.clone();
    let (a_raw, a) = ctx.js.stream_info(from).await?;
    let release = released_subjects(from, &subjects);
    if a.config.subjects != release {
        let mut cfg = a_raw["config"].clone();
        cfg["subjects"] = json!(release);
        ctx.js.stream_update(&cfg).await?;
    }
    if let Some(h) = &ctx.opts.after_step {
        h("subjects_released");
    }
    let (_, b) = ctx.js.stream_info(to).await?;
    let source = b.config.sources.iter().find(|s| s.name == from).cloned();
    let deadline = Instant::now() + ctx.opts.commit_timeout;
    let mut seen: Option<u64> = None;
    loop {
        let (_, a) = ctx.js.stream_info(from).await?;
        tail.advance(ctx.js, to, from).await?;
        let last = a.state.last_seq;
        let caught_up = tail.origin >= last
            || a.state.messages == 0
            || ctx.js.next_sourced(&a, source.as_ref(), tail.origin).await?.is_none();
        if caught_up && seen == Some(last) {
            return Ok(last);
        }
        seen = caught_up.then_some(last);
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!("{to} did not source {from}'s last messages (up to {last}; it holds up to origin {}) within the commit timeout of {:?}", tail.origin, ctx.opts.commit_timeout)));
        }
        ctx.tick(false).await?;
        // Each read of B is an ordered consumer: not one per millisecond.
        tokio::time::sleep(ctx.opts.poll.max(Duration::from_millis(10))).await;
    }
}

/// How far B sourced A, while direct publishes land in B too: B's newest
/// message may be a direct one, so its newest alone (`source_progress`)
/// says nothing; B is read forward from `cursor` (headers only), keeping
/// the highest origin sequence seen.
struct SourcedTail {
    cursor: u64,
    origin: u64,
}

impl SourcedTail {
    async fn advance(&mut self, js: &Js, to: &str, from: &str) -> Result<()> {
        let last = js.stream_info(to).await?.1.state.last_seq;
        if last <= self.cursor {
            return Ok(());
        }
        let mut max = self.origin;
        let stall = Duration::from_secs(10);
        crate::read::read(js, to, self.cursor + 1, last, &[], true, stall, |m, _, _| {
            let h = m.headers.as_ref().and_then(|h| h.get(source_header::HEADER));
            if let Some(o) = h.and_then(|v| source_header::seq_from(v.as_str(), from).ok()) {
                max = max.max(o.unwrap_or(0));
            }
            true
        })
        .await?;
        (self.cursor, self.origin) = (last, max);
        Ok(())
    }
}
