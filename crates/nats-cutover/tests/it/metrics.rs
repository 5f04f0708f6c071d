//! `--metrics-addr`: Prometheus metrics scraped with a plain HTTP GET while
//! `watch` and `run` work, on a free loopback port.

use crate::common::*;
use crate::watch::{fixture, hold, Watching};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// GET /metrics; `None` while nothing listens yet.
pub fn scrape(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    Some((head.to_string(), body.to_string()))
}

/// Scrapes until `ready` holds for the body (the server may not listen yet, or
/// not show the state yet); returns that body.
async fn scrape_until(
    port: u16,
    what: &str,
    timeout: Duration,
    ready: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        if let Some((head, body)) = scrape(port, "/metrics") {
            assert!(
                head.starts_with("HTTP/1.1 200") && head.contains("text/plain; version=0.0.4"),
                "{head}"
            );
            if ready(&body) {
                return body;
            }
            last = Some(body);
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for metrics showing {what}; last scrape:\n{}",
            last.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_while_watching() {
    let e = env().await;
    let c = fixture(&e).await;
    let port = cutover_testkit::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut w = Watching::start(
        &e,
        &[
            "A",
            "--consumer",
            "C",
            "--interval",
            "100ms",
            "--window",
            "4",
            "--count",
            "600",
            "--metrics-addr",
            &addr,
        ],
    );
    let _held = hold(&c, 5).await;
    w.until_status("stalled", Duration::from_secs(20));
    let body = scrape_until(port, "the stalled consumer", Duration::from_secs(10), |b| {
        b.contains("status=\"stalled\"} 1")
    })
    .await;
    let l = "stream_name=\"A\",consumer_name=\"C\"";
    for line in [
        format!("nats_cutover_consumer_num_pending{{{l}}} 15"),
        format!("nats_cutover_consumer_num_ack_pending{{{l}}} 5"),
        format!("nats_cutover_consumer_delivered_stream_seq{{{l}}} 5"),
        format!("nats_cutover_consumer_ack_floor_stream_seq{{{l}}} 0"),
        format!("nats_cutover_consumer_paused{{{l}}} 0"),
        format!("nats_cutover_consumer_settled{{{l}}} 0"),
        format!("nats_cutover_consumer_status{{{l},status=\"stalled\"}} 1"),
        format!("nats_cutover_consumer_status{{{l},status=\"ok\"}} 0"),
        "# TYPE nats_cutover_watch_ticks_total counter".to_string(),
        "nats_cutover_errors_total 0".to_string(),
    ] {
        assert!(body.lines().any(|x| x == line), "missing {line:?} in\n{body}");
    }
    let (head, _) = scrape(port, "/other").expect("answer");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_run_through_its_steps() {
    let e = env().await;
    let c = fixture(&e).await;
    // One message held by a "slow worker": the run waits in the drain for it,
    // which gives the scrape a state to see.
    let held = hold(&c, 1).await;
    let port = cutover_testkit::free_port();
    let addr = format!("127.0.0.1:{port}");
    let url = e.server.url().to_string();
    let run = std::thread::spawn(move || {
        cli(&move_args(
            &["--server", &url, "run"],
            "A",
            "B",
            "C",
            &["--yes", "--metrics-addr", &addr],
        ))
    });
    let body = scrape_until(port, "the drain", Duration::from_secs(20), |b| {
        b.contains("nats_cutover_step{migration=\"A.B\",step=\"move_consumers\"} 1")
            && b.contains(
                "nats_cutover_consumer_num_ack_pending{stream_name=\"A\",consumer_name=\"C\"} 1",
            )
    })
    .await;
    for line in [
        "nats_cutover_step{migration=\"A.B\",step=\"create_b\"} 2",
        "nats_cutover_step{migration=\"A.B\",step=\"catch_up\"} 2",
        "nats_cutover_catchup_remaining{migration=\"A.B\"} 0",
        "nats_cutover_consumer_num_pending{stream_name=\"A\",consumer_name=\"C\"} 19",
        "nats_cutover_errors_total 0",
    ] {
        assert!(body.lines().any(|x| x == line), "missing {line:?} in\n{body}");
    }
    assert!(!body.contains("nats_cutover_consumers_moved{"), "nothing moved yet:\n{body}");
    for m in held {
        m.ack().await.expect("ack");
    }
    let out = run.join().unwrap();
    assert_eq!(out.code, 0, "{out:?}");
}
