//! KV buckets and object stores changed in place, live, beside nats-py
//! applications that know nothing of this tool (`tests/apps/kv_app.py`): a
//! writer (put, create, revision-checked update), a watcher and a reader.

use crate::common::*;
use crate::pyapps::{lines, App};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// Keys written before the migration (p.0 ..): the reader's and the held
/// revisions' keys.
const PRELOADED: usize = 100_000;
const HELD: usize = 100;

/// A bucket as `nats kv add` / nats-py make it, `direct` its allow_direct,
/// with the preloaded keys.
async fn bucket(e: &Env, direct: bool) {
    bucket_stream(e, direct).await;
    preload(e).await;
}

pub(crate) async fn bucket_stream(e: &Env, direct: bool) {
    e.stream(json!({
        "name": "KV_cfg", "subjects": ["$KV.cfg.>"], "max_msgs_per_subject": 20,
        "discard": "new", "allow_rollup_hdrs": true, "deny_delete": true,
        "allow_direct": direct, "duplicate_window": 120_000_000_000i64,
        "metadata": {"team": "config"}
    }))
    .await;
}

async fn preload(e: &Env) {
    // Pipelined puts: a batch of acks awaited at a time.
    for chunk in (0..PRELOADED).collect::<Vec<_>>().chunks(2_000) {
        let mut acks = vec![];
        for i in chunk {
            acks.push(
                e.ctx.publish(format!("$KV.cfg.p.{i}"), format!("p{i}").into()).await.unwrap(),
            );
        }
        for a in acks {
            a.await.expect("put ack");
        }
    }
}

fn last_line(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    text.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok()).unwrap_or(Value::Null)
}

fn done(p: &Path) -> bool {
    last_line(p).get("done").is_some()
}

/// Writer, watcher and reader on bucket `cfg` while `kv cfg --set
/// storage=memory --set history=64` runs: every write applied once and seen
/// once, in order, by the watcher; every update with a revision read before
/// the migration succeeds after it. Returns the reader's summary.
async fn kv_apps_through_a_change(direct: bool) -> Value {
    let kv =
        |e: &Env| e.cli(&["kv", "cfg", "--set", "storage=memory", "--set", "history=64", "--yes"]);
    kv_apps_through(direct, kv).await
}

/// [`kv_apps_through_a_change`] with the change made by `change` (it must
/// give bucket cfg storage memory and history 64).
pub(crate) async fn kv_apps_through(direct: bool, change: impl Fn(&Env) -> Out) -> Value {
    let e = env().await;
    bucket(&e, direct).await;
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let f = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let (wf, wa, rf, until) = (f("writer.jsonl"), f("watcher.jsonl"), f("reader.jsonl"), f("stop"));
    let url = e.server.url();
    let common = ["--server", url, "--bucket", "cfg"];
    let watcher = App::start("kv_app.py", &[&["watcher"], &common[..], &["--out", &wa]].concat());
    let held = HELD.to_string();
    let writer_args =
        ["--out", &wf, "--keys", "200", "--rate", "300", "--held", &held, "--until", &until];
    let writer = App::start("kv_app.py", &[&["writer"], &common[..], &writer_args[..]].concat());
    let reader_keys = PRELOADED.to_string();
    let reader_args = ["--out", &rf, "--keys", &reader_keys, "--first", &held, "--until", &until];
    let reader = App::start("kv_app.py", &[&["reader"], &common[..], &reader_args[..]].concat());
    let writes = || lines(Path::new(&wf)).into_iter().filter(|l| l.get("rev").is_some()).count();
    wait_until("the writer writes", Duration::from_secs(30), || async { writes() >= 200 }).await;
    let out = change(&e);
    assert_eq!(out.code, 0, "{out:?}");
    let after = writes();
    wait_until("the writer writes after", Duration::from_secs(30), || async {
        writes() >= after + 200
    })
    .await;
    std::fs::write(&until, "").unwrap();
    wait_until("writer and reader end", Duration::from_secs(60), || async {
        done(Path::new(&wf)) && done(Path::new(&rf))
    })
    .await;
    drop((writer, reader));
    let written: Vec<Value> =
        lines(Path::new(&wf)).into_iter().filter(|l| l.get("i").is_some()).collect();
    let errors: Vec<&Value> = written.iter().filter(|l| l.get("error").is_some()).collect();
    assert!(errors.is_empty(), "writes failed: {errors:?}");
    let last_rev = written.iter().filter_map(|l| l["rev"].as_u64()).max().unwrap();
    // The watcher sees the last write, then stops.
    let seen = || lines(Path::new(&wa)).iter().filter_map(|l| l["rev"].as_u64()).max();
    wait_until("the watcher sees the last write", Duration::from_secs(60), || async {
        seen() >= Some(last_rev)
    })
    .await;
    watcher.stop();
    check_writes_and_watch(&written, &lines(Path::new(&wa)));
    check_held(&lines(Path::new(&wf)));
    check_bucket(&e, last_rev).await;
    let mut slow = written.clone();
    slow.sort_by(|a, b| b["stall_ms"].as_f64().partial_cmp(&a["stall_ms"].as_f64()).unwrap());
    eprintln!("slowest writes: {:?}", &slow[..3.min(slow.len())]);
    let w = last_line(Path::new(&wf));
    let r = last_line(Path::new(&rf));
    eprintln!("writer: {w}\nreader: {r}\nmigration: {}", out.stderr.lines().last().unwrap_or(""));
    assert!(r["reads"].as_u64().unwrap() > 0);
    r
}

