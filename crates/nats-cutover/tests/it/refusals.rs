//! Unsafe situations and bad input refused before any write (issue 13, item
//! 5; docs/safety.md numbers them): each with the message that names the
//! problem and the fix, and a snapshot of every stream and consumer (the
//! journal bucket's stream included) equal before and after.

use crate::common::*;
use crate::run::{orders_stream, retry_cli, run_cli};
use cutover_testkit::{NatsServer, ServerOptions};
use serde_json::json;

const BAD_INPUT: i32 = 2;
const INCOMPATIBLE: i32 = 3;
const FAILED: i32 = 1;

/// `args` (after `--server`) is refused with exit `code`, saying `needle`, and
/// the server is unchanged.
async fn refused(e: &Env, args: &[&str], code: i32, needle: &str) {
    let before = e.snapshot().await;
    let out = e.cli(args);
    assert_eq!(out.code, code, "{args:?}: {out:?}");
    assert!(
        out.stderr.contains(needle) || out.stdout.contains(needle),
        "{args:?}: expected {needle:?} in {out:?}"
    );
    assert_eq!(e.snapshot().await, before, "{args:?} changed the server");
}

/// A journal record of a newer nats-cutover (journal format 2, a phase this
/// version does not know) is acted on by nothing: run, resume, rollback,
/// forget and a plan touching its streams refuse it, naming the upgrade.
#[tokio::test(flavor = "multi_thread")]
async fn a_journal_written_by_a_newer_version_is_refused() {
    let e = env().await;
    orders(&e).await;
    let kv = e
        .ctx
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "CUTOVER".into(),
            history: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let reads = cutover_core::journal::JOURNAL_FORMAT;
    let newer =
        json!({"format": reads + 1, "id": "A.B", "from": "A", "to": "B", "phase": "warped"});
    kv.put("m.A.B", newer.to_string().into()).await.unwrap();
    let says = format!("journal A.B was written by a newer nats-cutover (journal format {}; this one reads up to {reads})", reads + 1);
    let says = says.as_str();
    let run = move_args(&["run"], "A", "B", "C", &["--yes"]);
    refused(&e, &run, INCOMPATIBLE, says).await;
    refused(&e, &["run", "--resume", "A.B", "--yes"], INCOMPATIBLE, says).await;
    refused(&e, &["rollback", "A.B"], INCOMPATIBLE, says).await;
    refused(&e, &["forget", "A.B"], INCOMPATIBLE, says).await;
    refused(&e, &move_args(&["plan"], "A", "X", "C", &[]), INCOMPATIBLE, says).await;
}

/// A plan file of a newer version is refused before it is parsed as this
/// version's (TOML and JSON).
#[tokio::test(flavor = "multi_thread")]
async fn a_plan_file_written_by_a_newer_version_is_refused() {
    let e = env().await;
    orders(&e).await;
    for ext in ["toml", "json"] {
        let p = e.server.dir().join(format!("plan.{ext}"));
        let path = p.to_str().unwrap();
        let out = e.cli(&move_args(&["plan"], "A", "B", "C", &["--out", path]));
        assert_eq!(out.code, 0, "{out:?}");
        let text = std::fs::read_to_string(&p).unwrap();
        let newer = if ext == "json" {
            let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
            v["format"] = json!(7);
            v["mode"] = json!("teleport");
            v.to_string()
        } else {
            assert!(text.contains("format = 1"), "{text}");
            text.replace("format = 1", "format = 7")
                .replace("mode = \"drain\"", "mode = \"teleport\"")
        };
        std::fs::write(&p, newer).unwrap();
        let says = "was written by a newer nats-cutover (plan format 7; this one reads up to 1)";
        refused(&e, &["run", "--plan", path, "--yes"], BAD_INPUT, says).await;
    }
}

