//! Moves across systems (docs/cross-system.md), live, through the CLI: a
//! stream in a leaf node's JetStream domain to its hub's (a server, then a
//! 3-node cluster with R3 streams), and a stream in one account to another
//! account of the same server; and the refusal, before any write, of a
//! boundary sourcing cannot cross.

use crate::common::{cli, wait_until, Out, TempDir};
use crate::run::{assert_exact, finish_after, load_cfg, until_processed, until_published};
use cutover_core::journal::Phase;
use cutover_demo::load::Load;
use cutover_nats::api::Action;
use cutover_nats::Js;
use cutover_testkit::{two_accounts_config, LeafSystem, NatsServer, ServerOptions};
use serde_json::{json, Value};
use std::time::Duration;

/// One side of a move: its client and JetStream API.
pub(crate) struct Side {
    pub(crate) client: async_nats::Client,
    pub(crate) js: Js,
}

pub(crate) async fn side(urls: &str, user: Option<&str>) -> Side {
    let urls: Vec<String> = urls.split(',').map(String::from).collect();
    let mut opts = async_nats::ConnectOptions::new();
    if let Some(u) = user {
        opts = opts.user_and_password(u.into(), u.into());
    }
    let client = opts.connect(urls).await.expect("connect");
    Side { js: Js::new(client.clone(), Duration::from_secs(5)), client }
}

/// ORDERS on `src` (R1) with its durable `worker`, as the live tests use it.
pub(crate) async fn orders_on(src: &Js) {
    src.stream_create(&json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}))
        .await
        .expect("create ORDERS");
    let worker = json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000});
    src.consumer_create("ORDERS", "worker", &worker, Action::Create).await.expect("create worker");
}

/// Both domains answer from the other side: the leaf connection is up.
pub(crate) async fn until_leaf_connected(hub: &Side, leaf: &Side) {
    wait_until("the leaf node connection", Duration::from_secs(30), || async {
        let h = hub.client.request("$JS.leaf.API.INFO", "".into()).await.is_ok();
        let l = leaf.client.request("$JS.hub.API.INFO", "".into()).await.is_ok();
        h && l
    })
    .await;
}

/// The CLI with `args` (the connection options first).
pub(crate) fn run(args: &[&str]) -> Out {
    let out = cli(args);
    eprintln!("{}", out.stderr);
    out
}

