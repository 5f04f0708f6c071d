//! `run`: the cut-over, step by step. See ARCHITECTURE.md for the protocol.
//!
//! Every step re-reads the server and is idempotent, and the journal is saved
//! after each one, so `run` on an interrupted migration picks up where it was.
//! Waits are conditions polled with a deadline, never timers.

use super::events::{Event, EventKind, Info, Progress, Sink, StepResult, Warning};
use super::progress::source_progress;
use crate::api::{Action, Js, Lookup, Via};
use crate::error::{Error, Result};
use crate::journal::{now_ms, JournalStore, Lease};
use cutover_core::checkpoint::{assess, TranslateSearch};
use cutover_core::journal::{migration_id, ConsumerPhase, Journal, Phase, Route, RouteState, Step};
use cutover_core::model::{nanos, ConsumerInfo};
use cutover_core::plan::{ConsumerPlan, InPlaceHop, Mode, Plan};
use futures::{StreamExt, TryStreamExt};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Mutex};

#[derive(Clone)]
pub struct RunOptions {
    pub delete_old: bool,
    /// Keep the old durables (paused for good) instead of deleting them.
    pub keep_old_consumers: bool,
    /// How often conditions are polled (consumer info is cheap on loopback).
    pub poll: Duration,
    pub lease_ttl: Duration,
    /// How long the old consumer is paused at a time while it drains; renewed
    /// while the runner lives, so a crashed runner stalls nobody for longer.
    pub drain_pause: Duration,
    /// Give up (safely: the old consumer resumes) if a consumer has not settled
    /// after this long; default 10 × its ack_wait, at least a minute.
    pub settle_timeout: Option<Duration>,
    /// The longest a consumer stays paused without ack progress before it is
    /// resumed for as long and paused again (capped by its ack_wait).
    pub max_pause: Duration,
    /// How long sourcing may make no progress while A has more before a wait
    /// for it gives up (safely).
    pub stall_timeout: Duration,
    /// While B catches up: the window over which a lag that keeps growing
    /// (B receiving less than A stores) stops the run before any commit
    /// (`cutover_core::catchup`).
    pub catch_up_window: Duration,
    /// How long the commit window may last before it is undone (A takes its
    /// subjects back): publishers get no responders meanwhile.
    pub commit_timeout: Duration,
    /// Fence mode: how long the runner waits, once the old consumer settled
    /// to the fence, for every live instance to acknowledge it (then it goes on
    /// and names the missing ones; the old consumer stays paused for good).
    pub fence_ack_timeout: Duration,
    /// Fence mode: the delay instances give the old consumer's messages above
    /// the fence when they nak them (docs/protocol.md).
    pub nak_delay: Duration,
    /// Mode rolling: do not wait for the instances still bound to the old
    /// consumer (it is settled to the fence: they process nothing more).
    pub proceed: bool,
    /// How many consumers are moved at once. Each consumer's gap (its pause
    /// to its route on B) is its own steps' time, not the whole batch's: with
    /// 1,000 durables all at once each waited for everyone's requests.
    pub consumers_at_once: usize,
    /// Strategy dual-write: how long old and new consumers run side by side
    /// (publishers writing both streams) before writes to A stop; an
    /// operator's choice, not a correctness wait (Ctrl-C ends it safely).
    pub side_by_side: Duration,
    /// Answer the JetStream publishes (with a msg-id) on the publishers'
    /// subjects during the commit window, and store them once a stream holds
    /// the subjects again (`super::bridge`): for publishers that never retry.
    pub answer_publishes: bool,
    /// Publishers split across systems (`External::split_publishers`): go
    /// on to seal A, without the operator's go-ahead, once A stored nothing
    /// for this long (`--seal-when-idle`).
    pub seal_when_idle: Option<Duration>,
    /// Called after each journaled step with its name (tests kill the runner here).
    pub after_step: Option<StepHook>,
    /// Called with `true` when the run starts holding something a dead
    /// runner would leave held ([`Exposure`]), and with `false` once it no
    /// longer does: the CLI tells its guard process, which acts only if the
    /// runner exits in between (`super::guard`).
    pub on_exposed: Option<ExposureHook>,
    /// A guard's run (`super::guard`): only compensate what a dead runner
    /// left held, then stop.
    pub guard: bool,
    /// The lease holder name of a runner known to be dead (its guard saw it
    /// exit): its lease is taken at once instead of waiting for it to lapse.
    pub take_over: Option<String>,
}

/// A hook called with a step's name once it is journaled.
pub type StepHook = Arc<dyn Fn(&str) + Send + Sync>;

/// A hook called as an [`Exposure`] begins (`true`) and ends (`false`).
pub type ExposureHook = Arc<dyn Fn(Exposure, bool) + Send + Sync>;

/// What a runner killed at that moment would leave held until someone
/// resumes or rolls back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// The commit window: A released its subjects, B has not taken them
    /// (publishers have no stream).
    Commit,
    /// Drain mode's consumer moves: old durables paused (for the drain, or
    /// for good once settled) whose new durables may not exist yet.
    Consumers,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            delete_old: false,
            keep_old_consumers: false,
            poll: Duration::from_millis(2),
            lease_ttl: Duration::from_secs(30),
            drain_pause: Duration::from_secs(120),
            settle_timeout: None,
            commit_timeout: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(30),
            catch_up_window: Duration::from_secs(10),
            max_pause: Duration::from_secs(5),
            fence_ack_timeout: Duration::from_secs(10),
            nak_delay: Duration::from_secs(30),
            proceed: false,
            consumers_at_once: 64,
            side_by_side: Duration::ZERO,
            answer_publishes: false,
            seal_when_idle: None,
            after_step: None,
            on_exposed: None,
            guard: false,
            take_over: None,
        }
    }
}

/// Consumer pause exists from 2.11; without it drain takes the
/// publishers-stopped path and nothing is paused or resumed.
pub(super) fn can_pause(js: &Js) -> bool {
    js.server_version().is_some_and(|v| v.features().consumer_pause)
}

/// A pause that outlives any runner: used once the new durable exists, when the
/// old one must never deliver again.
pub(super) const FOREVER: &str = "9999-01-01T00:00:00Z";

pub(super) fn rfc3339_in(d: Duration) -> String {
    let t = time::OffsetDateTime::now_utc() + d;
    t.format(&time::format_description::well_known::Rfc3339).expect("format time")
}

pub(super) struct Ctx<'a> {
    pub(super) js: &'a Js,
    pub(super) store: JournalStore,
    /// Shared with `js`'s fence: every request and every journal or route
    /// write of this runner first checks it still holds the lease.
    lease: Arc<Mutex<Lease>>,
    pub(super) journal: Mutex<Journal>,
    sink: &'a dyn Sink,
    shutdown: watch::Receiver<bool>,
    pub(super) opts: &'a RunOptions,
    pub(super) id: String,
}

