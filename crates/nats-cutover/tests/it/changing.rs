//! Issue 23: in place and mirror where the world changes under a run:
//! durables the server may delete, a B that stopped sourcing, settings the
//! server updates by itself. Every test here is a live case against a real
//! server.

use crate::common::*;
use crate::pyapps::{lines, processed, App};
use crate::run::run_cli;
use serde_json::json;
use std::time::Duration;

/// Case 4: a durable with `inactive_threshold`. Applications bound to it by
/// name cannot reach it on the temporary stream, so nobody pulls it there:
/// with its threshold kept, the server deleted it (with its position)
/// during hop 2's copy and every resume failed. It lives on the temporary
/// stream without one (the value kept in its metadata) and gets it back on
/// the stream's own name, positioned where it was.
#[tokio::test(flavor = "multi_thread")]
async fn an_inactive_threshold_durable_keeps_its_position_through_an_in_place_change() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let idle = json!({"durable_name": "idle", "ack_policy": "explicit", "inactive_threshold": 2_000_000_000i64, "metadata": {"team": "billing"}});
    e.consumer("ORDERS", idle).await;
    e.publish("orders.eu", "a", 40).await;
    // The runner dies right after hop 1 (its last step, retire, journaled).
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("retire"));
    assert_eq!(out.code, 86, "{out:?}");
    let (raw, c) = e.js.consumer_info("ORDERS_CUTOVER", "idle").await.unwrap();
    assert_eq!(c.config.inactive_threshold, 0, "no threshold on the temporary stream: {raw}");
    assert_eq!(raw["config"]["metadata"]["nats-cutover.inactive_threshold"], json!("2000000000"));
    let out = run_cli(&e, &args, None);
    assert_eq!(out.code, 0, "{out:?}");
    let (raw, c) = e.js.consumer_info("ORDERS", "idle").await.unwrap();
    assert_eq!(c.config.inactive_threshold, 2_000_000_000, "threshold restored: {raw}");
    assert_eq!(raw["config"]["metadata"]["team"], json!("billing"));
    assert!(raw["config"]["metadata"].get("nats-cutover.inactive_threshold").is_none(), "{raw}");
    // Nothing was delivered: it starts at the first message, as before.
    assert_eq!(c.num_pending, 40, "{raw}");
}

/// Issue 24, case 4: a push consumer's subscriber died holding a message on
/// an idle stream. The drain's pause withholds its redelivery; a resume that
/// came after its ack_wait ran out used to deliver nothing until a new
/// message arrived (the run failed after its settle timeout saying "check
/// its workers", a newcomer's came 121 s late). The drain's pause is cut
/// often here (`--max-pause 200ms`), so the ack_wait runs out in a pause or
/// between two; either way the live nats-py worker gets the message and the
/// move finishes well inside the settle timeout, the message processed once.
#[tokio::test(flavor = "multi_thread")]
async fn a_push_consumer_drained_on_an_idle_stream_gets_a_dead_subscribers_message_back() {
    use futures::StreamExt;
    let e = env().await;
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    let push = json!({"durable_name": "push", "ack_policy": "explicit", "ack_wait": 2_000_000_000i64, "deliver_subject": "deliver.push", "deliver_group": "g", "max_ack_pending": 100});
    e.consumer("ORDERS", push).await;
    let client = async_nats::connect(e.server.url()).await.unwrap();
    let mut dead = client.queue_subscribe("deliver.push", "g".into()).await.unwrap();
    e.publish("orders.eu", "a", 1).await;
    dead.next().await.expect("the dead subscriber's message");
    drop(dead);
    client.flush().await.unwrap();
    let dir = TempDir::new("push-idle");
    let out = dir.0.join("worker.jsonl");
    let args = ["--server", e.server.url(), "--stream", "ORDERS", "--consumer", "push"];
    let worker = App::start(
        "worker.py",
        &[&args[..], &["--mode", "push", "--out", out.to_str().unwrap()]].concat(),
    );
    let run = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "push"];
    let opts = ["--max-pause", "200ms", "--settle-timeout", "30s", "--yes"];
    let ran = e.cli(&[&run[..], &opts[..]].concat());
    assert_eq!(ran.code, 0, "{ran:?}");
    worker.stop();
    let handled = lines(&out);
    assert_eq!(handled.len(), 1, "processed once: {handled:?}");
    assert_eq!((handled[0]["seq"].as_u64(), handled[0]["acked"].as_bool()), (Some(1), Some(true)));
}

/// Issue 24, re-check at the moment of effect, the consumer's state: a
/// durable updated on A after the plan (here between catch-up and the
/// consumers' move, as an operator's `nats consumer edit` would: its
/// ack_wait and max_ack_pending) gets a new durable on B made from its
/// configuration as it is then, named by the run; it used to be made from
/// the plan's, undoing the update without a word.
#[tokio::test(flavor = "multi_thread")]
async fn a_durable_updated_after_the_plan_moves_with_its_configuration_as_it_is() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let run = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker", "--yes"];
    let out = run_cli(&e, &run, Some("catch_up"));
    assert_eq!(out.code, 86, "{out:?}");
    let (raw, _) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    let mut cfg = raw["config"].clone();
    cfg["max_ack_pending"] = json!(77);
    cfg["ack_wait"] = json!(45_000_000_000i64);
    let update = cutover_nats::api::Action::CreateOrUpdate;
    e.js.consumer_create("ORDERS", "worker", &cfg, update).await.unwrap();
    let resume = ["--json", "run", "--resume", "ORDERS.ORDERS_V2", "--yes"];
    let out = crate::run::retry_cli(&e, &resume, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains("was changed on the old stream after the plan (ack_wait, max_ack_pending)"),
        "{out:?}"
    );
    let (_, b) = e.js.consumer_info("ORDERS_V2", "worker").await.unwrap();
    assert_eq!((b.config.max_ack_pending, b.config.ack_wait), (77, 45_000_000_000), "{b:?}");
}

