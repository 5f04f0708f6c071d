//! Moves to another system that keep every name (docs/cross-system.md, *The
//! same name on the target side*): `run --from ORDERS --to ORDERS` (or
//! `run --in-place ORDERS`) and `kv BUCKET` with a source side given. Two
//! hops: the source side's stream to `<NAME>_CUTOVER` on the target side,
//! then back to the name there; sequences, KV revisions and durables kept.

use crate::common::{cli, TempDir};
use crate::cross::{orders_on, run, side, until_leaf_connected, Side};
use crate::run::{assert_exact, finish_after, load_cfg, until_processed};
use cutover_demo::load::Load;
use cutover_nats::api::{Lookup, Via};
use cutover_nats::Js;
use cutover_testkit::LeafSystem;
use futures::StreamExt;
use std::time::Duration;

/// A leaf node with its own domain and a hub of `nodes` servers, connected
/// (both domains answer from the other side) and the hub's meta leader
/// elected; the hub's side and the leaf's.
async fn leaf_and_hub(nodes: usize) -> (LeafSystem, Side, Side) {
    let sys = LeafSystem::start(nodes).unwrap_or_else(|e| panic!("{e}"));
    let (hub, leaf) = (side(&sys.hub_urls(), None).await, side(sys.leaf.url(), None).await);
    until_leaf_connected(&hub, &leaf).await;
    crate::common::wait_until("the hub's meta leader", Duration::from_secs(30), || async {
        hub.js.account_info().await.is_ok()
    })
    .await;
    (sys, hub, leaf)
}

/// The library's workload for a live move: 500 msg/s for up to 5 min, its
/// publisher retrying for 3 s (the retry horizon each hop waits on a
/// cluster, passed as --retry-horizon).
fn live_cfg() -> cutover_demo::load::LoadConfig {
    cutover_demo::load::LoadConfig {
        duration: Duration::from_secs(300),
        retry_horizon: Duration::from_secs(3),
        ..load_cfg(500, 150_000)
    }
}

/// Each of the source side's messages is on the target side at the same
/// sequence, with the same subject and payload.
async fn same_sequences(src: &Side, dst: &Side, stream: &str) {
    let (_, a) = src.js.stream_info(stream).await.unwrap();
    let (_, b) = dst.js.stream_info(stream).await.unwrap();
    assert_eq!(b.state.first_seq, a.state.first_seq, "first sequence kept");
    assert!(b.state.last_seq >= a.state.last_seq, "B holds at least A's last sequence");
    for seq in a.state.first_seq..=a.state.last_seq {
        let m = src.js.get_msg(stream, seq, Lookup::Exact, Via::Leader).await.unwrap();
        let n = dst.js.get_msg(stream, seq, Lookup::Exact, Via::Leader).await.unwrap();
        match (m, n) {
            (Some(m), Some(n)) => {
                assert_eq!((&m.subject, &m.payload), (&n.subject, &n.payload), "seq {seq}")
            }
            (None, None) => {}
            (m, n) => panic!("seq {seq}: source {:?}, target {:?}", m.is_some(), n.is_some()),
        }
    }
}

/// The end of a move of ORDERS under its name: sealed and kept on the
/// source side; on the target side promoted, with its subjects, each of the
/// `published` messages once, the temporary stream gone, the durable
/// `worker` there. Returns the source side's ORDERS.
async fn assert_moved_under_its_name(
    src: &Side,
    dst: &Side,
    published: u64,
) -> cutover_core::model::StreamInfo {
    let (_, a) = src.js.stream_info("ORDERS").await.unwrap();
    assert!(a.config.sealed, "ORDERS sealed and kept on the source side");
    let (_, b) = dst.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(b.config.subjects, vec!["orders.>".to_string()]);
    assert!(b.config.mirror.is_none() && b.config.sources.is_empty(), "promoted: {b:?}");
    assert_eq!(b.state.messages, published, "the target's ORDERS holds each message once");
    assert!(dst.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none(), "temporary gone");
    let durables = dst.js.consumer_names("ORDERS").await.unwrap();
    assert_eq!(durables, vec!["worker".to_string()], "the durable on the target's ORDERS");
    a
}

/// `verify --from ORDERS --to ORDERS` with both sides (`conn`): it holds.
/// Returns its JSON report.
fn verify_holds(conn: &[&str]) -> serde_json::Value {
    let v = cli(&[conn, &["--json", "verify", "--from", "ORDERS", "--to", "ORDERS"]].concat());
    assert_eq!(v.code, 0, "{v:?}");
    let v = v.json();
    assert_eq!(v["holds"], true, "{v}");
    v
}

/// A stream with a live publisher and a pull worker (the library's, which
/// follows its route on the target side) moves from a leaf node's domain
/// to the hub's under its own name: nothing lost or processed twice, every
/// message at its sequence, the durable on the target side's ORDERS, the
/// source's ORDERS sealed and kept, the temporary stream gone.
async fn same_name_live(hub_nodes: usize, extra: &[&str]) -> (LeafSystem, Side, Side) {
    let (sys, hub, leaf) = leaf_and_hub(hub_nodes).await;
    orders_on(&leaf.js).await;
    // The plan says what the applications see across systems.
    let hubs = sys.hub_urls();
    let plan = cli(&[
        "--server",
        &hubs,
        "--from-server",
        sys.leaf.url(),
        "plan",
        "--from",
        "ORDERS",
        "--to",
        "ORDERS",
    ]);
    assert_eq!(plan.code, 0, "{plan:?}");
    assert!(
        plan.stdout.contains("reconnect them to the target side once the run ends"),
        "{plan:?}"
    );
    assert!(!plan.stdout.contains("they resume by retrying"), "the one-system note: {plan:?}");
    // Short retry horizons: on a cluster each hop's commit waits one.
    let cfg = live_cfg();
    let load = Load::start_across(leaf.client.clone(), hub.client.clone(), cfg).await;
    until_processed(&load, 300).await;
    let conn = ["--server", &hubs, "--from-server", sys.leaf.url()];
    let what = ["run", "--from", "ORDERS", "--to", "ORDERS", "--retry-horizon", "3s", "--yes"];
    let args = [&conn[..], &what[..], extra].concat();
    let out = run(&args);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("lives on the target side under its own name"), "{out:?}");
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    let a = assert_moved_under_its_name(&leaf, &hub, r.published).await;
    same_sequences(&leaf, &hub, "ORDERS").await;
    // verify: the source's sealed ORDERS against the target's, by sequence.
    let v = verify_holds(&conn);
    assert_eq!(v["checked"].as_u64().unwrap(), a.state.messages, "{v}");
    (sys, hub, leaf)
}

