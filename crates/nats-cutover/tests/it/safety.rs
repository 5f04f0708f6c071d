//! "Safe" means safe (issue 8): what plan accepts, run completes exactly; what
//! run could not do, plan refuses before any write; a failure leaves every
//! publisher served and every consumer as it was.

use crate::common::*;
use crate::run::{request, until_processed};
use cutover_core::journal::Phase;
use cutover_nats::engine::events::{Collect, EventKind, Progress};
use cutover_nats::engine::{self, RunOptions};
use serde_json::json;

/// A live workload on ORDERS at `rate` msg/s, once `n` messages were processed.
async fn live_load(e: &Env, rate: u32, n: u64) -> cutover_demo::load::Load {
    let cfg = crate::run::load_cfg(rate, 20_000);
    let load = cutover_demo::load::Load::start(e.js.client.clone(), cfg).await;
    until_processed(&load, n).await;
    load
}

/// `n` more publishes, then every message processed exactly once.
async fn exact_after(load: cutover_demo::load::Load, n: u64) {
    let after = load.published() + n;
    crate::run::until_published(&load, after).await;
    let r = crate::run::finish(load).await;
    crate::run::assert_exact(&r);
}

/// `plan` with these arguments refuses (exit 3) naming `why`, and the server is
/// exactly as before (the scratch check of B's configuration is deleted).
async fn refuses(e: &Env, args: &[&str], why: &str) {
    let before = e.snapshot().await;
    let mut full = vec!["plan"];
    full.extend_from_slice(args);
    let out = e.cli(&full);
    assert_eq!(out.code, 3, "plan {args:?} should be refused: {out:?}");
    assert!(out.stdout.contains(why), "plan {args:?} should say {why:?}: {out:?}");
    assert_eq!(e.snapshot().await, before, "plan {args:?} changed the server");
}

fn to_config(e: &Env, name: &str, v: serde_json::Value) -> String {
    let p = e.server.dir().join(format!("{name}.json"));
    std::fs::write(&p, v.to_string()).unwrap();
    p.to_str().unwrap().to_string()
}