/// Issue 24, re-check at the moment of effect, the consumer's pause: a
/// durable paused on A after the plan (between catch-up and the move, as
/// `nats consumer pause` would) keeps its pause on B, until the same time,
/// named by the run. The drain's own pauses took its place and the new
/// durable delivered at once: the operator's pause was gone without a word.
#[tokio::test(flavor = "multi_thread")]
async fn a_durable_paused_after_the_plan_stays_paused_on_the_new_stream() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let run = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker", "--yes"];
    let out = run_cli(&e, &run, Some("catch_up"));
    assert_eq!(out.code, 86, "{out:?}");
    let until = "2090-06-01T00:00:00Z";
    e.js.consumer_pause("ORDERS", "worker", Some(until)).await.unwrap();
    let resume = ["--json", "run", "--resume", "ORDERS.ORDERS_V2", "--yes"];
    let out = crate::run::retry_cli(&e, &resume, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("was paused on the old stream after the plan (until 2090-06-01"),
        "{out:?}"
    );
    let (raw, b) = e.js.consumer_info("ORDERS_V2", "worker").await.unwrap();
    assert!(b.paused, "the new durable is paused: {raw}");
    assert!(raw["config"]["pause_until"].as_str().unwrap().starts_with("2090-06-01"), "{raw}");
    // Nothing was delivered meanwhile: all ten wait for the pause's end.
    assert_eq!((b.num_pending, b.delivered.stream_seq), (10, 0), "{raw}");
}

/// Issue 24, case 4's messages: a drain that times out names what the
/// consumer's state shows instead of "check its workers": here a worker
/// fetched a message and went away without acking it (no pull request
/// waits), and its ack_wait (60 s) outlasts the settle timeout. The
/// consumer is resumed, nothing moved, and the message still comes to a
/// worker that fetches.
#[tokio::test(flavor = "multi_thread")]
async fn a_drain_that_times_out_names_the_held_message_and_that_nobody_fetches() {
    let e = env().await;
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"]})).await;
    let pull =
        json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 60_000_000_000i64});
    e.consumer("ORDERS", pull).await;
    e.publish("orders.eu", "a", 3).await;
    let c = e.pull_consumer("ORDERS", "worker").await;
    let mut batch = c.fetch().max_messages(1).messages().await.unwrap();
    use futures::StreamExt;
    let held = batch.next().await.unwrap().unwrap();
    assert_eq!(held.info().unwrap().stream_sequence, 1);
    drop(batch);
    let run = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker"];
    let opts = ["--max-pause", "200ms", "--settle-timeout", "2s", "--yes"];
    let out = e.cli(&[&run[..], &opts[..]].concat());
    assert_ne!(out.code, 0, "{out:?}");
    // The seconds it waited are rounded: about the 2 s settle timeout.
    assert!(out.stderr.contains("did not settle in "), "{out:?}");
    let what = " s: 1 message(s) still unacknowledged (ack floor 0, delivered 1;";
    assert!(out.stderr.contains(what), "{out:?}");
    assert!(out.stderr.contains("no worker fetches from it (no pull request waits)"), "{out:?}");
    assert!(!out.stderr.contains("check its workers"), "{out:?}");
    let (_, ci) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!ci.paused, "given back running");
    assert!(
        e.js.consumer_info_opt("ORDERS_V2", "worker").await.unwrap().is_none(),
        "nothing moved"
    );
    // The held message is acked now: the consumer settles and moves.
    held.double_ack().await.unwrap();
    let mut rest = c.fetch().max_messages(2).messages().await.unwrap();
    for _ in 0..2 {
        rest.next().await.unwrap().unwrap().double_ack().await.unwrap();
    }
    let out = e.cli(&["run", "--resume", "ORDERS.ORDERS_V2", "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");
}

/// Issue 24, case 1: a durable a nats-py application creates on A during a
/// move (here once B caught up, before the consumers move), with deliver
/// all, and consumes while publishers write. It is planned against the same
/// B and moved like the others, at its position, with a route its
/// application follows: it used to stay on the sealed A, its application
/// received nothing published after the commit, and `verify` said the
/// migration held. Every acknowledged publish is processed once.
#[tokio::test(flavor = "multi_thread")]
async fn a_durable_created_during_the_move_is_moved_too() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let dir = TempDir::new("late-durable");
    let (published, handled) = (dir.0.join("pub.jsonl"), dir.0.join("late.jsonl"));
    let mut publisher = App::publisher(e.server.url(), 2000, 200, &published);
    wait_until("publishes", Duration::from_secs(20), || async { lines(&published).len() >= 100 })
        .await;
    let run = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker", "--yes"];
    let out = run_cli(&e, &run, Some("catch_up"));
    assert_eq!(out.code, 86, "{out:?}");
    let late = late_worker(&e, &handled, &["--follow-route"]);
    wait_until("it processes", Duration::from_secs(20), || async {
        processed(std::slice::from_ref(&handled)).len() >= 50
    })
    .await;
    let resume = ["run", "--resume", "ORDERS.ORDERS_V2", "--yes"];
    let out = crate::run::retry_cli(&e, &resume, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("appeared on the old stream"), "{out:?}");
    assert!(publisher.0.wait().unwrap().success());
    let acked = acked_ids(&published);
    assert_eq!(acked.len(), 2000, "every publish acked");
    wait_until("every message processed", Duration::from_secs(30), || async {
        processed(std::slice::from_ref(&handled)).len() >= acked.len()
    })
    .await;
    late.stop();
    let p = processed(std::slice::from_ref(&handled));
    let twice: Vec<_> = p.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    assert!(acked.iter().all(|id| p.contains_key(id)), "every acked publish processed");
    let last = lines(&handled).last().cloned().unwrap();
    assert_eq!(last["stream"], "ORDERS_V2", "it follows its durable: {last}");
    assert!(e.js.consumer_info_opt("ORDERS", "late").await.unwrap().is_none(), "retired");
    let out = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 0, "{out:?}");
}

/// The msg-ids a publisher.py had acknowledged.
fn acked_ids(published: &std::path::Path) -> Vec<String> {
    lines(published)
        .iter()
        .filter(|l| l.get("failed").is_none())
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect()
}

/// A nats-py application that creates its own pull durable `late` on ORDERS
/// (deliver all) and processes it.
fn late_worker(e: &Env, out: &std::path::Path, extra: &[&str]) -> App {
    let args = ["--server", e.server.url(), "--stream", "ORDERS", "--consumer", "late"];
    let own = ["--mode", "pull", "--create", "--out", out.to_str().unwrap()];
    App::start("worker.py", &[&args[..], &own[..], extra].concat())
}

/// Issue 24, case 1, after the commit: a durable a nats-py application
/// creates on the sealed A once the publishers moved cannot be moved (A
/// takes nothing new: its position means nothing to B's new messages), so
/// it is named: the run's warning, and `verify` does not hold while it is
/// there (it used to say the migration held).
#[tokio::test(flavor = "multi_thread")]
async fn a_durable_created_after_the_commit_is_named_and_verify_does_not_hold() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let run = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "worker", "--yes"];
    let out = run_cli(&e, &run, Some("move_publishers"));
    assert_eq!(out.code, 86, "{out:?}");
    let dir = TempDir::new("late-after");
    let handled = dir.0.join("late.jsonl");
    let late = late_worker(&e, &handled, &[]);
    wait_until("it processes A's 10", Duration::from_secs(20), || async {
        processed(std::slice::from_ref(&handled)).len() >= 10
    })
    .await;
    let resume = ["run", "--resume", "ORDERS.ORDERS_V2", "--yes"];
    let out = crate::run::retry_cli(&e, &resume, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("late") && out.stdout.contains("after the commit"), "{out:?}");
    let out = e.cli(&["--json", "verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(out.json()["stranded"], json!(["late"]), "{out:?}");
    // Once its application moved on and it is deleted, the migration holds.
    late.stop();
    e.js.consumer_delete("ORDERS", "late").await.unwrap();
    let out = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 0, "{out:?}");
}

