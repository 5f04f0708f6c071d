//! A live cut-over scenario: stream and durable on a server, the live workload,
//! the cut-over in the middle of it, and everything measured. The demo, the
//! benchmark and the timeline report all run or render this.

use crate::load::{Load, LoadConfig, LoadReport};
use cutover_core::journal::Journal;
use cutover_core::journal::Step;
use cutover_core::plan::{Mode, Plan, PlanRequest, Strategy};
use cutover_nats::api::Action;
use cutover_nats::engine::{self, Event, EventKind, InPlaceRequest, RunOptions, Sink};
use cutover_nats::journal::{now_ms, IfMissing, JournalStore};
use cutover_nats::observe::{ConsumerSample, Recorder, Sampled, Sampler};
use cutover_nats::Js;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the scenario reads the consumer for the timeline.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    /// How `client` was connected: the runner's second connection (its
    /// commit-window answers, `cutover_nats::no_responders`) uses it.
    pub connect: Option<cutover_nats::connect::ConnectOptions>,
    pub load: LoadConfig,
    pub new_stream: String,
    /// When the cut-over starts, from the start of the workload.
    pub cutover_at: Duration,
    pub ack_wait: Duration,
    /// Messages stored before the durable exists (it starts after them): a
    /// big stream to move.
    pub preload: u64,
    /// In place with these new settings (two mirror hops through
    /// `new_stream`) instead of a move to `new_stream`.
    pub in_place: Option<Map<String, Value>>,
    /// The handoff (fence mode runs the workload's workers on the protocol).
    pub mode: Mode,
    /// How B gets the messages: dual-write gives B the subjects
    /// `v2.<prefix>.>`, and the workload's publisher follows the publisher
    /// record and its workers the idempotency guard.
    pub strategy: Strategy,
    /// The workload stream's replicas (3 on a 3-node cluster: B, derived
    /// from A, has as many).
    pub replicas: u32,
}

/// Everything a scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub server_version: String,
    pub rate: u32,
    pub workers: usize,
    pub duration_ms: u64,
    /// Wall clock (ms since the epoch) when the workload started; event
    /// timestamps are wall clock too.
    pub started_ms: u64,
    pub load: LoadReport,
    /// The consumer read every 50 ms, from the start of the workload.
    pub consumer_samples: Vec<ConsumerSample>,
    pub events: Vec<Event>,
    pub journal: Journal,
    pub plan: Plan,
    pub cutover_ms: f64,
    /// In place: the plan's estimate of both copies.
    pub estimate_ms: Option<u64>,
    /// The longest time between two processed messages overlapping the
    /// consumers' move (`move_consumers` starting to `move_publishers`
    /// starting): the consumer gap the handoff caused.
    pub handoff_gap_ms: f64,
    /// The median time between two processed messages before the cut-over.
    pub steady_gap_ms: f64,
    /// The handoff's window (`move_consumers` starting to `move_publishers`
    /// starting), and before the cut-over, over consecutive windows of that
    /// length, the median and the largest of each window's longest gap: the
    /// steady state measured like the handoff.
    pub handoff_window_ms: f64,
    pub steady_window_gap_ms: Option<(f64, f64)>,
    /// Every published message processed exactly once, nothing extra, no
    /// publisher error.
    pub verified: bool,
}

impl Outcome {
    pub fn step_durations(&self) -> Vec<(String, f64)> {
        self.events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::StepDone { ms, .. } => Some((e.step.to_string(), ms.unwrap_or(0.0))),
                _ => None,
            })
            .collect()
    }
}

