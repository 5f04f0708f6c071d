//! The test kit's 3-node loopback cluster works for replicated streams (the
//! ground for the fault campaign).

use crate::common::wait_until;
use cutover_nats::api::Action;
use cutover_nats::Js;
use cutover_testkit::Cluster;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn three_node_cluster_serves_a_replicated_stream() {
    let cluster = Cluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cluster.nodes.len(), 3);
    let urls: Vec<String> = cluster.urls().split(',').map(String::from).collect();
    let client = async_nats::connect(urls).await.unwrap();
    let js = Js::new(client.clone(), Duration::from_secs(5));
    // The meta leader is elected shortly after the routes form.
    wait_until("an R3 stream to be created", Duration::from_secs(30), || async {
        js.stream_create(&json!({"name": "R3", "subjects": ["r3.>"], "num_replicas": 3}))
            .await
            .is_ok()
    })
    .await;
    let ctx = async_nats::jetstream::new(client);
    ctx.publish("r3.x", "hello".into()).await.unwrap().await.unwrap();
    let (_, info) = js.stream_info("R3").await.unwrap();
    assert_eq!(info.config.num_replicas, 3);
    assert_eq!(info.state.messages, 1);
    // The CLI takes the same comma-separated server list.
    let out = crate::common::cli(&["--server", &cluster.urls(), "--json", "inspect", "R3"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["stream"]["state"]["messages"], 1);
}

/// The whole live cut-over on a 3-node cluster with replicated (R3) streams and
/// consumers: their state comes from replicated stores, which is why the settle
/// rule asks for two agreeing reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_cutover_on_a_three_node_cluster_with_r3_streams() {
    use crate::run::{assert_exact, finish, load_cfg, request, until_processed, until_published};
    use cutover_core::journal::Phase;
    use cutover_demo::load::Load;
    use cutover_nats::engine::{self, events::Collect, RunOptions};
    let cluster = Cluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let urls: Vec<String> = cluster.urls().split(',').map(String::from).collect();
    let client = async_nats::connect(urls).await.unwrap();
    let js = Js::new(client.clone(), Duration::from_secs(5));
    wait_until("an R3 stream to be created", Duration::from_secs(30), || async {
        js.stream_create(&json!({"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": 3, "duplicate_window": 120_000_000_000i64})).await.is_ok()
    })
    .await;
    js.consumer_create("ORDERS", "worker", &json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000}), Action::Create).await.unwrap();
    let load = Load::start(client.clone(), load_cfg(500, 20_000)).await;
    until_processed(&load, 300).await;
    let plan =
        engine::prepare_plan(&js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    assert!(plan.safe, "{:?}", plan.unsafe_findings().collect::<Vec<_>>());
    assert_eq!(plan.b_config["num_replicas"], 3);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j = engine::run(&js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let after = load.published() + 300;
    until_published(&load, after).await;
    let r = finish(load).await;
    assert_exact(&r);
    let v = cutover_nats::verify::verify(&js, &j.id, &Default::default(), &|_| {}).await.unwrap();
    assert!(v.holds, "verify: {:?} {:#?}", v.summary, v.offenders);
    let (_, b) = js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.config.num_replicas, 3);
}