/// In place, a durable a nats-py application creates on the old stream
/// after hop 1's commit: the stream is to be deleted (that frees its name),
/// which would delete the durable with its position (its application then
/// re-created it and processed everything again): the hop stops before the
/// delete, keeps the stream and names the durable; once it is deleted the
/// same command finishes.
#[tokio::test(flavor = "multi_thread")]
async fn in_place_keeps_the_old_stream_while_a_durable_created_after_the_commit_is_on_it() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("move_publishers"));
    assert_eq!(out.code, 86, "{out:?}");
    let dir = TempDir::new("late-in-place");
    let handled = dir.0.join("late.jsonl");
    let late = late_worker(&e, &handled, &[]);
    let out = crate::run::retry_cli(&e, &args, &["is held by runner"]).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("late") && out.stderr.contains("is kept"), "{out:?}");
    assert!(e.js.consumer_info_opt("ORDERS", "late").await.unwrap().is_some(), "kept");
    wait_until("it processes the 10", Duration::from_secs(20), || async {
        processed(std::slice::from_ref(&handled)).len() >= 10
    })
    .await;
    late.stop();
    e.js.consumer_delete("ORDERS", "late").await.unwrap();
    let out = crate::run::retry_cli(&e, &args, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, s) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!((s.config.storage.as_str(), s.state.last_seq), ("memory", 10));
    let p = processed(&[handled]);
    assert!(p.len() == 10 && p.values().all(|n| *n == 1), "each once: {p:?}");
}

/// Issue 24, case 2, at run time: B's max_msg_size lowered after the plan
/// (by someone else) below a message of A as B stores it, with its
/// Nats-Stream-Source header. Sourcing stalls for good on it (the server
/// reports no error and lag 0); the run used to say "not catching up ... run
/// again when ingest is lower". It names the message and the limit it needs.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_too_large_for_b_with_its_source_header_is_named() {
    use cutover_nats::engine::{self, events::Collect, RunOptions};
    let e = env().await;
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64, "max_msg_size": 2048})).await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit"})).await;
    e.publish("orders.eu", "a", 3).await;
    let cfg = dir_config(&e, json!({"max_msg_size": 4096}));
    let run = [
        "run",
        "--from",
        "ORDERS",
        "--to",
        "ORDERS_V2",
        "--consumer",
        "worker",
        "--to-config",
        &cfg.1,
        "--yes",
    ];
    let out = run_cli(&e, &run, Some("create_b"));
    assert_eq!(out.code, 86, "{out:?}");
    e.set_stream("ORDERS_V2", "max_msg_size", json!(2048)).await;
    // A nats-py publisher's 2,000-byte message: it fits A, not B with its header.
    let dir = TempDir::new("big");
    let out = dir.0.join("pub.jsonl");
    let big = ["--server", e.server.url(), "--subject", "orders.eu", "--count", "1", "--rate", "0"];
    let rest = ["--id-prefix", "big", "--size", "2000", "--out", out.to_str().unwrap()];
    assert!(App::start("publisher.py", &[&big[..], &rest[..]].concat())
        .0
        .wait()
        .unwrap()
        .success());
    assert_eq!(lines(&out)[0]["seq"], 4, "{:?}", lines(&out));
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    let opts = RunOptions {
        stall_timeout: std::time::Duration::from_secs(1),
        lease_ttl: std::time::Duration::from_secs(1),
        ..Default::default()
    };
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let err = loop {
        match engine::run(&e.js, j.plan.clone(), &opts, &Collect::default(), rx.clone()).await {
            Err(cutover_nats::Error::Leased { .. }) => continue,
            r => break r.unwrap_err().to_string(),
        }
    };
    assert!(
        err.contains("message 4")
            && err.contains("max_msg_size")
            && err.contains("2032 bytes")
            && err.contains("at least 2116"),
        "{err}"
    );
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()], "A still serves");
    drop(cfg);
}

/// `--to-config` written to a file of its own (kept while the handle lives).
fn dir_config(_e: &Env, v: serde_json::Value) -> (TempDir, String) {
    let d = TempDir::new(&format!(
        "cfg-{}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    ));
    let p = d.0.join("b.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let s = p.to_str().unwrap().to_string();
    (d, s)
}

/// Issue 24, case 3: a deny_purge stream changed from limits to a work
/// queue in place, under a nats-py publisher and pull workers bound by name.
/// Each new durable on the work-queue copy starts after the copies below it
/// are purged, which deny_purge refuses (the run failed, exit 4, after a SAFE
/// plan): the copy gets deny_purge with its subjects, after the purges. None
/// lost, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deny_purge_stream_becomes_a_work_queue_in_place() {
    let stream = json!({"name": "ORDERS", "subjects": ["orders.>"], "deny_purge": true});
    let args = ["run", "--in-place", "ORDERS", "--set", "retention=workqueue"];
    let e = crate::pyapps::nats_py_apps_on(stream, &args, "ORDERS", false, false).await;
    let (_, s) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!((s.config.retention.as_str(), s.config.deny_purge), ("workqueue", true));
}

/// Issue 24, re-check of purge permission: in place limits to work queue,
/// the copy's `deny_purge` set by someone else after catch-up (the plan
/// keeps it off until the commit): the purge before the work-queue durable
/// is refused by the run itself, naming the setting and the command, with
/// the consumer given back and nothing of it moved. The server cannot take
/// deny_purge back (10052): the rollback the message names deletes the
/// copy, and the same command then runs from the start.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_given_deny_purge_after_the_plan_is_named_before_its_purge() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let run = ["run", "--in-place", "ORDERS", "--set", "retention=workqueue", "--yes"];
    let out = run_cli(&e, &run, Some("catch_up"));
    assert_eq!(out.code, 86, "{out:?}");
    e.set_stream("ORDERS_CUTOVER", "deny_purge", json!(true)).await;
    let out = crate::run::retry_cli(&e, &run, &["is held by runner"]).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("ORDERS_CUTOVER was given deny_purge after the plan"), "{out:?}");
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "given back");
    assert!(e.js.consumer_info_opt("ORDERS_CUTOVER", "worker").await.unwrap().is_none());
    assert!(out.stderr.contains("nats-cutover rollback ORDERS.ORDERS_CUTOVER"), "{out:?}");
    let out = e.cli(&["rollback", "ORDERS.ORDERS_CUTOVER"]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = e.cli(&run);
    assert_eq!(out.code, 0, "{out:?}");
    let (_, s) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(s.config.retention.as_str(), "workqueue");
}

