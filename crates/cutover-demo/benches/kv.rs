//! A KV bucket changed in place under write load (issue 14; not a test): a
//! bucket of KV_KEYS keys (100,000), a writer putting KV_RATE (300) values
//! per second to random keys and a reader getting random keys, while the
//! bucket's stream changes to `storage=memory, history=64` under its own name
//! (`nats-cutover kv BUCKET --set ...`: two mirror hops).
//!
//! A put that fails (no responders while the subjects move) is retried with
//! the same value for up to 5 s: a write "failed" only if it never landed.
//! Reported: writes, failed writes, the longest write (first attempt to ack),
//! reads, reads that found no value (the bucket is full, so each is a wrong
//! answer), the whole change.
//!
//! `cargo bench -p cutover-demo --bench kv`. Knobs: KV_KEYS (100000),
//! KV_RATE (300), KV_RUNS (1). Writes target/bench/kv.json.

#[path = "common/mod.rs"]
mod common;

use async_nats::jetstream::kv;
use cutover_core::bucket::{settings, Kind};
use cutover_nats::engine::{self, events::NoSink, InPlaceRequest, RunOptions};
use cutover_nats::Js;
use cutover_testkit::{NatsServer, PINNED_VERSION};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let keys: u64 = common::env_or("KV_KEYS", 100_000);
    let rate: u64 = common::env_or("KV_RATE", 300);
    let runs: usize = common::env_or("KV_RUNS", 1);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let rows: Vec<Value> = (0..runs)
        .map(|run| {
            let row = rt.block_on(one_run(keys, rate));
            eprintln!("kv run {}: {row}", run + 1);
            row
        })
        .collect();
    common::write_json(
        "kv",
        &json!({"server": PINNED_VERSION, "keys": keys, "rate": rate, "runs": rows}),
    );
}

async fn one_run(keys: u64, rate: u64) -> Value {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let ctx = async_nats::jetstream::new(client.clone());
    let store = ctx
        .create_key_value(kv::Config { bucket: "CFG".into(), history: 1, ..Default::default() })
        .await
        .unwrap();
    let fill_s = common::bulk(&ctx, keys, |i| format!("$KV.CFG.k{i}")).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_loop(store.clone(), keys, rate, stop.clone()));
    let reader = tokio::spawn(read_loop(store.clone(), keys, stop.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pairs = ["storage=memory".to_string(), "history=64".to_string()];
    let req = InPlaceRequest {
        stream: Kind::Kv.stream("CFG"),
        via: None,
        consumers: vec![],
        all_consumers: true,
        settings: Some(settings(Kind::Kv, &pairs).unwrap()),
        retry_horizon: None,
        repoint_publishers: false,
        external: None,
    };
    let js = Js::new(client.clone(), Duration::from_secs(30));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let t = Instant::now();
    let result = engine::run_in_place(&js, &req, &RunOptions::default(), &NoSink, rx).await;
    let change_ms = t.elapsed().as_secs_f64() * 1000.0;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let (writes, failed, longest_ms) = writer.await.unwrap();
    let (reads, not_found) = reader.await.unwrap();
    let (raw, _) = js.stream_info("KV_CFG").await.unwrap();
    json!({"keys": keys, "fill_s": fill_s, "change_ms": change_ms,
        "error": result.err().map(|e| e.to_string()),
        "storage_after": raw["config"]["storage"], "writes": writes, "failed_writes": failed,
        "longest_write_ms": longest_ms, "reads": reads, "reads_not_found": not_found})
}

/// Puts at `rate` to random keys until stopped; (writes, failed, longest ms).
async fn write_loop(
    store: kv::Store,
    keys: u64,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> (u64, u64, f64) {
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let (mut writes, mut failed, mut longest) = (0u64, 0u64, 0f64);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let key = format!("k{}", seed % keys);
        let t = Instant::now();
        let landed = loop {
            match store.put(&key, format!("v{writes}").into()).await {
                Ok(_) => break true,
                Err(_) if t.elapsed() < Duration::from_secs(5) => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                Err(_) => break false,
            }
        };
        longest = longest.max(t.elapsed().as_secs_f64() * 1000.0);
        writes += 1;
        failed += u64::from(!landed);
    }
    (writes, failed, longest)
}

/// Gets random keys until stopped; (reads, reads that found no value).
async fn read_loop(store: kv::Store, keys: u64, stop: Arc<AtomicBool>) -> (u64, u64) {
    let (mut reads, mut missing) = (0u64, 0u64);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    while !stop.load(Ordering::SeqCst) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // An error (no responders while the subjects move) is not an answer.
        if let Ok(v) = store.get(format!("k{}", seed % keys)).await {
            reads += 1;
            missing += u64::from(v.is_none());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (reads, missing)
}
