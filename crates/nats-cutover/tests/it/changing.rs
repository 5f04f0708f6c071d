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
