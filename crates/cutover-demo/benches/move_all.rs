//! A whole JetStream domain moved to another system under its names (issue
//! 27; not a test): MOVE_STREAMS streams and MOVE_KV KV buckets on a
//! standalone server (a leaf node with its own domain) moved to a fresh
//! 3-node loopback cluster (the hub) by `nats-cutover apply --from-server`,
//! each made R3 on the way (one file per asset: `num_replicas`/`replicas`
//! 3), under live load on MOVE_LOADED streams (the library's publisher on
//! the leaf, msg-ids and retries, MOVE_RATE msg/s each; one pull worker
//! each following its route on the hub), for each --parallel in
//! MOVE_PARALLEL. Per run: total time, the worst and median publisher
//! stall of the loaded streams, lost / twice, the runner's peak RSS, and a
//! dry run afterwards (exit 0: every asset as desired). The retry horizon
//! is MOVE_WINDOW_S (3 s; every stream's duplicate window and the
//! publishers' retries), which each hop waits on the cluster before its
//! commit. Writes target/bench/move_all.json (MOVE_OUT).
//!
//! `APPLY_BIN=target/release/nats-cutover cargo bench -p cutover-demo --bench move_all`;
//! knobs: MOVE_STREAMS (50), MOVE_KV (20), MOVE_LOADED (5), MOVE_MSGS (20),
//! MOVE_RATE (100), MOVE_WINDOW_S (3), MOVE_PARALLEL (`4,16`).

#[path = "common/mod.rs"]
mod common;

use cutover_demo::load::{Load, LoadConfig};
use cutover_nats::Js;
use cutover_testkit::LeafSystem;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Knobs {
    streams: usize,
    kv: usize,
    loaded: usize,
    msgs: u64,
    rate: u32,
    window_ns: i64,
    bin: PathBuf,
}

