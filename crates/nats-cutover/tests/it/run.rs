//! The cut-over under live load, end to end, against a real server.

use crate::common::*;
use cutover_app::load::{Load, LoadConfig, LoadReport};
use cutover_core::journal::{ConsumerPhase, Phase};
use cutover_core::plan::{Mode, PlanRequest, Strategy, DEFAULT_RETRY_HORIZON};
use cutover_nats::engine::{self, events::Collect, RunOptions};
use serde_json::json;
use std::time::Duration;

pub fn request(from: &str, to: &str, consumers: &[&str]) -> PlanRequest {
    PlanRequest {
        from: from.into(),
        to: to.into(),
        consumers: consumers.iter().map(|s| s.to_string()).collect(),
        all_consumers: false,
        strategy: Strategy::Source,
        mode: Mode::Drain,
        to_config: None,
        publishers_stopped: false,
        retry_horizon: DEFAULT_RETRY_HORIZON,
    }
}

pub async fn orders_stream(e: &Env, ack_wait_ms: i64) {
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64})).await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": ack_wait_ms * 1_000_000, "max_ack_pending": 1000})).await;
}

pub fn load_cfg(rate: u32, max: u64) -> LoadConfig {
    LoadConfig { rate, max_messages: max, duration: Duration::from_secs(30), workers: 4, ..Default::default() }
}

pub async fn until_processed(load: &Load, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while load.processed() < n {
        assert!(std::time::Instant::now() < deadline, "workers processed only {} of {n}", load.processed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn until_published(load: &Load, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while load.published() < n {
        assert!(std::time::Instant::now() < deadline, "publisher published only {} of {n}", load.published());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn finish(mut load: Load) -> LoadReport {
    load.finish_publishing().await;
    let drained = load.drain(Duration::from_secs(30)).await;
    let r = load.stop().await;
    assert!(drained, "not every published message was processed: lost {:?}", &r.lost[..r.lost.len().min(20)]);
    r
}

pub fn assert_exact(r: &LoadReport) {
    eprintln!(
        "published {} processed {} (unique {}), lost {}, duplicated {}, publish retries {}, max publish stall {:.1} ms, max consumer gap {:.1} ms",
        r.published, r.processed_total, r.processed_unique, r.lost.len(), r.duplicated.len(), r.publish_retries, r.max_publish_stall_ms, r.max_consumer_gap_ms
    );
    assert_eq!(r.publish_failures, 0, "publishers saw errors they could not retry");
    assert!(r.lost.is_empty(), "lost: {:?}", &r.lost[..r.lost.len().min(20)]);
    assert!(r.duplicated.is_empty(), "processed twice: {:?}", &r.duplicated[..r.duplicated.len().min(20)]);
    assert!(r.extra.is_empty(), "processed but never published: {:?}", r.extra);
    assert_eq!(r.processed_unique, r.published);
}

pub async fn assert_finished(e: &Env, from: &str, to: &str, consumer: &str, subjects: serde_json::Value) {
    let (_, a) = e.js.stream_info(from).await.unwrap();
    assert!(a.config.sealed, "{from} is sealed");
    assert!(e.js.consumer_info_opt(from, consumer).await.unwrap().is_none(), "old durable deleted");
    let (_, b) = e.js.stream_info(to).await.unwrap();
    assert_eq!(serde_json::to_value(&b.config.subjects).unwrap(), subjects);
    assert!(b.config.sources.is_empty(), "source removed");
    assert!(e.js.consumer_info_opt(to, consumer).await.unwrap().is_some(), "new durable exists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_cutover_loses_nothing_and_processes_nothing_twice() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let load = Load::start(e.js.client.clone(), load_cfg(1000, 4000)).await;
    until_processed(&load, 500).await;
    let plan = engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    assert!(plan.safe);
    let sink = Collect::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j = engine::run(&e.js, plan, &RunOptions::default(), &sink, rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let c = &j.consumers[0];
    assert_eq!(c.phase, ConsumerPhase::Retired);
    assert!(c.translate_gets.unwrap() <= 3, "one-to-one streams translate in a get or two: {c:?}");
    // Publishers keep going, now into ORDERS_V2, and workers keep up.
    let after = load.published() + 300;
    until_published(&load, after).await;
    let r = finish(load).await;
    assert_exact(&r);
    assert_finished(&e, "ORDERS", "ORDERS_V2", "worker", json!(["orders.>"])).await;
    // Events were reported for every step.
    let steps: Vec<String> = sink.0.lock().unwrap().iter().filter(|e| e.kind == "step_done").map(|e| e.step.clone()).collect();
    assert_eq!(steps, ["create_b", "catch_up", "move_consumers", "move_publishers", "seal_a", "remove_source", "retire"]);
}
