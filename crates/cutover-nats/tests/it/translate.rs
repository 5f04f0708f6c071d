//! Translating a checkpoint to the new stream: exact in every shape of stream,
//! with a number of gets that grows logarithmically, never a scan.

use crate::common::*;
use cutover_core::checkpoint::assess;
use cutover_core::journal::Phase;
use cutover_core::plan::PlanRequest;
use cutover_nats::api::{Lookup, Via};
use cutover_nats::engine::{self, events::Collect, translate_once, RunOptions};
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

/// Publishes `n` messages fast (acks awaited in windows), subject chosen per index.
async fn bulk(e: &Env, n: u64, subject: impl Fn(u64) -> String) {
    let mut pending = futures::stream::FuturesUnordered::new();
    for i in 0..n {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("b-{i}").as_str());
        pending.push(std::future::IntoFuture::into_future(
            e.ctx.publish_with_headers(subject(i), h, String::new().into()).await.expect("publish"),
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
}

async fn source_b(e: &Env, from: &str, filter: Option<&str>) {
    let mut src = json!({"name": from});
    if let Some(f) = filter {
        src["filter_subject"] = json!(f);
    }
    e.stream(json!({"name": "B", "allow_direct": true, "duplicate_window": 120_000_000_000i64, "sources": [src]})).await;
}

async fn translated(e: &Env, f: u64) -> (u64, u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(r) = translate_once(&e.js, "A", "B", f).await.unwrap() {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "B never sourced up to {f}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The start is exact: the last B message before it came from at or before F,
/// the first at or after it from after F.
async fn assert_exact_start(e: &Env, f: u64, start: u64) {
    let (_, b) = e.js.stream_info("B").await.unwrap();
    let first = b.state.first_seq.max(1);
    // The existing message just before `start`, if any.
    let mut s = start;
    while s > first {
        s -= 1;
        if let Some(m) = e.js.get_msg("B", s, Lookup::Exact, Via::Direct).await.unwrap() {
            let o = m.origin_seq("A").unwrap().unwrap();
            assert!(o <= f, "B {s} has origin {o} > F {f}: start {start} too late");
            break;
        }
    }
    if let Some(m) = e.js.get_msg("B", start, Lookup::AtOrAfter, Via::Direct).await.unwrap() {
        let o = m.origin_seq("A").unwrap().unwrap();
        assert!(o > f, "B {} has origin {o} <= F {f}: start {start} too early", m.seq);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn gaps_in_a_before_and_after_the_checkpoint() {
    let e = env().await;
    e.stream(json!({"name": "A", "subjects": ["t.>"], "allow_direct": true})).await;
    bulk(&e, 100, |_| "t.x".into()).await;
    for seq in (10..=20).chain(60..=70) {
        e.js.api("delete", "STREAM.MSG.DELETE.A", &json!({"seq": seq})).await.unwrap();
    }
    source_b(&e, "A", None).await;
    for f in [0, 9, 15, 20, 21, 50, 65, 70, 99, 100] {
        let (start, gets) = translated(&e, f).await;
        assert_exact_start(&e, f, start).await;
        assert!(gets <= 16, "F {f}: {gets} gets");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn filtered_consumer_checkpoint_translates_exactly() {
    let e = env().await;
    e.stream(json!({"name": "A", "subjects": ["t.>"], "allow_direct": true})).await;
    e.consumer(
        "A",
        json!({"durable_name": "C", "ack_policy": "explicit", "filter_subject": "t.a"}),
    )
    .await;
    bulk(&e, 40, |i| if i % 3 == 0 { "t.a".into() } else { "t.b".into() }).await;
    let c = e
        .ctx
        .get_stream("A")
        .await
        .unwrap()
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("C")
        .await
        .unwrap();
    let mut batch =
        c.fetch().max_messages(5).expires(Duration::from_secs(2)).messages().await.unwrap();
    while let Some(m) = batch.next().await {
        m.unwrap().double_ack().await.unwrap();
    }
    e.js.consumer_pause("A", "C", Some("9999-01-01T00:00:00Z")).await.unwrap();
    let (_, ci) = e.js.consumer_info("A", "C").await.unwrap();
    let a = assess(&ci);
    assert!(a.stable, "{a:?}");
    let f = a.checkpoint.unwrap();
    // The fifth t.a is stream sequence 13 (indexes 0,3,6,9,12).
    assert!(f >= 13, "F {f}");
    source_b(&e, "A", None).await;
    let (start, _) = translated(&e, f).await;
    assert_exact_start(&e, f, start).await;
    // The first t.a at or after the start is the sixth one, A sequence 16.
    let mut next = start;
    loop {
        let m =
            e.js.get_msg("B", next, Lookup::AtOrAfter, Via::Direct)
                .await
                .unwrap()
                .expect("a t.a after F");
        if m.subject == "t.a" {
            assert_eq!(m.origin_seq("A").unwrap(), Some(16));
            break;
        }
        next = m.seq + 1;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn max_deliver_exhausted_messages_below_the_checkpoint_stay_exhausted() {
    let e = env().await;
    e.stream(json!({"name": "A", "subjects": ["t.>"], "duplicate_window": 120_000_000_000i64}))
        .await;
    e.consumer("A", json!({"durable_name": "C", "ack_policy": "explicit", "max_deliver": 1, "ack_wait": 300_000_000})).await;
    bulk(&e, 8, |_| "t.x".into()).await;
    let c = e
        .ctx
        .get_stream("A")
        .await
        .unwrap()
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("C")
        .await
        .unwrap();
    let mut batch =
        c.fetch().max_messages(5).expires(Duration::from_secs(2)).messages().await.unwrap();
    let mut got = vec![];
    while let Some(m) = batch.next().await {
        got.push(m.unwrap());
    }
    assert_eq!(got.len(), 5);
    for m in &got[1..] {
        m.double_ack().await.unwrap();
    }
    wait_until("message 1 to exhaust its only delivery", Duration::from_secs(10), || async {
        e.js.consumer_info("A", "C").await.unwrap().1.num_ack_pending == 0
    })
    .await;
    let plan = engine::prepare_plan(&e.js, &PlanRequest::source("A", "B", &["C"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    assert_eq!(j.consumers[0].checkpoint, Some(5));
    // B's durable continues at A's 6th message; the exhausted first one is not back.
    let bc = e
        .ctx
        .get_stream("B")
        .await
        .unwrap()
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("C")
        .await
        .unwrap();
    let mut batch =
        bc.fetch().max_messages(10).expires(Duration::from_millis(500)).messages().await.unwrap();
    let mut origins = vec![];
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        let h = m.headers.as_ref().unwrap().get("Nats-Stream-Source").unwrap().as_str().to_string();
        origins.push(cutover_core::source_header::parse(&h).unwrap().seq);
        m.double_ack().await.unwrap();
    }
    assert_eq!(origins, vec![6, 7, 8]);
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_stream_moves_and_new_messages_arrive_on_b() {
    let e = env().await;
    e.stream(json!({"name": "A", "subjects": ["t.>"], "duplicate_window": 120_000_000_000i64}))
        .await;
    e.consumer("A", json!({"durable_name": "C", "ack_policy": "explicit"})).await;
    let plan = engine::prepare_plan(&e.js, &PlanRequest::source("A", "B", &["C"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    assert_eq!(j.consumers[0].checkpoint, Some(0));
    e.publish("t.new", "n", 3).await;
    let bc = e
        .ctx
        .get_stream("B")
        .await
        .unwrap()
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("C")
        .await
        .unwrap();
    let mut batch =
        bc.fetch().max_messages(3).expires(Duration::from_secs(2)).messages().await.unwrap();
    let mut n = 0;
    while let Some(m) = batch.next().await {
        m.unwrap().double_ack().await.unwrap();
        n += 1;
    }
    assert_eq!(n, 3);
}

/// B is still sourcing when the checkpoint is known: translation waits for B to
/// hold F (it never positions against a B that has not caught up).
#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_not_yet_sourced_waits_then_translates_exactly() {
    let e = env().await;
    e.stream(json!({"name": "A", "subjects": ["t.>"], "allow_direct": true})).await;
    bulk(&e, 100_000, |_| "t.x".into()).await;
    source_b(&e, "A", None).await;
    let f = 99_990;
    let mut not_yet = 0;
    let (start, gets) = loop {
        match translate_once(&e.js, "A", "B", f).await.unwrap() {
            Some(r) => break r,
            None => not_yet += 1,
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    eprintln!("translation waited {not_yet} round(s) for B to source F; {gets} gets");
    assert_eq!(start, 99_991);
    assert_exact_start(&e, f, start).await;
}

/// A million-message stream whose mapping to B is far from one to one (B
/// sources a filter of varying density): the search stays logarithmic.
#[tokio::test(flavor = "multi_thread")]
async fn million_message_stream_translates_in_logarithmic_gets() {
    let e = env().await;
    e.stream(json!({"name": "A", "subjects": ["t.>"], "allow_direct": true})).await;
    let n = 1_000_000u64;
    // Dense at first, then one in seven, then one in a hundred.
    bulk(&e, n, |i| {
        if i < 200_000 || (i < 600_000 && i % 7 == 0) || i % 100 == 0 {
            "t.keep".into()
        } else {
            "t.skip".into()
        }
    })
    .await;
    source_b(&e, "A", Some("t.keep")).await;
    wait_until("B to source A's last kept message", Duration::from_secs(120), || async {
        engine::source_progress(&e.js, "B", "A").await.unwrap().sourced_origin_seq == Some(999_901)
    })
    .await;
    let (_, b) = e.js.stream_info("B").await.unwrap();
    let bound = 2 * (b.state.last_seq as f64).log2().ceil() as u32 + 4;
    for f in [1, 150_000, 200_000, 350_003, 599_999, 700_000, 999_950] {
        let (start, gets) = translated(&e, f).await;
        assert_exact_start(&e, f, start).await;
        eprintln!(
            "F {f}: start {start}, {gets} gets (bound {bound} for {} messages)",
            b.state.last_seq
        );
        assert!(gets <= bound, "F {f}: {gets} gets exceeds {bound}");
    }
}
