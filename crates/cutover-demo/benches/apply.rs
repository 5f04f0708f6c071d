//! `nats-cutover apply` on a fleet (issue 26; not a test): APPLY_STREAMS
//! streams and APPLY_KV KV buckets on one fresh server or a fresh 3-node
//! loopback cluster (R3 there), APPLY_LIVE of them needing a live change
//! (storage file to memory: streams and buckets in proportion), half the
//! others an update the server takes (max_age; a bucket's history), half
//! unchanged; each asset holds APPLY_MSGS messages. APPLY_LOADED of the
//! live-change streams carry the live workload (`cutover_demo::load`: a
//! publisher with msg-ids and retries at APPLY_RATE msg/s, one pull worker
//! following its route). The release binary (APPLY_BIN) applies the files
//! (`apply DIR --yes --parallel P`) under `/usr/bin/time -v`.
//!
//! Per run: the apply's wall time, each loaded asset's longest publish
//! (acknowledgement wait, retries included), lost and twice-processed
//! messages, the runner's peak RSS, each asset's outcome, and whether a
//! dry run afterwards finds everything unchanged (exit 0).
//!
//! `APPLY_BIN=target/release/nats-cutover cargo bench -p cutover-demo --bench apply`;
//! scripts/bench-apply.sh builds and runs it and writes docs/benchmarks.md.
//! Knobs: APPLY_STREAMS (150), APPLY_KV (50), APPLY_LIVE (40), APPLY_LOADED
//! (10), APPLY_MSGS (20), APPLY_RATE (100), APPLY_WINDOW_S (3: every
//! asset's duplicate window, which is the retry horizon each hop waits on a
//! cluster, twice a change; the nats clients' 2 min makes a cluster's
//! change take over 4 min), APPLY_PARALLEL (`1,4,16`), APPLY_NODES (`1,3`),
//! APPLY_CLUSTER_STREAMS, _KV, _LIVE, _LOADED (the cluster's fleet, by
//! default the same). Writes target/bench/apply.json (APPLY_OUT).

#[path = "common/mod.rs"]
mod common;

use cutover_demo::load::{Load, LoadConfig};
use cutover_nats::Js;
use cutover_testkit::{Cluster, NatsServer, PINNED_VERSION};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Knobs {
    streams: usize,
    kv: usize,
    live: usize,
    loaded: usize,
    msgs: u64,
    rate: u32,
    /// Every asset's duplicate window, the retry horizon each hop waits on a
    /// cluster (docs/in-place.md).
    window_ns: i64,
    bin: PathBuf,
}

