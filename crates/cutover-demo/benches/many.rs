//! Many consumers moved in one run (issue 14; not a test): 1, 100, 400,
//! 1,000 durables of one stream, all moved by one `run` (strategy source, drain).
//!
//! Up to MANY_LIVE (8) of the durables have a live workload each (its own
//! subjects `orders.c<i>.*`, MANY_RATE msg/s, one pull worker following its
//! route, msg-ids and retries), so their gaps, losses and duplicates are
//! measured; the others are idle durables on their own subjects (a durable
//! with nothing pending settles at once, but the engine still pauses,
//! translates, creates and routes each one).
//!
//! `cargo bench -p cutover-demo --bench many`. Knobs: MANY_COUNTS
//! (`1,100,400,1000`), MANY_RUNS (3), MANY_LIVE (8), MANY_RATE (200).
//! Writes target/bench/many.json.

#[path = "common/mod.rs"]
mod common;

use cutover_core::plan::PlanRequest;
use cutover_demo::load::{Load, LoadConfig};
use cutover_nats::api::Action;
use cutover_nats::engine::{self, events::Collect, EventKind, Progress, RunOptions};
use cutover_nats::Js;
use cutover_testkit::{NatsServer, PINNED_VERSION};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn main() {
    let counts: Vec<usize> = common::env_list("MANY_COUNTS", "1,100,400,1000");
    let runs: usize = common::env_or("MANY_RUNS", 3);
    let live: usize = common::env_or("MANY_LIVE", 8);
    let rate: u32 = common::env_or("MANY_RATE", 200);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut rows = vec![];
    for &n in &counts {
        for run in 0..runs {
            let row = rt.block_on(one_run(n, live.min(n), rate));
            eprintln!("{n} durables, run {}: {row}", run + 1);
            rows.push(row);
        }
    }
    common::write_json(
        "many",
        &json!({"server": PINNED_VERSION, "live": live, "rate_per_live": rate, "runs": rows}),
    );
}

fn load_for(i: usize, rate: u32) -> LoadConfig {
    LoadConfig {
        consumer: format!("c{i}"),
        subject_prefix: format!("orders.c{i}"),
        rate,
        max_messages: rate as u64 * 60,
        duration: Duration::from_secs(6),
        workers: 1,
        processing: Duration::ZERO,
        ..LoadConfig::default()
    }
}

/// A fresh server, `n` durables (the first `live` with a workload), one run
/// moving all of them two seconds into the workloads.
async fn one_run(n: usize, live: usize, rate: u32) -> Value {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = Js::new(client.clone(), Duration::from_secs(30));
    js.stream_create(&json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64, "allow_direct": true})).await.unwrap();
    let t = Instant::now();
    for i in 0..n {
        let c = json!({"durable_name": format!("c{i}"), "ack_policy": "explicit", "ack_wait": 30_000_000_000u64, "max_ack_pending": 1000, "filter_subject": format!("orders.c{i}.>")});
        js.consumer_create("ORDERS", &format!("c{i}"), &c, Action::Create).await.unwrap();
    }
    let create_s = t.elapsed().as_secs_f64();
    let mut loads = vec![];
    for i in 0..live {
        loads.push(Load::start_tagged(client.clone(), load_for(i, rate), &format!("c{i}-")).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut req = PlanRequest::source("ORDERS", "ORDERS_V2", &[]);
    req.all_consumers = true;
    req.retry_horizon = Some(Duration::from_secs(120));
    let t = Instant::now();
    let plan = engine::prepare_plan(&js, &req).await.unwrap();
    let plan_s = t.elapsed().as_secs_f64();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let t = Instant::now();
    // A run that fails is reported with its error (the workloads still end).
    let events = Collect::default();
    let result = engine::run(&js, plan, &RunOptions::default(), &events, rx).await;
    let run_s = t.elapsed().as_secs_f64();
    let (worst_move_gap_ms, steps) = gaps_and_steps(&events);
    let (mut lost, mut pending, mut dup, mut gap, mut stall) = (0, 0, 0, 0f64, 0f64);
    for (i, mut l) in loads.into_iter().enumerate() {
        tokio::time::sleep(Duration::from_secs(6).saturating_sub(l.elapsed())).await;
        l.finish_publishing().await;
        l.drain(Duration::from_secs(30)).await;
        let mut r = l.stop().await;
        // Still held by the moved durable: late, not lost.
        r.count_pending(&js, "ORDERS_V2", &format!("c{i}")).await;
        lost += r.lost_count();
        pending += r.pending_on_b;
        dup += r.duplicated.len();
        gap = gap.max(r.max_consumer_gap_ms);
        stall = stall.max(r.max_publish_stall_ms);
    }
    let (moved, worst_drain, error) = match &result {
        Ok(j) => (j.consumers.len(), j.consumers.iter().filter_map(|c| c.drain_ms).max(), None),
        Err(e) => (0, None, Some(e.to_string())),
    };
    json!({"durables": n, "live": live, "create_durables_s": create_s, "plan_s": plan_s,
        "worst_move_gap_ms": worst_move_gap_ms, "steps_ms": steps,
        "run_s": run_s, "moved": moved, "worst_drain_ms": worst_drain, "error": error,
        "live_max_consumer_gap_ms": gap, "live_max_publish_stall_ms": stall,
        "live_lost": lost, "live_pending_on_b": pending, "live_duplicated": dup})
}

/// The worst durable's gap (its pause to its route on B, idle durables
/// included) and where the run's time went, step by step.
fn gaps_and_steps(events: &Collect) -> (f64, serde_json::Map<String, Value>) {
    let events = events.0.lock().unwrap();
    let worst = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Progress(Progress::Moved { gap_ms, .. }) => Some(*gap_ms),
            _ => None,
        })
        .fold(0f64, f64::max);
    let steps = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::StepDone { ms: Some(ms), .. } if e.step.consumer().is_none() => {
                Some((e.step.to_string(), json!(ms)))
            }
            _ => None,
        })
        .collect();
    (worst, steps)
}