impl Ctx<'_> {
    pub(super) fn emit(&self, step: Step, kind: EventKind) {
        self.sink.emit(Event::new(&self.id, step, kind));
    }

    /// Changes one consumer's progress and saves it: the record of an
    /// intent, or of what just happened. Only this consumer's record is
    /// written (its task is its only writer, so writes of different
    /// consumers, made concurrently, never overwrite each other).
    pub(super) async fn journal_consumer(
        &self,
        name: &str,
        change: impl FnOnce(&mut cutover_core::journal::ConsumerProgress),
    ) -> Result<()> {
        if !self.store.holds_records(&self.id) {
            // The head is not written in format 2 yet (`run` saves the whole
            // journal before its first step, so this is a safety net).
            change(self.journal.lock().await.consumer_mut(name).expect("consumer in journal"));
            return self.save().await;
        }
        let (key, value) = {
            let mut j = self.journal.lock().await;
            change(j.consumer_mut(name).expect("consumer in journal"));
            JournalStore::consumer_record(&j, name)
        };
        self.hold_lease().await?;
        self.store.put_record(&self.id, key, value).await
    }

    /// Saves what changed in the journal, each record written under the lease.
    pub(super) async fn save(&self) -> Result<()> {
        let j = self.journal.lock().await.clone();
        self.store.save_fenced(&j, || self.hold_lease()).await
    }

    /// Tells the `on_exposed` hook, if any, that `what` began or ended.
    pub(super) fn exposed(&self, what: Exposure, open: bool) {
        if let Some(h) = &self.opts.on_exposed {
            h(what, open);
        }
    }

    /// The lease is still ours (renewed if due), else [`Error::Leased`]: a
    /// runner stopped past its lease and taken over writes nothing more.
    pub(super) async fn hold_lease(&self) -> Result<()> {
        self.lease.lock().await.renew_if_due(&self.store).await
    }

    /// Renews the lease and honours Ctrl-C; called in every wait loop.
    pub(super) async fn tick(&self, interruptible: bool) -> Result<()> {
        self.hold_lease().await?;
        if interruptible && *self.shutdown.borrow() {
            let j = self.journal.lock().await;
            let id = &j.id;
            let next = match j.publishers_split() {
                true => format!("publishers may be split between {} and {} (no rollback is exact from here): once every publisher publishes on the target side, `nats-cutover run --resume {id} --proceed` seals {} and finishes", j.from, j.to, j.from),
                false => format!("resume with `nats-cutover run --resume {id}` or undo with `nats-cutover rollback {id}`"),
            };
            return Err(Error::Interrupted {
                id: id.clone(),
                step: j
                    .in_progress
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| j.phase.as_str().into()),
                next,
            });
        }
        Ok(())
    }

    pub(super) async fn begin(&self, step: Step) -> Result<Instant> {
        self.journal.lock().await.start_step(&step, now_ms());
        self.save().await?;
        self.emit(step, EventKind::StepStarted);
        Ok(Instant::now())
    }

    pub(super) async fn done(
        &self,
        step: Step,
        started: Instant,
        phase: Option<Phase>,
        result: StepResult,
    ) -> Result<()> {
        {
            let mut j = self.journal.lock().await;
            j.end_step(now_ms());
            if let Some(p) = phase {
                j.phase = p;
                if p == Phase::Done {
                    // An error a resume got past is history, not advice.
                    j.error = None;
                }
            }
        }
        self.save().await?;
        let name = step.to_string();
        let ms = Some(started.elapsed().as_secs_f64() * 1000.0);
        self.emit(step, EventKind::StepDone { ms, result });
        if let Some(f) = &self.opts.after_step {
            f(&name);
        }
        Ok(())
    }
}

/// A move across systems needs the source side's connection too: run,
/// resume, rollback and verify refuse without it (a rollback that could not
/// reach A once resumed nothing there and left its durables paused for good).
pub fn both_sides(js: &Js, plan: &Plan) -> Result<()> {
    if (plan.external.is_some() || plan.across) && js.source_side().is_none() {
        return Err(Error::Input(format!("migration {} moves {} across systems: give the source side's connection too (--from-server or --from-context)", migration_id(&plan.from, &plan.to), plan.from)));
    }
    Ok(())
}

/// Runs (or resumes) the migration the plan describes. Returns the final journal.
pub async fn run(
    js: &Js,
    plan: Plan,
    opts: &RunOptions,
    sink: &dyn Sink,
    shutdown: watch::Receiver<bool>,
) -> Result<Journal> {
    both_sides(js, &plan)?;
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
    let ctx = Ctx {
        js,
        store: store.clone(),
        lease,
        journal: Mutex::new(journal),
        sink,
        shutdown,
        opts,
        id,
    };
    ctx.save().await?;
    let result = lease_first(&ctx, drive(&ctx).await).await;
    let mut j = ctx.journal.lock().await.clone();
    if matches!(result, Err(Error::Leased { .. })) {
        // Another runner took over while this one was stopped: the journal
        // is its now, and so are the lease and every compensation.
        return result.map(|_| j);
    }
    let held = if result.is_err() { still_held(&ctx).await } else { vec![] };
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
    let _ = ctx.lease.lock().await.release(&store).await;
    result.map(|_| j.clone()).map_err(|e| stopped(e, &j, &held))
}

/// A run's failure, unless its lease was lost meanwhile: a request sent by a
/// runner stopped between its lease check and the send (SIGSTOP, a VM pause)
/// reaches a server another runner has moved on, and its failure (seen in the
/// chaos loop: "stream name already in use", B created and changed
/// meanwhile) is the lease's, not the server's.
async fn lease_first(ctx: &Ctx<'_>, result: Result<()>) -> Result<()> {
    match result {
        Err(e) if !matches!(e, Error::Leased { .. }) => match ctx.hold_lease().await {
            Err(lost @ Error::Leased { .. }) => Err(lost),
            _ => Err(e),
        },
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
fn stopped(e: Error, j: &Journal, held: &[String]) -> Error {
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
        (
            format!("publishers may be split between {} and {}: both hold the subjects, each on its own side, and {} still sources {}; no rollback is exact from here", j.from, j.to, j.to, j.from),
            format!("once every publisher publishes on the target side, `nats-cutover run --resume {id} --proceed` seals {} and finishes", j.from),
        )
    } else if j.phase == Phase::RolledBack {
        (
            format!("nothing was changed (migration {id} ended rolled back)"),
            "fix the cause and run again".to_string(),
        )
    } else if j.phase.committed() {
        (
            format!("past the commit point: {} serves the publishers", j.to),
            format!("`nats-cutover run --resume {id}` finishes the migration"),
        )
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
            format!("`nats-cutover run --resume {id}` continues, `nats-cutover rollback {id}` undoes it"),
        )
    };
    Error::RunStopped { cause: Box::new(e), state, next }
}

async fn drive(ctx: &Ctx<'_>) -> Result<()> {
    if ctx.journal.lock().await.plan.strategy == cutover_core::plan::Strategy::DualWrite {
        return super::dual::drive(ctx).await;
    }
    if ctx.opts.guard {
        return super::guard::drive(ctx).await;
    }
    let phase = || async { ctx.journal.lock().await.phase };
    if phase().await < Phase::ConsumersMoved {
        super::fence::check_instances(ctx).await?;
    }
    if phase().await < Phase::BReady {
        create_b(ctx).await?;
    }
    if phase().await < Phase::CaughtUp {
        catch_up(ctx).await?;
    }
    if phase().await < Phase::ConsumersMoved {
        move_consumers(ctx).await?;
    }
    let split = ctx.journal.lock().await.plan.external.as_ref().is_some_and(|e| e.split_publishers);
    if split && phase().await < Phase::SubjectsMoved {
        super::split::publishers(ctx).await?;
    }
    if phase().await < Phase::SubjectsMoved {
        move_publishers(ctx).await?;
    }
    if phase().await < Phase::Sealed {
        seal_a(ctx).await?;
    }
    if phase().await < Phase::SourceRemoved {
        remove_source(ctx).await?;
    }
    if phase().await < Phase::Done {
        retire(ctx).await?;
    }
    Ok(())
}

