//! Behaviour that depends on the server version, against real older servers
//! (installed by scripts/test.sh next to the pinned one).

use crate::common::*;
use crate::run::{assert_exact, load_cfg, request};
use cutover_core::journal::Phase;
use cutover_demo::load::Load;
use cutover_nats::engine::{self, events::Collect, RunOptions};
use cutover_nats::Js;
use cutover_testkit::{NatsServer, ServerOptions};
use serde_json::json;
use std::time::Duration;

pub const OLDEST: &str = "2.10.26";

pub(crate) async fn env_on(version: &str) -> Env {
    let server = NatsServer::start_with(ServerOptions {
        version: Some(version.into()),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let client = async_nats::connect(server.url()).await.unwrap();
    Env {
        js: Js::new(client.clone(), Duration::from_secs(5)),
        ctx: async_nats::jetstream::new(client),
        server,
    }
}

/// 2.10 has no consumer pause: drain mode is refused while publishers run, and
/// with publishers stopped the consumer moves exactly on pending/ack-pending
/// alone (no timer), the quiescent bound serving only as the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_pause_publishers_must_be_stopped_then_the_move_is_exact() {
    let e = env_on(OLDEST).await;
    assert_eq!(e.js.server_version().unwrap().to_string(), OLDEST);
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 5_000_000_000i64, "max_deliver": 3, "max_ack_pending": 1000})).await;
    let out = e.cli(&move_args(&["plan"], "ORDERS", "ORDERS_V2", "worker", &[]));
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("cannot pause consumers"), "{out:?}");
    let out =
        e.cli(&move_args(&["plan"], "ORDERS", "ORDERS_V2", "worker", &["--publishers-stopped"]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Quiescent interval for worker"), "{out:?}");
    // Publish a bounded batch, then the publishers stop; workers keep consuming.
    let mut load = Load::start(e.js.client.clone(), load_cfg(1000, 600)).await;
    wait_until("600 publishes", Duration::from_secs(20), || async { load.published() >= 600 })
        .await;
    load.finish_publishing().await;
    let mut req = request("ORDERS", "ORDERS_V2", &["worker"]);
    req.publishers_stopped = true;
    let plan = engine::prepare_plan(&e.js, &req).await.unwrap();
    assert!(plan.safe, "{:?}", plan.unsafe_findings().collect::<Vec<_>>());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    assert_eq!(j.consumers[0].checkpoint, Some(600));
    assert!(load.drain(Duration::from_secs(20)).await);
    let r = load.stop().await;
    assert_exact(&r);
    // Publishing resumes into the new stream.
    e.publish("orders.after", "after", 3).await;
    let (_, b) = e.js.consumer_info("ORDERS_V2", "worker").await.unwrap();
    assert_eq!(b.num_pending, 3);
    // verify judges the checkpoint taken without a pause by its own evidence
    // (publishers stopped: nothing pending, nothing ack-pending).
    crate::run::assert_verified(&e.js, "ORDERS.ORDERS_V2").await;
}

/// "Publishers stopped" is the only evidence without a pause, so it is
/// checked: with a publisher still running the drain stops before anything
/// moves, and a rollback leaves the workload exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publishers_stated_stopped_but_running_are_caught_before_anything_moves() {
    let e = env_on(OLDEST).await;
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 5_000_000_000i64, "max_ack_pending": 1000})).await;
    let load = Load::start(e.js.client.clone(), load_cfg(200, 100_000)).await;
    wait_until("100 processed", Duration::from_secs(20), || async { load.processed() >= 100 })
        .await;
    let mut req = request("ORDERS", "ORDERS_V2", &["worker"]);
    req.publishers_stopped = true;
    let plan = engine::prepare_plan(&e.js, &req).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let err = engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("publishers are not stopped"), "{err}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert!(j.can_roll_back(), "stopped before the commit point: {:?}", j.phase);
    assert_eq!(j.consumers[0].b_start, None, "no new durable");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert!(!a.config.subjects.is_empty() && !a.config.sealed, "A still serves the publishers");
    engine::rollback(&e.js, "ORDERS.ORDERS_V2", &Collect::default(), Duration::from_secs(1))
        .await
        .unwrap();
    let r = crate::run::finish_after(load, 200).await;
    assert_exact(&r);
}

/// Before 2.14 (no consumer reset) a new durable that already delivered
/// messages cannot be undone: the rollback is refused before it changes
/// anything (both durables as they were, the new one serving), naming the
/// command that rolls forward, which then finishes exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollback_without_consumer_reset_is_refused_before_any_change() {
    use crate::run::{crashed_once_b_serves, finish_after, orders_under_load, retry_cli};
    let e = env_on("2.12.8").await;
    let load = orders_under_load(&e, 30_000, 500, 200).await;
    crashed_once_b_serves(&e, 50).await;
    let out = retry_cli(
        &e,
        &["rollback", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"],
        &["is held by runner"],
    )
    .await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("needs consumer reset (nats-server 2.14+)"), "{out:?}");
    assert!(out.stderr.contains("`nats-cutover run --resume ORDERS.ORDERS_V2`"), "{out:?}");
    let (_, b) = e.js.consumer_info("ORDERS_V2", "worker").await.unwrap();
    assert!(!b.paused, "the new durable keeps serving");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, ["orders.>"], "A keeps the publishers");
    let out = retry_cli(
        &e,
        &["run", "--resume", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"],
        &["is held by runner"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_exact(&finish_after(load, 200).await);
}

/// The version matrix: the core live cut-over on the newest release of every
/// minor version with consumer pause (scripts/test.sh installs them), with
/// load; none lost, none twice, and verify holds.
async fn live_on(version: &str) {
    let e = env_on(version).await;
    assert_eq!(e.js.server_version().unwrap().to_string(), version);
    let load = crate::run::orders_under_load(&e, 30_000, 500, 200).await;
    let out = e.cli(&run_orders(&[], &[]));
    assert_eq!(out.code, 0, "on {version}: {out:?}");
    let r = crate::run::finish_after(load, 200).await;
    assert_exact(&r);
    let v = cutover_nats::verify::verify(&e.js, "ORDERS.ORDERS_V2", &Default::default(), &|_| {})
        .await
        .unwrap();
    assert!(v.holds, "verify on {version}: {:?} {:#?}", v.summary, v.offenders);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_cutover_on_2_11() {
    live_on("2.11.11").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_cutover_on_2_12() {
    live_on("2.12.8").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_cutover_on_2_14() {
    live_on("2.14.6").await;
}

/// The paced copy (steps::create: the mirror reads A through a durable of
/// ours, 2.14+) on the oldest line that has it, and the server's own mirror
/// consumer on 2.12: in place under load, exact, no durable of ours left.
async fn in_place_live_on(version: &str) {
    let e = env_on(version).await;
    let load = crate::run::orders_under_load(&e, 30_000, 500, 200).await;
    let out = e.cli(&["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"]);
    assert_eq!(out.code, 0, "on {version}: {out:?}");
    assert_exact(&crate::run::finish_after(load, 200).await);
    let names = e.js.consumer_names("ORDERS").await.unwrap();
    assert!(names.iter().all(|n| !n.starts_with("CUTOVER_MIRROR_")), "on {version}: {names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_place_on_2_14_reads_through_the_paced_durable() {
    in_place_live_on("2.14.6").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_place_on_2_12_reads_through_the_servers_mirror_consumer() {
    in_place_live_on("2.12.8").await;
}