async fn stream_with_durable(e: &Env, cfg: serde_json::Value) {
    let name = cfg["name"].as_str().unwrap().to_string();
    e.stream(cfg).await;
    e.consumer(&name, json!({"durable_name": "C", "ack_policy": "explicit"})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_refuses_before_any_write_what_run_could_not_do() {
    let e = env().await;
    // Case 4: A sources another stream, which B would not.
    e.stream(json!({"name": "X", "subjects": ["x.>"]})).await;
    stream_with_durable(
        &e,
        json!({"name": "SRC", "subjects": ["src.>"], "sources": [{"name": "X"}]}),
    )
    .await;
    refuses(&e, &["--from", "SRC", "--to", "SRC2", "--consumer", "C"], "A sources X").await;
    // Case 10: a KV bucket is found by name.
    stream_with_durable(
        &e,
        json!({"name": "KV_cfg", "subjects": ["$KV.cfg.>"], "max_msgs_per_subject": 1}),
    )
    .await;
    refuses(&e, &["--from", "KV_cfg", "--to", "KV_cfg2", "--consumer", "C"], "is a KV bucket")
        .await;
    // Cases 8, 9, 12 on an ordinary stream.
    stream_with_durable(&e, json!({"name": "ORD", "subjects": ["ord.>"]})).await;
    e.publish("ord.1", "a", 3).await;
    e.stream(json!({"name": "OTHER", "subjects": ["other.>"]})).await;
    let ord = ["--from", "ORD", "--to", "ORD2", "--consumer", "C", "--to-config"];
    let with = |name: &str, v| {
        let mut a = ord.to_vec();
        a.push(Box::leak(to_config(&e, name, v).into_boxed_str()));
        a
    };
    // Case 8: B keeps fewer per subject than A holds on ord.1.
    refuses(&e, &with("pers", json!({"max_msgs_per_subject": 1})), "A holds 3 messages on ord.1")
        .await;
    // Case 9: B's subjects overlap another stream's.
    refuses(
        &e,
        &with("overlap", json!({"subjects": ["ord.>", "other.x"]})),
        "stream OTHER already takes other.>",
    )
    .await;
    // Case 12: the server refuses B's configuration (judged on a scratch stream).
    refuses(
        &e,
        &with("floppy", json!({"storage": "floppy"})),
        "the server refuses B's configuration",
    )
    .await;
    refuses(&e, &with("r3", json!({"num_replicas": 3})), "the server refuses B's configuration")
        .await;
    // A subject transform on B alone would hide A's messages from filters.
    refuses(
        &e,
        &with("transform", json!({"subject_transform": {"src": "ord.>", "dest": "x.>"}})),
        "B's subject_transform would rewrite the subjects",
    )
    .await;
    // Case 7: a work queue B cannot position the new durable.
    refuses(&e, &with("wq", json!({"retention": "workqueue"})), "error 10101").await;
    // Case 5: a retry horizon longer than A's window (B takes A's window).
    stream_with_durable(
        &e,
        json!({"name": "IDS", "subjects": ["ids.>"], "duplicate_window": 2_000_000_000i64}),
    )
    .await;
    refuses(
        &e,
        &["--from", "IDS", "--to", "IDS2", "--consumer", "C", "--retry-horizon", "10s"],
        "shorter than --retry-horizon",
    )
    .await;
    let j = e.cli(&["--json", "plan", "--from", "IDS", "--to", "IDS2", "--consumer", "C"]).json();
    assert_eq!(j["safe"], true, "{j:#}");
    assert_eq!(j["b_config"]["duplicate_window"], 2_000_000_000i64, "B takes A's window");
    // An unknown key is bad input, named.
    let before = e.snapshot().await;
    let out = e.cli(&[
        "plan",
        "--from",
        "ORD",
        "--to",
        "ORD2",
        "--consumer",
        "C",
        "--to-config",
        &to_config(&e, "typo", json!({"storage": "memory", "colour": "red"})),
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("\"colour\", which is not a stream setting"), "{out:?}");
    assert_eq!(e.snapshot().await, before);
    // And the accepted plan says what the server check tried.
    let out = e.cli(&["plan", "--from", "ORD", "--to", "ORD2", "--consumer", "C"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("scratch stream CUTOVER_CHECK_ORD2"), "{out:?}");
}

/// Case 6: A's subjects include its own name; a stream without subjects gets
/// its name from the server, so A keeps a placeholder B's subjects do not match.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn subjects_that_include_the_stream_name_move_to_b() {
    let e = env().await;
    e.stream(json!({"name": "ORDERS", "subjects": ["ORDERS", "ORDERS.>"]})).await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit"})).await;
    e.publish("ORDERS", "a", 5).await;
    e.publish("ORDERS.eu", "b", 5).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    assert!(plan.safe, "{:#?}", plan.unsafe_findings().collect::<Vec<_>>());
    let (_, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["_cutover.released.ORDERS".to_string()]);
    let (_, b) = e.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.config.subjects, vec!["ORDERS".to_string(), "ORDERS.>".to_string()]);
    e.publish("ORDERS", "c", 1).await;
    e.publish("ORDERS.us", "d", 1).await;
    let (_, b) = e.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.state.messages, 12, "every message once in B");
}

/// An operator's pause survives: the new durable is paused until the same
/// time, and a rollback leaves the old one paused until then, not resumed and
/// not paused for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_paused_consumer_stays_paused_until_the_same_time() {
    let until = "2099-01-02T03:04:05Z";
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    e.js.consumer_pause("ORDERS", "worker", Some(until)).await.unwrap();
    let out = e.cli(&run_orders(&[], &[]));
    assert_eq!(out.code, 0, "{out:?}");
    let (raw, c) = e.js.consumer_info("ORDERS_V2", "worker").await.unwrap();
    assert!(c.paused, "the new durable is paused: {raw:#}");
    assert!(raw["config"]["pause_until"].as_str().unwrap().starts_with("2099-01-02T03:04:05"));

    // Rollback from the moment the new durable exists.
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    e.js.consumer_pause("ORDERS", "worker", Some(until)).await.unwrap();
    let out = crate::run::run_cli(&e, &run_orders(&[], &[]), Some("move_consumers"));
    assert_eq!(out.code, 86, "{out:?}");
    let (raw, _) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(
        raw["config"]["pause_until"].as_str().unwrap().starts_with("9999"),
        "paused for good while moved"
    );
    let out = crate::run::retry_cli(
        &e,
        &["rollback", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"],
        &["is held by runner"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let (raw, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(c.paused);
    assert!(
        raw["config"]["pause_until"].as_str().unwrap().starts_with("2099-01-02T03:04:05"),
        "{raw:#}"
    );
}

/// Failure injection at the commit: B cannot take the subjects (the server
/// refuses its update: test hook; a B sealed behind the runner's back stops
/// sourcing, and the run now fails before it releases anything). A takes
/// them back before the error is reported: publishers are served by A, the
/// moved consumer reads A's messages through B, and the message says what
/// remains and what to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_that_fails_gives_a_its_subjects_back_at_once() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let load = live_load(&e, 300, 100).await;
    let args = run_orders(&[], &["--lease-ttl", "1s"]);
    let out = crate::run::run_cli(&e, &args, Some("move_consumers"));
    assert_eq!(out.code, 86, "{out:?}");
    let out = loop {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
            .args([
                "--server",
                e.server.url(),
                "run",
                "--resume",
                "ORDERS.ORDERS_V2",
                "--lease-ttl",
                "1s",
            ])
            .env(cutover_nats::test_hooks::REFUSE_SUBJECTS_VAR, "1")
            .env_remove(cutover_nats::test_hooks::CRASH_AFTER_VAR)
            .output()
            .unwrap();
        let o = Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        };
        if !o.stderr.contains("is held by runner") {
            break o;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("ORDERS holds its subjects again"), "{out:?}");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()]);
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.phase, Phase::ConsumersMoved, "the commit is undone in the journal too");
    // Publishers keep publishing to A: the workload goes on without a failure.
    let after = load.published() + 100;
    crate::run::until_published(&load, after).await;
    let r = load.stop().await;
    assert_eq!(r.publish_failures, 0, "publishers lost their stream");
}

