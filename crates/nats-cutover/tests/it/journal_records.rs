//! The journal stored as records (format 2: a head and one record per
//! consumer): a thousand durables move in one run, and a journal left by a
//! runner of format 1 (one value) resumes.

use crate::common::*;
use crate::run::{assert_exact, assert_finished, finish_after, orders_under_load, run_cli};
use cutover_core::journal::{consumer_key, journal_key, ConsumerPhase, Phase, BUCKET};
use cutover_core::plan::PlanRequest;
use cutover_nats::engine::{self, events::NoSink, RunOptions};
use cutover_nats::journal::{IfMissing, JournalStore};
use futures::StreamExt;
use serde_json::json;

const DURABLES: usize = 1000;

/// ORDERS with `n` durables `c<i>` on `orders.c<i>.>`, two messages on each
/// one's subject, and the first of them processed (acked) by every even one.
async fn many_durables(e: &Env, n: usize) {
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64, "allow_direct": true})).await;
    for i in 0..n {
        let cfg = json!({"durable_name": format!("c{i}"), "ack_policy": "explicit", "ack_wait": 30_000_000_000u64, "filter_subject": format!("orders.c{i}.>")});
        e.consumer("ORDERS", cfg).await;
    }
    let mut acks = vec![];
    for k in 0..2 {
        for i in 0..n {
            acks.push(e.ctx.publish(format!("orders.c{i}.{k}"), "m".into()).await.unwrap());
        }
    }
    for a in acks {
        a.await.expect("publish ack");
    }
    let stream = e.ctx.get_stream("ORDERS").await.unwrap();
    for i in (0..n).step_by(2) {
        let c: async_nats::jetstream::consumer::PullConsumer =
            stream.get_consumer(&format!("c{i}")).await.unwrap();
        let mut batch = c.fetch().max_messages(1).messages().await.unwrap();
        let m = batch.next().await.expect("a message").unwrap();
        m.double_ack().await.unwrap();
    }
}

/// Issue 14: 1,000 durables of one stream moved in one run (their journal,
/// about 2 MB, is over the 1 MiB max_payload as one value). Each new durable
/// starts exactly after what its old one processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_durables_move_in_one_run() {
    let e = env().await;
    many_durables(&e, DURABLES).await;
    let mut req = PlanRequest::source("ORDERS", "ORDERS_V2", &[]);
    req.all_consumers = true;
    let plan = engine::prepare_plan(&e.js, &req).await.unwrap();
    assert!(plan.safe, "{}", plan.unsafe_reasons());
    assert_eq!(plan.consumers.len(), DURABLES);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j = engine::run(&e.js, plan, &RunOptions::default(), &NoSink, rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    assert_eq!(j.consumers.len(), DURABLES);
    assert!(j.consumers.iter().all(|c| c.phase == ConsumerPhase::Retired), "all retired");
    assert_finished(&e, "ORDERS", "ORDERS_V2", "c0", json!(["orders.>"])).await;
    let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
    for i in 0..DURABLES {
        let name = format!("c{i}");
        let (_, b) = e.js.consumer_info("ORDERS_V2", &name).await.unwrap();
        let left = if i % 2 == 0 { 1 } else { 2 };
        assert_eq!((b.num_pending, b.num_ack_pending), (left, 0), "{name} on ORDERS_V2");
        let route = store.route("ORDERS", &name).await.unwrap().expect("route");
        assert_eq!((route.stream.as_str(), route.consumer.as_str()), ("ORDERS_V2", &*name));
    }
    // Stored as records, each under the server's max_payload, and read back whole.
    let kv = store.kv();
    let head = kv.get(journal_key(&j.id)).await.unwrap().unwrap();
    assert!(head.len() < e.js.max_payload(), "head {} bytes", head.len());
    let head: serde_json::Value = serde_json::from_slice(&head).unwrap();
    assert_eq!(head["format"], 2);
    assert!(kv.get(consumer_key(&j.id, "c999")).await.unwrap().is_some());
    let (_, back) = cutover_nats::journal::load_migration(&e.js, &j.id).await.unwrap();
    assert_eq!(back, j);
    // Not `verify`: its reader is one more consumer on B, and nats-server
    // 2.15.1 (default limits) refuses a stream's 1,001st consumer ("maximum
    // consumers limit reached", code 10026); the counts above are exact.
}

