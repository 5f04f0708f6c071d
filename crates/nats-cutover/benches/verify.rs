//! The verify benchmark (not a test; `cargo test` does not run it): a real
//! migration of N messages on a fresh pinned server, then
//!
//! - the raw rate: a plain ordered consumer reading all of B (full messages),
//!   the same machine, the same run;
//! - `verify`: messages verified per second (its `checked` over its wall time,
//!   everything included: journal, pre-pass, both reads, enrichment) and the
//!   peak heap it allocated, per message.
//!
//! Goals (issue 4): verify at least half the raw rate; at most 2 bytes per
//! message.
//!
//! `cargo bench -p nats-cutover --bench verify` (release build). Knobs:
//! VERIFY_BENCH_N (1000000; a comma-separated list measures each size on its
//! own fresh server, e.g. `1000000,10000000`) messages in A,
//! VERIFY_BENCH_DIRECT (10000) direct
//! publishes into B after the commit, VERIFY_BENCH_PAYLOAD (100) bytes,
//! VERIFY_BENCH_ROUNDS (2) raw/verify rounds, VERIFY_BENCH_FILTER (none) the
//! consumer's filter (e.g. `orders.*`: verify counts A's selected messages
//! rather than reading A, unless B's origins differ from the count).
//! Writes target/bench/verify.json.

use async_nats::jetstream::{self, consumer::pull, consumer::pull::OrderedConfig};
use cutover_core::journal::Journal;
use cutover_core::plan::PlanRequest;
use cutover_nats::api::Action;
use cutover_nats::engine::{self, events::NoSink, RunOptions};
use cutover_nats::verify::{verify, VerifyOptions};
use cutover_nats::Js;
use cutover_testkit::{NatsServer, PINNED_VERSION};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Counts live heap bytes and their peak: the memory verify itself needs,
/// independent of what the allocator keeps from earlier phases.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            if new > l.size() {
                let now = LIVE.fetch_add(new - l.size(), Ordering::Relaxed) + (new - l.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn env_or<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

/// Publishes with up to `window` acks outstanding (the ack is awaited for each).
async fn publish_many(
    ctx: &jetstream::Context,
    n: u64,
    prefix: &str,
    payload: &[u8],
    window: usize,
) {
    let mut inflight = FuturesUnordered::new();
    for i in 0..n {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("{prefix}-{i}").as_str());
        inflight.push(std::future::IntoFuture::into_future(
            ctx.publish_with_headers(format!("orders.{}", i % 4), h, payload.to_vec().into())
                .await
                .expect("publish"),
        ));
        if inflight.len() >= window {
            inflight.next().await.unwrap().expect("publish ack");
        }
    }
    while let Some(r) = inflight.next().await {
        r.expect("publish ack");
    }
}

/// A plain ordered consumer over the whole stream, full messages: the baseline.
async fn raw_read(ctx: &jetstream::Context, stream: &str, last: u64) -> (u64, f64) {
    let t = Instant::now();
    let c = ctx
        .get_stream(stream)
        .await
        .unwrap()
        .create_consumer(OrderedConfig::default())
        .await
        .unwrap();
    let mut msgs = c.messages().await.unwrap();
    let mut n = 0u64;
    while let Some(m) = msgs.next().await {
        let m = m.unwrap();
        n += 1;
        let i = m.info().unwrap();
        if i.stream_sequence >= last || i.pending == 0 {
            break;
        }
    }
    (n, t.elapsed().as_secs_f64())
}

/// The benchmark's knobs, from the environment.
struct Knobs {
    sizes: Vec<u64>,
    direct: u64,
    payload_len: usize,
    rounds: usize,
    /// With a consumer filter (e.g. `orders.*`) verify counts A's selected
    /// messages; without one A's state says which messages it holds.
    filter: String,
}

impl Knobs {
    fn from_env() -> Self {
        Self {
            sizes: env_or("VERIFY_BENCH_N", "1000000".to_string())
                .split(',')
                .map(|s| s.trim().parse().expect("VERIFY_BENCH_N: a number of messages"))
                .collect(),
            direct: env_or("VERIFY_BENCH_DIRECT", 10_000),
            payload_len: env_or("VERIFY_BENCH_PAYLOAD", 100),
            rounds: env_or("VERIFY_BENCH_ROUNDS", 2),
            filter: env_or("VERIFY_BENCH_FILTER", String::new()),
        }
    }
}

fn main() {
    let k = Knobs::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let sizes: Vec<serde_json::Value> = k.sizes.iter().map(|&n| measure_size(&rt, &k, n)).collect();
    let out = json!({ "server": PINNED_VERSION, "sizes": sizes });
    let dir = cutover_testkit::repo_root().join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    std::fs::write(dir.join("verify.json"), serde_json::to_string_pretty(&out).unwrap()).unwrap();
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}

