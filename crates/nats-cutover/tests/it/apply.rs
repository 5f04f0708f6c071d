//! `nats-cutover apply`: desired state for a fleet from files (the nats
//! CLI's stream JSON, NACK's YAML), planned per asset and carried out, live.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

fn write(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn write_json(dir: &Path, name: &str, v: Value) {
    write(dir, name, &serde_json::to_string_pretty(&v).unwrap());
}

/// A KV bucket's stream as the nats clients create it.
fn kv_stream(bucket: &str, history: i64) -> Value {
    json!({"name": format!("KV_{bucket}"), "subjects": [format!("$KV.{bucket}.>")],
        "max_msgs_per_subject": history, "discard": "new", "allow_rollup_hdrs": true,
        "deny_delete": true, "allow_direct": true, "duplicate_window": 120_000_000_000i64})
}

/// Each asset's action in `apply --json`'s plan, by stream.
fn actions(plan: &Value) -> std::collections::BTreeMap<String, String> {
    plan["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["stream"].as_str().unwrap().into(), a["action"].as_str().unwrap().into()))
        .collect()
}

/// The line of kind `kind` among `apply --yes --json`'s lines.
fn line_of(out: &Out, kind: &str) -> Value {
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} line: {out:?}"))
}

const NACK: &str = r#"---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: events
spec:
  name: EVENTS
  subjects: ["events.>"]
  storage: file
  maxAge: 1h
  replicas: 1
---
apiVersion: jetstream.nats.io/v1beta2
kind: KeyValue
metadata:
  name: sessions
spec:
  bucket: sessions
  storage: memory
  history: 1
---
"#;

/// The fixture of the dry run: on the server SAME (as its file says), UPD
/// (max_age to change), STOR (storage to change), KV cfg (history to
/// change), KV sessions (storage to change, in NACK YAML), OTHER (no file);
/// in files also NEW and EVENTS (to create).
async fn fleet(e: &Env, dir: &Path) {
    e.stream(json!({"name": "SAME", "subjects": ["same.>"], "max_age": 60_000_000_000i64})).await;
    e.stream(json!({"name": "UPD", "subjects": ["upd.>"]})).await;
    e.stream(json!({"name": "STOR", "subjects": ["stor.>"]})).await;
    e.stream(json!({"name": "OTHER", "subjects": ["other.>"]})).await;
    e.stream(kv_stream("cfg", 1)).await;
    e.stream(kv_stream("sessions", 1)).await;
    e.stream(kv_stream("opts", 1)).await;
    e.publish("stor.a", "s", 20).await;
    // `nats stream info --json`'s shape: the config under `config`.
    let same = e.js.stream_info_raw("SAME").await.unwrap();
    write_json(dir, "same.json", same);
    write_json(
        dir,
        "upd.json",
        json!({"name": "UPD", "subjects": ["upd.>"], "max_age": 3_600_000_000_000i64}),
    );
    write_json(dir, "sub/stor.json", json!({"name": "STOR", "storage": "memory"}));
    write_json(dir, "sub/new.json", json!({"name": "NEW", "subjects": ["new.>"]}));
    write_json(
        dir,
        "kv_cfg.json",
        json!({"config": {"name": "KV_cfg", "max_msgs_per_subject": 5}}),
    );
    write(dir, "nack.yaml", NACK);
    // `nats kv add`'s option names.
    write_json(dir, "kv_opts.json", json!({"kv": "opts", "history": 3, "ttl": "1h"}));
    write(dir, "notes.txt", "not read: not *.json, *.yaml or *.yml");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_shows_each_assets_diff_and_action_and_changes_nothing() {
    let e = env().await;
    let dir = TempDir::new("apply-dry");
    fleet(&e, &dir.0).await;
    let before = e.snapshot().await;
    let d = dir.0.to_str().unwrap();
    let out = e.cli(&["--json", "apply", d]);
    assert_eq!(out.code, 7, "changes pending: {out:?}");
    let plan = out.json();
    let want: Vec<(&str, &str)> = vec![
        ("EVENTS", "create"),
        ("KV_cfg", "update"),
        ("KV_opts", "update"),
        ("KV_sessions", "change_in_place"),
        ("NEW", "create"),
        ("SAME", "unchanged"),
        ("STOR", "change_in_place"),
        ("UPD", "update"),
    ];
    let want: std::collections::BTreeMap<String, String> =
        want.into_iter().map(|(a, b)| (a.into(), b.into())).collect();
    assert_eq!(actions(&plan), want, "{plan:#}");
    assert_eq!(plan["not_in_files"], json!(["OTHER"]));
    assert_eq!(plan["summary"]["change_in_place"], 2);
    assert_eq!(plan["summary"]["unchanged"], 1);
    let stor = plan["assets"].as_array().unwrap().iter().find(|a| a["stream"] == "STOR").unwrap();
    assert_eq!(
        stor["changes"],
        json!([{"field": "storage", "current": "file", "desired": "memory"}])
    );
    assert_eq!(stor["in_place"]["copies_messages"], 20, "{stor:#}");
    let opts =
        plan["assets"].as_array().unwrap().iter().find(|a| a["stream"] == "KV_opts").unwrap();
    assert_eq!(
        opts["changes"],
        json!([{"field": "max_age", "current": 0, "desired": 3_600_000_000_000i64},
               {"field": "max_msgs_per_subject", "current": 1, "desired": 3}]),
        "{opts:#}"
    );
    let kv = plan["assets"].as_array().unwrap().iter().find(|a| a["stream"] == "KV_cfg").unwrap();
    assert_eq!(kv["changes"][0]["field"], "max_msgs_per_subject", "KV history: an update");
    let events =
        plan["assets"].as_array().unwrap().iter().find(|a| a["stream"] == "EVENTS").unwrap();
    assert_eq!(events["config"]["max_age"], json!(3_600_000_000_000i64), "NACK's maxAge: 1h");
    assert!(events["origin"].as_str().unwrap().ends_with("nack.yaml, document 1"), "{events:#}");
    // The human form: the diff lines and the summary; the default is the dry run.
    let text = e.cli(&["apply", d]);
    eprintln!("{}", text.stdout);
    assert_eq!(text.code, 7, "{text:?}");
    for line in [
        "stream STOR (",
        "  - storage: \"file\"",
        "  + storage: \"memory\"",
        "  + max_age: 3600000000000 (1h)",
        "kv sessions (",
        "two mirror hops through STOR_CUTOVER: copies 20 messages",
        "Not in files, left alone: OTHER",
        "Summary: 1 unchanged, 2 create, 3 update, 2 change in place, 0 refused; 1 not in files (left alone)",
    ] {
        assert!(text.stdout.contains(line), "missing {line:?}:\n{}", text.stdout);
    }
    assert!(text.stdout.contains("Dry run: nothing was changed"), "{}", text.stdout);
    assert_eq!(e.snapshot().await, before, "a dry run changes nothing");
    // --only / --except select by name: the KV buckets alone, less one.
    let only = e.cli(&["--json", "apply", d, "--only", "KV_*", "--except", "sessions"]);
    assert_eq!(actions(&only.json()).keys().collect::<Vec<_>>(), ["KV_cfg", "KV_opts"], "{only:?}");
    let none = e.cli(&["apply", d, "--only", "KV*x"]);
    assert_eq!(none.code, 2, "a pattern that selects nothing: {none:?}");
    assert!(none.stderr.contains("leave no asset") && none.stderr.contains("KV_cfg"), "{none:?}");
    // Unchanged only: exit 0.
    let same = e.cli(&["--json", "apply", &format!("{d}/same.json"), "--dry-run"]);
    assert_eq!(same.code, 0, "{same:?}");
    assert_eq!(same.json()["summary"]["unchanged"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_is_named_with_its_field_and_nothing_changes() {
    let e = env().await;
    e.stream(json!({"name": "UPD", "subjects": ["upd.>"]})).await;
    let dir = TempDir::new("apply-bad");
    write_json(&dir.0, "a.json", json!({"name": "UPD", "max_age": 1_000_000_000i64}));
    let bad_yaml = NACK.replace("maxAge: 1h", "maxAgee: 1h");
    write(&dir.0, "b.yaml", &bad_yaml);
    let before = e.snapshot().await;
    let out = e.cli(&["apply", dir.0.to_str().unwrap(), "--yes"]);
    assert_eq!(out.code, 2, "{out:?}");
    for part in [
        "b.yaml, document 1",
        "Stream spec.maxAgee is not a field",
        "maxAge",
        "nothing was changed",
    ] {
        assert!(out.stderr.contains(part), "missing {part:?}: {out:?}");
    }
    std::fs::remove_file(dir.0.join("b.yaml")).unwrap();
    write(&dir.0, "c.json", "{\"name\": \"X\", \"storage\": \"disk\"}");
    let out = e.cli(&["--json", "apply", dir.0.to_str().unwrap(), "--yes"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.json()["error"].as_str().unwrap().contains("c.json: storage"), "{out:?}");
    write(&dir.0, "c.json", "{\"name\": \"UPD\", \"subjects\": [\"x.>\"]}");
    let out = e.cli(&["apply", dir.0.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("described twice"), "{out:?}");
    assert_eq!(e.snapshot().await, before);
}

/// A NACK resource with preventUpdate, changed: refused.
const REFUSED: &str = r#"apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: locked
spec:
  name: LOCKED
  subjects: ["locked.>"]
  maxMsgs: 10
  preventUpdate: true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_stops_the_apply_before_its_first_write_unless_skipped() {
    let e = env().await;
    e.stream(json!({"name": "UPD", "subjects": ["upd.>"]})).await;
    e.stream(json!({"name": "LOCKED", "subjects": ["locked.>"]})).await;
    let dir = TempDir::new("apply-refused");
    write_json(&dir.0, "upd.json", json!({"name": "UPD", "max_age": 3_600_000_000_000i64}));
    write_json(&dir.0, "new.json", json!({"name": "NEW", "subjects": ["new.>"]}));
    write(&dir.0, "locked.yaml", REFUSED);
    let d = dir.0.to_str().unwrap();
    let dry = e.cli(&["--json", "apply", d]);
    assert_eq!(dry.code, 3, "refused wins over pending: {dry:?}");
    let locked = dry.json()["assets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["stream"] == "LOCKED")
        .cloned()
        .unwrap();
    assert_eq!(locked["action"], "refused");
    assert!(locked["reason"].as_str().unwrap().contains("preventUpdate"), "{locked:#}");
    assert!(!locked["fix"].as_str().unwrap().is_empty());
    let before = e.snapshot().await;
    let out = e.cli(&["apply", d, "--yes"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr.contains("nothing was changed") && out.stderr.contains("--skip-refused"),
        "{out:?}"
    );
    assert_eq!(e.snapshot().await, before, "no write before the refusal");
    let out = e.cli(&["--json", "apply", d, "--yes", "--skip-refused"]);
    assert_eq!(out.code, 0, "{out:?}");
    let result = line_of(&out, "apply_result");
    let outcome = |s: &str| {
        result["assets"].as_array().unwrap().iter().find(|a| a["stream"] == s).unwrap()["outcome"]
            .clone()
    };
    assert_eq!(outcome("NEW"), "created");
    assert_eq!(outcome("UPD"), "updated");
    assert_eq!(outcome("LOCKED"), "skipped (refused)");
    assert_eq!(e.js.stream_info("UPD").await.unwrap().1.config.max_age, 3_600_000_000_000);
    assert!(e.js.stream_info_opt("NEW").await.unwrap().is_some());
    assert_eq!(e.js.stream_info_raw("LOCKED").await.unwrap()["config"]["max_msgs"], -1);
}

/// Under a nats-py publisher and pull workers bound by name on ORDERS:
/// ORDERS' storage changed in place, a stream created and one updated in
/// the same apply; every acknowledged publish processed exactly once, and
/// the second apply finds everything unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apply_yes_changes_a_live_stream_in_place_with_a_create_and_an_update_exactly() {
    let e = env().await;
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 2_000_000_000i64}),
    )
    .await;
    let worker = json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000});
    e.consumer("ORDERS", worker).await;
    e.stream(json!({"name": "UPD", "subjects": ["upd.>"]})).await;
    let dir = TempDir::new("apply-live");
    let files = dir.0.join("desired");
    write_json(
        &files,
        "orders.json",
        json!({"name": "ORDERS", "subjects": ["orders.>"], "storage": "memory"}),
    );
    write_json(&files, "upd.json", json!({"name": "UPD", "max_msgs": 1000}));
    write_json(&files, "new.json", json!({"name": "NEW", "subjects": ["new.>"]}));
    let load =
        crate::pyapps::PyLoad::start(e.server.url(), &dir.0, "ORDERS", "worker", 2, 3000, 300);
    load.until_processed(100).await;
    let f = files.to_str().unwrap();
    let out = e.cli(&["apply", f, "--yes"]);
    eprintln!("{}", out.stdout);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("changed in place"), "{}", out.stdout);
    load.finish_exact(3000).await;
    let orders = e.js.stream_info("ORDERS").await.unwrap().1;
    assert_eq!(orders.config.storage, cutover_core::model::StorageType::Memory);
    assert_eq!(orders.state.last_seq, 3000, "sequences kept: one message a publish");
    assert!(e.js.consumer_info_opt("ORDERS", "worker").await.unwrap().is_some(), "durable kept");
    assert!(e.js.stream_info_opt("ORDERS_CUTOVER").await.unwrap().is_none());
    assert_eq!(e.js.stream_info_raw("UPD").await.unwrap()["config"]["max_msgs"], 1000);
    assert!(e.js.stream_info_opt("NEW").await.unwrap().is_some());
    let again = e.cli(&["--json", "apply", f]);
    assert_eq!(again.code, 0, "everything applied: {again:?}");
    assert_eq!(again.json()["summary"]["unchanged"], 3);
    let yes = e.cli(&["--json", "apply", f, "--yes"]);
    assert_eq!(yes.code, 0, "{yes:?}");
    let outcomes: Vec<Value> = line_of(&yes, "apply_result")["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec![json!("unchanged"); 3], "{yes:?}");
}

/// The runner killed right after hop 1 of a live change retired ORDERS
/// (the stream lives under its temporary name): `apply` again resumes the
/// change (it does not take ORDERS for a stream to create), finishes it,
/// and leaves the finished assets alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_again_after_a_crash_resumes_the_live_change_and_repeats_nothing() {
    let e = env().await;
    e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"]})).await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit"})).await;
    e.publish("orders.a", "m", 50).await;
    let dir = TempDir::new("apply-crash");
    write_json(&dir.0, "orders.json", json!({"name": "ORDERS", "storage": "memory"}));
    write_json(&dir.0, "new.json", json!({"name": "NEW", "subjects": ["new.>"]}));
    let d = dir.0.to_str().unwrap();
    let run = |crash: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
        cmd.args(["--server", e.server.url(), "--json", "apply", d, "--yes", "--lease-ttl", "2s"]);
        if let Some(at) = crash {
            cmd.env("NATS_CUTOVER_TEST_CRASH_AFTER", at);
        }
        let o = cmd.output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        }
    };
    let out = run(Some("retire"));
    assert_eq!(out.code, 86, "killed after hop 1's retire: {out:?}");
    assert!(e.js.stream_info_opt("NEW").await.unwrap().is_some(), "created before the live change");
    let dry = e.cli(&["--json", "apply", d]);
    let plan = dry.json();
    assert_eq!(actions(&plan)["ORDERS"], "change_in_place", "{plan:#}");
    assert_eq!(actions(&plan)["NEW"], "unchanged");
    let orders =
        plan["assets"].as_array().unwrap().iter().find(|a| a["stream"] == "ORDERS").unwrap();
    assert_eq!(orders["resume"], true, "{orders:#}");
    // The dead runner's lease lapses (2 s); until then the apply says so.
    let mut last = None;
    wait_until("apply to resume once the lease lapsed", Duration::from_secs(30), || {
        let o = run(None);
        let ok = o.code == 0;
        last = Some(o);
        async move { ok }
    })
    .await;
    let out = last.unwrap();
    let result = line_of(&out, "apply_result");
    let outcome = |s: &str| {
        result["assets"].as_array().unwrap().iter().find(|a| a["stream"] == s).unwrap()["outcome"]
            .clone()
    };
    assert_eq!(outcome("NEW"), "unchanged", "created once, by the first apply: {out:?}");
    assert_eq!(outcome("ORDERS"), "changed in place");
    let orders = e.js.stream_info("ORDERS").await.unwrap().1;
    assert_eq!(orders.config.storage, cutover_core::model::StorageType::Memory);
    assert_eq!(orders.state.messages, 50);
    assert!(e.js.consumer_info_opt("ORDERS", "worker").await.unwrap().is_some());
    let again = e.cli(&["--json", "apply", d]);
    assert_eq!(again.code, 0, "{again:?}");
    // The fleet records: each asset's last outcome.
    let kv = e.ctx.get_key_value("CUTOVER").await.unwrap();
    for s in ["ORDERS", "NEW"] {
        let r: Value =
            serde_json::from_slice(&kv.get(format!("apply.{s}")).await.unwrap().unwrap()).unwrap();
        assert_eq!(r["state"], "done", "{s}: {r}");
    }
}