/// A migration started by a runner of journal format 1 (the whole journal
/// one KV value, no consumer records) and killed once its new durable existed
/// resumes exactly; the resumed runner writes it as records.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_journal_of_format_1_resumes() {
    let e = env().await;
    let load = orders_under_load(&e, 30_000, 500, 200).await;
    let out = run_cli(
        &e,
        &run_orders(&["--json"], &["--lease-ttl", "1s"]),
        Some("consumer_created:worker"),
    );
    assert_eq!(out.code, 86, "{out:?}");
    let id = "ORDERS.ORDERS_V2";
    let (store, j) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
    assert_eq!(j.consumers[0].phase, ConsumerPhase::Created);
    // What the previous version left: one value, no records.
    let old = cutover_core::journal::Journal { format: 1, ..j.clone() };
    let kv = store.kv();
    kv.purge(consumer_key(id, "worker")).await.unwrap();
    kv.put(journal_key(id), serde_json::to_vec(&old).unwrap().into()).await.unwrap();
    assert_eq!(cutover_nats::journal::load_migration(&e.js, id).await.unwrap().1, old);
    let out = crate::run::retry_cli(
        &e,
        &["--json", "run", "--resume", id, "--lease-ttl", "1s"],
        &["is held by runner"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, done) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
    assert_eq!(done.phase, Phase::Done);
    assert_eq!(done.consumers[0].b_start, j.consumers[0].b_start, "the journaled start kept");
    let head: serde_json::Value =
        serde_json::from_slice(&kv.get(journal_key(id)).await.unwrap().unwrap()).unwrap();
    assert!(head.get("consumers").is_none() && head["format"] == 2, "{BUCKET} head: {head}");
    let r = finish_after(load, 200).await;
    assert_exact(&r);
    assert_finished(&e, "ORDERS", "ORDERS_V2", "worker", json!(["orders.>"])).await;
    crate::run::assert_verified(&e.js, id).await;
}

/// Issue 13's chaos loop once saw a runner stopped (SIGSTOP) between its
/// lease check and a journal write, resumed after another runner finished,
/// write its stale head back. Each journal write is a compare-and-set on the
/// revision its store read: the stale store's write is refused as
/// [`Leased`](cutover_nats::Error::Leased) and the bucket keeps the newer
/// journal; a write whose value is already there (its acknowledgement lost)
/// counts as done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_lost_the_journal_cannot_write_it_back() {
    let e = env().await;
    orders(&e).await;
    let out = run_cli(&e, &move_args(&["run"], "A", "B", "C", &["--yes"]), Some("create_b"));
    assert_eq!(out.code, 86, "{out:?}");
    let id = "A.B";
    let (stale, j) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
    let (taker, mut newer) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
    newer.error = Some("taken over".into());
    taker.save(&newer).await.unwrap();
    let mut old = j.clone();
    old.error = Some("stale".into());
    let err = stale.save(&old).await.unwrap_err();
    assert!(matches!(err, cutover_nats::Error::Leased { .. }), "{err}");
    assert_eq!(cutover_nats::journal::load_migration(&e.js, id).await.unwrap().1, newer);
    // A consumer record too.
    let (key, value) = JournalStore::consumer_record(&old, "C");
    let mut moved = newer.clone();
    moved.consumers[0].phase = ConsumerPhase::Settled;
    taker.save(&moved).await.unwrap();
    let err = stale.put_record(id, key, value).await.unwrap_err();
    assert!(matches!(err, cutover_nats::Error::Leased { .. }), "{err}");
    assert_eq!(cutover_nats::journal::load_migration(&e.js, id).await.unwrap().1, moved);
    // The value already there: done, and the store writes on from its revision.
    stale.save(&moved).await.unwrap();
    let mut next = moved.clone();
    next.error = None;
    stale.save(&next).await.unwrap();
    assert_eq!(cutover_nats::journal::load_migration(&e.js, id).await.unwrap().1, next);
}
