//! A live cut-over beside applications written without our library: nats-py
//! publisher and workers (`tests/apps/`), as most users' applications are.
//! Pull workers follow the route record (the documented protocol, implemented
//! in Python); push workers keep their deliver subject and group.

use crate::common::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The test apps' interpreter: `CUTOVER_TEST_PYTHON`, else the venv that
/// scripts/install-test-apps.sh makes. Missing: fail with the command.
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("CUTOVER_TEST_PYTHON") {
        return p.into();
    }
    let p = root().join(".venv-apps/bin/python");
    assert!(
        p.exists(),
        "the nats-py test apps are not installed: run scripts/install-test-apps.sh"
    );
    p
}

pub struct App(pub Child);

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl App {
    pub fn start(script: &str, args: &[&str]) -> App {
        let mut child = Command::new(python())
            .arg(root().join("tests/apps").join(script))
            .args(args)
            .stdout(Stdio::piped())
            // DEBUG_APPS=1: the apps' logs on the test's stderr.
            .stderr(if std::env::var_os("DEBUG_APPS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap();
        let says_ready = ["worker.py", "fence_worker.py", "dual_publisher.py"].contains(&script);
        if says_ready || matches!(args.first(), Some(&"watcher") | Some(&"obj-reader")) {
            // Bound to its durable, or registered: it says so (no sleep).
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready", "worker {args:?}");
        }
        App(child)
    }

    /// A nats.go app: `tests/apps/go/bin/natsapp <command> ARGS` (built by
    /// scripts/install-test-apps.sh); it says `ready` once set up.
    pub fn go(args: &[&str]) -> App {
        let bin = root().join("tests/apps/go/bin/natsapp");
        assert!(
            bin.is_file(),
            "the nats.go test apps are not built: run scripts/install-test-apps.sh"
        );
        let mut child = Command::new(bin)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "natsapp {args:?}");
        App(child)
    }

    /// A nats.js app, `tests/apps/js/<script>` run by node (its packages
    /// installed by scripts/install-test-apps.sh); it says `ready` once set up.
    pub fn node(script: &str, args: &[&str]) -> App {
        let js = root().join("tests/apps/js");
        assert!(
            js.join("node_modules/@nats-io/kv").is_dir(),
            "the nats.js test apps' packages are missing: run scripts/install-test-apps.sh"
        );
        let mut child = Command::new("node")
            .arg(js.join(script))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node is needed for the nats.js test apps");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "{script} {args:?}");
        App(child)
    }

    /// tests/apps/publisher.py: `count` messages at about `rate` msg/s to
    /// orders.0 .. orders.3, msg-ids m-0, m-1, ..., its records in `out`.
    pub fn publisher(url: &str, count: u32, rate: u32, out: &Path) -> App {
        App::publisher_on(url, "orders", count, rate, out)
    }

    /// [`App::publisher`] to `subject`.0 .. `subject`.3.
    pub fn publisher_on(url: &str, subject: &str, count: u32, rate: u32, out: &Path) -> App {
        App::publisher_ids(url, subject, (count, rate), "m", out)
    }

    /// [`App::publisher_on`] with msg-ids `prefix`-0, `prefix`-1, ...
    pub fn publisher_ids(
        url: &str,
        subject: &str,
        (count, rate): (u32, u32),
        prefix: &str,
        out: &Path,
    ) -> App {
        let (count, rate) = (count.to_string(), rate.to_string());
        let args = ["--server", url, "--subject", subject, "--subjects-count", "4"];
        let rest = ["--count", &count, "--rate", &rate, "--id-prefix", prefix];
        let out = ["--out", out.to_str().unwrap()];
        App::start("publisher.py", &[&args[..], &rest[..], &out[..]].concat())
    }

    /// SIGTERM: the app finishes its acks and writes its last line.
    pub fn stop(mut self) {
        let pid = self.0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        self.0.wait().unwrap();
    }
}

pub fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("done").is_none())
        .collect()
}