/// A migration of `n` messages on a fresh server, then the rounds: the
/// size's JSON object.
fn measure_size(rt: &tokio::runtime::Runtime, k: &Knobs, n: u64) -> serde_json::Value {
    let server = NatsServer::start();
    rt.block_on(async {
        let client = async_nats::connect(server.url()).await.expect("connect");
        let js = Js::new(client.clone(), Duration::from_secs(30));
        let ctx = jetstream::new(client.clone());
        create_orders(&js, &k.filter).await;
        let payload = vec![b'x'; k.payload_len];
        let t = Instant::now();
        publish_many(&ctx, n, "m", &payload, 4096).await;
        let publish_s = t.elapsed().as_secs_f64();
        eprintln!("published {n} in {publish_s:.1} s");
        // The old consumer processes the first tenth: F lies mid-stream.
        ack_first(&ctx, n / 10).await;
        let j = migrate(&js).await;
        publish_many(&ctx, k.direct, "d", &payload, 1024).await;
        let (_, b) = js.stream_info("ORDERS_V2").await.unwrap();
        let mut rows = vec![];
        for round in 0..k.rounds {
            rows.push(measure_round(&js, &ctx, &j.id, b.state.last_seq, round).await);
        }
        json!({ "server": PINNED_VERSION, "messages": n, "direct": k.direct, "payload_bytes": k.payload_len, "consumer_filter": k.filter, "publish_seconds": publish_s, "rounds": rows })
    })
}

/// Stream ORDERS on `orders.>` and its durable `worker` (filtered on `filter`
/// unless it is empty).
async fn create_orders(js: &Js, filter: &str) {
    js.stream_create(&json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64, "allow_direct": true})).await.unwrap();
    let mut cc =
        json!({"durable_name": "worker", "ack_policy": "explicit", "max_ack_pending": 20000});
    if !filter.is_empty() {
        cc["filter_subject"] = json!(filter);
    }
    js.consumer_create("ORDERS", "worker", &cc, Action::Create).await.unwrap();
}

/// The durable `worker` fetches and acks its first `done` messages.
async fn ack_first(ctx: &jetstream::Context, done: u64) {
    let c = ctx
        .get_stream("ORDERS")
        .await
        .unwrap()
        .get_consumer::<pull::Config>("worker")
        .await
        .unwrap();
    let mut acked = 0;
    while acked < done {
        let mut b =
            c.fetch().max_messages(((done - acked) as usize).min(5000)).messages().await.unwrap();
        while let Some(m) = b.next().await {
            m.unwrap().ack().await.unwrap();
            acked += 1;
        }
    }
}

/// The cut-over of `worker` from ORDERS to ORDERS_V2, timed on stderr.
async fn migrate(js: &Js) -> Journal {
    let t = Instant::now();
    let req = PlanRequest::source("ORDERS", "ORDERS_V2", &["worker"]);
    let plan = engine::prepare_plan(js, &req).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j = engine::run(js, plan, &RunOptions::default(), &NoSink, rx).await.unwrap();
    eprintln!(
        "migrated in {:.1} s (F = {:?}, b_start = {:?})",
        t.elapsed().as_secs_f64(),
        j.consumers[0].checkpoint,
        j.consumers[0].b_start
    );
    j
}

/// One round: the raw ordered read of B, then `verify` with its rate and peak
/// heap; a line on stderr and the round's JSON row.
async fn measure_round(
    js: &Js,
    ctx: &jetstream::Context,
    id: &str,
    last_seq: u64,
    round: usize,
) -> serde_json::Value {
    let (raw_n, raw_s) = raw_read(ctx, "ORDERS_V2", last_seq).await;
    let raw_rate = raw_n as f64 / raw_s;
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let t = Instant::now();
    let r = verify(js, id, &VerifyOptions::default(), &|_| {}).await.unwrap();
    let verify_s = t.elapsed().as_secs_f64();
    let peak = PEAK.load(Ordering::Relaxed) - base;
    assert!(r.holds, "the benchmark's migration verifies: {:?}", r.summary);
    let checked = r.summary.checked;
    let rate = checked as f64 / verify_s;
    let row = json!({
        "round": round + 1,
        "raw_ordered_read": { "messages": raw_n, "seconds": raw_s, "per_sec": raw_rate },
        "verify": { "checked": checked, "messages_read": r.read.as_ref().map(|x| x.messages), "seconds": verify_s, "per_sec": rate,
                    "read_phase_per_sec": r.read.as_ref().map(|x| x.per_sec),
                    "a_read": r.streams.a.read, "a_known": r.consumers[0].a_known },
        "verify_vs_raw": rate / raw_rate,
        "peak_heap_bytes": peak,
        "peak_heap_bytes_per_message": peak as f64 / checked as f64,
    });
    eprintln!(
        "round {}: raw ordered read {raw_n} msgs at {raw_rate:.0}/s; verify {checked} msgs in {verify_s:.2} s = {rate:.0}/s ({:.2} x raw); peak heap {:.1} MiB = {:.3} B/msg",
        round + 1,
        rate / raw_rate,
        peak as f64 / 1048576.0,
        peak as f64 / checked as f64
    );
    row
}
