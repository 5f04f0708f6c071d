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
    // The plan describes the fence, not drain mode's settle-then-checkpoint.
    assert!(plan.checkpoint_rule.starts_with("fence:"), "{}", plan.checkpoint_rule);
    assert!(plan.steps.iter().any(|s| s.title == "fence consumer worker"), "{:?}", plan.steps);
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
    // Moving again: the instances (home ORDERS/worker) follow route.ORDERS.worker,
    // which a migration of ORDERS_V2 would not write: refused in any mode,
    // naming them (a newcomer's trial stranded its workers this way).
    for mode in [Mode::Drain, Mode::Fence] {
        let again = PlanRequest { mode, ..request("ORDERS_V2", "ORDERS_V3", &["worker"]) };
        let plan = engine::prepare_plan(&e.js, &again).await.unwrap();
        assert!(!plan.safe, "{mode:?}");
        let why = plan.unsafe_reasons();
        assert!(why.contains("registered home binding ORDERS/worker"), "{why}");
        assert!(why.contains("restart it with home binding ORDERS_V2/worker"), "{why}");
    }
    let r = finish_after(load, 300).await;
    eprintln!(
        "fence {f}: published in {fence_ms:.1} ms; max consumer gap {:.1} ms",
        r.max_consumer_gap_ms
    );
    assert_exact(&r);
    assert_finished(&e, "ORDERS", "ORDERS_V2", "worker", json!(["orders.>"])).await;
}

/// Fence mode, the journal's bucket stops answering at the intent to create
/// the new durable (test hook: that write applied, its answer lost, every
/// later one refused): the old consumer the gate paused for good is given
/// back, and the F the journal keeps is not trusted on resume once the
/// consumer delivered past it: it is gated again, and the move is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fence_mode_gives_the_consumer_back_when_the_journal_stops_answering() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let cfg = LoadConfig { protocol: true, ..load_cfg(300, 20_000) };
    let load = Load::start(e.js.client.clone(), cfg).await;
    until_registered(&e, 4).await;
    until_processed(&load, 100).await;
    let tail = ["--mode", "fence", "--lease-ttl", "1s"];
    let needle = "\"phase\":\"creating\"";
    crate::safety::lost_journal_then_resumed(&e, &tail, needle, ConsumerPhase::Creating).await;
    assert_exact(&finish_after(load, 200).await);
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

/// What the test instances on the Rust library processed, in one order
/// across them all.
#[derive(Clone, Default)]
struct Seen(std::sync::Arc<std::sync::Mutex<Vec<Rec>>>);

#[derive(Clone, Debug)]
struct Rec {
    id: String,
    stream: String,
    seq: u64,
    version: String,
    t_ms: f64,
}

impl Seen {
    fn ids(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|r| r.id.clone()).collect()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// An instance of ORDERS/worker on the library (`cutover_app::fence`),
/// recording into `seen`; with `die_on`, it dies (no ack, no
/// deregistration) when handed its `die_on`-th message.
fn instance(
    e: &Env,
    id: &str,
    seen: &Seen,
    die_on: Option<usize>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<cutover_app::fence::Consumed> {
    instance_of(e, (id, "rust-1"), seen, die_on, stop)
}

/// [`instance`] of application version `version`.
fn instance_of(
    e: &Env,
    (id, version): (&str, &str),
    seen: &Seen,
    die_on: Option<usize>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<cutover_app::fence::Consumed> {
    use cutover_app::fence::{consume, FenceOptions};
    use cutover_app::instance::InstanceOptions;
    use cutover_app::worker::Outcome;
    let (client, seen, id) = (e.js.client.clone(), seen.clone(), id.to_string());
    let version = version.to_string();
    let mut handed = 0usize;
    tokio::spawn(async move {
        let mut inst = InstanceOptions::new(&id, &version);
        inst.ttl = Duration::from_secs(2);
        let opts = FenceOptions::new(inst);
        consume(client, "ORDERS", "worker", opts, stop, |m| {
            handed += 1;
            let die = die_on == Some(handed);
            if !die {
                let h = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id"));
                let info = m.info().unwrap();
                let (stream, seq) = (info.stream.to_string(), info.stream_sequence);
                let version = version.clone();
                let rec =
                    Rec { id: h.unwrap().to_string(), stream, seq, version, t_ms: epoch_ms() };
                seen.0.lock().unwrap().push(rec);
            }
            async move { (if die { Outcome::Die } else { Outcome::Ack }, m) }
        })
        .await
        .unwrap()
    })
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
    let rust = Seen::default();
    let _rust_task = instance(&e, "rust-0", &rust, None, stop_rx);
    until_registered(&e, 3).await;
    let st = e.cli(&["--json", "status"]).json();
    let mut langs: Vec<&str> =
        st["instances"].as_array().unwrap().iter().map(|i| i["lang"].as_str().unwrap()).collect();
    langs.sort();
    assert_eq!(langs, ["python", "python", "rust"], "{st:#}");
    let table = e.cli(&["status"]);
    // The table: app version and language, home binding, what each fetches.
    for want in [
        "instances:",
        "fetching from",
        "py-0",
        "py-1 (python)",
        "rust-1 (rust)",
        "ORDERS/worker",
        "live",
    ] {
        assert!(table.stdout.contains(want), "status lacks {want:?}: {table:?}");
    }
    let published = dir.join("pub.jsonl");
    let mut publisher = App::publisher(url, 3000, 1000, &published);
    let count = || processed(&files).len() + rust.len();
    wait_until("instances process", Duration::from_secs(20), || async { count() >= 300 }).await;
    let t_run = epoch_ms();
    let out =
        e.cli(&move_args(&["run", "--mode", "fence"], "ORDERS", "ORDERS_V2", "worker", &["--yes"]));
    assert_eq!(out.code, 0, "{out:?}");
    let t_done = epoch_ms();
    // `status` shows every instance fetching from the new durable only, with
    // the fence acknowledged.
    wait_until("status shows the instances moved", Duration::from_secs(10), || async {
        let st = e.cli(&["--json", "status"]).json();
        let Some(all) = st["instances"].as_array().cloned() else { panic!("{st:#}") };
        all.len() == 3
            && all.iter().all(|i| {
                i["bound"] == json!(["ORDERS_V2/worker"])
                    && i["fence_ack"]["migration"] == "ORDERS.ORDERS_V2"
                    && i["live"] == true
            })
    })
    .await;
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
    let mut times: Vec<f64> = rust.0.lock().unwrap().iter().map(|r| r.t_ms).collect();
    let mut all = processed(&files);
    for id in rust.ids() {
        *all.entry(id).or_insert(0) += 1;
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

/// Publishes `live-<i>` to `orders.<i % 4>` every 2 ms, retrying across the
/// subject move, until stopped; returns the acknowledged ids.
fn publisher(
    e: &Env,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    let p = cutover_app::publisher::Publisher::new(e.js.client.clone(), Duration::from_secs(30));
    tokio::spawn(async move {
        let mut ids = vec![];
        let mut tick = tokio::time::interval(Duration::from_millis(2));
        for i in 0u64.. {
            tick.tick().await;
            if *stop.borrow() {
                break;
            }
            let id = format!("live-{i}");
            p.publish(&format!("orders.{}", i % 4), &id, "x".into()).await.unwrap();
            ids.push(id);
        }
        ids
    })
}

/// Each id processed exactly once by the library instances.
async fn assert_each_once(seen: &Seen, ids: &[String]) {
    wait_until("every message processed", Duration::from_secs(30), || async {
        seen.len() >= ids.len()
    })
    .await;
    let mut counts = std::collections::HashMap::new();
    for id in seen.ids() {
        *counts.entry(id).or_insert(0u32) += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let lost: Vec<_> = ids.iter().filter(|id| !counts.contains_key(*id)).collect();
    eprintln!(
        "published {}, processed {}, twice {}, lost {}",
        ids.len(),
        counts.len(),
        twice.len(),
        lost.len()
    );
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(counts.len(), ids.len(), "processed a message never published");
}

/// An instance dies holding messages up to the fence (it fetched a batch and
/// acknowledged 5): the paused old consumer would never redeliver them, so
/// the runner resumes it once every live instance acknowledged the fence;
/// the survivor processes them and naks what lies above F. Exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_that_dies_holding_messages_up_to_the_fence() {
    let e = env().await;
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 2_000_000_000i64, "max_ack_pending": 1000})).await;
    e.publish("orders.1", "pre", 100).await;
    let seen = Seen::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let died = instance(&e, "dier", &seen, Some(6), stop_rx.clone()).await.unwrap();
    assert_eq!(died.acked, 5, "the dead instance acknowledged 5 of its batch");
    let survivor = instance(&e, "survivor", &seen, None, stop_rx);
    until_registered(&e, 2).await;
    let (pub_tx, pub_rx) = tokio::sync::watch::channel(false);
    let publishing = publisher(&e, pub_rx);
    let plan = engine::prepare_plan(&e.js, &fence_request("ORDERS", "ORDERS_V2", &["worker"]))
        .await
        .unwrap();
    let opts = RunOptions { max_pause: Duration::from_millis(500), ..Default::default() };
    let sink = Collect::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j = engine::run(&e.js, plan, &opts, &sink, rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let c = &j.consumers[0];
    assert!(c.nudges >= 1, "the old consumer was resumed to redeliver: {c:?}");
    let f = c.checkpoint.unwrap();
    assert!(c.evidence.as_ref().unwrap().num_ack_pending > 0, "messages up to F were held");
    assert!(c.fence_settled.as_ref().unwrap().ack_floor_stream_seq >= f, "{c:?}");
    pub_tx.send(true).unwrap();
    let mut ids: Vec<String> = (0..100).map(|i| format!("pre-{i}")).collect();
    ids.extend(publishing.await.unwrap());
    assert_each_once(&seen, &ids).await;
    stop_tx.send(true).unwrap();
    let done = survivor.await.unwrap();
    eprintln!("fence {f}, nudges {}, survivor: {done:?}", c.nudges);
    let v = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(v.code, 0, "verify holds: {v:?}");
}

/// A consumer with max_ack_pending 1 is handed over in order: the route says
/// `ordered`, and nothing from the new durable is processed before every
/// message up to the fence was processed from the old one. Exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ordered_consumer_processes_nothing_after_the_fence_first() {
    let e = env().await;
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1})).await;
    let seen = Seen::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> =
        (0..3).map(|i| instance(&e, &format!("o-{i}"), &seen, None, stop_rx.clone())).collect();
    until_registered(&e, 3).await;
    let (pub_tx, pub_rx) = tokio::sync::watch::channel(false);
    let publishing = publisher(&e, pub_rx);
    wait_until("instances process", Duration::from_secs(20), || async { seen.len() >= 100 }).await;
    let plan = engine::prepare_plan(&e.js, &fence_request("ORDERS", "ORDERS_V2", &["worker"]))
        .await
        .unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
    assert!(
        store.route("ORDERS", "worker").await.unwrap().unwrap().ordered,
        "the route says ordered"
    );
    wait_until("the new durable delivers", Duration::from_secs(20), || async {
        seen.0.lock().unwrap().iter().any(|r| r.stream == "ORDERS_V2")
    })
    .await;
    pub_tx.send(true).unwrap();
    let ids = publishing.await.unwrap();
    assert_each_once(&seen, &ids).await;
    stop_tx.send(true).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let recs = seen.0.lock().unwrap().clone();
    let last_old = recs.iter().rposition(|r| r.stream == "ORDERS").unwrap();
    let first_new = recs.iter().position(|r| r.stream == "ORDERS_V2").unwrap();
    assert!(
        last_old < first_new,
        "an old message processed after a new one: {:?}",
        &recs[first_new..=last_old]
    );
}

