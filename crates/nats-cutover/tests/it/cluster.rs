//! The test kit's 3-node loopback cluster works for replicated streams (the
//! ground for the fault campaign).

use crate::common::wait_until;
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
        js.stream_create(&json!({"name": "R3", "subjects": ["r3.>"], "num_replicas": 3})).await.is_ok()
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