/// One account to another of the same server under the same name: B
/// reaches A through the imports (`--from-api`, `--from-deliver`), the
/// source account's publishers reach the target's stream through the
/// service import of `orders.>`; the library's publisher and workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_account_to_another_under_the_same_name_live() {
    use crate::cross::{accounts_conn, accounts_server, ACCOUNTS_PLAN};
    let server = accounts_server(&[]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let cfg = live_cfg();
    let load = Load::start_across(src.client.clone(), dst.client.clone(), cfg).await;
    until_processed(&load, 300).await;
    let what = ["run", "--from", "ORDERS", "--to", "ORDERS", "--yes"];
    let out = run(&[&accounts_conn(server.url())[..], &what[..], &ACCOUNTS_PLAN[..]].concat());
    assert_eq!(out.code, 0, "{out:?}");
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    let (_, b) = dst.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(b.state.messages, r.published, "the target account's ORDERS holds each once");
    assert!(src.js.stream_info("ORDERS").await.unwrap().1.config.sealed);
    same_sequences(&src, &dst, "ORDERS").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leaf_domain_to_hub_domain_under_the_same_name_live() {
    let (sys, hub, _leaf) = same_name_live(1, &[]).await;
    // The same command again: the move is done, said so (a newcomer's
    // second run was told to delete the moved stream).
    let hubs = sys.hub_urls();
    let conn = ["--server", &hubs, "--from-server", sys.leaf.url()];
    let again = cli(&[&conn[..], &["run", "--from", "ORDERS", "--to", "ORDERS", "--yes"]].concat());
    assert_eq!(again.code, 0, "{again:?}");
    assert!(again.stdout.contains("lives on the target side under its own name"), "{again:?}");
    assert!(hub.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none());
    // Another stream of that name on the target side: refused before any write.
    let other = serde_json::json!({"name": "OTHER", "subjects": ["other.>"]});
    _leaf.js.stream_create(&other).await.unwrap();
    hub.js.stream_create(&other).await.unwrap();
    let out = cli(&[&conn[..], &["run", "--from", "OTHER", "--to", "OTHER", "--yes"]].concat());
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("no move of it by nats-cutover is journaled there"), "{out:?}");
    assert!(hub.js.stream_info_opt("OTHER_CUTOVER").await.unwrap().is_none(), "nothing written");
    // --seal-when-idle where the publishers are not split (OTHER's subjects
    // cross the leaf): it would be ignored, so it is refused, nothing written.
    _leaf
        .js
        .stream_create(&serde_json::json!({"name": "THIRD", "subjects": ["third.>"]}))
        .await
        .unwrap();
    let idle = ["run", "--from", "THIRD", "--to", "THIRD", "--repoint-publishers"];
    let out = cli(&[&conn[..], &idle, &["--seal-when-idle", "2s", "--yes"]].concat());
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("does not split them"), "{out:?}");
    assert!(hub.js.stream_info_opt("THIRD_CUTOVER").await.unwrap().is_none(), "nothing written");
}

/// Standalone (the leaf's own domain) to a 3-node cluster, R3 on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standalone_server_to_a_three_node_cluster_under_the_same_name_live() {
    let dir = TempDir::new("same-name-r3");
    let cfg = dir.0.join("r3.json");
    std::fs::write(&cfg, r#"{"num_replicas": 3}"#).unwrap();
    let (_sys, hub, _leaf) = same_name_live(3, &["--to-config", cfg.to_str().unwrap()]).await;
    let (_, b) = hub.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(b.config.num_replicas, 3, "R3 on the cluster");
}

/// A KV bucket moves to the hub under its name with `kv BUCKET` and a
/// source side: every key at its revision, and an update checked against a
/// revision read on the source side before the move succeeds on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kv_bucket_moves_to_another_system_keeping_its_revisions() {
    let (sys, hub, leaf) = leaf_and_hub(1).await;
    let src = async_nats::jetstream::new(leaf.client.clone());
    let kv = src
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "cfg".into(),
            history: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut revs = std::collections::BTreeMap::new();
    for i in 0..60u32 {
        let key = format!("k{}", i % 20);
        let rev = kv.put(&key, i.to_string().into()).await.unwrap();
        revs.insert(key, rev);
    }
    kv.delete("k3").await.unwrap();
    let hubs = sys.hub_urls();
    let conn = ["--server", &hubs, "--from-server", sys.leaf.url()];
    // Its writes cannot cross to the hub (the server denies `$KV.>` across a
    // leaf connection between domains): refused, naming the fix.
    let out = run(&[&conn[..], &["kv", "cfg", "--yes"]].concat());
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("repoint the bucket's clients"), "{out:?}");
    // With the clients repointed at the commit point (none writes here).
    let split = ["kv", "cfg", "--repoint-publishers", "--yes"];
    let out = run(&[&conn[..], &split[..]].concat());
    assert_eq!(out.code, 0, "{out:?}");
    let dst = async_nats::jetstream::new(hub.client.clone());
    let moved = dst.get_key_value("cfg").await.unwrap();
    let mut keys: Vec<String> = moved.keys().await.unwrap().map(|k| k.unwrap()).collect().await;
    keys.sort();
    let mut want: Vec<String> = revs.keys().filter(|k| *k != "k3").cloned().collect();
    want.sort();
    assert_eq!(keys, want, "every key but the deleted one");
    for (key, rev) in &revs {
        if key == "k3" {
            assert!(moved.get(key).await.unwrap().is_none(), "deleted stays deleted");
            continue;
        }
        let e = moved.entry(key).await.unwrap().expect("entry");
        assert_eq!(e.revision, *rev, "{key}'s revision kept");
    }
    // The revision read on the source side before the move is good on the target.
    let (k, rev) = revs.iter().find(|(k, _)| *k != "k3").unwrap();
    let new = moved.update(k, "after".into(), *rev).await.expect("update with the old revision");
    assert!(new > *rev);
    let (_, a) = leaf.js.stream_info("KV_cfg").await.unwrap();
    assert!(a.config.sealed, "the source's bucket sealed and kept");
    assert!(hub.js.stream_info_opt("KV_cfg_CUTOVER").await.unwrap().is_none());
}