/// Case 5: a "latest state" publisher reuses msg-ids after A's 2 s window has
/// passed, so A stores each repeat. B must store every one of them too: while
/// it catches up A's history (where repeats arrive milliseconds apart), while
/// it follows A, and after it takes the subjects.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn msg_ids_reused_after_a_window_are_all_kept() {
    let e = env().await;
    e.stream(
        json!({"name": "STATE", "subjects": ["state.>"], "duplicate_window": 2_000_000_000i64}),
    )
    .await;
    e.consumer("STATE", json!({"durable_name": "C", "ack_policy": "explicit"})).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ctx = e.ctx.clone();
    let flag = stop.clone();
    // 50 ids, one publish every 20 ms: each id comes back every second, so
    // half the repeats fall inside A's window (dropped by A) and the rest
    // outside it (stored by A as new messages).
    let publisher = tokio::spawn(async move {
        let (mut stored, mut i) = (0u64, 0u64);
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("key-{}", (i / 2) % 50).as_str());
            loop {
                match ctx.publish_with_headers("state.x", h.clone(), "v".into()).await {
                    Ok(ack) => match ack.await {
                        Ok(a) => {
                            stored += u64::from(!a.duplicate);
                            break;
                        }
                        Err(_) => continue,
                    },
                    Err(_) => continue,
                }
            }
            i += 1;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        stored
    });
    // A history of several windows before B exists.
    wait_until("A stores repeats", std::time::Duration::from_secs(20), || async {
        e.js.stream_info("STATE").await.unwrap().1.state.messages > 200
    })
    .await;
    let plan = engine::prepare_plan(&e.js, &request("STATE", "STATE2", &["C"])).await.unwrap();
    assert!(plan.safe, "{:#?}", plan.unsafe_findings().collect::<Vec<_>>());
    let (_, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let moved_at = e.js.stream_info("STATE2").await.unwrap().1.state.messages;
    wait_until("B stores repeats", std::time::Duration::from_secs(20), || async {
        e.js.stream_info("STATE2").await.unwrap().1.state.messages > moved_at + 50
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let stored = publisher.await.unwrap();
    let (_, b) = e.js.stream_info("STATE2").await.unwrap();
    assert_eq!(b.state.messages, stored, "B holds every message A (then B) stored, once");
}

/// `run` on a finished migration says so and exits 0 (it used to fail the new
/// plan with exit 3); `run --plan FILE` refuses flags that contradict the file.
#[tokio::test(flavor = "multi_thread")]
async fn run_again_after_done_and_plan_file_contradictions() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 5).await;
    let args = run_orders(&[], &[]);
    let out = e.cli(&args);
    assert_eq!(out.code, 0, "{out:?}");
    let before = e.snapshot().await;
    let out = e.cli(&args);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("already complete"), "{out:?}");
    assert_eq!(e.snapshot().await, before);

    let plan_path = e.server.dir().join("p.toml");
    let p = plan_path.to_str().unwrap();
    let out = e.cli(&[
        "plan",
        "--from",
        "ORDERS_V2",
        "--to",
        "ORDERS_V3",
        "--consumer",
        "worker",
        "--out",
        p,
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = e.cli(&["run", "--plan", p, "--from", "X", "--yes"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--from would contradict it"), "{out:?}");
    assert_eq!(e.snapshot().await, before);
}

/// Journal hygiene: `status` lists every lease, orphans included; `forget`
/// removes a finished migration or an expired orphan lease and refuses a live
/// migration or a held lease.
#[tokio::test(flavor = "multi_thread")]
async fn status_lists_orphan_leases_and_forget_refuses_live_migrations() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 5).await;
    // A runner that died right after taking the lease, before any journal.
    let kv = async_nats::jetstream::new(e.js.client.clone())
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "CUTOVER".into(),
            history: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    let expires = cutover_nats::journal::now_ms() + 1500;
    let rec = json!({"holder": "gone:1:1", "migration": "ORDERS.OTHER", "expires_ms": expires});
    kv.put("lease.ORDERS", rec.to_string().into()).await.unwrap();
    let st = e.cli(&["--json", "status"]).json();
    assert_eq!(st["leases"][0]["migration"], "ORDERS.OTHER", "{st:#}");
    assert_eq!(st["leases"][0]["orphan"], true);
    assert_eq!(st["leases"][0]["live"], true);
    let out = e.cli(&["status"]);
    assert!(out.stdout.contains("orphan: no journal"), "{out:?}");
    let out = e.cli(&["forget", "ORDERS.OTHER"]);
    assert_ne!(out.code, 0, "a held lease is not forgotten: {out:?}");
    wait_until("the orphan lease expires", std::time::Duration::from_secs(10), || async {
        e.cli(&["--json", "status"]).json()["leases"][0]["live"] == false
    })
    .await;
    let out = e.cli(&["forget", "ORDERS.OTHER"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(e.cli(&["--json", "status"]).json()["leases"], json!([]));

    // A live migration is refused; a finished one is forgotten, its route kept.
    let args = run_orders(&[], &["--lease-ttl", "1s"]);
    let out = crate::run::run_cli(&e, &args, Some("move_consumers"));
    assert_eq!(out.code, 86, "{out:?}");
    let out = e.cli(&["forget", "ORDERS.ORDERS_V2"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("is under way") || out.stderr.contains("held by runner"),
        "{out:?}"
    );
    let out = crate::run::retry_cli(
        &e,
        &["run", "--resume", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"],
        &["is held by runner"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let out = e.cli(&["forget", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 0, "{out:?}");
    let st = e.cli(&["--json", "status"]).json();
    assert_eq!(st["migrations"], json!([]), "{st:#}");
    assert!(kv.get("route.ORDERS.worker").await.unwrap().is_some(), "the route stays");
}

/// A drain cannot be held hostage: a message held by a dead worker (ack_wait
/// 8 s) is redelivered only after its ack_wait, but the old consumer is never
/// paused longer than max_pause (here 1 s) at a time: it is resumed for as
/// long, then paused again, and the move stays exact. The reported gap is
/// the pause that held (to the route), not the whole drain with the time
/// the consumer was resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_worker_does_not_hold_the_consumer_paused() {
    let e = env().await;
    crate::run::orders_stream(&e, 8_000).await;
    let load = live_load(&e, 300, 100).await;
    let held = crate::run::take_one_and_die(&e).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let opts = RunOptions { max_pause: std::time::Duration::from_secs(1), ..Default::default() };
    let events = Collect::default();
    let j = engine::run(&e.js, plan, &opts, &events, rx).await.unwrap();
    drop(held);
    let events = events.0.lock().unwrap().clone();
    let drain_ms = events.iter().find_map(|e| match e.kind {
        EventKind::Progress(Progress::Settled { drain_ms, .. }) => Some(drain_ms as f64),
        _ => None,
    });
    let gap_ms = events.iter().find_map(|e| match e.kind {
        EventKind::Progress(Progress::Moved { gap_ms, .. }) => Some(gap_ms),
        _ => None,
    });
    let (drain_ms, gap_ms) = (drain_ms.expect("settled"), gap_ms.expect("moved"));
    assert!(gap_ms < drain_ms, "gap {gap_ms} ms counts the resumed time (drain {drain_ms} ms)");
    assert_eq!(j.phase, Phase::Done);
    let c = &j.consumers[0];
    assert!(c.nudges >= 1, "the pause was cut at least once: {c:?}");
    let longest = c.longest_pause_ms.expect("longest pause recorded");
    // Bounded by max_pause (plus polling), far below the 8 s ack_wait the old
    // rule (1.5 × ack_wait) would have paused for.
    assert!(longest < 4_000, "longest pause {longest} ms: {c:?}");
    // Its last look before retire: paused for good since F, nothing after F.
    let r = c.retired_state.as_ref().expect("the old consumer's state at retire");
    assert_eq!((r.delivered_stream_seq, r.paused), (c.checkpoint.unwrap(), true), "{c:?}");
    exact_after(load, 100).await;
}

/// verify tells the truth after B's own limits: copies of A's messages that
/// B's per-subject limit removed when newer messages arrived are not lost.
#[tokio::test(flavor = "multi_thread")]
async fn verify_does_not_call_copies_evicted_by_b_lost() {
    let e = env().await;
    e.stream(json!({"name": "LATEST", "subjects": ["latest.>"], "max_msgs_per_subject": 2})).await;
    e.consumer("LATEST", json!({"durable_name": "C", "ack_policy": "explicit"})).await;
    e.publish("latest.a", "x", 5).await;
    e.publish("latest.b", "y", 1).await;
    let out = e.cli(&["run", "--from", "LATEST", "--to", "LATEST2", "--consumer", "C", "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");
    // Two newer values of latest.a go to B and push out its copies of A's two.
    e.publish("latest.a", "z", 2).await;
    let out = e.cli(&["--json", "verify", "--migration", "LATEST.LATEST2"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["summary"]["lost"], 0, "{v:#}");
    assert_eq!(v["summary"]["evicted_by_b"], 2, "{v:#}");
    // A real loss still counts: delete B's copy of latest.b.
    let (_, b) = e.js.stream_info("LATEST2").await.unwrap();
    let m = e.js.next_matching("LATEST2", b.state.first_seq, "latest.b", true).await.unwrap();
    let m = m.expect("B's copy of latest.b").seq;
    e.js.api("delete", "STREAM.MSG.DELETE.LATEST2", &json!({ "seq": m, "no_erase": true }))
        .await
        .unwrap();
    let out = e.cli(&["--json", "verify", "--migration", "LATEST.LATEST2"]);
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(out.json()["summary"]["lost"], 1);
}

/// A server whose runner user `op` may not send one JetStream API request
/// (a permissions violation: the request is dropped and times out), and an
/// `admin` user for the test and its publishers.
async fn env_denying(subject: &str) -> Env {
    let conf = format!(
        r#"accounts: {{ APP: {{ jetstream: enabled, users: [
            {{ user: admin, password: a }},
            {{ user: op, password: o, permissions: {{ publish: {{ deny: ["{subject}"] }} }} }}
        ] }} }}"#
    );
    let server = cutover_testkit::NatsServer::start_with(cutover_testkit::ServerOptions {
        config: Some(conf),
        ..Default::default()
    })
    .unwrap();
    let client = async_nats::ConnectOptions::with_user_and_password("admin".into(), "a".into())
        .connect(server.url())
        .await
        .unwrap();
    Env {
        js: cutover_nats::Js::new(client.clone(), std::time::Duration::from_secs(5)),
        ctx: async_nats::jetstream::new(client),
        server,
    }
}

/// Failure injection: each write the runner makes fails in turn (it may not
/// send that request). Whatever fails, publishers can still publish, and the
/// old consumer is as it was (running), or moved and delivering from B; the
/// message says what to run next.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_that_fails_leaves_publishers_served_and_consumers_working() {
    // (denied request, the consumer is moved when the run stops)
    let cases = [
        ("$JS.API.STREAM.CREATE.ORDERS_V2", false),
        ("$JS.API.CONSUMER.PAUSE.ORDERS.worker", false),
        ("$JS.API.CONSUMER.CREATE.ORDERS_V2.worker", false),
        // B has A's window from its create (A has no history older than
        // it): B's first update is the commit's, after the consumer moved.
        ("$JS.API.STREAM.UPDATE.ORDERS_V2", true),
        ("$JS.API.STREAM.UPDATE.ORDERS", true),
        ("$JS.API.CONSUMER.DELETE.ORDERS.worker", true),
    ];
    for (denied, moved) in cases {
        let e = env_denying(denied).await;
        crate::run::orders_stream(&e, 30_000).await;
        e.publish("orders.eu", "before", 5).await;
        let url = e.server.url().replacen("://", "://op:o@", 1);
        let out = cli(&[
            "--server",
            &url,
            "--timeout",
            "1s",
            "run",
            "--from",
            "ORDERS",
            "--to",
            "ORDERS_V2",
            "--consumer",
            "worker",
            "--yes",
            "--lease-ttl",
            "2s",
        ]);
        assert_ne!(out.code, 0, "denied {denied}: the run cannot succeed: {out:?}");
        let named = format!("the server denied this user permission to publish \"{denied}\"");
        assert!(out.stderr.contains(&named), "denied {denied}: named: {out:?}");
        assert!(
            ["run --resume", "rollback", "run again", "nothing was changed"]
                .iter()
                .any(|next| out.stderr.contains(next)),
            "denied {denied}: the message names what to run next: {out:?}"
        );
        // Publishers are served by some stream.
        e.publish("orders.eu", "after", 1).await;
        // The consumer delivers: the old one, or the new one on B.
        let (stream, other) = if moved { ("ORDERS_V2", "ORDERS") } else { ("ORDERS", "ORDERS_V2") };
        let (raw, c) = e.js.consumer_info(stream, "worker").await.unwrap();
        assert!(!c.paused, "denied {denied}: {stream}/worker is paused: {raw:#}");
        if !moved {
            let new = e.js.consumer_info_opt(other, "worker").await;
            assert!(
                matches!(new, Ok(None) | Err(cutover_nats::Error::StreamNotFound(_))),
                "denied {denied}: a new durable exists beside the old one"
            );
        }
        eprintln!(
            "denied {denied}: exit {}, {}",
            out.code,
            out.stderr.lines().last().unwrap_or("")
        );
    }
}

/// An old journal whose streams moved on by hand since (B deleted, A sealed
/// and its durable gone) rolls back: it removes what the migration left (its
/// route) and touches nothing else, instead of failing forever.
#[tokio::test(flavor = "multi_thread")]
async fn rollback_of_an_old_journal_after_the_streams_moved_on() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 5).await;
    let args = run_orders(&[], &["--lease-ttl", "1s"]);
    let out = crate::run::run_cli(&e, &args, Some("move_consumers"));
    assert_eq!(out.code, 86, "{out:?}");
    // The operator gave up on it and moved A on by hand.
    e.js.stream_delete("ORDERS_V2").await.unwrap();
    e.js.consumer_delete("ORDERS", "worker").await.unwrap();
    e.set_stream("ORDERS", "sealed", json!(true)).await;
    let out = crate::run::retry_cli(
        &e,
        &["rollback", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"],
        &["is held by runner"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.phase, Phase::RolledBack);
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert!(a.config.sealed, "A left as it was");
    let st = e.cli(&["--json", "status"]).json();
    assert_eq!(st["migrations"][0]["phase"], "rolled_back", "{st:#}");
}

/// The most common reason to migrate: a work queue becomes a limits stream
/// (a new name, `--to-config {"retention":"limits"}`), live, with workers on
/// the queue. Sourcing from a work queue is reliable from 2.14 (ADR-60).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_work_queue_moves_to_a_limits_stream_live() {
    let e = env().await;
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"], "retention": "workqueue"})).await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000})).await;
    let load = live_load(&e, 500, 200).await;
    let cfg = to_config(&e, "limits", json!({"retention": "limits"}));
    let out = e.cli_async(&run_orders(&[], &["--to-config", &cfg])).await;
    assert_eq!(out.code, 0, "{out:?}");
    exact_after(load, 200).await;
    let (_, b) = e.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.config.retention.as_str(), "limits");
}

/// A wait for sourcing is bounded by progress: a B that stops sourcing (here a
/// message larger than B's max_msg_size, set behind the plan's back) fails the
/// run after the stall timeout, with the consumer untouched, instead of waiting
/// forever, and says why (issue 24: the server reports no source error).
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_source_is_reported_not_waited_for() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 3).await;
    let mut h = async_nats::HeaderMap::new();
    h.insert("Nats-Msg-Id", "big");
    e.ctx
        .publish_with_headers("orders.eu", h, vec![b'x'; 2048].into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    plan.b_config["max_msg_size"] = json!(512);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let opts =
        RunOptions { stall_timeout: std::time::Duration::from_secs(1), ..Default::default() };
    let err = engine::run(&e.js, plan, &opts, &Collect::default(), rx).await.unwrap_err();
    let text = err.to_string();
    // The cause is named: the message, and the limit B needs for it.
    assert!(text.contains("stopped sourcing ORDERS at message 4"), "{text}");
    assert!(text.contains("max_msg_size to at least"), "{text}");
    assert!(text.contains("every consumer is as it was"), "{text}");
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused);
}

