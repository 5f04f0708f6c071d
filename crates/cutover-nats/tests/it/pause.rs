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