fn main() {
    let k = Knobs {
        streams: common::env_or("APPLY_STREAMS", 150),
        kv: common::env_or("APPLY_KV", 50),
        live: common::env_or("APPLY_LIVE", 40),
        loaded: common::env_or("APPLY_LOADED", 10),
        msgs: common::env_or("APPLY_MSGS", 20),
        rate: common::env_or("APPLY_RATE", 100),
        window_ns: common::env_or::<i64>("APPLY_WINDOW_S", 3) * 1_000_000_000,
        bin: std::env::var("APPLY_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| cutover_testkit::repo_root().join("target/release/nats-cutover")),
    };
    assert!(
        k.bin.exists(),
        "APPLY_BIN {}: build it with cargo build --release -p nats-cutover",
        k.bin.display()
    );
    let parallel: Vec<u16> = common::env_list("APPLY_PARALLEL", "1,4,16");
    let nodes: Vec<usize> = common::env_list("APPLY_NODES", "1,3");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut rows = vec![];
    for &n in &nodes {
        // The cluster's fleet may be smaller (APPLY_CLUSTER_*): each change
        // there waits two retry horizons.
        let c = |name: &str, d: usize| {
            if n == 1 {
                d
            } else {
                common::env_or(&format!("APPLY_CLUSTER_{name}"), d)
            }
        };
        let k = Knobs {
            streams: c("STREAMS", k.streams),
            kv: c("KV", k.kv),
            live: c("LIVE", k.live),
            loaded: c("LOADED", k.loaded),
            bin: k.bin.clone(),
            ..k
        };
        for &p in &parallel {
            let row = rt.block_on(one_run(&k, n, p));
            eprintln!("{n} node(s), --parallel {p}: {row}");
            rows.push(row);
        }
    }
    let out = json!({"server": PINNED_VERSION, "msgs_per_asset": k.msgs, "rate_per_loaded": k.rate,
        "window_s": k.window_ns / 1_000_000_000, "runs": rows});
    match std::env::var("APPLY_OUT") {
        Ok(p) => std::fs::write(p, serde_json::to_string_pretty(&out).unwrap()).unwrap(),
        Err(_) => common::write_json("apply", &out),
    }
}

/// A run's servers; they stop when this is dropped.
enum Servers {
    One(NatsServer),
    Cluster(Cluster),
}

impl Servers {
    fn urls(&self) -> String {
        match self {
            Servers::One(s) => s.url().to_string(),
            Servers::Cluster(c) => c.urls(),
        }
    }
}

/// What one asset is and what its file asks.
struct Asset {
    stream: String,
    /// Where its messages go (`{subject}.{i % 4}`).
    subject: String,
    config: Value,
    file: Value,
    want: &'static str,
}

fn fleet(k: &Knobs, replicas: usize) -> Vec<Asset> {
    let total = k.streams + k.kv;
    let live_kv = k.live * k.kv / total.max(1);
    let live_streams = k.live - live_kv;
    let mut out = vec![];
    for i in 0..k.streams {
        let name = format!("S{i:03}");
        let subject = format!("s{i}");
        let config = json!({"name": name, "subjects": [format!("{subject}.>")], "num_replicas": replicas, "duplicate_window": k.window_ns});
        let (file, want) = if i < live_streams {
            (json!({"name": name, "storage": "memory"}), "changed in place")
        } else if i % 2 == 0 {
            (json!({"name": name, "subjects": [format!("{subject}.>")]}), "unchanged")
        } else {
            (json!({"name": name, "max_age": 3_600_000_000_000i64}), "updated")
        };
        out.push(Asset { stream: name, subject, config, file, want });
    }
    for j in 0..k.kv {
        let b = format!("b{j:03}");
        let config = json!({"name": format!("KV_{b}"), "subjects": [format!("$KV.{b}.>")],
            "max_msgs_per_subject": 1, "discard": "new", "allow_rollup_hdrs": true,
            "deny_delete": true, "allow_direct": true, "duplicate_window": k.window_ns,
            "num_replicas": replicas});
        let (file, want) = if j < live_kv {
            (json!({"kv": b, "storage": "memory"}), "changed in place")
        } else if j % 2 == 0 {
            (json!({"kv": b, "history": 1}), "unchanged")
        } else {
            (json!({"kv": b, "history": 5}), "updated")
        };
        out.push(Asset {
            stream: format!("KV_{b}"),
            subject: format!("$KV.{b}.k"),
            config,
            file,
            want,
        });
    }
    out
}

async fn one_run(k: &Knobs, nodes: usize, parallel: u16) -> Value {
    let servers = match nodes {
        1 => Servers::One(NatsServer::start()),
        n => Servers::Cluster(Cluster::start(n).unwrap_or_else(|e| panic!("cluster: {e}"))),
    };
    let urls = servers.urls();
    let client = async_nats::connect(urls.split(',').collect::<Vec<_>>()).await.expect("connect");
    let js = Js::new(client.clone(), Duration::from_secs(10));
    let ctx = async_nats::jetstream::new(client.clone());
    let replicas = if nodes == 1 { 1 } else { 3 };
    let assets = fleet(k, replicas);
    let dir =
        std::env::temp_dir().join(format!("bench-apply-{}-{nodes}-{parallel}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let t = Instant::now();
    for a in &assets {
        // A cluster's first replicated stream waits for its meta leader,
        // and a new stream's leader may not answer at once.
        let created =
            common::wait_for(Duration::from_secs(60), Duration::from_millis(100), || async {
                js.stream_create(&a.config).await.is_ok()
                    || js.stream_info_opt(&a.stream).await.ok().flatten().is_some()
            })
            .await;
        assert!(created, "{}: not created", a.stream);
        // The first message, tried again until the new stream's leader
        // acknowledges it (a msg-id: stored once).
        let ok = common::wait_for(Duration::from_secs(30), Duration::from_millis(100), || async {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", format!("{}-first", a.stream).as_str());
            let subject = format!("{}.first", a.subject);
            match ctx.publish_with_headers(subject, h, bytes::Bytes::new()).await {
                Ok(ack) => ack.await.is_ok(),
                Err(_) => false,
            }
        })
        .await;
        assert!(ok, "{}: no first message", a.stream);
        common::bulk(&ctx, k.msgs.saturating_sub(1), |i| format!("{}.{}", a.subject, i % 4)).await;
        std::fs::write(dir.join(format!("{}.json", a.stream)), a.file.to_string()).unwrap();
    }
    let setup_s = t.elapsed().as_secs_f64();
    // The live workloads, on the first APPLY_LOADED live-change streams.
    let loaded: Vec<&Asset> = assets
        .iter()
        .filter(|a| a.want == "changed in place" && a.stream.starts_with('S'))
        .take(k.loaded)
        .collect();
    let mut loads = vec![];
    for a in &loaded {
        let durable = json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000u64, "max_ack_pending": 1000, "filter_subject": format!("{}.>", a.subject), "deliver_policy": "new"});
        js.consumer_create(&a.stream, "worker", &durable, cutover_nats::api::Action::Create)
            .await
            .unwrap();
        let cfg = LoadConfig {
            stream: a.stream.clone(),
            consumer: "worker".into(),
            subject_prefix: a.subject.clone(),
            rate: k.rate,
            max_messages: u64::MAX,
            duration: Duration::from_secs(3600),
            workers: 1,
            processing: Duration::ZERO,
            retry_horizon: Duration::from_nanos(k.window_ns as u64),
            ..LoadConfig::default()
        };
        loads.push(Load::start_tagged(client.clone(), cfg, &format!("{}-", a.stream)).await);
    }
    let warm = common::wait_for(Duration::from_secs(30), Duration::from_millis(20), || async {
        loads.iter().all(|l| l.processed() >= 20)
    })
    .await;
    assert!(warm, "the workloads did not start");
    // The apply, under /usr/bin/time -v for the runner's peak RSS.
    let mut cmd = common::timed_command(&k.bin);
    cmd.args(["--server", &urls, "--json", "apply"]).arg(&dir);
    cmd.args(["--yes", "--parallel", &parallel.to_string()]);
    let t = Instant::now();
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let apply_s = t.elapsed().as_secs_f64();
    let code = out.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss_kib = common::peak_rss_kib(&stderr);
    let mut stalls = BTreeMap::new();
    let (mut lost, mut twice, mut failures, mut published) = (0u64, 0usize, 0u64, 0u64);
    for (a, mut l) in loaded.iter().zip(loads) {
        l.finish_publishing().await;
        l.drain(Duration::from_secs(60)).await;
        let mut r = l.stop().await;
        r.count_pending(&js, &a.stream, "worker").await;
        lost += r.lost_count();
        twice += r.duplicated.len();
        failures += r.publish_failures;
        published += r.published;
        stalls.insert(a.stream.clone(), (r.max_publish_stall_ms * 10.0).round() / 10.0);
    }
    let result = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["kind"] == "apply_result");
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut wrong = vec![];
    let mut live_ms = vec![];
    if let Some(r) = &result {
        for x in r["assets"].as_array().unwrap() {
            let o = x["outcome"].as_str().unwrap_or("?").to_string();
            let s = x["stream"].as_str().unwrap_or("?");
            if let Some(a) = assets.iter().find(|a| a.stream == s) {
                if a.want != o {
                    wrong.push(format!("{s}: {o}"));
                }
            }
            if o == "changed in place" {
                live_ms.push(x["ms"].as_f64().unwrap_or(0.0));
            }
            *outcomes.entry(o).or_default() += 1;
        }
    }
    // Afterwards a dry run finds every asset as its file says.
    let again = std::process::Command::new(&k.bin)
        .args(["--server", &urls, "--json", "apply"])
        .arg(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let worst = stalls.values().cloned().fold(0.0, f64::max);
    let stall_values: Vec<f64> = stalls.values().cloned().collect();
    json!({
        "nodes": nodes, "replicas": replicas, "parallel": parallel, "assets": assets.len(),
        "streams": k.streams, "kv": k.kv, "live": k.live, "loaded": loaded.len(),
        "setup_s": (setup_s * 10.0).round() / 10.0,
        "apply_s": (apply_s * 100.0).round() / 100.0, "exit_code": code,
        "error": if code == 0 { Value::Null } else { json!(stderr.lines().rev().take(5).collect::<Vec<_>>()) },
        "peak_rss_kib": rss_kib,
        "worst_stall_ms": worst,
        "median_stall_ms": if stall_values.is_empty() { Value::Null } else { json!(common::median(stall_values)) },
        "stall_ms_by_asset": stalls,
        "published": published, "lost": lost, "twice": twice, "publish_failures": failures,
        "outcomes": outcomes, "wrong_outcomes": wrong,
        "live_change_ms_max": live_ms.iter().cloned().fold(0.0, f64::max),
        "live_change_ms_median": if live_ms.is_empty() { Value::Null } else { json!(common::median(live_ms)) },
        "dry_run_after_exit_code": again.status.code(),
        "load_after": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split(' ').next().unwrap_or("").to_string(),
    })
}
