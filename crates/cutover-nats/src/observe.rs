//! Watching a cut-over from beside the engine: the one event [`Recorder`], the
//! one consumer [`Sampler`], and what a run leaves for its report
//! ([`RunRecord`], assembled by [`run`]). `nats-cutover run`, the live scenario
//! (demo, benchmark) and the metrics all use these; nothing here renders.

use crate::engine::{self, Event, RunOptions, Sink};
use crate::journal::now_ms;
use crate::{Js, Result};
use cutover_core::journal::{migration_id, Journal, Phase};
use cutover_core::plan::Plan;
use cutover_core::verify::Report as VerifyReport;
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Passes the engine's events on, keeping a copy of each.
pub struct Recorder<'a> {
    inner: &'a dyn Sink,
    events: Mutex<Vec<Event>>,
}

impl<'a> Recorder<'a> {
    pub fn new(inner: &'a dyn Sink) -> Self {
        Self { inner, events: Mutex::default() }
    }

    /// Every event emitted so far, in order.
    pub fn into_events(self) -> Vec<Event> {
        self.events.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sink for Recorder<'_> {
    fn emit(&self, e: Event) {
        self.events.lock().unwrap().push(e.clone());
        self.inner.emit(e);
    }
}

/// One read of a consumer's state, `t_ms` after the sampler's `t0`, on the
/// stream whose durable was current then.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerSample {
    pub t_ms: u64,
    pub stream: String,
    pub consumer: String,
    pub num_pending: u64,
    pub num_ack_pending: u64,
}

/// Called with every sample as it is taken (the metrics' consumer gauges).
pub type OnSample = Arc<dyn Fn(&ConsumerSample) + Send + Sync>;

/// What the sampler reads: these consumers, on `to` once their durable exists
/// there, else on `from`.
#[derive(Debug, Clone)]
pub struct Sampled {
    pub from: String,
    pub to: String,
    pub consumers: Vec<String>,
}

impl Sampled {
    pub fn plan(plan: &Plan) -> Self {
        Self {
            from: plan.from.clone(),
            to: plan.to.clone(),
            consumers: plan.consumers.iter().map(|c| c.name.clone()).collect(),
        }
    }
}

/// Reads every consumer of [`Sampled`] every `every` while the engine works:
/// the report's timeline and the metrics' consumer gauges. The engine's own
/// reads are not enough: it reads a consumer only while draining it. Stops
/// when dropped.
pub struct Sampler {
    task: tokio::task::JoinHandle<()>,
    reader: Arc<SampleReader>,
}

struct SampleReader {
    js: Js,
    what: Sampled,
    t0: Instant,
    on_sample: Option<OnSample>,
    samples: Mutex<Vec<ConsumerSample>>,
}

impl SampleReader {
    async fn read(&self) {
        let Sampled { from, to, consumers } = &self.what;
        for c in consumers {
            let cur = match self.js.consumer_info_opt(to, c).await {
                Ok(Some((_, ci))) => Some((to, ci)),
                _ => self
                    .js
                    .consumer_info_opt(from, c)
                    .await
                    .ok()
                    .flatten()
                    .map(|(_, ci)| (from, ci)),
            };
            let Some((stream, ci)) = cur else { continue };
            let s = ConsumerSample {
                t_ms: self.t0.elapsed().as_millis() as u64,
                stream: stream.clone(),
                consumer: c.clone(),
                num_pending: ci.num_pending,
                num_ack_pending: ci.num_ack_pending,
            };
            if let Some(f) = &self.on_sample {
                f(&s);
            }
            self.samples.lock().unwrap().push(s);
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sampler {
    /// Starts reading at once, then every `every`; sample times count from `t0`.
    pub fn start(
        js: Js,
        what: Sampled,
        every: Duration,
        t0: Instant,
        on_sample: Option<OnSample>,
    ) -> Self {
        let reader = Arc::new(SampleReader { js, what, t0, on_sample, samples: Mutex::default() });
        let r = reader.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                r.read().await;
            }
        });
        Self { task, reader }
    }