/// Issue 23: a server restart after catch-up clears a mirror's duplicate
/// window (jetstream.go `fixCfgMirrorWithDedupWindow` when it recovers its
/// streams, standalone too) and does not rebuild the msg-id map: a
/// newcomer's publishers, retrying lost answers with the same msg-id, had
/// 26 to 38 messages stored twice and `run` ended 0. Right before the commit
/// the run finds the window gone, sets it again and waits one retry horizon
/// (2 s here), so a publish stored in A during that wait and retried after
/// the commit meets its mirrored copy in B. A durable created during that
/// wait stops the run before the release; the next resume moves it.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_whose_window_a_restart_cleared_waits_a_retry_horizon_before_the_commit() {
    let mut e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let run = [
        "run",
        "--strategy",
        "mirror",
        "--from",
        "ORDERS",
        "--to",
        "ORDERS_V2",
        "--consumer",
        "worker",
        "--retry-horizon",
        "2s",
        "--yes",
    ];
    let out = run_cli(&e, &run, Some("move_consumers"));
    assert_eq!(out.code, 86, "{out:?}");
    e.server.restart().unwrap();
    let client = async_nats::connect(e.server.url()).await.unwrap();
    let js = cutover_nats::Js::new(client.clone(), std::time::Duration::from_secs(5));
    let ctx = async_nats::jetstream::new(client);
    wait_until("the server to answer", std::time::Duration::from_secs(20), || async {
        js.stream_info("ORDERS_V2").await.is_ok()
    })
    .await;
    assert_eq!(js.stream_info("ORDERS_V2").await.unwrap().1.config.duplicate_window, 0, "cleared");
    let dir = TempDir::new("window-restored");
    let resume = ["run", "--resume", "ORDERS.ORDERS_V2", "--yes"];
    let r = crate::chaos::Runner::spawn(e.server.url(), &resume, &dir.0, 0);
    wait_until("the window to be set again", std::time::Duration::from_secs(30), || async {
        cutover_nats::journal::load_migration(&js, "ORDERS.ORDERS_V2")
            .await
            .is_ok_and(|(_, j)| j.window_since_ms.is_some())
    })
    .await;
    // Stored in A while the commit waits; its answer "lost", retried after.
    let mut h = async_nats::HeaderMap::new();
    h.insert("Nats-Msg-Id", "w-1");
    let first =
        ctx.publish_with_headers("orders.eu", h.clone(), "w".into()).await.unwrap().await.unwrap();
    assert_eq!(first.stream, "ORDERS");
    // An application creates a durable on A while the commit waits (issue
    // 24, case 1): the last look for durables comes after the wait, so the
    // run stops before anything is released instead of leaving it on the
    // sealed A; the next resume moves it too.
    let late = json!({"durable_name": "late", "ack_policy": "explicit"});
    e.consumer("ORDERS", late).await;
    let (code, err) = r.exited().await;
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("durable(s) late appeared on ORDERS just before the commit"), "{err}");
    let (_, a) = js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()], "nothing released");
    let out = e.cli(&resume);
    assert_eq!(out.code, 0, "{out:?}");
    let (_, moved) = js.consumer_info("ORDERS_V2", "late").await.unwrap();
    assert_eq!(moved.delivered.stream_seq, 0, "at its position: {moved:?}");
    let retry = ctx.publish_with_headers("orders.eu", h, "w".into()).await.unwrap().await.unwrap();
    assert_eq!(retry.stream, "ORDERS_V2");
    assert!(retry.duplicate, "the retry meets its mirrored copy: {retry:?}");
}

/// Issue 23: the hand-over a cluster needs (strategy mirror there: B turned
/// from mirroring into sourcing A with the window; planned on one server
/// here by the test hook NATS_CUTOVER_TEST_HANDOVER), with the runner
/// killed inside it in hop 1, both ways: in a freeze (`freeze` asks for one
/// where it could be made live), where A's subjects are released and its
/// guard gives them back (publishers served again); and live, after B's
/// mirror was removed and before its source of A was added, A serving
/// throughout. The same command hands over again and finishes. Under a
/// nats-py publisher and pull workers bound by name: every acknowledged
/// publish stored once and processed once, A's sequences kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_killed_in_the_hand_over_is_resumed_exactly_frozen_or_live() {
    for (how, at) in [("freeze", "handover_released"), ("live", "handover_promoted")] {
        killed_in_the_hand_over(how, at).await;
    }
}

async fn killed_in_the_hand_over(how: &str, at: &str) {
    let e = env().await;
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 2_000_000_000i64}),
    )
    .await;
    let worker = json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000});
    e.consumer("ORDERS", worker).await;
    let dir = TempDir::new("handover-crash");
    let load =
        crate::pyapps::PyLoad::start(e.server.url(), &dir.0, "ORDERS", "worker", 2, 3000, 300);
    load.until_processed(100).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let handover = |crash: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
        cmd.args(["--server", e.server.url()]).args(args).env("NATS_CUTOVER_TEST_HANDOVER", how);
        if let Some(at) = crash {
            cmd.env("NATS_CUTOVER_TEST_CRASH_AFTER", at);
        }
        cmd.output().unwrap()
    };
    let out = handover(Some(at));
    assert_eq!(out.status.code(), Some(86), "{how}: {out:?}");
    wait_until("ORDERS holds its subjects", Duration::from_secs(30), || async {
        e.js.stream_info("ORDERS").await.unwrap().1.config.subjects == ["orders.>"]
    })
    .await;
    // Until the dead runner's lease lapses, the command says so.
    let out = loop {
        let o = handover(None);
        if o.status.code() != Some(0)
            && String::from_utf8_lossy(&o.stderr).contains("is held by runner")
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        break crate::common::Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        };
    };
    assert_eq!(out.code, 0, "{how}: {out:?}");
    assert_eq!(out.stdout.matches("handover done").count(), 2, "{how}, both hops: {}", out.stdout);
    let frozen = out
        .stdout
        .lines()
        .filter(|l| l.contains("handover done") && !l.contains("freeze=0 ms"))
        .count();
    assert_eq!(frozen > 0, how == "freeze", "{how}: {}", out.stdout);
    load.finish_exact(3000).await;
    let (_, s) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(s.config.storage.as_str(), "memory");
    assert_eq!(
        (s.state.messages, s.state.last_seq),
        (3000, 3000),
        "{how}: stored once, A's sequences"
    );
}

