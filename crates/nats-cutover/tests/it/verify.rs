//! `verify` against a real server: a correct migration verifies clean (live, with
//! the applications' audit), and each fault, made by hand on the server after a
//! real migration, is caught and named.

use crate::common::*;
use crate::run::{finish, load_cfg, orders_stream, request, until_processed, until_published};
use async_nats::jetstream::consumer::pull;
use cutover_core::journal::{Journal, Phase};
use cutover_core::verify::{AKnown, Counts, Kind, Report};
use cutover_demo::load::Load;
use cutover_nats::api::{Action, Lookup, Via};
use cutover_nats::engine::{self, events::Collect, RunOptions};
use cutover_nats::journal::{IfMissing, JournalStore};
use cutover_nats::verify::{verify, VerifyOptions};
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

const ID: &str = "ORDERS.ORDERS_V2";

async fn check(e: &Env, opts: &VerifyOptions) -> Report {
    verify(&e.js, ID, opts, &|_| {}).await.expect("verify runs")
}

/// Only `kind` is wrong, `n` times, in the summary.
fn only(r: &Report, kind: Kind, n: u64) {
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

async fn ack_first(e: &Env, consumer: &str, n: usize) {
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
async fn migrated(e: &Env) -> Journal {
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
    let plan = engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker", "eu"]))
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
async fn publish_direct(e: &Env, n: usize) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_correct_migration_verifies_clean_and_the_cli_exits_0() {
    let e = env().await;
    migrated(&e).await;
    publish_direct(&e, 8).await;
    let r = check(&e, &VerifyOptions::default()).await;
    assert!(r.holds, "{:#?}", r.offenders);
    let w = r.consumers.iter().find(|c| c.name == "worker").unwrap();
    assert_eq!((w.a_selected, w.b_sourced, w.b_direct, w.counts.checked), (21, 21, 8, 29));
    assert_eq!(w.adjacency.last_before_start.unwrap().origin, Some(8));
    assert_eq!(w.adjacency.first_at_start.unwrap().origin, Some(9));
    // The filtered consumer: orders.1 is m-1, m-5, m-9, m-13, m-17 and two direct.
    let eu = r.consumers.iter().find(|c| c.name == "eu").unwrap();
    assert_eq!(
        (eu.a_filters.clone(), eu.a_selected, eu.b_direct),
        (vec!["orders.1".to_string()], 5, 2)
    );
    assert_eq!(r.streams.slip.as_ref().map(|s| s.direct_ids), Some(8));
    assert_eq!((r.streams.b.sourced, r.streams.b.direct), (21, 8));
    // A is not read: `worker` selects everything (A's state says what it
    // holds), `eu`'s selected messages are counted on A and match B's.
    assert_eq!(r.streams.a.read, 0);
    assert_eq!((w.a_known, eu.a_known), (AKnown::State, AKnown::Counted));
    // Nothing left behind: the ordered consumers are gone.
    assert_eq!(e.js.consumer_names("ORDERS").await.unwrap(), Vec::<String>::new());
    assert_eq!(
        e.js.consumer_names("ORDERS_V2").await.unwrap(),
        vec!["eu".to_string(), "worker".to_string()]
    );

    let out = e.cli(&["verify", "--migration", ID, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["holds"], true);
    assert_eq!(v["summary"]["checked"], 29 + 7);
    assert_eq!(v["consumers"][0]["name"], "worker");
    let out = e.cli(&["verify", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "eu"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("HOLDS"), "{out:?}");
    let out = e.cli(&["verify", "--migration", "ORDERS.NOPE"]);
    assert_eq!(out.code, 2, "an unknown migration is bad input: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_deleted_from_b_is_lost() {
    let e = env().await;
    migrated(&e).await;
    e.js.api("delete a message", "STREAM.MSG.DELETE.ORDERS_V2", &json!({"seq": 15})).await.unwrap();
    let r = check(&e, &VerifyOptions::default()).await;
    only(&r, Kind::Lost, 1);
    let o = r.offenders.iter().find(|o| o.kind == Kind::Lost).unwrap();
    assert_eq!(
        (o.consumer.as_deref(), o.a_seq, o.msg_id.as_deref(), o.subject.as_deref()),
        (Some("worker"), Some(15), Some("m-14"), Some("orders.2"))
    );
    let out = e.cli(&["verify", "--migration", ID, "--json"]);
    assert_eq!(out.code, 6, "NOT_VERIFIED: {out:?}");
    assert_eq!(out.json()["summary"]["lost"], 1);
}

/// A filtered consumer is counted on A, not read: a message of its filter
/// missing from B makes the counts differ, and then A is read to name it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_of_a_filtered_consumer_deleted_from_b_is_lost() {
    let e = env().await;
    migrated(&e).await;
    // B's 14 is A's 14: m-13 on orders.1, selected by `eu`.
    e.js.api("delete a message", "STREAM.MSG.DELETE.ORDERS_V2", &json!({"seq": 14})).await.unwrap();
    let r = check(&e, &VerifyOptions { consumers: vec!["eu".into()], ..Default::default() }).await;
    only(&r, Kind::Lost, 1);
    let o = r.offenders.iter().find(|o| o.kind == Kind::Lost).unwrap();
    assert_eq!(
        (o.consumer.as_deref(), o.a_seq, o.msg_id.as_deref(), o.subject.as_deref()),
        (Some("eu"), Some(14), Some("m-13"), Some("orders.1"))
    );
    assert_eq!(r.consumers[0].a_known, AKnown::Read, "the counts differed, so A was read");
    assert_eq!(r.streams.a.read, 5, "only eu's subject");
    assert_eq!(
        e.js.consumer_names("ORDERS").await.unwrap(),
        Vec::<String>::new(),
        "the counting consumers are gone"
    );
}

/// nats-server refuses client publishes carrying `Nats-Stream-Source` (10227),
/// so the duplicate is made the way a real one would arrive: by sourcing A
/// again. A source with another filter is another source to the server (its
/// position is kept per filter), so it starts at `opt_start_seq` even though B
/// already holds that message; the message has no msg-id, so B's duplicate
/// window cannot drop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_duplicated_into_b_is_named() {
    let e = env().await;
    migrated(&e).await;
    let (raw, b) = e.js.stream_info("ORDERS_V2").await.unwrap();
    let mut cfg = raw["config"].clone();
    cfg["sources"] = json!([{"name": "ORDERS", "filter_subject": "orders.9", "opt_start_seq": 21}]);
    e.js.stream_update(&cfg).await.unwrap();
    let before = b.state.messages;
    wait_until("B sources the copy", Duration::from_secs(10), || async {
        e.js.stream_info("ORDERS_V2").await.unwrap().1.state.messages == before + 1
    })
    .await;
    cfg.as_object_mut().unwrap().remove("sources");
    e.js.stream_update(&cfg).await.unwrap();
    let r = check(&e, &VerifyOptions::default()).await;
    only(&r, Kind::Duplicated, 1);
    let o = r.offenders.iter().find(|o| o.kind == Kind::Duplicated).unwrap();
    assert_eq!((o.a_seq, o.b_seq, o.subject.as_deref()), (Some(21), Some(22), Some("orders.9")));
}

/// Recreates the new durable at `b_start + delta` and records that start in the
/// journal, as a faulty translation would have.
async fn restart_new_durable(e: &Env, mut j: Journal, delta: i64) {
    let i = j.consumers.iter().position(|c| c.name == "worker").unwrap();
    let start = (j.consumers[i].b_start.unwrap() as i64 + delta) as u64;
    e.js.consumer_delete("ORDERS_V2", "worker").await.unwrap();
    let mut cfg = j.plan.consumers.iter().find(|c| c.name == "worker").unwrap().b_config.clone();
    cfg["opt_start_seq"] = json!(start);
    e.js.consumer_create("ORDERS_V2", "worker", &cfg, Action::Create).await.unwrap();
    j.consumers[i].b_start = Some(start);
    JournalStore::open(&e.js, IfMissing::ReturnNone)
        .await
        .unwrap()
        .unwrap()
        .save(&j)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_consumer_started_one_too_early_is_an_overlap() {
    let e = env().await;
    let j = migrated(&e).await;
    restart_new_durable(&e, j, -1).await;
    let r = check(&e, &VerifyOptions::default()).await;
    only(&r, Kind::Overlap, 1);
    let o = r.offenders.iter().find(|o| o.kind == Kind::Overlap).unwrap();
    assert_eq!(
        (o.consumer.as_deref(), o.a_seq, o.b_seq, o.msg_id.as_deref()),
        (Some("worker"), Some(8), Some(8), Some("m-7"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_consumer_started_one_too_late_is_a_gap() {
    let e = env().await;
    let j = migrated(&e).await;
    restart_new_durable(&e, j, 1).await;
    let r = check(&e, &VerifyOptions::default()).await;
    only(&r, Kind::Gap, 1);
    let o = r.offenders.iter().find(|o| o.kind == Kind::Gap).unwrap();
    assert_eq!(
        (o.consumer.as_deref(), o.a_seq, o.b_seq, o.msg_id.as_deref()),
        (Some("worker"), Some(9), Some(9), Some("m-8"))
    );
}

/// A publisher retry that outlived B's duplicate window: B's window is lowered
/// to the minimum (100 ms) and the publish of a sourced message's id repeated
/// until B stores it (the wait is on B's answer, not on a timer).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_direct_publish_duplicating_a_sourced_id_is_a_slipped_duplicate() {
    let e = env().await;
    migrated(&e).await;
    publish_direct(&e, 3).await;
    let (raw, _) = e.js.stream_info("ORDERS_V2").await.unwrap();
    let mut cfg = raw["config"].clone();
    cfg["duplicate_window"] = json!(100_000_000);
    e.js.stream_update(&cfg).await.unwrap();
    let stored_at = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    wait_until("B stores the retried id once its window lapsed", Duration::from_secs(10), || {
        let (ctx, stored_at) = (e.ctx.clone(), stored_at.clone());
        async move {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", "m-19");
            let ack = ctx
                .publish_with_headers("orders.3", h, "retry".into())
                .await
                .unwrap()
                .await
                .unwrap();
            stored_at.store(ack.sequence, std::sync::atomic::Ordering::SeqCst);
            !ack.duplicate
        }
    })
    .await;
    let stored_at = stored_at.load(std::sync::atomic::Ordering::SeqCst);
    let r = check(&e, &VerifyOptions::default()).await;
    only(&r, Kind::SlippedDuplicate, 1);
    let o = r.offenders.iter().find(|o| o.kind == Kind::SlippedDuplicate).unwrap();
    assert_eq!((o.a_seq, o.b_seq, o.msg_id.as_deref()), (Some(20), Some(stored_at), Some("m-19")));
}

/// The live cut-over with every worker auditing what it processed: verify with
/// the audit holds; then one record is deleted and another published twice, and
/// both messages are named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_migration_with_audit_verifies_clean_and_names_a_missing_and_a_doubled_record() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.stream(json!({"name": "AUDIT", "subjects": ["audit.>"]})).await;
    let load = Load::start_with_audit(
        e.js.client.clone(),
        load_cfg(1000, 3000),
        Some("audit.orders".into()),
    )
    .await;
    until_processed(&load, 400).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    let after = load.published() + 300;
    until_published(&load, after).await;
    let lr = finish(load).await;
    let opts = VerifyOptions { audit: Some("audit.>".into()), ..Default::default() };
    let r = check(&e, &opts).await;
    assert!(r.holds, "{:#?}", r.offenders);
    let w = &r.consumers[0];
    assert_eq!(w.counts.checked, lr.published);
    assert!(w.b_direct > 0, "publishers moved to B during the run");
    assert_eq!(r.audit.as_ref().unwrap().records, lr.processed_total);
    assert_eq!(w.audit_pending, Some(0));
    // No consumer filters: A's state says which messages it holds, A is not read.
    assert_eq!((r.streams.a.read, w.a_selected), (0, r.streams.a.last_seq));

    // One record lost, one doubled.
    let rec = |seq: u64| {
        let js = e.js.clone();
        async move { js.get_msg("AUDIT", seq, Lookup::Exact, Via::Leader).await.unwrap().unwrap() }
    };
    let deleted: cutover_core::audit::AuditRecord =
        serde_json::from_slice(&rec(100).await.payload).unwrap();
    let doubled = rec(200).await;
    let doubled_rec: cutover_core::audit::AuditRecord =
        serde_json::from_slice(&doubled.payload).unwrap();
    e.js.api("delete a record", "STREAM.MSG.DELETE.AUDIT", &json!({"seq": 100})).await.unwrap();
    e.ctx.publish("audit.orders", doubled.payload.clone()).await.unwrap().await.unwrap();
    let r = check(&e, &VerifyOptions { audit: Some("AUDIT".into()), ..Default::default() }).await;
    assert_eq!(
        (r.summary.audit_lost, r.summary.audit_duplicated, r.summary.audit_unknown),
        (1, 1, 0),
        "{:#?}",
        r.offenders
    );
    assert_eq!(r.summary.failures(), 2);
    let key = |a: Option<u64>, b: Option<u64>| {
        if let Some(a) = a {
            ("ORDERS".to_string(), a)
        } else {
            ("ORDERS_V2".to_string(), b.unwrap())
        }
    };
    let lost = r.offenders.iter().find(|o| o.kind == Kind::AuditLost).unwrap();
    assert_eq!(key(lost.a_seq, lost.b_seq), (deleted.stream.clone(), deleted.seq));
    assert_eq!(lost.msg_id, deleted.msg_id);
    let dup = r.offenders.iter().find(|o| o.kind == Kind::AuditDuplicated).unwrap();
    assert_eq!(key(dup.a_seq, dup.b_seq), (doubled_rec.stream.clone(), doubled_rec.seq));
    let out = e.cli(&["verify", "--migration", ID, "--audit", "AUDIT"]);
    assert_eq!(out.code, 6, "{out:?}");
    assert!(
        out.stdout.contains("audit_lost") && out.stdout.contains("audit_duplicated"),
        "{out:?}"
    );
}

/// A message deleted from A before the migration was never sourced: no consumer
/// filters here, so A is not read and its deleted sequences come from its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn messages_deleted_from_a_before_the_migration_are_not_expected_in_b() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "m", 10).await;
    e.js.api("delete a message", "STREAM.MSG.DELETE.ORDERS", &json!({"seq": 3})).await.unwrap();
    ack_first(&e, "worker", 4).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    let r = check(&e, &VerifyOptions::default()).await;
    assert!(r.holds, "{:#?}", r.offenders);
    assert_eq!((r.streams.a.read, r.consumers[0].a_selected, r.consumers[0].b_sourced), (0, 9, 9));
}
