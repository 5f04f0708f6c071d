//! Bad input: a clear error naming the problem and the fix, the documented exit
//! code, and nothing changed on the server (snapshots before and after).

use crate::common::*;
use cutover_nats::api::Action;
use cutover_testkit::{free_port, NatsServer, ServerOptions};
use serde_json::json;

const BAD_INPUT: i32 = 2;
const INCOMPATIBLE: i32 = 3;
const SERVER: i32 = 4;

async fn refused(e: &Env, args: &[&str], code: i32, needle: &str) {
    let before = e.snapshot().await;
    let out = e.cli(args);
    assert_eq!(out.code, code, "{out:?}");
    assert!(
        out.stderr.contains(needle) || out.stdout.contains(needle),
        "expected {needle:?} in {out:?}"
    );
    assert_eq!(e.snapshot().await, before, "the server changed after refused input {args:?}");
}

/// `plan --from A --to B --consumer CONSUMER` is refused (see [`refused`]).
async fn plan_refused(e: &Env, consumer: &str, code: i32, needle: &str) {
    refused(e, &move_args(&["plan"], "A", "B", consumer, &[]), code, needle).await;
}

#[test]
fn refused_connection_names_the_server() {
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let out = cli(&move_args(&["--server", &url, "--timeout", "2s", "plan"], "A", "B", "C", &[]));
    assert_eq!(out.code, SERVER, "{out:?}");
    assert!(out.stderr.contains(&format!("cannot connect to {url}")), "{out:?}");
}