/// The live move with load: the publisher and the workers start on the old
/// stream's system, the workers follow their route to the new one; then the
/// publishers go on (into B, across the boundary), every message is
/// processed once, and `verify` holds reading both systems.
async fn live_move(home: &Side, target: &Side, conn: &[&str], extra: &[&str]) -> Value {
    orders_on(&home.js).await;
    let load =
        Load::start_across(home.client.clone(), target.client.clone(), load_cfg(500, 20_000)).await;
    until_processed(&load, 300).await;
    let args = [conn, &["--json", "run", "--from", "ORDERS", "--to", "ORDERS_V2"]].concat();
    let out = run(&[&args[..], &["--consumer", "worker", "--yes"], extra].concat());
    assert_eq!(out.code, 0, "{out:?}");
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    // A is sealed on its side; B took the subjects and holds every message
    // published (sourced before the commit point, published after it).
    let (_, a) = home.js.stream_info("ORDERS").await.unwrap();
    assert!(a.config.sealed, "ORDERS sealed on the source side");
    let (_, b) = target.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.config.subjects, vec!["orders.>".to_string()]);
    assert!(b.config.sources.is_empty(), "source removed");
    assert_eq!(b.state.messages, r.published, "B holds each published message once");
    assert!(
        target.js.stream_info_opt("KV_CUTOVER").await.unwrap().is_some(),
        "journal on B's side"
    );
    assert!(home.js.stream_info_opt("KV_CUTOVER").await.unwrap().is_none(), "none on A's");
    let args = [conn, &["--json", "verify", "--migration", "ORDERS.ORDERS_V2"]].concat();
    let v = run(&args);
    assert_eq!(v.code, 0, "verify across the two connections: {v:?}");
    let v = v.json();
    assert_eq!(v["holds"], true, "{v}");
    assert_eq!(v["consumers"][0]["counts"]["checked"], r.published, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leaf_domain_to_hub_domain_live() {
    let sys = LeafSystem::start(1).unwrap_or_else(|e| panic!("{e}"));
    let (hub, leaf) = (side(&sys.hub_urls(), None).await, side(sys.leaf.url(), None).await);
    until_leaf_connected(&hub, &leaf).await;
    let conn = ["--server", &sys.hub_urls(), "--from-server", sys.leaf.url()];
    live_move(&leaf, &hub, &conn, &[]).await;
    // B sourced A through the leaf domain's API, derived from A's domain.
    let out = run(&[&conn[..], &["--json", "status", "ORDERS.ORDERS_V2"]].concat());
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("$JS.leaf.API"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leaf_domain_to_a_three_node_hub_with_r3_streams_live() {
    let sys = LeafSystem::start(3).unwrap_or_else(|e| panic!("{e}"));
    let (hub, leaf) = (side(&sys.hub_urls(), None).await, side(sys.leaf.url(), None).await);
    until_leaf_connected(&hub, &leaf).await;
    wait_until("the hub's meta leader", Duration::from_secs(30), || async {
        hub.js.account_info().await.is_ok()
    })
    .await;
    let dir = TempDir::new("cross-r3");
    let b_cfg = dir.0.join("b.json");
    std::fs::write(&b_cfg, r#"{"num_replicas": 3}"#).unwrap();
    let conn = ["--server", &sys.hub_urls(), "--from-server", sys.leaf.url()];
    live_move(&leaf, &hub, &conn, &["--to-config", b_cfg.to_str().unwrap()]).await;
    let (_, b) = hub.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.config.num_replicas, 3, "B is R3 on the hub cluster");
}

pub(crate) fn accounts_server(omit: &[&str]) -> NatsServer {
    NatsServer::start_with(ServerOptions {
        config: Some(two_accounts_config(omit)),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The target side as user `dst`, the source side as user `src`, and how B
/// reaches A (the imports of `two_accounts_config`).
pub(crate) fn accounts_conn(url: &str) -> Vec<&str> {
    vec![
        "--server",
        url,
        "--user",
        "dst",
        "--password",
        "dst",
        "--from-server",
        url,
        "--from-user",
        "src",
        "--from-password",
        "src",
    ]
}

pub(crate) const ACCOUNTS_PLAN: [&str; 4] =
    ["--from-api", "JS.SRC.API", "--from-deliver", "deliver.src"];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_account_to_another_live() {
    let server = accounts_server(&[]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    let v = live_move(&src, &dst, &accounts_conn(server.url()), &ACCOUNTS_PLAN).await;
    assert_eq!(v["consumers"][0]["counts"]["duplicated"], 0, "{v}");
}

/// Every stream and consumer of one side, without what changes by itself.
async fn snapshot(js: &Js) -> Value {
    let names = js.api("names", "STREAM.NAMES", &Value::Null).await.unwrap();
    let mut out = serde_json::Map::new();
    for n in names["streams"].as_array().cloned().unwrap_or_default() {
        let n = n.as_str().unwrap().to_string();
        let (_, s) = js.stream_info(&n).await.unwrap();
        let mut consumers = vec![];
        for c in js.consumer_names(&n).await.unwrap() {
            let (_, ci) = js.consumer_info(&n, &c).await.unwrap();
            consumers.push(json!([c, ci.delivered.stream_seq, ci.ack_floor.stream_seq, ci.paused]));
        }
        out.insert(n, json!({"config": s.config.subjects, "last": s.state.last_seq, "sealed": s.config.sealed, "consumers": consumers}));
    }
    Value::Object(out)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_boundary_sourcing_cannot_cross_is_refused_before_any_write() {
    // B's account imports neither A's consumer API nor its deliver subjects.
    let server = accounts_server(&["$JS.API.CONSUMER", "deliver.src"]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let before = (snapshot(&src.js).await, snapshot(&dst.js).await);
    let conn = accounts_conn(server.url());
    let args = ["--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let plan = run(&[&conn[..], &["plan"], &args, &ACCOUNTS_PLAN].concat());
    assert_eq!(plan.code, 3, "refused as incompatible: {plan:?}");
    for named in
        ["$JS.API.CONSUMER.>", "to: \"JS.SRC.API.CONSUMER.>\"", "exports stream `deliver.src.>`"]
    {
        assert!(plan.stdout.contains(named), "the plan names {named}: {plan:?}");
    }
    assert!(!plan.stdout.contains("`$JS.FC.>` does not cross"), "$JS.FC.> is imported: {plan:?}");
    assert!(!plan.stdout.contains("do not reach the target side"), "orders.> is: {plan:?}");
    let out = run(&[&conn[..], &["run"], &args, &ACCOUNTS_PLAN, &["--yes"]].concat());
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("deliver.src.>"), "{out:?}");
    assert_eq!((snapshot(&src.js).await, snapshot(&dst.js).await), before, "nothing changed");
    // Without a domain on A's side, the prefix must be named: refused as bad
    // input before anything is read.
    let out = run(&[&conn[..], &["plan"], &args].concat());
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--from-api"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leaf_domain_to_hub_domain_with_strategy_mirror_live() {
    let sys = LeafSystem::start(1).unwrap_or_else(|e| panic!("{e}"));
    let (hub, leaf) = (side(&sys.hub_urls(), None).await, side(sys.leaf.url(), None).await);
    until_leaf_connected(&hub, &leaf).await;
    let conn = ["--server", &sys.hub_urls(), "--from-server", sys.leaf.url()];
    live_move(&leaf, &hub, &conn, &["--strategy", "mirror"]).await;
    // B kept A's sequences: the mirror's promotion across the boundary.
    let (_, a) = leaf.js.stream_info("ORDERS").await.unwrap();
    let (_, b) = hub.js.stream_info("ORDERS_V2").await.unwrap();
    assert!(b.config.mirror.is_none(), "promoted");
    assert_eq!(b.state.first_seq, a.state.first_seq);
}

/// The CLI until it stops answering that a crashed runner's lease holds.
pub(crate) async fn until_lease_lapsed(args: &[&str]) -> Out {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = cli(args);
        if out.code == 0 || !out.stderr.contains("is held by runner") {
            return out;
        }
        assert!(std::time::Instant::now() < deadline, "lease never lapsed: {out:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A runner that dies once the new durable exists on the hub leaves the
/// journal on the target side: resuming without the source side is refused
/// (naming the options), and rollback with both sides restores the leaf's
/// consumer; the applications process every message once throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn across_a_crashed_run_is_refused_without_its_source_side_and_rolled_back() {
    let sys = LeafSystem::start(1).unwrap_or_else(|e| panic!("{e}"));
    let (hub, leaf) = (side(&sys.hub_urls(), None).await, side(sys.leaf.url(), None).await);
    until_leaf_connected(&hub, &leaf).await;
    orders_on(&leaf.js).await;
    let load =
        Load::start_across(leaf.client.clone(), hub.client.clone(), load_cfg(500, 20_000)).await;
    until_processed(&load, 300).await;
    let hub_urls = sys.hub_urls();
    let conn = ["--server", &hub_urls, "--from-server", sys.leaf.url()];
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
    cmd.args(conn).args(["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"]);
    cmd.args(["--yes", "--lease-ttl", "1s"])
        .env("NATS_CUTOVER_TEST_CRASH_AFTER", "consumer_created:worker");
    let crashed = cmd.output().unwrap();
    assert_eq!(crashed.status.code(), Some(86), "{crashed:?}");
    let out = cli(&["--server", &hub_urls, "run", "--resume", "ORDERS.ORDERS_V2", "--yes"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--from-server or --from-context"), "{out:?}");
    // So is a rollback (a newcomer's once deleted B and left the leaf's
    // durable paused for good: it could not reach A), and so is verify.
    let out = cli(&["--server", &hub_urls, "rollback", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--from-server or --from-context"), "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&hub.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_ne!(j.phase, Phase::RolledBack, "the refused rollback changed nothing");
    assert!(hub.js.consumer_info("ORDERS_V2", "worker").await.is_ok(), "B's durable kept");
    let out = cli(&["--server", &hub_urls, "verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 2, "{out:?}");
    let args = [&conn[..], &["rollback", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"]].concat();
    let out = until_lease_lapsed(&args).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, c) = leaf.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "the leaf's consumer delivers again");
    assert!(
        hub.js.stream_info_opt("ORDERS_V2").await.unwrap().is_none(),
        "B (made by the run) is gone"
    );
    let r = finish_after(load, 300).await;
    assert_exact(&r);
}

/// A's account does not import B's subjects: publishers left on A's side
/// would find no stream after the commit point. The plan finds it with a
/// probe A refuses unstored, and refuses unless the operator says the
/// publishers will be repointed.
#[tokio::test(flavor = "multi_thread")]
async fn publishers_that_cannot_reach_b_are_refused_unless_repointed() {
    let server = accounts_server(&["account: DST, subject: \"orders.>\""]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let before = (snapshot(&src.js).await, snapshot(&dst.js).await);
    let conn = accounts_conn(server.url());
    let args = ["--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let plan = run(&[&conn[..], &["plan"], &args, &ACCOUNTS_PLAN].concat());
    assert_eq!(plan.code, 3, "{plan:?}");
    assert!(plan.stdout.contains("exports service `orders.>`"), "{plan:?}");
    assert!(plan.stdout.contains("--repoint-publishers"), "{plan:?}");
    let ok =
        run(&[&conn[..], &["--json", "plan"], &args, &ACCOUNTS_PLAN, &["--repoint-publishers"]]
            .concat());
    assert_eq!(ok.code, 0, "{ok:?}");
    let p = ok.json();
    let f = p["findings"].as_array().unwrap().iter().find(|f| f["setting"] == "publishers");
    assert!(f.unwrap()["reason"].as_str().unwrap().contains("repoint the publishers"), "{p}");
    // The probes stored nothing in A and changed nothing on either side.
    assert_eq!((snapshot(&src.js).await, snapshot(&dst.js).await), before, "nothing changed");
}

/// Push subscribers on `client` in queue group `g` of `deliver.orders`,
/// counting each msg-id they processed and acknowledged (double ack).
fn push_subscribers(
    client: &async_nats::Client,
    n: usize,
    seen: &std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u64, u32>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    use futures::StreamExt;
    (0..n)
        .map(|_| {
            let (client, seen) = (client.clone(), seen.clone());
            tokio::spawn(async move {
                let mut sub = client.queue_subscribe("deliver.orders", "g".into()).await.unwrap();
                while let Some(m) = sub.next().await {
                    let Some(reply) = m.reply.clone() else { continue };
                    let id = m
                        .headers
                        .as_ref()
                        .and_then(|h| h.get("Nats-Msg-Id"))
                        .and_then(|v| v.as_str().strip_prefix("m-"))
                        .and_then(|s| s.parse::<u64>().ok());
                    let Some(id) = id else { continue };
                    if client.request(reply, "+ACK".into()).await.is_ok() {
                        *seen.lock().unwrap().entry(id).or_default() += 1;
                    }
                }
            })
        })
        .collect()
}

/// A push consumer's subscribers stay on the leaf, on the same deliver
/// subject and group: the new durable on the hub delivers to them across the
/// leaf connection and takes their acks. Nothing is redeployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_subscribers_on_the_leaf_keep_receiving_from_the_hub() {
    push_through_a_move("ORDERS_V2").await;
}

/// Push subscribers on the leaf (a deliver group, acking by reply) through
/// a move of ORDERS from the leaf to `to` on the hub (`ORDERS` itself: a
/// same-name move): the new durable keeps the deliver subject, whose
/// deliveries cross the leaf connection; every published message is
/// processed once, and `verify` holds.
pub(crate) async fn push_through_a_move(to: &str) {
    let sys = LeafSystem::start(1).unwrap_or_else(|e| panic!("{e}"));
    let (hub, leaf) = (side(&sys.hub_urls(), None).await, side(sys.leaf.url(), None).await);
    until_leaf_connected(&hub, &leaf).await;
    leaf.js
        .stream_create(&json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}))
        .await
        .unwrap();
    let pusher = json!({"durable_name": "pusher", "ack_policy": "explicit", "deliver_subject": "deliver.orders", "deliver_group": "g", "max_ack_pending": 1000, "ack_wait": 30_000_000_000i64});
    leaf.js.consumer_create("ORDERS", "pusher", &pusher, Action::Create).await.unwrap();
    let seen = std::sync::Arc::default();
    let subs = push_subscribers(&leaf.client, 2, &seen);
    let mut cfg = load_cfg(500, 20_000);
    cfg.workers = 0;
    let mut load = Load::start(leaf.client.clone(), cfg).await;
    wait_until("push subscribers to receive", Duration::from_secs(20), || async {
        seen.lock().unwrap().len() > 200
    })
    .await;
    let conn = ["--server", &sys.hub_urls(), "--from-server", sys.leaf.url()];
    let args = ["run", "--from", "ORDERS", "--to", to, "--consumer", "pusher", "--yes"];
    let out = run(&[&conn[..], &args].concat());
    assert_eq!(out.code, 0, "{out:?}");
    let (_, bc) = hub.js.consumer_info(to, "pusher").await.unwrap();
    assert_eq!(bc.config.deliver_subject.as_deref(), Some("deliver.orders"));
    until_published(&load, load.published() + 300).await;
    load.finish_publishing().await;
    // With no library workers, every published id is in `lost`: the published set.
    let published = load.stop().await.lost;
    wait_until("push subscribers to process everything", Duration::from_secs(20), || async {
        let s = seen.lock().unwrap();
        published.iter().all(|id| s.contains_key(id))
    })
    .await;
    let s = seen.lock().unwrap().clone();
    let twice: Vec<_> = s.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    assert_eq!(s.len(), published.len(), "processed exactly the published set");
    eprintln!("push across: published {} processed {} exactly once", published.len(), s.len());
    subs.into_iter().for_each(|t| t.abort());
    let v = run(&[&conn[..], &["--json", "verify", "--from", "ORDERS", "--to", to]].concat());
    assert_eq!(v.code, 0, "{v:?}");
}

/// The leaf connection does not let A's deliver subjects out: sourcing could
/// never start. Refused before any write on either side, naming the subject.
#[tokio::test(flavor = "multi_thread")]
async fn a_leaf_connection_that_holds_back_deliver_subjects_is_refused_before_any_write() {
    let sys =
        LeafSystem::start_with(1, r#"deny_exports: ["$JS.S.>"]"#).unwrap_or_else(|e| panic!("{e}"));
    let (hub, leaf) = (side(&sys.hub_urls(), None).await, side(sys.leaf.url(), None).await);
    until_leaf_connected(&hub, &leaf).await;
    orders_on(&leaf.js).await;
    let before = (snapshot(&leaf.js).await, snapshot(&hub.js).await);
    let conn = ["--server", &sys.hub_urls(), "--from-server", sys.leaf.url()];
    let args = ["--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let out = run(&[&conn[..], &["run"], &args, &["--yes"]].concat());
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("`$JS.S.>` does not cross"), "{out:?}");
    assert!(out.stderr.contains("the connection must allow `$JS.S.>`"), "{out:?}");
    assert!(!out.stderr.contains("external api"), "the API crosses: {out:?}");
    assert_eq!((snapshot(&leaf.js).await, snapshot(&hub.js).await), before, "nothing changed");
}

/// A runner killed inside the commit window (A released its subjects on the
/// leaf, B has not taken them on the hub) is resumed with both sides: the
/// resume asks the servers who holds the subjects and finishes; exact, and
/// verify holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn across_a_run_killed_in_the_commit_window_resumes_exactly() {
    let sys = LeafSystem::start(1).unwrap_or_else(|e| panic!("{e}"));
    let (hub, leaf) = (side(&sys.hub_urls(), None).await, side(sys.leaf.url(), None).await);
    until_leaf_connected(&hub, &leaf).await;
    orders_on(&leaf.js).await;
    let load =
        Load::start_across(leaf.client.clone(), hub.client.clone(), load_cfg(500, 20_000)).await;
    until_processed(&load, 300).await;
    let hub_urls = sys.hub_urls();
    let conn = ["--server", &hub_urls, "--from-server", sys.leaf.url()];
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
    cmd.args(conn).args(["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"]);
    cmd.args(["--yes", "--lease-ttl", "1s"])
        .env("NATS_CUTOVER_TEST_CRASH_AFTER", "subjects_released");
    let crashed = cmd.output().unwrap();
    assert_eq!(crashed.status.code(), Some(86), "{crashed:?}");
    let args = [&conn[..], &["--json", "run", "--resume", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"]]
        .concat();
    let out = until_lease_lapsed(&args).await;
    assert_eq!(out.code, 0, "{out:?}");
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    let (_, b) = hub.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.config.subjects, vec!["orders.>".to_string()]);
    let v = run(&[&conn[..], &["--json", "verify", "--migration", "ORDERS.ORDERS_V2"]].concat());
    assert_eq!(v.code, 0, "{v:?}");
}

/// `two_accounts_config`'s import that lets publishes on A's side reach B's
/// account: without it, publishes cross in neither direction.
pub(crate) const PUBLISHERS_IMPORT: &str = "account: DST, subject: \"orders.>\"";

/// A CLI process beside the test: its stdout collected as it comes, its
/// stderr in a file.
pub(crate) struct Running {
    child: std::process::Child,
    out: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
    stderr: std::path::PathBuf,
}

impl Running {
    pub(crate) fn spawn(args: &[&str], env: &[(&str, &str)], stderr: std::path::PathBuf) -> Self {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
        cmd.args(args).stdout(std::process::Stdio::piped());
        cmd.stderr(std::fs::File::create(&stderr).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let out = std::sync::Arc::<std::sync::Mutex<String>>::default();
        let o = out.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut o = o.lock().unwrap();
                o.push_str(&line);
                o.push('\n');
            }
        });
        Self { child, out, reader, stderr }
    }

    fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The JSON events it printed so far.
    pub(crate) fn events(&self) -> Vec<Value> {
        self.stdout().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// Its exit code once it ended (polled with a deadline).
    pub(crate) async fn end(mut self, within: Duration) -> (Option<i32>, Vec<Value>) {
        let deadline = std::time::Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "did not end: {}", self.stdout());
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!("{}", self.stderr());
        let events = {
            self.reader.join().unwrap();
            self.out.lock().unwrap().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
        };
        (status.code(), events)
    }
}

/// A progress event of the wait for the publishers: the runner waits.
pub(crate) fn waiting(e: &Value) -> bool {
    e["step"] == "await_publishers" && e["kind"] == "progress"
}

/// Both streams hold the subjects, each on its side (B beside A).
async fn assert_split(src: &Side, dst: &Side) {
    let (_, a) = src.js.stream_info("ORDERS").await.unwrap();
    let (_, b) = dst.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()], "A keeps its subjects");
    assert!(!a.config.sealed);
    assert_eq!(b.config.subjects, vec!["orders.>".to_string()], "B took them on its side");
    assert_eq!(b.config.sources.len(), 1, "B still sources A");
}

/// Repoints the load's publisher to the target side, lets it publish 300
/// there, and waits until the runner reports a whole interval in which A
/// stored nothing (every publish now goes into B directly).
async fn repoint_and_until_a_idle(load: &Load, dst: &Side, runner: &Running) {
    load.repoint_publisher(dst.client.clone());
    until_published(load, load.published() + 300).await;
    let seen = runner.events().iter().filter(|e| waiting(e)).count();
    wait_until("a report of A storing nothing", Duration::from_secs(30), || async {
        let evs = runner.events();
        evs.iter().filter(|e| waiting(e)).skip(seen).any(|e| e["detail"]["a_stored"] == 0)
    })
    .await;
}

/// The go-ahead from another command while the runner waits: recorded (or,
/// if the runner was quicker, the migration found complete).
fn go_ahead(conn: &[&str]) {
    let go = run(&[conn, &["--json", "run", "--resume", "ORDERS.ORDERS_V2", "--proceed"]].concat());
    assert_eq!(go.code, 0, "{go:?}");
    eprintln!("go-ahead: {}", go.stdout);
}

/// After the move: exact, no publish failed, A sealed, B alone with the
/// subjects and every message once, `verify` across both connections.
async fn assert_split_finished(load: Load, src: &Side, dst: &Side, conn: &[&str]) -> u64 {
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    let (_, a) = src.js.stream_info("ORDERS").await.unwrap();
    assert!(a.config.sealed, "A sealed");
    let (_, b) = dst.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.config.subjects, vec!["orders.>".to_string()]);
    assert!(b.config.sources.is_empty(), "source removed");
    assert_eq!(b.state.messages, r.published, "B holds each published message once");
    let v = run(&[conn, &["--json", "verify", "--migration", "ORDERS.ORDERS_V2"]].concat());
    assert_eq!(v.code, 0, "verify across the two connections: {v:?}");
    let v = v.json();
    assert_eq!(v["holds"], true, "{v}");
    assert_eq!(v["consumers"][0]["counts"]["checked"], r.published, "{v}");
    // The slipped-duplicate check compared the direct publishes from the
    // first one after B took the subjects (they interleave with sourced ones).
    let slip = &v["streams"]["slip"];
    assert!(slip["direct_ids"].as_u64().is_some_and(|n| n > 0), "{v}");
    assert!(slip["sourced_compared"].as_u64().is_some_and(|n| n > 0), "{v}");
    eprintln!(
        "split publishers: published {} lost {} twice {} publish failures {} retries {} max stall {:.1} ms",
        r.published,
        r.lost.len(),
        r.duplicated.len(),
        r.publish_failures,
        r.publish_retries,
        r.max_publish_stall_ms
    );
    r.published
}

/// The load for these tests: long enough for a run that waits.
async fn split_load(src: &Side, dst: &Side) -> Load {
    let mut cfg = load_cfg(500, 60_000);
    cfg.duration = Duration::from_secs(120);
    let load = Load::start_across(src.client.clone(), dst.client.clone(), cfg).await;
    until_processed(&load, 300).await;
    load
}

/// Two accounts without the publishers' import: a publish on either side
/// does not reach the other. With --repoint-publishers the run moves the
/// consumers, lets B take the subjects beside A and waits, reporting what A
/// stores; the test repoints the publisher (a connection to the target side
/// takes over, the first gets nothing more), sees A go idle in the reports,
/// and gives the go-ahead from another command. Every message processed
/// once, no publish failed (A kept its subjects until the seal), verify
/// holds across the two connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publishers_repointed_mid_run_across_accounts_live() {
    let server = accounts_server(&[PUBLISHERS_IMPORT]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let load = split_load(&src, &dst).await;
    let conn = accounts_conn(server.url());
    let dir = TempDir::new("split-live");
    let args = ["--json", "run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let args = [&conn[..], &args, &ACCOUNTS_PLAN, &["--yes", "--repoint-publishers"]].concat();
    let runner = Running::spawn(&args, &[], dir.0.join("run.err"));
    wait_until("the run to wait for the publishers", Duration::from_secs(60), || async {
        runner.events().iter().any(waiting)
    })
    .await;
    assert_split(&src, &dst).await;
    // A go-ahead given too early, while the publisher still writes A (a
    // newcomer's cut that publisher off for good): the run warns and keeps
    // A serving until A stored nothing for a while.
    go_ahead(&conn);
    wait_until("the premature go-ahead's warning", Duration::from_secs(30), || async {
        runner.events().iter().any(|e| {
            e["kind"] == "warning"
                && e["detail"]["message"].as_str().is_some_and(|m| m.contains("still storing"))
        })
    })
    .await;
    assert_split(&src, &dst).await;
    // Repointed: A goes idle and the recorded go-ahead seals it.
    load.repoint_publisher(dst.client.clone());
    let (code, events) = runner.end(Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{events:?}");
    let done = events.iter().find(|e| e["step"] == "await_publishers" && e["kind"] == "step_done");
    let done = done.expect("the wait ended").clone();
    assert_eq!(done["detail"]["by"], "operator", "{done}");
    let published = assert_split_finished(load, &src, &dst, &conn).await;
    let reports: Vec<_> = events.iter().filter(|e| waiting(e)).map(|e| &e["detail"]).collect();
    eprintln!(
        "published {published}; waited {} ms; reports {reports:?}",
        done["detail"]["waited_ms"]
    );
}

/// The runner killed (SIGKILL) while it waits for the publishers: a
/// rollback is refused (naming the go-ahead) and changes nothing; a resume
/// waits again (publishers on A's side still served), the publisher is
/// repointed, the go-ahead given: exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_publishers_runner_killed_while_waiting_resumes_exactly() {
    let server = accounts_server(&[PUBLISHERS_IMPORT]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let load = split_load(&src, &dst).await;
    let conn = accounts_conn(server.url());
    let dir = TempDir::new("split-killed");
    let moves = ["--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let opts = ["--yes", "--repoint-publishers", "--lease-ttl", "1s"];
    let args = [&conn[..], &["--json", "run"], &moves, &ACCOUNTS_PLAN, &opts].concat();
    let mut first = Running::spawn(&args, &[], dir.0.join("first.err"));
    wait_until("the run to wait for the publishers", Duration::from_secs(60), || async {
        first.events().iter().any(waiting)
    })
    .await;
    first.child.kill().unwrap();
    let (code, _) = first.end(Duration::from_secs(10)).await;
    assert_eq!(code, None, "killed by a signal");
    assert_split(&src, &dst).await;
    let before = (snapshot(&src.js).await["ORDERS"]["config"].clone(), snapshot(&dst.js).await);
    let rb = run(&[&conn[..], &["rollback", "ORDERS.ORDERS_V2"]].concat());
    assert_eq!(rb.code, 3, "{rb:?}");
    assert!(rb.stderr.contains("publishers split"), "{rb:?}");
    assert!(rb.stderr.contains("`nats-cutover run --resume ORDERS.ORDERS_V2 --proceed`"), "{rb:?}");
    let after = (snapshot(&src.js).await["ORDERS"]["config"].clone(), snapshot(&dst.js).await);
    assert_eq!(after.0, before.0, "A's subjects unchanged");
    assert_eq!(after.1["ORDERS_V2"]["config"], before.1["ORDERS_V2"]["config"], "B unchanged");
    let v = run(&[&conn[..], &["verify", "--migration", "ORDERS.ORDERS_V2"]].concat());
    assert_ne!(v.code, 0, "{v:?}");
    assert!(v.stderr.contains("run --resume ORDERS.ORDERS_V2 --proceed` seals"), "{v:?}");
    let args = [&conn[..], &["--json", "run", "--resume", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"]]
        .concat();
    let runner = until_resumed_waiting(&args, &dir).await;
    assert_split(&src, &dst).await;
    repoint_and_until_a_idle(&load, &dst, &runner).await;
    go_ahead(&conn);
    let (code, events) = runner.end(Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{events:?}");
    assert_split_finished(load, &src, &dst, &conn).await;
}

/// A resume spawned until the killed runner's lease lapsed, once it waits.
async fn until_resumed_waiting(args: &[&str], dir: &TempDir) -> Running {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for i in 0.. {
        let r = Running::spawn(args, &[], dir.0.join(format!("resume-{i}.err")));
        let started = std::time::Instant::now();
        loop {
            if r.events().iter().any(waiting) {
                return r;
            }
            if !r.stderr().is_empty() && r.stderr().contains("is held by runner") {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "{}", r.stderr());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (code, _) = r.end(Duration::from_secs(10)).await;
        assert_ne!(code, Some(0));
        assert!(std::time::Instant::now() < deadline, "lease never lapsed");
    }
    unreachable!()
}

/// Publishes on A's side do not reach B's account, but B's account imports
/// A's `orders.>`: with the publishers repointed to the target side, A would
/// store their messages too and B would get each twice. Refused by the
/// plan's reverse probe, before any write.
#[tokio::test(flavor = "multi_thread")]
async fn publishers_repointed_where_the_target_side_reaches_a_are_refused() {
    let base = two_accounts_config(&[PUBLISHERS_IMPORT]);
    let src_export = r#"{ stream: "deliver.src.>" }"#;
    let dst_import = r#"{ stream: { account: SRC, subject: "deliver.src.>" } }"#;
    let config = base
        .replace(r#"exports: [ { service: "orders.>" } ]"#, "exports: [ ]")
        .replace(src_export, &format!("{src_export}\n      {{ service: \"orders.>\" }}"))
        .replace(
            dst_import,
            &format!(
                "{dst_import}\n      {{ service: {{ account: SRC, subject: \"orders.>\" }} }}"
            ),
        );
    assert_eq!(config.matches("orders.>").count(), 2, "{config}");
    let server =
        NatsServer::start_with(ServerOptions { config: Some(config), ..Default::default() })
            .unwrap_or_else(|e| panic!("{e}"));
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let before = (snapshot(&src.js).await, snapshot(&dst.js).await);
    let conn = accounts_conn(server.url());
    let args = ["--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let repoint = ["--repoint-publishers"];
    let plan = run(&[&conn[..], &["plan"], &args, &ACCOUNTS_PLAN, &repoint].concat());
    assert_eq!(plan.code, 3, "{plan:?}");
    assert!(plan.stdout.contains("publishes on the target side to orders.> reach A's"), "{plan:?}");
    let out = run(&[&conn[..], &["run"], &args, &ACCOUNTS_PLAN, &repoint, &["--yes"]].concat());
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!((snapshot(&src.js).await, snapshot(&dst.js).await), before, "nothing changed");
}

/// The plan says what happens with the publishers split and what the
/// operator does; with --seal-when-idle the run goes on by itself once the
/// repointed publisher left A idle that long: exact, verify holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_publishers_seal_when_a_is_idle() {
    let server = accounts_server(&[PUBLISHERS_IMPORT]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let conn = accounts_conn(server.url());
    let moves = ["--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let plan =
        run(&[&conn[..], &["plan"], &moves, &ACCOUNTS_PLAN, &["--repoint-publishers"]].concat());
    assert_eq!(plan.code, 0, "{plan:?}");
    for says in [
        "B takes the subjects (publishers split)",
        "repoint the publishers to the target side, any time",
        "`nats-cutover run --resume ORDERS.ORDERS_V2 --proceed`",
        "--seal-when-idle",
        "No rollback from here",
    ] {
        assert!(plan.stdout.contains(says), "the plan says {says:?}: {plan:?}");
    }
    let bridge = ["--yes", "--repoint-publishers", "--answer-publishes"];
    let out = run(&[&conn[..], &["run"], &moves, &ACCOUNTS_PLAN, &bridge].concat());
    assert_eq!(out.code, 2, "a flag that would be ignored: {out:?}");
    assert!(out.stderr.contains("--answer-publishes bridges a commit window"), "{out:?}");
    assert!(dst.js.stream_info_opt("ORDERS_V2").await.unwrap().is_none(), "nothing written");
    let load = split_load(&src, &dst).await;
    let dir = TempDir::new("split-idle");
    let idle = ["--yes", "--repoint-publishers", "--seal-when-idle", "3s"];
    let args = [&conn[..], &["--json", "run"], &moves, &ACCOUNTS_PLAN, &idle].concat();
    let mut first = Running::spawn(&args, &[], dir.0.join("first.err"));
    wait_until("the run to wait for the publishers", Duration::from_secs(60), || async {
        first.events().iter().any(waiting)
    })
    .await;
    // Killed while it waits, then resumed without the flag: the journal
    // kept it (a newcomer's resume waited for a go-ahead for good).
    first.child.kill().unwrap();
    first.end(Duration::from_secs(10)).await;
    let args = [&conn[..], &["--json", "run", "--resume", "ORDERS.ORDERS_V2"]].concat();
    let runner = until_resumed_waiting(&args, &dir).await;
    assert_split(&src, &dst).await;
    load.repoint_publisher(dst.client.clone());
    until_published(&load, load.published() + 300).await;
    let (code, events) = runner.end(Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{events:?}");
    let done = events.iter().find(|e| e["step"] == "await_publishers" && e["kind"] == "step_done");
    assert_eq!(done.expect("the wait ended")["detail"]["by"], "idle", "{events:?}");
    assert_split_finished(load, &src, &dst, &conn).await;
}

/// The runner killed right after A released its subjects (after the
/// go-ahead; B already holds the subjects, so holding them proves nothing
/// here): rollback is refused, the resume reads B until it holds A's tail
/// and finishes without waiting again: exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_publishers_runner_killed_after_a_released_resumes_exactly() {
    let server = accounts_server(&[PUBLISHERS_IMPORT]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let load = split_load(&src, &dst).await;
    let conn = accounts_conn(server.url());
    let dir = TempDir::new("split-released");
    let moves = ["--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let opts = ["--yes", "--repoint-publishers", "--lease-ttl", "1s"];
    let args = [&conn[..], &["--json", "run"], &moves, &ACCOUNTS_PLAN, &opts].concat();
    let crash = [("NATS_CUTOVER_TEST_CRASH_AFTER", "subjects_released")];
    let runner = Running::spawn(&args, &crash, dir.0.join("run.err"));
    wait_until("the run to wait for the publishers", Duration::from_secs(60), || async {
        runner.events().iter().any(waiting)
    })
    .await;
    repoint_and_until_a_idle(&load, &dst, &runner).await;
    go_ahead(&conn);
    let (code, _) = runner.end(Duration::from_secs(60)).await;
    assert_eq!(code, Some(86), "died right after A released its subjects");
    let (_, a) = src.js.stream_info("ORDERS").await.unwrap();
    // (A stream left without subjects gets its own name as its subject.)
    let released = !a.config.subjects.contains(&"orders.>".to_string());
    assert!(released && !a.config.sealed, "A released, not sealed: {:?}", a.config);
    let rb = run(&[&conn[..], &["rollback", "ORDERS.ORDERS_V2"]].concat());
    assert_eq!(rb.code, 3, "{rb:?}");
    let resume =
        [&conn[..], &["--json", "run", "--resume", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"]]
            .concat();
    let out = until_lease_lapsed(&resume).await;
    assert_eq!(out.code, 0, "{out:?}");
    let events: Vec<Value> =
        out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let waited_again =
        events.iter().any(|e| e["step"] == "await_publishers" && e["kind"] == "step_started");
    assert!(!waited_again, "no second wait: {out:?}");
    let sealed = events.iter().any(|e| e["step"] == "seal_a" && e["kind"] == "step_done");
    assert!(sealed, "{out:?}");
    assert_split_finished(load, &src, &dst, &conn).await;
}