/// Creates the stream and durable, runs the workload, cuts over at
/// `cutover_at`, lets the workload finish on the new stream, and measures.
pub async fn live_cutover(
    client: async_nats::Client,
    cfg: ScenarioConfig,
    sink: &dyn Sink,
) -> Result<Outcome, cutover_nats::Error> {
    let js = Js::new(client.clone(), Duration::from_secs(5));
    let js = match &cfg.connect {
        Some(o) => js.with_options(o.clone()),
        None => js,
    };
    let l = &cfg.load;
    create_workload_stream(&js, &client, &cfg).await?;
    let started_ms = now_ms();
    let t0 = Instant::now();
    let load_cfg = LoadConfig { protocol: cfg.mode.is_fenced(), ..l.clone() };
    let mut load = if cfg.strategy == Strategy::DualWrite {
        let fail = |e: async_nats::Error| {
            cutover_nats::Error::Stuck(format!("starting the dual-write workload: {e}"))
        };
        Load::start_dual(client.clone(), load_cfg).await.map_err(fail)?
    } else {
        Load::start(client.clone(), load_cfg).await
    };
    let sampled = Sampled {
        from: l.stream.clone(),
        to: cfg.new_stream.clone(),
        consumers: vec![l.consumer.clone()],
    };
    let sampler = Sampler::start(js.clone(), sampled, SAMPLE_EVERY, t0, None);
    tokio::time::sleep(cfg.cutover_at).await;
    let rec = Recorder::new(sink);
    let result = cut_over_beside(&js, &cfg, &rec, &mut load).await;
    let (plan, journal, cutover_ms, estimate_ms) = match result {
        Ok(x) => x,
        Err(e) => {
            drop(sampler);
            let _ = load.stop().await;
            return Err(e);
        }
    };
    // The workload runs its full course, now against the new stream.
    tokio::time::sleep(l.duration.saturating_sub(t0.elapsed())).await;
    load.finish_publishing().await;
    let drained = load.drain(Duration::from_secs(30)).await;
    let mut report = load.stop().await;
    // In place, the durable ends on the stream's own name again.
    let last = if cfg.in_place.is_some() { &l.stream } else { &cfg.new_stream };
    report.count_pending(&js, last, &l.consumer).await;
    let consumer_samples = sampler.finish().await;
    let events = rec.into_events();
    let (handoff_gap_ms, steady_gap_ms, handoff_window_ms, steady_window_gap_ms) =
        handoff_gaps(&events, &report);
    let verified = drained
        && report.lost.is_empty()
        && report.duplicated.is_empty()
        && report.extra.is_empty()
        && report.publish_failures == 0;
    Ok(Outcome {
        server_version: js.server_version().map(|v| v.to_string()).unwrap_or_default(),
        rate: l.rate,
        workers: l.workers,
        duration_ms: t0.elapsed().as_millis() as u64,
        started_ms,
        load: report,
        consumer_samples,
        events,
        journal,
        plan,
        cutover_ms,
        estimate_ms,
        handoff_gap_ms,
        steady_gap_ms,
        handoff_window_ms,
        steady_window_gap_ms,
        verified,
    })
}

/// The workload's stream (preloaded if asked) and its durable (push when
/// the workload's workers are).
async fn create_workload_stream(
    js: &Js,
    client: &async_nats::Client,
    cfg: &ScenarioConfig,
) -> Result<(), cutover_nats::Error> {
    let l = &cfg.load;
    js.stream_create(&json!({"name": l.stream, "subjects": [format!("{}.>", l.subject_prefix)], "duplicate_window": 120_000_000_000i64, "allow_direct": true, "num_replicas": cfg.replicas.max(1)})).await?;
    preload(client, cfg).await?;
    let deliver = if cfg.preload > 0 { "new" } else { "all" };
    let mut durable = json!({"durable_name": l.consumer, "ack_policy": "explicit", "ack_wait": cfg.ack_wait.as_nanos() as u64, "max_ack_pending": 1000, "max_deliver": 5, "deliver_policy": deliver});
    if l.push {
        durable["deliver_subject"] = json!(crate::load::push_subject(l));
        durable["deliver_group"] = json!(crate::load::PUSH_GROUP);
    }
    js.consumer_create(&l.stream, &l.consumer, &durable, Action::Create).await?;
    Ok(())
}

/// The cut-over, and in mode rolling the instances' replacement beside it.
async fn cut_over_beside(
    js: &Js,
    cfg: &ScenarioConfig,
    rec: &Recorder<'_>,
    load: &mut Load,
) -> Result<(Plan, Journal, f64, Option<u64>), cutover_nats::Error> {
    if cfg.mode != Mode::Rolling {
        return cut_over(js, cfg, rec).await;
    }
    let (done_tx, done_rx) = watch::channel(false);
    let cut = async {
        let r = cut_over(js, cfg, rec).await;
        let _ = done_tx.send(true);
        r
    };
    tokio::join!(cut, roll(js, load, cfg, done_rx)).0
}