/// Issue 23, case 1: a stream whose messages are all gone (purged here; all
/// expired or a drained work queue alike) but whose last sequence is N,
/// changed in place under a nats-py publisher and a pull worker bound by
/// name. The copy numbered new messages from 1 (a mirror of an empty stream
/// is aligned to N only by its consumer's setup, on its leader) and the
/// moved durable, at N + 1, skipped the first N of them (200 of 300 in a
/// newcomer's run; verify said it held). B is moved on to N before it
/// takes the subjects (subjects::same_last): every publish processed once, at
/// A's next sequences.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purged_stream_changed_in_place_goes_on_after_its_last_sequence() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 100).await;
    e.js.stream_purge_below("ORDERS", None, 101).await.unwrap();
    let dir = TempDir::new("purged");
    let load =
        crate::pyapps::PyLoad::start(e.server.url(), &dir.0, "ORDERS", "worker", 1, 300, 100);
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, None);
    assert_eq!(out.code, 0, "{out:?}");
    let handled = load.finish_exact(300).await;
    let (_, s) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!((s.state.first_seq, s.state.last_seq), (101, 400), "A's next sequences");
    let seqs: Vec<u64> = handled.iter().filter_map(|l| l["seq"].as_u64()).collect();
    assert!(seqs.iter().all(|s| *s > 100), "{seqs:?}");
}

/// Issue 23, case 3: `--set storage=memory` made the temporary stream
/// memory, and it is the only copy from hop 1's end (the old stream
/// deleted) to hop 2's commit: a server restart there lost it and every
/// resume failed. It keeps the old stream's storage (file) and hop 2 makes
/// the stream memory: after a restart at that moment the same command
/// finishes with every message and the durable's position.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_between_the_hops_of_a_change_to_memory_keeps_the_only_copy() {
    let mut e = env().await;
    orders_ten_of_fifty_processed(&e).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("retire"));
    assert_eq!(out.code, 86, "{out:?}");
    let (_, via) = e.js.stream_info("ORDERS_CUTOVER").await.unwrap();
    assert_eq!(via.config.storage.as_str(), "file", "the only copy survives a restart");
    let js = restarted(&mut e).await;
    let out = crate::run::retry_cli(&e, &args, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, s) = js.stream_info("ORDERS").await.unwrap();
    assert_eq!((s.config.storage.as_str(), s.state.messages, s.state.last_seq), ("memory", 50, 50));
    let (_, c) = js.consumer_info("ORDERS", "worker").await.unwrap();
    assert_eq!(c.num_pending, 40, "its position: {c:?}");
}

/// A newcomer's trial (case B): `--set storage=memory` in place, the server
/// restarted in hop 2 after the durables moved to the new (memory) ORDERS
/// and before its commit: the new ORDERS is gone with its durables, the
/// temporary (file) stream still holds everything and its durables paused
/// at their checkpoints. The resume said ORDERS "does not exist ... (or
/// create it)". It makes the copy again and moves the durables again from
/// their checkpoints: every message, and the durable's position.
#[tokio::test(flavor = "multi_thread")]
async fn a_memory_copy_lost_in_a_restart_before_its_commit_is_made_again() {
    let mut e = env().await;
    orders_ten_of_fifty_processed(&e).await;
    let args = ["--json", "run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("move_consumers#2"));
    assert_eq!(out.code, 86, "{out:?}");
    let js = restarted(&mut e).await;
    assert!(js.stream_info_opt("ORDERS").await.unwrap().is_none(), "the memory copy is lost");
    let out = crate::run::retry_cli(&e, &args, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("it held copies only, so it is made again"), "{out:?}");
    let (_, s) = js.stream_info("ORDERS").await.unwrap();
    assert_eq!((s.config.storage.as_str(), s.state.messages, s.state.last_seq), ("memory", 50, 50));
    let (_, c) = js.consumer_info("ORDERS", "worker").await.unwrap();
    assert_eq!((c.num_pending, c.ack_floor.stream_seq), (40, 10), "its position: {c:?}");
    assert!(js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none());
}

/// Issue 23, case 2: a memory stream changed to file in place, the server
/// restarted before hop 1's commit: the memory stream is gone with its
/// durables, and the file copy is the only copy of its messages. The run
/// said the old stream still served the publishers, every resume failed,
/// and the suggested rollback would have deleted the only copy. Now the
/// rollback is refused, naming it, and the same command finishes: the copy
/// (every durable had moved) takes the subjects, then hop 2 gives the
/// stream its name back, with every message and the durable's position.
#[tokio::test(flavor = "multi_thread")]
async fn a_memory_stream_lost_in_a_restart_before_the_commit_is_finished_from_its_copy() {
    let mut e = env().await;
    memory_orders(&e).await;
    let w = e.pull_consumer("ORDERS", "worker").await;
    let mut batch = w.fetch().max_messages(10).messages().await.unwrap();
    while let Some(m) = futures::StreamExt::next(&mut batch).await {
        m.unwrap().double_ack().await.unwrap();
    }
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=file", "--yes"];
    let out = run_cli(&e, &args, Some("move_consumers"));
    assert_eq!(out.code, 86, "{out:?}");
    let js = restarted(&mut e).await;
    assert!(js.stream_info_opt("ORDERS").await.unwrap().is_none(), "a memory stream is gone");
    let rb =
        crate::run::retry_cli(&e, &["rollback", "ORDERS.ORDERS_CUTOVER"], &["is held by runner"])
            .await;
    assert_ne!(rb.code, 0, "{rb:?}");
    assert!(rb.stderr.contains("only copy") && rb.stderr.contains("run --resume"), "{rb:?}");
    assert_eq!(js.stream_info("ORDERS_CUTOVER").await.unwrap().1.state.messages, 30, "kept");
    let out = crate::run::retry_cli(&e, &args, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("was gone"), "{out:?}");
    let (_, s) = js.stream_info("ORDERS").await.unwrap();
    assert_eq!((s.config.storage.as_str(), s.state.messages, s.state.last_seq), ("file", 30, 30));
    assert_eq!(s.config.subjects, vec!["orders.>".to_string()]);
    let (_, c) = js.consumer_info("ORDERS", "worker").await.unwrap();
    assert_eq!(c.num_pending, 20, "its position: {c:?}");
}

/// Issue 24: a runner killed right after it asked for the work-queue durable
/// on the copy (in place, limits to work queue: the purge below the
/// durable's start comes first), the copy then given deny_purge by someone
/// else, and the run resumed. The durable exists, so the purge is done:
/// it is not tried again (refused, it gave the old durable back beside the
/// new one and stopped); the resume finishes with the old durable's
/// messages processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_past_the_work_queue_durable_does_not_purge_again() {
    use futures::StreamExt;
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let run = [
        "run",
        "--in-place",
        "ORDERS",
        "--set",
        "retention=workqueue",
        "--lease-ttl",
        "1s",
        "--yes",
    ];
    // Watch the runner's requests; kill it once it asked for the durable.
    let mut reqs = e.js.client.subscribe("$JS.API.CONSUMER.>").await.unwrap();
    let mut runner = tokio::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .arg("--server")
        .arg(e.server.url())
        .args(run)
        .env("NATS_CUTOVER_GUARD", "off")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let asked = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(m) = reqs.next().await {
            let s = m.subject.as_str();
            if s.contains("CREATE.ORDERS_CUTOVER.worker") {
                return true;
            }
        }
        false
    })
    .await;
    runner.start_kill().unwrap();
    let _ = runner.wait().await;
    assert_eq!(asked, Ok(true), "the runner asked for the durable on the copy");
    wait_until("the durable exists on the copy", Duration::from_secs(10), || async {
        e.js.consumer_info_opt("ORDERS_CUTOVER", "worker").await.unwrap().is_some()
    })
    .await;
    e.set_stream("ORDERS_CUTOVER", "deny_purge", json!(true)).await;
    let out = crate::run::retry_cli(&e, &run, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, s) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!((s.config.retention.as_str(), s.state.messages), ("workqueue", 10));
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert_eq!(c.num_pending, 10, "the durable's 10 messages, each delivered once from here");
}