async fn create_b(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::CreateB).await?;
    let (to, from, b_config, journaled) = {
        let j = ctx.journal.lock().await;
        (j.to.clone(), j.from.clone(), j.plan.b_config.clone(), j.created_b)
    };
    let created = match ctx.js.stream_info_opt(&to).await? {
        Some((_, b)) => {
            let takes_a = b.config.sources.iter().any(|s| s.name == from)
                || b.config.mirror.as_ref().is_some_and(|m| m.name == from);
            if !takes_a {
                return Err(Error::Unsafe(format!("stream {to} exists but does not source {from}; it was changed since the plan was made")));
            }
            journaled
        }
        None => {
            // Intent first: a runner killed during the create leaves a journal
            // that says B is ours, so rollback deletes it if it exists.
            ctx.journal.lock().await.created_b = true;
            ctx.save().await?;
            let mut cfg = b_config.clone();
            // (A mirror checks no msg-id, so it needs no such start.)
            if cfg.get("mirror").is_none() && dedup_off_while_sourcing(ctx.js) {
                // See raise_window: B starts without dedup and gets A's window
                // once it holds A's history older than that window.
                cfg["duplicate_window"] = json!(0);
            }
            ctx.js.stream_create(&cfg).await?;
            true
        }
    };
    ctx.done(Step::CreateB, t, Some(Phase::BReady), StepResult::CreateB { created }).await
}

async fn catch_up(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::CatchUp).await?;
    let (from, to) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone())
    };
    raise_window(ctx, &from, &to).await?;
    // The retry guarantee rests on B's duplicate window as the server applies it
    // (2.14+ gives a sourcing stream none unless set): check what it reports.
    let (_, b) = ctx.js.stream_info(&to).await?;
    let wanted = ctx.journal.lock().await.plan.retry_horizon_ms as i64 * 1_000_000;
    if b.config.duplicate_window < wanted {
        return Err(Error::Unsafe(format!(
            "{to} reports duplicate_window {} ns, less than the publishers' retry horizon {wanted} ns: retried publishes could land twice; set it on {to} (nats stream edit {to} --dupe-window) and run again",
            b.config.duplicate_window
        )));
    }
    // A moves on under load: catching up means sourcing what A held when this
    // step began; the consumer step waits for exactly what it needs.
    let (_, a) = ctx.js.stream_info(&from).await?;
    let target = a.state.last_seq;
    let mut last_emit = Instant::now();
    let mut stall = Stall::new(ctx.opts.stall_timeout);
    let mut pace = Pace::new(ctx.opts.catch_up_window);
    loop {
        let p = source_progress(ctx.js, &to, &from).await?;
        if p.caught_up || p.sourced_origin_seq.is_some_and(|s| s >= target) {
            break;
        }
        stall.check(&p, &to, &from)?;
        pace.check(&p, &to, &from)?;
        if last_emit.elapsed() > Duration::from_millis(250) {
            let remaining = target.saturating_sub(p.sourced_origin_seq.unwrap_or(0));
            let progress = Progress::CatchUp { remaining, reported_lag: p.reported_lag };
            ctx.emit(Step::CatchUp, EventKind::Progress(progress));
            last_emit = Instant::now();
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
    ctx.done(Step::CatchUp, t, Some(Phase::CaughtUp), StepResult::CatchUp { origin_seq: target })
        .await
}

/// B must receive A's messages at least as fast as A stores them, or the
/// commit could never close: judged over a window of reads
/// (`cutover_core::catchup`).
struct Pace {
    watch: cutover_core::catchup::Watch,
    started: Instant,
}

impl Pace {
    fn new(window: Duration) -> Self {
        Self {
            watch: cutover_core::catchup::Watch::new(window.as_millis() as u64),
            started: Instant::now(),
        }
    }

    fn check(&mut self, p: &super::SourceProgress, to: &str, from: &str) -> Result<()> {
        let sample = cutover_core::catchup::Sample {
            at_ms: self.started.elapsed().as_millis() as u64,
            a_last: p.origin_last_seq,
            b_origin: p.sourced_origin_seq.unwrap_or(0),
        };
        match self.watch.push(sample) {
            None => Ok(()),
            Some(f) => Err(Error::FallingBehind {
                from: from.into(),
                to: to.into(),
                window_s: f.window_ms as f64 / 1000.0,
                a_per_s: f.a_per_s,
                b_per_s: f.b_per_s,
                lag_from: f.lag_from,
                lag_to: f.lag_to,
            }),
        }
    }
}

/// Waits for sourcing are bounded by progress, not by time: B may take hours
/// to catch up a large stream, but not `limit` without sourcing anything new
/// while A has more (a source error, a duplicate msg-id that stalls sourcing
/// on servers before 2.12.8, a full account).
struct Stall {
    limit: Duration,
    last: Option<u64>,
    since: Instant,
}

impl Stall {
    fn new(limit: Duration) -> Self {
        Self { limit, last: None, since: Instant::now() }
    }

    fn check(&mut self, p: &super::SourceProgress, to: &str, from: &str) -> Result<()> {
        if p.sourced_origin_seq != self.last || p.caught_up {
            self.last = p.sourced_origin_seq;
            self.since = Instant::now();
            return Ok(());
        }
        if self.since.elapsed() > self.limit {
            return Err(Error::Stuck(format!(
                "{to} sourced nothing new from {from} for {:?} (it holds origin {} of {}'s {}): see the source's error with `nats stream info {to}` (a duplicate msg-id stalls sourcing on servers before 2.12.8; a full account stops it)",
                self.limit,
                p.sourced_origin_seq.map(|s| s.to_string()).unwrap_or_else(|| "none".into()),
                from,
                p.origin_last_seq
            )));
        }
        Ok(())
    }
}

/// From 2.14 a sourcing stream may have no duplicate window (dedup off:
/// stream.go applies the 2-minute default only to streams that neither mirror
/// nor source).
fn dedup_off_while_sourcing(js: &Js) -> bool {
    js.target_version().is_some_and(|v| v.features().sourcing_streams_get_no_default_dedup_window)
}

/// B's duplicate window must drop nothing A stored, yet catch A's publishers'
/// retries after the commit. A publisher that reuses a msg-id once A's window
/// has passed stores a new message in A; B sourcing A's history receives such
/// repeats milliseconds apart and, with a window, would drop them. So B
/// sources without dedup (created with window 0) until it holds everything A
/// stored more than one window ago, then takes A's window: from there on, two
/// messages with one id that A stored are a window apart in B too. The server
/// keeps its id map on a window change and only records ids while a window is
/// set (stream.go storeMsgIdLocked, updateWithAdvisory), so ids older than the
/// window, which A would no longer deduplicate either, are never compared.
async fn raise_window(ctx: &Ctx<'_>, from: &str, to: &str) -> Result<()> {
    let want = ctx.journal.lock().await.plan.b_config["duplicate_window"].as_i64().unwrap_or(0);
    let (raw, b) = ctx.js.stream_info(to).await?;
    if b.config.duplicate_window >= want || want <= 0 {
        return Ok(());
    }
    let (_, a) = ctx.js.stream_info(from).await?;
    let since = time::OffsetDateTime::now_utc() - nanos(want);
    let since = since.format(&time::format_description::well_known::Rfc3339).expect("format");
    let first_recent = ctx.js.first_since(from, &since, a.config.exact_direct_gets()).await?;
    // B must hold A's messages before `first_recent` (all of A's if none is recent).
    let need = first_recent.map(|m| m.seq.saturating_sub(1)).unwrap_or(a.state.last_seq);
    let mut stall = Stall::new(ctx.opts.stall_timeout);
    loop {
        let p = source_progress(ctx.js, to, from).await?;
        if p.caught_up || p.sourced_origin_seq.is_some_and(|s| s >= need) {
            break;
        }
        stall.check(&p, to, from)?;
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
    let mut cfg = raw["config"].clone();
    cfg["duplicate_window"] = json!(want);
    ctx.js.stream_update(&cfg).await?;
    let progress = Progress::WindowRaised { duplicate_window_ns: want, from_origin_seq: need + 1 };
    ctx.emit(Step::CatchUp, EventKind::Progress(progress));
    Ok(())
}

/// Drain mode holds consumers while it moves them ([`Exposure::Consumers`]):
/// every move runs to its end or its compensation before this returns, so
/// only a runner that dies inside leaves any held.
async fn move_consumers(ctx: &Ctx<'_>) -> Result<()> {
    let drain = ctx.journal.lock().await.plan.mode == Mode::Drain;
    if drain {
        ctx.exposed(Exposure::Consumers, true);
    }
    let moved = move_consumers_now(ctx).await;
    if drain {
        ctx.exposed(Exposure::Consumers, false);
    }
    moved
}

async fn move_consumers_now(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::MoveConsumers).await?;
    let todo: Vec<ConsumerPlan> = {
        let j = ctx.journal.lock().await;
        j.plan
            .consumers
            .iter()
            .filter(|c| {
                j.consumers.iter().any(|p| p.name == c.name && p.phase < ConsumerPhase::Created)
            })
            .cloned()
            .collect()
    };
    // Concurrently (a bounded number at once): each consumer drains on its
    // own; no timer stacks up. Every started move runs to its end (moved, or
    // compensated) before the first error is reported.
    let moves: Vec<_> = todo.iter().map(|c| move_consumer(ctx, c)).collect();
    let results: Vec<Result<()>> = futures::stream::iter(moves)
        .buffer_unordered(ctx.opts.consumers_at_once.max(1))
        .collect()
        .await;
    for r in results {
        r?;
    }
    // A runner killed between journaling a consumer as created and writing its
    // route leaves the route missing: write every moved consumer's route again.
    let (from, to, moved) = {
        let j = ctx.journal.lock().await;
        (
            j.from.clone(),
            j.to.clone(),
            j.consumers
                .iter()
                .filter(|c| c.phase >= ConsumerPhase::Created)
                .cloned()
                .collect::<Vec<_>>(),
        )
    };
    for c in moved {
        publish_moved_route(ctx, &from, &to, &c).await?;
    }
    ctx.done(
        Step::MoveConsumers,
        t,
        Some(Phase::ConsumersMoved),
        StepResult::MoveConsumers { moved: todo.len() },
    )
    .await
}

/// Pauses, settles and checkpoints one consumer, then creates it on B (fence
/// mode: see `super::fence`).
async fn move_consumer(ctx: &Ctx<'_>, cp: &ConsumerPlan) -> Result<()> {
    if ctx.journal.lock().await.plan.mode.is_fenced() {
        return super::fence::move_consumer(ctx, cp).await;
    }
    let (from, to, prior) = ctx.consumer_state(&cp.name).await;
    let (f, held_since) = checkpoint(ctx, cp, &from, &prior).await?;
    let pos = position(ctx, cp, (&from, &to), f, &prior, async { Ok(()) }).await?;
    moved(ctx, &cp.name, &from, &to, f, pos, held_since).await
}

impl Ctx<'_> {
    /// A, B and the journaled progress of consumer `name`.
    pub(super) async fn consumer_state(
        &self,
        name: &str,
    ) -> (String, String, cutover_core::journal::ConsumerProgress) {
        let j = self.journal.lock().await;
        let p = j.consumers.iter().find(|p| p.name == name).cloned().expect("consumer in journal");
        (j.from.clone(), j.to.clone(), p)
    }
}

