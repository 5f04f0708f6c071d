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

/// The largest gap between two consecutive processing times (ms since the
/// epoch) inside `[from, to]`.
fn max_gap_ms(mut times: Vec<f64>, from: f64, to: f64) -> f64 {
    times.retain(|t| *t >= from && *t <= to);
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
}

fn epoch_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
        * 1000.0
}

/// A Rust instance on the library beside Python ones: every id it processed,
/// with the time.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, f64)>>>;

fn rust_instance(e: &Env, id: &str, stop: tokio::sync::watch::Receiver<bool>) -> Seen {
    use cutover_app::fence::{consume, FenceOptions};
    use cutover_app::instance::InstanceOptions;
    let seen: Seen = Default::default();
    let (client, record, id) = (e.js.client.clone(), seen.clone(), id.to_string());
    tokio::spawn(async move {
        let opts = FenceOptions::new(InstanceOptions::new(&id, "rust-1"));
        consume(client, "ORDERS", "worker", opts, stop, |m| {
            let msg_id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).unwrap().to_string();
            record.lock().unwrap().push((msg_id, epoch_ms()));
            async move { (cutover_app::worker::Outcome::Ack, m) }
        })
        .await
        .unwrap();
    });
    seen
}

/// Instances written from docs/protocol.md in nats-py (tests/apps/fence_worker.py)
/// and one on the Rust library share the consumer while a nats-py publisher
/// sends 1,000 msg/s through `run --mode fence`: none lost, none twice by
/// their own records and by `verify`; the consumer gap is measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_and_rust_instances_move_through_a_fence_exactly() {
    use crate::pyapps::{processed, App};
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let url = e.server.url();
    let files: Vec<_> = (0..2).map(|i| dir.join(format!("py{i}.jsonl"))).collect();
    let workers: Vec<App> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (id, out) = (format!("py-{i}"), f.to_str().unwrap());
            let args = ["--server", url, "--stream", "ORDERS", "--consumer", "worker"];
            App::start("fence_worker.py", &[&args[..], &["--instance", &id, "--out", out]].concat())
        })
        .collect();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let rust = rust_instance(&e, "rust-0", stop_rx);
    until_registered(&e, 3).await;
    let published = dir.join("pub.jsonl");
    let pub_args = [
        "--server",
        url,
        "--subject",
        "orders",
        "--subjects-count",
        "4",
        "--count",
        "3000",
        "--rate",
        "1000",
        "--id-prefix",
        "m",
        "--out",
        published.to_str().unwrap(),
    ];
    let mut publisher = App::start("publisher.py", &pub_args);
    let count = || processed(&files).len() + rust.lock().unwrap().len();
    wait_until("instances process", Duration::from_secs(20), || async { count() >= 300 }).await;
    let t_run = epoch_ms();
    let out =
        e.cli(&move_args(&["run", "--mode", "fence"], "ORDERS", "ORDERS_V2", "worker", &["--yes"]));
    assert_eq!(out.code, 0, "{out:?}");
    let t_done = epoch_ms();
    assert!(publisher.0.wait().unwrap().success());
    let acked: Vec<String> = crate::pyapps::lines(&published)
        .iter()
        .filter(|l| l.get("failed").is_none())
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(acked.len(), 3000, "every publish acked");
    wait_until("every message processed", Duration::from_secs(30), || async {
        count() >= acked.len()
    })
    .await;
    stop_tx.send(true).unwrap();
    for w in workers {
        w.stop();
    }
    let mut times: Vec<f64> = rust.lock().unwrap().iter().map(|(_, t)| *t).collect();
    let mut all = processed(&files);
    for (id, _) in rust.lock().unwrap().iter() {
        *all.entry(id.clone()).or_insert(0) += 1;
    }
    for f in &files {
        times.extend(crate::pyapps::lines(f).iter().filter_map(|l| l["t_ms"].as_f64()));
    }
    let twice: Vec<_> = all.iter().filter(|(_, n)| **n > 1).collect();
    let lost: Vec<_> = acked.iter().filter(|id| !all.contains_key(*id)).collect();
    let gap = max_gap_ms(times, t_run, t_done);
    eprintln!("python+rust through fence: published {}, processed {}, twice {}, lost {}, max consumer gap during the run {gap:.1} ms (run took {:.0} ms)", acked.len(), all.len(), twice.len(), lost.len(), t_done - t_run);
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(all.len(), acked.len(), "processed a message never published");
    let v = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(v.code, 0, "verify holds: {v:?}");
}