/// On 2.11 (no mirror promotion) a live change in place cannot be made:
/// the storage change is refused with the plan's reason, a plain update
/// beside it is still judged an update, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_in_place_the_server_cannot_carry_is_refused_with_the_plans_reason() {
    let e = crate::versions::env_on("2.11.11").await;
    e.stream(json!({"name": "STOR", "subjects": ["stor.>"]})).await;
    e.stream(json!({"name": "UPD", "subjects": ["upd.>"]})).await;
    let dir = TempDir::new("apply-old");
    write_json(&dir.0, "stor.json", json!({"name": "STOR", "storage": "memory"}));
    write_json(&dir.0, "upd.json", json!({"name": "UPD", "max_msgs": 5}));
    let before = e.snapshot().await;
    let out = e.cli(&["--json", "apply", dir.0.to_str().unwrap()]);
    assert_eq!(out.code, 3, "{out:?}");
    let plan = out.json();
    assert_eq!(actions(&plan)["STOR"], "refused", "{plan:#}");
    assert_eq!(actions(&plan)["UPD"], "update");
    let stor = plan["assets"].as_array().unwrap().iter().find(|a| a["stream"] == "STOR").unwrap();
    eprintln!("reason: {}\nfix: {}", stor["reason"], stor["fix"]);
    assert!(stor["reason"].as_str().unwrap().contains("2.12"), "{stor:#}");
    let out = e.cli(&["apply", dir.0.to_str().unwrap(), "--yes"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(e.snapshot().await, before);
}

/// Three streams' storage changed in place with --parallel 3: the changes
/// run side by side (their events overlap in time), each ends with its
/// messages, sequences and durable's position.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_changes_run_parallel_at_a_time_each_exact() {
    let e = env().await;
    let dir = TempDir::new("apply-parallel");
    let names = ["P0", "P1", "P2"];
    for n in names {
        let subject = format!("{}.>", n.to_lowercase());
        e.stream(json!({"name": n, "subjects": [subject]})).await;
        e.consumer(n, json!({"durable_name": "w", "ack_policy": "explicit"})).await;
        e.publish(&format!("{}.a", n.to_lowercase()), n, 2000).await;
        write_json(&dir.0, &format!("{n}.json"), json!({"name": n, "storage": "memory"}));
    }
    // Each durable has processed 500 of its 2000: its position must survive.
    for n in names {
        let c = e.pull_consumer(n, "w").await;
        use futures::StreamExt;
        let mut batch = c.fetch().max_messages(500).messages().await.unwrap();
        while let Some(m) = batch.next().await {
            m.unwrap().double_ack().await.unwrap();
        }
    }
    let t0 = std::time::Instant::now();
    let (html, data) = (dir.0.join("fleet.html"), dir.0.join("fleet.json"));
    let reports = ["--report", html.to_str().unwrap(), "--report", data.to_str().unwrap()];
    let args = ["--json", "apply", dir.0.to_str().unwrap(), "--yes", "--parallel", "3"];
    let out = e.cli(&[&args[..], &reports[..]].concat());
    eprintln!("3 changes of 2,000 messages each, --parallel 3: {:?}", t0.elapsed());
    assert_eq!(out.code, 0, "{out:?}");
    // The fleet's report: each asset's outcome and both hops' figures.
    let r: Value = serde_json::from_slice(&std::fs::read(&data).unwrap()).unwrap();
    assert_eq!(r["kind"], "apply_report");
    assert_eq!(r["assets"].as_array().unwrap().len(), 3, "{r:#}");
    for a in r["assets"].as_array().unwrap() {
        assert_eq!(a["outcome"], "changed in place", "{a:#}");
        let hops = a["hops"].as_array().unwrap();
        assert_eq!(hops.len(), 2, "{a:#}");
        for h in hops {
            assert_eq!(h["phase"], "done", "{h:#}");
            assert!(h["ms"].as_u64().unwrap() >= h["copy_ms"].as_u64().unwrap(), "{h:#}");
        }
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("every asset as desired") && page.contains("changed in place"), "{page}");
    for n in names {
        assert!(page.contains(&format!("stream {n}")), "{n} in the HTML report");
    }
    assert_eq!(line_of(&out, "apply_plan")["parallel"], 3);
    let spans = spans(&out);
    assert_eq!(spans.len(), 3, "{spans:?}");
    let overlap = spans.values().any(|a| spans.values().any(|b| a != b && a.0 < b.1 && b.0 < a.1));
    assert!(overlap, "no two changes ran at once: {spans:?}");
    for n in names {
        let (_, s) = e.js.stream_info(n).await.unwrap();
        assert_eq!(s.config.storage, cutover_core::model::StorageType::Memory, "{n}");
        assert_eq!((s.state.messages, s.state.last_seq), (2000, 2000), "{n}");
        let (_, c) = e.js.consumer_info(n, "w").await.unwrap();
        assert_eq!((c.ack_floor.stream_seq, c.num_pending), (500, 1500), "{n}'s position kept");
    }
}

