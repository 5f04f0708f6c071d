//! The crash sweep (issue 8): watch the runner's requests to the server (every
//! JetStream API request and every journal write) and SIGKILL it right after
//! the k-th distinct one, for every k; then resume, or roll back, from there,
//! with live load: the workload must end exact every time.
//!
//! A request is "distinct" by its subject, and a journal write by the state it
//! records (phase, step under way, each consumer's phase), so every journal
//! transition is a kill point too. The kill lands after the server received the
//! request: whether it took effect is the race a real crash has.

use crate::common::*;
use crate::run::{assert_exact, finish, load_cfg, orders_stream, until_processed, until_published};
use cutover_core::journal::Phase;
use cutover_demo::load::Load;
use futures::StreamExt;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const ID: &str = "ORDERS.ORDERS_V2";

/// What identifies a request of the runner's, or `None` for requests that are
/// not its own: the workload's client uses another inbox prefix, and the
/// server's own requests (sourcing) reply elsewhere.
fn request_key(m: &async_nats::Message) -> Option<String> {
    let reply = m.reply.as_ref()?.as_str();
    if !reply.starts_with("_INBOX.") {
        return None;
    }
    let subject = m.subject.as_str();
    if let Some(key) = subject.strip_prefix("$KV.CUTOVER.mc.") {
        // A consumer's journal record: the consumer's phase it records.
        let r: serde_json::Value = serde_json::from_slice(&m.payload).ok()?;
        return Some(format!("journal consumer {key} {}", r["progress"]["phase"]));
    }
    if subject.starts_with("$KV.CUTOVER.m.") {
        // A journal head (or a format 1 journal): the state it records.
        let j: serde_json::Value = serde_json::from_slice(&m.payload).ok()?;
        let consumers: Vec<String> = j["consumers"]
            .as_array()
            .map(|a| a.iter().map(|c| format!("{}", c["phase"])).collect())
            .unwrap_or_default();
        return Some(format!(
            "journal {} {} {}",
            j["phase"],
            j["in_progress"],
            consumers.join(",")
        ));
    }
    if subject.starts_with("$KV.CUTOVER.") || subject.starts_with("$JS.API.") {
        return Some(subject.to_string());
    }
    None
}

enum Point {
    /// The runner was killed right after this request.
    Killed(String),
    /// The run finished before making k distinct requests.
    Finished,
}