/// Users' applications through a same-name move to another system: a
/// nats-py publisher (msg-ids, retries) stays connected to the leaf, whose
/// publishes reach the hub's stream from the commit point on; nats-py pull
/// workers bound by name to ORDERS/worker on the leaf; once the run ended,
/// a nats-py and a nats.js worker bind ORDERS/worker on the hub (the
/// applications reconnected to the target side, as docs/cross-system.md
/// says they may then). Every acknowledged publish is processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_js_and_go_workers_reconnect_to_the_target_after_a_same_name_move() {
    use crate::pyapps::{lines, processed, App};
    let (sys, hub, leaf) = leaf_and_hub(1).await;
    orders_on(&leaf.js).await;
    let dir = TempDir::new("same-name-apps");
    let worker = |url: &str, out: &std::path::Path, client: &str| {
        let args = ["--server", url, "--stream", "ORDERS", "--consumer", "worker"];
        let rest = ["--mode", "pull", "--out", out.to_str().unwrap()];
        match client {
            "py" => App::start("worker.py", &[&args[..], &rest[..]].concat()),
            "js" => App::node("worker.mjs", &[&args[..], &rest[..]].concat()),
            _ => App::go(&[&["worker"][..], &args[..], &rest[..]].concat()),
        }
    };
    let mut files = vec![];
    let mut apps = vec![];
    for i in 0..2 {
        files.push(dir.0.join(format!("leaf{i}.jsonl")));
        apps.push(worker(sys.leaf.url(), files.last().unwrap(), "py"));
    }
    let published = dir.0.join("pub.jsonl");
    let publisher = App::publisher(sys.leaf.url(), 4_000, 400, &published);
    crate::common::wait_until("workers process", Duration::from_secs(30), || async {
        processed(&files).len() >= 200
    })
    .await;
    let hubs = sys.hub_urls();
    let conn = ["--server", &hubs, "--from-server", sys.leaf.url()];
    let out = run(&[&conn[..], &["run", "--from", "ORDERS", "--to", "ORDERS", "--yes"]].concat());
    assert_eq!(out.code, 0, "{out:?}");
    let before = processed(&files).len();
    assert!(before < 4_000, "the move ended while the publisher still runs ({before})");
    for client in ["py", "js", "go"] {
        files.push(dir.0.join(format!("hub-{client}.jsonl")));
        apps.push(worker(&hubs, files.last().unwrap(), client));
    }
    let mut publisher = publisher;
    assert!(publisher.0.wait().unwrap().success());
    let acked: Vec<String> = lines(&published)
        .iter()
        .filter(|l| l.get("failed").is_none())
        .filter_map(|l| l["id"].as_str().map(String::from))
        .collect();
    assert_eq!(acked.len(), 4_000, "every publish acknowledged");
    crate::common::wait_until("every message processed", Duration::from_secs(60), || async {
        processed(&files).len() >= acked.len()
    })
    .await;
    for a in apps {
        a.stop();
    }
    let p = processed(&files);
    let twice: Vec<_> = p.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    let lost: Vec<_> = acked.iter().filter(|id| !p.contains_key(*id)).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    let on_hub: Vec<usize> = files[2..].iter().map(|f| lines(f).len()).collect();
    eprintln!("processed on the leaf before the move ended: {before}; on the hub (py, js, go): {on_hub:?}");
    // ~3,500 left for three workers sharing the durable: each gets some.
    assert!(on_hub.iter().all(|n| *n > 0), "each client's worker processed on the hub");
    same_sequences(&leaf, &hub, "ORDERS").await;
}

/// `apply --from-server` on `sys` (the hub's connection first), `--json`;
/// `crash` kills it after the named step (`STEP#N`).
fn apply_across(sys: &LeafSystem, args: &[&str], crash: Option<&str>) -> crate::common::Out {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
    cmd.args(["--server", &sys.hub_urls(), "--from-server", sys.leaf.url(), "--json", "apply"]);
    cmd.args(args);
    if let Some(at) = crash {
        cmd.env("NATS_CUTOVER_TEST_CRASH_AFTER", at);
    }
    let o = cmd.output().unwrap();
    crate::common::Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

/// The `kind` line of `apply --json`'s output.
fn json_line(out: &crate::common::Out, kind: &str) -> serde_json::Value {
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} line: {out:?}"))
}

