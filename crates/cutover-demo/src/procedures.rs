//! Migration procedures side by side on one live workload (the benchmark's
//! comparison, issue 14): what an operator does by hand, what a naive switch
//! does, and the engine's strategies, each measured by the same [`Load`]:
//! lost, duplicated, publisher stall, consumer gap, how long it took.
//!
//! The hand-made procedures are done faithfully, with their real flaws; the
//! workers are "redeployed" onto the new durable by writing their route record
//! (instantly: a real redeploy takes longer, so their gaps are a best case).

use crate::load::{Load, LoadConfig, LoadReport};
use cutover_core::journal::Route;
use cutover_core::plan::{Mode, PlanRequest, Strategy};
use cutover_nats::api::Action;
use cutover_nats::engine::{self, events::NoSink, InPlaceRequest, RunOptions};
use cutover_nats::journal::{IfMissing, JournalStore};
use cutover_nats::Js;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// How the consumer and the publishers get from A to B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Procedure {
    /// The seed's advice: pause publishers, wait until the durable has
    /// `num_pending` 0 and `num_ack_pending` 0, wait one `ack_wait`, then
    /// create B (sourcing A for its history), promote it, create the new
    /// durable, switch the workers, resume publishers.
    Manual,
    /// B sources A; a new durable on B with `deliver_policy: new`; workers
    /// switched, the old durable deleted; then A gives up its subjects and B
    /// drops the source and takes them. No pause anywhere.
    NaiveNew,
    /// The same with `deliver_policy: all`.
    NaiveAll,
    /// The engine: strategy source, mode drain.
    Drain,
    /// The engine: strategy mirror, mode drain.
    Mirror,
    /// The engine: mode fence (the workers follow docs/protocol.md).
    Fence,
    /// The engine in place: A keeps its name, `storage=memory`, two mirror
    /// hops through `<A>_CUTOVER`.
    InPlace,
    /// The engine: strategy dual-write (B with subjects `v2.<prefix>.>`); the
    /// publisher follows the publisher record (the library's
    /// `DualPublisher`), the workers are guarded by msg-id.
    DualWrite,
    /// The engine: strategy source, mode drain, with a publisher that never
    /// retries (one attempt, 5 s for its ack, as a plain client's publish):
    /// "no responders" during the commit window is a publish error.
    NoRetry,
    /// The same with `run --answer-publishes`: the runner answers the
    /// publishes of the commit window (`engine/bridge.rs`).
    NoRetryBridge,
}