/// Runs the migration with live load, kills the runner after its k-th distinct
/// request, then finishes the migration by `undo` (rollback, or resume where
/// rollback is refused past the commit point) or resume, and checks the
/// workload: none lost, none twice.
async fn sweep_point(k: usize, undo: bool, strategy: &str, mode: &str) -> Point {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let watcher = async_nats::connect(e.server.url()).await.unwrap();
    let api = watcher.subscribe("$JS.API.>").await.unwrap();
    let kv = watcher.subscribe("$KV.CUTOVER.>").await.unwrap();
    watcher.flush().await.unwrap();
    let load_client = async_nats::ConnectOptions::new()
        .custom_inbox_prefix("_LOAD")
        .connect(e.server.url())
        .await
        .unwrap();
    // Fence mode: the workload's workers follow the protocol (registered).
    let cfg = cutover_demo::load::LoadConfig { protocol: mode == "fence", ..load_cfg(500, 40_000) };
    let load = Load::start(load_client, cfg).await;
    if mode == "fence" {
        crate::fence::until_registered(&e, cfg_workers()).await;
    }
    until_processed(&load, 100).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .args(["--server", e.server.url(), "--json"])
        .args(command(strategy, mode))
        .args(["worker", "--yes", "--lease-ttl", "1s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let killed = kill_after(k, (api, kv), &mut child, Duration::from_secs(60)).await;
    let Some(key) = killed else {
        let r = finish(load).await;
        assert_exact(&r);
        return Point::Finished;
    };
    let id = if strategy == IN_PLACE { HOP1 } else { ID };
    let j = cutover_nats::journal::load_migration(&e.js, id).await.map(|(_, j)| j).ok();
    let mut resumed = !undo;
    if undo && j.as_ref().is_some_and(|j| j.phase != Phase::Done) {
        let out = retry_lease(&e, &["--json", "rollback", id]).await;
        if out.code != 0 {
            assert!(
                out.stderr.contains("commit point"),
                "rollback after {key:?} failed for another reason than the commit: {out:?}"
            );
            resumed = true;
        }
    }
    if undo && j.as_ref().is_some_and(|j| j.phase == Phase::Done) {
        resumed = true; // hop 1 is done: past the commit point
    }
    if resumed && strategy == IN_PLACE {
        // The same command resumes whichever hop is under way.
        let out = retry_lease(&e, &[&["--json"][..], &command(strategy, mode)].concat()).await;
        assert_eq!(out.code, 0, "resume after {key:?}: {out:?}");
        for id in [HOP1, HOP2] {
            let (_, j) = cutover_nats::journal::load_migration(&e.js, id).await.unwrap();
            assert_eq!(j.phase, Phase::Done, "{id} after {key:?}");
        }
        let (raw, _) = e.js.stream_info("ORDERS").await.unwrap();
        assert_eq!(raw["config"]["storage"], "memory", "after {key:?}");
    } else if resumed {
        let out = if j.is_some() {
            retry_lease(&e, &["--json", "run", "--resume", ID, "--lease-ttl", "1s"]).await
        } else {
            // Killed before the journal existed: a new run.
            retry_lease(&e, &[&["--json"][..], &command(strategy, mode)].concat()).await
        };
        assert_eq!(out.code, 0, "resume after {key:?}: {out:?}");
        let (_, j) = cutover_nats::journal::load_migration(&e.js, ID).await.unwrap();
        assert_eq!(j.phase, Phase::Done, "after {key:?}");
    } else {
        // Rolled back: A serves publishers and its old durable delivers.
        let b = if strategy == IN_PLACE { "ORDERS_CUTOVER" } else { "ORDERS_V2" };
        let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
        assert_eq!(a.config.subjects, vec!["orders.>".to_string()], "after {key:?}");
        let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
        assert!(!c.paused, "the old durable is paused after rollback from {key:?}");
        assert!(
            e.js.stream_info_opt(b).await.unwrap().is_none(),
            "B left behind after rollback from {key:?}"
        );
    }
    let after = load.published() + 100;
    until_published(&load, after).await;
    let r = finish(load).await;
    eprintln!("kill point {k} ({key}), {}:", if resumed { "resumed" } else { "rolled back" });
    assert_exact(&r);
    Point::Killed(key)
}

/// Watches the runner's requests (`watch`: subscriptions to the JetStream
/// API and the journal's bucket) and SIGKILLs `child` right after its k-th
/// distinct one; `None` if the run ended first (it must have succeeded).
async fn kill_after(
    k: usize,
    watch: (async_nats::Subscriber, async_nats::Subscriber),
    child: &mut tokio::process::Child,
    within: Duration,
) -> Option<String> {
    let (mut api, mut kv) = watch;
    let mut seen = HashSet::new();
    let deadline = Instant::now() + within;
    loop {
        let m = tokio::select! {
            m = api.next() => m.unwrap(),
            m = kv.next() => m.unwrap(),
            status = child.wait() => {
                let status = status.unwrap();
                assert!(status.success(), "the run failed before kill point {k}: {status}");
                return None;
            }
            _ = tokio::time::sleep_until(deadline.into()) => panic!("kill point {k}: no progress"),
        };
        if let Some(key) = request_key(&m) {
            if seen.insert(key.clone()) && seen.len() == k {
                child.start_kill().unwrap();
                child.wait().await.unwrap();
                return Some(key);
            }
        }
    }
}

const IN_PLACE: &str = "in-place";
const HOP1: &str = "ORDERS.ORDERS_CUTOVER";
const HOP2: &str = "ORDERS_CUTOVER.ORDERS";

/// The run command of a sweep, up to `--consumer`: a move with `strategy`
/// and `mode`, or an in-place change of storage (file to memory).
fn command<'a>(strategy: &'a str, mode: &'a str) -> Vec<&'a str> {
    if strategy == IN_PLACE {
        return vec!["run", "--in-place", "ORDERS", "--set", "storage=memory", "--consumer"];
    }
    let head = ["run", "--strategy", strategy, "--mode", mode, "--from", "ORDERS", "--to"];
    [&head[..], &["ORDERS_V2", "--consumer"]].concat()
}

/// Runs the CLI until the killed runner's lease has lapsed.
pub async fn retry_lease(e: &Env, args: &[&str]) -> Out {
    let mut args: Vec<&str> = args.to_vec();
    if args.last() == Some(&"--consumer") {
        args.extend(["worker", "--yes", "--lease-ttl", "1s"]);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = e.cli_async(&args).await;
        if out.code != 0 && out.stderr.contains("is held by runner") && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        return out;
    }
}

/// The workload's workers (`load_cfg`'s).
fn cfg_workers() -> usize {
    load_cfg(500, 40_000).workers
}

async fn sweep(undo: bool, strategy: &'static str) {
    sweep_mode(undo, strategy, "drain").await
}

/// Kill points two at a time, each on its own server and its own task (a
/// point mostly waits: for its load, its leases, its resume), taken in order; the first whose run ends before its
/// kill ends the sweep, and the one beside it is aborted (its server and
/// runner go with it).
async fn sweep_mode(undo: bool, strategy: &'static str, mode: &'static str) {
    let (points, finished) =
        two_at_a_time(1..200, |k| tokio::spawn(sweep_point(k, undo, strategy, mode))).await;
    assert!(finished, "the runner makes more distinct requests than expected");
    eprintln!("{} kill points: {points:#?}", points.len());
    assert!(points.len() >= 10, "too few kill points: {points:?}");
}

/// Runs the kill points `ks` two at a time, taken in order, until one
/// finds the run ended before its kill (then `true`) or `ks` ends: the
/// keys of the requests killed after. The one beside the last is aborted
/// (its servers and runner go with it); a point's panic is the sweep's.
async fn two_at_a_time(
    ks: impl IntoIterator<Item = usize>,
    spawn: impl Fn(usize) -> tokio::task::JoinHandle<Point>,
) -> (Vec<String>, bool) {
    let mut ks = ks.into_iter();
    let mut running: std::collections::VecDeque<_> = ks.by_ref().take(2).map(&spawn).collect();
    let mut points = vec![];
    let mut finished = false;
    while let Some(point) = running.pop_front() {
        let point = match point.await {
            Ok(p) => p,
            Err(e) => {
                running.iter().for_each(|h| h.abort());
                std::panic::resume_unwind(e.into_panic());
            }
        };
        match point {
            Point::Killed(key) => points.push(key),
            Point::Finished => {
                finished = true;
                break;
            }
        }
        running.extend(ks.next().map(&spawn));
    }
    running.iter().for_each(|h| h.abort());
    (points, finished)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_every_request_then_resume_is_exact() {
    sweep(false, "source").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_every_request_then_rollback_is_exact() {
    sweep(true, "source").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_every_request_then_resume_is_exact_with_mirror() {
    sweep(false, "mirror").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_every_request_then_rollback_is_exact_with_mirror() {
    sweep(true, "mirror").await;
}

/// Both hops of an in-place change: killed after every distinct request, the
/// same command resumes whichever hop is under way (issue 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_every_request_then_resume_is_exact_in_place() {
    sweep(false, IN_PLACE).await;
}

/// Rollback of hop 1 before its commit point restores everything; past it
/// (or in hop 2) the same command finishes the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_every_request_then_rollback_is_exact_in_place() {
    sweep(true, IN_PLACE).await;
}

/// Fence mode (docs/protocol.md) with the protocol's workers: killed after
/// every distinct request, then resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_every_request_then_resume_is_exact_in_fence_mode() {
    sweep_mode(false, "source", "fence").await;
}

/// Fence mode, killed after every distinct request, then rolled back (or
/// resumed past the commit point).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_every_request_then_rollback_is_exact_in_fence_mode() {
    sweep_mode(true, "source", "fence").await;
}

/// The in-place change of the cluster sweep (both hops hand the copy over
/// to sourcing on a cluster, each after a retry horizon of ORDERS' 2 s window).
const CLUSTER_CHANGE: [&str; 11] = [
    "run",
    "--in-place",
    "ORDERS",
    "--set",
    "storage=memory",
    "--consumer",
    "worker",
    "--yes",
    "--lease-ttl",
    "1s",
    "--json",
];

/// One kill point of the in-place sweep on a 3-node cluster: R3 ORDERS under
/// live load (msg-ids, retries of lost answers), the runner killed right
/// after its k-th distinct request, then the same command resumes whichever
/// hop is under way: both hops done, the workload exact.
async fn cluster_point(k: usize) -> Point {
    let cluster = cutover_testkit::Cluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let urls = cluster.urls();
    let list: Vec<String> = urls.split(',').map(String::from).collect();
    let client = async_nats::connect(list.clone()).await.unwrap();
    let js = cutover_nats::Js::new(client.clone(), Duration::from_secs(5));
    wait_until("an R3 stream to be created", Duration::from_secs(30), || async {
        let s = serde_json::json!({"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3, "duplicate_window": 2_000_000_000i64});
        js.stream_create(&s).await.is_ok()
    })
    .await;
    let worker = serde_json::json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000});
    let create = cutover_nats::api::Action::Create;
    js.consumer_create("ORDERS", "worker", &worker, create).await.unwrap();
    let api = client.subscribe("$JS.API.>").await.unwrap();
    let kv = client.subscribe("$KV.CUTOVER.>").await.unwrap();
    client.flush().await.unwrap();
    let load_client =
        async_nats::ConnectOptions::new().custom_inbox_prefix("_LOAD").connect(list).await.unwrap();
    let load = Load::start(load_client, load_cfg(300, 40_000)).await;
    until_processed(&load, 100).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .args(["--server", &urls])
        .args(CLUSTER_CHANGE)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let killed = kill_after(k, (api, kv), &mut child, Duration::from_secs(90)).await;
    let Some(key) = killed else {
        assert_exact(&finish(load).await);
        return Point::Finished;
    };
    let resume_deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = crate::common::cli_at(&urls, &CLUSTER_CHANGE).await;
        let held = out.stderr.contains("is held by runner");
        if out.code != 0 && held && Instant::now() < resume_deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        break out;
    };
    assert_eq!(out.code, 0, "resume after {key:?}: {out:?}");
    for id in [HOP1, HOP2] {
        let (_, j) = cutover_nats::journal::load_migration(&js, id).await.unwrap();
        assert_eq!(j.phase, Phase::Done, "{id} after {key:?}");
    }
    let (_, s) = js.stream_info("ORDERS").await.unwrap();
    assert_eq!((s.config.storage.as_str(), s.config.num_replicas), ("memory", 3), "after {key:?}");
    let after = load.published() + 100;
    until_published(&load, after).await;
    let r = finish(load).await;
    eprintln!("cluster kill point {k} ({key}): resumed");
    assert_exact(&r);
    assert_eq!(s.state.first_seq, 1, "ORDERS' sequences kept after {key:?}");
    Point::Killed(key)
}

/// Issue 23: the in-place crash sweep on a 3-node cluster (R3, both hops
/// handed over to sourcing): the runner killed after a distinct request,
/// every `CUTOVER_CLUSTER_SWEEP_STRIDE`-th one (default 12: k = 1, 13, 25,
/// ..., about 70 distinct requests in all: the journal's start, the lease,
/// the durable's pause, B's update, the retire of hop 1, hop 2's settled
/// checkpoint; `=6` took 12 points, all exact, in 182 s on 2 cores beside
/// other work; `=1` takes every request), two points at a time, each on
/// its own cluster. The step-level sweep with a node killed is
/// `cluster::in_place_on_a_cluster_is_exact_with_a_node_killed_after_every_step`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_requests_of_an_in_place_change_on_a_cluster_then_resume_is_exact() {
    let stride: usize = std::env::var("CUTOVER_CLUSTER_SWEEP_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s > 0)
        .unwrap_or(12);
    // `CUTOVER_CLUSTER_SWEEP_FROM=K`: the sweep from kill point K on (to
    // replay one).
    let from: usize =
        std::env::var("CUTOVER_CLUSTER_SWEEP_FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let ks = (0..).map(|i| from + i * stride).take_while(|k| *k < 400);
    let (points, finished) = two_at_a_time(ks, |k| tokio::spawn(cluster_point(k))).await;
    assert!(finished, "the runner makes more distinct requests than expected");
    eprintln!("{} cluster kill points (every {stride}th request): {points:#?}", points.len());
    assert!(from - 1 + points.len() * stride >= 40, "too few kill points: {points:?}");
}
