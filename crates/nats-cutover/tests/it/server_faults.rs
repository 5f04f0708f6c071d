//! Server faults (issue 13): the server restarts, gracefully (SIGTERM) or
//! killed (SIGKILL), while the runner is in catch-up, in a drain, inside the
//! commit window, and in retire, with a live workload. The runner rides
//! through or stops; `run --resume` finishes; nothing is lost and nothing is
//! processed twice (beyond JetStream's own redelivery of a message whose ack
//! the killed server lost, which the workload tells apart: same durable,
//! `delivered > 1`).
//!
//! What the workers see: processing resumes within a few hundred ms of a
//! restart (it took 10 s before requests lost with the connection were given
//! up at reconnection: `Js::send`, cutover-app's worker and follower). The
//! longest gap of a run restarted during catch-up or a drain is the drain's
//! `--max-pause` (5 s): a message delivered just before the restart and lost
//! with the connection stays ack-pending until its ack_wait (30 s here), so
//! the paused drain sees no ack progress and lets the consumer run again
//! after that long. Both are printed; docs/reliability.md has the numbers.
//!
//! A killed standalone server loses no acknowledged message: an R1 file store
//! writes each message to its block file before the ack (filestore.go: `fip =
//! !fcfg.AsyncFlush`, and async flush only for replicated streams, in
//! `newFileStoreWithCreated`; `writeMsgRecordLocked` calls
//! `flushPendingMsgsLocked` when `fip`), so the OS has it even though fsync
//! waits for the sync interval. Only a machine crash inside that interval
//! loses data, which is the server's limit (docs/reliability.md).

use crate::chaos::{journal, run_args, scene, Runner, Scene};
use std::time::{Duration, Instant};

/// When the server goes down: right after the runner's request that shows it
/// is at that point.
#[derive(Debug, Clone, Copy)]
enum At {
    /// Before the run: the workload alone (the pause a restart costs anyway).
    Idle,
    /// The journal says catch-up began.
    CatchUp,
    /// The old consumer was paused for its drain.
    Drain,
    /// A's update that releases its subjects was sent (journal phase
    /// `subjects_released`): publishers have no stream until B takes them.
    CommitWindow,
    /// The journal says retire began.
    Retire,
}

impl At {
    fn reached(self, r: &crate::chaos::Request) -> bool {
        match self {
            At::Idle => true,
            At::CatchUp => r.step.as_deref() == Some("catch_up"),
            At::Drain => r.subject.starts_with("$JS.API.CONSUMER.PAUSE."),
            At::CommitWindow => r.subject == "$JS.API.STREAM.UPDATE.ORDERS",
            At::Retire => r.step.as_deref() == Some("retire"),
        }
    }
}

/// Restarts the server: SIGTERM (it flushes and exits), or SIGKILL first.
///
/// A SIGKILL is sent only while no request of the runner's is in flight: a
/// server killed between the two files of a stream configuration update
/// (filestore.go `writeStreamMeta` renames `meta.inf`, then `meta.sum`, each
/// atomically, the pair not) finds at restart that they disagree, warns
/// "Stream metafile ... checksums do not match" and does not load the stream
/// (jetstream.go, account stream recovery): A or B and all its messages are
/// gone until the files are repaired. Seen here with A killed during its
/// release of the subjects; docs/compatibility.md lists it.
fn restart(s: &mut Scene, kill: bool) {
    if kill {
        let pid = s.e.server.pid().expect("running").to_string();
        assert!(std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success());
    }
    s.e.server.restart().unwrap();
}

