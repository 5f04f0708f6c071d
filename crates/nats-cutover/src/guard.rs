//! The runner's guard process (see `cutover_nats::engine::guard`).
//!
//! `run`, `kv`, `obj` and `apply --yes` start `nats-cutover` again with the same arguments
//! and `NATS_CUTOVER_GUARD=<runner pid>`: that process reads a pipe only the
//! runner holds. The runner writes `W` when a commit window opens and `C`
//! when it closes, `M` when drain mode starts holding consumers and `m` when
//! it stops, and `E` as it ends by itself; the pipe's end is the runner's
//! exit, however it died. If an exposure was open then, the guard
//! compensates what the runner left held and says so on stderr; without an
//! `E` (the runner died) it also releases the leases the runner held; after
//! an `E` and nothing open it exits without a word or a connection. It has
//! its own process group, so a Ctrl-C meant for the runner does not reach
//! it, and no stdout, so `--json` output stays the runner's.

use crate::cli::{Cli, Command, ConnArgs};
use crate::cmd;
use crate::error::Result;
use cutover_nats::engine::{Exposure, ExposureHook};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The variable that makes `nats-cutover` its runner's guard.
const GUARD_VAR: &str = "NATS_CUTOVER_GUARD";

/// Turns the guard off (`NATS_CUTOVER_GUARD=off`): for a runner that must not
/// start processes; a runner killed in the commit window then leaves
/// publishers without a stream until `run --resume` after its lease.
const OFF: &str = "off";

/// The longest a guard works once its runner is gone.
const GUARD_BUDGET: Duration = Duration::from_secs(60);

/// The runner's end of the pipe to its guard.
static PIPE: OnceLock<Mutex<ChildStdin>> = OnceLock::new();

/// The engine's `on_exposed` hook: tells the guard (if one started) that an
/// exposure began or ended. A guard gone meanwhile changes nothing.
pub fn exposure_hook() -> Option<ExposureHook> {
    PIPE.get()?;
    Some(Arc::new(|what: Exposure, open: bool| {
        say(match (what, open) {
            (Exposure::Commit, true) => b'W',
            (Exposure::Commit, false) => b'C',
            (Exposure::Consumers, true) => b'M',
            (Exposure::Consumers, false) => b'm',
        })
    }))
}

/// The hook for migrations that run side by side (`apply --parallel`):
/// the guard reads the last mark of each exposure, so marks from several
/// migrations would say "closed" while another's window is still open.
/// This says an exposure opens when the first migration opens it and
/// closes when the last one closes it (counted under one lock, so a close
/// and an open never pass each other on the pipe); the guard then
/// compensates each of the runner's migrations by its own journal.
pub fn fleet_exposure_hook() -> Option<ExposureHook> {
    let inner = exposure_hook()?;
    Some(counted(inner))
}

fn counted(inner: ExposureHook) -> ExposureHook {
    let open = Mutex::new([0usize; 2]);
    Arc::new(move |what: Exposure, opens: bool| {
        let mut n = open.lock().unwrap_or_else(|e| e.into_inner());
        let i = match what {
            Exposure::Commit => 0,
            Exposure::Consumers => 1,
        };
        let say = if opens {
            n[i] += 1;
            n[i] == 1
        } else {
            n[i] = n[i].saturating_sub(1);
            n[i] == 0
        };
        if say {
            inner(what, opens);
        }
    })
}

/// Writes `mark` to the guard, if one started; a guard gone meanwhile
/// changes nothing.
fn say(mark: u8) {
    if let Some(p) = PIPE.get() {
        use std::io::Write;
        let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
        let _ = p.write_all(&[mark]).and_then(|_| p.flush());
    }
}

/// Tells the guard the runner ends by itself (its lease released or left to
/// another runner): written last, so a guard that reads it and no open
/// exposure exits without a connection.
pub fn ended() {
    say(b'E');
}

/// Whether the runner left an exposure open: the last of `W`/`C` is `W`,
/// or the last of `M`/`m` is `M`.
fn left_open(said: &[u8]) -> bool {
    let last = |open: u8, closed: u8| said.iter().rev().find(|b| **b == open || **b == closed);
    last(b'W', b'C') == Some(&b'W') || last(b'M', b'm') == Some(&b'M')
}

/// The runner's pid when this process is a guard.
pub fn requested() -> Option<u32> {
    std::env::var(GUARD_VAR).ok()?.parse().ok()
}