/// Issue 24 item 1, B's limits against the messages as B will store them:
/// in place to memory with `max_msgs` 15, which fit ORDERS's 10 messages
/// when planned. ORDERS grew to 20 before the durable moved, and the copy
/// (discard old) dropped the 5 oldest, which the durable had not delivered:
/// moved, it would have skipped them. The move stops before the durable is
/// made on the copy, naming it, with the consumer given back; limits of the
/// copy changed since the plan are named too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_that_dropped_what_the_durable_needs_is_named_before_the_move() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let set = ["--set", "storage=memory", "--set", "max_msgs=15"];
    let run =
        [&["run", "--in-place", "ORDERS"][..], &set, &["--lease-ttl", "1s", "--yes"]].concat();
    let out = run_cli(&e, &run, Some("catch_up"));
    assert_eq!(out.code, 86, "{out:?}");
    e.publish("orders.eu", "b", 10).await;
    wait_until("the copy drops its oldest", Duration::from_secs(10), || async {
        let (_, b) = e.js.stream_info("ORDERS_CUTOVER").await.unwrap();
        b.state.first_seq == 6 && b.state.last_seq == 20
    })
    .await;
    let out = crate::run::retry_cli(&e, &run, &["is held by runner"]).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("ORDERS_CUTOVER no longer holds the messages from 1 on"),
        "{out:?}"
    );
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "given back");
    assert!(e.js.consumer_info_opt("ORDERS_CUTOVER", "worker").await.unwrap().is_none());
    // Its limits changed: named as such.
    e.set_stream("ORDERS_CUTOVER", "max_msgs", json!(100)).await;
    let out = crate::run::retry_cli(&e, &run, &["is held by runner"]).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("limits were changed after the plan (max_msgs 100 (planned 15))"),
        "{out:?}"
    );
    assert!(e.js.consumer_info_opt("ORDERS_CUTOVER", "worker").await.unwrap().is_none());
}

/// A newcomer's trial: in place, the copy's `max_msgs` lowered during the
/// run (it dropped the oldest), the run stopped as it should, and its
/// advice (set the limit back, resume) finished the hop, deleting the old
/// stream with the only copy of what the copy had dropped (80,205 messages
/// to 1,000). Now the stop says the drop cannot be undone that way and
/// names the rollback; and set back and resumed all the same, the hop stops
/// before the old stream is deleted: it is kept, sealed, with every
/// message, and the message says how to go on.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_that_dropped_messages_never_costs_the_old_stream_its_only_copy() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 40).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("catch_up"));
    assert_eq!(out.code, 86, "{out:?}");
    e.set_stream("ORDERS_CUTOVER", "max_msgs", json!(10)).await;
    let out = run_cli(&e, &args, None);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("already dropped messages ORDERS holds (ORDERS_CUTOVER holds 10 message(s) from sequence 31, ORDERS 40 from 1)"), "{out:?}");
    assert!(
        out.stderr.contains("undo with `nats-cutover rollback ORDERS.ORDERS_CUTOVER`"),
        "{out:?}"
    );
    // The advice not taken: the limit set back, the change run again.
    e.set_stream("ORDERS_CUTOVER", "max_msgs", json!(-1)).await;
    let out = run_cli(&e, &args, None);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("the copy lacks messages its limits would keep"), "{out:?}");
    assert!(out.stderr.contains("delete ORDERS yourself (nats stream rm ORDERS)"), "{out:?}");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!((a.state.messages, a.state.first_seq, a.config.sealed), (40, 1, true), "{a:?}");
    // The way on it names: ORDERS deleted by hand, then hop 1's resume,
    // which goes on through hop 2 (it used to finish hop 1 alone, exit 0,
    // the stream left under the temporary name).
    e.js.stream_delete("ORDERS").await.unwrap();
    let out = run_cli(&e, &["run", "--resume", "ORDERS.ORDERS_CUTOVER"], None);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("ORDERS has its new settings under its own name"), "{out:?}");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!((a.state.messages, a.state.first_seq), (10, 31), "{a:?}");
    assert_eq!(a.config.storage, cutover_core::model::StorageType::Memory);
    assert!(e.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none());
    e.js.consumer_info("ORDERS", "worker").await.unwrap();
}

