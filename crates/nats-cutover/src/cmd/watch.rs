//! `nats-cutover watch STREAM --consumer C`: a live view of a consumer's drain.
//!
//! Every tick reads the consumer once and evaluates two things: the settled /
//! checkpoint condition (`cutover_core::checkpoint::assess`, the rule the cut-over
//! itself waits on) and a Burrow-style status over the last `--window` reads
//! (`cutover_core::lag::status`: ok, draining, stalled, stopped). One line per
//! tick, or one JSON object per line with `--json`; Prometheus metrics with
//! `--metrics-addr`. Read-only: it never changes the consumer.

use crate::cli::{ConnArgs, WatchArgs};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::metrics::{self, Registry};
use cutover_core::checkpoint::{assess, Assessment};
use cutover_core::lag::{self, LagSample, Status, Verdict};
use cutover_core::model::ConsumerInfo;
use cutover_core::names;
use cutover_nats::journal::now_ms;
use serde_json::json;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub async fn run(conn: &ConnArgs, json_out: bool, a: WatchArgs) -> Result<ExitCode> {
    check_args(&a)?;
    super::one_system(conn, "watch")?;
    let js = super::connect(conn).await?;
    // The first read is checked: a wrong stream or consumer name is bad input,
    // not something to retry every tick.
    js.consumer_info(&a.stream, &a.consumer).await?;
    let reg = Registry::new(metrics::WATCH);
    let _server = super::serve_metrics(a.metrics_addr, Some(&reg)).await?;
    let labels = [("stream_name", a.stream.as_str()), ("consumer_name", a.consumer.as_str())];
    let mut history: VecDeque<LagSample> = VecDeque::with_capacity(a.window + 1);
    let mut tick = tokio::time::interval(a.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let t0 = Instant::now();
    let mut n = 0u64;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    // Nobody reading any more (`watch ... | head`) ends it as --count does.
    while a.count.is_none_or(|c| n < c) && !crate::out::stdout_gone() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut ctrl_c => break,
        }
        n += 1;
        reg.add(&metrics::TICKS, &[], 1.0);
        let ci = match js.consumer_info(&a.stream, &a.consumer).await {
            Ok((_, ci)) => ci,
            Err(e) => {
                // Keep watching: a leader election or a slow reply is exactly
                // what one watches through.
                reg.add(&metrics::ERRORS, &[], 1.0);
                print_error(&a, json_out, n, t0, &e);
                continue;
            }
        };
        if history.len() == a.window {
            history.pop_front();
        }
        history.push_back(LagSample::from(&ci));
        let mut verdict = lag::status(history.make_contiguous(), a.window);
        let grew = lag::held_while_growing(history.make_contiguous(), a.window);
        if let (Status::Ok, Some(grew)) = (verdict.status, grew) {
            if let Some(held) = held_without_runner(&js, &a.stream, grew).await {
                verdict = held;
            }
        }
        let check = assess(&ci);
        update(&reg, &labels, &ci, check.checkpoint, verdict.status);
        if json_out {
            print_tick_json(&a, n, t0, &ci, &verdict, &check);
        } else {
            print_tick(&a, t0, &ci, &verdict, &check);
        }
    }
    Ok(ExitCode::Ok)
}

/// A consumer held paused while messages arrive, with no runner holding a
/// lease on its stream: a migration whose run failed or died without giving
/// it back (a newcomer's trial saw `watch` say ok for 30 s of that, pending
/// growing). Stopped, naming the way out; `None` while a runner holds the
/// lease (its drain, fence or rolling wait), or when that cannot be read.
async fn held_without_runner(js: &cutover_nats::Js, stream: &str, grew: u64) -> Option<Verdict> {
    use cutover_nats::journal::{IfMissing, JournalStore};
    let store = JournalStore::open(js, IfMissing::ReturnNone).await.ok()?;
    let leases = match &store {
        Some(s) => s.leases().await.ok()?,
        None => vec![],
    };
    if leases.iter().any(|l| l.stream == stream && l.live) {
        return None;
    }
    Some(Verdict {
        status: Status::Stopped,
        reason: format!(
            "paused while {grew} new message(s) arrived, and no nats-cutover runner holds {stream}: nothing will deliver them; `nats-cutover status` names the migration that paused it (`run --resume ID` continues, `rollback ID` gives it back); not paused by nats-cutover: resume it yourself"
        ),
    })
}