/// The cut-over itself: a move, or an in-place change (then the journal is
/// hop 2's and the plan hop 1's, with the estimate of both copies).
async fn cut_over(
    js: &Js,
    cfg: &ScenarioConfig,
    rec: &Recorder<'_>,
) -> Result<(Plan, Journal, f64, Option<u64>), cutover_nats::Error> {
    let l = &cfg.load;
    let (_tx, rx) = tokio::sync::watch::channel(false);
    if let Some(settings) = &cfg.in_place {
        let req = InPlaceRequest {
            stream: l.stream.clone(),
            via: Some(cfg.new_stream.clone()),
            consumers: vec![l.consumer.clone()],
            all_consumers: false,
            settings: Some(settings.clone()),
            retry_horizon: Some(l.retry_horizon),
            repoint_publishers: false,
            external: None,
        };
        let outline = engine::outline_in_place(js, &req).await?;
        let cut = Instant::now();
        let (_, j2) = engine::run_in_place(js, &req, &RunOptions::default(), rec, rx).await?;
        let ms = cut.elapsed().as_secs_f64() * 1000.0;
        return Ok((outline.hop1, j2, ms, Some(outline.estimate_ms)));
    }
    let mut req = PlanRequest::source(&l.stream, &cfg.new_stream, &[&l.consumer]);
    req.retry_horizon = Some(l.retry_horizon);
    req.mode = cfg.mode;
    if cfg.mode == Mode::Rolling {
        req.new_version = Some(NEW_VERSION.into());
    }
    req.strategy = cfg.strategy;
    if cfg.strategy == Strategy::DualWrite {
        let subjects = json!([format!("v2.{}.>", l.subject_prefix)]);
        req.to_config = json!({ "subjects": subjects }).as_object().cloned();
    }
    let plan = engine::prepare_plan(js, &req).await?;
    let cut = Instant::now();
    let journal = engine::run(js, plan.clone(), &RunOptions::default(), rec, rx).await?;
    Ok((plan, journal, cut.elapsed().as_secs_f64() * 1000.0, None))
}

/// Mode rolling: the application version the workload's instances are
/// upgraded to (they start as the crate's version).
pub const NEW_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "-next");

/// Mode rolling: once the fence is published (the route exists), replaces
/// the workload's instances one by one with instances of [`NEW_VERSION`], as
/// an operator's rolling deployment would; the runner waits until no live
/// instance is bound to the old consumer. Returns at once if the cut-over
/// ends first (it failed).
async fn roll(js: &Js, load: &mut Load, cfg: &ScenarioConfig, done: watch::Receiver<bool>) {
    let l = &cfg.load;
    let Ok(Some(store)) = JournalStore::open(js, IfMissing::Create).await else { return };
    loop {
        if *done.borrow() {
            return;
        }
        if matches!(store.route(&l.stream, &l.consumer).await, Ok(Some(_))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for i in 0..l.workers {
        load.replace_worker(i, NEW_VERSION).await;
    }
}

/// Stores `cfg.preload` messages of 128 bytes on `{prefix}.pre`: publishes
/// pipelined in batches, each batch's acks awaited.
async fn preload(
    client: &async_nats::Client,
    cfg: &ScenarioConfig,
) -> Result<(), cutover_nats::Error> {
    let ctx = async_nats::jetstream::new(client.clone());
    let subject = format!("{}.pre", cfg.load.subject_prefix);
    let payload = bytes::Bytes::from(vec![b'p'; 128]);
    let fail = |e: String| cutover_nats::Error::Stuck(format!("preloading the stream: {e}"));
    let mut done = 0;
    while done < cfg.preload {
        let n = (cfg.preload - done).min(5_000);
        let mut acks = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let ack = ctx.publish(subject.clone(), payload.clone()).await;
            acks.push(ack.map_err(|e| fail(e.to_string()))?);
        }
        for a in acks {
            a.await.map_err(|e| fail(e.to_string()))?;
        }
        done += n;
    }
    Ok(())
}

/// The consumer gap overlapping the consumers' move (from `move_consumers`
/// starting to `move_publishers` starting), the steady-state median gap
/// before it, the window's length, and the steady state's window maxima
/// over windows of that length (before the cut-over's first step).
fn handoff_gaps(events: &[Event], report: &LoadReport) -> (f64, f64, f64, Option<(f64, f64)>) {
    let (moving, moved) = handoff_window(events);
    let first_step = events.iter().filter(|e| e.kind == EventKind::StepStarted).map(|e| e.ts_ms);
    let cut_start = first_step.min().map(|t| t as f64).unwrap_or(moving);
    (
        report.gap_overlapping(moving, moved),
        report.steady_gap_before(moving),
        moved - moving,
        report.steady_window_gaps(cut_start, moved - moving),
    )
}

/// When `move_consumers` and `move_publishers` started (wall clock, ms).
fn handoff_window(events: &[Event]) -> (f64, f64) {
    let started = |step: Step| {
        let e = events.iter().find(|e| e.step == step && e.kind == EventKind::StepStarted);
        e.map(|e| e.ts_ms as f64).unwrap_or(0.0)
    };
    (started(Step::MoveConsumers), started(Step::MovePublishers))
}