/// A B that receives less than A stores stops the run while it catches up,
/// before any commit, saying so (cutover_core::catchup). Forced here: a
/// message over B's max_msg_size (set behind the plan's back) blocks B's
/// source while a publisher goes on storing into A, so B's lag grows in
/// every read; the stall timeout is set far beyond the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_b_falling_behind_stops_the_run_before_the_commit() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 3).await;
    e.ctx.publish("orders.eu", vec![b'x'; 2048].into()).await.unwrap().await.unwrap();
    let client = e.js.client.clone();
    let publisher = tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(2));
        loop {
            tick.tick().await;
            client.publish("orders.us", "m".into()).await.unwrap();
        }
    });
    let mut plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let ingest = plan.a_ingest.expect("plan samples A's ingest");
    assert!(ingest.over_ms > 0 && ingest.per_s > 0.0, "A was storing while sampled: {ingest:?}");
    plan.b_config["max_msg_size"] = json!(512);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let opts = RunOptions {
        catch_up_window: std::time::Duration::from_secs(1),
        stall_timeout: std::time::Duration::from_secs(120),
        ..Default::default()
    };
    let err = engine::run(&e.js, plan, &opts, &Collect::default(), rx).await.unwrap_err();
    publisher.abort();
    let text = err.to_string();
    assert!(text.contains("ORDERS_V2 is not catching up with ORDERS"), "{text}");
    assert!(text.contains("nothing was committed"), "{text}");
    assert!(text.contains("every consumer is as it was"), "{text}");
    assert_eq!(err.kind(), cutover_nats::ErrorKind::State);
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()]);
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused);
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.phase, cutover_core::journal::Phase::BReady, "stopped while catching up");
}