/// Each live change's span of events (first and last `ts_ms`), by its
/// stream, from `apply --yes --json`'s lines.
fn spans(out: &Out) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut spans: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for v in out.stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        let (Some(m), Some(ts)) = (v["migration"].as_str(), v["ts_ms"].as_u64()) else { continue };
        let stream = m.split('.').next().unwrap().trim_end_matches("_CUTOVER").to_string();
        let s = spans.entry(stream).or_insert((ts, ts));
        s.0 = s.0.min(ts);
        s.1 = s.1.max(ts);
    }
    spans
}

/// A KV bucket described by a NACK `KeyValue` (storage memory, history 64)
/// applied under nats-py writer, watcher and reader: every write applied and
/// watched once, revisions kept, revision-checked updates still succeed
/// (the checks of buckets.rs, with apply making the change).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nack_key_value_is_applied_live_under_kv_apps() {
    let nack = "apiVersion: jetstream.nats.io/v1beta2\nkind: KeyValue\nmetadata:\n  name: cfg\nspec:\n  bucket: cfg\n  storage: memory\n  history: 64\n";
    crate::buckets::kv_apps_through(true, |e: &Env| {
        let f = e.server.dir().join("cfg.yaml");
        std::fs::write(&f, nack).unwrap();
        let dry = e.cli(&["--json", "apply", f.to_str().unwrap()]);
        assert_eq!(dry.code, 7, "{dry:?}");
        assert_eq!(actions(&dry.json())["KV_cfg"], "change_in_place");
        e.cli(&["apply", f.to_str().unwrap(), "--yes"])
    })
    .await;
}

