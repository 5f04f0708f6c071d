use crate::common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn plan_explains_a_safe_cutover_and_changes_nothing() {
    let e = env().await;
    orders(&e).await;
    let before = e.snapshot().await;
    let dir = e.server.dir().join("out");
    std::fs::create_dir_all(&dir).unwrap();
    let toml_path = dir.join("plan.toml");
    let out = e.cli(&move_args(&["plan"], "A", "B", "C", &["--out", toml_path.to_str().unwrap()]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Verdict: SAFE"), "{out:?}");
    assert!(out.stdout.contains("consumer pause (2.11+)"), "{out:?}");
    assert!(out.stdout.contains("F = delivered.stream_seq"), "{out:?}");
    assert!(out.stdout.contains("ack_wait × (max_pending + 1) is not a bound"), "{out:?}");
    // A pull application bound by name is told it must be repointed.
    assert!(out.stdout.contains("must be repointed to B"), "{out:?}");
    let toml_text = std::fs::read_to_string(&toml_path).unwrap();
    assert!(toml_text.contains("from = \"A\""), "{toml_text}");
    let j = e.cli(&move_args(&["plan", "--json"], "A", "B", "C", &[])).json();
    assert_eq!(j["safe"], true);
    assert_eq!(j["format"], 1);
    assert_eq!(j["b_config"]["sources"], json!([{"name": "A"}]));
    assert_eq!(j["b_final_subjects"], json!(["orders.>"]));
    assert!(j["b_config"]["duplicate_window"].as_i64().unwrap() >= 120_000_000_000);
    assert_eq!(j["server_version"], json!({"major": 2, "minor": 15, "patch": 1}));
    assert_eq!(e.snapshot().await, before, "plan changed the server");
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_options_may_come_before_the_subcommand_and_all_consumers_works() {
    let e = env().await;
    orders(&e).await;
    e.consumer(
        "A",
        json!({"durable_name": "D", "ack_policy": "explicit", "filter_subject": "orders.us"}),
    )
    .await;
    let out = cli(&[
        "--server",
        e.server.url(),
        "--json",
        "plan",
        "--from",
        "A",
        "--to",
        "B",
        "--all-consumers",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let names: Vec<String> = out.json()["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["C", "D"]);
    let out =
        cli(&["plan", "--from", "A", "--to", "B", "--all-consumers", "--server", e.server.url()]);
    assert_eq!(out.code, 0, "{out:?}");
    // Moving only C would leave durable D on a stream that receives nothing new.
    let out = cli(&move_args(&["plan"], "A", "B", "C", &["--server", e.server.url()]));
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("durable D on A is not being moved"), "{out:?}");
    // So would a stream that sources A.
    e.stream(json!({"name": "DOWN", "sources": [{"name": "A"}]})).await;
    let out =
        cli(&["plan", "--from", "A", "--to", "B", "--all-consumers", "--server", e.server.url()]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("stream DOWN sources or mirrors A"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_maps_filters_through_an_existing_b_source_transform() {
    let e = env().await;
    orders(&e).await;
    e.stream(json!({"name": "B", "duplicate_window": 120_000_000_000i64, "allow_direct": true,
        "sources": [{"name": "A", "subject_transforms": [{"src": "orders.>", "dest": "v2.orders.>"}]}]})).await;
    let out = e.cli(&move_args(&["plan", "--json"], "A", "B", "C", &[]));
    let j = out.json();
    assert_eq!(j["consumers"][0]["b_filters"], json!(["v2.orders.>"]), "{j:#}");
    // Without the same stream-level transform, direct publishes after the cut-over
    // would keep their original subjects: refused.
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("identical stream subject_transform"), "{out:?}");
}

/// A reviewed plan file is what `run --plan` executes.
#[tokio::test(flavor = "multi_thread")]
async fn run_executes_a_reviewed_plan_file() {
    let e = env().await;
    orders(&e).await;
    let dir = e.server.dir().join("out");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plan.toml");
    let out = e.cli(&move_args(&["plan"], "A", "B", "C", &["--out", path.to_str().unwrap()]));
    assert_eq!(out.code, 0, "{out:?}");
    let out = e.cli(&["--json", "run", "--plan", path.to_str().unwrap(), "--yes"]);
    assert_eq!(out.code, 0, "{out:?}");
    let last: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["journal"]["phase"], "done");
    assert_eq!(last["journal"]["plan"]["from"], "A");
    let (_, b) = e.js.consumer_info("B", "C").await.unwrap();
    assert_eq!(b.num_pending, 10, "the durable on B starts before the 10 unconsumed messages");
    std::fs::write(&path, "not a plan").unwrap();
    let out = e.cli(&["run", "--plan", path.to_str().unwrap(), "--yes"]);
    assert_eq!(out.code, 2, "{out:?}");
}