/// Translates checkpoint `f` (while `alongside` runs: fence mode pauses the
/// old consumer for good meanwhile) and creates the new durable there
/// (journaled); returns its start and the gets the translation used. A
/// failure gives the old durable back its state first (unless the server
/// cannot say whether the new one exists: then it stays paused).
pub(super) async fn position(
    ctx: &Ctx<'_>,
    cp: &ConsumerPlan,
    (from, to): (&str, &str),
    f: u64,
    prior: &cutover_core::journal::ConsumerProgress,
    alongside: impl std::future::Future<Output = Result<()>>,
) -> Result<(u64, u32)> {
    let name = cp.name.as_str();
    let (translated, done) = tokio::join!(translate(ctx, from, to, f), alongside);
    let (start, gets) = match translated.and_then(|x| done.map(|_| x)) {
        Ok(x) => x,
        Err(e) => {
            let _ = undo_consumer(ctx, from, name, prior).await;
            return Err(e);
        }
    };
    let mut cfg = cp.b_config.clone();
    let work_queue = cfg["deliver_policy"] == "all";
    if work_queue {
        // A work-queue B (the plan allows it only as a mirror): the durable
        // delivers all, so B's copies below its start on its filters go first;
        // the old durable processed them (nothing was ack-pending at F).
        // Purging again on resume removes nothing more.
        if let Err(e) = purge_below(ctx, to, &cp.b_filters, start).await {
            let _ = undo_consumer(ctx, from, name, prior).await;
            return Err(e);
        }
    } else {
        cfg["opt_start_seq"] = json!(start);
    }
    if let Some(until) = &prior.paused_until {
        // The operator paused it: it stays paused on B until the same time.
        cfg["pause_until"] = json!(until);
    }
    if let Err(e) = create_durable(ctx, to, name, &cfg, start).await {
        if matches!(e, Error::Stuck(_)) {
            return Err(e);
        }
        // Compensate: the new durable does not exist (create_durable checked),
        // so the old one takes over again as if nothing happened.
        undo_consumer(ctx, from, name, prior).await?;
        return Err(e);
    }
    Ok((start, gets))
}

/// Purges `stream` below `start` on each filter (all of it with none).
async fn purge_below(ctx: &Ctx<'_>, stream: &str, filters: &[String], start: u64) -> Result<()> {
    if filters.is_empty() {
        ctx.js.stream_purge_below(stream, None, start).await?;
    }
    for f in filters {
        ctx.js.stream_purge_below(stream, Some(f), start).await?;
    }
    Ok(())
}