/// The issue's first case on a 3-node cluster: every KV bucket to R3 (an
/// update the server takes) and an R3 stream's storage changed in place (the
/// cluster's hand-over), from NACK YAML and stream JSON in one apply; then
/// everything reads unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_cluster_buckets_go_to_r3_and_a_stream_changes_in_place() {
    let cluster = cutover_testkit::Cluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let urls: Vec<String> = cluster.urls().split(',').map(String::from).collect();
    let client = async_nats::connect(urls).await.unwrap();
    let js = cutover_nats::Js::new(client.clone(), Duration::from_secs(5));
    let orders = json!({"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3, "duplicate_window": 3_000_000_000i64});
    wait_until("an R3 stream to be created", Duration::from_secs(30), || async {
        js.stream_create(&orders).await.is_ok()
    })
    .await;
    let worker = json!({"durable_name": "worker", "ack_policy": "explicit"});
    js.consumer_create("ORDERS", "worker", &worker, cutover_nats::api::Action::Create)
        .await
        .unwrap();
    let ctx = async_nats::jetstream::new(client);
    for i in 0..100 {
        ctx.publish(format!("orders.{}", i % 4), "m".into()).await.unwrap().await.unwrap();
    }
    for b in ["a", "b"] {
        js.stream_create(&kv_stream(b, 1)).await.unwrap();
        // A new stream's leader may not answer yet: the put is tried again
        // with the same msg-id (stored once).
        wait_until("a put to the new bucket", Duration::from_secs(30), || async {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("{b}-k").as_str());
            match ctx.publish_with_headers(format!("$KV.{b}.k"), h, "v".into()).await {
                Ok(ack) => ack.await.is_ok(),
                Err(_) => false,
            }
        })
        .await;
    }
    let dir = TempDir::new("apply-cluster");
    let kv = |b: &str| {
        format!("---\napiVersion: jetstream.nats.io/v1beta2\nkind: KeyValue\nmetadata:\n  name: {b}\nspec:\n  bucket: {b}\n  replicas: 3\n")
    };
    write(&dir.0, "buckets.yaml", &(kv("a") + &kv("b")));
    write_json(&dir.0, "orders.json", json!({"name": "ORDERS", "storage": "memory"}));
    let d = dir.0.to_str().unwrap();
    let url = cluster.urls();
    let dry = cli(&["--server", &url, "--json", "apply", d]);
    assert_eq!(dry.code, 7, "{dry:?}");
    let plan = dry.json();
    assert_eq!(actions(&plan)["KV_a"], "update", "R1 to R3 is an update: {plan:#}");
    assert_eq!(actions(&plan)["ORDERS"], "change_in_place");
    let out = cli(&["--server", &url, "apply", d, "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");
    for b in ["KV_a", "KV_b"] {
        let (_, s) = js.stream_info(b).await.unwrap();
        assert_eq!((s.config.num_replicas, s.state.messages), (3, 1), "{b}");
    }
    let (_, s) = js.stream_info("ORDERS").await.unwrap();
    assert_eq!(s.config.storage, cutover_core::model::StorageType::Memory);
    assert_eq!((s.config.num_replicas, s.state.last_seq), (3, 100));
    assert!(js.consumer_info_opt("ORDERS", "worker").await.unwrap().is_some());
    let again = cli(&["--server", &url, "--json", "apply", d]);
    assert_eq!(again.code, 0, "{again:?}");
}

/// A measurement, not run by default (`cargo test -p nats-cutover --test it
/// apply::parallel_changes -- --ignored --nocapture`; docs/apply.md has its
/// figures): six live changes (five streams of 50,000 messages and ORDERS
/// under a nats-py publisher at 300/s and two workers) with --parallel 1, 3
/// and 6: the apply's time and the publisher's longest publish, each run
/// exact (none lost, none twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement: about 90 s"]
async fn parallel_changes_under_load_measured() {
    for p in ["1", "3", "6"] {
        let e = env().await;
        let dir = TempDir::new(&format!("apply-measure-{p}"));
        let files = dir.0.join("desired");
        e.stream(json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 2_000_000_000i64})).await;
        let worker = json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000});
        e.consumer("ORDERS", worker).await;
        write_json(&files, "ORDERS.json", json!({"name": "ORDERS", "storage": "memory"}));
        for i in 0..5 {
            let n = format!("S{i}");
            e.stream(json!({"name": n, "subjects": [format!("s{i}.>")]})).await;
            for chunk in (0..50_000).collect::<Vec<_>>().chunks(2000) {
                let mut acks = vec![];
                for j in chunk {
                    acks.push(
                        e.ctx
                            .publish(format!("s{i}.{}", j % 10), vec![b'x'; 100].into())
                            .await
                            .unwrap(),
                    );
                }
                for a in acks {
                    a.await.unwrap();
                }
            }
            write_json(&files, &format!("{n}.json"), json!({"name": n, "storage": "memory"}));
        }
        let load =
            crate::pyapps::PyLoad::start(e.server.url(), &dir.0, "ORDERS", "worker", 2, 6000, 300);
        load.until_processed(100).await;
        let t0 = std::time::Instant::now();
        let out = e.cli(&["apply", files.to_str().unwrap(), "--yes", "--parallel", p]);
        let took = t0.elapsed();
        assert_eq!(out.code, 0, "{out:?}");
        eprintln!("--parallel {p}: 6 changes in place (5 x 50,000 messages, ORDERS under load) took {took:?}");
        load.finish_exact(6000).await;
    }
}