impl Procedure {
    pub const ALL: [Procedure; 10] = [
        Procedure::Manual,
        Procedure::NaiveNew,
        Procedure::NaiveAll,
        Procedure::Drain,
        Procedure::Mirror,
        Procedure::Fence,
        Procedure::InPlace,
        Procedure::DualWrite,
        Procedure::NoRetry,
        Procedure::NoRetryBridge,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Procedure::Manual => "manual",
            Procedure::NaiveNew => "naive-new",
            Procedure::NaiveAll => "naive-all",
            Procedure::Drain => "drain",
            Procedure::Mirror => "mirror",
            Procedure::Fence => "fence",
            Procedure::InPlace => "in-place",
            Procedure::DualWrite => "dual-write",
            Procedure::NoRetry => "no-retry",
            Procedure::NoRetryBridge => "no-retry-bridge",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The stream the workers read in the end.
    fn final_stream<'a>(&self, a: &'a str, b: &'a str) -> &'a str {
        if *self == Procedure::InPlace {
            a
        } else {
            b
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProcedureConfig {
    /// How `client` was connected (see `ScenarioConfig::connect`).
    pub connect: Option<cutover_nats::connect::ConnectOptions>,
    pub load: LoadConfig,
    pub procedure: Procedure,
    /// B (in place: the temporary stream).
    pub new_stream: String,
    pub cutover_at: Duration,
    pub ack_wait: Duration,
    /// How long the workers get to finish after publishing stops.
    pub drain_deadline: Duration,
}

/// What one run of a procedure measured.
#[derive(Debug, Clone, Serialize)]
pub struct ProcedureOutcome {
    pub procedure: Procedure,
    pub rate: u32,
    /// The engine refused the plan (fence without live instances): nothing ran.
    pub refused: Option<String>,
    pub load: Option<LoadReport>,
    /// Published, never processed, and not pending on the final durable.
    pub lost: u64,
    /// Not processed when the drain deadline passed but still pending (or
    /// ack-pending) on the final durable: late, not lost.
    pub pending: u64,
    pub duplicated: u64,
    pub procedure_ms: f64,
    pub total_ms: f64,
}

/// Runs the workload on a fresh stream A with its durable, applies the
/// procedure at `cutover_at`, lets the workload finish, and measures.
pub async fn run(
    client: async_nats::Client,
    cfg: &ProcedureConfig,
) -> Result<ProcedureOutcome, cutover_nats::Error> {
    let js = Js::new(client.clone(), Duration::from_secs(5));
    let js = match &cfg.connect {
        Some(o) => js.with_options(o.clone()),
        None => js,
    };
    let l = &cfg.load;
    js.stream_create(&json!({"name": l.stream, "subjects": [format!("{}.>", l.subject_prefix)], "duplicate_window": 120_000_000_000i64, "allow_direct": true})).await?;
    js.consumer_create(&l.stream, &l.consumer, &durable(cfg, "all"), Action::Create).await?;
    let mut out = ProcedureOutcome {
        procedure: cfg.procedure,
        rate: l.rate,
        refused: None,
        load: None,
        lost: 0,
        pending: 0,
        duplicated: 0,
        procedure_ms: 0.0,
        total_ms: 0.0,
    };
    let t0 = Instant::now();
    // Fence mode: the workers follow the protocol (registered instances).
    let fenced = cfg.procedure == Procedure::Fence;
    let mut load =
        start_load(&client, cfg.procedure, LoadConfig { protocol: fenced, ..l.clone() }).await?;
    tokio::time::sleep(cfg.cutover_at).await;
    if fenced {
        // A plan that refuses (an older server, no live instance) runs nothing.
        let refused = match engine::prepare_plan(&js, &engine_request(cfg)).await {
            Err(e) => Some(e.to_string()),
            Ok(p) if p.unsafe_findings().next().is_some() => Some(p.unsafe_reasons()),
            Ok(_) => None,
        };
        if refused.is_some() {
            let _ = load.stop().await;
            out.refused = refused;
            return Ok(out);
        }
    }
    let t = Instant::now();
    let done = apply(&js, cfg, &load).await;
    out.procedure_ms = t.elapsed().as_secs_f64() * 1000.0;
    let held = match done {
        Ok(held) => held,
        Err(e) => {
            let _ = load.stop().await;
            // Fence: a refusal is reported (never faked).
            if fenced {
                out.refused = Some(e.to_string());
                return Ok(out);
            }
            return Err(e);
        }
    };
    // The publisher runs its full course (longer by the time it was held).
    tokio::time::sleep((l.duration + held).saturating_sub(t0.elapsed())).await;
    load.finish_publishing().await;
    let final_stream = cfg.procedure.final_stream(&l.stream, &cfg.new_stream);
    let drained = drain_or_idle(&js, &load, final_stream, &l.consumer, cfg.drain_deadline).await;
    let report = load.stop().await;
    out.total_ms = t0.elapsed().as_secs_f64() * 1000.0;
    if !drained {
        out.pending = js
            .consumer_info_opt(final_stream, &l.consumer)
            .await?
            .map_or(0, |(_, c)| c.num_pending + c.num_ack_pending);
    }
    out.lost = (report.lost.len() as u64).saturating_sub(out.pending);
    out.duplicated = report.duplicated.len() as u64;
    out.load = Some(report);
    Ok(out)
}

/// Waits until every published message was processed, or the final durable
/// has nothing left to deliver (nothing pending, nothing awaiting an ack, and
/// its stream not growing, in three reads 200 ms apart), or the deadline
/// passes. Once the durable is idle a message still missing can never come (a
/// naive switch skipped it: lost), so the wait ends there, not at the deadline.
async fn drain_or_idle(
    js: &Js,
    load: &Load,
    stream: &str,
    consumer: &str,
    deadline: Duration,
) -> bool {
    let end = Instant::now() + deadline;
    let (mut idle_reads, mut last_seq) = (0, None);
    while Instant::now() < end {
        if load.drain(Duration::from_millis(200)).await {
            return true;
        }
        let seq = js.stream_info(stream).await.ok().map(|(_, s)| s.state.last_seq);
        let idle = match js.consumer_info_opt(stream, consumer).await {
            Ok(Some((_, c))) => c.num_pending + c.num_ack_pending == 0,
            _ => false,
        };
        idle_reads = if idle && seq.is_some() && seq == last_seq { idle_reads + 1 } else { 0 };
        last_seq = seq;
        if idle_reads >= 2 {
            // What a worker fetched before these reads is recorded by now.
            return load.drain(Duration::from_millis(200)).await;
        }
    }
    false
}

/// The workload each procedure runs under: the library's dual publisher and
/// guarded workers for dual-write, a publisher that never retries for the
/// no-retry rows, else the retrying publisher.
async fn start_load(
    client: &async_nats::Client,
    procedure: Procedure,
    cfg: LoadConfig,
) -> Result<Load, cutover_nats::Error> {
    Ok(match procedure {
        Procedure::DualWrite => Load::start_dual(client.clone(), cfg).await.map_err(|e| {
            cutover_nats::Error::Stuck(format!("starting the dual-write workload: {e}"))
        })?,
        Procedure::NoRetry | Procedure::NoRetryBridge => {
            Load::start_without_retries(client.clone(), cfg, Duration::from_secs(5)).await
        }
        _ => Load::start(client.clone(), cfg).await,
    })
}

/// The workload's durable, as A has it (and the hand-made procedures copy).
fn durable(cfg: &ProcedureConfig, deliver: &str) -> Value {
    json!({"durable_name": cfg.load.consumer, "ack_policy": "explicit", "ack_wait": cfg.ack_wait.as_nanos() as u64, "max_ack_pending": 1000, "max_deliver": 5, "deliver_policy": deliver})
}

fn engine_request(cfg: &ProcedureConfig) -> PlanRequest {
    let l = &cfg.load;
    let mut req = PlanRequest::source(&l.stream, &cfg.new_stream, &[&l.consumer]);
    req.retry_horizon = Some(l.retry_horizon);
    match cfg.procedure {
        Procedure::Mirror => req.strategy = Strategy::Mirror,
        Procedure::Fence => req.mode = Mode::Fence,
        Procedure::DualWrite => {
            req.strategy = Strategy::DualWrite;
            let subjects = json!([format!("v2.{}.>", l.subject_prefix)]);
            req.to_config = json!({ "subjects": subjects }).as_object().cloned();
        }
        _ => {}
    }
    req
}

/// The procedure itself, while the workload runs; how long it held the
/// publishers.
async fn apply(
    js: &Js,
    cfg: &ProcedureConfig,
    load: &Load,
) -> Result<Duration, cutover_nats::Error> {
    let l = &cfg.load;
    let (_tx, rx) = tokio::sync::watch::channel(false);
    match cfg.procedure {
        Procedure::Manual => manual(js, cfg, load).await,
        Procedure::NaiveNew => naive(js, cfg, "new").await.map(|_| Duration::ZERO),
        Procedure::NaiveAll => naive(js, cfg, "all").await.map(|_| Duration::ZERO),
        Procedure::Drain
        | Procedure::Mirror
        | Procedure::Fence
        | Procedure::DualWrite
        | Procedure::NoRetry
        | Procedure::NoRetryBridge => {
            let plan = engine::prepare_plan(js, &engine_request(cfg)).await?;
            let answer_publishes = cfg.procedure == Procedure::NoRetryBridge;
            let opts = RunOptions { answer_publishes, ..RunOptions::default() };
            engine::run(js, plan, &opts, &NoSink, rx).await?;
            Ok(Duration::ZERO)
        }
        Procedure::InPlace => {
            let mut settings = serde_json::Map::new();
            settings.insert("storage".into(), json!("memory"));
            let req = InPlaceRequest {
                stream: l.stream.clone(),
                via: Some(cfg.new_stream.clone()),
                consumers: vec![l.consumer.clone()],
                all_consumers: false,
                settings: Some(settings),
                retry_horizon: Some(l.retry_horizon),
                repoint_publishers: false,
                external: None,
            };
            engine::run_in_place(js, &req, &RunOptions::default(), &NoSink, rx).await?;
            Ok(Duration::ZERO)
        }
    }
}

/// The seed's manual procedure (see [`Procedure::Manual`]).
async fn manual(
    js: &Js,
    cfg: &ProcedureConfig,
    load: &Load,
) -> Result<Duration, cutover_nats::Error> {
    let l = &cfg.load;
    let held = Instant::now();
    load.hold_publishers();
    poll("the durable to drain", || async {
        let (_, c) = js.consumer_info(&l.stream, &l.consumer).await?;
        Ok(c.num_pending == 0 && c.num_ack_pending == 0)
    })
    .await?;
    tokio::time::sleep(cfg.ack_wait).await;
    create_b_sourcing_a(js, cfg).await?;
    js.consumer_create(&cfg.new_stream, &l.consumer, &durable(cfg, "new"), Action::Create).await?;
    move_subjects(js, cfg).await?;
    switch_workers(js, cfg).await?;
    js.consumer_delete(&l.stream, &l.consumer).await?;
    load.release_publishers();
    Ok(held.elapsed())
}

/// The naive switch (see [`Procedure::NaiveNew`]), `deliver` new or all.
async fn naive(js: &Js, cfg: &ProcedureConfig, deliver: &str) -> Result<(), cutover_nats::Error> {
    let l = &cfg.load;
    create_b_sourcing_a(js, cfg).await?;
    js.consumer_create(&cfg.new_stream, &l.consumer, &durable(cfg, deliver), Action::Create)
        .await?;
    switch_workers(js, cfg).await?;
    js.consumer_delete(&l.stream, &l.consumer).await?;
    move_subjects(js, cfg).await
}

/// B sourcing A (A's settings otherwise), and a wait until B holds as many
/// messages as A did when it was created (what `nats stream info` shows an
/// operator).
async fn create_b_sourcing_a(js: &Js, cfg: &ProcedureConfig) -> Result<(), cutover_nats::Error> {
    let a = &cfg.load.stream;
    let b = &cfg.new_stream;
    js.stream_create(&json!({"name": b, "sources": [{"name": a}], "duplicate_window": 120_000_000_000i64, "allow_direct": true})).await?;
    let (_, a_info) = js.stream_info(a).await?;
    poll("B to catch up", || async {
        Ok(js.stream_info(b).await?.1.state.messages >= a_info.state.messages)
    })
    .await
}

/// A gives its subjects up (to a placeholder: a stream without subjects takes
/// its own name), then B drops its source and takes them, in two updates.
async fn move_subjects(js: &Js, cfg: &ProcedureConfig) -> Result<(), cutover_nats::Error> {
    let (a, b) = (&cfg.load.stream, &cfg.new_stream);
    let mut a_cfg = js.stream_info_raw(a).await?["config"].clone();
    let subjects = a_cfg["subjects"].clone();
    a_cfg["subjects"] = json!([format!("_released.{a}")]);
    js.stream_update(&a_cfg).await?;
    let mut b_cfg = js.stream_info_raw(b).await?["config"].clone();
    b_cfg["subjects"] = subjects;
    if let Some(o) = b_cfg.as_object_mut() {
        o.remove("sources");
    }
    js.stream_update(&b_cfg).await?;
    Ok(())
}

/// The workers' redeploy onto B's durable: their route record.
async fn switch_workers(js: &Js, cfg: &ProcedureConfig) -> Result<(), cutover_nats::Error> {
    let l = &cfg.load;
    let store = JournalStore::open(js, IfMissing::Create).await?.expect("bucket");
    let migration = format!("{}-by-hand", cfg.procedure.name());
    let route = Route::moved(&l.stream, &cfg.new_stream, &l.consumer, &migration, 0, 0);
    store.put_route(&l.stream, &l.consumer, &route).await
}

/// Polls `done` every 10 ms, for at most two minutes.
async fn poll<F, Fut>(what: &str, mut done: F) -> Result<(), cutover_nats::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, cutover_nats::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done().await? {
        if Instant::now() > deadline {
            return Err(cutover_nats::Error::Stuck(format!("waiting for {what}")));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