/// ORDERS and its durable (ack_wait in ms) under the protocol's workers at
/// 500 msg/s: four registered, 200 processed.
async fn fence_load(e: &Env, ack_wait_ms: i64) -> Load {
    orders_stream(e, ack_wait_ms).await;
    let cfg = LoadConfig { protocol: true, ..load_cfg(500, 20_000) };
    let load = Load::start(e.js.client.clone(), cfg).await;
    until_registered(e, 4).await;
    until_processed(&load, 200).await;
    load
}

/// A fence-mode move of worker to ORDERS_V2 whose runner dies right after
/// the fence was published.
fn crash_once_fenced(e: &Env) {
    let tail = ["--yes", "--lease-ttl", "1s"];
    let args =
        move_args(&["--json", "run", "--mode", "fence"], "ORDERS", "ORDERS_V2", "worker", &tail);
    let out = crate::run::run_cli(e, &args, Some("consumer_fenced:worker"));
    assert_eq!(out.code, 86, "the runner dies once the fence is published: {out:?}");
}

/// A fence-mode runner killed right after the fence was published (the new
/// durable serves, the old one still finishes up to F), then resumed or
/// rolled back under live load with the protocol's workers: exact both ways.
async fn fence_crash_then(rollback: bool) {
    use crate::run::retry_cli;
    let e = env().await;
    let load = fence_load(&e, 30_000).await;
    crash_once_fenced(&e);
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.consumers[0].phase, ConsumerPhase::Fenced);
    let held = ["is held by runner"];
    let id = "ORDERS.ORDERS_V2";
    let out = if rollback {
        retry_cli(&e, &["--json", "rollback", id, "--lease-ttl", "1s"], &held).await
    } else {
        retry_cli(&e, &["--json", "run", "--resume", id, "--lease-ttl", "1s"], &held).await
    };
    assert_eq!(out.code, 0, "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
    if rollback {
        assert_eq!(j.phase, Phase::RolledBack);
        assert!(e.js.stream_info_opt("ORDERS_V2").await.unwrap().is_none(), "B deleted");
        let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
        assert!(!c.paused, "the old durable delivers again");
        // The new durable processed past F meanwhile: the old one resumes after it.
        assert!(out.stdout.contains("reset_to"), "{out:?}");
        // The old durable was given back only once no live instance fetched
        // from the deleted new one (docs/model.md, finding 3).
        let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
        let on_new: Vec<_> = store.instances(Some(("ORDERS", "worker"))).await.unwrap();
        let on_new: Vec<_> = on_new
            .into_iter()
            .filter(|i| i.live && i.record.bound.iter().any(|b| b == "ORDERS_V2/worker"))
            .map(|i| i.record.instance)
            .collect();
        assert!(on_new.is_empty(), "still fetching from the deleted durable: {on_new:?}");
    } else {
        assert_eq!(j.phase, Phase::Done);
    }
    assert_exact(&crate::run::finish_after(load, 200).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fence_resumes_after_a_crash_once_the_fence_is_published() {
    fence_crash_then(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fence_rolls_back_after_a_crash_once_the_fence_is_published() {
    fence_crash_then(true).await;
}

/// Fence mode hands over only consumers whose instances registered for a
/// fence, so a durable an application created on A after the consumers
/// moved cannot be carried as drain mode carries it: the run stops before
/// anything is released, naming it, A serving the publishers and the moved
/// durable serving on B; once it is deleted the resume finishes exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fence_mode_stops_before_the_commit_for_a_durable_that_appeared_on_a() {
    use crate::run::retry_cli;
    let e = env().await;
    let load = fence_load(&e, 30_000).await;
    let tail = ["--yes", "--lease-ttl", "1s"];
    let args = move_args(&["run", "--mode", "fence"], "ORDERS", "ORDERS_V2", "worker", &tail);
    let out = crate::run::run_cli(&e, &args, Some("move_consumers"));
    assert_eq!(out.code, 86, "{out:?}");
    e.consumer("ORDERS", json!({"durable_name": "late", "ack_policy": "explicit"})).await;
    let id = "ORDERS.ORDERS_V2";
    let resume = ["run", "--resume", id, "--lease-ttl", "1s"];
    let out = retry_cli(&e, &resume, &["is held by runner"]).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("durable(s) late appeared on ORDERS"), "{out:?}");
    assert!(
        out.stderr.contains("mode fence hands over only consumers whose instances registered"),
        "{out:?}"
    );
    assert!(out.stderr.contains("ORDERS still serves the publishers"), "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
    assert!(!j.phase.committed(), "{:?}", j.phase);
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()], "A keeps its subjects");
    let before = e.js.stream_info("ORDERS").await.unwrap().1.state.last_seq;
    wait_until("ORDERS to store the publishers' messages", Duration::from_secs(10), || async {
        e.js.stream_info("ORDERS").await.unwrap().1.state.last_seq > before + 50
    })
    .await;
    e.js.consumer_delete("ORDERS", "late").await.unwrap();
    let out = retry_cli(&e, &resume, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_exact(&crate::run::finish_after(load, 200).await);
}

/// Fence mode, rolled back after a crash once the fence is published, while
/// messages up to F are held by an instance that died (a newcomer's trial
/// on R3: the held old durable never redelivered them, and every rollback
/// failed after 60 s). The rollback cuts the old durable's hold for their
/// redelivery to a live instance, then resets it: the workload exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fence_rollback_gets_a_dead_instances_messages_redelivered() {
    use crate::run::retry_cli;
    use futures::StreamExt;
    let e = env().await;
    // Long enough that the three held below are still out when the run
    // takes its fence on a loaded machine, short enough for the test.
    let load = fence_load(&e, 6_000).await;
    // The dead instance: fetched three, never acks them. A waiting pull
    // request (not `fetch`, which is no_wait: on a quiet machine the live
    // instances' waiting requests take every message as it comes, and a
    // no_wait request finds none pending, forever: the CI run of stop 37).
    let c = e.pull_consumer("ORDERS", "worker").await;
    let mut held = vec![];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while held.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "fetched only {held:?} in 30 s");
        let mut batch = c
            .batch()
            .max_messages(3 - held.len())
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .unwrap();
        while let Some(Ok(m)) = batch.next().await {
            held.push(m.info().unwrap().stream_sequence);
        }
    }
    crash_once_fenced(&e);
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    let f = j.consumers[0].checkpoint.unwrap();
    assert!(held.iter().all(|s| *s <= f), "held {held:?} up to the fence {f}");
    let id = "ORDERS.ORDERS_V2";
    let out =
        retry_cli(&e, &["--json", "rollback", id, "--lease-ttl", "1s"], &["is held by runner"])
            .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("no ack progress for"), "the hold was cut: {out:?}");
    // Not silent meanwhile: the settle says what it waits for, each second.
    assert!(out.stdout.contains(r#""settling_on":"ORDERS""#), "{out:?}");
    // Reset past what the new durable processed: the settle to F came first.
    assert!(out.stdout.contains("reset_to"), "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
    assert_eq!(j.phase, Phase::RolledBack);
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "the old durable delivers again");
    assert_exact(&crate::run::finish_after(load, 200).await);
}

/// Fence mode, rolled back after a crash once the fence is published, with
/// one more live registration that still lists the new durable in `bound`
/// (an instance that does not follow the route's deletion): the rollback
/// holds the old durable, says which instance it waits for, and gives the
/// old durable back only once that registration drops the binding
/// (docs/protocol.md R9; docs/model.md, finding 3). The workload stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fence_rollback_waits_for_an_instance_still_on_the_new_durable() {
    use cutover_core::journal::InstanceRecord;
    use tokio::io::AsyncBufReadExt;
    let e = env().await;
    let load = fence_load(&e, 30_000).await;
    crash_once_fenced(&e);
    let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
    let stale = |bound: &[&str]| InstanceRecord {
        version: cutover_core::journal::INSTANCE_VERSION,
        instance: "stale".into(),
        app_version: String::new(),
        lang: "test".into(),
        stream: "ORDERS".into(),
        consumer: "worker".into(),
        bound: bound.iter().map(|b| b.to_string()).collect(),
        fence_ack: None,
        ttl_ms: 600_000,
        heartbeat_ms: 0,
    };
    store.put_instance(&stale(&["ORDERS/worker", "ORDERS_V2/worker"])).await.unwrap();
    let id = "ORDERS.ORDERS_V2";
    // The rollback in the background, its events read as they come; again
    // while the crashed runner's lease has not lapsed.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut child, mut lines, waiting) = loop {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
            .args(["--server", e.server.url(), "--json", "rollback", id, "--lease-ttl", "1s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut waiting = None;
        // Reported on change: the workload's own instances follow, the
        // stale one is left.
        while let Some(line) = lines.next_line().await.unwrap() {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if v["detail"]["awaiting_followers"] == json!(["stale"]) {
                waiting = Some(v);
                break;
            }
        }
        if let Some(w) = waiting {
            break (child, lines, w);
        }
        let o = child.wait_with_output().await.unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains("is held by runner") && std::time::Instant::now() < deadline,
            "the rollback ended without waiting for the stale instance: {}: {stderr}",
            o.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(waiting["detail"]["on"], "ORDERS_V2/worker", "{waiting}");
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(c.paused, "the old durable is held while an instance may still nak above F");
    // The instance follows the route's deletion: it drops the binding.
    store.put_instance(&stale(&["ORDERS/worker"])).await.unwrap();
    let mut rest = String::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        rest.push_str(&line);
        rest.push('\n');
    }
    let status = child.wait().await.unwrap();
    assert!(status.success(), "the rollback: {status}: {rest}");
    assert!(!rest.contains("still fetch from"), "given back before the instance followed: {rest}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
    assert_eq!(j.phase, Phase::RolledBack);
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "the old durable delivers again");
    assert_exact(&crate::run::finish_after(load, 200).await);
}

/// What one run of nats-py apps through a handoff measured.
struct PyRun {
    /// The longest time between two processed messages that overlaps the
    /// consumers' move (from `move_consumers` starting to `move_publishers`
    /// starting).
    gap_ms: f64,
    /// The median time between two processed messages before the run.
    steady_ms: f64,
}

/// When `step` started, from `run --json`'s events.
fn step_started(stdout: &str, step: &str) -> f64 {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["kind"] == "step_started" && v["step"] == step)
        .and_then(|v| v["ts_ms"].as_f64())
        .unwrap_or_else(|| panic!("no step_started {step} in:\n{stdout}"))
}

