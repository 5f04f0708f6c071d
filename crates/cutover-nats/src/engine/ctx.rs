//! The run's context: what every step of a cut-over works through.
//!
//! [`Ctx`] holds the connection (fenced by the lease), the journal in memory
//! and its store, the event sink, the shutdown input and the options; its
//! methods are the only way steps journal, emit, renew the lease and wait.
//! [`RunOptions`] are the knobs a run is given, with the hooks the CLI and the
//! tests attach ([`StepHook`], [`ExposureHook`]).

use super::events::{Event, EventKind, Sink, StepResult};
use crate::api::Js;
use crate::error::{Error, Result};
use crate::journal::{now_ms, JournalStore, Lease};
use cutover_core::journal::{ConsumerProgress, Journal, Phase, Step};
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
    /// Answer the publishes on the publishers' subjects during the commit
    /// window (`super::bridge`): those with a msg-id stored once a stream
    /// holds the subjects again, the others "no responders" as soon as no
    /// stream can store them. On by default; needs a [`crate::Js`] made
    /// [`crate::Js::with_options`] (a second connection answers).
    pub answer_publishes: bool,
    /// Publishers split across systems (`External::split_publishers`): go
    /// on to seal A, without the operator's go-ahead, once A stored nothing
    /// for this long (`--seal-when-idle`).
    pub seal_when_idle: Option<Duration>,
    /// How many messages a mirror copy may have in flight from A (2.14+: the
    /// copy reads A through a durable of ours with this `max_ack_pending`;
    /// `steps::create`); 0: the server's own mirror consumer, whose 32 MiB
    /// window queues ahead of A's publish acks (docs/benchmarks.md).
    pub copy_window: u64,
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
            answer_publishes: true,
            seal_when_idle: None,
            copy_window: DEFAULT_COPY_WINDOW,
            after_step: None,
            on_exposed: None,
            guard: false,
            take_over: None,
        }
    }
}

/// [`RunOptions::copy_window`]'s default: publisher stalls under 100 ms while
/// a million messages are copied at 5,000 msg/s on 2 cores (1,000: 26–28 ms
/// in 3 runs, the copies 1.25 times as long; 5,000: 111 ms, one run; the
/// server's own consumer: 463 ms; docs/benchmarks.md).
pub const DEFAULT_COPY_WINDOW: u64 = 1000;

/// Consumer pause exists from 2.11; without it drain takes the
/// publishers-stopped path and nothing is paused or resumed.
pub(in crate::engine) fn can_pause(js: &Js) -> bool {
    js.server_version().is_some_and(|v| v.features().consumer_pause)
}

/// A pause that outlives any runner: used once the new durable exists, when the
/// old one must never deliver again.
pub(in crate::engine) const FOREVER: &str = "9999-01-01T00:00:00Z";

pub(in crate::engine) fn rfc3339_in(d: Duration) -> String {
    let t = time::OffsetDateTime::now_utc() + d;
    t.format(&time::format_description::well_known::Rfc3339).expect("format time")
}

pub(in crate::engine) struct Ctx<'a> {
    pub(in crate::engine) js: &'a Js,
    pub(in crate::engine) store: JournalStore,
    /// Shared with `js`'s fence: every request and every journal or route
    /// write of this runner first checks it still holds the lease.
    lease: Arc<Mutex<Lease>>,
    pub(in crate::engine) journal: Mutex<Journal>,
    sink: &'a dyn Sink,
    shutdown: watch::Receiver<bool>,
    pub(in crate::engine) opts: &'a RunOptions,
    pub(in crate::engine) id: String,
}

impl<'a> Ctx<'a> {
    /// The context of a run that holds `lease` (shared with `js`'s fence)
    /// on the migration `journal` describes.
    pub(in crate::engine) fn new(
        js: &'a Js,
        store: JournalStore,
        lease: Arc<Mutex<Lease>>,
        journal: Journal,
        (sink, shutdown): (&'a dyn Sink, watch::Receiver<bool>),
        opts: &'a RunOptions,
    ) -> Self {
        let id = journal.id.clone();
        Self { js, store, lease, journal: Mutex::new(journal), sink, shutdown, opts, id }
    }

    /// Gives the lease back (the run is over, whatever its result).
    pub(in crate::engine) async fn release_lease(&self) -> Result<()> {
        self.lease.lock().await.release(&self.store).await
    }
}

impl Ctx<'_> {
    pub(in crate::engine) fn emit(&self, step: Step, kind: EventKind) {
        self.sink.emit(Event::new(&self.id, step, kind));
    }

    /// Changes one consumer's progress and saves it: the record of an
    /// intent, or of what just happened. Only this consumer's record is
    /// written (its task is its only writer, so writes of different
    /// consumers, made concurrently, never overwrite each other).
    pub(in crate::engine) async fn journal_consumer(
        &self,
        name: &str,
        change: impl FnOnce(&mut ConsumerProgress),
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
    pub(in crate::engine) async fn save(&self) -> Result<()> {
        let j = self.journal.lock().await.clone();
        self.store.save_fenced(&j, || self.hold_lease()).await
    }

    /// Tells the `on_exposed` hook, if any, that `what` began or ended.
    pub(in crate::engine) fn exposed(&self, what: Exposure, open: bool) {
        if let Some(h) = &self.opts.on_exposed {
            h(what, open);
        }
    }

    /// The lease is still ours (renewed if due), else [`Error::Leased`]: a
    /// runner stopped past its lease and taken over writes nothing more.
    pub(in crate::engine) async fn hold_lease(&self) -> Result<()> {
        self.lease.lock().await.renew_if_due(&self.store).await
    }

    /// Whether the lease is still ours, asked of the bucket.
    pub(in crate::engine) async fn lease_still_ours(&self) -> Result<()> {
        self.lease.lock().await.still_ours(&self.store).await
    }

    /// Renews the lease and honours Ctrl-C; called in every wait loop.
    pub(in crate::engine) async fn tick(&self, interruptible: bool) -> Result<()> {
        self.hold_lease().await?;
        if interruptible && *self.shutdown.borrow() {
            let j = self.journal.lock().await;
            let id = &j.id;
            let next = j.way_on();
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

    pub(in crate::engine) async fn begin(&self, step: Step) -> Result<Instant> {
        self.journal.lock().await.start_step(&step, now_ms());
        self.save().await?;
        self.emit(step, EventKind::StepStarted);
        Ok(Instant::now())
    }

    pub(in crate::engine) async fn done(
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

impl Ctx<'_> {
    /// A, B and the journaled progress of consumer `name`.
    pub(in crate::engine) async fn consumer_state(
        &self,
        name: &str,
    ) -> (String, String, ConsumerProgress) {
        let j = self.journal.lock().await;
        let p = j.consumers.iter().find(|p| p.name == name).cloned().expect("consumer in journal");
        (j.from.clone(), j.to.clone(), p)
    }
}
