//! The cut-over benchmark (not a test): the live workload at a fixed rate, cut
//! over mid-run on a fresh pinned server, several times. Reports lost,
//! duplicated, max publisher stall, max consumer gap, each step's duration and
//! the translation's gets; writes JSON to target/bench/cutover.json (in
//! place: in_place.json).
//!
//! `cargo bench -p cutover-demo --bench cutover` (release build). Knobs through the
//! environment: BENCH_RATE (5000), BENCH_WORKERS (8), BENCH_SECONDS (9),
//! BENCH_RUNS (3), BENCH_PROCESSING_US (1000), BENCH_PRELOAD (0: messages in
//! the stream before the durable, which starts after them), BENCH_IN_PLACE
//! (unset: a move to ORDERS_V2; `storage=memory[,retention=workqueue...]`: an
//! in-place change through ORDERS_CUTOVER, with the plan's estimate);
//! BENCH_MODES (drain,fence: each run cuts over once in each mode, on its own
//! server, and the consumer gap of each handoff is reported side by side);
//! BENCH_PUSH (1: the durable is a push consumer with a deliver group and the
//! workers push subscribers, drain mode only; writes push.json);
//! BENCH_CLUSTER (0: one server per run; 3: a fresh 3-node loopback cluster
//! per run, the stream and so B with that many replicas; writes cluster.json);
//! BENCH_RETRY_HORIZON_S (120: the publisher's, and the run's --retry-horizon,
//! which each hop of an in-place change on a cluster waits before its commit).

use cutover_core::plan::Mode;
use cutover_demo::load::LoadConfig;
use cutover_demo::scenario::{live_cutover, Outcome, ScenarioConfig};
use cutover_nats::engine::events::NoSink;
use cutover_testkit::{Cluster, NatsServer, PINNED_VERSION};
use std::time::Duration;

fn env_or<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The benchmark's knobs, from the environment.
struct Knobs {
    rate: u32,
    workers: usize,
    seconds: u64,
    runs: usize,
    processing: Duration,
    modes: Vec<Mode>,
    preload: u64,
    in_place: Option<serde_json::Map<String, serde_json::Value>>,
    push: bool,
    cluster: usize,
    retry_horizon: Duration,
}

/// `k=v,k=v` as stream settings (a value is JSON when it reads as JSON).
fn settings(spec: &str) -> serde_json::Map<String, serde_json::Value> {
    spec.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let v = serde_json::from_str(v).unwrap_or_else(|_| serde_json::json!(v));
            (k.trim().to_string(), v)
        })
        .collect()
}