/// Each write i (value "i") seen by the watcher exactly once, at the revision
/// the writer got; the watcher's revisions strictly increase. Prints how late
/// the watcher saw a write at most (its ordered consumer is recreated after
/// missed heartbeats when the stream it watched is replaced).
fn check_writes_and_watch(written: &[Value], watched: &[Value]) {
    let mut by_value: HashMap<String, Vec<u64>> = HashMap::new();
    let mut seen_at: HashMap<String, f64> = HashMap::new();
    for w in watched {
        let v = w["value"].as_str().unwrap().to_string();
        seen_at.insert(v.clone(), w["t"].as_f64().unwrap_or(0.0));
        by_value.entry(v).or_default().push(w["rev"].as_u64().unwrap());
    }
    let late = written
        .iter()
        .filter_map(|w| Some(seen_at.get(&w["i"].as_u64()?.to_string())? - w["t"].as_f64()?))
        .fold(0.0f64, f64::max);
    eprintln!("watcher: saw a write at most {:.0} ms after it was acked", late * 1000.0);
    for w in written {
        let v = w["i"].as_u64().unwrap().to_string();
        let revs = by_value.get(&v).cloned().unwrap_or_default();
        assert_eq!(revs, vec![w["rev"].as_u64().unwrap()], "write {v} ({w}): watcher saw {revs:?}");
    }
    assert_eq!(by_value.len(), written.len(), "the watcher saw a value nobody wrote");
    let revs: Vec<u64> = watched.iter().map(|w| w["rev"].as_u64().unwrap()).collect();
    assert!(revs.windows(2).all(|p| p[0] < p[1]), "watcher out of order or repeated");
}

/// Every update with a revision read before the migration succeeded after it.
fn check_held(records: &[Value]) {
    let held: Vec<&Value> = records.iter().filter(|l| l.get("held").is_some()).collect();
    assert_eq!(held.len(), HELD);
    for h in held {
        assert!(h.get("new_rev").is_some(), "update with a pre-migration revision failed: {h}");
    }
}

