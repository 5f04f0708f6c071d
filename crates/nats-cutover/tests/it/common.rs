//! Shared helpers: a server per test, a client, the CLI, and server snapshots.
//! The server and the client are cutover-nats' test helpers (its own
//! integration tests use them too); this adds what the CLI's tests need.

#[path = "../../../cutover-nats/tests/it/common.rs"]
mod server;

use serde_json::{json, Value};
pub use server::*;
use std::process::Command;

impl Env {
    /// Sets one key of `stream`'s configuration, as someone else's `nats
    /// stream edit` would while a run is under way.
    pub async fn set_stream(&self, stream: &str, key: &str, value: Value) {
        let (raw, _) = self.js.stream_info(stream).await.unwrap();
        let mut cfg = raw["config"].clone();
        cfg[key] = value;
        self.js.stream_update(&cfg).await.unwrap();
    }

    pub fn cli(&self, args: &[&str]) -> Out {
        let mut full = vec!["--server", self.server.url()];
        full.extend_from_slice(args);
        cli(&full)
    }

    /// As [`Env::cli`], awaited instead of blocking a runtime thread: for a
    /// test whose own tasks (a load's workers) must go on while the CLI waits
    /// for them (a task woken by a blocked worker thread can wait in its
    /// queue until the thread is free). Killed if the test drops it.
    pub async fn cli_async(&self, args: &[&str]) -> Out {
        cli_at(self.server.url(), args).await
    }

    /// The pull durable `name` on `stream`, to fetch from as an application does.
    pub async fn pull_consumer(
        &self,
        stream: &str,
        name: &str,
    ) -> async_nats::jetstream::consumer::PullConsumer {
        self.ctx.get_stream(stream).await.unwrap().get_consumer(name).await.unwrap()
    }

    /// Every stream and consumer, without the fields that change by themselves
    /// (timestamps), for "nothing changed on the server" assertions.
    pub async fn snapshot(&self) -> Value {
        let names = self.js.api("names", "STREAM.NAMES", &Value::Null).await.unwrap();
        let mut names: Vec<String> = names["streams"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
            .unwrap_or_default();
        names.sort();
        let mut out = serde_json::Map::new();
        for n in names {
            let mut s = self.js.stream_info_raw(&n).await.unwrap();
            strip(&mut s);
            let mut consumers = serde_json::Map::new();
            for c in self.js.consumer_names(&n).await.unwrap() {
                let mut ci = self.js.consumer_info_raw(&n, &c).await.unwrap();
                strip(&mut ci);
                consumers.insert(c, ci);
            }
            out.insert(n, json!({ "info": s, "consumers": consumers }));
        }
        Value::Object(out)
    }
}

fn strip(v: &mut Value) {
    if let Value::Object(m) = v {
        for k in ["ts", "cluster", "last_active", "active", "created", "num_waiting", "lag"] {
            m.remove(k);
        }
        for (_, x) in m.iter_mut() {
            strip(x);
        }
    } else if let Value::Array(a) = v {
        a.iter_mut().for_each(strip);
    }
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr)
        })
    }
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\n--- stdout\n{}\n--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// The CLI against `servers` (one URL, or a cluster's, comma separated),
/// awaited (see [`Env::cli_async`]).
pub async fn cli_at(servers: &str, args: &[&str]) -> Out {
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .arg("--server")
        .arg(servers)
        .args(args)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env("HOME", std::env::temp_dir().join("nats-cutover-test-home"))
        .kill_on_drop(true)
        .output()
        .await
        .expect("run nats-cutover");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

pub fn cli(args: &[&str]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nats-cutover"));
    cmd.args(args)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env("HOME", std::env::temp_dir().join("nats-cutover-test-home"));
    let o = output_off_runtime(&mut cmd);
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

/// `cmd.output()`, waited for off the test's runtime where it is a
/// multi-thread one (`block_in_place` hands this worker's other tasks to
/// another thread first): a blocking wait beside a live load otherwise holds
/// up the load's tasks woken on this thread, so the load ran past its end
/// ("published: only 14999 of 15058", fresh-clone CI runs of stop 36 and 37).
pub fn output_off_runtime(cmd: &mut Command) -> std::process::Output {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    let o = if multi { tokio::task::block_in_place(|| cmd.output()) } else { cmd.output() };
    o.expect("run nats-cutover")
}

/// The arguments of a command about moving `consumer` from stream `from` to
/// `to`: `head` (global flags, the subcommand and its first flags), then
/// `--from FROM --to TO --consumer CONSUMER`, then `tail`.
pub fn move_args<'a>(
    head: &[&'a str],
    from: &'a str,
    to: &'a str,
    consumer: &'a str,
    tail: &[&'a str],
) -> Vec<&'a str> {
    [head, &["--from", from, "--to", to, "--consumer", consumer], tail].concat()
}

/// `head` (global flags), then the standard live run `run --from ORDERS --to
/// ORDERS_V2 --consumer worker --yes`, then `tail`.
pub fn run_orders<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    move_args(
        &[head, &["run"]].concat(),
        "ORDERS",
        "ORDERS_V2",
        "worker",
        &[&["--yes"], tail].concat(),
    )
}

/// The steps of a cut-over, in the order they run.
pub const STEPS: [&str; 7] = [
    "create_b",
    "catch_up",
    "move_consumers",
    "move_publishers",
    "seal_a",
    "remove_source",
    "retire",
];

/// The standard fixture: stream A on orders.>, durable C filtered on orders.eu.
pub async fn orders(e: &Env) {
    e.stream(
        json!({"name": "A", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}),
    )
    .await;
    e.consumer("A", json!({"durable_name": "C", "ack_policy": "explicit", "filter_subject": "orders.>", "max_ack_pending": 100})).await;
    e.publish("orders.eu", "m", 10).await;
    // The consumer counts what it has pending a moment after the acks: wait
    // for it, so "nothing changed" snapshots compare settled state.
    wait_until("C to count its 10 pending", std::time::Duration::from_secs(10), || async {
        e.js.consumer_info("A", "C").await.is_ok_and(|(_, c)| c.num_pending == 10)
    })
    .await;
}

/// A directory under the temp dir, removed on drop even when a test fails.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("nats-cutover-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits until B sourced A's 10 messages (`orders` publishes 10).
pub async fn until_b_sourced(e: &Env) {
    wait_until("B to source A's 10 messages", std::time::Duration::from_secs(10), || async {
        e.js.stream_info("B").await.is_ok_and(|(_, b)| b.state.last_seq == 10)
    })
    .await;
}