/// The consumer's checkpoint F: journaled already (a resumed run), or taken
/// now by draining it, then journaled with its evidence. A drain that fails
/// gives the old durable back before reporting.
async fn checkpoint(
    ctx: &Ctx<'_>,
    cp: &ConsumerPlan,
    from: &str,
    prior: &cutover_core::journal::ConsumerProgress,
) -> Result<(u64, Instant)> {
    let name = cp.name.as_str();
    if let (ConsumerPhase::Settled | ConsumerPhase::Creating, Some(f)) =
        (prior.phase, prior.checkpoint)
    {
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
        p.evidence = Some(super::fence::settled_state(&ci));
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

/// The new durable exists: journal it, publish its route, report the move
/// (its gap: from `held_since`, when the old consumer last stopped
/// delivering, to the route's publication).
async fn moved(
    ctx: &Ctx<'_>,
    name: &str,
    from: &str,
    to: &str,
    f: u64,
    (start, gets): (u64, u32),
    held_since: Instant,
) -> Result<()> {
    ctx.journal_consumer(name, |p| {
        p.phase = ConsumerPhase::Created;
        p.b_start = Some(start);
        p.translate_gets = Some(gets);
    })
    .await?;
    let route = Route::moved(from, to, name, &ctx.id, f, start);
    ctx.hold_lease().await?;
    ctx.store.put_route(from, name, &route).await?;
    retire_route_back(ctx, from, to, name).await?;
    // The pause that held lasts until the route is out: the longest pause
    // is at least the gap (a journal write that waited on its bucket kept
    // it paused after it settled: a newcomer saw 8 ms beside an 8 s gap).
    let gap_ms = held_since.elapsed().as_secs_f64() * 1000.0;
    let longest_pause_ms = ctx
        .journal
        .lock()
        .await
        .consumer_mut(name)
        .and_then(|c| c.longest_pause_ms)
        .map(|l| l.max(gap_ms as u64));
    let moved = Progress::Moved {
        checkpoint: f,
        b_start: start,
        translate_gets: gets,
        gap_ms,
        longest_pause_ms,
    };
    ctx.emit(Step::Consumer(name.into()), EventKind::Progress(moved));
    if let Some(h) = &ctx.opts.after_step {
        h(&format!("consumer_created:{name}"));
    }
    Ok(())
}

/// Writes moved consumer `c`'s route (state `moved`, at its journaled
/// checkpoint and start) and retires the route an earlier move left
/// pointing back.
pub(super) async fn publish_moved_route(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    c: &cutover_core::journal::ConsumerProgress,
) -> Result<()> {
    let (f, start) = (c.checkpoint.unwrap_or(0), c.b_start.unwrap_or(0));
    let mode = ctx.journal.lock().await.plan.mode;
    let route = match mode {
        Mode::Drain => Route::moved(from, to, &c.name, &ctx.id, f, start),
        Mode::Fence | Mode::Rolling => {
            super::fence::route(ctx, (from, to), &c.name, (f, start), RouteState::Moved).await
        }
    };
    ctx.hold_lease().await?;
    ctx.store.put_route(from, &c.name, &route).await?;
    retire_route_back(ctx, from, to, &c.name).await
}

/// A move back (B → A after A → B, as the second hop of an in-place
/// migration) makes the first move's route, `route.<to>.<consumer>` pointing
/// at `from`, obsolete once the durable is back on `to`: it is deleted, so
/// applications following it return to their own binding.
pub(super) async fn retire_route_back(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    name: &str,
) -> Result<()> {
    if ctx.store.route(to, name).await?.is_some_and(|r| r.stream == from) {
        ctx.hold_lease().await?;
        ctx.store.delete_route(to, name).await?;
    }
    Ok(())
}

/// The compensating action of a consumer's move, for a consumer whose new
/// durable does not exist: journal it as waiting, then give the old durable
/// back its state (running, or the operator's pause), also when the journal
/// could not be written (its bucket's leader unreachable: a newcomer's trial
/// saw the consumer left paused for good by a run that said "every consumer
/// is as it was"). A checkpoint the journal may still hold is then stale,
/// and never trusted: it is used again only while the old consumer has
/// delivered nothing since it was taken ([`checkpoint_holds`]).
pub(super) async fn undo_consumer(
    ctx: &Ctx<'_>,
    from: &str,
    name: &str,
    prior: &cutover_core::journal::ConsumerProgress,
) -> Result<()> {
    let journaled = ctx
        .journal_consumer(name, |p| {
            p.phase = ConsumerPhase::Waiting;
            p.checkpoint = None;
            p.b_start = None;
        })
        .await;
    if can_pause(ctx.js) {
        ctx.js.consumer_pause(from, name, prior.paused_until.as_deref()).await?;
    }
    journaled
}

/// Whether a journaled checkpoint (F, with the consumer state it was taken
/// from) still holds for a resumed run: the old consumer, paused for good
/// again now, has delivered nothing since. A compensation that gave the
/// consumer back without journaling it ([`undo_consumer`]) leaves one that
/// does not: the consumer is then drained (or gated) again. Without consumer
/// pause (< 2.11) the drain never paused it: the journal is taken as it is.
pub(super) async fn checkpoint_holds(
    ctx: &Ctx<'_>,
    from: &str,
    name: &str,
    prior: &cutover_core::journal::ConsumerProgress,
) -> Result<bool> {
    if !can_pause(ctx.js) {
        return Ok(true);
    }
    let Some(evidence) = &prior.evidence else {
        return Ok(false);
    };
    ctx.js.consumer_pause(from, name, Some(FOREVER)).await?;
    let (_, ci) = ctx.js.consumer_info(from, name).await?;
    Ok(ci.paused && ci.delivered.stream_seq == evidence.delivered_stream_seq)
}

/// After a failed run: every consumer the journal calls waiting is given
/// back its state if this run still holds it paused (a compensation that
/// could not resume it, a drain dropped part way). Returns the ones the
/// server did not let go, for the message.
async fn still_held(ctx: &Ctx<'_>) -> Vec<String> {
    if !can_pause(ctx.js) {
        return vec![];
    }
    let (from, waiting) = {
        let j = ctx.journal.lock().await;
        let waiting: Vec<_> =
            j.consumers.iter().filter(|c| c.phase == ConsumerPhase::Waiting).cloned().collect();
        (j.from.clone(), waiting)
    };
    let mut held = vec![];
    for c in waiting {
        // Only a consumer the server shows held is given back (or named):
        // one it cannot show is not claimed either way.
        let back = match ctx.js.consumer_info_opt(&from, &c.name).await {
            Ok(Some((_, ci))) if ci.paused != c.was_paused => {
                ctx.js.consumer_pause(&from, &c.name, c.paused_until.as_deref()).await.is_ok()
            }
            _ => true,
        };
        if !back {
            held.push(c.name);
        }
    }
    held
}

/// Creates the new durable at `start`, journaling the intent first. A durable of
/// that name already on B is accepted only if it is ours (a runner died after
/// creating it): positioned at the journaled start. On error the durable does
/// not exist.
pub(super) async fn create_durable(
    ctx: &Ctx<'_>,
    to: &str,
    name: &str,
    cfg: &Value,
    start: u64,
) -> Result<()> {
    ctx.journal_consumer(name, |p| {
        p.phase = ConsumerPhase::Creating;
        p.b_start = Some(start);
    })
    .await?;
    // Ours: positioned at the start, or on a work queue (delivers all; B is
    // created by this run, so no one else made a durable there).
    let ours =
        |c: &ConsumerInfo| c.config.opt_start_seq == Some(start) || cfg["deliver_policy"] == "all";
    if let Some((_, existing)) = ctx.js.consumer_info_opt(to, name).await? {
        if ours(&existing) {
            return Ok(());
        }
        return Err(Error::Unsafe(format!(
            "consumer {to}/{name} already exists but starts at {:?}, not at the checkpoint's {start}: it was not created by this run; delete it (nats consumer rm {to} {name}) and run again",
            existing.config.opt_start_seq
        )));
    }
    match ctx.js.consumer_create(to, name, cfg, Action::Create).await {
        Ok(_) => Ok(()),
        Err(e) => {
            // The request may have taken effect even though its answer was
            // lost (timeout): ask the server rather than assume.
            match ctx.js.consumer_info_opt(to, name).await {
                Ok(Some((_, c))) if ours(&c) => Ok(()),
                Ok(None) => Err(e),
                // Unknown: the old consumer must stay paused; resume decides.
                _ => Err(Error::Stuck(format!("creating consumer {to}/{name} failed ({e}) and the server could not say whether it exists; the old durable stays paused; run again to continue or roll back"))),
            }
        }
    }
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
    let mut d = Drain {
        ctx,
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
            return Err(Error::Stuck(format!(
                "consumer {stream}/{name} did not settle: {} message(s) still unacknowledged; the consumer was resumed, nothing moved; check its workers",
                ci.num_ack_pending
            )));
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
        let (_, again) = self.ctx.js.consumer_info(self.stream, self.name).await?;
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
        Ok(())
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

/// The first B sequence after origin sequence F, once B has sourced F.
async fn translate(ctx: &Ctx<'_>, from: &str, to: &str, f: u64) -> Result<(u64, u32)> {
    let mut stall = Stall::new(ctx.opts.stall_timeout);
    let mut checked = Instant::now();
    loop {
        if let Some(r) = translate_once(ctx.js, from, to, f).await? {
            return Ok(r);
        }
        // The stall check costs its own reads: a few a second are plenty for
        // a limit of seconds, not one per poll.
        if checked.elapsed() > Duration::from_millis(250) {
            stall.check(&source_progress(ctx.js, to, from).await?, to, from)?;
            checked = Instant::now();
        }
        ctx.tick(true).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
}

/// One attempt at translating checkpoint `F` of `from` into `to`'s sequence
/// space: `None` while `to` has not yet sourced everything of `from` up to F,
/// else the start sequence and the number of gets the search used.
pub async fn translate_once(js: &Js, from: &str, to: &str, f: u64) -> Result<Option<(u64, u32)>> {
    let (_, a) = js.stream_info(from).await?;
    let (_, b) = js.stream_info(to).await?;
    if b.config.mirror.as_ref().is_some_and(|m| m.name == from) {
        // A mirror has A's sequences: the start is F + 1 once it holds F (or
        // A has nothing between what the mirror holds and F).
        let held = b.state.last_seq >= f
            || js
                .next_matching(from, b.state.last_seq + 1, ">", a.config.exact_direct_gets())
                .await?
                .is_none_or(|m| m.seq > f);
        return Ok(held.then_some((f + 1, 0)));
    }
    let b_source = b.config.sources.iter().find(|s| s.name == from).cloned();
    let direct = b.config.exact_direct_gets();
    let last = if b.state.messages == 0 { None } else { js.last_msg(to, direct).await? };
    let last_origin = match &last {
        Some(m) => Some(m.origin_seq(from)?.ok_or_else(|| Error::Unsafe(format!("message {} of {to} did not come from {from}: translation needs every message of {to} to be sourced from {from}", m.seq)))?),
        None => None,
    };
    // B must hold F (or everything A has up to F) before the start is final.
    let sourced_enough = match last_origin {
        Some(o) if o >= f => true,
        _ => {
            // Nothing in A that B sources between what B has and F: B holds all
            // it needs (messages B's source filters out do not count).
            let next = js.next_sourced(&a, b_source.as_ref(), last_origin.unwrap_or(0)).await?;
            next.is_none_or(|seq| seq > f)
        }
    };
    if !sourced_enough {
        return Ok(None);
    }
    // The search's upper end is the last message we read, not the stream
    // info's last_seq: B keeps sourcing between the two reads, and pairing a
    // stale last_seq with a newer message's origin would place the start too
    // early (every message up to the stale end would look <= F).
    let b_last = last.as_ref().map(|m| m.seq).unwrap_or(b.state.last_seq);
    let gets_before = js.gets();
    let mut s = TranslateSearch::new(f, b.state.first_seq, b_last, last_origin);
    while let Some(p) = s.next_probe() {
        let m = js.get_msg(to, p, Lookup::AtOrAfter, Via::direct_if(direct)).await?;
        let probe = match m {
            Some(m) if m.seq <= b_last => {
                let o = m.origin_seq(from)?.ok_or_else(|| {
                    Error::Unsafe(format!("message {} of {to} did not come from {from}", m.seq))
                })?;
                Some((m.seq, o))
            }
            _ => None,
        };
        s.observe(probe);
    }
    let start = s.result().expect("search finished");
    let gets = (js.gets() - gets_before) as u32;
    // If B started sourcing mid-stream, A messages after F but before B's
    // first origin would be skipped: refuse instead.
    if start == b.state.first_seq.max(1) && b.state.messages > 0 {
        if let Some(first) =
            js.get_msg(to, b.state.first_seq, Lookup::AtOrAfter, Via::direct_if(direct)).await?
        {
            if let Some(o) = first.origin_seq(from)? {
                if o > f + 1 {
                    if let Some(seq) = js.next_sourced(&a, b_source.as_ref(), f).await? {
                        if seq < o {
                            return Err(Error::Unsafe(format!("{to} does not hold {from}'s messages from {seq} on (its first is origin {o}); the consumer's checkpoint is {f}: source {from} from the start")));
                        }
                    }
                }
            }
        }
    }
    Ok(Some((start, gets)))
}

/// The commit point: A releases its subjects, B sources A's tail, B takes the
/// subjects. Publishers see "no responders" for this short window and retry
/// with the same Nats-Msg-Id; because B takes the subjects only after it holds
/// every message A accepted, a retry of a message A already stored meets its
/// sourced copy in B's duplicate window, on every server version (2.10-2.12.5
/// stall sourcing on a duplicate arriving by source; here none can).
///
/// All or nothing: the phase `subjects_released` is journaled before A
/// releases anything; if B cannot take the subjects (or does not hold A's tail
/// within the commit timeout), A takes them back before the error is reported.
/// A runner that dies inside the window is reconciled by asking the server who
/// holds the subjects.
async fn move_publishers(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, final_subjects) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone(), j.plan.b_final_subjects.clone())
    };
    let t = ctx.begin(Step::MovePublishers).await?;
    let (_, b) = ctx.js.stream_info(&to).await?;
    if !final_subjects.is_empty() && b.config.subjects == final_subjects {
        // A runner died after B took the subjects: the commit happened.
        let a_final = match ctx.journal.lock().await.a_final_seq {
            Some(s) => s,
            None => ctx.js.stream_info(&from).await?.1.state.last_seq,
        };
        ctx.journal.lock().await.a_final_seq = Some(a_final);
        return ctx
            .done(
                Step::MovePublishers,
                t,
                Some(Phase::SubjectsMoved),
                StepResult::MovePublishers {
                    a_final_seq: a_final,
                    no_stream_window_ms: None,
                    reconciled: true,
                },
            )
            .await;
    }
    // Intent before effect: from here a crash is reconciled with the server.
    ctx.journal.lock().await.phase = Phase::SubjectsReleased;
    ctx.save().await?;
    ctx.exposed(Exposure::Commit, true);
    let released = Instant::now();
    let (committed, given_back) = commit_or_give_back(ctx, &from, &to, &final_subjects).await?;
    let closed = match committed {
        Ok(a_final) => {
            let window_ms = released.elapsed().as_secs_f64() * 1000.0;
            ctx.done(
                Step::MovePublishers,
                t,
                Some(Phase::SubjectsMoved),
                StepResult::MovePublishers {
                    a_final_seq: a_final,
                    no_stream_window_ms: Some(window_ms),
                    reconciled: false,
                },
            )
            .await
        }
        Err(e) => match given_back.expect("given back on error") {
            // B held the subjects after all (its update answered late).
            Ok(true) => reconciled(ctx, &from, t).await,
            Ok(false) => {
                {
                    let mut j = ctx.journal.lock().await;
                    j.phase = Phase::ConsumersMoved;
                    j.a_final_seq = None;
                }
                ctx.save().await?;
                let undone = Warning::CommitUndone { error: e.to_string() };
                ctx.emit(Step::MovePublishers, EventKind::Warning(undone));
                Err(Error::Stuck(format!("the commit did not complete ({e}); {from} holds its subjects again and publishers are served by it; the moved consumers read {from}'s messages through {to}; run again to retry the commit, or roll back")))
            }
            Err(e2) => {
                return Err(Error::Stuck(format!("the commit did not complete ({e}) and giving {from} its subjects back failed too ({e2}): publishers may have no stream; run `nats-cutover run --resume {}` now", ctx.id)))
            }
        },
    };
    // Journaled as closed (or as undone: the error path saved it first).
    ctx.exposed(Exposure::Commit, false);
    closed
}

/// The commit happened though this run could not tell at first: B holds the
/// subjects; A's final sequence is its last.
async fn reconciled(ctx: &Ctx<'_>, from: &str, t: Instant) -> Result<()> {
    let a_final = ctx.js.stream_info(from).await?.1.state.last_seq;
    ctx.journal.lock().await.a_final_seq = Some(a_final);
    let result = StepResult::MovePublishers {
        a_final_seq: a_final,
        no_stream_window_ms: None,
        reconciled: true,
    };
    ctx.done(Step::MovePublishers, t, Some(Phase::SubjectsMoved), result).await
}

/// A guard's run: the runner died inside the commit window (A released its
/// subjects, B had not taken them), so publishers have no stream and nothing
/// else would act before its lease lapses and someone resumes. The guard, a
/// process the CLI's `run` starts beside itself that notices its exit, gives
/// A its subjects back, the compensating action a failed commit runs (or
/// finds that B took them: the commit happened), and stops there: `run
/// --resume` retries the commit, `rollback` undoes the move.
pub(super) async fn close_window(ctx: &Ctx<'_>) -> Result<()> {
    let (phase, from, to, final_subjects) = {
        let j = ctx.journal.lock().await;
        (j.phase, j.from.clone(), j.to.clone(), j.plan.b_final_subjects.clone())
    };
    if phase != Phase::SubjectsReleased {
        return Ok(());
    }
    let t = Instant::now();
    if give_subjects_back(ctx, &from, &to, &final_subjects).await? {
        reconciled(ctx, &from, t).await?;
        return Err(Error::Stuck("its runner died just after the commit point".into()));
    }
    {
        let mut j = ctx.journal.lock().await;
        j.phase = Phase::ConsumersMoved;
        j.a_final_seq = None;
        j.end_step(now_ms());
    }
    ctx.save().await?;
    Err(Error::Stuck(format!(
        "its runner died inside the commit window; the guard gave {from} its subjects back"
    )))
}

/// The commit window and, if it failed, A's subjects given back; with
/// `--answer-publishes` the publishes of the window are answered beside it
/// (`super::bridge`), once a stream holds the subjects again.
async fn commit_or_give_back(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    final_subjects: &[String],
) -> Result<(Result<u64>, Option<Result<bool>>)> {
    let bridge = match ctx.opts.answer_publishes {
        true => {
            let subjects = ctx.journal.lock().await.a_subjects.clone();
            Some(super::bridge::Bridge::open(&ctx.js.client, &subjects).await?)
        }
        false => None,
    };
    let committed = commit_window(ctx, from, to, final_subjects).await;
    let given_back = match &committed {
        Ok(_) => None,
        Err(_) => Some(give_subjects_back(ctx, from, to, final_subjects).await),
    };
    if let Some(b) = bridge {
        // A stream holds the subjects again (unless giving them back failed).
        let a = b.flush(&ctx.js.client, ctx.opts.commit_timeout).await;
        let (stored, duplicates, failed) = (a.stored, a.duplicates, a.failed);
        let info = Info::Bridged { stored, duplicates, failed };
        ctx.emit(Step::MovePublishers, EventKind::Info(info));
    }
    Ok((committed, given_back))
}

/// The window itself; returns A's final sequence. Bounded by the commit
/// timeout and deaf to Ctrl-C (stopping halfway would leave publishers with no
/// stream; the caller undoes a failure at once).
async fn commit_window(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    final_subjects: &[String],
) -> Result<u64> {
    let (a_raw, a) = ctx.js.stream_info(from).await?;
    let release = released_subjects(from, final_subjects);
    // Hop 1 of an in-place migration: from here B answers A's direct gets
    // (its mirror direct get, inherited from A's allow_direct, outlives the
    // promotion: stream.go update unsubscribes it only when mirror_direct
    // changes), so A, frozen now, stops answering them.
    let out = ctx.journal.lock().await.plan.in_place == Some(InPlaceHop::Out);
    if a.config.subjects != release || (out && a.config.allow_direct) {
        let mut cfg = a_raw["config"].clone();
        cfg["subjects"] = json!(release);
        if out {
            cfg["allow_direct"] = json!(false);
        }
        ctx.js.stream_update(&cfg).await?;
    }
    let (_, a) = ctx.js.stream_info(from).await?;
    ctx.journal.lock().await.a_final_seq = Some(a.state.last_seq);
    if let Some(h) = &ctx.opts.after_step {
        // The worst moment to die: publishers have no stream until a resume.
        h("subjects_released");
    }
    let deadline = Instant::now() + ctx.opts.commit_timeout;
    // Caught up, and A's last sequence the same in two reads: removing its
    // subjects only unsubscribes them, and a publish the server already
    // queued for A is stored after that (stream.go processInboundJetStreamMsg
    // → queueInbound, stored by internalLoop). A message stored after B's
    // last check would never reach a promoted mirror, nor a source removed
    // later. (A reviewer found this; the window is the inbound queue's.)
    let mut seen: Option<u64> = None;
    let a_final = loop {
        let p = source_progress(ctx.js, to, from).await?;
        if p.caught_up && seen == Some(p.origin_last_seq) {
            break p.origin_last_seq;
        }
        seen = p.caught_up.then_some(p.origin_last_seq);
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!(
                "{to} did not source {from}'s last messages (up to {}) within the commit timeout of {:?}",
                a.state.last_seq, ctx.opts.commit_timeout
            )));
        }
        ctx.tick(false).await?;
        tokio::time::sleep(Duration::from_micros(500)).await;
    };
    ctx.journal.lock().await.a_final_seq = Some(a_final);
    let (b_raw, b) = ctx.js.stream_info(to).await?;
    if b.config.subjects != final_subjects {
        let mut cfg = b_raw["config"].clone();
        cfg["subjects"] = json!(final_subjects);
        // A mirror is promoted in the same update: mirror removed, subjects
        // added (2.12+: stream.go configUpdateCheckLocked allows dropping the
        // mirror; updateWithAdvisory stops the mirror consumer).
        // With what the plan keeps for the commit (republish, and what a
        // mirror may not have).
        if let Some(c) = cfg.as_object_mut() {
            c.remove("mirror");
            c.extend(ctx.journal.lock().await.plan.promote_with.clone());
        }
        ctx.js.stream_update(&cfg).await?;
    }
    Ok(a_final)
}