/// Two nats-py pull apps (fence: tests/apps/fence_worker.py; drain:
/// worker.py following the route) and a nats-py publisher at 1,000 msg/s
/// through `run --mode MODE`: exact by the apps' records; the consumer gap.
async fn nats_py_handoff(mode: &str) -> PyRun {
    use crate::pyapps::{lines, processed, App};
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let url = e.server.url();
    let files: Vec<_> = (0..2).map(|i| dir.join(format!("w{i}.jsonl"))).collect();
    let workers: Vec<App> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let head = [
                "--server",
                url,
                "--stream",
                "ORDERS",
                "--consumer",
                "worker",
                "--out",
                f.to_str().unwrap(),
            ];
            let id = format!("py-{i}");
            match mode {
                "fence" => {
                    App::start("fence_worker.py", &[&head[..], &["--instance", &id]].concat())
                }
                _ => App::start(
                    "worker.py",
                    &[&head[..], &["--mode", "pull", "--follow-route"]].concat(),
                ),
            }
        })
        .collect();
    if mode == "fence" {
        until_registered(&e, 2).await;
    }
    let published = dir.join("pub.jsonl");
    let mut publisher = App::publisher(url, 3000, 1000, &published);
    wait_until("apps process", Duration::from_secs(20), || async {
        processed(&files).len() >= 500
    })
    .await;
    let args =
        move_args(&["--json", "run", "--mode", mode], "ORDERS", "ORDERS_V2", "worker", &["--yes"]);
    let out = e.cli(&args);
    assert_eq!(out.code, 0, "{out:?}");
    let (t0, t1) =
        (step_started(&out.stdout, "move_consumers"), step_started(&out.stdout, "move_publishers"));
    assert!(publisher.0.wait().unwrap().success());
    let acked: Vec<String> = lines(&published)
        .iter()
        .filter(|l| l.get("failed").is_none())
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    wait_until("every message processed", Duration::from_secs(30), || async {
        processed(&files).len() >= acked.len()
    })
    .await;
    for w in workers {
        w.stop();
    }
    let all = processed(&files);
    let twice: Vec<_> = all.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{mode}: processed twice: {twice:?}");
    assert_eq!(all.len(), acked.len(), "{mode}: lost or extra");
    let mut times: Vec<f64> =
        files.iter().flat_map(|f| lines(f)).filter_map(|l| l["t_ms"].as_f64()).collect();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let gaps: Vec<(f64, f64)> = times.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
    // Every gap that overlaps the window counts, also one begun before it.
    let overlaps = |(a, d): &&(f64, f64)| *a + *d >= t0 && *a <= t1;
    let gap_ms = gaps.iter().filter(overlaps).map(|g| g.1).fold(0.0, f64::max);
    let mut before: Vec<f64> = gaps.iter().filter(|(a, _)| *a < t0).map(|g| g.1).collect();
    before.sort_by(|a, b| a.partial_cmp(b).unwrap());
    PyRun { gap_ms, steady_ms: before[before.len() / 2] }
}