/// The fleet of the issue's first test, in NACK YAML (one file, several
/// documents): P4 (an update), L3 (storage in place), LOCKED (preventUpdate,
/// changed: refused), and buckets: two unchanged, one history update, two
/// storage changes in place, one to create.
const FLEET_NACK: &str = r#"---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata: {name: p4}
spec: {name: P4, subjects: ["p4.>"], maxMsgs: 100}
---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata: {name: l3}
spec: {name: L3, subjects: ["l3.>"], storage: memory}
---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata: {name: locked}
spec: {name: LOCKED, subjects: ["locked.>"], maxMsgs: 10, preventUpdate: true}
---
apiVersion: jetstream.nats.io/v1beta2
kind: KeyValue
metadata: {name: ku0}
spec: {bucket: ku0, history: 1, storage: file}
---
apiVersion: jetstream.nats.io/v1beta2
kind: KeyValue
metadata: {name: ku1}
spec: {bucket: ku1, history: 2}
---
apiVersion: jetstream.nats.io/v1beta2
kind: KeyValue
metadata: {name: kh0}
spec: {bucket: kh0, history: 8}
---
apiVersion: jetstream.nats.io/v1beta2
kind: KeyValue
metadata: {name: ks0}
spec: {bucket: ks0, storage: memory}
---
apiVersion: jetstream.nats.io/v1beta2
kind: KeyValue
metadata: {name: ks1}
spec: {bucket: ks1, storage: memory, history: 5}
---
apiVersion: jetstream.nats.io/v1beta2
kind: KeyValue
metadata: {name: kc0}
spec: {bucket: kc0, history: 3, storage: memory}
"#;

/// One stream's state that a change must keep: messages, first and last
/// sequence, and each durable's (ack floor, pending).
async fn kept(e: &Env, stream: &str) -> Value {
    let (_, s) = e.js.stream_info(stream).await.unwrap();
    let mut durables = serde_json::Map::new();
    for c in e.js.consumer_names(stream).await.unwrap() {
        let (_, ci) = e.js.consumer_info(stream, &c).await.unwrap();
        durables.insert(c, json!([ci.ack_floor.stream_seq, ci.num_pending]));
    }
    json!({"messages": s.state.messages, "first": s.state.first_seq, "last": s.state.last_seq,
           "durables": durables})
}