/// The longest time between two messages processed by any of the workers
/// (seconds), from their records' timestamps.
fn longest_gap(files: &[PathBuf]) -> f64 {
    let mut t: Vec<f64> = files
        .iter()
        .flat_map(|f| lines(f))
        .filter_map(|l| l["t_ms"].as_f64().map(|ms| ms / 1000.0))
        .collect();
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    t.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
}

/// Msg-id → times processed, over the given workers' records.
pub fn processed(files: &[PathBuf]) -> HashMap<String, u32> {
    let mut m = HashMap::new();
    for f in files {
        for l in lines(f) {
            *m.entry(l["id"].as_str().unwrap().to_string()).or_insert(0) += 1;
        }
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_publisher_and_workers_move_exactly() {
    let args = ["run", "--from", "ORDERS", "--to", "ORDERS_V2"];
    nats_py_apps_through(&args, "ORDERS_V2", true, true).await;
}

/// The same applications through an in-place change (file to memory, two
/// mirror hops): pull workers follow the route there and back, push workers
/// keep their deliver subject; when it ends they read ORDERS again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_publisher_and_workers_through_an_in_place_change() {
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory"];
    nats_py_apps_through(&args, "ORDERS", true, true).await;
}

/// Pull workers that know nothing of the route, bound to ORDERS/pull by name:
/// through the in-place change their durable is gone for a moment ("consumer
/// not found", which they retry) and comes back under its name at its
/// position, so they resume without a redeploy: none lost, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_plain_pull_workers_ride_through_an_in_place_change() {
    let args = ["run", "--in-place", "ORDERS", "--set", "storage=memory"];
    nats_py_apps_through(&args, "ORDERS", false, true).await;
}

/// Limits to work queue in place, under nats-py pull workers that know
/// nothing of the route (a work queue takes one consumer per subject, so the
/// push durable sits this one out): none lost, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_pull_workers_through_limits_to_work_queue_in_place() {
    let args = ["run", "--in-place", "ORDERS", "--set", "retention=workqueue"];
    nats_py_apps_through(&args, "ORDERS", false, false).await;
}

/// nats-py publisher and workers (pull following the route, push in a group)
/// on ORDERS while `move_args` (plus the two consumers and --yes) runs; the
/// workers end reading `ends_on`; none lost, none twice.
async fn nats_py_apps_through(move_args: &[&str], ends_on: &str, follow_route: bool, push: bool) {
    let stream = json!({"name": "ORDERS", "subjects": ["orders.>"]});
    nats_py_apps_on(stream, move_args, ends_on, follow_route, push).await;
}