/// A whole domain at once: 20 assets of a standalone server (the leaf's
/// own JetStream domain) — 14 streams (4 with a durable part-way), 4 KV
/// buckets, 2 object stores — moved to a 3-node cluster under their names
/// by `apply --from-server` with no files, 4 at a time; the runner killed
/// after the fifth hop retired, then `apply` again: every asset moved once,
/// with its messages at their sequences, its durable's position, every KV
/// revision and every object.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_domain_of_20_assets_moves_to_a_cluster_killed_midway_then_resumed() {
    use async_nats::jetstream::{kv, object_store};
    use serde_json::json;
    let (sys, hub, leaf) = leaf_and_hub(3).await;
    let ctx = async_nats::jetstream::new(leaf.client.clone());
    for i in 0..14 {
        let name = format!("S{i}");
        leaf.js
            .stream_create(&json!({"name": name, "subjects": [format!("s{i}.>")]}))
            .await
            .unwrap();
        for k in 0..50 {
            ctx.publish(format!("s{i}.{}", k % 3), format!("{i}-{k}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        if i < 4 {
            let w = json!({"durable_name": "w", "ack_policy": "explicit"});
            leaf.js
                .consumer_create(&name, "w", &w, cutover_nats::api::Action::Create)
                .await
                .unwrap();
            let c: async_nats::jetstream::consumer::PullConsumer =
                ctx.get_consumer_from_stream("w", &name).await.unwrap();
            let mut batch = c.fetch().max_messages(20).messages().await.unwrap();
            while let Some(m) = batch.next().await {
                m.unwrap().double_ack().await.unwrap();
            }
        }
    }
    let mut revisions = std::collections::BTreeMap::new();
    for b in 0..4 {
        let bucket = format!("cfg{b}");
        let store = ctx
            .create_key_value(kv::Config {
                bucket: bucket.clone(),
                history: 3,
                ..Default::default()
            })
            .await
            .unwrap();
        for k in 0..12u32 {
            let rev = store.put(format!("k{}", k % 5), k.to_string().into()).await.unwrap();
            revisions.insert((bucket.clone(), format!("k{}", k % 5)), rev);
        }
    }
    for o in 0..2 {
        let store = ctx
            .create_object_store(object_store::Config {
                bucket: format!("files{o}"),
                ..Default::default()
            })
            .await
            .unwrap();
        let body = vec![o as u8; 300_000];
        store.put("blob", &mut body.as_slice()).await.unwrap();
    }
    let leaf_streams = |js: Js| async move {
        let mut out = std::collections::BTreeMap::new();
        let page = js.api("stream names", "STREAM.NAMES", &json!({})).await.unwrap();
        let names = page["streams"].as_array().cloned().unwrap_or_default();
        for n in names.iter().filter_map(|n| n.as_str()).filter(|n| *n != "KV_CUTOVER") {
            let (_, s) = js.stream_info(n).await.unwrap();
            out.insert(n.to_string(), (s.state.messages, s.state.first_seq, s.state.last_seq));
        }
        out
    };
    let before = leaf_streams(leaf.js.clone()).await;
    assert_eq!(before.len(), 20, "{before:?}");
    let yes = ["--yes", "--parallel", "4", "--lease-ttl", "2s", "--retry-horizon", "0s"];
    let yes = [&yes[..], &["--repoint-publishers"]].concat();
    // The dry run: 20 moves, exit 7.
    let dry = apply_across(
        &sys,
        &["--repoint-publishers", "--retry-horizon", "0s", "--parallel", "4"],
        None,
    );
    assert_eq!(dry.code, 7, "{dry:?}");
    let plan = json_line(&dry, "apply_plan");
    assert_eq!(plan["summary"]["move"], 20, "{plan:#}");
    // Killed after the fifth hop retired.
    let t0 = std::time::Instant::now();
    let out = apply_across(&sys, &yes, Some("retire#5"));
    eprintln!("killed after {:?}", t0.elapsed());
    assert_eq!(out.code, 86, "killed: {out:?}");
    // Again, until the dead runner's leases (2 s) lapsed: the rest moves.
    let mut last = None;
    crate::common::wait_until("apply to finish", Duration::from_secs(120), || {
        let o = apply_across(&sys, &yes, None);
        let ok = o.code == 0;
        last = Some(o);
        async move { ok }
    })
    .await;
    let out = last.unwrap();
    eprintln!("resumed and done after {:?}", t0.elapsed());
    let result = json_line(&out, "apply_result");
    let outcomes: Vec<String> = result["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap_or("").to_string())
        .collect();
    let moved_now = outcomes.iter().filter(|o| *o == "moved").count();
    let moved_before = outcomes.iter().filter(|o| *o == "unchanged").count();
    assert_eq!(moved_now + moved_before, 20, "{outcomes:?}");
    assert!((1..20).contains(&moved_before), "some moved before the kill: {outcomes:?}");
    // Everything on the hub under its name, as it was; nothing left over.
    let after = leaf_streams(hub.js.clone()).await;
    let ours: Vec<&String> = after.keys().filter(|n| n.ends_with("_CUTOVER")).collect();
    assert!(ours.is_empty(), "temporary streams left: {ours:?}");
    for (n, state) in &before {
        assert_eq!(after.get(n), Some(state), "{n}: messages, first and last sequence");
        let (_, a) = leaf.js.stream_info(n).await.unwrap();
        assert!(a.config.sealed, "{n} sealed on the source side");
    }
    for i in 0..4 {
        let (_, c) = hub.js.consumer_info(&format!("S{i}"), "w").await.unwrap();
        assert_eq!(c.ack_floor.stream_seq, 20, "S{i}'s durable kept its position");
        assert_eq!(c.num_pending, 30, "S{i}");
    }
    let dst = async_nats::jetstream::new(hub.client.clone());
    for ((bucket, key), rev) in &revisions {
        let store = dst.get_key_value(bucket).await.unwrap();
        assert_eq!(store.entry(key).await.unwrap().unwrap().revision, *rev, "{bucket}/{key}");
    }
    for o in 0..2 {
        let store = dst.get_object_store(format!("files{o}")).await.unwrap();
        let mut obj = store.get("blob").await.unwrap();
        let mut body = vec![];
        tokio::io::AsyncReadExt::read_to_end(&mut obj, &mut body).await.unwrap();
        assert_eq!(body, vec![o as u8; 300_000], "files{o}/blob intact");
    }
    // And once more: nothing to do.
    let again = apply_across(&sys, &["--repoint-publishers", "--parallel", "4"], None);
    assert_eq!(again.code, 0, "{again:?}");
}

/// tests/apps/kv_app.py in `role` on `bucket` at `url`, its records in
/// `out`, until the file `until` exists (where the role loops), with the
/// role's own options `extra`.
fn kv_app(
    role: &str,
    url: &str,
    bucket: &str,
    out: &str,
    until: Option<&str>,
    extra: &[&str],
) -> crate::pyapps::App {
    let mut args = vec![role, "--server", url, "--bucket", bucket, "--out", out];
    args.extend(extra);
    if let Some(u) = until {
        args.extend(["--until", u]);
    }
    crate::pyapps::App::start("kv_app.py", &args)
}

/// A KV bucket's nats-py writer and watcher (tests/apps/kv_app.py) through
/// its move to the hub under its name: the writer on the leaf writes until
/// the move ended (from hop 1's commit its writes get "no responders": the
/// server never lets `$KV.>` cross a leaf between domains), then a writer
/// and a watcher on the hub (the applications reconnected) go on. Every
/// write acknowledged on the leaf is on the hub at its revision; the hub's
/// writes continue the revisions; the hub's watchers, nats-py and nats.js
/// (tests/apps/js/kv_watcher.mjs), see each of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_kv_writer_and_watcher_reconnect_to_the_target_keeping_revisions() {
    use crate::pyapps::{lines, App};
    let (sys, hub, leaf) = leaf_and_hub(1).await;
    let src = async_nats::jetstream::new(leaf.client.clone());
    src.create_key_value(async_nats::jetstream::kv::Config {
        bucket: "cfg".into(),
        history: 64,
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = TempDir::new("same-name-kv-apps");
    let path = |n: &str| dir.0.join(n).to_str().unwrap().to_string();
    // 200 keys: each keeps every write (history 64) however long the move takes.
    let app = |role: &str, url: &str, out: &str, until: Option<&str>| {
        kv_app(role, url, "cfg", out, until, &["--keys", "200", "--rate", "100"])
    };
    let (leaf_w, leaf_stop) = (path("leaf-writer.jsonl"), path("leaf-stop"));
    let mut writer = app("writer", sys.leaf.url(), &leaf_w, Some(&leaf_stop));
    let writes = |f: &str| -> Vec<serde_json::Value> {
        lines(std::path::Path::new(f)).into_iter().filter(|l| l.get("rev").is_some()).collect()
    };
    crate::common::wait_until("the leaf writer writes", Duration::from_secs(30), || async {
        writes(&leaf_w).len() >= 100
    })
    .await;
    let hubs = sys.hub_urls();
    let conn = ["--server", &hubs, "--from-server", sys.leaf.url()];
    let out = run(&[&conn[..], &["kv", "cfg", "--repoint-publishers", "--yes"]].concat());
    assert_eq!(out.code, 0, "{out:?}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("repoint the publishers (and a bucket's clients) to the target side now"),
        "{out:?}"
    );
    std::fs::write(&leaf_stop, "").unwrap();
    assert!(writer.0.wait().unwrap().success());
    let on_leaf = writes(&leaf_w);
    let errors: Vec<_> = lines(std::path::Path::new(&leaf_w))
        .into_iter()
        .filter(|l| l.get("error").is_some())
        .collect();
    for e in &errors {
        let e = e["error"].as_str().unwrap();
        assert!(
            e.contains("NoResponders") || e.contains("NoStreamResponse"),
            "only 'no responders' after the commit: {e}"
        );
    }
    // The applications reconnected to the hub.
    let (hub_w, hub_watch, hub_stop) =
        (path("hub-writer.jsonl"), path("hub-watch.jsonl"), path("hub-stop"));
    let watcher = app("watcher", &hubs, &hub_watch, None);
    // A nats.js watcher too (@nats-io/kv, updates only), on the hub.
    let js_watch = path("hub-watch-js.jsonl");
    let js_watcher = App::node(
        "kv_watcher.mjs",
        &["--server", &hubs, "--bucket", "cfg", "--updates", "--out", &js_watch],
    );
    // And a nats.go one (kv.Watch(">"): the bucket's current values, then
    // every update), on the hub.
    let go_watch = path("hub-watch-go.jsonl");
    let go_watcher =
        App::go(&["kv-watch", "--server", &hubs, "--bucket", "cfg", "--out", &go_watch]);
    let mut writer = app("writer", &hubs, &hub_w, Some(&hub_stop));
    crate::common::wait_until("the hub writer writes", Duration::from_secs(30), || async {
        writes(&hub_w).len() >= 100
    })
    .await;
    std::fs::write(&hub_stop, "").unwrap();
    assert!(writer.0.wait().unwrap().success());
    let on_hub = writes(&hub_w);
    let w_entries = |f: &str| -> std::collections::BTreeSet<(String, u64)> {
        lines(std::path::Path::new(f))
            .iter()
            .filter_map(|l| Some((l["key"].as_str()?.to_string(), l["rev"].as_u64()?)))
            .filter(|(k, _)| k.starts_with("w."))
            .collect()
    };
    for f in [&hub_watch, &js_watch, &go_watch] {
        crate::common::wait_until(
            "the hub watchers see every hub write",
            Duration::from_secs(30),
            || async { w_entries(f).len() >= on_hub.len() },
        )
        .await;
    }
    watcher.stop();
    js_watcher.stop();
    go_watcher.stop();
    for (client, f) in [("nats.js", &js_watch), ("nats.go", &go_watch)] {
        let seen = w_entries(f);
        for w in &on_hub {
            let k = (w["key"].as_str().unwrap().to_string(), w["rev"].as_u64().unwrap());
            assert!(seen.contains(&k), "the hub's {client} watcher saw {k:?}");
        }
    }
    // nats.go's watch began with the bucket's values as the move left them:
    // the last leaf write of each key it lists, at its revision.
    let go_seen = w_entries(&go_watch);
    let mut last_on_leaf = std::collections::BTreeMap::new();
    for w in &on_leaf {
        let (k, rev) = (w["key"].as_str().unwrap().to_string(), w["rev"].as_u64().unwrap());
        let e = last_on_leaf.entry(k).or_insert(rev);
        *e = (*e).max(rev);
    }
    for (k, rev) in &last_on_leaf {
        assert!(go_seen.contains(&(k.clone(), *rev)), "nats.go's watch listed {k} at {rev}");
    }
    // Every write acknowledged on the leaf is on the hub at its revision.
    for w in &on_leaf {
        let rev = w["rev"].as_u64().unwrap();
        let m = hub.js.get_msg("KV_cfg", rev, Lookup::Exact, Via::Leader).await.unwrap();
        let m = m.unwrap_or_else(|| panic!("revision {rev} missing on the hub"));
        assert_eq!(m.subject, format!("$KV.cfg.{}", w["key"].as_str().unwrap()), "rev {rev}");
        assert_eq!(m.payload, w["i"].to_string().as_bytes(), "rev {rev}");
    }
    let v = cli(&[&conn[..], &["--json", "verify", "--from", "KV_cfg", "--to", "KV_cfg"]].concat());
    assert_eq!(v.code, 0, "verify holds for the bucket: {v:?}");
    let last_leaf = on_leaf.iter().map(|w| w["rev"].as_u64().unwrap()).max().unwrap();
    let first_hub = on_hub.iter().map(|w| w["rev"].as_u64().unwrap()).min().unwrap();
    assert!(
        first_hub > last_leaf,
        "the hub continues the revisions ({first_hub} after {last_leaf})"
    );
    let errors_on_hub =
        lines(std::path::Path::new(&hub_w)).iter().filter(|l| l.get("error").is_some()).count();
    assert_eq!(errors_on_hub, 0, "the reconnected writer writes without error");
    let seen: std::collections::BTreeSet<(String, u64)> = lines(std::path::Path::new(&hub_watch))
        .iter()
        .filter_map(|l| Some((l["key"].as_str()?.to_string(), l["rev"].as_u64()?)))
        .collect();
    for w in &on_hub {
        let k = (w["key"].as_str().unwrap().to_string(), w["rev"].as_u64().unwrap());
        assert!(seen.contains(&k), "the hub's watcher saw {k:?}");
    }
    eprintln!(
        "{} writes on the leaf ({} failed after the commit), {} on the hub",
        on_leaf.len(),
        errors.len(),
        on_hub.len()
    );
}

/// A same-name move's runner killed in hop 1 once the durable exists on the
/// hub: `rollback NAME.NAME_CUTOVER` with both sides gives the leaf its
/// durable back (delivering) and deletes the temporary stream the run made;
/// the same command again then moves it; the library's workload exact
/// throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_same_name_move_killed_in_hop_1_rolls_back_then_moves() {
    let (sys, hub, leaf) = leaf_and_hub(1).await;
    orders_on(&leaf.js).await;
    let cfg = live_cfg();
    let load = Load::start_across(leaf.client.clone(), hub.client.clone(), cfg).await;
    until_processed(&load, 300).await;
    let hubs = sys.hub_urls();
    let conn = ["--server", &hubs, "--from-server", sys.leaf.url()];
    let what = ["run", "--from", "ORDERS", "--to", "ORDERS", "--yes", "--lease-ttl", "1s"];
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
    cmd.args(conn).args(what).env("NATS_CUTOVER_TEST_CRASH_AFTER", "consumer_created:worker");
    let crashed = cmd.output().unwrap();
    assert_eq!(crashed.status.code(), Some(86), "{crashed:?}");
    assert!(hub.js.consumer_info("ORDERS_CUTOVER", "worker").await.is_ok(), "hop 1's durable");
    let args = [&conn[..], &["rollback", "ORDERS.ORDERS_CUTOVER", "--lease-ttl", "1s"]].concat();
    let out = crate::cross::until_lease_lapsed(&args).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, c) = leaf.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "the leaf's durable delivers again");
    assert!(hub.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none(), "temporary gone");
    assert!(hub.js.stream_info_opt("ORDERS").await.unwrap().is_none());
    let (_, a) = leaf.js.stream_info("ORDERS").await.unwrap();
    assert!(!a.config.sealed && a.config.subjects == vec!["orders.>".to_string()], "{a:?}");
    until_processed(&load, load.processed() + 200).await;
    // The same command again moves it.
    let out = run(&[&conn[..], &what[..]].concat());
    assert_eq!(out.code, 0, "{out:?}");
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    assert_eq!(hub.js.stream_info("ORDERS").await.unwrap().1.state.messages, r.published);
    same_sequences(&leaf, &hub, "ORDERS").await;
}

/// Push subscribers (a deliver group on the leaf, plain async-nats
/// subscriptions acking by reply) through a same-name move: the durable
/// keeps its deliver subject on the hub's ORDERS, whose deliveries cross
/// the leaf connection, so they receive throughout without a reconnect;
/// every published message processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_subscribers_on_the_leaf_ride_through_a_same_name_move() {
    crate::cross::push_through_a_move("ORDERS").await;
}