/// The issue's fleet: 30 assets on one server (20 streams, 10 KV buckets)
/// from JSON files (the nats CLI's stream JSON, bare and under `config`,
/// and `nats kv add` options) and one NACK multi-document YAML file: 9
/// unchanged, 9 updates, 3 creates, 8 live changes (storage; limits to work
/// queue), 1 refused. The dry run's actions and exit codes (3 with the
/// refusal, 7 without it); then `--yes --skip-refused --parallel 4` under
/// nats-py publishers and pull workers on two of the live changes (L0's
/// storage, W0's retention): every asset ends as its file says, messages,
/// sequences, durables' positions and KV revisions kept, the apps exact;
/// and a second apply finds everything unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_of_30_assets_from_json_and_nack_yaml_applied_live_exactly() {
    let e = env().await;
    let dir = TempDir::new("apply-fleet");
    let files = dir.0.join("desired");
    let mut want: std::collections::BTreeMap<String, &str> = Default::default();
    // Unchanged: U0..U6 (U0, U1 as `nats stream info --json` prints them).
    for i in 0..7 {
        let n = format!("U{i}");
        let cfg = json!({"name": n, "subjects": [format!("u{i}.>")], "max_age": 60_000_000_000i64});
        e.stream(cfg.clone()).await;
        e.publish(&format!("u{i}.a"), "u", 10).await;
        let file = if i < 2 { e.js.stream_info_raw(&n).await.unwrap() } else { cfg };
        write_json(&files, &format!("u{i}.json"), file);
        want.insert(n, "unchanged");
    }
    // Updates: P0..P3 here, P4 in the YAML.
    let updates = [
        json!({"max_age": 3_600_000_000_000i64}),
        json!({"max_msgs": 500}),
        json!({"description": "fleet"}),
        json!({"subjects": ["p3.>", "p3x.>"]}),
    ];
    for i in 0..5 {
        let n = format!("P{i}");
        e.stream(json!({"name": n, "subjects": [format!("p{i}.>")]})).await;
        e.consumer(&n, json!({"durable_name": "w", "ack_policy": "explicit"})).await;
        e.publish(&format!("p{i}.a"), "p", 20).await;
        if let Some(u) = updates.get(i) {
            let mut f = json!({"name": n});
            f.as_object_mut().unwrap().extend(u.as_object().unwrap().clone());
            write_json(&files, &format!("p{i}.json"), f);
        }
        want.insert(n, "update");
    }
    // Live changes: L0 (under load, no messages yet), L1..L3 (20 messages,
    // durable w at 5 of them; L3 in the YAML), W0 (under load, to work queue).
    let worker = json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000});
    for n in ["L0", "W0"] {
        let l = n.to_lowercase();
        e.stream(json!({"name": n, "subjects": [format!("{l}.>")], "duplicate_window": 2_000_000_000i64})).await;
        e.consumer(n, worker.clone()).await;
        want.insert(n.into(), "change_in_place");
    }
    // Sorted first, so the loaded changes start in the first --parallel batch.
    write_json(&files, "a_l0.json", json!({"name": "L0", "storage": "memory"}));
    write_json(&files, "a_w0.json", json!({"name": "W0", "retention": "workqueue"}));
    for i in 1..4 {
        let n = format!("L{i}");
        e.stream(json!({"name": n, "subjects": [format!("l{i}.>")]})).await;
        e.consumer(&n, json!({"durable_name": "w", "ack_policy": "explicit"})).await;
        e.publish(&format!("l{i}.a"), "l", 20).await;
        if i < 3 {
            write_json(&files, &format!("l{i}.json"), json!({"name": n, "storage": "memory"}));
        }
        want.insert(n, "change_in_place");
    }
    // Durables part-way: 5 of 20 acknowledged on each P and L stream.
    for n in ["P0", "P1", "P2", "P3", "P4", "L1", "L2", "L3"] {
        let c = e.pull_consumer(n, "w").await;
        use futures::StreamExt;
        let mut batch = c.fetch().max_messages(5).messages().await.unwrap();
        while let Some(m) = batch.next().await {
            m.unwrap().double_ack().await.unwrap();
        }
    }
    // Creates: C0, C1 here (C1 bare), the bucket kc0 in the YAML, kc1 by options.
    write_json(&files, "c0.json", json!({"name": "C0", "subjects": ["c0.>"], "storage": "memory"}));
    write_json(&files, "c1.json", json!({"name": "C1", "subjects": ["c1.>"]}));
    write_json(&files, "kc1.json", json!({"kv": "kc1", "history": 2}));
    for n in ["C0", "C1", "KV_kc0", "KV_kc1"] {
        want.insert(n.into(), "create");
    }
    e.stream(json!({"name": "LOCKED", "subjects": ["locked.>"]})).await;
    want.insert("LOCKED".into(), "refused");
    // Buckets: ku0, ku1 unchanged; kh0, kh1 history, kt0 ttl (updates);
    // ks0, ks1, ks2 storage (live). Each with keys of several revisions.
    let buckets = [
        ("ku0", 1, "unchanged"),
        ("ku1", 2, "unchanged"),
        ("kh0", 1, "update"),
        ("kh1", 1, "update"),
        ("kt0", 1, "update"),
        ("ks0", 1, "change_in_place"),
        ("ks1", 3, "change_in_place"),
        ("ks2", 2, "change_in_place"),
    ];
    for (b, history, action) in buckets {
        e.stream(kv_stream(b, history)).await;
        let kv = e.ctx.get_key_value(b).await.unwrap();
        for r in 0..12 {
            kv.put(format!("k{}", r % 4), format!("{b}-{r}").into()).await.unwrap();
        }
        want.insert(format!("KV_{b}"), action);
    }
    write_json(&files, "kh1.json", json!({"kv": "kh1", "history": 4}));
    write_json(&files, "kt0.json", json!({"kv": "kt0", "ttl": "1h"}));
    write_json(&files, "ks2.json", json!({"config": {"name": "KV_ks2", "storage": "memory"}}));
    write(&files, "fleet.yaml", FLEET_NACK);
    assert_eq!(want.len(), 30, "the fleet: {want:?}");
    let f = files.to_str().unwrap();

    // The dry run: each asset's action; refused wins (3); without it, 7.
    let before = e.snapshot().await;
    let dry = e.cli(&["--json", "apply", f]);
    assert_eq!(dry.code, 3, "{dry:?}");
    let plan = dry.json();
    let want: std::collections::BTreeMap<String, String> =
        want.into_iter().map(|(k, v)| (k, v.into())).collect();
    assert_eq!(actions(&plan), want, "{plan:#}");
    assert_eq!(
        plan["summary"],
        json!({"unchanged": 9, "create": 4, "update": 8, "change_in_place": 8, "refused": 1, "not_in_files": 0}),
        "{plan:#}"
    );
    let dry = e.cli(&["--json", "apply", f, "--except", "LOCKED"]);
    assert_eq!(dry.code, 7, "{dry:?}");
    let text = e.cli(&["apply", f]);
    assert_eq!(text.code, 3, "{text:?}");
    assert!(
        text.stdout
            .contains("Summary: 9 unchanged, 4 create, 8 update, 8 change in place, 1 refused"),
        "{}",
        text.stdout
    );
    assert_eq!(e.snapshot().await, before, "a dry run changes nothing");
    let yes = e.cli(&["apply", f, "--yes", "--parallel", "4"]);
    assert_eq!(yes.code, 3, "a refusal stops it before its first write: {yes:?}");
    assert_eq!(e.snapshot().await, before);

    // What must survive.
    let mut keep = std::collections::BTreeMap::new();
    for (n, a) in &want {
        if !["L0", "W0"].contains(&n.as_str()) && a != "create" {
            keep.insert(n.clone(), kept(&e, n).await);
        }
    }
    let mut revisions = std::collections::BTreeMap::new();
    for (b, _, _) in buckets {
        let kv = e.ctx.get_key_value(b).await.unwrap();
        for k in 0..4 {
            let entry = kv.entry(format!("k{k}")).await.unwrap().unwrap();
            revisions.insert(format!("{b}/k{k}"), (entry.revision, entry.value.to_vec()));
        }
    }

    // Under load: nats-py publisher and two pull workers on L0 and on W0.
    let loads: Vec<_> = ["L0", "W0"]
        .iter()
        .map(|n| {
            let d = dir.0.join(format!("apps-{n}"));
            std::fs::create_dir_all(&d).unwrap();
            let l = n.to_lowercase();
            crate::pyapps::PyLoad::start_on(e.server.url(), &d, n, "worker", &l, 2, 1500, 150)
        })
        .collect();
    for l in &loads {
        l.until_processed(50).await;
    }
    let t0 = std::time::Instant::now();
    let out = e.cli(&["--json", "apply", f, "--yes", "--skip-refused", "--parallel", "4"]);
    eprintln!("the fleet applied in {:?}", t0.elapsed());
    assert_eq!(out.code, 0, "{out:?}");
    let result = line_of(&out, "apply_result");
    let outcomes: std::collections::BTreeMap<String, String> = result["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["stream"].as_str().unwrap().into(), a["outcome"].as_str().unwrap().into()))
        .collect();
    for (n, a) in &want {
        let o = match a.as_str() {
            "unchanged" => "unchanged",
            "update" => "updated",
            "create" => "created",
            "change_in_place" => "changed in place",
            _ => "skipped (refused)",
        };
        assert_eq!(outcomes[n], o, "{n}: {result:#}");
    }
    for l in loads {
        l.finish_exact(1500).await;
    }
    // The loads spanned their streams' changes: acknowledged publishes
    // before the first event of each change and after its last.
    let spans = spans(&out);
    for n in ["L0", "W0"] {
        let (from, to) = spans[n];
        let acks = crate::pyapps::lines(&dir.0.join(format!("apps-{n}/pub.jsonl")));
        let t = |l: &Value| l["t_ms"].as_u64().unwrap();
        assert!(acks.iter().any(|l| t(l) < from), "{n}: no publish before its change");
        assert!(acks.iter().any(|l| t(l) > to), "{n}: no publish after its change");
        let mut by_stream: std::collections::BTreeMap<String, usize> = Default::default();
        for l in &acks {
            *by_stream.entry(l["stream"].as_str().unwrap_or("?").into()).or_default() += 1;
        }
        eprintln!("{n}: change took {} ms; publishes acked by {by_stream:?}", to - from);
    }

    // Every asset as its file says.
    let raw = |n: &str| {
        let js = e.js.clone();
        let n = n.to_string();
        async move { js.stream_info_raw(&n).await.unwrap()["config"].clone() }
    };
    for n in ["L0", "L1", "L2", "L3", "C0", "KV_ks0", "KV_ks1", "KV_ks2", "KV_kc0"] {
        assert_eq!(raw(n).await["storage"], "memory", "{n}");
    }
    assert_eq!(raw("W0").await["retention"], "workqueue");
    assert_eq!(raw("P0").await["max_age"], 3_600_000_000_000i64);
    assert_eq!(raw("P1").await["max_msgs"], 500);
    assert_eq!(raw("P2").await["description"], "fleet");
    assert_eq!(raw("P3").await["subjects"], json!(["p3.>", "p3x.>"]));
    assert_eq!(raw("P4").await["max_msgs"], 100);
    assert_eq!(raw("KV_kh0").await["max_msgs_per_subject"], 8);
    assert_eq!(raw("KV_kh1").await["max_msgs_per_subject"], 4);
    assert_eq!(raw("KV_kt0").await["max_age"], 3_600_000_000_000i64);
    assert_eq!(raw("KV_ks1").await["max_msgs_per_subject"], 5, "history and storage at once");
    assert_eq!(raw("KV_kc0").await["max_msgs_per_subject"], 3);
    assert_eq!(raw("KV_kc1").await["max_msgs_per_subject"], 2);
    assert_eq!(raw("C1").await["subjects"], json!(["c1.>"]));
    assert_eq!(raw("LOCKED").await["max_msgs"], -1, "refused: left as it was");
    for n in ["L0", "L1", "L2", "L3", "W0", "KV_ks0", "KV_ks1", "KV_ks2"] {
        assert!(e.js.stream_info_opt(&format!("{n}_CUTOVER")).await.unwrap().is_none(), "{n}");
    }
    // Messages, sequences, durables' positions kept.
    for (n, k) in &keep {
        assert_eq!(&kept(&e, n).await, k, "{n} kept");
    }
    let (_, l0) = e.js.stream_info("L0").await.unwrap();
    assert_eq!((l0.state.messages, l0.state.last_seq), (1500, 1500), "one message a publish");
    let (_, w0) = e.js.stream_info("W0").await.unwrap();
    assert_eq!((w0.state.messages, w0.state.last_seq), (0, 1500), "a work queue: all consumed");
    for n in ["L0", "W0"] {
        assert!(e.js.consumer_info_opt(n, "worker").await.unwrap().is_some(), "{n}'s durable");
    }
    // KV: the same revisions and values; history a revision-checked update
    // still meets.
    for (b, _, _) in buckets {
        let kv = e.ctx.get_key_value(b).await.unwrap();
        for k in 0..4 {
            let entry = kv.entry(format!("k{k}")).await.unwrap().unwrap();
            assert_eq!(
                (entry.revision, entry.value.to_vec()),
                revisions[&format!("{b}/k{k}")],
                "{b}/k{k}"
            );
        }
        let last = revisions[&format!("{b}/k0")].0;
        kv.update("k0", "after".into(), last).await.unwrap_or_else(|err| panic!("{b}: {err}"));
    }

    // The second apply: everything unchanged (LOCKED still refused, left out).
    let again = e.cli(&["--json", "apply", f, "--except", "LOCKED"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.json()["summary"]["unchanged"], 29, "{again:?}");
    let yes = e.cli(&["--json", "apply", f, "--yes", "--skip-refused"]);
    assert_eq!(yes.code, 0, "{yes:?}");
    let outcomes: Vec<Value> = line_of(&yes, "apply_result")["assets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["stream"] != "LOCKED")
        .map(|a| a["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec![json!("unchanged"); 29], "{yes:?}");
}

/// The KV revision and value of `key` in the `CUTOVER` bucket.
async fn cutover_record(e: &Env, key: &str) -> Option<(u64, Value)> {
    let kv = e.ctx.get_key_value("CUTOVER").await.unwrap();
    let entry = kv.entry(key).await.unwrap()?;
    (entry.operation == async_nats::jetstream::kv::Operation::Put)
        .then(|| (entry.revision, serde_json::from_slice(&entry.value).unwrap()))
}

/// The runner killed during a fleet apply with --parallel 2 (five storage
/// changes in place, a create, an update), right after the third hop of
/// all retired its old stream: one asset is then fully changed (two when the
/// other under way writes its last step before the process ends), the
/// other begun one part-way, three not begun. `apply` again finishes them: every
/// asset ends right, and none is changed twice: the finished one is
/// untouched (its stream and its two migration journals are the same
/// records), the interrupted ones are resumed (their journals
/// keep their start), and each asset has one completed migration per hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_apply_killed_mid_way_then_applied_again_changes_each_asset_once() {
    let e = env().await;
    let dir = TempDir::new("apply-fleet-crash");
    let names: Vec<String> = (0..5).map(|i| format!("X{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        e.stream(json!({"name": n, "subjects": [format!("x{i}.>")]})).await;
        e.consumer(n, json!({"durable_name": "w", "ack_policy": "explicit"})).await;
        e.publish(&format!("x{i}.a"), n, 200).await;
        let c = e.pull_consumer(n, "w").await;
        use futures::StreamExt;
        let mut batch = c.fetch().max_messages(50).messages().await.unwrap();
        while let Some(m) = batch.next().await {
            m.unwrap().double_ack().await.unwrap();
        }
        write_json(&dir.0, &format!("{n}.json"), json!({"name": n, "storage": "memory"}));
    }
    e.stream(json!({"name": "UPX", "subjects": ["upx.>"]})).await;
    write_json(&dir.0, "upx.json", json!({"name": "UPX", "max_msgs": 77}));
    write_json(&dir.0, "newx.json", json!({"name": "NEWX", "subjects": ["newx.>"]}));
    let d = dir.0.to_str().unwrap();
    let run = |crash: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
        cmd.args(["--server", e.server.url(), "--json", "apply", d, "--yes"]);
        cmd.args(["--parallel", "2", "--lease-ttl", "2s"]);
        if let Some(at) = crash {
            cmd.env("NATS_CUTOVER_TEST_CRASH_AFTER", at);
        }
        let o = cmd.output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        }
    };
    let out = run(Some("retire#3"));
    assert_eq!(out.code, 86, "killed after the third hop retired: {out:?}");
    let dry = e.cli(&["--json", "apply", d]);
    assert_eq!(dry.code, 7, "{dry:?}");
    let plan = dry.json();
    let asset = |s: &str| {
        plan["assets"].as_array().unwrap().iter().find(|a| a["stream"] == s).unwrap().clone()
    };
    assert_eq!(asset("NEWX")["action"], "unchanged", "created before the live changes");
    assert_eq!(asset("UPX")["action"], "unchanged");
    let done: Vec<&String> = names.iter().filter(|n| asset(n)["action"] == "unchanged").collect();
    let resumed: Vec<&String> = names.iter().filter(|n| asset(n)["resume"] == true).collect();
    eprintln!("after the kill: done {done:?}, part-way {resumed:?}");
    // The other change under way when the hook exits may still write its
    // last step before the process ends: one or two are done, at most two
    // (--parallel 2) were begun, three were not.
    assert!((1..=2).contains(&done.len()), "one or two fully changed: {plan:#}");
    assert!(done.len() + resumed.len() <= 2, "at most two begun: {plan:#}");
    for n in &names {
        if !done.contains(&n) {
            assert_eq!(asset(n)["action"], "change_in_place", "{n}");
        }
    }
    // What the finished asset and the interrupted ones have on the server now.
    let hops = |n: &str| [format!("m.{n}.{n}_CUTOVER"), format!("m.{n}_CUTOVER.{n}")];
    let created = |n: String| {
        let js = e.js.clone();
        async move { js.stream_info_raw(&n).await.unwrap()["created"].clone() }
    };
    let finished: Vec<String> = done.iter().map(|n| n.to_string()).collect();
    let mut untouched = vec![];
    for n in &finished {
        untouched.push(created(n.clone()).await);
        for k in hops(n) {
            untouched.push(json!(cutover_record(&e, &k).await.expect("recorded").0));
        }
    }
    let mut started_at = std::collections::BTreeMap::new();
    for n in &resumed {
        for k in hops(n) {
            if let Some((_, j)) = cutover_record(&e, &k).await {
                started_at.insert(k, j["started_ms"].clone());
            }
        }
    }
    // The dead runner's leases lapse (2 s); until then the apply says so.
    let mut last = None;
    wait_until("apply to finish once the leases lapsed", Duration::from_secs(60), || {
        let o = run(None);
        let ok = o.code == 0;
        last = Some(o);
        async move { ok }
    })
    .await;
    let out = last.unwrap();
    let result = line_of(&out, "apply_result");
    let outcome = |s: &str| {
        result["assets"].as_array().unwrap().iter().find(|a| a["stream"] == s).unwrap()["outcome"]
            .clone()
    };
    assert_eq!(outcome("NEWX"), "unchanged", "{out:?}");
    assert_eq!(outcome("UPX"), "unchanged");
    for n in &names {
        let want = if finished.contains(n) { "unchanged" } else { "changed in place" };
        assert_eq!(outcome(n), want, "{n}: {out:?}");
    }
    // Every asset right: storage, messages, sequences, the durable's position.
    for n in &names {
        let (_, s) = e.js.stream_info(n).await.unwrap();
        assert_eq!(s.config.storage, cutover_core::model::StorageType::Memory, "{n}");
        assert_eq!((s.state.messages, s.state.first_seq, s.state.last_seq), (200, 1, 200), "{n}");
        let (_, c) = e.js.consumer_info(n, "w").await.unwrap();
        assert_eq!((c.ack_floor.stream_seq, c.num_pending), (50, 150), "{n}'s position");
        assert!(e.js.stream_info_opt(&format!("{n}_CUTOVER")).await.unwrap().is_none(), "{n}");
        // One completed migration per hop, each retired once.
        for k in hops(n) {
            let (_, j) = cutover_record(&e, &k).await.unwrap_or_else(|| panic!("{k}"));
            assert_eq!(j["phase"], "done", "{k}: {j}");
            // A retire the kill interrupted is journaled as begun (no end)
            // and done again on resume; one ends.
            let retires = j["steps"].as_array().unwrap().iter();
            let ended = retires.filter(|s| s["step"] == "retire" && !s["ended_ms"].is_null());
            assert_eq!(ended.count(), 1, "{k} retired once: {j}");
        }
        let (_, r) = cutover_record(&e, &format!("apply.{n}")).await.unwrap();
        assert_eq!(r["state"], "done", "{n}: {r}");
    }
    assert_eq!(e.js.stream_info_raw("UPX").await.unwrap()["config"]["max_msgs"], 77);
    // The finished asset was not touched again; the others were resumed, not begun again.
    let mut now = vec![];
    for n in &finished {
        now.push(created(n.clone()).await);
        for k in hops(n) {
            now.push(json!(cutover_record(&e, &k).await.unwrap().0));
        }
    }
    assert_eq!(
        now, untouched,
        "{finished:?}: their streams and journals as the killed run left them"
    );
    for (k, at) in &started_at {
        let (_, j) = cutover_record(&e, k).await.unwrap();
        assert_eq!(&j["started_ms"], at, "{k}: resumed, not begun again: {j}");
    }
    // And a third apply changes nothing.
    let before = e.snapshot().await;
    let again = run(None);
    assert_eq!(again.code, 0, "{again:?}");
    let outcomes: Vec<Value> = line_of(&again, "apply_result")["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec![json!("unchanged"); 7], "{again:?}");
    assert_eq!(e.snapshot().await, before);
}
