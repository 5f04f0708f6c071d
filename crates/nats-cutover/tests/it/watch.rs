//! `watch` against a real consumer driven through the statuses: nobody pulling
//! (stopped), messages held without ack (stalled), paused while held (draining),
//! acked while paused (ok: settled, checkpoint stable).

use crate::common::*;
use async_nats::jetstream::consumer::PullConsumer;
use futures::StreamExt;
use serde_json::{json, Value};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A `watch --json` child whose ticks are read as they come.
pub struct Watching {
    child: Child,
    rx: mpsc::Receiver<Value>,
    pub ticks: Vec<Value>,
}

impl Watching {
    pub fn start(e: &Env, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
            .args(["--server", e.server.url(), "--json", "watch"])
            .args(args)
            .env_remove("NATS_URL")
            .env_remove("NATS_CONTEXT")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nats-cutover watch");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("watch printed a line that is not JSON ({e}): {line}")
                });
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Self { child, rx, ticks: vec![] }
    }

    /// Reads ticks until one has `status`; returns it.
    pub fn until_status(&mut self, status: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(t) => {
                    self.ticks.push(t.clone());
                    if t["status"] == status {
                        return t;
                    }
                }
                Err(_) => panic!(
                    "no {status:?} tick within {timeout:?}; statuses so far: {:?}",
                    self.statuses()
                ),
            }
        }
    }

    /// The statuses in order, repeats folded.
    pub fn statuses(&self) -> Vec<String> {
        let mut s: Vec<String> = vec![];
        for t in &self.ticks {
            if let Some(st) = t["status"].as_str() {
                if s.last().map(String::as_str) != Some(st) {
                    s.push(st.to_string());
                }
            }
        }
        s
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Stream A with 20 messages and a pull durable C nobody reads yet; the ack
/// wait is long so held messages stay held for the whole test.
pub async fn fixture(e: &Env) -> PullConsumer {
    e.stream(json!({"name": "A", "subjects": ["orders.>"]})).await;
    e.consumer("A", json!({"durable_name": "C", "ack_policy": "explicit", "ack_wait": 120_000_000_000i64, "max_ack_pending": 100})).await;
    e.publish("orders.eu", "m", 20).await;
    e.pull_consumer("A", "C").await
}

/// Fetches `n` messages and holds them unacknowledged.
pub async fn hold(c: &PullConsumer, n: usize) -> Vec<async_nats::jetstream::Message> {
    let mut msgs = c.fetch().max_messages(n).messages().await.expect("fetch");
    let mut held = vec![];
    while let Some(m) = msgs.next().await {
        held.push(m.expect("message"));
    }
    assert_eq!(held.len(), n, "fetched {} of {n}", held.len());
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_stopped_stalled_draining_ok_as_a_consumer_drains() {
    let e = env().await;
    let c = fixture(&e).await;
    let mut w = Watching::start(
        &e,
        &["A", "--consumer", "C", "--interval", "100ms", "--window", "4", "--count", "600"],
    );
    let limit = Duration::from_secs(20);

    let t = w.until_status("stopped", limit);
    assert_eq!(t["num_pending"], 20, "{t}");
    assert_eq!(t["num_waiting"], 0, "{t}");

    let held = hold(&c, 5).await;
    let t = w.until_status("stalled", limit);
    assert_eq!(
        (t["num_ack_pending"].as_u64(), t["ack_floor_stream_seq"].as_u64()),
        (Some(5), Some(0)),
        "{t}"
    );
    assert_eq!(t["settled"], false);

    e.js.consumer_pause("A", "C", Some("9999-01-01T00:00:00Z")).await.unwrap();
    let t = w.until_status("draining", limit);
    assert_eq!(t["paused"], true, "{t}");

    for m in held {
        m.ack().await.expect("ack");
    }
    let t = w.until_status("ok", limit);
    assert_eq!(
        (t["paused"].as_bool(), t["stable"].as_bool(), t["checkpoint"].as_u64()),
        (Some(true), Some(true), Some(5)),
        "paused and settled at F = 5: {t}"
    );
    assert_eq!(t["num_pending"], 15, "{t}");

    // Held paused while messages keep arriving, and no runner holds a lease
    // on A (nats-cutover did not pause it here; a failed run's consumer
    // looks the same): stopped, naming the way out, not ok.
    let ctx = e.ctx.clone();
    let publishing = tokio::spawn(async move {
        loop {
            ctx.publish("orders.eu", "more".into()).await.unwrap().await.unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await; // pacing only
        }
    });
    let ok_ticks = w.ticks.len();
    let t = w.until_status("stopped", limit);
    publishing.abort();
    assert!(t["reason"].as_str().unwrap().contains("no nats-cutover runner holds A"), "{t}");
    assert_eq!(t["paused"], true, "{t}");
    assert!(w.ticks.len() > ok_ticks);

    // The transitions, in order (ok may also show while the fetch is fresh).
    let s = w.statuses();
    let pos =
        |st: &str, after: usize| s.iter().skip(after).position(|x| x == st).map(|p| p + after);
    let stopped = pos("stopped", 0).expect("stopped");
    let stalled = pos("stalled", stopped).expect("stalled after stopped");
    let draining = pos("draining", stalled).expect("draining after stalled");
    let ok = pos("ok", draining).expect("ok after draining");
    pos("stopped", ok).expect("stopped once held while messages arrive");
    eprintln!("statuses: {s:?}");
}

#[test]
fn watch_refuses_a_missing_consumer_and_bad_options() {
    let out = cli(&["watch", "A", "--consumer", "C", "--window", "1"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--window"), "{out:?}");
    let out = cli(&["watch", "A", "--consumer", "C", "--interval", "1ms"]);
    assert_eq!(out.code, 2, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_on_a_consumer_that_does_not_exist_is_bad_input() {
    let e = env().await;
    e.stream(json!({"name": "A", "subjects": ["orders.>"]})).await;
    let out = e.cli(&["watch", "A", "--consumer", "nope", "--count", "1"]);
    assert_eq!(out.code, 2, "{out:?}");
}