/// An object store's nats-py applications (tests/apps/kv_app.py) through
/// its move to the hub under its name: objects put on the leaf, a reader
/// there reading them round and round throughout the move (every read
/// answered is intact; after hop 1's commit its reads fail, below), and
/// after the move a client connected to the hub reads each back intact from
/// the store found by its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_object_store_apps_through_a_same_name_move() {
    use crate::pyapps::lines;
    let (sys, hub, _leaf) = leaf_and_hub(1).await;
    let dir = TempDir::new("same-name-obj-apps");
    let path = |n: &str| dir.0.join(n).to_str().unwrap().to_string();
    let hubs = sys.hub_urls();
    let app = |role: &str, url: &str, out: &str, until: Option<&str>| {
        kv_app(role, url, "files", out, until, &["--objects", "3", "--size", "300000"])
    };
    let mut put = app("obj-put", sys.leaf.url(), &path("put.jsonl"), None);
    assert!(put.0.wait().unwrap().success(), "obj-put on the leaf");
    let (read, stop) = (path("leaf-read.jsonl"), path("leaf-stop"));
    let mut reader = app("obj-reader", sys.leaf.url(), &read, Some(&stop));
    let conn = ["--server", &hubs, "--from-server", sys.leaf.url()];
    let out = run(&[&conn[..], &["obj", "files", "--repoint-publishers", "--yes"]].concat());
    assert_eq!(out.code, 0, "{out:?}");
    std::fs::write(&stop, "").unwrap();
    assert!(reader.0.wait().unwrap().success());
    let done = std::fs::read_to_string(&read).unwrap();
    let done: serde_json::Value =
        serde_json::from_str(done.lines().last().expect("the reader's counts")).unwrap();
    assert!(done["reads"].as_u64().is_some_and(|n| n > 0), "{done}");
    // Every read answered there was intact; from hop 1's commit on the
    // reads fail: nats-py's get subscribes to the chunks by subject
    // (object_store.py get → js.subscribe → find_stream_name_by_subject),
    // and the sealed store on the leaf lists only its name as subject then,
    // so the reader must reconnect to the hub (docs/cross-system.md).
    assert_eq!(
        (&done["wrong"], &done["not_found"]),
        (&serde_json::json!(0), &serde_json::json!(0)),
        "{done}"
    );
    assert!(done["intact"].as_u64().is_some_and(|n| n > 0), "{done}");
    let (_, s) = hub.js.stream_info("OBJ_files").await.unwrap();
    assert!(s.config.subjects.iter().any(|x| x.starts_with("$O.files.")), "{:?}", s.config);
    let check = path("hub-check.jsonl");
    let mut c = app("obj-check", &hubs, &check, None);
    assert!(c.0.wait().unwrap().success(), "obj-check on the hub");
    let objects: Vec<_> = lines(std::path::Path::new(&check))
        .into_iter()
        .filter(|l| l.get("name").is_some())
        .collect();
    assert_eq!(objects.len(), 3, "{objects:?}");
    for o in &objects {
        assert_eq!(
            (&o["intact"], &o["size"]),
            (&serde_json::json!(true), &serde_json::json!(300000)),
            "{o}"
        );
    }
    eprintln!("leaf reader during the move: {done}");
}