/// A newcomer's trial: `deny_purge` set on the temporary stream while hop
/// 2 copied it was lost with it: ORDERS came back without it. Settings
/// the server updates in place, changed on the old stream after the plan,
/// are carried to the new one before the commit (named by an event).
#[tokio::test(flavor = "multi_thread")]
async fn settings_changed_on_the_old_stream_during_the_run_are_carried_to_the_new_one() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 20).await;
    let args = ["--json", "run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("catch_up#2"));
    assert_eq!(out.code, 86, "{out:?}");
    let (raw, _) = e.js.stream_info("ORDERS_CUTOVER").await.unwrap();
    let mut cfg = raw["config"].clone();
    cfg["deny_purge"] = json!(true);
    cfg["description"] = json!("orders, kept");
    cfg["max_msgs"] = json!(5_000);
    e.js.stream_update(&cfg).await.unwrap();
    let out = crate::run::retry_cli(&e, &args, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let carried =
        out.stdout.lines().find(|l| l.contains("carried to the new one before the commit"));
    assert!(carried.is_some_and(|l| l.contains("deny_purge")), "{out:?}");
    let (raw, info) = e.js.stream_info("ORDERS").await.unwrap();
    let c = &raw["config"];
    assert_eq!(
        (c["deny_purge"].as_bool(), c["description"].as_str()),
        (Some(true), Some("orders, kept"))
    );
    assert_eq!((c["max_msgs"].as_i64(), c["storage"].as_str()), (Some(5_000), Some("memory")));
    assert_eq!(info.state.messages, 20);
}

/// A newcomer's trial: between the hops of an in-place change (a runner
/// killed right after hop 1 deleted ORDERS) `plan` and `inspect` of ORDERS
/// said it "does not exist ... (or create it)": a stream created by hand
/// there takes the name hop 2 needs. They name the change under way and its
/// resume, which makes ORDERS again.
#[tokio::test(flavor = "multi_thread")]
async fn between_the_hops_plan_and_inspect_name_the_change_under_way_not_a_missing_stream() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 20).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("retire"));
    assert_eq!(out.code, 86, "{out:?}");
    assert!(e.js.stream_info_opt("ORDERS").await.unwrap().is_none(), "hop 1 deleted it");
    let id = "ORDERS.ORDERS_CUTOVER";
    let plan = e.cli(&["plan", "--in-place", "ORDERS", "--set", "storage=memory"]);
    let inspect = e.cli(&["inspect", "ORDERS"]);
    for out in [&plan, &inspect] {
        assert_ne!(out.code, 0, "{out:?}");
        assert!(!out.stderr.contains("or create it"), "{out:?}");
        assert!(out.stderr.contains("do not create ORDERS by hand"), "{out:?}");
        assert!(
            out.stderr.contains(&format!("`nats-cutover run --resume {id}` goes on with hop 2")),
            "{out:?}"
        );
    }
    let resume = crate::run::retry_cli(&e, &["run", "--resume", id], &["is held by runner"]).await;
    assert_eq!(resume.code, 0, "{resume:?}");
    let (raw, info) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!((raw["config"]["storage"].as_str(), info.state.messages), (Some("memory"), 20));
    // Both hops done: their released leases are counted, not listed as if
    // something were left behind (a newcomer read them as orphans).
    let status = e.cli(&["status"]);
    assert!(!status.stdout.contains("leases:"), "{status:?}");
    assert!(status.stdout.contains("2 released lease(s) of finished migrations"), "{status:?}");
    assert_eq!(e.cli(&["--json", "status"]).json()["leases"].as_array().unwrap().len(), 2);
    // A new change replaces the finished hops' records, their leases with
    // them: hop 2's was listed as an orphan while the new hop 1 ran.
    let again = ["run", "--in-place", "ORDERS", "--set", "storage=file", "--yes"];
    let out = run_cli(&e, &again, Some("catch_up"));
    assert_eq!(out.code, 86, "{out:?}");
    let status = e.cli(&["status"]);
    assert!(!status.stdout.contains("orphan"), "{status:?}");
}

/// A newcomer's trial: every message of hop 1 of an in-place change named
/// `run --resume` of hop 1's id, which finished hop 1 alone and ended 0
/// with the stream under the temporary name (5 of 5), and past hop 1's
/// commit they named a `rollback` that then refused (3 of 3). Past the
/// commit, `status` and the refusal name only what works, and hop 1's
/// resume goes on through hop 2.
#[tokio::test(flavor = "multi_thread")]
async fn past_hop_1s_commit_the_messages_name_the_resume_that_finishes_both_hops() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 20).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("seal_a"));
    assert_eq!(out.code, 86, "{out:?}");
    let id = "ORDERS.ORDERS_CUTOVER";
    let status = e.cli(&["status", id]);
    assert!(
        status.stdout.contains(&format!("`nats-cutover run --resume {id}` continues through both hops of the in-place change (only finishing it is safe from here)")),
        "{status:?}"
    );
    assert!(!status.stdout.contains("nats-cutover rollback"), "{status:?}");
    // `--yes` taken as by every changing command (it was "unexpected argument").
    let rollback = e.cli(&["rollback", id, "--yes"]);
    assert_ne!(rollback.code, 0, "{rollback:?}");
    assert!(
        rollback
            .stderr
            .contains(&format!("`nats-cutover run --resume {id}` (it goes on through hop 2)")),
        "{rollback:?}"
    );
    let out = crate::run::retry_cli(&e, &["run", "--resume", id], &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(
        (a.state.messages, a.config.storage),
        (20, cutover_core::model::StorageType::Memory)
    );
    assert!(e.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none());
}

/// Resumes hop 1 of `ORDERS`'s in-place change with the engine (a stall
/// timeout of 1 s), past a crashed runner's lease; its events and result.
async fn resume_hop1_quickly(
    e: &Env,
) -> (Vec<cutover_nats::engine::Event>, cutover_nats::Result<cutover_core::journal::Journal>) {
    use cutover_nats::engine::{self, events::Collect, RunOptions};
    let (_, j) =
        cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_CUTOVER").await.unwrap();
    let opts = RunOptions {
        stall_timeout: Duration::from_secs(1),
        lease_ttl: Duration::from_secs(1),
        delete_old: true,
        ..Default::default()
    };
    let (_tx, rx) = tokio::sync::watch::channel(false);
    loop {
        let events = Collect::default();
        match engine::run(&e.js, j.plan.clone(), &opts, &events, rx.clone()).await {
            Err(cutover_nats::Error::Leased { .. }) => continue,
            r => break (events.0.lock().unwrap().clone(), r),
        }
    }
}

/// A newcomer's trial: the copy's `max_msg_size` lowered below the messages'
/// size during an in-place change stalled the copy, and the run said "run
/// again when ingest is lower" (2 of 2). It names the changed limit now,
/// with A serving.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_stalled_by_a_limit_lowered_during_the_run_names_the_limit() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 5).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("create_b"));
    assert_eq!(out.code, 86, "{out:?}");
    e.set_stream("ORDERS_CUTOVER", "max_msg_size", json!(8)).await;
    e.publish("orders.eu", "b", 5).await;
    let (_, r) = resume_hop1_quickly(&e).await;
    let err = r.unwrap_err().to_string();
    assert!(
        err.contains("its limits were changed after the plan (max_msg_size 8 (planned -1))"),
        "{err}"
    );
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()], "A still serves");
}