/// The issue's measurement: nats-py pull apps (batches of 32, 300 ms fetch
/// expiry) at 1,000 msg/s. Drain mode pauses the consumer, and a partly filled
/// pull request can wait for its expiry; fence mode keeps consumption going.
/// Both exact; fence's gap stays far below a fetch expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_gap_of_fence_and_drain_with_nats_py_pull_apps() {
    let drain = nats_py_handoff("drain").await;
    let fence = nats_py_handoff("fence").await;
    eprintln!(
        "nats-py pull apps at 1,000 msg/s: consumer gap while the consumers move: drain {:.1} ms, fence {:.1} ms (steady state: {:.2} / {:.2} ms)",
        drain.gap_ms, fence.gap_ms, drain.steady_ms, fence.steady_ms
    );
    assert!(fence.gap_ms < 150.0, "fence mode stopped consumption for {:.1} ms", fence.gap_ms);
}

/// `plan --mode fence` asks the server what `run` needs: the consumer's live
/// registered instances (none: unsafe, naming the fix; one: ok).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_in_fence_mode_counts_the_registered_instances() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let args =
        move_args(&["--json", "plan", "--mode", "fence"], "ORDERS", "ORDERS_V2", "worker", &[]);
    let finding = |p: &serde_json::Value| {
        let f = p["findings"].as_array().unwrap().iter().find(|f| f["setting"] == "instances");
        f.cloned().unwrap_or_else(|| panic!("no instances finding: {p:#}"))
    };
    let p = e.cli(&args).json();
    assert_eq!(p["safe"], false, "{p:#}");
    let f = finding(&p);
    assert_eq!((f["from"].as_str(), f["verdict"].as_str()), (Some("0 live"), Some("unsafe")));
    assert!(f["reason"].as_str().unwrap().contains("docs/protocol.md"), "{f:#}");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let one = instance(&e, "only", &Seen::default(), None, stop_rx);
    until_registered(&e, 1).await;
    let p = e.cli(&args).json();
    assert_eq!(p["safe"], true, "{p:#}");
    assert_eq!(finding(&p)["from"], "1 live");
    stop_tx.send(true).unwrap();
    one.await.unwrap();
}

/// A registered, live instance that never acknowledges the fence (it does
/// not follow the protocol's last step): the run waits for it at most the
/// fence-ack timeout, then goes on and names it; the old consumer stays paused
/// for good, so it cannot process past F. The real instance's work is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_that_never_acknowledges_is_named_and_the_run_goes_on() {
    use cutover_core::journal::{InstanceRecord, INSTANCE_VERSION};
    use cutover_nats::engine::Warning;
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let store = JournalStore::open(&e.js, IfMissing::Create).await.unwrap().unwrap();
    let stuck = InstanceRecord {
        version: INSTANCE_VERSION,
        instance: "stuck".into(),
        app_version: "0.9".into(),
        lang: "go".into(),
        stream: "ORDERS".into(),
        consumer: "worker".into(),
        bound: vec!["ORDERS/worker".into()],
        fence_ack: None,
        ttl_ms: 120_000,
        heartbeat_ms: 0,
    };
    store.put_instance(&stuck).await.unwrap();
    let seen = Seen::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let real = instance(&e, "real", &seen, None, stop_rx);
    until_registered(&e, 2).await;
    let (pub_tx, pub_rx) = tokio::sync::watch::channel(false);
    let publishing = publisher(&e, pub_rx);
    wait_until("the instance processes", Duration::from_secs(20), || async { seen.len() >= 50 })
        .await;
    let plan = engine::prepare_plan(&e.js, &fence_request("ORDERS", "ORDERS_V2", &["worker"]))
        .await
        .unwrap();
    let opts = RunOptions { fence_ack_timeout: Duration::from_millis(500), ..Default::default() };
    let sink = Collect::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j = engine::run(&e.js, plan, &opts, &sink, rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let named = sink.0.lock().unwrap().iter().any(|ev| {
        matches!(&ev.kind, EventKind::Warning(Warning::FenceUnacknowledged { instances, waiting: false, .. }) if instances == &["stuck".to_string()])
    });
    assert!(named, "the run names the instance that did not acknowledge");
    pub_tx.send(true).unwrap();
    let ids = publishing.await.unwrap();
    assert_each_once(&seen, &ids).await;
    stop_tx.send(true).unwrap();
    real.await.unwrap();
}