/// The publishers split under the same name (issue 27): two accounts
/// whose publishes cross in neither direction, `run --from ORDERS --to
/// ORDERS --repoint-publishers`. Hop 1's mirror is handed over to sourcing
/// ORDERS, and one retry horizon later `ORDERS_CUTOVER` takes the subjects
/// in the target account while the source's ORDERS keeps them; the run
/// waits, the test repoints the publisher and gives the go-ahead from
/// another command (`run --resume ORDERS.ORDERS_CUTOVER --proceed`), the
/// source's ORDERS is sealed once idle, and hop 2 gives the stream its name
/// on the target side. Exact, no publish failed, every message once on the
/// target's ORDERS, and `verify --from ORDERS --to ORDERS` holds: the
/// messages up to the split at their sequences, the later ones of the
/// source's ORDERS found by their origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publishers_split_under_the_same_name_across_accounts_live() {
    use crate::cross::{
        accounts_conn, accounts_server, waiting, Running, ACCOUNTS_PLAN, PUBLISHERS_IMPORT,
    };
    let server = accounts_server(&[PUBLISHERS_IMPORT]);
    let (src, dst) = (side(server.url(), Some("src")).await, side(server.url(), Some("dst")).await);
    orders_on(&src.js).await;
    let cfg = cutover_demo::load::LoadConfig { duration: Duration::from_secs(120), ..live_cfg() };
    let load = Load::start_across(src.client.clone(), dst.client.clone(), cfg).await;
    until_processed(&load, 300).await;
    let conn = accounts_conn(server.url());
    let what = ["--json", "run", "--from", "ORDERS", "--to", "ORDERS", "--retry-horizon", "3s"];
    // The go-ahead ends the wait (A idle for 3 s then); --seal-when-idle,
    // longer, is taken and journaled.
    let split = ["--repoint-publishers", "--seal-when-idle", "30s", "--yes"];
    let plan = cli(&[
        &conn[..],
        &["plan", "--from", "ORDERS", "--to", "ORDERS"],
        &ACCOUNTS_PLAN,
        &split[..1],
    ]
    .concat());
    assert_eq!(plan.code, 0, "{plan:?}");
    for step in ["hand over", "B takes the subjects (publishers split)", "wait for the publishers"]
    {
        assert!(plan.stdout.contains(step), "{step}: {plan:?}");
    }
    let dir = TempDir::new("same-name-split");
    let args = [&conn[..], &what, &ACCOUNTS_PLAN, &split].concat();
    let runner = Running::spawn(&args, &[], dir.0.join("run.err"));
    crate::common::wait_until(
        "the run to wait for the publishers",
        Duration::from_secs(90),
        || async { runner.events().iter().any(waiting) },
    )
    .await;
    let (_, a) = src.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()], "A keeps its subjects");
    let (_, b) = dst.js.stream_info("ORDERS_CUTOVER").await.unwrap();
    assert_eq!(b.config.subjects, vec!["orders.>".to_string()], "B took them on its side");
    assert!(b.config.mirror.is_none(), "handed over: {b:?}");
    assert_eq!(b.config.sources.len(), 1, "B sources A: {b:?}");
    assert!(b.config.duplicate_window >= 3_000_000_000, "the window: {b:?}");
    let handed =
        runner.events().into_iter().find(|e| e["step"] == "handover" && e["kind"] == "step_done");
    let shared = runner
        .events()
        .into_iter()
        .find(|e| e["step"] == "share_subjects" && e["kind"] == "step_done");
    let (handed, shared) = (handed.expect("handed over"), shared.expect("shared"));
    load.repoint_publisher(dst.client.clone());
    // The go-ahead from another command, by hop 1's id: recorded for the
    // waiting runner, which holds the lease.
    let go = ["--json", "run", "--resume", "ORDERS.ORDERS_CUTOVER", "--proceed"];
    let go = cli(&[&conn[..], &go].concat());
    assert_eq!(go.code, 0, "{go:?}");
    assert!(go.stdout.contains("\"recorded\":true"), "{go:?}");
    let (code, events) = runner.end(Duration::from_secs(180)).await;
    assert_eq!(code, Some(0), "{events:?}");
    let done = events.iter().find(|e| e["step"] == "await_publishers" && e["kind"] == "step_done");
    assert_eq!(done.expect("the wait ended")["detail"]["by"], "operator");
    let result = events.iter().find(|e| e["kind"] == "result").expect("the result");
    assert_eq!(result["hops"][0]["seal_when_idle_ms"], 30_000, "journaled: {result}");
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    assert_eq!(r.publish_failures, 0, "both sides served every publish: {r:?}");
    let a = assert_moved_under_its_name(&src, &dst, r.published).await;
    let v = verify_holds(&conn);
    assert_eq!(v["checked"].as_u64().unwrap(), a.state.messages, "{v}");
    let by_origin = v["matched_by_origin"].as_u64().unwrap();
    assert!(by_origin > 0, "the source stored messages after the split: {v}");
    eprintln!(
        "same-name split: published {} (source side {}, after the split {by_origin}), publish failures {} retries {} max stall {:.1} ms; hand-over {} / share {}",
        r.published, a.state.messages, r.publish_failures, r.publish_retries, r.max_publish_stall_ms, handed["detail"], shared["detail"]
    );
}