/// The subjects A keeps once it released the publishers' ones: none, unless
/// the server would then give A its own name as subject (a stream without
/// subjects gets one) and B's subjects match that name: then a subject no
/// publisher uses.
pub fn released_subjects(from: &str, final_subjects: &[String]) -> Vec<String> {
    if final_subjects.iter().any(|s| cutover_core::subject::covers(s, from)) {
        vec![format!("_cutover.released.{from}")]
    } else {
        vec![]
    }
}

/// Undo of the commit window: A takes its subjects back, unless B holds them
/// (then the commit happened: `Ok(true)`).
async fn give_subjects_back(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    final_subjects: &[String],
) -> Result<bool> {
    let (_, b) = ctx.js.stream_info(to).await?;
    if !final_subjects.is_empty() && b.config.subjects == final_subjects {
        return Ok(true);
    }
    let (a_subjects, plan) = {
        let j = ctx.journal.lock().await;
        (j.a_subjects.clone(), j.plan.clone())
    };
    let (a_raw, a) = ctx.js.stream_info(from).await?;
    // (An in-place hop 1 also turned A's direct get off: the mirror kept A's
    // setting, so the plan knows it.)
    let direct = match plan.in_place {
        Some(InPlaceHop::Out) => plan.b_config["allow_direct"].as_bool().unwrap_or(false),
        _ => a.config.allow_direct,
    };
    if a.config.subjects != a_subjects || a.config.allow_direct != direct {
        let mut cfg = a_raw["config"].clone();
        cfg["subjects"] = json!(a_subjects);
        cfg["allow_direct"] = json!(direct);
        ctx.js.stream_update(&cfg).await?;
    }
    Ok(false)
}

