//! `nats-cutover demo`: a local server, a live workload, a cut-over while it
//! runs, and the evidence. Everything it starts is stopped and removed on exit,
//! Ctrl-C included.

use super::progress::{detect, Render};
use crate::cli::{DemoArgs, ModeArg, StrategyArg};
use crate::exit::{self, Coded};
use crate::render::table;
use cutover_app::load::{Load, LoadConfig, LoadReport};
use cutover_core::journal::Journal;
use cutover_core::plan::{Mode, Plan, PlanRequest, Strategy, DEFAULT_RETRY_HORIZON};
use cutover_nats::engine::{self, Event, RunOptions, Sink};
use cutover_nats::journal::now_ms;
use cutover_nats::Js;
use cutover_testkit::{NatsServer, ServerOptions, PINNED_VERSION};
use serde::Serialize;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const STREAM: &str = "ORDERS";
const NEW_STREAM: &str = "ORDERS_V2";
const CONSUMER: &str = "worker";

/// Consumer state sampled over time for the timeline.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerSample {
    pub t_ms: u64,
    pub stream: String,
    pub num_pending: u64,
    pub num_ack_pending: u64,
}

/// Everything the demo measured; the report renders it.
#[derive(Debug, Clone, Serialize)]
pub struct DemoOutcome {
    pub server_version: String,
    pub rate: u32,
    pub workers: usize,
    pub duration_ms: u64,
    pub started_ms: u64,
    pub load: LoadReport,
    pub consumer_samples: Vec<ConsumerSample>,
    pub events: Vec<serde_json::Value>,
    pub journal: Journal,
    pub plan: Plan,
    pub cutover_ms: f64,
    pub verified: bool,
}

struct Tee<'a> {
    render: &'a Render,
    events: Mutex<Vec<Event>>,
}

impl Sink for Tee<'_> {
    fn emit(&self, e: Event) {
        self.events.lock().unwrap().push(e.clone());
        self.render.emit(e);
    }
}

pub async fn run(json_out: bool, a: DemoArgs) -> anyhow::Result<i32> {
    if a.rate == 0 || a.workers == 0 {
        return Err(Coded(exit::BAD_INPUT, "--rate and --workers must be at least 1".into()).into());
    }
    if !matches!(a.strategy, StrategyArg::Source) || !matches!(a.mode, ModeArg::Drain) {
        return Err(Coded(exit::INCOMPATIBLE, "this version demonstrates --strategy source --mode drain; the other strategies and modes are planned".into()).into());
    }
    if a.duration < Duration::from_secs(2) || a.duration > Duration::from_secs(600) {
        return Err(Coded(exit::BAD_INPUT, "--duration must be between 2s and 10m (the workload is bounded)".into()).into());
    }
    let server = NatsServer::start_with(ServerOptions::default()).map_err(|e| Coded(exit::FAILED, e))?;
    let say = |s: String| {
        if !json_out {
            println!("{s}");
        }
    };
    say(format!("nats-server {PINNED_VERSION} on {} (store in {})", server.url(), server.dir().display()));
    let outcome = tokio::select! {
        r = demo(&server, json_out, &a) => r?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted: stopping the demo server and removing its files");
            drop(server);
            return Ok(exit::INTERRUPTED);
        }
    };
    if let Some(path) = &a.report {
        crate::report::write(path, &outcome).map_err(|e| Coded(exit::BAD_INPUT, format!("cannot write report {}: {e}", path.display())))?;
        say(format!("report: {}", path.display()));
    }
    if json_out {
        println!("{}", serde_json::to_string(&summary_json(&outcome))?);
    } else {
        print_summary(&outcome);
    }
    Ok(if outcome.verified { exit::OK } else { exit::NOT_VERIFIED })
}

