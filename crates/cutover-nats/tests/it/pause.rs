//! Pausing and resuming consumers as the engine does (`Js::consumer_pause`),
//! against the server's own behaviour.

use crate::common::*;
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

/// A push consumer paused while a dead subscriber held a message: the
/// message's ack_wait runs out during the pause (nats-server 2.15.1 queues
/// it for redelivery and signals once, while paused), and after a plain
/// resume the consumer delivers nothing until a new message arrives (a
/// newcomer's drain on an idle stream waited 121 s). The engine's resume
/// ends with a short pause on the server's clock, whose timer signals: the
/// message comes at once. The moment the ack_wait has run out is taken from
/// a control consumer started with it, never paused: its own held message
/// comes back then.
#[tokio::test]
async fn a_resumed_push_consumer_redelivers_what_expired_while_paused() {
    let e = env().await;
    e.stream(json!({"name": "S", "subjects": ["s.>"]})).await;
    for c in ["held", "control"] {
        e.consumer("S", json!({"durable_name": c, "ack_policy": "explicit", "ack_wait": 1_000_000_000i64, "deliver_subject": format!("deliver.{c}")})).await;
    }
    let client = async_nats::connect(e.server.url()).await.unwrap();
    let mut dead = client.subscribe("deliver.held").await.unwrap();
    let mut control = client.subscribe("deliver.control").await.unwrap();
    e.publish("s.x", "m", 1).await;
    // Both take the message and never ack it: the subscribers "die".
    dead.next().await.expect("first delivery");
    control.next().await.expect("first delivery of the control");
    assert!(e.js.consumer_pause("S", "held", Some("9999-01-01T00:00:00Z")).await.unwrap());
    drop(dead);
    let mut live = client.subscribe("deliver.held").await.unwrap();
    // The control's redelivery says the ack_wait ran out (the held one's
    // delivery came first).
    let again = tokio::time::timeout(Duration::from_secs(10), control.next()).await;
    assert!(again.is_ok_and(|m| m.is_some()), "the control redelivered after its ack_wait");
    // Held paused past its ack_wait; the stream stays idle from here.
    e.js.consumer_pause("S", "held", None).await.unwrap();
    let redelivered = tokio::time::timeout(Duration::from_secs(3), live.next()).await;
    let m = redelivered.expect("redelivered within 3 s of the resume, on an idle stream");
    assert_eq!(m.expect("a message").payload, "0");
    // Resumed for good: the nudge's pause has ended by itself.
    wait_until("the consumer to run", Duration::from_secs(5), || async {
        e.js.consumer_info("S", "held").await.is_ok_and(|(_, c)| !c.paused)
    })
    .await;
}

/// The fence's read of a paused replicated consumer: deliveries the leader
/// proposed before the pause took effect may not be applied yet, and
/// consumer info reads delivered from the applied state, so the first read
/// that says `paused` (even two agreeing reads, seen once in 200) can be
/// short (a newcomer's fence was one message short and that message was
/// processed twice). The engine's read, `Js::settled_read` (barriers, each
/// followed by a read, until two agree: one barrier was once not enough),
/// never is: a later barrier (everything proposed up to then applied, and a
/// paused consumer proposes no delivery) finds the same delivered sequence. Under a live
/// pull load on an R3 consumer, 60 pauses or more, every third followed at
/// once by a change of the consumer's leader and a plain read; the test
/// also fails if no read without the barrier was ever short (it would show
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_the_barrier_a_paused_replicated_consumer_reads_every_delivery() {
    use async_nats::jetstream::{self, consumer::PullConsumer};
    let cluster = cutover_testkit::Cluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let urls: Vec<String> = cluster.urls().split(',').map(String::from).collect();
    let client = async_nats::connect(urls).await.unwrap();
    let js = cutover_nats::Js::new(client.clone(), Duration::from_secs(5));
    let ctx = jetstream::new(client.clone());
    // The meta leader is elected shortly after the routes form.
    wait_until("an R3 stream to be created", Duration::from_secs(30), || async {
        js.stream_create(&json!({"name": "S", "subjects": ["s.>"], "num_replicas": 3}))
            .await
            .is_ok()
    })
    .await;
    let c = json!({"durable_name": "C", "ack_policy": "explicit", "max_ack_pending": 10000, "num_replicas": 3});
    js.consumer_create("S", "C", &c, cutover_nats::api::Action::Create).await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = {
        let (ctx, stop) = (ctx.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let acks: Vec<_> =
                    futures::future::join_all((0..50).map(|_| ctx.publish("s.x", "m".into())))
                        .await;
                for a in acks.into_iter().flatten() {
                    let _ = a.await;
                }
            }
        })
    };
    let worker = {
        let stop = stop.clone();
        let consumer: PullConsumer =
            ctx.get_stream("S").await.unwrap().get_consumer("C").await.unwrap();
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(mut batch) = consumer
                    .fetch()
                    .max_messages(200)
                    .expires(Duration::from_millis(50))
                    .messages()
                    .await
                else {
                    continue;
                };
                while let Some(Ok(m)) = batch.next().await {
                    let _ = m.ack().await;
                }
            }
        })
    };
    // 60 pauses at least, more (up to 600) until a read without the
    // barrier was short, so the test shows the settled read is what
    // makes the difference.
    let (mut short_first, mut short_down, mut short_after, mut pauses) = (0, 0, 0, 0);
    while pauses < 60 || (short_first + short_down == 0 && pauses < 600) {
        assert!(js.consumer_pause("S", "C", Some("9999-01-01T00:00:00Z")).await.unwrap());
        let first = loop {
            let (_, ci) = js.consumer_info("S", "C").await.unwrap();
            if ci.paused {
                break ci;
            }
        };
        let mut down = None;
        if pauses % 3 == 0 {
            // The consumer's leader changes right after the pause (as G2's
            // read came 35 ms after one), and a plain read follows it.
            let step_down =
                js.api("step down", "CONSUMER.LEADER.STEPDOWN.S.C", &serde_json::Value::Null);
            step_down.await.unwrap();
            down = loop {
                if let Ok((_, ci)) = js.consumer_info("S", "C").await {
                    break Some(ci);
                }
            };
        }
        // The engine's read of F (fence's gate, the drain's last read).
        let (_, f) = js.settled_read("S", "C").await.unwrap();
        js.consumer_barrier("S", "C", &f.ack_floor).await.unwrap();
        let (_, truth) = js.consumer_info("S", "C").await.unwrap();
        let short = |ci: &cutover_core::model::ConsumerInfo| {
            usize::from(ci.delivered.stream_seq < truth.delivered.stream_seq)
        };
        short_first += short(&first);
        short_down += down.as_ref().map_or(0, short);
        short_after += short(&f);
        js.consumer_pause("S", "C", None).await.unwrap();
        pauses += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = tokio::join!(publisher, worker);
    eprintln!("of {pauses} pauses: the first paused read short {short_first} times, a plain read after the leader change {short_down}, the settled read {short_after}");
    assert!(
        short_first + short_down > 0,
        "no read without the barrier was short in {pauses} pauses: the test shows nothing"
    );
    assert_eq!(short_after, 0, "a settled read was short");
}
