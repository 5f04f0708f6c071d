//! Publishers that never retry (`run --answer-publishes`): the nats-py
//! publisher gives up at its first error, and sees none, because the runner
//! answers its publishes during the commit window.

use crate::common::*;
use crate::pyapps::{lines, processed, App};
use crate::run::{orders_stream, request};
use cutover_nats::engine::{self, events::Collect, RunOptions};
use std::time::Duration;

/// One live run with publisher.py at `--retry-horizon 0` (one attempt per
/// message, about 1,000 msg/s) and a route-following worker.py; the commit
/// window is held open 200 ms by a test hook (a hook sleeping in the
/// window: it widens what is measured, nothing waits on it) so that
/// publishes certainly fall in it. Returns (acked, failed, processed twice,
/// processed ids not acked, the longest publish stall in ms).
async fn one_run(answer_publishes: bool) -> (usize, usize, usize, usize, f64) {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let dir = e.server.dir();
    let (p_out, w_out) = (dir.join("pub.jsonl"), dir.join("worker.jsonl"));
    let w = ["--server", e.server.url(), "--stream", "ORDERS", "--consumer", "worker"];
    let w_tail = ["--mode", "pull", "--follow-route", "--out", w_out.to_str().unwrap()];
    let worker = App::start("worker.py", &[&w[..], &w_tail[..]].concat());
    let p = ["--server", e.server.url(), "--subject", "orders", "--subjects-count", "4"];
    let p_tail =
        ["--count", "100000", "--rate", "1000", "--id-prefix", "m", "--retry-horizon", "0"];
    let out_arg = ["--out", p_out.to_str().unwrap()];
    let publisher = App::start("publisher.py", &[&p[..], &p_tail[..], &out_arg[..]].concat());
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
    engine::run(&e.js, plan, &opts, &Collect::default(), rx).await.unwrap();
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
    (acked.len(), failed, twice, p.len() - acked.len(), stall)
}

/// With `--answer-publishes` no publish fails although the commit window
/// lasts 200 ms, every acknowledged message is processed exactly once and
/// verify holds (nothing stored twice where the runner's listening
/// overlapped a stream); without it, the same publisher loses publishes to
/// "no responders" (the test would see a bridge that does nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publishers_that_never_retry_see_no_error_with_answer_publishes() {
    let (acked, failed, twice, unknown, stall) = one_run(true).await;
    eprintln!("answer-publishes: {acked} acked with one attempt each, {failed} failed, {twice} processed twice, {unknown} unknown; longest publish {stall:.1} ms");
    assert_eq!((failed, twice, unknown), (0, 0, 0));
    assert!(stall >= 150.0, "no publish waited through the window: the bridge was not used");
    let (acked, failed, ..) = one_run(false).await;
    eprintln!("without: {acked} acked, {failed} failed (no responders, not retried)");
    assert!(failed > 0, "the window did not make a non-retrying publisher fail");
}