/// Bad input, refused before connecting (the server here does not exist),
/// saying why and what to do: a nak delay under a second, `--mode` with
/// `--in-place` (its hops are drain mode; not ignored), `--mode rolling`
/// without `--new-version`, `--new-version` beside a plan file.
#[test]
fn bad_fence_and_rolling_flags_are_refused_before_connecting() {
    let url = format!("nats://127.0.0.1:{}", cutover_testkit::free_port());
    let head = ["--server", url.as_str(), "run", "--mode", "fence", "--nak-delay", "10ms"];
    let out = cli(&move_args(&head, "A", "B", "C", &["--yes"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("shorter than 1s") && out.stderr.contains("use 1s or more"),
        "{out:?}"
    );
    let in_place = ["--server", url.as_str(), "run", "--in-place", "A", "--set", "storage=memory"];
    let out = cli(&[&in_place[..], &["--consumer", "C", "--mode", "fence", "--yes"]].concat());
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("cannot be used with"), "{out:?}");
    // --mode rolling needs --new-version; a plan file fixes it.
    let out = cli(&move_args(
        &["--server", url.as_str(), "run", "--mode", "rolling"],
        "A",
        "B",
        "C",
        &["--yes"],
    ));
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--new-version"), "{out:?}");
    let out =
        cli(&["--server", url.as_str(), "run", "--plan", "p.toml", "--new-version", "2", "--yes"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--new-version would contradict it"), "{out:?}");
}

fn rolling_request(to_version: &str) -> PlanRequest {
    PlanRequest {
        mode: Mode::Rolling,
        new_version: Some(to_version.into()),
        ..request("ORDERS", "ORDERS_V2", &["worker"])
    }
}

/// A run of the engine in the background, with its events.
type Background = (
    tokio::task::JoinHandle<cutover_nats::Result<cutover_core::journal::Journal>>,
    std::sync::Arc<Collect>,
    tokio::sync::watch::Sender<bool>,
);

fn run_in_background(e: &Env, plan: cutover_core::plan::Plan, opts: RunOptions) -> Background {
    let (js, sink) = (e.js.clone(), std::sync::Arc::new(Collect::default()));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let events = sink.clone();
    let task = tokio::spawn(async move { engine::run(&js, plan, &opts, &*events, rx).await });
    (task, sink, tx)
}

/// The route's state, once it is `state`.
async fn until_route(e: &Env, state: RouteState) {
    let store = JournalStore::open(&e.js, IfMissing::Create).await.unwrap().unwrap();
    wait_until("the route's state", Duration::from_secs(30), || async {
        store.route("ORDERS", "worker").await.unwrap().is_some_and(|r| r.state == state)
    })
    .await;
}

/// Mode rolling: three instances of version 1 process the old consumer; the
/// run to version 2 publishes the fence, and once `moved` waits while any
/// version 1 instance is bound to the old consumer; they are replaced one by
/// one by version 2 and the run ends after the last. Every message up to F
/// was processed by version 1 from the old stream, every message after F by
/// version 2 from the new one, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_replaces_the_instances_one_by_one() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let seen = Seen::default();
    let mut old = vec![];
    for i in 0..3 {
        let (tx, rx) = tokio::sync::watch::channel(false);
        old.push((tx, instance_of(&e, (&format!("v1-{i}"), "1"), &seen, None, rx)));
    }
    until_registered(&e, 3).await;
    let (pub_tx, pub_rx) = tokio::sync::watch::channel(false);
    let publishing = publisher(&e, pub_rx);
    wait_until("version 1 processes", Duration::from_secs(20), || async { seen.len() >= 100 })
        .await;
    let plan = engine::prepare_plan(&e.js, &rolling_request("2")).await.unwrap();
    assert!(plan.safe, "{}", plan.unsafe_reasons());
    // No version 2 yet: the plan says what waits for it.
    let none_new = |p: &cutover_core::plan::Plan| {
        p.findings.iter().any(|f| f.reason.contains("no live instance of version 2"))
    };
    assert!(none_new(&plan), "{:?}", plan.findings);
    let (run, events, _stop) = run_in_background(&e, plan, RunOptions::default());
    until_route(&e, RouteState::Moved).await;
    // The runner reports the three on the old consumer before any is
    // replaced (replaced before its first look, it would see fewer).
    wait_until("the rollout is reported", Duration::from_secs(30), || async {
        events.0.lock().unwrap().iter().any(|ev| matches!(&ev.kind, EventKind::Progress(Progress::Rollout { on_old, .. }) if on_old.len() == 3))
    })
    .await;
    let (new_tx, new_rx) = tokio::sync::watch::channel(false);
    let mut new = vec![];
    for (i, (tx, task)) in old.into_iter().enumerate() {
        assert!(!run.is_finished(), "the run waits while version 1 is bound to the old consumer");
        tx.send(true).unwrap();
        task.await.unwrap();
        new.push(instance_of(&e, (&format!("v2-{i}"), "2"), &seen, None, new_rx.clone()));
    }
    let j = tokio::time::timeout(Duration::from_secs(30), run).await.unwrap().unwrap().unwrap();
    assert_eq!(j.phase, Phase::Done);
    let rollout: Vec<usize> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|ev| match &ev.kind {
            EventKind::Progress(Progress::Rollout { on_old, .. }) => Some(on_old.len()),
            _ => None,
        })
        .collect();
    assert_eq!(rollout.first(), Some(&3), "the rollout is reported: {rollout:?}");
    pub_tx.send(true).unwrap();
    assert_each_once(&seen, &publishing.await.unwrap()).await;
    new_tx.send(true).unwrap();
    for t in new {
        t.await.unwrap();
    }
    let f = j.consumers[0].checkpoint.unwrap();
    for r in seen.0.lock().unwrap().iter() {
        match r.version.as_str() {
            "1" => {
                assert!(r.stream == "ORDERS" && r.seq <= f, "version 1 past the fence {f}: {r:?}")
            }
            _ => assert_eq!(r.stream, "ORDERS_V2", "version 2 on the old stream: {r:?}"),
        }
    }
}

/// Mode rolling with a version 1 instance that is never replaced: the run
/// waits and reports it; stopped (Ctrl-C) and resumed with `proceed`, it goes
/// on without it, naming it, and everything is processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_with_an_instance_that_never_moves_proceeds_when_told() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let seen = Seen::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stuck = instance_of(&e, ("stuck", "1"), &seen, None, stop_rx.clone());
    let upgraded = instance_of(&e, ("new", "2"), &seen, None, stop_rx);
    until_registered(&e, 2).await;
    let (pub_tx, pub_rx) = tokio::sync::watch::channel(false);
    let publishing = publisher(&e, pub_rx);
    wait_until("instances process", Duration::from_secs(20), || async { seen.len() >= 100 }).await;
    let plan = engine::prepare_plan(&e.js, &rolling_request("2")).await.unwrap();
    assert!(
        !plan.findings.iter().any(|f| f.reason.contains("no live instance of version 2")),
        "an instance of version 2 is live: {:?}",
        plan.findings
    );
    let (run, events, ctrl_c) = run_in_background(&e, plan.clone(), RunOptions::default());
    wait_until("the rollout is reported", Duration::from_secs(30), || async {
        events.0.lock().unwrap().iter().any(|ev| matches!(&ev.kind, EventKind::Progress(Progress::Rollout { on_old, .. }) if on_old == &["stuck@1".to_string()]))
    })
    .await;
    ctrl_c.send(true).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(30), run).await.unwrap().unwrap();
    assert!(stopped.is_err_and(|e| e.to_string().contains("interrupted at a safe point")));
    // The route was `moved` when the run stopped: the resumed run must not
    // step it back (a newcomer's trial saw moved → settled → moved): every
    // write the route sees from here on says `moved`.
    let kv =
        async_nats::jetstream::new(e.js.client.clone()).get_key_value("CUTOVER").await.unwrap();
    let mut watch = kv.watch_with_history("route.ORDERS.worker").await.unwrap();
    let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(u64, String)>::new()));
    let w = writes.clone();
    let watcher = tokio::spawn(async move {
        use futures::StreamExt;
        while let Some(Ok(en)) = watch.next().await {
            let v: serde_json::Value = serde_json::from_slice(&en.value).unwrap_or_default();
            let state = v["state"].as_str().unwrap_or("deleted").to_string();
            w.lock().unwrap().push((en.revision, state));
        }
    });
    let opts = RunOptions { proceed: true, ..Default::default() };
    let (again, events, _) = run_in_background(&e, plan, opts);
    let j = tokio::time::timeout(Duration::from_secs(30), again).await.unwrap().unwrap().unwrap();
    assert_eq!(j.phase, Phase::Done);
    let last = kv.entry("route.ORDERS.worker").await.unwrap().unwrap().revision;
    wait_until("the watcher to see the route's last write", Duration::from_secs(10), || async {
        writes.lock().unwrap().iter().any(|(r, _)| *r == last)
    })
    .await;
    watcher.abort();
    let states: Vec<String> = writes.lock().unwrap().iter().map(|(_, s)| s.clone()).collect();
    assert!(states.iter().all(|s| s == "moved"), "the route stepped back: {states:?}");
    let named = events.0.lock().unwrap().iter().any(|ev| {
        matches!(&ev.kind, EventKind::Warning(cutover_nats::engine::Warning::ProceededWithout { instances }) if instances == &["stuck@1".to_string()])
    });
    assert!(named, "the run names the instance it went on without");
    pub_tx.send(true).unwrap();
    assert_each_once(&seen, &publishing.await.unwrap()).await;
    stop_tx.send(true).unwrap();
    stuck.await.unwrap();
    upgraded.await.unwrap();
}

