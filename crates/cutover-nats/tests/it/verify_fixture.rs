//! The verify tests' fixture: a real migration without live load, and the
//! checks on its report. The CLI's verify tests (crates/nats-cutover/tests/it/)
//! include this file too.

use crate::common::*;
use async_nats::jetstream::consumer::pull;
use cutover_core::journal::{Journal, Phase};
use cutover_core::plan::PlanRequest;
use cutover_core::verify::{Counts, Kind, Report};
use cutover_nats::engine::{self, events::Collect, RunOptions};
use cutover_nats::verify::{verify, VerifyOptions};
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

pub const ID: &str = "ORDERS.ORDERS_V2";

pub async fn check(e: &Env, opts: &VerifyOptions) -> Report {
    verify(&e.js, ID, opts, &|_| {}).await.expect("verify runs")
}

/// Only `kind` is wrong, `n` times, in the summary.
pub fn only(r: &Report, kind: Kind, n: u64) {
    let mut want = Counts { checked: r.summary.checked, ..Default::default() };
    match kind {
        Kind::Lost => want.lost = n,
        Kind::Duplicated => want.duplicated = n,
        Kind::Gap => want.gaps = n,
        Kind::Overlap => want.overlaps = n,
        Kind::SlippedDuplicate => want.slipped_duplicates = n,
        _ => unreachable!(),
    }
    assert_eq!(r.summary, want, "only {n} {kind:?} expected: {:#?}", r.offenders);
    assert!(!r.holds);
    assert!(r.offenders.iter().any(|o| o.kind == kind), "{kind:?} is listed: {:#?}", r.offenders);
}

pub async fn ack_first(e: &Env, consumer: &str, n: usize) {
    let c = e
        .ctx
        .get_stream("ORDERS")
        .await
        .unwrap()
        .get_consumer::<pull::Config>(consumer)
        .await
        .unwrap();
    let mut acked = 0;
    while acked < n {
        let mut batch = c
            .fetch()
            .max_messages(n - acked)
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .unwrap();
        while let Some(m) = batch.next().await {
            m.unwrap().double_ack().await.unwrap();
            acked += 1;
        }
    }
}

/// A real migration without live load, small enough to reason about: ORDERS
/// holds m-0..m-19 on orders.{i % 4} (sequences 1..20) and one message without
/// a msg-id on orders.9 (21); `worker` (all subjects) processed 8, `eu`
/// (orders.1) processed 2. Both move to ORDERS_V2, which sources ORDERS one to
/// one, so B sequence = A sequence for every sourced message.
pub async fn migrated(e: &Env) -> Journal {
    orders_stream(e, 30_000).await;
    e.consumer(
        "ORDERS",
        json!({"durable_name": "eu", "ack_policy": "explicit", "filter_subject": "orders.1"}),
    )
    .await;
    for i in 0..20 {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("m-{i}").as_str());
        e.ctx
            .publish_with_headers(format!("orders.{}", i % 4), h, "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    e.ctx.publish("orders.9", "no id".into()).await.unwrap().await.unwrap();
    ack_first(e, "worker", 8).await;
    ack_first(e, "eu", 2).await;
    let plan =
        engine::prepare_plan(&e.js, &PlanRequest::source("ORDERS", "ORDERS_V2", &["worker", "eu"]))
            .await
            .unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let w = j.consumers.iter().find(|c| c.name == "worker").unwrap();
    assert_eq!((w.checkpoint, w.b_start), (Some(8), Some(9)), "the fixture's positions");
    j
}

/// Publishes into B (it holds the subjects now) with msg-ids `d-0..`.
pub async fn publish_direct(e: &Env, n: usize) {
    for i in 0..n {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("d-{i}").as_str());
        let ack = e
            .ctx
            .publish_with_headers(format!("orders.{}", i % 4), h, "new".into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.stream, "ORDERS_V2");
    }
}

/// ORDERS on orders.>, with the durable `worker` (every subject).
pub async fn orders_stream(e: &Env, ack_wait_ms: i64) {
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": ack_wait_ms * 1_000_000, "max_ack_pending": 1000})).await;
}