/// Issue 27: the source side's server restarted (SIGTERM, its store kept)
/// after every step of hop 1 of a same-name move leaf → hub, under the
/// library's publisher (retrying lost answers with the same msg-id) and
/// workers. B's external source, the runner's requests about A and the
/// applications on the leaf all lose the server for a moment each time; a
/// run that fails while it is away is run again (as the same command
/// again does). Nothing lost, nothing processed twice, every message at
/// its sequence on the hub, the durable there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_source_server_restarted_after_every_step_of_a_same_name_move_is_exact() {
    use cutover_nats::engine::{InPlaceRequest, RunOptions};
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};
    let (sys, hub, leaf) = leaf_and_hub(1).await;
    orders_on(&leaf.js).await;
    // A restart stalls the leaf's publisher for a second or more: a window
    // and a horizon that cover it.
    let cfg =
        cutover_demo::load::LoadConfig { retry_horizon: Duration::from_secs(10), ..live_cfg() };
    let load = Load::start_across(leaf.client.clone(), hub.client.clone(), cfg).await;
    until_processed(&load, 300).await;
    let sys = Arc::new(Mutex::new(sys));
    let restarted = Arc::new(Mutex::new(Vec::<String>::new()));
    let in_hop_1 = Arc::new(AtomicBool::new(true));
    let hook = {
        let (sys, restarted, in_hop_1) = (sys.clone(), restarted.clone(), in_hop_1.clone());
        let (h, l) = (hub.client.clone(), leaf.client.clone());
        Arc::new(move |step: &str| {
            if !in_hop_1.load(Relaxed) {
                return;
            }
            let mut r = restarted.lock().unwrap();
            // Once per step: a resumed run passes some again.
            if !r.iter().any(|s| s == step) {
                sys.lock().unwrap().leaf.restart().unwrap();
                r.push(step.to_string());
                tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current().block_on(async {
                        crate::common::wait_until(
                            "the leaf back",
                            Duration::from_secs(30),
                            || async {
                                let hub_sees =
                                    h.request("$JS.leaf.API.INFO", "".into()).await.is_ok();
                                hub_sees && l.request("$JS.hub.API.INFO", "".into()).await.is_ok()
                            },
                        )
                        .await
                    })
                });
            }
            if step == "retire" {
                in_hop_1.store(false, Relaxed);
            }
        })
    };
    let js = hub.js.clone().across(leaf.js.clone(), "ORDERS");
    let req = InPlaceRequest {
        stream: "ORDERS".into(),
        via: None,
        consumers: vec![],
        all_consumers: true,
        settings: None,
        retry_horizon: Some(Duration::from_secs(10)),
        repoint_publishers: false,
        external: None,
    };
    let opts = RunOptions { after_step: Some(hook), ..Default::default() };
    let failures = crate::cluster::in_place_until_done(&js, &req, opts).await;
    let restarted = restarted.lock().unwrap().clone();
    assert!(restarted.len() >= 6, "the leaf restarted after each step of hop 1: {restarted:?}");
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    assert_moved_under_its_name(&leaf, &hub, r.published).await;
    same_sequences(&leaf, &hub, "ORDERS").await;
    eprintln!(
        "leaf restarted after {restarted:?}; runs that failed and were run again: {failures:#?}; published {}, retries {}, max stall {:.0} ms",
        r.published, r.publish_retries, r.max_publish_stall_ms
    );
}

