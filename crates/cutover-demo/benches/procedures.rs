//! Procedures side by side (issue 14; not a test: `cargo test` does not run
//! it). One workload (the Rust publisher with msg-ids and retries, pull
//! workers that ack each message), one fresh pinned server per run, each
//! procedure of `cutover_demo::procedures` applied a third of the way in.
//!
//! First the machine's limit: the workload at full speed (publisher with 256
//! publishes in flight, workers acking) for a few seconds; the highest rate
//! it sustains with acks is 90 % of the smaller of the publish and the
//! ack-consume rate it reached, rounded down to 1,000 msg/s (the rate `max`).
//!
//! `cargo bench -p cutover-demo --bench procedures`. Knobs: PROC_RATES
//! (`1000,5000,20000,max`), PROC_RUNS (3), PROC_SECONDS (6), PROC_WORKERS (8),
//! PROC_PROCESSING_US (0), PROC_ACK_WAIT_S (5), PROC_LIST (every procedure,
//! comma-separated names). Writes target/bench/procedures.json.

#[path = "common/mod.rs"]
mod common;

use common::env_or;
use cutover_demo::load::{Load, LoadConfig};
use cutover_demo::procedures::{self, Procedure, ProcedureConfig, ProcedureOutcome};
use cutover_testkit::{NatsServer, PINNED_VERSION};
use serde_json::{json, Value};
use std::time::Duration;

struct Knobs {
    rates: Vec<String>,
    runs: usize,
    seconds: u64,
    workers: usize,
    processing: Duration,
    ack_wait: Duration,
    list: Vec<Procedure>,
}

impl Knobs {
    fn from_env() -> Self {
        let list: String = env_or("PROC_LIST", String::new());
        let list = if list.is_empty() {
            Procedure::ALL.to_vec()
        } else {
            list.split(',').map(|s| Procedure::parse(s.trim()).expect("a procedure name")).collect()
        };
        Self {
            rates: env_or("PROC_RATES", "1000,5000,20000,max".to_string())
                .split(',')
                .map(|s| s.trim().to_string())
                .collect(),
            runs: env_or("PROC_RUNS", 3),
            seconds: env_or("PROC_SECONDS", 6),
            workers: env_or("PROC_WORKERS", 8),
            processing: Duration::from_micros(env_or("PROC_PROCESSING_US", 0)),
            ack_wait: Duration::from_secs(env_or("PROC_ACK_WAIT_S", 5)),
            list,
        }
    }

    fn load(&self, rate: u32, seconds: u64) -> LoadConfig {
        LoadConfig {
            rate,
            max_messages: rate as u64 * seconds * 4,
            duration: Duration::from_secs(seconds),
            workers: self.workers,
            processing: self.processing,
            batch: 32,
            ..LoadConfig::default()
        }
    }
}

fn main() {
    let k = Knobs::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let limits = rt.block_on(measure_limits(&k));
    let sustained = limits["sustained_per_s"].as_u64().unwrap() as u32;
    eprintln!("limits: {limits}");
    let mut rates: Vec<u32> = vec![];
    for r in &k.rates {
        let r = if r == "max" { sustained } else { r.parse().expect("a rate") };
        if !rates.contains(&r) {
            rates.push(r);
        }
    }
    let mut rows = vec![];
    for &rate in &rates {
        for &p in &k.list {
            for run in 0..k.runs {
                // A procedure that fails is reported, not hidden: its row
                // holds the error.
                let row = match run_once(&rt, &k, p, rate) {
                    Ok(o) => summary(&o),
                    Err(e) => json!({"procedure": p.name(), "rate": rate, "error": e.to_string()}),
                };
                eprintln!("{} at {rate}/s run {}: {row}", p.name(), run + 1);
                rows.push(row);
            }
        }
    }
    let out = json!({
        "server": PINNED_VERSION, "limits": limits, "rates": rates,
        "max_rate": sustained, "runs_per_cell": k.runs, "seconds": k.seconds,
        "workers": k.workers, "processing_us": k.processing.as_micros() as u64,
        "ack_wait_s": k.ack_wait.as_secs(), "runs": rows,
    });
    common::write_json("procedures", &out);
}