/// Mode rolling with nats-py instances (tests/apps/fence_worker.py, from
/// docs/protocol.md) of version 1, replaced during the run by a nats-py and a
/// Rust instance of version 2: none lost, none twice; version 1 processed only
/// the old stream up to F, version 2 only the new stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_from_nats_py_to_nats_py_and_rust_instances() {
    use crate::pyapps::{lines, processed, App};
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let url = e.server.url();
    let py = |id: &str, version: &str| {
        let out = dir.join(format!("{id}.jsonl"));
        let args = [
            "--server",
            url,
            "--stream",
            "ORDERS",
            "--consumer",
            "worker",
            "--instance",
            id,
            "--app-version",
            version,
            "--out",
            out.to_str().unwrap(),
        ];
        (App::start("fence_worker.py", &args), out)
    };
    let old: Vec<_> = ["py1-0", "py1-1"].iter().map(|id| py(id, "1")).collect();
    let old_files: Vec<_> = old.iter().map(|(_, f)| f.clone()).collect();
    until_registered(&e, 2).await;
    let published = dir.join("pub.jsonl");
    let mut publisher = App::publisher(url, 2000, 500, &published);
    wait_until("version 1 processes", Duration::from_secs(20), || async {
        processed(&old_files).len() >= 200
    })
    .await;
    let plan = engine::prepare_plan(&e.js, &rolling_request("2")).await.unwrap();
    let (run, _, _stop) = run_in_background(&e, plan, RunOptions::default());
    until_route(&e, RouteState::Moved).await;
    let mut apps = old.into_iter();
    let (first, _) = apps.next().unwrap();
    first.stop();
    let (py2, py2_file) = py("py2-0", "2");
    assert!(!run.is_finished(), "py1-1 is still bound to the old consumer");
    let (second, _) = apps.next().unwrap();
    second.stop();
    let rust = Seen::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let rust_task = instance_of(&e, ("rs2-1", "2"), &rust, None, stop_rx);
    let j = tokio::time::timeout(Duration::from_secs(30), run).await.unwrap().unwrap().unwrap();
    assert_eq!(j.phase, Phase::Done);
    assert!(publisher.0.wait().unwrap().success());
    let acked: Vec<String> = lines(&published)
        .iter()
        .filter(|l| l.get("failed").is_none())
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    let all_files = [&old_files[..], std::slice::from_ref(&py2_file)].concat();
    let count = || processed(&all_files).len() + rust.len();
    wait_until("every message processed", Duration::from_secs(30), || async {
        count() >= acked.len()
    })
    .await;
    py2.stop();
    stop_tx.send(true).unwrap();
    rust_task.await.unwrap();
    let mut all = processed(&all_files);
    for id in rust.ids() {
        *all.entry(id).or_insert(0) += 1;
    }
    let twice: Vec<_> = all.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    assert_eq!(all.len(), acked.len(), "lost or extra");
    let f = j.consumers[0].checkpoint.unwrap();
    for l in old_files.iter().flat_map(|f| lines(f)) {
        assert!(
            l["stream"] == "ORDERS" && l["seq"].as_u64().unwrap() <= f,
            "version 1 past the fence {f}: {l}"
        );
    }
    for l in lines(&py2_file) {
        assert_eq!(l["stream"], "ORDERS_V2", "version 2 on the old stream: {l}");
    }
    assert!(rust.0.lock().unwrap().iter().all(|r| r.stream == "ORDERS_V2"));
    eprintln!(
        "rolling 1 -> 2 with nats-py and Rust: published {}, processed {}, fence {f}",
        acked.len(),
        all.len()
    );
}

/// One instance of docs/protocol.md in nats.js (tests/apps/js/fence_worker.mjs)
/// or nats.go (`natsapp fence`), its records in `out`.
fn protocol_instance(
    client: &str,
    url: &str,
    (id, version): (&str, &str),
    out: &std::path::Path,
) -> crate::pyapps::App {
    protocol_instance_with(client, url, (id, version), out, &[])
}