/// Same bound for a message nak'd with a delay (a poison message retried with
/// backoff): it stays ack-pending for 6 s while paused, but no single pause
/// lasts longer than max_pause, and the move stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nak_with_backoff_does_not_hold_the_consumer_paused() {
    use async_nats::jetstream::AckKind;
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let load = live_load(&e, 300, 100).await;
    let m = crate::run::take_one_and_die(&e).await;
    m.ack_with(AckKind::Nak(Some(std::time::Duration::from_secs(6)))).await.unwrap();
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let opts = RunOptions { max_pause: std::time::Duration::from_secs(1), ..Default::default() };
    let j = engine::run(&e.js, plan, &opts, &Collect::default(), rx).await.unwrap();
    let c = &j.consumers[0];
    let longest = c.longest_pause_ms.expect("longest pause recorded");
    assert!(longest < 4_000, "longest pause {longest} ms: {c:?}");
    exact_after(load, 100).await;
}

/// verify does not call a move exact when A sources another stream (what X
/// received after A was sealed reached neither stream): here A started
/// sourcing X after the plan was made, behind its back.
#[tokio::test(flavor = "multi_thread")]
async fn verify_refuses_to_prove_a_move_whose_old_stream_sources_another() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 3).await;
    e.stream(json!({"name": "X", "subjects": ["x.>"]})).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    e.set_stream("ORDERS", "sources", json!([{"name": "X"}])).await;
    let (_tx, rx) = tokio::sync::watch::channel(false);
    engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    let out = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("stream ORDERS sources X"), "{out:?}");
}