/// Issue 27, the crash sweep across systems: the runner of a same-name move
/// leaf → hub killed (exit 86, `NATS_CUTOVER_TEST_CRASH_AFTER`) after every
/// step of both hops in turn, inside hop 1's commit window too (A's subjects
/// released), each time the same command run again (resuming, and killed at
/// the next step), under the library's publisher and workers. The last run
/// says the move is done; nothing lost, nothing twice, every message at its
/// sequence on the hub, `verify` holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_same_name_move_killed_after_every_step_resumes_exactly() {
    let (sys, hub, leaf) = leaf_and_hub(1).await;
    orders_on(&leaf.js).await;
    let load = Load::start_across(leaf.client.clone(), hub.client.clone(), live_cfg()).await;
    until_processed(&load, 300).await;
    let hubs = sys.hub_urls();
    let conn = ["--server", &hubs, "--from-server", sys.leaf.url()];
    let what = ["run", "--from", "ORDERS", "--to", "ORDERS", "--yes", "--lease-ttl", "1s"];
    let args = [&conn[..], &what, &["--retry-horizon", "3s"]].concat();
    let steps = [
        "create_b",
        "catch_up",
        "consumer_created:worker",
        "move_consumers",
        "subjects_released",
        "move_publishers",
        "seal_a",
        "remove_source",
        "retire",
    ];
    let mut resumed_after = vec![];
    for hop in 1..=2 {
        for step in steps {
            // The killed runner's lease lapses (1 s) before the next may run.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let out = loop {
                let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
                cmd.args(&args).env("NATS_CUTOVER_TEST_CRASH_AFTER", step);
                let out = cmd.output().unwrap();
                let held = String::from_utf8_lossy(&out.stderr).contains("is held by runner");
                if out.status.code() != Some(86) && held && std::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                break out;
            };
            assert_eq!(out.status.code(), Some(86), "killed after hop {hop} {step}: {out:?}");
            resumed_after.push(format!("hop {hop} {step}"));
        }
    }
    let out = crate::cross::until_lease_lapsed(&args).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("lives on the target side under its own name"), "{out:?}");
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    assert_moved_under_its_name(&leaf, &hub, r.published).await;
    same_sequences(&leaf, &hub, "ORDERS").await;
    verify_holds(&conn);
    eprintln!(
        "killed after {} steps ({resumed_after:?}); published {}, retries {}, max stall {:.0} ms",
        resumed_after.len(),
        r.published,
        r.publish_retries,
        r.max_publish_stall_ms
    );
}