/// [`nats_py_apps_through`] on a stream ORDERS of this configuration; the
/// environment is returned for more checks.
pub async fn nats_py_apps_on(
    stream: Value,
    move_args: &[&str],
    ends_on: &str,
    follow_route: bool,
    push: bool,
) -> Env {
    let e = env().await;
    e.stream(stream).await;
    e.consumer(
        "ORDERS",
        json!({"durable_name": "pull", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64}),
    )
    .await;
    if push {
        e.consumer("ORDERS", json!({"durable_name": "push", "ack_policy": "explicit", "ack_wait": 30_000_000_000i64, "deliver_subject": "deliver.push", "deliver_group": "grp"})).await;
    }
    let dir = e.server.dir().join("apps");
    std::fs::create_dir_all(&dir).unwrap();
    let file = |n: &str| dir.join(n);
    let url = e.server.url();
    // A worker.py on the durable named after its mode (pull or push), with
    // `extra` flags, writing its records to `out`.
    let worker = |mode: &str, extra: &[&str], out: &PathBuf| {
        let head = ["--server", url, "--stream", "ORDERS", "--consumer", mode, "--mode", mode];
        App::start("worker.py", &[&head[..], extra, &["--out", out.to_str().unwrap()]].concat())
    };
    let mut workers = vec![];
    let (mut pull_files, mut push_files) = (vec![], vec![]);
    for i in 0..2 {
        let (p, q) = (file(&format!("pull{i}.jsonl")), file(&format!("push{i}.jsonl")));
        let follow: &[&str] = if follow_route { &["--follow-route"] } else { &[] };
        workers.push(worker("pull", follow, &p));
        pull_files.push(p);
        if push {
            workers.push(worker("push", &[], &q));
            push_files.push(q);
        }
    }
    let published = file("pub.jsonl");
    let mut publisher = App::publisher(url, 3000, 1000, &published);
    wait_until("workers process", Duration::from_secs(20), || async {
        processed(&pull_files).len() >= 300
    })
    .await;
    let consumers: &[&str] = if push {
        &["--consumer", "pull", "--consumer", "push", "--yes"]
    } else {
        &["--consumer", "pull", "--yes"]
    };
    let out = e.cli(&[move_args, consumers].concat());
    assert_eq!(out.code, 0, "{out:?}");
    assert!(publisher.0.wait().unwrap().success());
    let summary = std::fs::read_to_string(&published).unwrap_or_default();
    eprintln!("publisher: {}", summary.lines().last().unwrap_or(""));
    let acked: Vec<String> = lines(&published)
        .iter()
        .filter(|l| l.get("failed").is_none())
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(acked.len(), 3000, "every publish acked");
    let kinds: Vec<(&str, &Vec<PathBuf>)> = [("pull", &pull_files), ("push", &push_files)]
        .into_iter()
        .filter(|(_, f)| !f.is_empty())
        .collect();
    for (_, files) in &kinds {
        wait_until("every message processed", Duration::from_secs(30), || async {
            processed(files).len() >= acked.len()
        })
        .await;
    }
    for w in workers {
        w.stop();
    }
    // The last message each kind of worker handled came from where they end.
    for (_, files) in &kinds {
        let last = files.iter().flat_map(|f| lines(f)).max_by_key(|l| {
            l["id"].as_str().map(|i| i.trim_start_matches("m-").parse::<u64>().unwrap_or(0))
        });
        assert_eq!(last.unwrap()["stream"], ends_on, "the workers read {ends_on} after the move");
    }
    for (kind, files) in &kinds {
        let p = processed(files);
        let twice: Vec<_> = p.iter().filter(|(_, n)| **n > 1).collect();
        let lost: Vec<_> = acked.iter().filter(|id| !p.contains_key(*id)).collect();
        eprintln!(
            "{kind}: published {}, processed {}, twice {}, lost {}, longest gap between two processed messages {:.0} ms",
            acked.len(),
            p.len(),
            twice.len(),
            lost.len(),
            longest_gap(files) * 1000.0
        );
        assert!(twice.is_empty(), "{kind}: processed twice: {twice:?}");
        assert!(lost.is_empty(), "{kind}: lost: {lost:?}");
        assert_eq!(p.len(), acked.len(), "{kind}: processed a message never published");
    }
    e
}

/// A nats-py publisher (`App::publisher`: msg-ids, retries) and pull
/// workers bound by name to one durable, beside a change; then the check
/// that every acknowledged publish was processed exactly once.
pub struct PyLoad {
    workers: Vec<App>,
    files: Vec<PathBuf>,
    publisher: App,
    published: PathBuf,
}

impl PyLoad {
    /// `workers` worker.py (pull) on `stream`/`consumer` and a publisher of
    /// `count` messages at `rate` msg/s, their records under `dir`.
    pub fn start(
        url: &str,
        dir: &Path,
        stream: &str,
        consumer: &str,
        workers: usize,
        count: u32,
        rate: u32,
    ) -> PyLoad {
        PyLoad::start_on(url, dir, stream, consumer, "orders", workers, count, rate)
    }