/// Strategy mirror (issue 10, first part): B mirrors A and is promoted at the
/// commit point. Live, with load: none lost, none twice; every message keeps
/// its sequence, so the new durable starts at F + 1 with no translation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strategy_mirror_moves_live_and_keeps_sequences() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let load = live_load(&e, 500, 200).await;
    let out = e.cli_async(&run_orders(&[], &["--strategy", "mirror"])).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    let c = &j.consumers[0];
    assert_eq!(c.b_start, c.checkpoint.map(|f| f + 1), "no translation: {c:?}");
    assert_eq!(c.translate_gets, Some(0));
    let (_, b) = e.js.stream_info("ORDERS_V2").await.unwrap();
    assert!(b.config.mirror.is_none(), "B is promoted");
    assert_eq!(b.config.subjects, vec!["orders.>".to_string()]);
    exact_after(load, 200).await;
    // The same message at the same sequence in both streams.
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    for seq in [1, a.state.last_seq / 2, a.state.last_seq] {
        use cutover_nats::api::{Lookup, Via};
        let ma = e.js.get_msg("ORDERS", seq, Lookup::Exact, Via::Leader).await.unwrap().unwrap();
        let mb = e.js.get_msg("ORDERS_V2", seq, Lookup::Exact, Via::Leader).await.unwrap().unwrap();
        assert_eq!(ma.header("Nats-Msg-Id"), mb.header("Nats-Msg-Id"), "seq {seq}");
    }
    // verify proves it by sequence (a mirror adds no origin header) ...
    let out = e.cli(&["--json", "verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.json()["summary"]["checked"].as_u64().unwrap() > 0);
    // ... and a copy missing from B is lost.
    e.js.api("delete", "STREAM.MSG.DELETE.ORDERS_V2", &json!({ "seq": 7, "no_erase": true }))
        .await
        .unwrap();
    let out = e.cli(&["--json", "verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(out.json()["summary"]["lost"], 1);
}

/// Dedup across the promotion: a publisher's retry of a message A stored
/// before the commit (its ack lost) is stored once in the promoted B, because
/// the mirror recorded the msg-ids it stored (B's window is explicit).
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_across_the_promotion_lands_once() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "m", 5).await;
    let out = e.cli(&run_orders(&[], &["--strategy", "mirror"]));
    assert_eq!(out.code, 0, "{out:?}");
    let mut h = async_nats::HeaderMap::new();
    h.insert("Nats-Msg-Id", "m-4");
    let ack = e.ctx.publish_with_headers("orders.eu", h, "4".into()).await.unwrap().await.unwrap();
    assert_eq!(ack.stream, "ORDERS_V2");
    assert!(ack.duplicate, "the retry meets the mirrored id: {ack:?}");
    let (_, b) = e.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.state.messages, 5);
}

/// ORDERS's durable `worker` through an in-place change of one setting, in
/// the library; both hops' journals.
async fn in_place_worker(
    e: &Env,
    key: &str,
    value: serde_json::Value,
) -> (cutover_core::journal::Journal, cutover_core::journal::Journal) {
    use cutover_nats::engine::{run_in_place, InPlaceRequest};
    let req = InPlaceRequest {
        stream: "ORDERS".into(),
        via: None,
        consumers: vec!["worker".into()],
        all_consumers: false,
        settings: Some([(key.to_string(), value)].into_iter().collect()),
        retry_horizon: None,
        repoint_publishers: false,
        external: None,
    };
    let (_tx, rx) = tokio::sync::watch::channel(false);
    run_in_place(&e.js, &req, &RunOptions::default(), &Collect::default(), rx).await.unwrap()
}

/// In place (issue 10, part 2): ORDERS moves from file to memory storage and
/// back under its own name, live, with publishers and route-following workers: two mirror
/// hops through ORDERS_CUTOVER. Same name, same sequences, the same durable at
/// its position; none lost, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_place_storage_change_keeps_name_sequences_and_durables() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let load = live_load(&e, 500, 200).await;
    let (_, before) = e.js.stream_info("ORDERS").await.unwrap();
    let (j1, j2) = in_place_worker(&e, "storage", json!("memory")).await;
    assert_eq!((j1.phase, j2.phase), (Phase::Done, Phase::Done));
    let (_, after) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(after.config.storage.as_str(), "memory");
    assert_eq!(after.state.first_seq, before.state.first_seq, "sequences kept");
    assert!(after.config.mirror.is_none());
    assert_eq!(after.config.subjects, vec!["orders.>".to_string()]);
    assert!(e.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none(), "via deleted");
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert_eq!(c.config.opt_start_seq, j2.consumers[0].b_start);
    // And back to file, live: a second change of the same stream (the first
    // one's finished records are replaced, not taken for this one).
    let (_, j2) = in_place_worker(&e, "storage", json!("file")).await;
    let (_, after) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(after.config.storage.as_str(), "file");
    assert_eq!(after.state.first_seq, before.state.first_seq, "sequences kept");
    assert!(j2.consumers[0].b_start > c.config.opt_start_seq, "the second change moved on");
    exact_after(load, 200).await;
}