async fn seal_a(ctx: &Ctx<'_>) -> Result<()> {
    let from = ctx.journal.lock().await.from.clone();
    let t = ctx.begin(Step::SealA).await?;
    let (raw, a) = ctx.js.stream_info(&from).await?;
    if !a.config.sealed {
        let mut cfg = raw["config"].clone();
        cfg["sealed"] = json!(true);
        if let Err(e) = ctx.js.stream_update(&cfg).await {
            // Sent again after its answer was lost (a server restart), the
            // update finds A sealed, which also denies deletes and purges,
            // and the same body would lift that: refused (10052). Whether
            // it took effect is the server's to say.
            if !ctx.js.stream_info(&from).await?.1.config.sealed {
                return Err(e);
            }
        }
    }
    ctx.done(Step::SealA, t, Some(Phase::Sealed), StepResult::Sealed).await
}

async fn remove_source(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone())
    };
    let t = ctx.begin(Step::RemoveSource).await?;
    // No catch-up wait here: B held every message of A before it took the
    // subjects (the commit window waits for that, with A's last sequence
    // stable over two reads, so a publish A had queued is stored and copied
    // first). (B's newest messages are direct publishes now, without a
    // source header, so a header-based probe would not even apply.)
    let (raw, b) = ctx.js.stream_info(&to).await?;
    if b.config.sources.iter().any(|s| s.name == from) {
        let mut cfg = raw["config"].clone();
        let rest: Vec<Value> = cfg["sources"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s["name"] != json!(from))
            .collect();
        if rest.is_empty() {
            cfg.as_object_mut().unwrap().remove("sources");
        } else {
            cfg["sources"] = json!(rest);
        }
        ctx.js.stream_update(&cfg).await?;
    }
    ctx.done(Step::RemoveSource, t, Some(Phase::SourceRemoved), StepResult::SourceRemoved).await
}

