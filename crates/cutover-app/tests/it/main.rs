//! cutover-app's own tests (one binary), each against a real nats-server from
//! the test kit: what an application links, without the CLI or the engine.

use cutover_app::follow::{Binding, Follower};
use cutover_app::publisher::Publisher;
use cutover_core::journal::{route_key, Route};
use cutover_nats::journal::{IfMissing, JournalStore};
use cutover_nats::Js;
use cutover_testkit::NatsServer;
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

async fn connect(s: &NatsServer) -> (async_nats::Client, Js) {
    let client = async_nats::connect(s.url()).await.expect("connect to the test server");
    let js = Js::new(client.clone(), Duration::from_secs(5));
    (client, js)
}

/// A publish that finds no stream (the subject move under way) is retried
/// with the same msg-id until a stream takes it, and is stored once.
#[tokio::test(flavor = "multi_thread")]
async fn a_publish_retries_until_a_stream_takes_the_subject_and_lands_once() {
    let s = NatsServer::start();
    let (client, js) = connect(&s).await;
    let publisher = Publisher::new(client, Duration::from_secs(30));
    // A plain subscriber sees each attempt (and answers none, so each one
    // times out and is retried): the stream appears after the second.
    let watcher = async_nats::connect(s.url()).await.unwrap();
    let mut attempts = watcher.subscribe("late.x").await.unwrap();
    watcher.flush().await.unwrap();
    let pending =
        tokio::spawn(async move { publisher.publish("late.x", "id-1", "v".into()).await });
    for _ in 0..2 {
        let seen = tokio::time::timeout(Duration::from_secs(10), attempts.next()).await;
        assert!(seen.is_ok_and(|m| m.is_some()), "the publisher tries again");
    }
    attempts.unsubscribe().await.unwrap();
    watcher.flush().await.unwrap();
    js.stream_create(&json!({"name": "LATE", "subjects": ["late.>"]})).await.unwrap();
    let p = pending.await.unwrap().expect("published");
    assert_eq!(p.stream, "LATE");
    assert!(!p.duplicate);
    assert!(p.attempts >= 3, "stored on a retry: {p:?}");
    // The same msg-id again: the stream's window takes it once.
    let again = Publisher::new(js.client.clone(), Duration::from_secs(5));
    let p2 = again.publish("late.x", "id-1", "v".into()).await.unwrap();
    assert!(p2.duplicate, "a retry with the same msg-id is a duplicate");
    let (_, info) = js.stream_info("LATE").await.unwrap();
    assert_eq!(info.state.messages, 1);
}

/// The follower starts on the original binding, moves when the route record
/// appears, and moves back when it is deleted (a rollback).
#[tokio::test(flavor = "multi_thread")]
async fn the_follower_follows_the_route_record_and_a_rollback() {
    let s = NatsServer::start();
    let (client, js) = connect(&s).await;
    let follower = Follower::start(client, "ORDERS", "worker").await.unwrap();
    let original = Binding::home("ORDERS", "worker");
    assert_eq!(follower.current(), original);
    let mut rx = follower.subscribe();
    let store = JournalStore::open(&js, IfMissing::Create).await.unwrap().unwrap();
    let route = Route::moved("ORDERS", "ORDERS_V2", "worker", "ORDERS.ORDERS_V2", 10, 11);
    store.put_route("ORDERS", "worker", &route).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.unwrap().unwrap();
    assert_eq!(follower.current().stream, "ORDERS_V2");
    store.delete_route("ORDERS", "worker").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.unwrap().unwrap();
    assert_eq!(follower.current(), original);
    assert_eq!(route_key("ORDERS", "worker"), "route.ORDERS.worker");
}