impl Knobs {
    fn from_env() -> Self {
        Self {
            rate: env_or("BENCH_RATE", 5000),
            workers: env_or("BENCH_WORKERS", 8),
            seconds: env_or("BENCH_SECONDS", 9),
            runs: env_or("BENCH_RUNS", 3),
            processing: Duration::from_micros(env_or("BENCH_PROCESSING_US", 1000)),
            preload: env_or("BENCH_PRELOAD", 0),
            in_place: std::env::var("BENCH_IN_PLACE").ok().map(|s| settings(&s)),
            push: env_or("BENCH_PUSH", 0u8) == 1,
            cluster: env_or("BENCH_CLUSTER", 0),
            retry_horizon: Duration::from_secs(env_or("BENCH_RETRY_HORIZON_S", 120)),
            modes: std::env::var("BENCH_MODES")
                .unwrap_or_else(|_| "drain,fence".into())
                .split(',')
                .map(|m| match m.trim() {
                    "fence" => Mode::Fence,
                    _ => Mode::Drain,
                })
                .collect(),
        }
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` would pass nothing
    // useful either: this target only runs when asked.
    let k = Knobs::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut all = vec![];
    for &mode in &k.modes {
        let outcomes: Vec<Outcome> = (0..k.runs).map(|run| run_once(&rt, &k, run, mode)).collect();
        print_table(&k, &outcomes, mode);
        all.push((mode, outcomes));
    }
    write_json(&k, &all);
    let bad = all.iter().flat_map(|(_, o)| o).any(|o| !o.verified);
    if bad {
        eprintln!("NOT VERIFIED in at least one run");
        std::process::exit(1);
    }
}

/// A run's servers: one fresh server, or a fresh loopback cluster; they
/// stop when this is dropped.
enum Servers {
    One(NatsServer),
    Cluster(Cluster),
}

impl Servers {
    fn start(k: &Knobs) -> Self {
        match k.cluster {
            0 => Servers::One(NatsServer::start()),
            n => Servers::Cluster(Cluster::start(n).unwrap_or_else(|e| panic!("cluster: {e}"))),
        }
    }

    fn urls(&self) -> Vec<String> {
        match self {
            Servers::One(s) => vec![s.url().to_string()],
            Servers::Cluster(c) => c.urls().split(',').map(String::from).collect(),
        }
    }
}

/// Until the cluster can create a replicated stream (its JetStream meta
/// leader is elected): a probe stream created and deleted.
async fn until_replicated_streams(client: &async_nats::Client, replicas: usize) {
    let js = cutover_nats::Js::new(client.clone(), Duration::from_secs(5));
    let probe =
        serde_json::json!({"name": "PROBE", "subjects": ["probe.>"], "num_replicas": replicas});
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while js.stream_create(&probe).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "no replicated stream within 60 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    js.stream_delete("PROBE").await.expect("delete the probe stream");
}

/// One run on fresh servers: the live cut-over, and a line on stderr.
fn run_once(rt: &tokio::runtime::Runtime, k: &Knobs, run: usize, mode: Mode) -> Outcome {
    let servers = Servers::start(k);
    let outcome = rt.block_on(async {
        let client = async_nats::connect(servers.urls()).await.expect("connect");
        if k.cluster > 0 {
            until_replicated_streams(&client, k.cluster).await;
        }
        let mut cfg = scenario(k, mode);
        cfg.connect = Some(cutover_nats::connect::ConnectOptions {
            server: Some(servers.urls().join(",")),
            ..Default::default()
        });
        live_cutover(client, cfg, &NoSink).await.expect("scenario")
    });
    let l = &outcome.load;
    let c = &outcome.journal.consumers[0];
    eprintln!(
        "{} run {}: published {} processed {} lost {} pending on B {} duplicated {} | publisher stall {:.1} ms (retried {:.1} ms) | consumer gap {:.1} ms, handoff {:.1} ms, steady {:.2} ms | drain {} ms | gets {} | cut-over {:.1} ms",
        mode.as_str(), run + 1, l.published, l.processed_total, l.lost_count(), l.pending_on_b, l.duplicated.len(), l.max_publish_stall_ms, l.max_retried_publish_ms, l.max_consumer_gap_ms, outcome.handoff_gap_ms, outcome.steady_gap_ms,
        c.drain_ms.unwrap_or(0), c.translate_gets.unwrap_or(0), outcome.cutover_ms
    );
    outcome
}

/// The workload the knobs ask for, cut over a third of the way in.
fn scenario(k: &Knobs, mode: Mode) -> ScenarioConfig {
    ScenarioConfig {
        connect: None,
        load: LoadConfig {
            stream: "ORDERS".into(),
            consumer: "worker".into(),
            subject_prefix: "orders".into(),
            rate: k.rate,
            max_messages: k.rate as u64 * k.seconds * 2,
            duration: Duration::from_secs(k.seconds),
            workers: k.workers,
            processing: k.processing,
            batch: 32,
            retry_horizon: k.retry_horizon,
            protocol: false,
            push: k.push,
        },
        new_stream: if k.in_place.is_some() { "ORDERS_CUTOVER" } else { "ORDERS_V2" }.into(),
        strategy: cutover_core::plan::Strategy::Source,
        cutover_at: Duration::from_millis(k.seconds * 1000 / 3),
        ack_wait: Duration::from_secs(30),
        preload: k.preload,
        in_place: k.in_place.clone(),
        mode,
        replicas: k.cluster.max(1) as u32,
    }
}

/// The Markdown table on stdout: each measure's median and max over the runs.
fn print_table(k: &Knobs, outcomes: &[Outcome], mode: Mode) {
    let Knobs { rate, workers, seconds, runs, processing, preload, in_place, .. } = k;
    let mode = mode.as_str();
    let mut steps: Vec<String> = vec![];
    for (s, _) in outcomes[0].step_durations() {
        if !steps.contains(&s) {
            steps.push(s);
        }
    }
    let mut what = match in_place {
        Some(m) => format!("in place ({m:?}), {preload} messages preloaded"),
        None => format!("move, mode {mode}, {preload} messages preloaded"),
    };
    if k.cluster > 0 {
        what += &format!(", {}-node cluster, R{} streams", k.cluster, k.cluster);
    }
    println!("\n## Cut-over benchmark: {what}; {rate} msg/s, {workers} workers x {processing:?}/msg, batch 32, ack_wait 30s, nats-server {PINNED_VERSION}, {runs} runs of {seconds}s\n");
    println!("| measure | median | max |");
    println!("|---|---|---|");
    let row = |name: &str, f: &dyn Fn(&Outcome) -> f64, unit: &str| {
        let v: Vec<f64> = outcomes.iter().map(f).collect();
        let max = v.iter().cloned().fold(f64::MIN, f64::max);
        println!("| {name} | {:.1}{unit} | {:.1}{unit} |", median(v), max);
    };
    row("published", &|o| o.load.published as f64, "");
    row("lost", &|o| o.load.lost_count() as f64, "");
    row(
        "pending on B when the workers stopped (late, not lost)",
        &|o| o.load.pending_on_b as f64,
        "",
    );
    row("duplicated", &|o| o.load.duplicated.len() as f64, "");
    row("max publisher stall", &|o| o.load.max_publish_stall_ms, " ms");
    row("max stall of a retried publish (subject move)", &|o| o.load.max_retried_publish_ms, " ms");
    row("max consumer gap", &|o| o.load.max_consumer_gap_ms, " ms");
    row("consumer gap of the handoff (overlapping move_consumers)", &|o| o.handoff_gap_ms, " ms");
    row("steady-state gap between two processed messages (median)", &|o| o.steady_gap_ms, " ms");
    row("translation gets", &|o| o.journal.consumers[0].translate_gets.unwrap_or(0) as f64, "");
    row("consumer drain", &|o| o.journal.consumers[0].drain_ms.unwrap_or(0) as f64, " ms");
    row("whole cut-over", &|o| o.cutover_ms, " ms");
    if in_place.is_some() {
        row("plan's estimate of both copies", &|o| o.estimate_ms.unwrap_or(0) as f64, " ms");
    }
    for s in &steps {
        row(
            &format!("step {s}"),
            &|o| {
                // (In place: both hops together.)
                o.step_durations().into_iter().filter(|(n, _)| n == s).map(|(_, ms)| ms).sum()
            },
            " ms",
        );
    }
}

/// The runs as JSON, to target/bench/cutover.json.
fn write_json(k: &Knobs, all: &[(Mode, Vec<Outcome>)]) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    let summary: Vec<serde_json::Value> = all
        .iter()
        .flat_map(|(m, o)| o.iter().map(move |o| (m, o)))
        .map(|(m, o)| serde_json::json!({
            "mode": m.as_str(), "handoff_gap_ms": o.handoff_gap_ms, "steady_gap_ms": o.steady_gap_ms,
            "published": o.load.published, "lost": o.load.lost_count(), "pending_on_b": o.load.pending_on_b, "duplicated": o.load.duplicated.len(),
            "max_publish_stall_ms": o.load.max_publish_stall_ms, "max_retried_publish_ms": o.load.max_retried_publish_ms, "max_consumer_gap_ms": o.load.max_consumer_gap_ms,
            "cutover_ms": o.cutover_ms, "estimate_ms": o.estimate_ms, "steps": o.step_durations(), "consumers": o.journal.consumers,
        }))
        .collect();
    std::fs::write(
        dir.join(match (&k.in_place, k.push) {
            _ if k.cluster > 0 => "cluster.json",
            (Some(_), _) => "in_place.json",
            (None, true) => "push.json",
            (None, false) => "cutover.json",
        }),
        serde_json::to_string_pretty(
            &serde_json::json!({"rate": k.rate, "workers": k.workers, "seconds": k.seconds,
                "preload": k.preload, "in_place": k.in_place, "push": k.push, "cluster_nodes": k.cluster,
                "processing_us": k.processing.as_micros() as u64, "runs": summary}),
        )
        .unwrap(),
    )
    .unwrap();
}