/// Drain mode, before the old durables go: each one's state, journaled with
/// it (`retired_state`). Paused for good since its F was taken, it has
/// delivered nothing since; one that shows a delivery above F had its F read
/// short (fence mode saw that once, on a cluster, right after a consumer
/// leader change): warned here, and `verify` does not hold.
async fn last_look(ctx: &Ctx<'_>, from: &str, names: &[String]) -> Result<()> {
    let drain = {
        let j = ctx.journal.lock().await;
        j.plan.mode == Mode::Drain && j.plan.strategy != cutover_core::plan::Strategy::DualWrite
    };
    if !drain || !can_pause(ctx.js) {
        return Ok(());
    }
    let reads: Vec<_> = names.iter().map(|n| ctx.js.consumer_info_opt(from, n)).collect();
    let states: Vec<_> = futures::stream::iter(reads)
        .buffered(ctx.opts.consumers_at_once.max(1))
        .try_collect()
        .await?;
    let mut j = ctx.journal.lock().await;
    for (name, state) in names.iter().zip(states) {
        let Some((_, ci)) = state else { continue };
        let p = j.consumer_mut(name).expect("consumer in journal");
        let f = p.checkpoint.unwrap_or(u64::MAX);
        p.retired_state = Some(super::fence::settled_state(&ci));
        if ci.delivered.stream_seq > f {
            let w = Warning::DeliveredAboveCheckpoint {
                checkpoint: f,
                delivered: ci.delivered.stream_seq,
            };
            ctx.emit(Step::Consumer(name.clone()), EventKind::Warning(w));
        }
    }
    Ok(())
}

async fn retire(ctx: &Ctx<'_>) -> Result<()> {
    let (from, names, delete_old, keep) = {
        let j = ctx.journal.lock().await;
        (
            j.from.clone(),
            j.consumers.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            j.delete_old,
            j.keep_old_consumers,
        )
    };
    let t = ctx.begin(Step::Retire).await?;
    // Kept durables stay paused until year 9999 and A is sealed: they can never
    // deliver again, so applications still bound to them wait (no error) until
    // they are redeployed to the new stream.
    // A sealed A that is gone was deleted here by a runner that died after
    // it: its consumers went with it.
    let a_exists = ctx.js.stream_info_opt(&from).await?.is_some();
    if a_exists {
        last_look(ctx, &from, &names).await?;
    }
    if !keep {
        // Deletes are idempotent (a resumed retire deletes again): sent
        // several at once, all journaled retired once all are done.
        if a_exists {
            let deletes: Vec<_> = names.iter().map(|n| ctx.js.consumer_delete(&from, n)).collect();
            futures::stream::iter(deletes)
                .buffer_unordered(ctx.opts.consumers_at_once.max(1))
                .try_collect::<Vec<()>>()
                .await?;
        }
        let mut j = ctx.journal.lock().await;
        for n in &names {
            j.consumer_mut(n).unwrap().phase = ConsumerPhase::Retired;
        }
    }
    if delete_old && a_exists {
        ctx.js.stream_delete(&from).await?;
    }
    ctx.done(
        Step::Retire,
        t,
        Some(Phase::Done),
        StepResult::Retired { deleted_old_stream: delete_old, kept_old_consumers: keep },
    )
    .await
}