/// [`protocol_instance`] in nats.js (`js`), nats.go (`go`) or nats-py
/// (`py`: tests/apps/fence_worker.py), with `extra` flags.
fn protocol_instance_with(
    client: &str,
    url: &str,
    (id, version): (&str, &str),
    out: &std::path::Path,
    extra: &[&str],
) -> crate::pyapps::App {
    let args = [
        "--server",
        url,
        "--stream",
        "ORDERS",
        "--consumer",
        "worker",
        "--instance",
        id,
        "--app-version",
        version,
        "--out",
        out.to_str().unwrap(),
    ];
    let args = [&args[..], extra].concat();
    match client {
        "js" => crate::pyapps::App::node("fence_worker.mjs", &args),
        "py" => crate::pyapps::App::start("fence_worker.py", &args),
        _ => crate::pyapps::App::go(&[&["fence"][..], &args[..]].concat()),
    }
}

/// The records of processed messages (`id` lines; the nats.js and nats.go
/// instances also write a `begin` line before each ack).
fn processed_records(files: &[std::path::PathBuf]) -> Vec<serde_json::Value> {
    files.iter().flat_map(|f| crate::pyapps::lines(f)).filter(|l| l["id"].is_string()).collect()
}

/// Each acknowledged publish processed exactly once over `files`.
fn each_once(files: &[std::path::PathBuf], acked: &[String]) {
    each_once_but(files, acked, &[])
}

/// [`each_once`], but the ids in `twice_ok` may have been processed twice.
fn each_once_but(files: &[std::path::PathBuf], acked: &[String], twice_ok: &[String]) {
    let mut n = std::collections::HashMap::<String, u32>::new();
    for l in processed_records(files) {
        *n.entry(l["id"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let twice: Vec<_> =
        n.iter().filter(|(id, c)| **c > 1 && !(**c == 2 && twice_ok.contains(id))).collect();
    let recs: Vec<_> = processed_records(files)
        .into_iter()
        .filter(|l| twice.iter().any(|(id, _)| l["id"] == id.as_str()))
        .collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}: {recs:#?}");
    let lost: Vec<_> = acked.iter().filter(|id| !n.contains_key(*id)).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(n.len(), acked.len(), "processed what was not acknowledged");
}

fn acked(published: &std::path::Path) -> Vec<String> {
    crate::pyapps::lines(published)
        .iter()
        .filter(|l| l.get("failed").is_none())
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect()
}

/// Issue 25 item 5: the protocol's instances in nats.js and nats.go (written
/// from docs/protocol.md, nothing of ours) share the consumer through `run
/// --mode fence` under a nats-py publisher: none lost, none twice, and every
/// message at or below the fence was processed from the old stream, every
/// one above it from the new.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_js_and_nats_go_instances_move_through_a_fence_exactly() {
    use crate::pyapps::App;
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let url = e.server.url();
    let files: Vec<_> = ["js-0", "go-0"].iter().map(|i| dir.join(format!("{i}.jsonl"))).collect();
    let apps = [
        protocol_instance("js", url, ("js-0", "1"), &files[0]),
        protocol_instance("go", url, ("go-0", "1"), &files[1]),
    ];
    until_registered(&e, 2).await;
    let published = dir.join("pub.jsonl");
    let mut publisher = App::publisher(url, 3000, 1000, &published);
    wait_until("instances process", Duration::from_secs(20), || async {
        processed_records(&files).len() >= 300
    })
    .await;
    let out =
        e.cli(&move_args(&["run", "--mode", "fence"], "ORDERS", "ORDERS_V2", "worker", &["--yes"]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(publisher.0.wait().unwrap().success());
    let acked = acked(&published);
    wait_until("every message processed", Duration::from_secs(30), || async {
        processed_records(&files).len() >= acked.len()
    })
    .await;
    for a in apps {
        a.stop();
    }
    each_once(&files, &acked);
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    let f = j.consumers[0].checkpoint.unwrap();
    let recs = processed_records(&files);
    for l in &recs {
        let (stream, seq) = (l["stream"].as_str().unwrap(), l["seq"].as_u64().unwrap());
        assert!((stream == "ORDERS") == (seq <= f), "fence {f}: {l}");
    }
    let by = |who: &str| recs.iter().filter(|l| l["instance"] == who).count();
    assert!(
        by("js-0") > 0 && by("go-0") > 0,
        "both processed: js {} go {}",
        by("js-0"),
        by("go-0")
    );
    eprintln!(
        "fence with nats.js and nats.go: {} published, each once; fence {f}; js {} go {}",
        acked.len(),
        by("js-0"),
        by("go-0")
    );
}

/// Issue 25 item 5, mode rolling: version 1 in nats.js replaced one by one
/// by version 2 in nats.go, under a nats-py publisher; version 1 processes
/// the old stream up to the fence, version 2 the new one after it, each
/// message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_from_nats_js_to_nats_go_instances() {
    use crate::pyapps::App;
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let url = e.server.url();
    let file = |id: &str| dir.join(format!("{id}.jsonl"));
    let old: Vec<_> = ["js1-0", "js1-1"]
        .iter()
        .map(|id| protocol_instance("js", url, (id, "1"), &file(id)))
        .collect();
    until_registered(&e, 2).await;
    let published = dir.join("pub.jsonl");
    let mut publisher = App::publisher(url, 2000, 500, &published);
    let v1 = [file("js1-0"), file("js1-1")];
    wait_until("version 1 processes", Duration::from_secs(20), || async {
        processed_records(&v1).len() >= 200
    })
    .await;
    let plan = engine::prepare_plan(&e.js, &rolling_request("2")).await.unwrap();
    let (run, _, _stop) = run_in_background(&e, plan, RunOptions::default());
    until_route(&e, RouteState::Moved).await;
    let mut old = old.into_iter();
    old.next().unwrap().stop();
    let go0 = protocol_instance("go", url, ("go2-0", "2"), &file("go2-0"));
    assert!(!run.is_finished(), "js1-1 is still bound to the old consumer");
    old.next().unwrap().stop();
    let go1 = protocol_instance("go", url, ("go2-1", "2"), &file("go2-1"));
    let j = tokio::time::timeout(Duration::from_secs(30), run).await.unwrap().unwrap().unwrap();
    assert_eq!(j.phase, Phase::Done);
    assert!(publisher.0.wait().unwrap().success());
    let acked = acked(&published);
    let all = [file("js1-0"), file("js1-1"), file("go2-0"), file("go2-1")];
    wait_until("every message processed", Duration::from_secs(30), || async {
        processed_records(&all).len() >= acked.len()
    })
    .await;
    go0.stop();
    go1.stop();
    each_once(&all, &acked);
    let f = j.consumers[0].checkpoint.unwrap();
    for l in processed_records(&v1) {
        assert!(
            l["stream"] == "ORDERS" && l["seq"].as_u64().unwrap() <= f,
            "version 1 past the fence {f}: {l}"
        );
    }
    for l in processed_records(&[file("go2-0"), file("go2-1")]) {
        assert_eq!(l["stream"], "ORDERS_V2", "version 2 on the old stream: {l}");
    }
    eprintln!("rolling nats.js 1 -> nats.go 2: {} published, each once, fence {f}", acked.len());
}

/// Issue 24 (a helper's trial, bug 2) and docs/protocol.md R15: an instance
/// stopped (SIGSTOP) with messages in hand for longer than its registration's
/// ttl is dead to the runner, which goes on without it (the fence's settle
/// has what it held redelivered to a live instance after ack_wait). Once
/// continued, the instance must act on nothing it fetched before: without
/// the lease rule it processed those messages a second time (nats-py:
/// "processed twice: m-78"). It then reads the route again and processes
/// from the new durable. One instance in each client stops (and one on our
/// library, its thread blocked), a nats-py one stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_stopped_past_their_ttl_act_on_nothing_they_held() {
    use crate::pyapps::App;
    let e = env().await;
    orders_stream(&e, 2_000).await;
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let url = e.server.url();
    let ids = ["py-0", "js-0", "go-0", "live"];
    let files: Vec<_> = ids.iter().map(|i| dir.join(format!("{i}.jsonl"))).collect();
    // A backlog first, so that every instance fetches whole batches.
    let preloaded = dir.join("pre.jsonl");
    let mut pre = App::publisher_ids(url, "orders", (1000, 5000), "pre", &preloaded);
    assert!(pre.0.wait().unwrap().success());
    // Each stopping instance stops itself (SIGSTOP) in the middle of its
    // 40th message, with the rest of its batch in hand: a stop the test can
    // place (a SIGSTOP from outside lands in an ack as often as not, where no
    // rule can help: docs/protocol.md R15).
    let apps: Vec<App> = ids
        .iter()
        .zip(&files)
        .map(|(id, f)| {
            let stop_at = if *id == "live" { "0" } else { "40" };
            let extra = ["--batch", "64", "--work-ms", "5", "--ttl", "3", "--stop-at", stop_at];
            let client = if *id == "live" { "py" } else { &id[..2] };
            protocol_instance_with(client, url, (id, "1"), f, &extra)
        })
        .collect();
    let rust_file = dir.join("rust-0.jsonl");
    let (rust, go_on) = blocked_instance(url, &rust_file, 40);
    until_registered(&e, 5).await;
    let published = dir.join("pub.jsonl");
    let mut publisher = App::publisher(url, 3000, 150, &published);
    let store = JournalStore::open(&e.js, IfMissing::Create).await.unwrap().unwrap();
    wait_until("the stopped instances' registrations lapse", Duration::from_secs(40), || async {
        let all = store.instances(Some(("ORDERS", "worker"))).await.unwrap();
        all.iter().filter(|i| i.record.instance != "live" && !i.live).count() == 4
    })
    .await;
    // Ours goes on at once: async-nats ends a pull request's batch once its
    // own timer (the request's expiry + 5 s) has passed, which would drop
    // what it held without the rule's help.
    go_on.send(()).unwrap();
    let out = e
        .cli_async(&move_args(
            &["run", "--mode", "fence"],
            "ORDERS",
            "ORDERS_V2",
            "worker",
            &["--yes"],
        ))
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    for a in &apps[..3] {
        let pid = a.0.id().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success());
    }
    // Back, each reads the route and fetches from the new durable.
    for f in files[..3].iter().chain([&rust_file]) {
        wait_until(
            "a continued instance processes from the new durable",
            Duration::from_secs(30),
            || async {
                processed_records(std::slice::from_ref(f))
                    .iter()
                    .any(|l| l["stream"] == "ORDERS_V2")
            },
        )
        .await;
    }
    assert!(publisher.0.wait().unwrap().success());
    let acked = [acked(&preloaded), acked(&published)].concat();
    let all: Vec<_> = files.iter().chain([&rust_file]).cloned().collect();
    wait_until("every message processed", Duration::from_secs(30), || async {
        processed_records(&all).len() >= acked.len()
    })
    .await;
    for a in apps {
        a.stop();
    }
    let rust_stopped_in = rust.stop();
    // Our library checks the lease before it hands a message to the handler:
    // the one the handler was in when its thread stopped was processed
    // (R15's window); what it held besides was dropped.
    each_once_but(&all, &acked, &[rust_stopped_in]);
    for (id, f) in ids.iter().zip(&files).take(3).chain([(&"rust-0", &rust_file)]) {
        let text = std::fs::read_to_string(f).unwrap();
        let done = text.lines().rev().find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l).ok().filter(|v| v["done"] == true)
        });
        let dropped = done.as_ref().and_then(|d| d["dropped_lapsed"].as_u64());
        assert!(dropped > Some(0), "{id} dropped what it held when stopped: {done:?}");
    }
    eprintln!(
        "stopped past their ttl (nats-py, nats.js, nats.go, our library): {} published, each once",
        acked.len()
    );
}