/// A migration of A (or of B) that a runner left unfinished is not overtaken
/// by another one: plan and run of A to another stream, and a plan from the
/// half-made B, are refused naming it and the two commands that settle it.
#[tokio::test(flavor = "multi_thread")]
async fn another_unfinished_migration_of_a_or_b_is_refused() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "m", 5).await;
    let first = run_orders(&[], &["--lease-ttl", "1s"]);
    let out = run_cli(&e, &first, Some("create_b"));
    assert_eq!(out.code, 86, "the runner died after creating B: {out:?}");
    // B goes on sourcing A by itself: let it hold A's 5 before comparing.
    wait_until("B to source A's 5 messages", std::time::Duration::from_secs(10), || async {
        e.js.stream_info("ORDERS_V2").await.is_ok_and(|(_, b)| b.state.messages == 5)
    })
    .await;
    let says = "is part of migration ORDERS.ORDERS_V2 (ORDERS -> ORDERS_V2), which is not finished";
    let fix = "`nats-cutover run --resume ORDERS.ORDERS_V2` or undo it with `nats-cutover rollback ORDERS.ORDERS_V2`";
    for args in [
        move_args(&["plan"], "ORDERS", "ORDERS_V3", "worker", &[]),
        move_args(&["run"], "ORDERS", "ORDERS_V3", "worker", &["--yes"]),
        move_args(&["plan"], "ORDERS_V2", "ORDERS_V3", "worker", &[]),
    ] {
        refused(&e, &args, FAILED, says).await;
        refused(&e, &args, FAILED, fix).await;
    }
    // Nor is it forgotten while unfinished, once its lease lapsed too.
    let forget = ["forget", "ORDERS.ORDERS_V2"];
    wait_until("the dead runner's lease to lapse", std::time::Duration::from_secs(10), || async {
        e.cli(&forget).stderr.contains("is under way")
    })
    .await;
    refused(&e, &forget, FAILED, "error: migration ORDERS.ORDERS_V2 is under way").await;
    // The same migration is still the one to resume, and then others may go.
    let out = retry_cli(&e, &["rollback", "ORDERS.ORDERS_V2"], &["held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let out = e.cli(&move_args(&["plan"], "ORDERS", "ORDERS_V3", "worker", &[]));
    assert_eq!(out.code, 0, "once rolled back, another plan is made: {out:?}");
}

/// plan tries B's configuration on a scratch stream CUTOVER_CHECK_<B>; a
/// stream of that name that is not one of its scratches is someone's data:
/// plan refuses rather than delete it.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_named_like_the_plans_scratch_is_not_touched() {
    let e = env().await;
    orders(&e).await;
    e.stream(json!({"name": "CUTOVER_CHECK_B", "subjects": ["precious.>"]})).await;
    e.publish("precious.1", "keep me", 3).await;
    let says = "stream CUTOVER_CHECK_B exists and is not a scratch stream of nats-cutover";
    refused(&e, &move_args(&["plan"], "A", "B", "C", &[]), INCOMPATIBLE, says).await;
    refused(&e, &move_args(&["run"], "A", "B", "C", &["--yes"]), INCOMPATIBLE, says).await;
}

/// The journal bucket's stream is what a migration reads and writes while it
/// runs: it is neither the old nor the new stream of one.
#[tokio::test(flavor = "multi_thread")]
async fn the_journal_bucket_is_not_migrated() {
    let e = env().await;
    orders(&e).await;
    let out = e.cli(&move_args(&["run"], "A", "B", "C", &["--yes"]));
    assert_eq!(out.code, 0, "a first migration makes the bucket: {out:?}");
    let says = "names nats-cutover's own journal bucket (KV bucket CUTOVER)";
    refused(&e, &move_args(&["plan"], "KV_CUTOVER", "X", "C", &[]), INCOMPATIBLE, says).await;
    refused(&e, &move_args(&["run"], "B", "KV_CUTOVER", "C", &["--yes"]), INCOMPATIBLE, says).await;
}