/// The bucket has its new settings under its name, its own metadata, and the
/// keys written before.
async fn check_bucket(e: &Env, last_rev: u64) {
    let (raw, info) = e.js.stream_info("KV_cfg").await.unwrap();
    assert_eq!(raw["config"]["storage"], "memory");
    assert_eq!(raw["config"]["max_msgs_per_subject"], 64);
    assert_eq!(raw["config"]["metadata"]["team"], "config");
    assert!(raw["config"]["metadata"].get("nats-cutover.from").is_none());
    assert!(info.state.last_seq >= last_rev);
    assert!(e.js.stream_info_opt("KV_cfg_CUTOVER").await.unwrap().is_none());
    let kv = e.ctx.get_key_value("cfg").await.unwrap();
    let last = PRELOADED - 1;
    let v = kv.get(format!("p.{last}")).await.unwrap().expect("a preloaded key");
    assert_eq!(v, format!("p{last}").as_bytes());
}

/// Direct get (nats.go's and the nats CLI's default): readers are answered
/// right throughout (the temporary stream answers for the bucket's name).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_bucket_with_direct_get_changes_in_place_under_live_apps() {
    let r = kv_apps_through_a_change(true).await;
    assert_eq!((r["wrong"].as_u64(), r["not_found"].as_u64()), (Some(0), Some(0)), "{r}");
    assert_eq!(r["errors"], 0, "{r}");
}

/// Without direct get (nats-py's default), readers ask the stream named
/// KV_cfg itself: the writes, revisions and watcher are exact as above; the
/// reader's answers during the move are reported (docs/in-place.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_bucket_without_direct_get_changes_in_place_under_live_apps() {
    kv_apps_through_a_change(false).await;
}

/// An object store with a few large objects (8 MiB each, in 128 KiB chunks)
/// changed to memory storage: every object readable and intact after, by a
/// nats-py client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn object_store_changes_in_place_and_every_object_is_intact() {
    let e = env().await;
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let (put, check) = (dir.join("put.jsonl"), dir.join("check.jsonl"));
    let url = e.server.url();
    let run = |role: &str, out: &Path| {
        let args = ["--server", url, "--bucket", "files", "--out", out.to_str().unwrap()];
        let mut app = App::start("kv_app.py", &[&[role][..], &args[..]].concat());
        assert!(app.0.wait().unwrap().success(), "{role}");
    };
    run("obj-put", &put);
    let before = e.js.stream_info("OBJ_files").await.unwrap().1.state;
    let out = e.cli(&["obj", "files", "--set", "storage=memory", "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");
    let (raw, after) = e.js.stream_info("OBJ_files").await.unwrap();
    assert_eq!(raw["config"]["storage"], "memory");
    assert_eq!((after.state.messages, after.state.last_seq), (before.messages, before.last_seq));
    run("obj-check", &check);
    let objects = lines(&check);
    assert_eq!(objects.len(), 3);
    for o in objects {
        assert_eq!(o["intact"], true, "{o}");
        assert_eq!(o["size"], 8 << 20);
    }
}

