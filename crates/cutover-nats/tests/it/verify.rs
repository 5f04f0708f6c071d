//! `verify` against a real server: each fault, made by hand on the server after
//! a real migration, is caught and named. (The CLI's verify tests, a correct
//! migration and the live one with the audit, are in crates/nats-cutover.)

use crate::common::*;
use crate::verify_fixture::*;
use cutover_core::journal::Journal;
use cutover_core::plan::PlanRequest;
use cutover_core::verify::{AKnown, Kind};
use cutover_nats::api::Action;
use cutover_nats::engine::{self, events::Collect, RunOptions};
use cutover_nats::journal::{IfMissing, JournalStore};
use cutover_nats::verify::VerifyOptions;
use serde_json::json;
use std::time::Duration;

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
    // Journal writes are compare-and-set on the revision the store read.
    let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
    store.load(&j.id).await.unwrap();
    store.save(&j).await.unwrap();
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
        engine::prepare_plan(&e.js, &PlanRequest::source("ORDERS", "ORDERS_V2", &["worker"]))
            .await
            .unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    let r = check(&e, &VerifyOptions::default()).await;
    assert!(r.holds, "{:#?}", r.offenders);
    assert_eq!((r.streams.a.read, r.consumers[0].a_selected, r.consumers[0].b_sourced), (0, 9, 9));
}