/// In place, the most asked-for change: a work queue becomes a limits stream
/// under its own name, live (the temporary stream already has the new
/// retention, so both hops source from a stream 2.14+ mirrors reliably).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_place_work_queue_to_limits() {
    let e = env().await;
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"], "retention": "workqueue"})).await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000})).await;
    let load = live_load(&e, 500, 200).await;
    in_place_worker(&e, "retention", json!("limits")).await;
    let (_, after) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(after.config.retention.as_str(), "limits");
    exact_after(load, 200).await;
}

/// In place, limits to a work queue, live: the temporary stream is a work
/// queue mirroring ORDERS; each durable there delivers all after its copies
/// below the checkpoint were purged, so it starts right after F; hop 2 mirrors
/// that work queue (2.14+). None lost, none twice; processed messages leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_place_limits_to_work_queue() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let load = live_load(&e, 500, 200).await;
    let (_, j2) = in_place_worker(&e, "retention", json!("workqueue")).await;
    let (_, after) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(after.config.retention.as_str(), "workqueue");
    let (raw, _) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert_eq!(raw["config"]["deliver_policy"], "all");
    // Nothing below the checkpoint is left to deliver again.
    let f = j2.consumers[0].checkpoint.unwrap();
    assert!(after.state.first_seq > f || after.state.messages == 0, "{after:?} F={f}");
    exact_after(load, 200).await;
}

/// A mirror move to a work queue, live, from the CLI: exact by the
/// workload's own record; `verify` says why it cannot judge a work queue
/// (a processed message is gone from it) instead of reporting losses.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mirror_move_to_a_work_queue_is_exact() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let load = live_load(&e, 500, 200).await;
    let cfg = to_config(&e, "wq", json!({"retention": "workqueue"}));
    let args = ["run", "--strategy", "mirror", "--from", "ORDERS", "--to", "ORDERS_WQ"];
    let out = e
        .cli_async(&[&args[..], &["--to-config", &cfg, "--consumer", "worker", "--yes"]].concat())
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    exact_after(load, 200).await;
    let out = e.cli(&["verify", "--migration", "ORDERS.ORDERS_WQ"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("workqueue retention"), "{out:?}");
}

/// `run --in-place` from the command line; bad `--set` input is refused
/// before anything changes.
#[tokio::test(flavor = "multi_thread")]
async fn run_in_place_from_the_cli() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 20).await;
    let before = e.snapshot().await;
    for (args, why) in [
        (vec!["--set", "storage"], "is not KEY=VALUE"),
        (vec![], "needs the new settings"),
        (vec!["--set", "colour=red"], "\"colour\", which is not a stream setting"),
        (vec!["--set", "subjects=orders.>"], "does not have the server's type"),
        (vec!["--set", "max_age=1h"], "nanoseconds, 0 for none"),
    ] {
        let mut full = vec!["run", "--in-place", "ORDERS", "--consumer", "worker", "--yes"];
        full.extend(args);
        let out = e.cli(&full);
        assert_eq!(out.code, 2, "{full:?}: {out:?}");
        assert!(out.stderr.contains(why), "{full:?}: {out:?}");
    }
    assert_eq!(e.snapshot().await, before, "bad input changed the server");
    // Settings the server updates in place need no migration: `plan` shows
    // the update and changes nothing, `run --yes` applies it as an update.
    let plan = ["plan", "--in-place", "ORDERS", "--set", "max_age=3600000000000"];
    let out = e.cli(&plan);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("no migration needed"), "{out:?}");
    assert!(out.stdout.contains("\"max_age\": 3600000000000"), "{out:?}");
    assert_eq!(e.snapshot().await, before, "plan of an update changed the server");
    let update = ["run", "--in-place", "ORDERS", "--yes", "--set", "max_age=3600000000000"];
    let out = e.cli(&update);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("updated these settings"), "{out:?}");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.max_age, 3_600_000_000_000, "run --yes applied the update");
    assert_eq!(e.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().map(|_| ()), None);
    // Every durable moves without naming one.
    let out = e.cli(&[
        "run",
        "--in-place",
        "ORDERS",
        "--set",
        "storage=memory",
        "--set",
        "max_msgs=1000000",
        "--yes",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let (_, s) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(s.config.storage.as_str(), "memory");
    assert_eq!(s.config.max_msgs, 1_000_000);
    assert_eq!((s.state.first_seq, s.state.last_seq, s.state.messages), (1, 20, 20));
}

/// The journal's bucket stops answering while a drain settles (a newcomer
/// saw it on a cluster with the bucket's leader stopped): the write of F is
/// applied but its answer lost, and every journal write after it fails
/// (test hook). The run stops and gives the old consumer back all the same
/// (it used to leave it paused for good while saying "every consumer is as
/// it was"). The journal keeps that F, stale once the consumer delivered
/// more: `run --resume` does not trust it but drains again, and the move is
/// exact. The same when the lost write is the intent to create the new
/// durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_journal_that_stops_answering_in_a_drain_leaves_the_consumer_working() {
    use cutover_core::journal::ConsumerPhase;
    journal_lost_at("\"phase\":\"settled\"", ConsumerPhase::Settled).await;
    journal_lost_at("\"phase\":\"creating\"", ConsumerPhase::Creating).await;
}

/// A drain whose journal write containing `needle` is lost, then every
/// later one refused: the consumer given back, the stale `phase` not
/// trusted on resume, the move exact.
async fn journal_lost_at(needle: &str, phase: cutover_core::journal::ConsumerPhase) {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let load = live_load(&e, 300, 100).await;
    lost_journal_then_resumed(&e, &["--lease-ttl", "1s"], needle, phase).await;
    exact_after(load, 200).await;
}