/// A newcomer's trial: a server killed (SIGKILL) under an in-place copy came
/// back with the paced durable's state older than what the copy had stored
/// (delivered 64,600, the copy at 66,228), and the copy read nothing more,
/// for good (2 of 2). That state is not reproduced here (a durable made
/// again at sequence 1 by hand only redelivers what the mirror skips, and
/// the copy goes on by itself); a paced durable that delivers nothing the
/// copy takes (here: to another subject) stalls it the same way. The run
/// makes the durable again from the copy's next sequence, says so, and
/// the copy goes on: every message once, at its sequence.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_that_reads_nothing_through_its_paced_durable_has_it_made_again() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "a", 10).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("create_b"));
    assert_eq!(out.code, 86, "{out:?}");
    let name = "CUTOVER_MIRROR_ORDERS_CUTOVER";
    wait_until("the copy holds A", Duration::from_secs(20), || async {
        e.js.stream_info("ORDERS_CUTOVER").await.unwrap().1.state.last_seq == 10
    })
    .await;
    let (raw, c) = e.js.consumer_info("ORDERS", name).await.unwrap();
    let mut cfg = raw["config"].clone();
    cfg["deliver_subject"] = json!("_CUTOVER.ELSEWHERE");
    cfg["deliver_policy"] = json!("by_start_sequence");
    cfg["opt_start_seq"] = json!(c.delivered.stream_seq + 1);
    e.js.consumer_delete("ORDERS", name).await.unwrap();
    e.js.consumer_create("ORDERS", name, &cfg, cutover_nats::api::Action::Create).await.unwrap();
    e.publish("orders.eu", "b", 10).await;
    let (events, r) = resume_hop1_quickly(&e).await;
    let restarted: Vec<_> = events
        .iter()
        .filter_map(|ev| match &ev.kind {
            cutover_nats::engine::EventKind::Warning(
                cutover_nats::engine::events::Warning::CopyRestarted { from_seq, .. },
            ) => Some(*from_seq),
            _ => None,
        })
        .collect();
    assert_eq!(restarted, [11], "made again from the copy's next sequence once");
    r.unwrap();
    let (_, b) = e.js.stream_info("ORDERS_CUTOVER").await.unwrap();
    assert_eq!((b.state.messages, b.state.first_seq, b.state.last_seq), (20, 1, 20), "{b:?}");
}

/// A newcomer's trial: a memory stream changed in place, the server
/// restarted during hop 1's copy, before any durable moved: the stream and
/// its durables are gone, and the run says nothing can finish it exactly
/// and to `forget` it once the durables are recreated, but `forget`
/// refused it as under way (and `rollback` as the only copy's deletion):
/// no command ended it. `forget` takes it now, changing nothing on the
/// server: the copy, the only one, stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_whose_stream_a_restart_lost_before_its_durables_moved_can_be_forgotten() {
    let mut e = env().await;
    memory_orders(&e).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=file", "--yes"];
    let out = run_cli(&e, &args, Some("catch_up"));
    assert_eq!(out.code, 86, "{out:?}");
    let js = restarted(&mut e).await;
    let id = "ORDERS.ORDERS_CUTOVER";
    let out = crate::run::retry_cli(&e, &args, &["is held by runner"]).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains(&format!("then `nats-cutover forget {id}`")), "{out:?}");
    // Publishers had no stream (a newcomer's trial): the only copy serves them.
    assert!(out.stderr.contains("publishers are served"), "{out:?}");
    let (_, copy) = js.stream_info("ORDERS_CUTOVER").await.unwrap();
    assert_eq!(copy.config.subjects, vec!["orders.>".to_string()]);
    e.publish("orders.eu", "b", 1).await;
    let forget = e.cli(&["forget", id]);
    assert_eq!(forget.code, 0, "{forget:?}");
    assert_eq!(js.stream_info("ORDERS_CUTOVER").await.unwrap().1.state.messages, 31, "kept");
}

/// The same loss once the durables moved: forgetting would strand the
/// durables made on the copy, so forget refuses and names the resume,
/// which finishes the change from the copy, the durable's position kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_whose_stream_a_restart_lost_after_its_durables_moved_is_not_forgotten() {
    let mut e = env().await;
    memory_orders(&e).await;
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=file", "--yes"];
    let out = run_cli(&e, &args, Some("move_consumers"));
    assert_eq!(out.code, 86, "{out:?}");
    let js = restarted(&mut e).await;
    let id = "ORDERS.ORDERS_CUTOVER";
    let forget = e.cli(&["forget", id]);
    assert_ne!(forget.code, 0, "{forget:?}");
    assert!(forget.stderr.contains(&format!("nats-cutover run --resume {id}")), "{forget:?}");
    assert!(js.stream_info("ORDERS_CUTOVER").await.is_ok(), "the copy stays");
    let resume = crate::run::retry_cli(&e, &["run", "--resume", id], &["is held by runner"]).await;
    assert_eq!(resume.code, 0, "{resume:?}");
    let (raw, info) = js.stream_info("ORDERS").await.unwrap();
    assert_eq!((raw["config"]["storage"].as_str(), info.state.messages), (Some("file"), 30));
    let (_, c) = js.consumer_info("ORDERS", "worker").await.unwrap();
    assert_eq!(c.num_pending, 30, "{c:?}");
}

/// ORDERS (file) with its durable `worker`, 50 messages, the first 10
/// processed and acknowledged.
async fn orders_ten_of_fifty_processed(e: &Env) {
    crate::run::orders_stream(e, 30_000).await;
    e.publish("orders.eu", "a", 50).await;
    let w = e.pull_consumer("ORDERS", "worker").await;
    let mut batch = w.fetch().max_messages(10).messages().await.unwrap();
    while let Some(m) = futures::StreamExt::next(&mut batch).await {
        m.unwrap().double_ack().await.unwrap();
    }
}

/// A memory ORDERS (it does not survive a restart) with its durable
/// `worker` and 30 messages.
async fn memory_orders(e: &Env) {
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"], "storage": "memory", "duplicate_window": 120_000_000_000i64})).await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit"})).await;
    e.publish("orders.eu", "a", 30).await;
}

/// The test's server restarted (SIGTERM), and a client of it once it
/// answers for the in-place copy `ORDERS_CUTOVER`.
async fn restarted(e: &mut Env) -> cutover_nats::Js {
    e.server.restart().unwrap();
    let client = async_nats::connect(e.server.url()).await.unwrap();
    let js = cutover_nats::Js::new(client, Duration::from_secs(5));
    wait_until("the server to answer", Duration::from_secs(20), || async {
        js.stream_info("ORDERS_CUTOVER").await.is_ok()
    })
    .await;
    js
}
