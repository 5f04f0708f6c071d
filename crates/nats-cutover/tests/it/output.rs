//! Output to pipes: a reader that goes away early (`| head`) ends the output
//! quietly, never with a panic; nothing written to a pipe carries ANSI escapes.

use crate::common::*;
use std::io::{BufRead, PipeWriter};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The write end of a pipe whose read end is already closed: the first write
/// fails with EPIPE, deterministically (no race with a reader closing later).
fn closed_pipe() -> PipeWriter {
    let (r, w) = std::io::pipe().expect("pipe");
    drop(r);
    w
}

fn command(e: &Env, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
    c.arg("--server")
        .arg(e.server.url())
        .args(args)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env_remove("NO_COLOR")
        .env("HOME", std::env::temp_dir().join("nats-cutover-test-home"));
    c
}

/// Runs with stdout a pipe nobody reads; returns the exit code and stderr.
fn with_closed_stdout(e: &Env, args: &[&str]) -> (i32, String) {
    let o = command(e, args)
        .stdout(Stdio::from(closed_pipe()))
        .stderr(Stdio::piped())
        .output()
        .expect("run nats-cutover");
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into())
}

/// Waits for a child, killing it (and failing) if it outlives `limit`.
fn wait_or_kill(mut child: Child, limit: Duration, what: &str) -> ExitStatus {
    let pid = child.id();
    let (tx, rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if rx.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
            return true;
        }
        false
    });
    let status = child.wait().expect("wait for nats-cutover");
    let _ = tx.send(());
    assert!(!watchdog.join().unwrap(), "{what} did not end within {limit:?}");
    status
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_stdout_ends_output_quietly_with_the_commands_own_exit_code() {
    let e = env().await;
    orders(&e).await;
    for args in [
        &["inspect", "A"][..],
        &["--json", "inspect", "A"],
        &["--json", "status"],
        &["status"],
        &move_args(&["plan"], "A", "B", "C", &[]),
        &move_args(&["--json", "plan"], "A", "B", "C", &[]),
    ] {
        let (code, stderr) = with_closed_stdout(&e, args);
        assert!(!stderr.contains("panicked"), "{args:?} panicked on a closed stdout:\n{stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?} complained:\n{stderr}");
        assert_eq!(code, 0, "{args:?} on a closed stdout:\n{stderr}");
    }
    // The exit code stays the command's verdict: a missing stream is bad input.
    let (code, stderr) = with_closed_stdout(&e, &["--json", "inspect", "NOPE"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
}

/// `run` does not abandon a migration half-way because its reader went away:
/// it finishes, and says nothing more.
#[tokio::test(flavor = "multi_thread")]
async fn run_with_a_closed_stdout_still_completes_the_migration() {
    let e = env().await;
    orders(&e).await;
    let (code, stderr) = with_closed_stdout(&e, &move_args(&["run"], "A", "B", "C", &["--yes"]));
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(code, 0, "{stderr}");
    let out = e.cli(&["--json", "status", "A.B"]);
    assert_eq!(out.json()["migrations"][0]["phase"], "done", "{out:?}");
}

/// `watch | head -1`: watch would print forever; once its reader is gone it
/// stops, with exit 0, instead of panicking.
#[tokio::test(flavor = "multi_thread")]
async fn watch_stops_when_its_reader_goes_away() {
    let e = env().await;
    orders(&e).await;
    let mut child = command(&e, &["watch", "A", "--consumer", "C", "--interval", "10ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start watch");
    let stdout = child.stdout.take().unwrap();
    let mut first = String::new();
    std::io::BufReader::new(stdout).read_line(&mut first).unwrap();
    assert!(first.contains("A/C"), "{first}");
    // The reader is dropped here, as `head -1` exits after one line.
    let mut stderr = child.stderr.take().unwrap();
    let status = wait_or_kill(child, Duration::from_secs(30), "watch with a closed stdout");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(status.code(), Some(0), "{err}");
}

/// A closed stderr must not turn an error into a panic (exit 101): the exit
/// code is still the documented one.
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_stderr_keeps_the_documented_exit_code() {
    let e = env().await;
    let o = command(&e, &["--json", "inspect", "NOPE"])
        .stdout(Stdio::from(closed_pipe()))
        .stderr(Stdio::from(closed_pipe()))
        .output()
        .expect("run nats-cutover");
    assert_eq!(o.status.code(), Some(2));
    let o = command(&e, &["inspect", "NOPE"])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(closed_pipe()))
        .output()
        .expect("run nats-cutover");
    assert_eq!(o.status.code(), Some(2));
}

fn assert_no_escapes(what: &str, o: &std::process::Output) {
    for (name, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains("\x1b["), "{what}: ANSI escape in {name} through a pipe:\n{text}");
    }
}

/// Through pipes (stdout and stderr not terminals) nothing carries ANSI
/// escapes: not the log lines, not the progress of `run`, not clap's errors.
#[tokio::test(flavor = "multi_thread")]
async fn pipes_get_no_ansi_escapes() {
    let e = env().await;
    orders(&e).await;
    let runs: [&[&str]; 4] = [
        &["inspect", "A"],
        &move_args(&["run"], "A", "B", "C", &["--yes"]),
        &["verify", "--from", "A", "--to", "B"],
        &move_args(&["plan"], "A", "B", "C", &["--bogus"]),
    ];
    for args in runs {
        // Logs on, so that stderr has something to colour.
        let o = command(&e, args).env("NATS_CUTOVER_LOG", "debug").output().expect("run");
        assert_no_escapes(&format!("{args:?}"), &o);
        if args[0] != "plan" {
            assert!(o.status.success(), "{args:?}: {o:?}");
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert!(
                stderr.contains("DEBUG"),
                "{args:?} logged nothing, the test proves nothing:\n{stderr}"
            );
        } else {
            assert_eq!(o.status.code(), Some(2), "{o:?}");
        }
    }
}

/// With --json even an argument clap rejects is reported on stdout as
/// `{"error", "exit_code": 2}` (docs/json.md), and on stderr as clap says it.
#[test]
fn json_reports_argument_errors_on_stdout() {
    for args in [
        &["--json", "--bogus"][..],
        &["--json", "run", "--max-pause", "abc", "--from", "A", "--to", "B", "--consumer", "C"],
    ] {
        let out = cli(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
        assert_eq!(v["exit_code"], 2, "{out:?}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{out:?}");
        assert!(out.stderr.contains("error:"), "{out:?}");
    }
    // Help stays help.
    let out = cli(&["--json", "plan", "--help"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Usage"), "{out:?}");
}