/// Runs the migration until `at`, restarts the server, resumes until done;
/// exact. Returns when processing resumed after the restart (ms, to the
/// workload's 100 ms samples), the longest gap between two processed
/// messages during the whole run, and the longest publish.
async fn restart_at(at: At, kill: bool) -> (f64, f64, f64) {
    let mut s = scene(&format!("restart-{at:?}-{kill}")).await;
    let (killed_at, t_restart, p_restart) = if let At::Idle = at {
        let killed_at = kill.then(|| s.load.processed());
        restart(&mut s, kill);
        (killed_at, s.load.elapsed(), s.load.processed())
    } else {
        let mut r = Runner::spawn(s.e.server.url(), &run_args(false), &s.dir.0, 0);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            tokio::select! {
                req = s.requests.next() => if at.reached(&req) { break },
                status = r.child.wait() => panic!("the run ended before {at:?}: {status:?}"),
                _ = tokio::time::sleep_until(deadline.into()) => panic!("{at:?} never came"),
            }
        }
        if kill {
            // Held still while the server dies with nothing of the runner's
            // in flight: a server killed inside a stream's configuration
            // write can lose the stream (see `restart`).
            r.signal("-STOP");
            s.requests.until_answered().await;
        }
        let killed_at = kill.then(|| s.load.processed());
        if let (At::CommitWindow, true) = (at, kill) {
            let subjects = |n: &'static str| {
                let js = s.js.clone();
                async move { js.stream_info(n).await.unwrap().1.config.subjects }
            };
            eprintln!(
                "killed with A's subjects {:?}, B's {:?}",
                subjects("ORDERS").await,
                subjects("ORDERS_V2").await
            );
        }
        restart(&mut s, kill);
        let restarted = (s.load.elapsed(), s.load.processed());
        if kill {
            r.signal("-CONT");
        }
        let (code, err) = r.exited().await;
        eprintln!("{at:?}, kill {kill}: the runner through the restart: exit {code} {err}");
        (killed_at, restarted.0, restarted.1)
    };
    crate::common::wait_until("the server to answer", Duration::from_secs(20), || async {
        s.js.stream_info("ORDERS").await.is_ok()
    })
    .await;
    resume_until_done(&s, &format!("{at:?}, kill {kill}")).await;
    let r = s
        .assert_done(
            &format!("restart ({}) at {at:?}", if kill { "SIGKILL" } else { "SIGTERM" }),
            killed_at,
        )
        .await;
    // When processing resumed, from the workload's 100 ms samples.
    let resumed = r
        .samples
        .iter()
        .find(|x| x.t_ms as u128 > t_restart.as_millis() && x.processed > p_restart)
        .map(|x| x.t_ms as f64 - t_restart.as_millis() as f64)
        .unwrap_or(f64::NAN);
    (resumed, r.max_consumer_gap_ms, r.max_publish_stall_ms)
}

/// Runs `run --resume` until the journal says done; a failure other than
/// the lease is the test's, with the server's warnings and errors.
async fn resume_until_done(s: &Scene, what: &str) {
    for n in 1.. {
        let j = journal(&s.js).await;
        if j.as_ref().is_some_and(|j| j.phase == cutover_core::journal::Phase::Done) {
            return;
        }
        let (code, err) =
            Runner::spawn(s.e.server.url(), &run_args(j.is_some()), &s.dir.0, n).exited().await;
        if code != 0 && !err.contains("is held by runner") {
            let log = s.e.server.log();
            let bad: Vec<&str> =
                log.lines().filter(|l| l.contains("[WRN]") || l.contains("[ERR]")).collect();
            panic!("{what}: resume {n} failed (exit {code}): {err}\nserver:\n{}", bad.join("\n"));
        }
        assert!(n < 100, "{what}: no end");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn restarts(kill: bool) {
    let mut seen = vec![];
    for at in [At::Idle, At::CatchUp, At::Drain, At::CommitWindow, At::Retire] {
        let (resumed, gap, stall) = restart_at(at, kill).await;
        seen.push(format!(
            "{at:?}: processing again {resumed:.0} ms after the restart; longest gap {gap:.0} ms, longest publish {stall:.0} ms"
        ));
    }
    eprintln!("{}: {seen:#?}", if kill { "SIGKILL" } else { "SIGTERM" });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_restarted_at_each_step_then_resume_is_exact() {
    restarts(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_killed_at_each_step_then_resume_is_exact() {
    restarts(true).await;
}