async fn demo(server: &NatsServer, json_out: bool, a: &DemoArgs) -> anyhow::Result<DemoOutcome> {
    let client = async_nats::connect(server.url()).await?;
    let js = Js::new(client.clone(), Duration::from_secs(5));
    js.stream_create(&json!({"name": STREAM, "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64, "allow_direct": true})).await?;
    js.consumer_create(STREAM, CONSUMER, &json!({"durable_name": CONSUMER, "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000, "max_deliver": 5}), true).await?;
    let started_ms = now_ms();
    let t0 = Instant::now();
    let cfg = LoadConfig {
        stream: STREAM.into(),
        consumer: CONSUMER.into(),
        subject_prefix: "orders".into(),
        rate: a.rate,
        max_messages: (a.rate as u64) * a.duration.as_secs().max(1) * 2,
        duration: a.duration,
        workers: a.workers,
        processing: a.processing,
        batch: 32,
        retry_horizon: DEFAULT_RETRY_HORIZON,
    };
    let mut load = Load::start(client.clone(), cfg).await;
    let samples: Arc<Mutex<Vec<ConsumerSample>>> = Arc::default();
    let sampler = {
        let (js, samples) = (js.clone(), samples.clone());
        tokio::spawn(async move {
            loop {
                // Whichever durable is current: the new one once it exists.
                let cur = match js.consumer_info_opt(NEW_STREAM, CONSUMER).await {
                    Ok(Some((_, c))) => Some((NEW_STREAM, c)),
                    _ => js.consumer_info_opt(STREAM, CONSUMER).await.ok().flatten().map(|(_, c)| (STREAM, c)),
                };
                if let Some((s, c)) = cur {
                    samples.lock().unwrap().push(ConsumerSample { t_ms: t0.elapsed().as_millis() as u64, stream: s.into(), num_pending: c.num_pending, num_ack_pending: c.num_ack_pending });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // Let the workload settle into a steady state for a third of the run.
    tokio::time::sleep(a.duration / 3).await;
    let req = PlanRequest {
        from: STREAM.into(),
        to: NEW_STREAM.into(),
        consumers: vec![CONSUMER.into()],
        all_consumers: false,
        strategy: Strategy::Source,
        mode: Mode::Drain,
        to_config: None,
        publishers_stopped: false,
        retry_horizon: DEFAULT_RETRY_HORIZON,
    };
    let plan = engine::prepare_plan(&js, &req).await?;
    let render = Render::new(detect(json_out));
    let tee = Tee { render: &render, events: Mutex::new(vec![]) };
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let cut = Instant::now();
    let journal = engine::run(&js, plan.clone(), &RunOptions::default(), &tee, rx).await?;
    let cutover_ms = cut.elapsed().as_secs_f64() * 1000.0;
    render.finish();
    // The workload runs its full course, now against the new stream.
    let remaining = a.duration.saturating_sub(t0.elapsed());
    tokio::time::sleep(remaining).await;
    load.finish_publishing().await;
    let drained = load.drain(Duration::from_secs(30)).await;
    let report = load.stop().await;
    sampler.abort();
    let verified = drained && report.lost.is_empty() && report.duplicated.is_empty() && report.extra.is_empty() && report.publish_failures == 0;
    let events = tee.events.lock().unwrap().iter().map(|e| serde_json::to_value(e).unwrap()).collect();
    let consumer_samples = samples.lock().unwrap().clone();
    Ok(DemoOutcome {
        server_version: js.server_version().map(|v| v.to_string()).unwrap_or_default(),
        rate: a.rate,
        workers: a.workers,
        duration_ms: t0.elapsed().as_millis() as u64,
        started_ms,
        load: report,
        consumer_samples,
        events,
        journal,
        plan,
        cutover_ms,
        verified,
    })
}

fn step_durations(o: &DemoOutcome) -> Vec<(String, f64)> {
    o.events.iter().filter(|e| e["kind"] == "step_done").map(|e| (e["step"].as_str().unwrap_or("").to_string(), e["detail"]["ms"].as_f64().unwrap_or(0.0))).collect()
}

pub fn summary_json(o: &DemoOutcome) -> serde_json::Value {
    let l = &o.load;
    json!({
        "kind": "demo",
        "server_version": o.server_version,
        "published": l.published,
        "processed": l.processed_total,
        "processed_unique": l.processed_unique,
        "lost": l.lost.len(),
        "duplicated": l.duplicated.len(),
        "extra": l.extra.len(),
        "publish_failures": l.publish_failures,
        "publish_retries": l.publish_retries,
        "max_publish_stall_ms": l.max_publish_stall_ms,
        "max_consumer_gap_ms": l.max_consumer_gap_ms,
        "cutover_ms": o.cutover_ms,
        "steps": step_durations(o).into_iter().map(|(s, ms)| json!({"step": s, "ms": ms})).collect::<Vec<_>>(),
        "consumers": o.journal.consumers,
        "verified": o.verified,
    })
}

fn print_summary(o: &DemoOutcome) {
    let l = &o.load;
    println!();
    println!("{}", table(&["measure", "value"], &[
        vec!["published (acked by JetStream)".into(), l.published.to_string()],
        vec!["processed".into(), format!("{} ({} unique)", l.processed_total, l.processed_unique)],
        vec!["lost".into(), l.lost.len().to_string()],
        vec!["duplicated".into(), l.duplicated.len().to_string()],
        vec!["publish retries (same msg-id)".into(), l.publish_retries.to_string()],
        vec!["max publisher stall".into(), format!("{:.1} ms", l.max_publish_stall_ms)],
        vec!["max consumer gap".into(), format!("{:.1} ms", l.max_consumer_gap_ms)],
        vec!["cut-over duration".into(), format!("{:.1} ms", o.cutover_ms)],
    ]));
    println!();
    let rows: Vec<Vec<String>> = step_durations(o).into_iter().map(|(s, ms)| vec![s, format!("{ms:.1} ms")]).collect();
    println!("{}", table(&["step", "duration"], &rows));
    for c in &o.journal.consumers {
        println!("consumer {}: checkpoint F = {} on {}, new durable starts at {} on {} ({} gets), drained in {} ms", c.name, c.checkpoint.unwrap_or(0), o.journal.from, c.b_start.unwrap_or(0), o.journal.to, c.translate_gets.unwrap_or(0), c.drain_ms.unwrap_or(0));
    }
    println!();
    if o.verified {
        println!("VERIFIED: every published message was processed exactly once.");
    } else {
        println!("NOT VERIFIED: lost {:?} duplicated {:?}", &l.lost[..l.lost.len().min(10)], &l.duplicated[..l.duplicated.len().min(10)]);
    }
}