/// An instance on our library (`cutover_app::fence::consume`) on a thread and
/// runtime of its own, with its own connection, that blocks that thread in
/// the middle of its `stop_at`-th message until told to go on: stopped as a
/// whole, as a SIGSTOP stops a process. Its records go to `out` in the
/// nats-py instance's format.
fn blocked_instance(
    url: &str,
    out: &std::path::Path,
    stop_at: usize,
) -> (BlockedInstance, std::sync::mpsc::Sender<()>) {
    use cutover_app::fence::{consume, FenceOptions};
    use cutover_app::instance::InstanceOptions;
    use cutover_app::worker::Outcome;
    use std::io::Write;
    let (go_on, wait) = std::sync::mpsc::channel::<()>();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped_in = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (url, out, seen) = (url.to_string(), out.to_path_buf(), stopped_in.clone());
    let (ready_tx, ready) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let client = async_nats::connect(&url).await.unwrap();
            let mut inst = InstanceOptions::new("rust-0", "rust-1");
            inst.heartbeat = Duration::from_millis(250);
            inst.ttl = Duration::from_secs(1);
            let opts = FenceOptions { batch: 64, ..FenceOptions::new(inst) };
            let mut file = std::fs::File::create(&out).unwrap();
            let mut handed = 0usize;
            ready_tx.send(()).unwrap();
            let done = consume(client, "ORDERS", "worker", opts, stop_rx, |m| {
                handed += 1;
                let h = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id"));
                let id = h.unwrap().to_string();
                if handed == stop_at {
                    *seen.lock().unwrap() = id.clone();
                    wait.recv().unwrap(); // the whole runtime stops here
                } else {
                    std::thread::sleep(Duration::from_millis(5)); // processing
                }
                let info = m.info().unwrap();
                let (stream, seq) = (info.stream.to_string(), info.stream_sequence);
                let rec = json!({"id": id, "stream": stream, "seq": seq, "instance": "rust-0"});
                writeln!(file, "{rec}").unwrap();
                async move { (Outcome::Ack, m) }
            })
            .await
            .unwrap();
            let mut file = std::fs::OpenOptions::new().append(true).open(&out).unwrap();
            writeln!(file, "{}", json!({"done": true, "dropped_lapsed": done.dropped_lapsed}))
                .unwrap();
        })
    });
    ready.recv().unwrap();
    (BlockedInstance { stop: stop_tx, thread, stopped_in }, go_on)
}

struct BlockedInstance {
    stop: tokio::sync::watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
    stopped_in: std::sync::Arc<std::sync::Mutex<String>>,
}

impl BlockedInstance {
    /// Stops it; the id of the message it was stopped in.
    fn stop(self) -> String {
        self.stop.send(true).unwrap();
        self.thread.join().unwrap();
        let id = self.stopped_in.lock().unwrap().clone();
        id
    }
}