#[test]
fn auth_failure_says_which_credentials_to_check() {
    let s = NatsServer::start_with(ServerOptions {
        config: Some("authorization { user: op, password: right }\n".into()),
        ..Default::default()
    })
    .unwrap();
    let out = cli(&["--server", s.url(), "--user", "op", "--password", "wrong", "inspect", "A"]);
    assert_eq!(out.code, SERVER, "{out:?}");
    assert!(out.stderr.contains("authorization"), "{out:?}");
    let out = cli(&["--server", s.url(), "--user", "op", "--password", "right", "inspect", "A"]);
    assert_eq!(out.code, BAD_INPUT, "with the right password only the stream is missing: {out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_stream_consumer_same_stream_and_bad_names() {
    let e = env().await;
    orders(&e).await;
    refused(
        &e,
        &move_args(&["plan"], "NOPE", "B", "C", &[]),
        BAD_INPUT,
        "stream \"NOPE\" does not exist",
    )
    .await;
    plan_refused(&e, "NOPE", BAD_INPUT, "consumer \"NOPE\" does not exist on stream \"A\"").await;
    refused(&e, &move_args(&["plan"], "A", "A", "C", &[]), BAD_INPUT, "must have another name")
        .await;
    refused(&e, &move_args(&["plan"], "A.x", "B", "C", &[]), BAD_INPUT, "contains '.'").await;
    plan_refused(&e, "c d", BAD_INPUT, "contains ' '").await;
    refused(&e, &["inspect", "NOPE"], BAD_INPUT, "does not exist").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ack_none_is_refused_as_incompatible() {
    let e = env().await;
    orders(&e).await;
    e.consumer("A", json!({"durable_name": "N", "ack_policy": "none"})).await;
    plan_refused(&e, "N", INCOMPATIBLE, "ack policy none").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn existing_b_with_subjects_or_interest_retention_is_refused() {
    let e = env().await;
    orders(&e).await;
    e.stream(json!({"name": "B", "subjects": ["billing.>"], "sources": [{"name": "A"}], "duplicate_window": 120_000_000_000i64})).await;
    // B's sourcing must be done before the snapshot, or it differs by itself.
    until_b_sourced(&e).await;
    plan_refused(&e, "C", INCOMPATIBLE, "B already takes direct publishes").await;
    let e = env().await;
    orders(&e).await;
    e.stream(json!({"name": "B", "retention": "interest", "sources": [{"name": "A"}], "duplicate_window": 120_000_000_000i64})).await;
    until_b_sourced(&e).await;
    plan_refused(&e, "C", INCOMPATIBLE, "interest stream drops messages").await;
    let e = env().await;
    orders(&e).await;
    // B exists but sources something else: its messages carry no origin in A.
    e.stream(json!({"name": "OTHER", "subjects": ["other.>"]})).await;
    e.stream(json!({"name": "B", "sources": [{"name": "OTHER"}], "duplicate_window": 120_000_000_000i64})).await;
    plan_refused(&e, "C", INCOMPATIBLE, "B must source exactly one stream").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn filter_that_b_cannot_serve_is_refused() {
    let e = env().await;
    orders(&e).await;
    e.consumer(
        "A",
        json!({"durable_name": "EU", "ack_policy": "explicit", "filter_subject": "orders.eu"}),
    )
    .await;
    e.stream(json!({"name": "B", "sources": [{"name": "A", "filter_subject": "orders.us"}], "duplicate_window": 120_000_000_000i64})).await;
    plan_refused(&e, "EU", INCOMPATIBLE, "B sources only orders.us").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn to_config_that_loses_publishers_or_is_unreadable() {
    let e = env().await;
    orders(&e).await;
    let dir = e.server.dir().join("cfg");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("b.json");
    std::fs::write(&f, r#"{"subjects": ["billing.>"]}"#).unwrap();
    refused(
        &e,
        &move_args(&["plan"], "A", "B", "C", &["--to-config", f.to_str().unwrap()]),
        INCOMPATIBLE,
        "B's subjects must cover every subject of A",
    )
    .await;
    std::fs::write(&f, "{not json").unwrap();
    refused(
        &e,
        &move_args(&["plan"], "A", "B", "C", &["--to-config", f.to_str().unwrap()]),
        BAD_INPUT,
        "is not valid JSON",
    )
    .await;
    refused(
        &e,
        &move_args(&["plan"], "A", "B", "C", &["--to-config", "/nonexistent/b.json"]),
        BAD_INPUT,
        "cannot read --to-config file",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unreadable_context_or_creds_file() {
    let e = env().await;
    orders(&e).await;
    refused(
        &e,
        &["--creds", "/nonexistent/user.creds", "inspect", "A"],
        BAD_INPUT,
        "cannot read --creds file",
    )
    .await;
    refused(
        &e,
        &["--context", "/nonexistent/ctx.json", "inspect", "A"],
        BAD_INPUT,
        "cannot read nats context",
    )
    .await;
    let dir = e.server.dir().join("ctx");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("broken.json");
    std::fs::write(&f, "{").unwrap();
    refused(
        &e,
        &["--context", f.to_str().unwrap(), "inspect", "A"],
        BAD_INPUT,
        "is not valid JSON",
    )
    .await;
    // A good context is used for the URL.
    std::fs::write(&f, format!(r#"{{"url": "{}"}}"#, e.server.url())).unwrap();
    let out = cli(&["--context", f.to_str().unwrap(), "inspect", "A"]);
    assert_eq!(out.code, 0, "{out:?}");
}

/// `run` refuses an unsafe plan before its first write: not even the journal
/// bucket appears.
#[tokio::test(flavor = "multi_thread")]
async fn run_refuses_unsafe_plans_and_missing_confirmation_without_writing() {
    let e = env().await;
    orders(&e).await;
    e.consumer("A", json!({"durable_name": "N", "ack_policy": "none"})).await;
    refused(
        &e,
        &move_args(&["run"], "A", "B", "N", &["--yes"]),
        INCOMPATIBLE,
        "the plan is unsafe, nothing was changed",
    )
    .await;
    // Leaving a durable behind on A is refused too (it would starve after the cut-over).
    refused(
        &e,
        &move_args(&["run"], "A", "B", "C", &["--yes"]),
        INCOMPATIBLE,
        "durable N on A is not being moved",
    )
    .await;
    e.js.consumer_delete("A", "N").await.unwrap();
    // No terminal to confirm on and no --yes: refused, nothing written.
    refused(&e, &move_args(&["run"], "A", "B", "C", &[]), BAD_INPUT, "pass --yes").await;
    refused(&e, &["run", "--resume", "A.B"], BAD_INPUT, "no migration was started here").await;
    refused(&e, &["run", "--to", "B", "--consumer", "C", "--yes"], BAD_INPUT, "--from is required")
        .await;
    refused(&e, &["rollback", "A.B"], BAD_INPUT, "KV bucket CUTOVER does not exist").await;
    refused(&e, &["forget", "A.B"], BAD_INPUT, "KV bucket CUTOVER does not exist").await;
}

/// B copies A while it sources it: an account without room for the copy is
/// refused before anything is created.
#[tokio::test(flavor = "multi_thread")]
async fn account_without_room_for_b_is_refused() {
    let conf = "accounts { APP { jetstream { max_file: 20000, max_mem: 0 }, users: [ { user: app, password: app } ] } }\n";
    let s =
        NatsServer::start_with(ServerOptions { config: Some(conf.into()), ..Default::default() })
            .unwrap();
    let client = async_nats::ConnectOptions::with_user_and_password("app".into(), "app".into())
        .connect(s.url())
        .await
        .unwrap();
    let js = cutover_nats::Js::new(client.clone(), std::time::Duration::from_secs(5));
    js.stream_create(&json!({"name": "A", "subjects": ["x.>"], "max_bytes": 15000})).await.unwrap();
    js.consumer_create(
        "A",
        "C",
        &json!({"durable_name": "C", "ack_policy": "explicit"}),
        Action::CreateOrUpdate,
    )
    .await
    .unwrap();
    let ctx = async_nats::jetstream::new(client);
    for i in 0..12 {
        ctx.publish("x.1", vec![b'x'; 1000].into())
            .await
            .unwrap()
            .await
            .unwrap_or_else(|e| panic!("publish {i}: {e}"));
    }
    let out = cli(&move_args(
        &["--server", s.url(), "--user", "app", "--password", "app", "plan"],
        "A",
        "B",
        "C",
        &[],
    ));
    assert_eq!(out.code, INCOMPATIBLE, "{out:?}");
    assert!(out.stdout.contains("raise the account's JetStream limit"), "{out:?}");
    assert!(js.stream_info_opt("B").await.unwrap().is_none());
}

/// Every strategy is offered by plan and run; the demo runs strategies
/// source and dual-write and refuses mirror and dual-write with a mode as
/// bad input before connecting, saying what runs them.
#[test]
fn the_demo_refuses_what_it_does_not_run() {
    for sub in ["plan", "run", "demo"] {
        let out = cli(&[sub, "--help"]);
        assert_eq!(out.code, 0, "{out:?}");
        let help = out.stdout.to_lowercase();
        assert!(help.contains("[possible values: source, mirror, dual-write]"), "{out:?}");
    }
    let cases: [(&[&str], &str); 2] = [
        (
            &["--strategy", "mirror"],
            "the demo runs strategy source or dual-write; try --strategy mirror with `run`",
        ),
        (&["--strategy", "dual-write", "--mode", "fence"], "has its own consumer handoff"),
    ];
    for (args, wanted) in cases {
        let out = cli(&[&["demo"][..], args].concat());
        assert_eq!(out.code, BAD_INPUT, "{args:?}: {out:?}");
        assert!(out.stderr.contains(wanted), "{args:?}: {out:?}");
    }
}

/// Flags that would be ignored or make a run misbehave are refused before
/// connecting (the server here does not exist): rolling-only flags without
/// --mode rolling, and timings too short to work (a newcomer's trial found
/// `--max-pause 0s` a busy loop of pauses and `--new-version` silently ignored).
#[test]
fn flags_that_would_be_ignored_or_cannot_work_are_refused() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let moves = ["--from", "A", "--to", "B", "--consumer", "C"];
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--yes", "--new-version", "2"],
            "--new-version is for a rolling upgrade: add --mode rolling",
        ),
        (&["plan", "--new-version", "2"], "--new-version is for a rolling upgrade"),
        (&["run", "--yes", "--proceed"], "--proceed is for a rolling upgrade"),
        (&["run", "--yes", "--seal-when-idle", "5s"], "add --repoint-publishers"),
        (&["run", "--yes", "--max-pause", "0s"], "0s is shorter than 10ms"),
        (&["run", "--yes", "--max-pause", "abc"], "\"abc\" is not a duration like 5s"),
        (&["run", "--yes", "--lease-ttl", "1ms"], "1ms is shorter than 1s"),
        (&["run", "--yes", "--settle-timeout", "0s"], "0s is shorter than 1ms"),
        (&["--timeout", "0s", "plan"], "0s is shorter than 1ms"),
    ];
    for (flags, wanted) in cases {
        let args = [&["--server", url.as_str()][..], flags, &moves].concat();
        let out = cli(&args);
        assert_eq!(out.code, BAD_INPUT, "{args:?}: {out:?}");
        assert!(out.stderr.contains(wanted), "{args:?}: expected {wanted:?} in {out:?}");
    }
}

/// `inspect` and `watch` read one system: the source side's options are
/// refused before connecting (they were ignored, and the command said the
/// old stream did not exist on the target side).
#[test]
fn one_system_commands_refuse_the_source_side_options() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    for cmd in [&["inspect", "ORDERS"][..], &["watch", "ORDERS", "--consumer", "worker"]] {
        let args = [&["--server", url.as_str(), "--from-server", url.as_str()][..], cmd].concat();
        let out = cli(&args);
        assert_eq!(out.code, BAD_INPUT, "{args:?}: {out:?}");
        assert!(out.stderr.contains("reads one system"), "{args:?}: {out:?}");
    }
}

/// A migration whose journal head record (the plan without its consumers,
/// and their names) would not fit the server's max_payload is refused by the
/// plan, saying how to split it; the consumers' records are apart (1,000
/// durables fit under the default max_payload: journal_records.rs).
#[tokio::test(flavor = "multi_thread")]
async fn too_many_consumers_for_one_journal_are_refused() {
    let conf = "max_payload: 2048\n";
    let s =
        NatsServer::start_with(ServerOptions { config: Some(conf.into()), ..Default::default() })
            .unwrap();
    let client = async_nats::connect(s.url()).await.unwrap();
    let js = cutover_nats::Js::new(client, std::time::Duration::from_secs(5));
    js.stream_create(&json!({"name": "A", "subjects": ["x.>"]})).await.unwrap();
    for i in 0..30 {
        let name = format!("c{i}");
        let cfg = json!({"durable_name": name, "ack_policy": "explicit"});
        js.consumer_create("A", &name, &cfg, Action::CreateOrUpdate).await.unwrap();
    }
    let out = cli(&["--server", s.url(), "plan", "--from", "A", "--to", "B", "--all-consumers"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("journal head record"), "{}", out.stdout);
    assert!(out.stdout.contains("over the server's max_payload of 2048"), "{}", out.stdout);
    assert!(js.stream_info_opt("B").await.unwrap().is_none());
}
