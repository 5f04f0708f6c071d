//! What the issue-14 benchmarks share: knobs, fresh streams, bulk publishing,
//! the JSON they leave in target/bench.

#![allow(dead_code)]

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::time::{Duration, Instant};

pub fn env_or<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

/// A comma-separated list knob.
pub fn env_list<T: std::str::FromStr>(k: &str, d: &str) -> Vec<T> {
    env_or(k, d.to_string())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().ok().unwrap_or_else(|| panic!("{k}: cannot read {s}")))
        .collect()
}

/// Publishes `n` messages (subject by index, empty payload, no msg-id) with
/// up to 4,096 acks outstanding; returns the seconds it took.
pub async fn bulk(
    ctx: &async_nats::jetstream::Context,
    n: u64,
    subject: impl Fn(u64) -> String,
) -> f64 {
    let t = Instant::now();
    let mut pending = FuturesUnordered::new();
    for i in 0..n {
        pending.push(std::future::IntoFuture::into_future(
            ctx.publish(subject(i), bytes::Bytes::new()).await.expect("publish"),
        ));
        if pending.len() >= 4096 {
            while pending.len() > 2048 {
                pending.next().await.unwrap().expect("ack");
            }
        }
    }
    while let Some(a) = pending.next().await {
        a.expect("ack");
    }
    t.elapsed().as_secs_f64()
}

/// Polls `done` every `every` until it holds or `limit` passes; whether it held.
pub async fn wait_for<F, Fut>(limit: Duration, every: Duration, mut done: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if done().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Writes `target/bench/<name>.json`.
pub fn write_json(name: &str, v: &serde_json::Value) {
    let dir = cutover_testkit::repo_root().join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.json")), serde_json::to_string_pretty(v).unwrap())
        .unwrap();
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `bin` run under `/usr/bin/time -v` where it exists, for its peak RSS
/// ([`peak_rss_kib`]); plain otherwise.
pub fn timed_command(bin: &std::path::Path) -> std::process::Command {
    if std::path::Path::new("/usr/bin/time").exists() {
        let mut c = std::process::Command::new("/usr/bin/time");
        c.arg("-v").arg(bin);
        c
    } else {
        std::process::Command::new(bin)
    }
}

/// The peak RSS `/usr/bin/time -v` reported on `stderr`, if it ran.
pub fn peak_rss_kib(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes): "))
        .and_then(|v| v.trim().parse().ok())
}
