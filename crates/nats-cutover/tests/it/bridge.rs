//! The commit window's publishes, answered by the runner (on by default;
//! `--no-answer-publishes` turns it off): a nats-py publisher that never
//! retries sees no error, one without msg-ids gets "no responders" at once
//! (never its timeout) and nothing is stored twice.

use crate::common::*;
use crate::pyapps::{lines, processed, App};
use crate::run::{orders_stream, request};
use cutover_nats::engine::events::{Collect, EventKind, Info};
use cutover_nats::engine::{self, RunOptions};
use std::time::Duration;

/// What one run measured.
struct Measured {
    acked: usize,
    failed: usize,
    twice: usize,
    unknown: usize,
    stall: f64,
    /// The bridge's "no responders" answers (`Info::Bridged`).
    no_responders: u64,
    /// The errors the publisher recorded (for the assertion messages).
    errors: Vec<String>,
}

/// One live run with publisher.py (about 1,000 msg/s) and a route-following
/// worker.py; the commit window is held open 200 ms by a test hook (a hook
/// sleeping in the window: it widens what is measured, nothing waits on it)
/// so that publishes certainly fall in it. With msg-ids the publisher makes
/// one attempt per message (`--retry-horizon 0`); without (`--no-msg-id`)
/// it retries only "no responders" (nothing stored), and records a timeout
/// as failed.
async fn one_run(answer_publishes: bool, no_msg_id: bool) -> Measured {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let dir = e.server.dir();
    let (p_out, w_out) = (dir.join("pub.jsonl"), dir.join("worker.jsonl"));
    let w = ["--server", e.server.url(), "--stream", "ORDERS", "--consumer", "worker"];
    let w_tail = ["--mode", "pull", "--follow-route", "--id-from-payload"];
    let w_out_arg = ["--out", w_out.to_str().unwrap()];
    let worker = App::start("worker.py", &[&w[..], &w_tail[..], &w_out_arg[..]].concat());
    let p = ["--server", e.server.url(), "--subject", "orders", "--subjects-count", "4"];
    let p_tail = ["--count", "100000", "--rate", "1000", "--id-prefix", "m"];
    let kind: &[&str] = if no_msg_id {
        &["--no-msg-id", "--retry-horizon", "10"]
    } else {
        &["--retry-horizon", "0"]
    };
    let out_arg = ["--out", p_out.to_str().unwrap()];
    let publisher = App::start("publisher.py", &[&p[..], &p_tail[..], kind, &out_arg[..]].concat());
    wait_until("the publisher publishes", Duration::from_secs(30), || async {
        lines(&p_out).len() >= 300
    })
    .await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let hold = std::sync::Arc::new(|step: &str| {
        if step == "subjects_released" {
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let opts = RunOptions { answer_publishes, after_step: Some(hold), ..Default::default() };
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let events = Collect::default();
    engine::run(&e.js, plan, &opts, &events, rx).await.unwrap();
    let no_responders = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|ev| match &ev.kind {
            EventKind::Info(Info::Bridged { no_responders, .. }) => Some(*no_responders),
            _ => None,
        })
        .sum();
    let n = lines(&p_out).len();
    wait_until("the publisher goes on", Duration::from_secs(30), || async {
        lines(&p_out).len() >= n + 300
    })
    .await;
    publisher.stop();
    let recs = lines(&p_out);
    let failed = recs.iter().filter(|r| r["failed"] == true).count();
    let acked: Vec<String> = recs
        .iter()
        .filter(|r| r["failed"] != true)
        .filter_map(|r| r["id"].as_str().map(String::from))
        .collect();
    let stall = recs.iter().filter_map(|r| r["stall_ms"].as_f64()).fold(0.0, f64::max);
    let files = [w_out.clone()];
    wait_until("every acked message processed", Duration::from_secs(30), || async {
        let p = processed(&files);
        acked.iter().all(|id| p.contains_key(id))
    })
    .await;
    worker.stop();
    let p = processed(&files);
    let twice = p.values().filter(|n| **n > 1).count();
    let v = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(v.code, 0, "{v:?}");
    let errors = recs.iter().filter_map(|r| r["error"].as_str().map(String::from)).collect();
    let unknown = p.len() - acked.len();
    Measured { acked: acked.len(), failed, twice, unknown, stall, no_responders, errors }
}

/// By default no publish fails although the commit window lasts 200 ms,
/// every acknowledged message is processed exactly once and verify holds
/// (nothing stored twice where the runner's listening overlapped a
/// stream); with `--no-answer-publishes`, the same publisher loses
/// publishes to "no responders" (the test would see a bridge that does
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publishers_that_never_retry_see_no_error_by_default() {
    let m = one_run(true, false).await;
    eprintln!("answered: {} acked with one attempt each, {} failed, {} processed twice, {} unknown; longest publish {:.1} ms", m.acked, m.failed, m.twice, m.unknown, m.stall);
    assert_eq!((m.failed, m.twice, m.unknown), (0, 0, 0), "{:?}", m.errors);
    assert!(m.stall >= 150.0, "no publish waited through the window: the bridge was not used");
    let m = one_run(false, false).await;
    eprintln!("without: {} acked, {} failed (no responders, not retried)", m.acked, m.failed);
    assert!(m.failed > 0, "the window did not make a non-retrying publisher fail");
}

/// Publishes without a msg-id in the 200 ms window are answered "no
/// responders" by the runner (the server's own status line, from its
/// second connection): the publisher retries them, none times out, every
/// acknowledged one is processed once, none is stored twice (the zones:
/// an answer never comes before a stream could still store the publish).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publishes_without_msg_ids_get_no_responders_from_the_runner_and_are_stored_once() {
    let m = one_run(true, true).await;
    eprintln!("no msg-ids: {} acked, {} failed, {} processed twice, {} unknown; {} answered no responders by the runner; longest publish {:.1} ms", m.acked, m.failed, m.twice, m.unknown, m.no_responders, m.stall);
    assert_eq!((m.failed, m.twice, m.unknown), (0, 0, 0), "{:?}", m.errors);
    assert!(m.no_responders > 0, "the runner answered none of the window's publishes");
}

/// A publisher that sends one msg-id twice inside the window (its retry of a
/// request the runner holds) has it stored once; the runner's account calls
/// the second a retry, not a publish a stream had stored already (it used
/// to count every duplicate ack as an overlap with a stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_inside_the_window_is_stored_once_and_counted_as_a_retry() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "before", 3).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let in_window = std::sync::Arc::new(tokio::sync::Notify::new());
    let (n, answered) = (in_window.clone(), std::sync::Arc::new(std::sync::Barrier::new(2)));
    let a = answered.clone();
    // The window held open until both publishes were sent.
    let hold = std::sync::Arc::new(move |step: &str| {
        if step == "subjects_released" {
            n.notify_one();
            a.wait();
        }
    });
    let client = e.js.client.clone();
    let publisher = tokio::spawn(async move {
        use futures::StreamExt;
        let inbox = client.new_inbox();
        let mut answers = client.subscribe(format!("{inbox}.*")).await.unwrap();
        in_window.notified().await;
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", "r-1");
        for n in ["1", "2"] {
            let reply = format!("{inbox}.{n}");
            client
                .publish_with_reply_and_headers("orders.eu", reply, h.clone(), "r".into())
                .await
                .unwrap();
        }
        // Both on the wire, in this order, before the window goes on.
        client.flush().await.unwrap();
        tokio::task::block_in_place(|| answered.wait());
        let (a, b) = (answers.next().await.unwrap(), answers.next().await.unwrap());
        if a.subject.ends_with(".1") {
            (a, b)
        } else {
            (b, a)
        }
    });
    let opts = RunOptions { after_step: Some(hold), ..Default::default() };
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let events = Collect::default();
    engine::run(&e.js, plan, &opts, &events, rx).await.unwrap();
    let (first, second) = publisher.await.unwrap();
    let ack = |m: &async_nats::Message| serde_json::from_slice::<serde_json::Value>(&m.payload);
    let (first, second) = (ack(&first).unwrap(), ack(&second).unwrap());
    assert_eq!((first["stream"].as_str(), first["seq"].as_u64()), (Some("ORDERS_V2"), Some(4)));
    assert_eq!((second["seq"].as_u64(), second["duplicate"].as_bool()), (Some(4), Some(true)));
    let bridged: Vec<Info> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|ev| match &ev.kind {
            EventKind::Info(i @ Info::Bridged { .. }) => Some(i.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        bridged,
        [Info::Bridged { stored: 2, duplicates: 0, retries: 1, failed: 0, no_responders: 0 }]
    );
}