fn main() {
    let k = Knobs {
        streams: common::env_or("MOVE_STREAMS", 50),
        kv: common::env_or("MOVE_KV", 20),
        loaded: common::env_or("MOVE_LOADED", 5),
        msgs: common::env_or("MOVE_MSGS", 20),
        rate: common::env_or("MOVE_RATE", 100),
        window_ns: common::env_or::<i64>("MOVE_WINDOW_S", 3) * 1_000_000_000,
        bin: std::env::var("APPLY_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from("target/release/nats-cutover")),
    };
    assert!(
        k.bin.exists(),
        "APPLY_BIN {}: build it with cargo build --release -p nats-cutover",
        k.bin.display()
    );
    let parallel: Vec<u16> = common::env_list("MOVE_PARALLEL", "4,16");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut runs = vec![];
    for p in parallel {
        let r = rt.block_on(one_run(&k, p));
        eprintln!("{r}");
        runs.push(r);
    }
    let out = json!({ "server": cutover_testkit::PINNED_VERSION, "runs": runs });
    match std::env::var("MOVE_OUT") {
        Ok(p) => std::fs::write(p, serde_json::to_string_pretty(&out).unwrap()).unwrap(),
        Err(_) => common::write_json("move_all", &out),
    }
}

async fn one_run(k: &Knobs, parallel: u16) -> Value {
    let sys = LeafSystem::start(3).unwrap_or_else(|e| panic!("{e}"));
    let hub_urls = sys.hub_urls();
    let hub = async_nats::connect(hub_urls.split(',').collect::<Vec<_>>()).await.unwrap();
    let leaf = async_nats::connect(sys.leaf.url()).await.unwrap();
    let (hub_js, leaf_js) = (
        Js::new(hub.clone(), Duration::from_secs(10)),
        Js::new(leaf.clone(), Duration::from_secs(10)),
    );
    let linked = common::wait_for(Duration::from_secs(60), Duration::from_millis(100), || async {
        hub.request("$JS.leaf.API.INFO", "".into()).await.is_ok()
            && hub_js.account_info().await.is_ok()
    })
    .await;
    assert!(linked, "the leaf connection and the hub's meta leader");
    let ctx = async_nats::jetstream::new(leaf.clone());
    let dir = std::env::temp_dir().join(format!("bench-move-{}-{parallel}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let t = Instant::now();
    let mut streams = vec![];
    for i in 0..k.streams {
        let name = format!("S{i:03}");
        let subject = format!("s{i}");
        leaf_js.stream_create(&json!({"name": name, "subjects": [format!("{subject}.>")], "duplicate_window": k.window_ns})).await.unwrap();
        common::bulk(&ctx, k.msgs, |n| format!("{subject}.{}", n % 4)).await;
        std::fs::write(
            dir.join(format!("{name}.json")),
            json!({"name": name, "num_replicas": 3}).to_string(),
        )
        .unwrap();
        streams.push((name, subject));
    }
    for j in 0..k.kv {
        let b = format!("b{j:03}");
        leaf_js
            .stream_create(&json!({"name": format!("KV_{b}"), "subjects": [format!("$KV.{b}.>")],
            "max_msgs_per_subject": 1, "discard": "new", "allow_rollup_hdrs": true,
            "deny_delete": true, "allow_direct": true, "duplicate_window": k.window_ns}))
            .await
            .unwrap();
        common::bulk(&ctx, k.msgs, |n| format!("$KV.{b}.k{}", n % 4)).await;
        std::fs::write(
            dir.join(format!("KV_{b}.json")),
            json!({"kv": b, "replicas": 3}).to_string(),
        )
        .unwrap();
    }
    let setup_s = t.elapsed().as_secs_f64();
    let mut loads = vec![];
    for (name, subject) in streams.iter().take(k.loaded) {
        let durable = json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000u64, "max_ack_pending": 1000, "filter_subject": format!("{subject}.>"), "deliver_policy": "new"});
        leaf_js
            .consumer_create(name, "worker", &durable, cutover_nats::api::Action::Create)
            .await
            .unwrap();
        let cfg = LoadConfig {
            stream: name.clone(),
            consumer: "worker".into(),
            subject_prefix: subject.clone(),
            rate: k.rate,
            max_messages: u64::MAX,
            duration: Duration::from_secs(3600),
            workers: 1,
            processing: Duration::ZERO,
            retry_horizon: Duration::from_nanos(k.window_ns as u64),
            ..LoadConfig::default()
        };
        loads.push(Load::start_across(leaf.clone(), hub.clone(), cfg).await);
    }
    let warm = common::wait_for(Duration::from_secs(30), Duration::from_millis(20), || async {
        loads.iter().all(|l| l.processed() >= 20)
    })
    .await;
    assert!(warm, "the workloads did not start");
    let mut cmd = common::timed_command(&k.bin);
    let horizon = format!("{}s", k.window_ns / 1_000_000_000);
    let conn = ["--server", &hub_urls, "--from-server", sys.leaf.url()];
    cmd.args(conn).args(["--json", "apply"]).arg(&dir);
    cmd.args([
        "--yes",
        "--repoint-publishers",
        "--retry-horizon",
        &horizon,
        "--parallel",
        &parallel.to_string(),
    ]);
    let t = Instant::now();
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let apply_s = t.elapsed().as_secs_f64();
    let code = out.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss_kib = common::peak_rss_kib(&stderr);
    let mut stalls = BTreeMap::new();
    let (mut lost, mut twice, mut published) = (0u64, 0usize, 0u64);
    for ((name, _), mut l) in streams.iter().zip(loads) {
        l.finish_publishing().await;
        l.drain(Duration::from_secs(60)).await;
        let r = l.stop().await;
        lost += r.lost_count();
        twice += r.duplicated.len();
        published += r.published;
        stalls.insert(name.clone(), (r.max_publish_stall_ms * 10.0).round() / 10.0);
    }
    let result = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["kind"] == "apply_result");
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut move_ms = vec![];
    for x in result.iter().flat_map(|r| r["assets"].as_array().cloned().unwrap_or_default()) {
        let o = x["outcome"].as_str().unwrap_or("?").to_string();
        if o == "moved" {
            move_ms.push(x["ms"].as_f64().unwrap_or(0.0));
        }
        *outcomes.entry(o).or_default() += 1;
    }
    let again = std::process::Command::new(&k.bin)
        .args(conn)
        .args(["--json", "apply"])
        .arg(&dir)
        .args(["--repoint-publishers", "--parallel", "16"])
        .output()
        .unwrap();
    let (_, s0) = hub_js.stream_info("S000").await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let worst = stalls.values().cloned().fold(0.0, f64::max);
    let stall_values: Vec<f64> = stalls.values().cloned().collect();
    json!({
        "from": "standalone (leaf domain)", "to": "3-node cluster (hub domain), R3",
        "parallel": parallel, "assets": k.streams + k.kv, "streams": k.streams, "kv": k.kv,
        "loaded": k.loaded, "rate": k.rate, "msgs": k.msgs, "retry_horizon_s": k.window_ns / 1_000_000_000,
        "setup_s": (setup_s * 10.0).round() / 10.0,
        "apply_s": (apply_s * 100.0).round() / 100.0, "exit_code": code,
        "error": if code == 0 { Value::Null } else { json!(stderr.lines().rev().take(5).collect::<Vec<_>>()) },
        "peak_rss_kib": rss_kib,
        "worst_stall_ms": worst,
        "median_stall_ms": if stall_values.is_empty() { Value::Null } else { json!(common::median(stall_values)) },
        "stall_ms_by_asset": stalls,
        "published": published, "lost": lost, "twice": twice,
        "outcomes": outcomes,
        "move_ms_max": move_ms.iter().cloned().fold(0.0, f64::max),
        "move_ms_median": if move_ms.is_empty() { Value::Null } else { json!(common::median(move_ms)) },
        "dry_run_after_exit_code": again.status.code(),
        "s000_replicas_on_hub": s0.config.num_replicas,
        "load_after": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split(' ').next().unwrap_or("").to_string(),
    })
}