/// `plan --in-place` shows both hops, what each copies and how long both
/// copies should take; it writes nothing.
#[tokio::test]
async fn plan_in_place_shows_both_hops_and_the_copy() {
    let e = env().await;
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"]})).await;
    e.publish("orders.a", "m", 1_000).await;
    let before = e.snapshot().await;
    let args = ["plan", "--in-place", "ORDERS", "--set", "storage=memory", "--all-consumers"];
    let out = e.cli(&args);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("hop 2: ORDERS_CUTOVER → ORDERS"), "{}", out.stdout);
    assert!(out.stdout.contains("copies 1,000 messages"), "{}", out.stdout);
    // A limits stream on 2.15.1: the copy is paced, and the plan says what
    // publishers met behind a paced copy, not behind the server's own.
    assert!(out.stdout.contains("reads the stream through a paced durable"), "{}", out.stdout);
    let json = e.cli(&[&["--json"][..], &args[..]].concat()).json();
    assert_eq!(json["copies_messages"], 1_000);
    assert_eq!(
        (json["paced_copy"].as_bool(), json["replicated_copy"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(json["hop1"]["to"], "ORDERS_CUTOVER");
    assert!(json["estimate_ms"].as_u64().is_some());
    assert_eq!(e.snapshot().await, before, "plan changed the server");
}

/// Bad bucket options are refused before anything connects, naming the
/// options there are; a setting the server updates in place needs no
/// migration: with --yes it is applied as an update.
#[tokio::test]
async fn kv_options_are_checked_and_plain_updates_are_not_migrations() {
    let e = env().await;
    bucket_stream(&e, true).await;
    let before = e.snapshot().await;
    let out = e.cli(&["kv", "cfg", "--set", "retention=workqueue", "--yes"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("history, ttl"), "{}", out.stderr);
    let out = e.cli(&["kv", "cfg", "--set", "history=0", "--yes"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = e.cli(&["kv", "nobucket", "--set", "storage=memory", "--yes"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert_eq!(e.snapshot().await, before, "a refused request changed the server");
    let out = e.cli(&["kv", "cfg", "--set", "history=10", "--set", "ttl=1h", "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("no migration needed"), "{}", out.stdout);
    assert!(out.stdout.contains("\"max_msgs_per_subject\": 10"), "{}", out.stdout);
    let (_, kv) = e.js.stream_info("KV_cfg").await.unwrap();
    assert_eq!((kv.config.max_msgs_per_subject, kv.config.max_age), (10, 3_600_000_000_000));
}

/// What an in-place change cannot do is refused by `plan --in-place` (exit 3)
/// and by `run --in-place`, naming why, with the server unchanged: a work
/// queue with two durables on the same messages, a durable without explicit
/// acks on a work queue, a work queue becoming an interest stream.
#[tokio::test]
async fn in_place_refuses_what_it_cannot_do() {
    let e = env().await;
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"]})).await;
    for (name, ack) in [("a", "explicit"), ("b", "explicit"), ("c", "all")] {
        e.consumer("ORDERS", json!({"durable_name": name, "ack_policy": ack})).await;
    }
    e.stream(json!({"name": "JOBS", "subjects": ["jobs.>"], "retention": "workqueue"})).await;
    e.consumer("JOBS", json!({"durable_name": "a", "ack_policy": "explicit"})).await;
    let before = e.snapshot().await;
    // (Limits to interest is a plain update: not a migration.)
    for (stream, set, consumers, why) in [
        ("ORDERS", "retention=workqueue", &["a", "b"][..], "overlap"),
        ("ORDERS", "retention=workqueue", &["c"][..], "explicit acks"),
        ("JOBS", "retention=interest", &["a"][..], "interest stream drops"),
    ] {
        let mut args = vec!["plan", "--in-place", stream, "--set", set];
        for c in consumers {
            args.extend(["--consumer", c]);
        }
        let out = e.cli(&args);
        assert_eq!(out.code, 3, "{args:?}: {out:?}");
        assert!(out.stdout.contains(why), "{args:?} should say {why:?}: {}", out.stdout);
        args[0] = "run";
        args.push("--yes");
        let out = e.cli(&args);
        assert_ne!(out.code, 0, "{args:?}: {out:?}");
        assert!(out.stderr.contains(why), "{args:?} should say {why:?}: {}", out.stderr);
    }
    assert_eq!(e.snapshot().await, before, "a refused in-place change changed the server");
}

/// A stream that republishes: neither hop's copy republishes the history (B
/// takes `republish` at the commit point), and a message published after the
/// change is republished once (a newcomer's trial saw every message twice).
#[tokio::test]
async fn republish_is_not_repeated_by_the_copies() {
    use futures::StreamExt;
    let e = env().await;
    e.stream(json!({"name": "REP", "subjects": ["rep.>"], "republish": {"src": "rep.>", "dest": "repub.>"}})).await;
    e.publish("rep.a", "m", 100).await;
    let watcher = async_nats::connect(e.server.url()).await.unwrap();
    let mut sub = watcher.subscribe("repub.>").await.unwrap();
    watcher.flush().await.unwrap();
    let out =
        e.cli(&["run", "--in-place", "REP", "--set", "storage=memory", "--all-consumers", "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");
    let (raw, _) = e.js.stream_info("REP").await.unwrap();
    assert_eq!(raw["config"]["republish"]["dest"], "repub.>", "republish kept");
    e.publish("rep.a", "after", 1).await;
    let mut got = vec![];
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(5), sub.next()).await {
        let last = m.payload.as_ref() == b"0"
            && m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).map(|v| v.as_str())
                == Some("after-0");
        got.push(m);
        if last {
            break;
        }
    }
    assert_eq!(got.len(), 1, "republished during the change: {}", got.len() - 1);
}

/// A change killed half way and then asked for with other settings is
/// refused, naming both, and the server is left as the crash left it; the
/// original command then finishes it.
#[tokio::test]
async fn an_interrupted_change_is_not_finished_with_other_settings() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 20).await;
    let head = ["run", "--in-place", "ORDERS", "--consumer", "worker", "--yes"];
    let first = [&head[..], &["--set", "storage=memory", "--lease-ttl", "1s"]].concat();
    let out = crate::run::run_cli(&e, &first, Some("catch_up"));
    assert_eq!(out.code, 86, "the test hook kills the runner after catch_up: {out:?}");
    let before = e.snapshot().await;
    let other = [&head[..], &["--set", "storage=file", "--set", "max_msgs=1000000"]].concat();
    let out = crate::run::retry_cli(&e, &other, &["is held by runner"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("storage=\"file\" (under way: \"memory\")"), "{}", out.stderr);
    assert_eq!(e.snapshot().await, before, "a refused request changed the server");
    let out = crate::run::retry_cli(&e, &first, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (raw, _) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(raw["config"]["storage"], "memory");
}

/// Values the server would refuse are bad input (exit 2, named), not "no
/// migration needed"; a change already applied says so.
#[tokio::test]
async fn in_place_checks_values_and_says_when_nothing_is_left_to_do() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let before = e.snapshot().await;
    for (set, why) in [
        ("retention=wq", "limits, interest or workqueue"),
        ("discard=sideways", "old or new"),
        ("max_msgs=-7", "-1 for no limit"),
        ("storage=ssd", "file or memory"),
    ] {
        let out = e.cli(&["plan", "--in-place", "ORDERS", "--consumer", "worker", "--set", set]);
        assert_eq!(out.code, 2, "{set}: {out:?}");
        assert!(out.stderr.contains(why), "{set}: {}", out.stderr);
    }
    let out = e.cli(&[
        "run",
        "--in-place",
        "ORDERS",
        "--consumer",
        "worker",
        "--set",
        "storage=file",
        "--yes",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("already has these settings"), "{}", out.stdout);
    assert_eq!(e.snapshot().await, before);
}

/// A bucket's stream changed by its stream name takes the bucket's option
/// names, as `kv` does (a newcomer's `plan --in-place KV_cfg --set
/// history=10` was refused as "not a stream setting"): history is the
/// stream's max_msgs_per_subject, an update the server makes in place.
#[tokio::test]
async fn a_bucket_stream_in_place_takes_the_bucket_option_names() {
    let e = env().await;
    bucket_stream(&e, true).await;
    let out = e.cli(&["plan", "--in-place", "KV_cfg", "--set", "history=99"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("a whole number from 1 to 64"), "{}", out.stderr);
    let before = e.snapshot().await;
    let out = e.cli(&["plan", "--in-place", "KV_cfg", "--set", "history=5"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("\"max_msgs_per_subject\": 5"), "{}", out.stdout);
    assert_eq!(e.snapshot().await, before, "plan changes nothing");
    let out =
        e.cli(&["run", "--in-place", "KV_cfg", "--set", "history=5", "--set", "ttl=1h", "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");
    let (_, s) = e.js.stream_info("KV_cfg").await.unwrap();
    assert_eq!((s.config.max_msgs_per_subject, s.config.max_age), (5, 3_600_000_000_000));
}