/// The idempotency guard: the first claim of an id wins, a second sees it
/// busy until it is done, then done; a released claim can be taken again;
/// ids that are not KV keys work too; a claim expires after the TTL.
#[tokio::test(flavor = "multi_thread")]
async fn the_idempotency_guard_claims_each_id_once_within_its_ttl() {
    use cutover_app::idempotency::{Claim, Guard};
    let s = NatsServer::start();
    let (client, _) = connect(&s).await;
    let guard = Guard::open(client.clone(), "SEEN", Duration::from_secs(2)).await.unwrap();
    let other = Guard::open(client, "SEEN", Duration::from_secs(2)).await.unwrap();
    for id in ["m-1", "an id with spaces * and >"] {
        assert_eq!(guard.claim(id).await.unwrap(), Claim::First, "{id}");
        assert_eq!(other.claim(id).await.unwrap(), Claim::Busy, "{id}");
        guard.done(id).await.unwrap();
        assert_eq!(other.claim(id).await.unwrap(), Claim::Done, "{id}");
    }
    assert_eq!(guard.claim("m-2").await.unwrap(), Claim::First);
    guard.release("m-2").await.unwrap();
    assert_eq!(other.claim("m-2").await.unwrap(), Claim::First, "a released id is claimed again");
    // The TTL: the claim of m-1 expires (no sleep: wait for the condition).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while other.claim("m-1").await.unwrap() != Claim::First {
        assert!(std::time::Instant::now() < deadline, "the claim never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A claimer that dies leaves its id `busy`: after the claim timeout another
/// instance takes it over (once: the takeover is a compare-and-set), so the
/// message is processed rather than nak'd until the server gives up on it.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_claimers_id_is_taken_over_after_the_claim_timeout() {
    use cutover_app::idempotency::{Claim, Guard};
    let s = NatsServer::start();
    let (client, _) = connect(&s).await;
    let dead = Guard::open(client.clone(), "SEEN", Duration::from_secs(600)).await.unwrap();
    let live = Guard::open(client.clone(), "SEEN", Duration::from_secs(600))
        .await
        .unwrap()
        .with_claim_timeout(Duration::from_millis(300));
    let third = live.clone();
    assert_eq!(dead.claim("m-1").await.unwrap(), Claim::First);
    assert_eq!(live.claim("m-1").await.unwrap(), Claim::Busy, "honoured within the timeout");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while live.claim("m-1").await.unwrap() != Claim::First {
        assert!(std::time::Instant::now() < deadline, "the dead claim was never taken over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(third.claim("m-1").await.unwrap(), Claim::Busy, "the takeover is a fresh claim");
    live.done("m-1").await.unwrap();
    assert_eq!(dead.claim("m-1").await.unwrap(), Claim::Done);
}

/// A dual-write publisher follows its record across a server restart: the
/// restart ends its watch, which is set up again, so a record written after
/// the restart is acknowledged in its registration (before, the publisher
/// stopped following: it kept writing as the old record said, and a runner
/// waited for an acknowledgement that never came).
#[tokio::test(flavor = "multi_thread")]
async fn a_dual_publisher_follows_its_record_across_a_server_restart() {
    use cutover_app::dual::DualPublisher;
    use cutover_app::instance::InstanceOptions;
    use cutover_core::dual::{
        publisher_instance_key, publisher_key, PublisherRecord, PublisherRegistration, Writes,
        WritesAck, PUBLISHER_VERSION,
    };
    let mut s = NatsServer::start();
    let (client, js) = connect(&s).await;
    let opts = InstanceOptions::new("p1", "1.0");
    let p = DualPublisher::start(client, "ORDERS", &opts, Duration::from_secs(5)).await.unwrap();
    let store = JournalStore::open(&js, IfMissing::Create).await.unwrap().unwrap();
    let registration = || async {
        let e = store.entry(&publisher_instance_key("ORDERS", "p1"), "read").await.ok()??;
        serde_json::from_slice::<PublisherRegistration>(&e.value).ok()
    };
    assert_eq!(registration().await.expect("registered").ack, None);
    s.restart().unwrap();
    let record = PublisherRecord {
        version: PUBLISHER_VERSION,
        migration: "ORDERS.ORDERS_V2".into(),
        from: "ORDERS".into(),
        to: "ORDERS_V2".into(),
        writes: Writes::Dual,
        subjects: vec![("orders.>".into(), "v2.>".into())],
        updated_ms: 0,
    };
    let want = Some(WritesAck { migration: record.migration.clone(), writes: Writes::Dual });
    let v = serde_json::to_vec(&record).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Written once the restarted server takes writes again.
    while store.kv().put(publisher_key("ORDERS"), v.clone().into()).await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the restarted server takes no writes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while registration().await.and_then(|r| r.ack) != want {
        assert!(std::time::Instant::now() < deadline, "the record was not acknowledged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(p.writes().await, Writes::Dual);
}
