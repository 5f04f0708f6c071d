//! Issue 23: in place and mirror where the world changes under a run:
//! durables the server may delete, a B that stopped sourcing, settings the
//! server updates by itself. Every test here is a live case against a real
//! server.

use crate::common::*;
use crate::run::run_cli;
use serde_json::json;

/// Case 4: a durable with `inactive_threshold`. Applications bound to it by
/// name cannot reach it on the temporary stream, so nobody pulls it there:
/// with its threshold kept, the server deleted it (with its position)
/// during hop 2's copy and every resume failed. It lives on the temporary
/// stream without one (the value kept in its metadata) and gets it back on
/// the stream's own name, positioned where it was.
#[tokio::test(flavor = "multi_thread")]
async fn an_inactive_threshold_durable_keeps_its_position_through_an_in_place_change() {
    let e = env().await;
    crate::run::orders_stream(&e, 30_000).await;
    let idle = json!({"durable_name": "idle", "ack_policy": "explicit", "inactive_threshold": 2_000_000_000i64, "metadata": {"team": "billing"}});
    e.consumer("ORDERS", idle).await;
    e.publish("orders.eu", "a", 40).await;
    // The runner dies right after hop 1 (its last step, retire, journaled).
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory", "--yes"];
    let out = run_cli(&e, &args, Some("retire"));
    assert_eq!(out.code, 86, "{out:?}");
    let (raw, c) = e.js.consumer_info("ORDERS_CUTOVER", "idle").await.unwrap();
    assert_eq!(c.config.inactive_threshold, 0, "no threshold on the temporary stream: {raw}");
    assert_eq!(raw["config"]["metadata"]["nats-cutover.inactive_threshold"], json!("2000000000"));
    let out = run_cli(&e, &args, None);
    assert_eq!(out.code, 0, "{out:?}");
    let (raw, c) = e.js.consumer_info("ORDERS", "idle").await.unwrap();
    assert_eq!(c.config.inactive_threshold, 2_000_000_000, "threshold restored: {raw}");
    assert_eq!(raw["config"]["metadata"]["team"], json!("billing"));
    assert!(raw["config"]["metadata"].get("nats-cutover.inactive_threshold").is_none(), "{raw}");
    // Nothing was delivered: it starts at the first message, as before.
    assert_eq!(c.num_pending, 40, "{raw}");
}

/// Issue 24, case 4: a push consumer's subscriber died holding a message on
/// an idle stream. The drain's pause withholds its redelivery; a resume that
/// came after its ack_wait ran out used to deliver nothing until a new
/// message arrived (the run failed after its settle timeout saying "check
/// its workers", a newcomer's came 121 s late). The drain's pause is cut
/// often here (`--max-pause 200ms`), so the ack_wait runs out in a pause or
/// between two; either way the live nats-py worker gets the message and the
/// move finishes well inside the settle timeout, the message processed once.
#[tokio::test(flavor = "multi_thread")]
async fn a_push_consumer_drained_on_an_idle_stream_gets_a_dead_subscribers_message_back() {
    use crate::pyapps::{lines, App};
    use futures::StreamExt;
    let e = env().await;
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    let push = json!({"durable_name": "push", "ack_policy": "explicit", "ack_wait": 2_000_000_000i64, "deliver_subject": "deliver.push", "deliver_group": "g", "max_ack_pending": 100});
    e.consumer("ORDERS", push).await;
    let client = async_nats::connect(e.server.url()).await.unwrap();
    let mut dead = client.queue_subscribe("deliver.push", "g".into()).await.unwrap();
    e.publish("orders.eu", "a", 1).await;
    dead.next().await.expect("the dead subscriber's message");
    drop(dead);
    client.flush().await.unwrap();
    let dir = TempDir::new("push-idle");
    let out = dir.0.join("worker.jsonl");
    let args = ["--server", e.server.url(), "--stream", "ORDERS", "--consumer", "push"];
    let worker = App::start(
        "worker.py",
        &[&args[..], &["--mode", "push", "--out", out.to_str().unwrap()]].concat(),
    );
    let run = ["run", "--from", "ORDERS", "--to", "ORDERS_V2", "--consumer", "push"];
    let opts = ["--max-pause", "200ms", "--settle-timeout", "30s", "--yes"];
    let ran = e.cli(&[&run[..], &opts[..]].concat());
    assert_eq!(ran.code, 0, "{ran:?}");
    worker.stop();
    let handled = lines(&out);
    assert_eq!(handled.len(), 1, "processed once: {handled:?}");
    assert_eq!((handled[0]["seq"].as_u64(), handled[0]["acked"].as_bool()), (Some(1), Some(true)));
}
