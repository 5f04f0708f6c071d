//! Position translation (issue 14; not a test): the time and the direct gets
//! `translate_once` needs to turn a checkpoint F of A into B's first sequence
//! after it, on streams of N messages where B sources a filter of varying
//! density (the hard case: a source that lines up with A needs one get).
//!
//! A holds N empty messages: the first 20 % all kept, then one in seven up to
//! 60 %, then one in a hundred; B sources the kept ones. Seven checkpoints
//! spread over A are translated, each timed.
//!
//! `cargo bench -p cutover-demo --bench translate`. Knobs: TRANSLATE_SIZES
//! (`10000,1000000`; add 10000000 for the big one). Writes
//! target/bench/translate.json.

#[path = "common/mod.rs"]
mod common;

use cutover_nats::engine::{self, translate_once};
use cutover_nats::Js;
use cutover_testkit::{NatsServer, PINNED_VERSION};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn kept(i: u64, n: u64) -> bool {
    i < n / 5 || (i < n * 3 / 5 && i.is_multiple_of(7)) || i.is_multiple_of(100)
}

fn main() {
    let sizes: Vec<u64> = common::env_list("TRANSLATE_SIZES", "10000,1000000");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let rows: Vec<Value> = sizes.iter().map(|&n| rt.block_on(one_size(n))).collect();
    common::write_json("translate", &json!({"server": PINNED_VERSION, "sizes": rows}));
}

/// A fresh server with A (`n` messages) and B sourcing its kept subset; every
/// checkpoint translated and timed.
async fn one_size(n: u64) -> Value {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = Js::new(client.clone(), Duration::from_secs(30));
    let ctx = async_nats::jetstream::new(client);
    js.stream_create(&json!({"name": "A", "subjects": ["t.>"], "allow_direct": true}))
        .await
        .unwrap();
    let publish_s =
        common::bulk(&ctx, n, |i| if kept(i, n) { "t.keep" } else { "t.skip" }.to_string()).await;
    let last_kept = (0..n).rev().find(|&i| kept(i, n)).unwrap() + 1;
    let t = Instant::now();
    js.stream_create(&json!({"name": "B", "allow_direct": true, "sources": [{"name": "A", "filter_subject": "t.keep"}]})).await.unwrap();
    let sourced = common::wait_for(Duration::from_secs(600), Duration::from_millis(50), || async {
        engine::source_progress(&js, "B", "A").await.unwrap().sourced_origin_seq == Some(last_kept)
    })
    .await;
    assert!(sourced, "B sourced A's kept messages");
    let source_s = t.elapsed().as_secs_f64();
    let (_, b) = js.stream_info("B").await.unwrap();
    let mut points = vec![];
    for f in [1, n * 3 / 20, n / 5, n * 7 / 20, n * 3 / 5 - 1, n * 7 / 10, n - n / 20] {
        let t = Instant::now();
        let (start, gets) = translate_once(&js, "A", "B", f).await.unwrap().expect("sourced");
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        points.push(json!({"f": f, "start": start, "gets": gets, "ms": ms}));
    }
    let bound = 2 * (b.state.last_seq.max(2) as f64).log2().ceil() as u64 + 4;
    let row = json!({"messages": n, "b_messages": b.state.messages, "publish_s": publish_s,
        "source_s": source_s, "gets_bound": bound, "points": points});
    eprintln!("translate {n}: {row}");
    row
}