/// Starts the guard of this runner for the commands that move subjects. A
/// guard that cannot start is reported, not fatal: the run is as safe as
/// without one, the window only closes later.
pub fn spawn(command: &Command) {
    let moves = match command {
        Command::Run(_) | Command::Kv(_) | Command::Obj(_) => true,
        Command::Apply(a) => a.yes,
        _ => false,
    };
    if !moves || std::env::var(GUARD_VAR).is_ok_and(|v| v == OFF) {
        return;
    }
    let started = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(GUARD_VAR, std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
    });
    match started {
        // The pipe's write end stays open until this process exits.
        Ok(mut child) => {
            if let Some(pipe) = child.stdin.take() {
                let _ = PIPE.set(Mutex::new(pipe));
            }
        }
        Err(e) => errln!("warning: cannot start the guard process ({e}): if this runner is killed between A releasing its subjects and B taking them, publishers have no stream until `nats-cutover run --resume` after the lease"),
    }
}

/// The guard: waits for runner `pid` to exit, then closes what it left open.
pub fn main(pid: u32, cli: Cli) -> i32 {
    let mut said = vec![];
    let _ = std::io::stdin().read_to_end(&mut said);
    let open = left_open(&said);
    if said.last() == Some(&b'E') && !open {
        return 0; // it ended by itself, holding nothing
    }
    let Ok(rt) = tokio::runtime::Builder::new_multi_thread().enable_all().build() else {
        return 1;
    };
    let done = rt.block_on(async {
        tokio::time::timeout(GUARD_BUDGET, close(pid, &cli.conn, &cli.command, open)).await
    });
    match done {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            errln!("nats-cutover guard: runner {pid} exited; checking what it left held failed: {}; if publishers have no stream or a consumer stays paused, run `nats-cutover run --resume ID` or `nats-cutover rollback ID` (`nats-cutover status` lists the migrations)", e.message());
            1
        }
        Err(_) => {
            errln!("nats-cutover guard: runner {pid} exited; checking what it left held took over {GUARD_BUDGET:?}; see `nats-cutover status`");
            1
        }
    }
}

async fn close(pid: u32, conn: &ConnArgs, command: &Command, open: bool) -> Result<()> {
    let (js, ttl) = match command {
        // Across systems the source side too: a journal's compensation
        // may act on A there (engine::guard::close_windows picks the side
        // per journal; a same-name move's hop 2 is the target's alone).
        Command::Run(a) => {
            let from = cmd::plan_file::run_from(a)?.or_else(|| a.plan.in_place.clone());
            (cmd::connect_across(conn, from.as_deref()).await?, a.lease_ttl)
        }
        Command::Kv(a) | Command::Obj(a) if conn.across() => {
            let (target, source) = cmd::connect_sides(conn).await?;
            (target.across(source, ""), a.lease_ttl)
        }
        Command::Apply(a) if conn.across() => {
            let (target, source) = cmd::connect_sides(conn).await?;
            (target.across(source, ""), a.lease_ttl)
        }
        Command::Kv(a) | Command::Obj(a) => (cmd::connect(conn).await?, a.lease_ttl),
        Command::Apply(a) => (cmd::connect(conn).await?, a.lease_ttl),
        _ => return Ok(()),
    };
    for c in cutover_nats::engine::guard::close_windows(&js, pid, ttl, open).await? {
        errln!("nats-cutover guard: runner {pid} has exited; migration {}: {}", c.id, c.what);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{counted, left_open};
    use cutover_nats::engine::Exposure;
    use std::sync::{Arc, Mutex};

    #[test]
    fn side_by_side_exposures_are_open_until_the_last_closes() {
        let said = Arc::new(Mutex::new(vec![]));
        let log = said.clone();
        let hook = counted(Arc::new(move |what, open| {
            let mark = match (what, open) {
                (Exposure::Commit, true) => b'W',
                (Exposure::Commit, false) => b'C',
                (Exposure::Consumers, true) => b'M',
                (Exposure::Consumers, false) => b'm',
            };
            log.lock().unwrap().push(mark);
        }));
        hook(Exposure::Commit, true);
        hook(Exposure::Commit, true);
        hook(Exposure::Commit, false);
        assert!(left_open(&said.lock().unwrap()), "one window still open");
        hook(Exposure::Consumers, true);
        hook(Exposure::Commit, false);
        assert_eq!(*said.lock().unwrap(), b"WMC");
        assert!(left_open(&said.lock().unwrap()), "consumers still held");
        hook(Exposure::Consumers, false);
        assert!(!left_open(&said.lock().unwrap()));
    }

    #[test]
    fn the_last_mark_of_each_exposure_decides() {
        assert!(!left_open(b""));
        assert!(left_open(b"W"));
        assert!(!left_open(b"MmWC"));
        assert!(left_open(b"MmWCM"));
        assert!(left_open(b"MWC"));
        assert!(!left_open(b"MmWCWC"));
    }
}