/// `run` (with `tail`) under a journal that applies the write containing
/// `needle`, loses its answer and refuses every later one: it fails saying
/// every consumer is as it was, the old consumer is not paused, and the
/// journal keeps that consumer in `phase` with an F. Once the consumer
/// delivered past that F, `run --resume` does not trust it but takes F again.
pub(crate) async fn lost_journal_then_resumed(
    e: &Env,
    tail: &[&str],
    needle: &str,
    phase: cutover_core::journal::ConsumerPhase,
) {
    use cutover_nats::test_hooks::LOSE_WRITES_VAR;
    let o = run_with_fault(e, tail, (LOSE_WRITES_VAR, needle));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write the journal"), "{stderr}");
    assert!(stderr.contains("every consumer is as it was"), "{stderr}");
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "the old consumer was given back: {c:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    let c0 = &j.consumers[0];
    assert_eq!(c0.phase, phase, "the lost write: {c0:?}");
    let stale = c0.checkpoint.expect("F journaled");
    wait_until(
        "the old consumer delivers past the stale F",
        std::time::Duration::from_secs(20),
        || async {
            e.js.consumer_info("ORDERS", "worker").await.unwrap().1.delivered.stream_seq
                > stale + 50
        },
    )
    .await;
    let resume = ["run", "--resume", "ORDERS.ORDERS_V2"];
    let out = crate::run::retry_cli(e, &resume, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    let f = j.consumers[0].checkpoint.unwrap();
    assert!(f > stale + 50, "taken again: F {f}, the stale one {stale}");
}

/// A journal write applied but whose answer is lost (test hook: the write
/// of F) is sent again, and the runner recognises its own write: the run
/// goes on and the move is exact (a newcomer's run failed instead when a
/// server of the cluster was killed for a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_journal_write_whose_answer_is_lost_is_sent_again() {
    use cutover_nats::test_hooks::LOSE_ONE_VAR;
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let load = live_load(&e, 300, 100).await;
    let o = run_with_fault(&e, &[], (LOSE_ONE_VAR, "\"phase\":\"settled\""));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    exact_after(load, 200).await;
}

/// `run` of ORDERS to ORDERS_V2 (with `tail`) under a journal write fault:
/// `(variable, needle)` (cutover_nats::test_hooks).
pub(crate) fn run_with_fault(
    e: &Env,
    tail: &[&str],
    (var, needle): (&str, &str),
) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .arg("--server")
        .arg(e.server.url())
        .args(run_orders(&[], tail))
        .env(var, needle)
        .output()
        .unwrap()
}

/// Issue 23 item 5: a mirror's copy reads A through a durable of ours
/// (2.14+, ack policy flow_control) whose max_ack_pending bounds what is in
/// flight, so that publishes to A do not queue behind the copy (the
/// server's own mirror consumer lets 32 MiB through A's one outgoing queue:
/// stalls of 405–586 ms while a million messages were copied). The durable
/// is never taken for an application's, goes with a rollback, and is gone
/// once the change is done; `--copy-window 0` leaves the copy to the
/// server's own consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_reads_its_stream_through_a_paced_durable_gone_with_its_mirror() {
    use crate::run::run_cli;
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 50).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("create_b"));
    assert_eq!(out.code, 86, "{out:?}");
    let (raw, _) = e.js.stream_info("ORDERS_CUTOVER").await.unwrap();
    let name = "CUTOVER_MIRROR_ORDERS_CUTOVER";
    assert_eq!(raw["config"]["mirror"]["consumer"]["name"], name, "{:#}", raw["config"]);
    let c = e.js.consumer_info_raw("ORDERS", name).await.unwrap();
    assert_eq!(c["config"]["ack_policy"], "flow_control", "{c:#}");
    assert_eq!(c["config"]["max_ack_pending"], 1000, "{c:#}");
    wait_until("the copy holds A", std::time::Duration::from_secs(10), || async {
        e.js.stream_info("ORDERS_CUTOVER").await.unwrap().1.state.messages == 50
    })
    .await;
    // Not an application's durable: `plan` of the same change names only
    // the worker.
    let plan = e.cli(&["--json", "plan", "--in-place", "ORDERS", "--set", "storage=memory"]);
    let (hop1, consumer) = (&plan.json()["hop1"], format!("consumer {name}"));
    let names: Vec<_> = hop1["consumers"].as_array().unwrap().iter().map(|c| &c["name"]).collect();
    assert_eq!(names, ["worker"], "{plan:?}");
    assert!(!plan.stdout.contains(&consumer), "{plan:?}");
    let out = e.cli(&["rollback", "ORDERS.ORDERS_CUTOVER"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(e.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none());
    assert!(!e.js.consumer_names("ORDERS").await.unwrap().contains(&name.to_string()));
    // The whole change: no durable of ours left anywhere.
    let out = e.cli(&args);
    assert_eq!(out.code, 0, "{out:?}");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!((a.config.storage.as_str(), a.state.messages), ("memory", 50));
    assert_eq!(e.js.consumer_names("ORDERS").await.unwrap(), vec!["worker".to_string()]);
    // --copy-window 0: the server's own mirror consumer.
    let zero =
        ["run", "--in-place", "ORDERS", "--set", "storage=file", "--copy-window", "0", "--yes"];
    let out = run_cli(&e, &zero, Some("create_b"));
    assert_eq!(out.code, 86, "{out:?}");
    let (raw, _) = e.js.stream_info("ORDERS_CUTOVER").await.unwrap();
    assert!(raw["config"]["mirror"]["consumer"].is_null(), "{:#}", raw["config"]);
    assert_eq!(e.js.consumer_names("ORDERS").await.unwrap(), vec!["worker".to_string()]);
}