    /// [`PyLoad::start`] with the publisher on `subject`.0 .. `subject`.3.
    #[allow(clippy::too_many_arguments)]
    pub fn start_on(
        url: &str,
        dir: &Path,
        stream: &str,
        consumer: &str,
        subject: &str,
        workers: usize,
        count: u32,
        rate: u32,
    ) -> PyLoad {
        let mut apps = vec![];
        let mut files = vec![];
        for i in 0..workers {
            let out = dir.join(format!("worker{i}.jsonl"));
            let args =
                ["--server", url, "--stream", stream, "--consumer", consumer, "--mode", "pull"];
            apps.push(App::start(
                "worker.py",
                &[&args[..], &["--out", out.to_str().unwrap()]].concat(),
            ));
            files.push(out);
        }
        let published = dir.join("pub.jsonl");
        let publisher = App::publisher_on(url, subject, count, rate, &published);
        PyLoad { workers: apps, files, publisher, published }
    }

    /// Until the workers processed `n` messages.
    pub async fn until_processed(&self, n: usize) {
        wait_until("workers process", Duration::from_secs(30), || async {
            processed(&self.files).len() >= n
        })
        .await;
    }

    /// The publisher done (all `count` acknowledged), every acknowledged
    /// publish processed, the workers stopped: each processed exactly once.
    /// Returns the workers' records.
    pub async fn finish_exact(self, count: usize) -> Vec<Value> {
        self.finish(count, false).await.0
    }

    /// As [`Self::finish_exact`], except that a message JetStream itself
    /// delivered again (every later copy at the same stream and sequence
    /// with a higher delivery count: the same durable's redelivery, which a
    /// durable the run created cannot make: its first delivery of a message
    /// counts 1) is not a failure but counted: returns the records and the
    /// ids redelivered so. For tests that restart consumer leaders.
    pub async fn finish_exact_but_redeliveries(self, count: usize) -> (Vec<Value>, Vec<String>) {
        self.finish(count, true).await
    }

    async fn finish(mut self, count: usize, redeliveries: bool) -> (Vec<Value>, Vec<String>) {
        assert!(self.publisher.0.wait().unwrap().success());
        let acked: Vec<String> = lines(&self.published)
            .iter()
            .filter(|l| l.get("failed").is_none())
            .map(|l| l["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(acked.len(), count, "every publish acked");
        wait_until("every message processed", Duration::from_secs(60), || async {
            processed(&self.files).len() >= acked.len()
        })
        .await;
        for w in self.workers {
            w.stop();
        }
        let p = processed(&self.files);
        let records: Vec<Value> = self.files.iter().flat_map(|f| lines(f)).collect();
        let mut twice: Vec<_> = p.iter().filter(|(_, n)| **n > 1).collect();
        let mut redelivered = vec![];
        if redeliveries {
            twice.retain(|(id, _)| {
                let mut copies: Vec<&Value> =
                    records.iter().filter(|l| l["id"].as_str() == Some(id.as_str())).collect();
                copies.sort_by_key(|l| l["delivered"].as_u64());
                let again = copies.windows(2).all(|w| {
                    (&w[0]["stream"], &w[0]["seq"]) == (&w[1]["stream"], &w[1]["seq"])
                        && w[1]["delivered"].as_u64() > w[0]["delivered"].as_u64()
                        && w[1]["delivered"].as_u64() > Some(1)
                });
                if again {
                    redelivered.push(id.to_string());
                }
                !again
            });
        }
        if !twice.is_empty() {
            // Where each copy came from (stream, sequence, consumer,
            // delivery count), to tell a redelivery from a second copy.
            let first = twice.iter().map(|(id, _)| id.as_str()).min().unwrap_or("");
            let copies: Vec<&Value> =
                records.iter().filter(|l| l["id"].as_str() == Some(first)).collect();
            panic!("processed twice: {twice:?}; the copies of {first}: {copies:?}");
        }
        let lost: Vec<_> = acked.iter().filter(|id| !p.contains_key(*id)).collect();
        assert!(lost.is_empty(), "lost: {lost:?}");
        let stalls = lines(&self.published)
            .iter()
            .filter_map(|l| l["stall_ms"].as_f64())
            .fold(0.0, f64::max);
        eprintln!(
            "{} published, each processed once (but {} redelivered by JetStream itself); longest publish {stalls:.0} ms",
            acked.len(),
            redelivered.len()
        );
        (records, redelivered)
    }
}