/// The machine's limits with this workload, on one fresh server: the
/// publisher alone at full speed, then the whole workload (publisher and
/// workers) at rising rates for 3 s each, a fresh stream each: the highest
/// rate at which the publisher reached 95 % of it and the workers processed
/// 95 % of what was published is the sustained one.
async fn measure_limits(k: &Knobs) -> Value {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut cfg = k.load(1_000_000, 3);
    cfg.workers = 0;
    let (published, _) = limit_step(&client, cfg, 0).await;
    let publish = published as f64 / 3.0;
    let (mut sustained, mut steps) = (0u32, vec![]);
    for (i, rate) in
        [2000u32, 5000, 10000, 15000, 20000, 30000, 40000, 60000].into_iter().enumerate()
    {
        let (published, processed) = limit_step(&client, k.load(rate, 3), i + 1).await;
        let ok = published as f64 >= 0.95 * 3.0 * rate as f64
            && processed as f64 >= 0.95 * published as f64;
        steps.push(
            json!({"rate": rate, "published": published, "processed": processed, "keeps_up": ok}),
        );
        if !ok {
            break;
        }
        sustained = rate;
    }
    json!({"publish_only_per_s": publish, "ramp": steps, "sustained_per_s": sustained.max(1000), "step_s": 3})
}

/// The workload `cfg` for its duration on a fresh stream; what it published
/// and processed by then.
async fn limit_step(client: &async_nats::Client, mut cfg: LoadConfig, i: usize) -> (u64, u64) {
    let js = cutover_nats::Js::new(client.clone(), Duration::from_secs(5));
    cfg.stream = format!("LIMIT{i}");
    cfg.subject_prefix = format!("limit{i}");
    js.stream_create(&json!({"name": cfg.stream, "subjects": [format!("limit{i}.>")], "duplicate_window": 120_000_000_000i64})).await.unwrap();
    js.consumer_create(
        &cfg.stream,
        "worker",
        &json!({"durable_name": "worker", "ack_policy": "explicit", "max_ack_pending": 1000}),
        cutover_nats::api::Action::Create,
    )
    .await
    .unwrap();
    let d = cfg.duration;
    let mut load = Load::start(client.clone(), cfg.clone()).await;
    tokio::time::sleep(d).await;
    let processed = load.processed();
    load.finish_publishing().await;
    let published = load.published();
    let _ = load.stop().await;
    js.stream_delete(&cfg.stream).await.unwrap();
    (published, processed)
}

/// One run of a procedure on a fresh server.
fn run_once(
    rt: &tokio::runtime::Runtime,
    k: &Knobs,
    p: Procedure,
    rate: u32,
) -> Result<ProcedureOutcome, cutover_nats::Error> {
    let server = NatsServer::start();
    let cfg = ProcedureConfig {
        connect: Some(cutover_nats::connect::ConnectOptions {
            server: Some(server.url().to_string()),
            ..Default::default()
        }),
        load: k.load(rate, k.seconds),
        procedure: p,
        new_stream: if p == Procedure::InPlace { "ORDERS_CUTOVER" } else { "ORDERS_V2" }.into(),
        cutover_at: Duration::from_millis(k.seconds * 1000 / 3),
        ack_wait: k.ack_wait,
        drain_deadline: Duration::from_secs(30),
    };
    rt.block_on(async {
        let client = async_nats::connect(server.url()).await.expect("connect");
        procedures::run(client, &cfg).await
    })
}

/// A run as one JSON row (counts, not id lists).
fn summary(o: &ProcedureOutcome) -> Value {
    let l = o.load.as_ref();
    json!({
        "procedure": o.procedure.name(), "rate": o.rate, "refused": o.refused,
        "published": l.map(|l| l.published), "lost": o.lost, "pending": o.pending,
        "duplicated": o.duplicated, "redelivered": l.map(|l| l.redelivered.len()),
        "publish_failures": l.map(|l| l.publish_failures),
        "max_publish_stall_ms": l.map(|l| l.max_publish_stall_ms),
        "max_retried_publish_ms": l.map(|l| l.max_retried_publish_ms),
        "max_consumer_gap_ms": l.map(|l| l.max_consumer_gap_ms),
        "procedure_ms": o.procedure_ms, "total_ms": o.total_ms,
    })
}
