//! Where sourcing stops keeping up (issue 14; not a test): B sources (or
//! mirrors) A while A ingests at a rising rate; at each rate, does B's lag
//! stay bounded or keep growing?
//!
//! A publisher paces publishes (128-byte payloads) into A at each rate for
//! SOURCING_STEP_S seconds: plain NATS publishes (no ack) or, with
//! SOURCING_PUBLISH=async, JetStream publishes whose acks are awaited
//! pipelined (up to SOURCING_INFLIGHT, 4096, unacknowledged at once), as a
//! fast application that must know each message was stored publishes; A's and B's message
//! counts are read at the start and the end of the step's second half. B
//! keeps up when its rate over that half is at least 95 % of A's and its lag
//! at the end is under a quarter second of A's ingest. Between steps B gets
//! up to 30 s to catch up. The ramp stops once B failed two steps, or A
//! itself ingests less than 90 % of the asked rate (then the limit is the
//! server's or the publisher's, not sourcing's).
//!
//! `cargo bench -p cutover-demo --bench sourcing`. Knobs: SOURCING_RATES
//! (`10000,20000,30000,40000,60000,80000,100000,150000,200000`),
//! SOURCING_STEP_S (6), SOURCING_STRATEGIES (`source,mirror`),
//! SOURCING_PUBLISH (`plain,async`: each strategy is ramped once per way of
//! publishing), SOURCING_INFLIGHT (4096). Writes target/bench/sourcing.json.

#[path = "common/mod.rs"]
mod common;

use cutover_nats::Js;
use cutover_testkit::{NatsServer, PINNED_VERSION};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn main() {
    let rates: Vec<u64> = common::env_list(
        "SOURCING_RATES",
        "10000,20000,30000,40000,60000,80000,100000,150000,200000",
    );
    let step: u64 = common::env_or("SOURCING_STEP_S", 6);
    let strategies: Vec<String> = common::env_list("SOURCING_STRATEGIES", "source,mirror");
    let publishes: Vec<String> = common::env_list("SOURCING_PUBLISH", "plain,async");
    let inflight: usize = common::env_or("SOURCING_INFLIGHT", 4096);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut rows: Vec<Value> = vec![];
    for p in &publishes {
        let publish = match p.as_str() {
            "async" => Publish::Async { inflight },
            _ => Publish::Plain,
        };
        for s in &strategies {
            rows.push(rt.block_on(ramp(s, publish, &rates, Duration::from_secs(step))));
        }
    }
    common::write_json(
        "sourcing",
        &json!({"server": PINNED_VERSION, "step_s": step, "inflight": inflight, "strategies": rows}),
    );
}

/// How the publisher writes into A.
#[derive(Clone, Copy, Debug)]
enum Publish {
    /// Core NATS publishes: nothing waits for the server.
    Plain,
    /// JetStream publishes, acks awaited with at most `inflight` outstanding.
    Async { inflight: usize },
}

impl Publish {
    fn name(self) -> &'static str {
        match self {
            Publish::Plain => "plain",
            Publish::Async { .. } => "async",
        }
    }
}

/// One fresh server: A, B sourcing or mirroring it, the rising rates.
async fn ramp(strategy: &str, publish: Publish, rates: &[u64], step: Duration) -> Value {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = Js::new(client.clone(), Duration::from_secs(30));
    js.stream_create(&json!({"name": "A", "subjects": ["s.>"], "allow_direct": true}))
        .await
        .unwrap();
    let link = if strategy == "mirror" { "mirror" } else { "sources" };
    let origin = if strategy == "mirror" { json!({"name": "A"}) } else { json!([{"name": "A"}]) };
    js.stream_create(&json!({"name": "B", "allow_direct": true, link: origin})).await.unwrap();
    let (mut steps, mut failed, mut keeps_up_to) = (vec![], 0, None::<u64>);
    for &rate in rates {
        let s = one_step(&client, &js, publish, rate, step).await;
        eprintln!("{strategy} ({}) at {rate}/s: {s}", publish.name());
        let ok = s["keeps_up"].as_bool().unwrap();
        let a_short = s["a_per_s"].as_f64().unwrap() < 0.9 * rate as f64;
        steps.push(s);
        if ok {
            keeps_up_to = Some(rate);
        } else {
            failed += 1;
        }
        if failed >= 2 || a_short {
            break;
        }
        let caught =
            common::wait_for(Duration::from_secs(30), Duration::from_millis(100), || async {
                let (a, b) = counts(&js).await;
                b >= a
            });
        caught.await;
    }
    json!({"strategy": strategy, "publish": publish.name(), "keeps_up_to": keeps_up_to, "steps": steps})
}

async fn counts(js: &Js) -> (u64, u64) {
    let (_, a) = js.stream_info("A").await.unwrap();
    let (_, b) = js.stream_info("B").await.unwrap();
    (a.state.messages, b.state.messages)
}

/// Publishes at `rate` for `step`; measures A's and B's rates over the
/// second half and B's lag at the end.
async fn one_step(
    client: &async_nats::Client,
    js: &Js,
    publish: Publish,
    rate: u64,
    step: Duration,
) -> Value {
    let publisher = tokio::spawn(paced(client.clone(), publish, rate, step));
    tokio::time::sleep(step / 2).await;
    let t = Instant::now();
    let (a0, b0) = counts(js).await;
    tokio::time::sleep(step / 2 - Duration::from_millis(100)).await;
    let (a1, b1) = counts(js).await;
    let secs = t.elapsed().as_secs_f64();
    let sent = publisher.await.unwrap();
    let (a_rate, b_rate) = ((a1 - a0) as f64 / secs, (b1 - b0) as f64 / secs);
    let lag = a1.saturating_sub(b1);
    let keeps_up = b_rate >= 0.95 * a_rate && (lag as f64) < a_rate / 4.0;
    json!({"rate": rate, "sent": sent, "a_per_s": a_rate, "b_per_s": b_rate,
        "lag_at_end": lag, "keeps_up": keeps_up})
}

/// Publishes to `s.<i % 16>` at `rate` for `d`, paced every ms; returns how
/// many were sent (async: and acknowledged).
async fn paced(client: async_nats::Client, publish: Publish, rate: u64, d: Duration) -> u64 {
    let payload = bytes::Bytes::from(vec![b'x'; 128]);
    let subjects: Vec<String> = (0..16).map(|i| format!("s.{i}")).collect();
    let js = async_nats::jetstream::new(client.clone());
    let mut acks = std::collections::VecDeque::new();
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut sent = 0u64;
    while start.elapsed() < d {
        tick.tick().await;
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent < due {
            let subject = subjects[(sent % 16) as usize].clone();
            match publish {
                Publish::Plain => client.publish(subject, payload.clone()).await.unwrap(),
                Publish::Async { inflight } => {
                    if acks.len() >= inflight {
                        let ack: async_nats::jetstream::context::PublishAckFuture =
                            acks.pop_front().unwrap();
                        ack.await.unwrap();
                    }
                    acks.push_back(js.publish(subject, payload.clone()).await.unwrap());
                }
            }
            sent += 1;
        }
    }
    for ack in acks {
        ack.await.unwrap();
    }
    client.flush().await.unwrap();
    sent
}
