//! Fence mode (docs/protocol.md): the handoff without a stop of consumption,
//! live, with instances that follow the protocol.

use crate::common::*;
use crate::run::{assert_exact, assert_finished, finish_after, load_cfg, orders_stream};
use crate::run::{request, until_processed};
use cutover_core::journal::{ConsumerPhase, Phase, RouteState};
use cutover_core::plan::{Mode, PlanRequest};
use cutover_demo::load::{Load, LoadConfig};
use cutover_nats::engine::{self, events::Collect, EventKind, Progress, RunOptions};
use cutover_nats::journal::{IfMissing, JournalStore};
use serde_json::json;
use std::time::Duration;

pub fn fence_request(from: &str, to: &str, consumers: &[&str]) -> PlanRequest {
    PlanRequest { mode: Mode::Fence, ..request(from, to, consumers) }
}

/// Waits until `n` live instances of ORDERS/worker are registered.
pub async fn until_registered(e: &Env, n: usize) {
    let store = JournalStore::open(&e.js, IfMissing::Create).await.unwrap().unwrap();
    wait_until("instances register", Duration::from_secs(20), || async {
        let live = store.instances(Some(("ORDERS", "worker"))).await.unwrap();
        live.iter().filter(|i| i.live).count() >= n
    })
    .await;
}

/// The protocol's workers at 1,000 msg/s through a fence-mode run: none lost,
/// none twice, and the route ends `moved` after a `fenced` publication.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fence_mode_moves_live_without_a_stop_exactly() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let cfg = LoadConfig { protocol: true, ..load_cfg(1000, 6000) };
    let load = Load::start(e.js.client.clone(), cfg).await;
    until_registered(&e, 4).await;
    until_processed(&load, 500).await;
    let plan = engine::prepare_plan(&e.js, &fence_request("ORDERS", "ORDERS_V2", &["worker"]))
        .await
        .unwrap();
    assert!(plan.safe, "{:?}", plan.unsafe_reasons());
    let sink = Collect::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j = engine::run(&e.js, plan, &RunOptions::default(), &sink, rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    assert_eq!(j.consumers[0].phase, ConsumerPhase::Retired);
    let events = sink.0.lock().unwrap().clone();
    let fenced = events.iter().find_map(|ev| match &ev.kind {
        EventKind::Progress(Progress::Fenced { fence, fence_ms, .. }) => Some((*fence, *fence_ms)),
        _ => None,
    });
    let (f, fence_ms) = fenced.expect("a Fenced event");
    assert_eq!(Some(f), j.consumers[0].checkpoint);
    let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
    let route = store.route("ORDERS", "worker").await.unwrap().unwrap();
    assert_eq!((route.state, route.mode, route.fence), (RouteState::Moved, Mode::Fence, Some(f)));
    let r = finish_after(load, 300).await;
    eprintln!(
        "fence {f}: published in {fence_ms:.1} ms; max consumer gap {:.1} ms",
        r.max_consumer_gap_ms
    );
    assert_exact(&r);
    assert_finished(&e, "ORDERS", "ORDERS_V2", "worker", json!(["orders.>"])).await;
}

/// Fence mode with no instance registered is refused before any write: B is
/// not created, the consumer is untouched, the journal ends rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_mode_without_registered_instances_changes_nothing() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "m", 10).await;
    let before = e.snapshot().await;
    let out =
        e.cli(&move_args(&["run", "--mode", "fence"], "ORDERS", "ORDERS_V2", "worker", &["--yes"]));
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("no live application instance of ORDERS/worker"), "{out:?}");
    assert!(out.stderr.contains("--mode drain"), "{out:?}");
    assert!(out.stderr.contains("nothing was changed"), "{out:?}");
    let mut after = e.snapshot().await;
    after.as_object_mut().unwrap().remove("KV_CUTOVER");
    let mut before = before;
    before.as_object_mut().unwrap().remove("KV_CUTOVER");
    assert_eq!(before, after, "nothing changed on the server");
}
