//! The cut-over under live load, end to end, against a real server.

use crate::common::*;
use cutover_core::journal::{ConsumerPhase, Phase};
use cutover_core::plan::PlanRequest;
use cutover_demo::load::{Load, LoadConfig, LoadReport};
use cutover_nats::engine::{self, events::Collect, RunOptions};
use cutover_nats::Js;
use serde_json::json;
use std::time::Duration;

pub fn request(from: &str, to: &str, consumers: &[&str]) -> PlanRequest {
    PlanRequest::source(from, to, consumers)
}

pub async fn orders_stream(e: &Env, ack_wait_ms: i64) {
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": ack_wait_ms * 1_000_000, "max_ack_pending": 1000})).await;
}

pub fn load_cfg(rate: u32, max: u64) -> LoadConfig {
    LoadConfig {
        rate,
        max_messages: max,
        duration: Duration::from_secs(30),
        workers: 4,
        ..Default::default()
    }
}

/// Waits (with a deadline) until the workload's counter reaches `n`.
async fn until(load: &Load, what: &str, n: u64, count: fn(&Load) -> u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while count(load) < n {
        assert!(std::time::Instant::now() < deadline, "{what}: only {} of {n}", count(load));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn until_processed(load: &Load, n: u64) {
    until(load, "processed", n, Load::processed).await
}

pub async fn until_published(load: &Load, n: u64) {
    until(load, "published", n, Load::published).await
}

/// Lets the publishers go on for `more` messages after the move, then stops
/// the workload once every published message was processed: its report.
pub async fn finish_after(load: Load, more: u64) -> LoadReport {
    let after = load.published() + more;
    until_published(&load, after).await;
    finish(load).await
}

/// ORDERS and its durable `worker` (ack_wait in ms) under a live workload of
/// `rate` msg/s (at most 20,000 messages), once `processed` were processed.
pub async fn orders_under_load(e: &Env, ack_wait_ms: i64, rate: u32, processed: u64) -> Load {
    orders_stream(e, ack_wait_ms).await;
    let load = Load::start(e.js.client.clone(), load_cfg(rate, 20_000)).await;
    until_processed(&load, processed).await;
    load
}

pub async fn finish(mut load: Load) -> LoadReport {
    load.finish_publishing().await;
    let drained = load.drain(Duration::from_secs(30)).await;
    let r = load.stop().await;
    assert!(
        drained,
        "not every published message was processed: lost {:?}",
        &r.lost[..r.lost.len().min(20)]
    );
    r
}

pub fn assert_exact(r: &LoadReport) {
    eprintln!(
        "published {} processed {} (unique {}), lost {}, duplicated {}, publish retries {}, max publish stall {:.1} ms, max consumer gap {:.1} ms",
        r.published, r.processed_total, r.processed_unique, r.lost.len(), r.duplicated.len(), r.publish_retries, r.max_publish_stall_ms, r.max_consumer_gap_ms
    );
    eprintln!("redelivered {:?}, across streams {:?}", r.redelivered, r.duplicated_across_streams);
    assert_eq!(r.publish_failures, 0, "publishers saw errors they could not retry");
    assert!(r.lost.is_empty(), "lost: {:?}", &r.lost[..r.lost.len().min(20)]);
    assert!(
        r.duplicated.is_empty(),
        "processed twice: {:?}",
        &r.duplicated[..r.duplicated.len().min(20)]
    );
    assert!(r.extra.is_empty(), "processed but never published: {:?}", r.extra);
    assert_eq!(r.processed_unique, r.published);
}

pub async fn assert_finished(
    e: &Env,
    from: &str,
    to: &str,
    consumer: &str,
    subjects: serde_json::Value,
) {
    let (_, a) = e.js.stream_info(from).await.unwrap();
    assert!(a.config.sealed, "{from} is sealed");
    assert!(e.js.consumer_info_opt(from, consumer).await.unwrap().is_none(), "old durable deleted");
    let (_, b) = e.js.stream_info(to).await.unwrap();
    assert_eq!(serde_json::to_value(&b.config.subjects).unwrap(), subjects);
    assert!(b.config.sources.is_empty(), "source removed");
    assert!(e.js.consumer_info_opt(to, consumer).await.unwrap().is_some(), "new durable exists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_cutover_loses_nothing_and_processes_nothing_twice() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let load = Load::start(e.js.client.clone(), load_cfg(1000, 4000)).await;
    until_processed(&load, 500).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    assert!(plan.safe);
    let sink = Collect::default();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j = engine::run(&e.js, plan, &RunOptions::default(), &sink, rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let c = &j.consumers[0];
    assert_eq!(c.phase, ConsumerPhase::Retired);
    assert!(c.translate_gets.unwrap() <= 3, "one-to-one streams translate in a get or two: {c:?}");
    // Publishers keep going, now into ORDERS_V2, and workers keep up.
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    assert_finished(&e, "ORDERS", "ORDERS_V2", "worker", json!(["orders.>"])).await;
    // Events were reported for every step.
    let steps: Vec<String> = sink
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e.kind, engine::EventKind::StepDone { .. }))
        .map(|e| e.step.to_string())
        .collect();
    assert_eq!(steps, STEPS);
    // The final check, from the streams alone: every message once, in order,
    // handed over without gap or overlap, no retry slipped into B twice.
    let v = assert_verified(&e.js, &j.id).await;
    assert_eq!(v.consumers[0].counts.checked, r.published, "each published message checked once");
}

/// Runs the CLI's `run` as a child process with the test crash hook.
/// The runner killed right after creating the new durable (exit 86); the
/// workers followed the route and acknowledged more than `past` messages
/// on ORDERS_V2 after its start.
pub async fn crashed_once_b_serves(e: &Env, past: u64) {
    let out = run_cli(e, &run_orders(&[], &["--lease-ttl", "1s"]), Some("consumer_created:worker"));
    assert_eq!(out.code, 86, "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    let start = j.consumers[0].b_start.unwrap();
    wait_until("workers to process on ORDERS_V2", Duration::from_secs(20), || async {
        let (_, c) = e.js.consumer_info("ORDERS_V2", "worker").await.unwrap();
        c.ack_floor.stream_seq > start + past
    })
    .await;
}

pub fn run_cli(e: &Env, args: &[&str], crash_after: Option<&str>) -> Out {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
    cmd.arg("--server").arg(e.server.url()).args(args).env_remove("NATS_CUTOVER_TEST_CRASH_AFTER");
    if let Some(s) = crash_after {
        cmd.env("NATS_CUTOVER_TEST_CRASH_AFTER", s);
    }
    let o = crate::common::output_off_runtime(&mut cmd);
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

/// Runs the CLI until it stops saying "try again" (`retriable` texts in its
/// stderr: a crashed runner's lease not yet lapsed, a server just restarted),
/// with a deadline rather than a sleep of the lease's length.
pub async fn retry_cli(e: &Env, args: &[&str], retriable: &[&str]) -> Out {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = run_cli(e, args, None);
        if out.code != 0
            && std::time::Instant::now() < deadline
            && retriable.iter().any(|r| out.stderr.contains(r))
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        return out;
    }
}

/// Resumes once the crashed runner's lease has lapsed.
async fn resume_until_done(e: &Env, id: &str) -> Out {
    retry_cli(e, &["--json", "run", "--resume", id, "--lease-ttl", "1s"], &["is held by runner"])
        .await
}

/// The streams and the journal alone prove the migration exact.
pub async fn assert_verified(js: &Js, id: &str) -> cutover_core::verify::Report {
    let v = cutover_nats::verify::verify(js, id, &Default::default(), &|_| {}).await.unwrap();
    assert!(v.holds, "verify: {:?} {:#?}", v.summary, v.offenders);
    v
}

async fn crash_and_resume(crash_after: &str) {
    let e = env().await;
    let load = orders_under_load(&e, 30_000, 500, 200).await;
    let out = run_cli(&e, &run_orders(&["--json"], &["--lease-ttl", "1s"]), Some(crash_after));
    assert_eq!(out.code, 86, "the runner should die after {crash_after}: {out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_ne!(j.phase, Phase::Done);
    // Its guard saw it die and released its lease (a resume need not wait).
    let leases = engine::leases(&e.js).await.unwrap();
    assert!(leases.iter().all(|l| !l.live), "after {crash_after}: {leases:?}; {out:?}");
    let out = resume_until_done(&e, "ORDERS.ORDERS_V2").await;
    assert_eq!(out.code, 0, "resume after {crash_after}: {out:?}");
    let last: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["journal"]["phase"], "done", "{out:?}");
    if crash_after.starts_with("consumer_created") {
        // Killed inside move_consumers: `status` shows that step as
        // interrupted and resumed, not as unfinished beside its rerun.
        let st = run_cli(&e, &["status", "ORDERS.ORDERS_V2"], None);
        assert!(st.stdout.contains("interrupted, resumed below"), "{st:?}");
        assert!(!st.stdout.contains("unfinished"), "{st:?}");
    }
    let r = finish_after(load, 200).await;
    assert_exact(&r);
    assert_finished(&e, "ORDERS", "ORDERS_V2", "worker", json!(["orders.>"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_crash_at_create_b() {
    crash_and_resume("create_b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_crash_at_catch_up() {
    crash_and_resume("catch_up").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_crash_once_the_new_durable_exists() {
    crash_and_resume("consumer_created:worker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_crash_at_move_consumers() {
    crash_and_resume("move_consumers").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_crash_between_releasing_and_taking_subjects() {
    crash_and_resume("subjects_released").await;
}

/// A runner that dies inside the commit window (A released its subjects, B
/// has not taken them) no longer leaves publishers without a stream until
/// its lease lapses and someone resumes: its guard process sees it exit and
/// gives A its subjects back at once (the compensating action of a failed
/// commit), releases the lease, and says so. `run --resume` then retries
/// the commit without waiting for any lease; nothing is lost or processed
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_killed_in_the_commit_window_is_closed_by_its_guard() {
    let e = env().await;
    let load = orders_under_load(&e, 30_000, 500, 200).await;
    let out = run_cli(&e, &run_orders(&["--json"], &[]), Some("subjects_released"));
    assert_eq!(out.code, 86, "the runner should die in the window: {out:?}");
    // `output()` returned once the guard, which shares the runner's stderr,
    // was done: A serves the publishers again now, not a lease later.
    assert!(out.stderr.contains("nats-cutover guard: runner"), "{out:?}");
    assert!(out.stderr.contains("gave ORDERS its subjects back"), "{out:?}");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert_eq!(a.config.subjects, vec!["orders.>".to_string()]);
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.phase, Phase::ConsumersMoved);
    assert!(j.error.as_deref().is_some_and(|m| m.contains("guard")), "{:?}", j.error);
    let leases = engine::leases(&e.js).await.unwrap();
    assert!(leases.iter().all(|l| !l.live), "the guard released the lease: {leases:?}");
    let out = run_cli(&e, &["--json", "run", "--resume", "ORDERS.ORDERS_V2"], None);
    assert_eq!(out.code, 0, "resume at once: {out:?}");
    let r = finish_after(load, 200).await;
    assert_exact(&r);
    assert_finished(&e, "ORDERS", "ORDERS_V2", "worker", json!(["orders.>"])).await;
}

/// A run whose drain holds the consumer paused (a message held by a dead
/// worker, `--max-pause 60s`), its stderr piped: returned once the drain
/// paused `worker`, with the workload and the held message.
async fn runner_holding_a_drain(
    e: &Env,
) -> (std::process::Child, Load, async_nats::jetstream::Message) {
    let load = orders_under_load(e, 30_000, 300, 100).await;
    let held = take_one_and_die(e).await;
    let runner = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .args(["--server", e.server.url()])
        .args(run_orders(&[], &["--max-pause", "60s"]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the drain to pause worker", Duration::from_secs(30), || async {
        e.js.consumer_info("ORDERS", "worker").await.is_ok_and(|(_, c)| c.paused)
    })
    .await;
    (runner, load, held)
}

/// After the runner stopped: `worker` delivers and no lease is held; the held
/// message is let go (its worker "recovers", so the resumed drain settles
/// without waiting for its ack_wait); `run --resume` at once; exact.
async fn delivering_then_resumed(e: &Env, load: Load, held: async_nats::jetstream::Message) {
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "worker delivers again: {c:?}");
    assert!(engine::leases(&e.js).await.unwrap().iter().all(|l| !l.live), "lease released");
    held.ack_with(async_nats::jetstream::AckKind::Nak(None)).await.unwrap();
    let out = run_cli(e, &["--json", "run", "--resume", "ORDERS.ORDERS_V2"], None);
    assert_eq!(out.code, 0, "resume at once: {out:?}");
    let r = finish_after(load, 200).await;
    assert_exact(&r);
}

/// A runner killed while its drain holds the consumer paused no longer
/// leaves it paused until the drain's pause lapses (2 minutes; for good once
/// settled): its guard gives the consumer back at once (running again on
/// ORDERS, the compensating action of a failed drain), releases the lease
/// and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_killed_in_a_drain_has_its_consumer_given_back_by_its_guard() {
    use std::io::Read;
    let e = env().await;
    let (mut runner, load, held) = runner_holding_a_drain(&e).await;
    runner.kill().unwrap();
    runner.wait().unwrap();
    // The guard shares the runner's stderr: its end is the guard's.
    let mut said = String::new();
    runner.stderr.take().unwrap().read_to_string(&mut said).unwrap();
    assert!(said.contains("nats-cutover guard: runner"), "{said}");
    assert!(said.contains("gave back consumer(s) worker"), "{said}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.consumers[0].phase, ConsumerPhase::Waiting);
    delivering_then_resumed(&e, load, held).await;
}

/// SIGTERM (what `timeout`, systemd and Kubernetes send) is a request to
/// stop at the next safe point, like Ctrl-C: the drain gives the consumer
/// back, the lease is released, exit 5 (a newcomer's SIGTERM killed the
/// runner at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_stops_the_run_at_a_safe_point() {
    let e = env().await;
    let (runner, load, held) = runner_holding_a_drain(&e).await;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &runner.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let out = runner.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{said}");
    assert!(said.contains("interrupted at a safe point"), "{said}");
    assert!(!said.contains("nats-cutover guard"), "a safe stop leaves the guard nothing: {said}");
    delivering_then_resumed(&e, load, held).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_crash_at_move_publishers() {
    crash_and_resume("move_publishers").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_crash_at_seal_a() {
    crash_and_resume("seal_a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_after_crash_at_remove_source() {
    crash_and_resume("remove_source").await;
}

/// Rollback after the new durable processed messages on B: the old durable is
/// reset past them (2.14+), the route is removed, workers follow back, and
/// nothing is lost or processed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollback_before_the_commit_point_restores_the_old_consumer_exactly() {
    let e = env().await;
    let load = orders_under_load(&e, 30_000, 500, 200).await;
    crashed_once_b_serves(&e, 100).await;
    let out = retry_cli(
        &e,
        &["--json", "rollback", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"],
        &["is held by runner"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("reset_to"),
        "the old durable must be reset past what the new one processed: {out:?}"
    );
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    assert!(
        e.js.stream_info_opt("ORDERS_V2").await.unwrap().is_none(),
        "the run created ORDERS_V2, the rollback deletes it"
    );
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused);
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.phase, Phase::RolledBack);
    assert_eq!(j.error, None, "a rolled-back migration keeps no advice to resume");
    // Resuming a rolled-back migration would start it over unasked: refused.
    let out = run_cli(&e, &["run", "--resume", "ORDERS.ORDERS_V2"], None);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("was rolled back: there is nothing to resume"), "{out:?}");
    assert!(e.js.stream_info_opt("ORDERS_V2").await.unwrap().is_none(), "nothing recreated");
    // After the commit point a rollback is refused.
    let e2 = env().await;
    orders_stream(&e2, 30_000).await;
    let out = run_cli(&e2, &run_orders(&[], &["--delete-old"]), None);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        e2.js.stream_info_opt("ORDERS").await.unwrap().is_none(),
        "--delete-old deletes the old stream"
    );
    let out = run_cli(&e2, &["rollback", "ORDERS.ORDERS_V2"], None);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("is complete"), "{out:?}");
    assert!(!out.stderr.contains("run --resume"), "nothing to resume: {out:?}");
}

/// A message held by a dead worker keeps the paused consumer unsettled; the
/// lease refuses a second runner meanwhile; Ctrl-C stops at a safe point and
/// hands the consumer back to the applications.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn second_runner_is_refused_and_ctrl_c_stops_safely() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.publish("orders.1", "x", 5).await;
    // A worker takes a message and dies without acking it.
    let c = e.pull_consumer("ORDERS", "worker").await;
    use futures::StreamExt;
    let mut b = c.fetch().max_messages(1).messages().await.unwrap();
    let _held = b.next().await.unwrap().unwrap();
    let first = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .args(run_orders(&["--server", e.server.url()], &[]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the first runner to pause and drain", Duration::from_secs(20), || async {
        let paused =
            e.js.consumer_info("ORDERS", "worker").await.map(|(_, c)| c.paused).unwrap_or(false);
        let draining = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2")
            .await
            .map(|(_, j)| j.in_progress == Some(cutover_core::journal::Step::MoveConsumers))
            .unwrap_or(false);
        paused && draining
    })
    .await;
    let second = e.cli(&run_orders(&[], &[]));
    assert_eq!(second.code, 1, "{second:?}");
    assert!(second.stderr.contains("is held by runner"), "{second:?}");
    std::process::Command::new("kill").args(["-INT", &first.id().to_string()]).status().unwrap();
    let o = first.wait_with_output().unwrap();
    let (code, stderr) =
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).to_string());
    assert_eq!(code, 5, "Ctrl-C exits INTERRUPTED: {stderr}");
    assert!(
        stderr.contains("nats-cutover run --resume ORDERS.ORDERS_V2")
            && stderr.contains("rollback ORDERS.ORDERS_V2"),
        "{stderr}"
    );
    let (_, c) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(!c.paused, "the interrupted drain hands the consumer back");
    assert!(
        e.js.consumer_info_opt("ORDERS_V2", "worker").await.unwrap().is_none(),
        "no durable on B before it is positioned"
    );
}

/// A worker dies mid-message during the drain: the paused consumer withholds
/// the redelivery, the engine notices no ack progress for 1.5 × ack_wait and
/// lets it through once; still exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_killed_mid_message_during_the_drain() {
    let e = env().await;
    let load = orders_under_load(&e, 1_000, 300, 100).await;
    let held = take_one_and_die(&e).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    drop(held);
    assert_eq!(j.phase, Phase::Done);
    assert!(j.consumers[0].nudges >= 1, "the stuck message needed a nudge: {:?}", j.consumers[0]);
    let r = finish_after(load, 100).await;
    assert_exact(&r);
}

/// Push consumers need no redeploy: the new durable on B keeps the deliver
/// subject and group, so the same subscriptions receive from B and their acks
/// go to B.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_consumer_with_deliver_group_moves_without_redeploy() {
    use futures::StreamExt;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    let e = env().await;
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("ORDERS", json!({"durable_name": "pusher", "ack_policy": "explicit", "deliver_subject": "deliver.orders", "deliver_group": "g", "max_ack_pending": 1000, "ack_wait": 30_000_000_000i64})).await;
    let seen: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let mut subs = vec![];
    for _ in 0..2 {
        let client = async_nats::connect(e.server.url()).await.unwrap();
        let mut sub = client.queue_subscribe("deliver.orders", "g".into()).await.unwrap();
        let seen = seen.clone();
        subs.push(tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                let Some(reply) = m.reply.clone() else { continue };
                let id = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Msg-Id"))
                    .and_then(|v| v.as_str().strip_prefix("m-"))
                    .and_then(|s| s.parse::<u64>().ok());
                if let Some(id) = id {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    // Double ack: request on the reply subject, the server answers.
                    if client.request(reply, "+ACK".into()).await.is_ok() {
                        *seen.lock().unwrap().entry(id).or_default() += 1;
                    }
                }
            }
        }));
    }
    let mut cfg = load_cfg(500, 20_000);
    cfg.workers = 0;
    let load = Load::start(e.js.client.clone(), cfg).await;
    wait_until("push subscribers to receive", Duration::from_secs(20), || async {
        seen.lock().unwrap().len() > 200
    })
    .await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["pusher"])).await.unwrap();
    assert!(plan.safe, "{:?}", plan.unsafe_findings().collect::<Vec<_>>());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let (_, bc) = e.js.consumer_info("ORDERS_V2", "pusher").await.unwrap();
    assert_eq!(bc.config.deliver_subject.as_deref(), Some("deliver.orders"));
    assert_eq!(bc.config.deliver_group.as_deref(), Some("g"));
    let after = load.published() + 300;
    until_published(&load, after).await;
    let mut load = load;
    load.finish_publishing().await;
    let r = load.stop().await;
    // With no library workers, every published id is in `lost`: that is the published set.
    let published: Vec<u64> = r.lost.clone();
    wait_until("push subscribers to process everything", Duration::from_secs(20), || async {
        let s = seen.lock().unwrap();
        published.iter().all(|id| s.contains_key(id))
    })
    .await;
    let s = seen.lock().unwrap().clone();
    let dups: Vec<_> = s.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "processed twice: {dups:?}");
    assert_eq!(s.len(), published.len(), "processed exactly the published set");
    eprintln!("push: published {} processed {} exactly once", published.len(), s.len());
    for t in subs {
        t.abort();
    }
}