/// Consumer names NATS would read as wildcards or tokens, or none, or one
/// given twice: bad input, named, before anything is sent.
#[tokio::test(flavor = "multi_thread")]
async fn odd_or_repeated_consumer_names_are_refused() {
    let e = env().await;
    orders(&e).await;
    for (name, says) in [
        ("C*", "contains '*'"),
        ("C>", "contains '>'"),
        ("C.x", "contains '.'"),
        ("C\tx", "contains '\\t'"),
        ("", "consumer name is empty"),
    ] {
        refused(&e, &move_args(&["plan"], "A", "B", name, &[]), BAD_INPUT, says).await;
    }
    let long = "c".repeat(256);
    refused(&e, &move_args(&["plan"], "A", "B", &long, &[]), BAD_INPUT, "at most 255").await;
    let twice = move_args(&["plan"], "A", "B", "C", &["--consumer", "C"]);
    refused(&e, &twice, BAD_INPUT, "--consumer C is given twice").await;
}

/// A B that exists with other settings than the move needs: sealed (it can
/// take nothing), or keeping fewer messages than A holds.
#[tokio::test(flavor = "multi_thread")]
async fn an_existing_b_with_other_settings_is_refused() {
    let e = env().await;
    orders(&e).await;
    let b =
        json!({"name": "B", "sources": [{"name": "A"}], "duplicate_window": 120_000_000_000i64});
    e.stream(b.clone()).await;
    // B's sourcing done before any snapshot, or it changes by itself.
    until_b_sourced(&e).await;
    let (mut raw, _) = e.js.stream_info("B").await.unwrap();
    raw["config"]["sealed"] = json!(true);
    e.js.stream_update(&raw["config"]).await.unwrap();
    refused(&e, &move_args(&["plan"], "A", "B", "C", &[]), INCOMPATIBLE, "B is sealed").await;
    let e = env().await;
    orders(&e).await;
    let mut small = b;
    small["max_msgs"] = json!(3);
    e.stream(small).await;
    until_b_sourced(&e).await;
    refused(&e, &move_args(&["plan"], "A", "B", "C", &[]), INCOMPATIBLE, "B keeps less than A")
        .await;
}

/// A server that lacks what the plan relies on: mirror promotion (2.12+) on
/// 2.11, and fence mode's consumer pause (2.11+) on 2.10.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_a_feature_the_plan_needs_is_refused() {
    for (version, flags, says) in [
        ("2.11.11", ["--strategy", "mirror"], "mirror promotion (2.12+)"),
        ("2.10.26", ["--mode", "fence"], "pause"),
    ] {
        let server = NatsServer::start_with(ServerOptions {
            version: Some(version.into()),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let client = async_nats::connect(server.url()).await.unwrap();
        let e = Env {
            js: cutover_nats::Js::new(client.clone(), std::time::Duration::from_secs(5)),
            ctx: async_nats::jetstream::new(client),
            server,
        };
        orders(&e).await;
        refused(&e, &move_args(&["plan"], "A", "B", "C", &flags), INCOMPATIBLE, says).await;
        let run = move_args(&["run"], "A", "B", "C", &[&flags[..], &["--yes"]].concat());
        refused(&e, &run, INCOMPATIBLE, says).await;
    }
}

/// An A that takes no publishes: sealed (its subjects cannot be released),
/// or a mirror (promote it first, or migrate its origin).
#[tokio::test(flavor = "multi_thread")]
async fn a_sealed_or_mirror_a_is_refused() {
    let e = env().await;
    orders(&e).await;
    let (mut raw, _) = e.js.stream_info("A").await.unwrap();
    raw["config"]["sealed"] = json!(true);
    e.js.stream_update(&raw["config"]).await.unwrap();
    refused(&e, &move_args(&["plan"], "A", "B", "C", &[]), INCOMPATIBLE, "A is sealed").await;
    let e = env().await;
    orders(&e).await;
    e.stream(json!({"name": "M", "mirror": {"name": "A"}})).await;
    e.consumer("M", json!({"durable_name": "C", "ack_policy": "explicit"})).await;
    refused(&e, &move_args(&["plan"], "M", "B", "C", &[]), INCOMPATIBLE, "A is a mirror").await;
}