/// Refuses names the server would not accept and out-of-range flags.
fn check_args(a: &WatchArgs) -> Result<()> {
    names::stream(&a.stream)?;
    names::consumer(&a.consumer)?;
    if a.interval < Duration::from_millis(10) || a.interval > Duration::from_secs(3600) {
        return Err(CliError::Flag("--interval must be between 10ms and 1h".into()));
    }
    if a.window < 2 {
        return Err(CliError::Flag(
            "--window must be at least 2 reads (no progress is only evidence over time)".into(),
        ));
    }
    if a.count == Some(0) {
        return Err(CliError::Flag(
            "--count must be at least 1 (omit it to watch until Ctrl-C)".into(),
        ));
    }
    Ok(())
}

/// A read that failed at tick `n`: a JSON error line, or a line on stderr.
fn print_error(a: &WatchArgs, json_out: bool, n: u64, t0: Instant, e: &cutover_nats::Error) {
    if json_out {
        outln!(
            "{}",
            json!({ "kind": "error", "n": n, "t_ms": t0.elapsed().as_millis() as u64, "message": e.to_string() })
        );
    } else {
        errln!(
            "[{:>7.1}s] cannot read {}/{}: {e}",
            t0.elapsed().as_secs_f64(),
            a.stream,
            a.consumer
        );
    }
}

/// Tick `n` as one JSON object on a line (--json).
fn print_tick_json(
    a: &WatchArgs,
    n: u64,
    t0: Instant,
    ci: &ConsumerInfo,
    verdict: &Verdict,
    check: &Assessment,
) {
    outln!(
        "{}",
        json!({
            "kind": "tick",
            "n": n,
            "t_ms": t0.elapsed().as_millis() as u64,
            "ts_ms": now_ms(),
            "stream": a.stream,
            "consumer": a.consumer,
            "status": verdict.status.as_str(),
            "reason": verdict.reason,
            "num_pending": ci.num_pending,
            "num_ack_pending": ci.num_ack_pending,
            "num_waiting": ci.num_waiting,
            "delivered_stream_seq": ci.delivered.stream_seq,
            "ack_floor_stream_seq": ci.ack_floor.stream_seq,
            "paused": ci.paused,
            "settled": check.settled,
            "stable": check.stable,
            "checkpoint": check.checkpoint,
        })
    );
}

/// A tick as one line: status, the consumer's counts, and the checkpoint.
fn print_tick(
    a: &WatchArgs,
    t0: Instant,
    ci: &ConsumerInfo,
    verdict: &Verdict,
    check: &Assessment,
) {
    let settled = match (check.stable, check.checkpoint) {
        (true, Some(f)) => format!("checkpoint F={f} (paused, settled)"),
        (false, Some(f)) => format!("settled at {f} (not paused)"),
        _ => "not settled".into(),
    };
    outln!(
        "[{:>7.1}s] {}/{} {:<8} pending {} ack pending {} waiting {} delivered {} ack floor {}{}; {settled}: {}",
        t0.elapsed().as_secs_f64(),
        a.stream,
        a.consumer,
        verdict.status.as_str(),
        ci.num_pending,
        ci.num_ack_pending,
        ci.num_waiting,
        ci.delivered.stream_seq,
        ci.ack_floor.stream_seq,
        if ci.paused { " paused" } else { "" },
        verdict.reason
    );
}

fn update(
    reg: &Registry,
    l: &[(&str, &str)],
    ci: &ConsumerInfo,
    checkpoint: Option<u64>,
    status: Status,
) {
    reg.set(&metrics::NUM_PENDING, l, ci.num_pending as f64);
    reg.set(&metrics::NUM_ACK_PENDING, l, ci.num_ack_pending as f64);
    reg.set(&metrics::NUM_WAITING, l, ci.num_waiting as f64);
    reg.set(&metrics::DELIVERED, l, ci.delivered.stream_seq as f64);
    reg.set(&metrics::ACK_FLOOR, l, ci.ack_floor.stream_seq as f64);
    reg.set(&metrics::PAUSED, l, if ci.paused { 1.0 } else { 0.0 });
    reg.set(&metrics::SETTLED, l, if checkpoint.is_some() { 1.0 } else { 0.0 });
    if let Some(f) = checkpoint {
        reg.set(&metrics::CHECKPOINT, l, f as f64);
    }
    for s in Status::ALL {
        let mut with_status = l.to_vec();
        with_status.push(("status", s.as_str()));
        reg.set(&metrics::STATUS, &with_status, if s == status { 1.0 } else { 0.0 });
    }
}