    /// Stops sampling and reads once more, so the timeline ends with the state
    /// the run left (a short run may fit between two ticks).
    pub async fn finish(mut self) -> Vec<ConsumerSample> {
        self.task.abort();
        // Wait for the aborted task so its last read cannot land after ours.
        let _ = (&mut self.task).await;
        self.reader.read().await;
        let samples = self.reader.samples.lock().unwrap().clone();
        samples
    }
}

/// What a run leaves for its report.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub server_version: String,
    /// Wall clock (ms since the epoch) of t = 0 on the timeline; event
    /// timestamps are wall clock, sample times are relative to this.
    pub started_ms: u64,
    pub plan: Plan,
    pub events: Vec<Event>,
    pub consumer_samples: Vec<ConsumerSample>,
    /// The final journal: the run's, or after a failure the one it left in KV
    /// (absent if it failed before writing one).
    pub journal: Option<Journal>,
    /// The run's error, if it failed (a report of a failed run is the one most
    /// worth reading).
    pub error: Option<String>,
    /// The structural verification of the finished migration (`verify`), or
    /// why it could not run; `None` when not attempted.
    pub verify: Option<std::result::Result<VerifyReport, String>>,
}

impl RunRecord {
    /// The migration's id if the run finished it (only then is it verified).
    pub fn done(&self) -> Option<&str> {
        let j = self.journal.as_ref().filter(|j| j.phase == Phase::Done && self.error.is_none());
        j.map(|j| j.id.as_str())
    }
}

/// What to observe around [`run`].
#[derive(Default)]
pub struct Observe {
    /// Record events and samples and return a [`RunRecord`].
    pub record: bool,
    /// Sample the consumers (also without `record`) and call this with each sample.
    pub on_sample: Option<OnSample>,
}

/// How often [`run`] samples the consumers.
pub const RUN_SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// [`engine::run`] with the sampler and the recorder beside it: the run's
/// result, and with `observe.record` what it left for a report.
pub async fn run(
    js: &Js,
    plan: Plan,
    opts: &RunOptions,
    sink: &dyn Sink,
    shutdown: tokio::sync::watch::Receiver<bool>,
    observe: Observe,
) -> (Result<Journal>, Option<RunRecord>) {
    let (started_ms, t0) = (now_ms(), Instant::now());
    let sampler = (observe.record || observe.on_sample.is_some()).then(|| {
        Sampler::start(js.clone(), Sampled::plan(&plan), RUN_SAMPLE_EVERY, t0, observe.on_sample)
    });
    let rec = Recorder::new(sink);
    let events: &dyn Sink = if observe.record { &rec } else { sink };
    let result = engine::run(js, plan.clone(), opts, events, shutdown).await;
    let samples = match sampler {
        Some(s) => s.finish().await,
        None => vec![],
    };
    if !observe.record {
        return (result, None);
    }
    // A failed run's report matters most: take the journal it left in KV.
    let journal = match &result {
        Ok(j) => Some(j.clone()),
        Err(_) => crate::journal::load_migration(js, &migration_id(&plan.from, &plan.to))
            .await
            .ok()
            .map(|(_, j)| j),
    };
    let record = RunRecord {
        server_version: js.server_version().map(|v| v.to_string()).unwrap_or_default(),
        started_ms,
        plan,
        events: rec.into_events(),
        consumer_samples: samples,
        journal,
        error: result.as_ref().err().map(|e| e.to_string()),
        verify: None,
    };
    (result, Some(record))
}

/// The post-run proof, as `verify` gives it with its defaults: both streams
/// read once, headers only; an error as its message.
pub async fn verify_migration(js: &Js, id: &str) -> std::result::Result<VerifyReport, String> {
    crate::verify::verify(js, id, &crate::verify::VerifyOptions::default(), &|_| {})
        .await
        .map_err(|e| e.to_string())
}