/// A worker that takes one message and dies holding it (never acks). Fetches
/// until it gets one: live workers may have taken everything available.
pub async fn take_one_and_die(e: &Env) -> async_nats::jetstream::Message {
    use futures::StreamExt;
    let c = e.pull_consumer("ORDERS", "worker").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut b =
            c.fetch().max_messages(1).expires(Duration::from_millis(200)).messages().await.unwrap();
        if let Some(Ok(m)) = b.next().await {
            return m;
        }
        assert!(std::time::Instant::now() < deadline, "could not take a message");
    }
}

/// Several durables move in one run, concurrently: each one's workers see every
/// message exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_consumers_move_in_one_run() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.consumer("ORDERS", json!({"durable_name": "billing", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000})).await;
    let load = Load::start(e.js.client.clone(), load_cfg(500, 20_000)).await;
    // A second application: consumes `billing`, publishes nothing.
    let mut cfg = load_cfg(0, 0);
    cfg.consumer = "billing".into();
    cfg.workers = 2;
    let billing = Load::start(e.js.client.clone(), cfg).await;
    until_processed(&load, 200).await;
    until_processed(&billing, 200).await;
    let out = e.cli(&[
        "--json",
        "run",
        "--from",
        "ORDERS",
        "--to",
        "ORDERS_V2",
        "--all-consumers",
        "--yes",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let last: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    let moved: Vec<&str> = last["journal"]["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(moved, ["billing", "worker"]);
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    // `billing` published nothing, so everything it processed shows as "extra":
    // that set must be exactly what the publisher published, each once.
    let mut published: Vec<u64> = (0..r.published).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while billing.processed() < r.published {
        assert!(
            std::time::Instant::now() < deadline,
            "billing processed {} of {}",
            billing.processed(),
            r.published
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let b = billing.stop().await;
    published.sort();
    assert!(
        b.duplicated.is_empty(),
        "billing processed twice: {:?}",
        &b.duplicated[..b.duplicated.len().min(10)]
    );
    assert_eq!(b.extra.len() as u64, r.published, "billing processed exactly the published set");
    assert_eq!(b.extra, published);
}

/// The server itself restarts in the middle of the drain: the runner rides
/// through it (requests tried again) or stops with an error, publishers retry
/// through the outage with the same msg-ids, workers reconnect, and `run
/// --resume` finishes the migration exactly (or finds it finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_restart_during_the_drain_then_resume() {
    let mut e = env().await;
    let load = orders_under_load(&e, 2_000, 300, 100).await;
    let held = take_one_and_die(&e).await;
    let url = e.server.url().to_string();
    let runner = tokio::spawn(async move {
        // Its own connection, so the test's client is not involved.
        let client = async_nats::connect(url).await.unwrap();
        let js = cutover_nats::Js::new(client, Duration::from_secs(2));
        let plan =
            engine::prepare_plan(&js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let opts = RunOptions { lease_ttl: Duration::from_secs(1), ..Default::default() };
        engine::run(&js, plan, &opts, &Collect::default(), rx).await
    });
    wait_until("the runner to pause the consumer", Duration::from_secs(20), || async {
        e.js.consumer_info("ORDERS", "worker").await.map(|(_, c)| c.paused).unwrap_or(false)
    })
    .await;
    e.server.restart().unwrap();
    let first = runner.await.unwrap();
    // Workers reconnect and keep processing after the restart.
    let before = load.processed();
    until_processed(&load, before + 100).await;
    // The runner rides through the restart (its requests are tried again while
    // the server is away) or stops safely; either way the resume below ends it.
    if let Ok(j) = &first {
        assert_eq!(j.phase, Phase::Done, "{j:?}");
    }
    drop(held);
    wait_until("the server to answer again", Duration::from_secs(20), || async {
        e.js.stream_info("ORDERS").await.is_ok()
    })
    .await;
    let out = retry_cli(
        &e,
        &["--json", "run", "--resume", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"],
        &["is held by runner", "did not answer"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:?}");
    let r = finish_after(load, 200).await;
    assert_exact(&r);
    assert_verified(&e.js, "ORDERS.ORDERS_V2").await;
}

/// The runner dies once the new durable exists, then the server restarts too:
/// workers keep following the route (their watch comes back), and the resume
/// finishes exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runner_crash_then_server_restart_after_the_new_durable_exists() {
    let mut e = env().await;
    let load = orders_under_load(&e, 30_000, 300, 100).await;
    let out =
        run_cli(&e, &run_orders(&[], &["--lease-ttl", "1s"]), Some("consumer_created:worker"));
    assert_eq!(out.code, 86, "{out:?}");
    e.server.restart().unwrap();
    wait_until("the server to answer again", Duration::from_secs(20), || async {
        e.js.stream_info("ORDERS_V2").await.is_ok()
    })
    .await;
    // Workers process on the new stream after the restart.
    let before = load.processed();
    until_processed(&load, before + 100).await;
    let out = resume_until_done(&e, "ORDERS.ORDERS_V2").await;
    assert_eq!(out.code, 0, "{out:?}");
    let r = finish_after(load, 200).await;
    assert_exact(&r);
    assert_verified(&e.js, "ORDERS.ORDERS_V2").await;
}

/// The same `run --from --to` command resumes a migration stopped past its
/// commit point (B holds the subjects): it goes on with the journal's plan
/// instead of refusing a new plan's "B already takes direct publishes".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_run_command_resumes_past_the_commit_point() {
    let e = env().await;
    let load = orders_under_load(&e, 30_000, 300, 100).await;
    let args = run_orders(&["--json"], &["--lease-ttl", "1s"]);
    let out = run_cli(&e, &args, Some("move_publishers"));
    assert_eq!(out.code, 86, "{out:?}");
    let out = retry_cli(&e, &args, &["is held by runner"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (_, j) = cutover_nats::journal::load_migration(&e.js, "ORDERS.ORDERS_V2").await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let r = finish_after(load, 200).await;
    assert_exact(&r);
    assert_verified(&e.js, "ORDERS.ORDERS_V2").await;
}

/// `--keep-old-consumers`: the old durable stays, paused for good on a sealed
/// stream, for applications redeployed after the run; still exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keep_old_consumers_leaves_them_paused_for_good() {
    let e = env().await;
    let load = orders_under_load(&e, 30_000, 500, 200).await;
    let out = run_cli(&e, &run_orders(&["--json"], &["--keep-old-consumers"]), None);
    assert_eq!(out.code, 0, "{out:?}");
    let (_, old) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert!(old.paused, "the kept durable stays paused");
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert!(a.config.sealed);
    let r = finish_after(load, 300).await;
    assert_exact(&r);
    let (_, again) = e.js.consumer_info("ORDERS", "worker").await.unwrap();
    assert_eq!(again.delivered, old.delivered, "the kept durable delivered nothing more");
    assert_verified(&e.js, "ORDERS.ORDERS_V2").await;
    let out = run_cli(
        &e,
        &move_args(&["run"], "ORDERS", "X", "worker", &["--keep-old-consumers", "--delete-old"]),
        None,
    );
    assert_eq!(out.code, 2, "the two options contradict each other: {out:?}");
}

/// A message still held by the durable when the workers stop is reported
/// pending (late), not lost: here no worker runs, so every published message
/// is unprocessed and still pending on the durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unprocessed_messages_still_on_the_durable_are_pending_not_lost() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let mut load =
        Load::start(e.js.client.clone(), LoadConfig { workers: 0, ..load_cfg(500, 50) }).await;
    until_published(&load, 50).await;
    load.finish_publishing().await;
    let mut r = load.stop().await;
    assert_eq!((r.published, r.lost.len() as u64, r.lost_count()), (50, 50, 50));
    r.count_pending(&e.js, "ORDERS", "worker").await;
    assert_eq!((r.pending_on_b, r.lost_count()), (50, 0), "pending, not lost");
    // A message the durable no longer holds (deleted from the stream) is lost.
    e.js.stream_purge_below("ORDERS", None, 11).await.unwrap();
    r.count_pending(&e.js, "ORDERS", "worker").await;
    assert_eq!((r.pending_on_b, r.lost_count()), (40, 10));
}

/// The workload's push workers (a deliver group on the durable's deliver
/// subject, the benchmark's push row) ride through a move exactly: the new
/// durable keeps the subject and group.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_workers_of_the_workload_move_exactly() {
    let e = env().await;
    let cfg = LoadConfig { push: true, ..load_cfg(500, 20_000) };
    e.stream(
        json!({"name": "ORDERS", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("ORDERS", json!({"durable_name": "worker", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "max_ack_pending": 1000,
        "deliver_subject": cutover_demo::load::push_subject(&cfg), "deliver_group": cutover_demo::load::PUSH_GROUP})).await;
    let load = Load::start(e.js.client.clone(), cfg).await;
    until_processed(&load, 200).await;
    let plan =
        engine::prepare_plan(&e.js, &request("ORDERS", "ORDERS_V2", &["worker"])).await.unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let j =
        engine::run(&e.js, plan, &RunOptions::default(), &Collect::default(), rx).await.unwrap();
    assert_eq!(j.phase, Phase::Done);
    let (_, b) = e.js.consumer_info("ORDERS_V2", "worker").await.unwrap();
    assert_eq!(b.config.deliver_subject.as_deref(), Some("_deliver.ORDERS.worker"));
    let r = finish_after(load, 200).await;
    assert_exact(&r);
}
