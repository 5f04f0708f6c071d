//! Strategy dual-write (docs/protocol.md, *Dual-write*), live: publishers of
//! the library write A, then both streams, then B only, while guarded
//! workers of the old and the new version consume side by side.

use crate::common::*;
use crate::crash_sweep::retry_lease;
use crate::cross::{orders_on, until_lease_lapsed};
use crate::run::orders_stream;
use async_nats::jetstream;
use cutover_app::dual::DualPublisher;
use cutover_app::idempotency::{Claim, Guard};
use cutover_app::instance::InstanceOptions;
use cutover_app::worker::{self, Outcome, WorkerOptions};
use cutover_core::dual::{publisher_key, PublisherRecord, Writes};
use cutover_nats::journal::{IfMissing, JournalStore};
use cutover_nats::Js;
use cutover_testkit::{LeafSystem, NatsServer, ServerOptions};
use futures::StreamExt;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// What the publishers had acknowledged, and their errors.
#[derive(Clone, Default)]
struct Sent(Arc<Mutex<(Vec<String>, Vec<String>)>>);

/// What the workers processed: (msg-id, stream, worker version).
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, String, String)>>>);

/// A library publisher of ORDERS at about `rate` msg/s until `stop`.
fn publisher(
    p: DualPublisher,
    name: &'static str,
    rate: u64,
    sent: Sent,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<DualPublisher> {
    tokio::spawn(async move {
        // Pacing only (no synchronisation rests on it).
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
        let mut i = 0u64;
        while !*stop.borrow_and_update() {
            tick.tick().await;
            let id = format!("{name}-{i}");
            let subject = if i.is_multiple_of(2) { "orders.eu" } else { "orders.us" };
            match p.publish(subject, &id, format!("{i}").into()).await {
                Ok(_) => sent.0.lock().unwrap().0.push(id),
                Err(e) => sent.0.lock().unwrap().1.push(e.to_string()),
            }
            i += 1;
        }
        p
    })
}

/// The guard's decision for a message, recording a first claim in `seen`.
async fn guarded(guard: &Guard, seen: &Seen, m: &jetstream::Message, version: &str) -> Outcome {
    let id = m
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Msg-Id"))
        .map(|v| v.to_string())
        .unwrap_or_default();
    match guard.claim(&id).await {
        Ok(Claim::First) => {
            let from = m.info().map(|i| i.stream.to_string()).unwrap_or_default();
            seen.0.lock().unwrap().push((id.clone(), from, version.into()));
            guard.done(&id).await.expect("guard done");
            Outcome::Ack
        }
        Ok(Claim::Done) => Outcome::Ack,
        Ok(Claim::Busy) | Err(_) => Outcome::NakAfter(Duration::from_millis(100)),
    }
}

/// An old-version application: fetches ORDERS/worker with the guard and
/// knows nothing of routes; once the durable is gone it has nothing to do.
fn old_worker(
    client: async_nats::Client,
    guard: Guard,
    seen: Seen,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let ctx = jetstream::new(client);
        while !*stop.borrow_and_update() {
            let consumer = async {
                ctx.get_stream("ORDERS")
                    .await
                    .ok()?
                    .get_consumer::<jetstream::consumer::pull::Config>("worker")
                    .await
                    .ok()
            };
            let Some(c) = consumer.await else {
                // Retired: wait to be stopped.
                let _ = stop.changed().await;
                continue;
            };
            let Ok(mut batch) =
                c.fetch().max_messages(32).expires(Duration::from_millis(200)).messages().await
            else {
                continue;
            };
            while let Some(Ok(m)) = batch.next().await {
                match guarded(&guard, &seen, &m, "v1").await {
                    Outcome::Ack => {
                        let _ = m.double_ack().await;
                    }
                    _ => {
                        let _ = m
                            .ack_with(jetstream::AckKind::Nak(Some(Duration::from_millis(100))))
                            .await;
                    }
                }
            }
        }
    })
}

/// A guarded worker of `version` on `stream`/worker (following its route).
fn guarded_worker(
    client: async_nats::Client,
    guard: Guard,
    stream: &'static str,
    version: &'static str,
    seen: Seen,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let handler = move |m: jetstream::Message| {
            let (guard, seen) = (guard.clone(), seen.clone());
            async move { (guarded(&guard, &seen, &m, version).await, m) }
        };
        worker::consume(client, stream, "worker", WorkerOptions::default(), stop, handler)
            .await
            .expect("worker");
    })
}

/// Two library publishers (2 × 250 msg/s) and two guarded workers, v1 on
/// ORDERS and v2 on ORDERS_V2, all following their records.
struct Live {
    sent: Sent,
    seen: Seen,
    pubs: Vec<tokio::task::JoinHandle<DualPublisher>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    stop_pubs: watch::Sender<bool>,
    stop_workers: watch::Sender<bool>,
}

impl Live {
    /// With the library's publishers `names` (each at 250 msg/s).
    async fn start(e: &Env, names: &[&'static str]) -> Live {
        let client = e.js.client.clone();
        Live::start_across(client.clone(), client, names).await
    }

    /// Publishers, old worker and new worker with a connection to each side:
    /// A on `src`'s system, B (and the guard, the records) on `dst`'s.
    async fn start_across(
        src: async_nats::Client,
        dst: async_nats::Client,
        names: &[&'static str],
    ) -> Live {
        let (stop_pubs, stop_rx) = watch::channel(false);
        let sent = Sent::default();
        let mut pubs = vec![];
        for name in names.iter().copied() {
            let opts = InstanceOptions::new(name, "1.0");
            let (s, d) = (src.clone(), dst.clone());
            let p = DualPublisher::start_across(s, d, "ORDERS", &opts, Duration::from_secs(60))
                .await
                .unwrap();
            pubs.push(publisher(p, name, 250, sent.clone(), stop_rx.clone()));
        }
        let guard =
            Guard::open(dst.clone(), "ORDERS_SEEN", Duration::from_secs(600)).await.unwrap();
        let seen = Seen::default();
        let (stop_workers, w_rx) = watch::channel(false);
        let workers = vec![
            old_worker(src, guard.clone(), seen.clone(), w_rx.clone()),
            guarded_worker(dst, guard.clone(), "ORDERS_V2", "v2", seen.clone(), w_rx),
        ];
        let live = Live { sent, seen, pubs, workers, stop_pubs, stop_workers };
        live.until_seen(200).await;
        live
    }

    async fn until_seen(&self, n: usize) {
        let seen = &self.seen;
        wait_until("workers process", Duration::from_secs(30), || async {
            seen.0.lock().unwrap().len() >= n
        })
        .await;
    }

    /// Lets the publishers acknowledge `more` publishes, stops them, waits
    /// until every acknowledged publish was processed, stops the workers:
    /// where each publisher wrote last, the ids, and what was processed.
    async fn finish(
        mut self,
        more: usize,
        extra: &[String],
    ) -> (Vec<Writes>, Vec<String>, Vec<(String, String, String)>) {
        let sent = &self.sent;
        let now = sent.0.lock().unwrap().0.len();
        wait_until("publishers go on", Duration::from_secs(30), || async {
            sent.0.lock().unwrap().0.len() >= now + more
        })
        .await;
        self.stop_pubs.send(true).unwrap();
        let mut writes = vec![];
        for p in std::mem::take(&mut self.pubs) {
            let p = p.await.unwrap();
            writes.push(p.writes().await);
            p.stop().await.unwrap();
        }
        let (mut ids, errors) = sent.0.lock().unwrap().clone();
        assert!(errors.is_empty(), "publish errors: {errors:?}");
        ids.extend_from_slice(extra);
        let records = self.drain(&ids).await;
        (writes, ids, records)
    }

    /// Waits until every id in `ids` was processed, stops the workers and
    /// returns what they processed.
    async fn drain(self, ids: &[String]) -> Vec<(String, String, String)> {
        let seen = &self.seen;
        wait_until("every publish processed", Duration::from_secs(30), || async {
            let s = seen.0.lock().unwrap();
            let done: HashSet<&String> = s.iter().map(|r| &r.0).collect();
            ids.iter().all(|id| done.contains(id))
        })
        .await;
        self.stop_workers.send(true).unwrap();
        for w in self.workers {
            w.await.unwrap();
        }
        let records = seen.0.lock().unwrap().clone();
        records
    }
}

/// Each acknowledged id processed exactly once, nothing else processed.
fn assert_once(ids: &[String], records: &[(String, String, String)]) {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for r in records {
        *count.entry(r.0.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    let sent: HashSet<&str> = ids.iter().map(|s| s.as_str()).collect();
    let unknown: Vec<_> = count.keys().filter(|k| !sent.contains(*k)).collect();
    assert!(unknown.is_empty(), "processed but never acknowledged to a publisher: {unknown:?}");
}

fn b_config(e: &Env, subjects: serde_json::Value) -> String {
    let dir = e.server.dir().join("cfg");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("b.json");
    std::fs::write(&f, json!({ "subjects": subjects }).to_string()).unwrap();
    f.to_str().unwrap().to_string()
}

/// `head`, then `--strategy dual-write --to-config CFG` and the standard move.
fn dual_args<'a>(head: &[&'a str], cfg: &'a str, tail: &[&'a str]) -> Vec<&'a str> {
    let head = [head, &["--strategy", "dual-write", "--to-config", cfg]].concat();
    move_args(&head, "ORDERS", "ORDERS_V2", "worker", tail)
}

/// Library publishers at 2 × 250 msg/s through a dual-write run driven by the
/// CLI; an old-version worker on ORDERS and a new-version worker on
/// ORDERS_V2, both guarded by msg-id: every acknowledged publish processed
/// exactly once, no publish error, publishers end writing B only, A sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dual_write_moves_publishers_and_consumers_live_exactly() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let live = Live::start(&e, &["p1", "p2"]).await;
    let cfg = b_config(&e, json!(["v2.orders.>"]));
    let plan = e.cli(&dual_args(&["plan"], &cfg, &[]));
    assert_eq!(plan.code, 0, "{plan:?}");
    assert!(plan.stdout.contains("another account or system"), "{plan:?}");
    let out = e.cli(&dual_args(&["run"], &cfg, &["--yes", "--side-by-side", "1s"]));
    assert_eq!(out.code, 0, "{out:?}");
    eprintln!("{}", out.stdout);
    let (writes, ids, records) = live.finish(300, &[]).await;
    assert_eq!(writes, vec![Writes::B, Writes::B]);
    assert_once(&ids, &records);
    let from_b = records.iter().filter(|r| r.1 == "ORDERS_V2").count();
    let v2 = records.iter().filter(|r| r.2 == "v2").count();
    eprintln!("dual-write: {} published, 0 lost, 0 twice, 0 publish errors, {from_b} processed from ORDERS_V2 ({v2} by the new version)", ids.len());
    assert!(from_b > 0 && v2 > 0, "the new stream's durable processed nothing");
    // What the run leaves: A sealed and without the old durable, B with its
    // own subjects, the record saying B only.
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert!(a.config.sealed);
    assert!(e.js.consumer_info_opt("ORDERS", "worker").await.unwrap().is_none());
    let (_, b) = e.js.stream_info("ORDERS_V2").await.unwrap();
    assert_eq!(b.config.subjects, vec!["v2.orders.>".to_string()]);
    let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
    let rec = store.kv().get(publisher_key("ORDERS")).await.unwrap().unwrap();
    let rec: PublisherRecord = serde_json::from_slice(&rec).unwrap();
    let pairs = vec![("orders.>".to_string(), "v2.orders.>".to_string())];
    assert_eq!((rec.writes, rec.subjects), (Writes::B, pairs));
    let status = e.cli(&["status", "ORDERS.ORDERS_V2"]);
    assert_eq!(status.code, 0, "{status:?}");
    assert!(status.stdout.contains("dual_write"), "{status:?}");
    verify_judges_by_msg_id(&e, &store).await;
}

/// `verify` of the migration holds (every message A stored after the dual
/// point is in B, the two sides together deliver everything); with the
/// new durable's first message deleted from B it does not, and names it.
async fn verify_judges_by_msg_id(e: &Env, store: &JournalStore) {
    let out = e.cli(&["--json", "verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 0, "{out:?}");
    let r = out.json();
    let c = &r["consumers"][0];
    eprintln!(
        "verify: {} of A after the dual point, {} missing in B; old side {}, new side {}, guarded {}, lost {}",
        r["a_after_point"], r["missing_in_b"], c["old"], c["new"], c["guarded"], c["lost"]
    );
    assert!(r["a_after_point"].as_u64().unwrap() > 0, "{r}");
    assert_eq!((r["missing_in_b"].as_u64(), c["lost"].as_u64()), (Some(0), Some(0)), "{r}");
    let j = store.load("ORDERS.ORDERS_V2").await.unwrap().unwrap();
    let start = j.consumers[0].b_start.unwrap();
    e.js.api("delete", "STREAM.MSG.DELETE.ORDERS_V2", &json!({ "seq": start })).await.unwrap();
    let out = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(out.code, 6, "{out:?}");
    assert!(out.stdout.contains("DOES NOT HOLD"), "{out:?}");
    assert!(out.stdout.contains("1 without a copy in ORDERS_V2"), "{out:?}");
}

/// `plan` says what dual-write needs and `run` refuses before any write:
/// B's own subjects, paired with A's, and registered publishers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_write_without_subjects_or_publishers_changes_nothing() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    e.publish("orders.eu", "m", 10).await;
    let before = e.snapshot().await;
    for (subjects, wanted) in [
        (json!(["orders.>"]), "dual-write needs B's own subjects"),
        (json!(["orders.v2.>"]), "overlaps A's orders.>"),
        (json!(["v2.orders.*"]), "must have the same wildcards in the same order"),
        (json!(["v2.orders.>"]), "no live publisher of ORDERS is registered"),
    ] {
        let cfg = b_config(&e, subjects);
        let out = e.cli(&dual_args(&["plan"], &cfg, &[]));
        assert_eq!(out.code, 3, "{out:?}");
        assert!(out.stdout.contains(wanted), "{wanted}: {out:?}");
    }
    let cfg = b_config(&e, json!(["v2.orders.>"]));
    let out = e.cli(&dual_args(&["run"], &cfg, &["--yes"]));
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("no live publisher of ORDERS is registered"), "{out:?}");
    let strip = |mut v: serde_json::Value| {
        v.as_object_mut().unwrap().remove("KV_CUTOVER");
        v
    };
    assert_eq!(strip(before), strip(e.snapshot().await), "nothing changed on the server");
}

/// Runs `nats-cutover ARGS`, which dies (test hook) once durable `worker`
/// exists on B.
fn crashed_once_the_new_durable_exists(args: &[&str]) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
        .args(args)
        .env(cutover_nats::test_hooks::CRASH_AFTER_VAR, "consumer_created:worker")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(cutover_nats::test_hooks::CRASH_EXIT_CODE), "{out:?}");
}

/// A runner killed once the new durable exists (publishers writing both,
/// the v2 worker processing B) is rolled back: publishers write A only again,
/// the new durable, its route and B are gone, and still every acknowledged
/// publish is processed exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dual_write_rolled_back_after_the_new_durable_is_exact() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let live = Live::start(&e, &["p1", "p2"]).await;
    let cfg = b_config(&e, json!(["v2.orders.>"]));
    let mut args = vec!["--server", e.server.url()];
    args.extend(dual_args(&["run"], &cfg, &["--yes", "--lease-ttl", "1s"]));
    crashed_once_the_new_durable_exists(&args);
    let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
    let rec = store.kv().get(publisher_key("ORDERS")).await.unwrap().unwrap();
    assert_eq!(serde_json::from_slice::<PublisherRecord>(&rec).unwrap().writes, Writes::Dual);
    let n = live.seen.0.lock().unwrap().len();
    live.until_seen(n + 200).await;
    // A live publisher that has not acknowledged writing A only may still be
    // writing B: B is kept and the rollback says so (a newcomer's publisher,
    // retrying B's side as the protocol says, hung once B was deleted under
    // it). Once it acknowledges, the rollback run again finishes.
    let stuck = |ack: serde_json::Value| {
        let reg = json!({"version": 1, "instance": "stuck", "stream": "ORDERS", "ack": ack, "ttl_ms": 60_000});
        let kv = store.kv().clone();
        async move {
            let key = cutover_core::dual::publisher_instance_key("ORDERS", "stuck");
            kv.put(key, serde_json::to_vec(&reg).unwrap().into()).await.unwrap();
        }
    };
    stuck(json!({"migration": "ORDERS.ORDERS_V2", "writes": "dual"})).await;
    let out = retry_lease(&e, &["rollback", "ORDERS.ORDERS_V2"]).await;
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("stuck") && out.stderr.contains("ORDERS_V2 is kept"), "{out:?}");
    // `status` names the failed rollback as the migration's last error.
    let st = e.cli(&["--json", "status"]).json();
    let m = st["migrations"].as_array().unwrap().iter().find(|m| m["id"] == "ORDERS.ORDERS_V2");
    let error = m.map(|m| m["error"].to_string()).unwrap_or_default();
    assert!(error.contains("rollback:") && error.contains("stuck"), "{st:#}");
    assert!(e.js.stream_info_opt("ORDERS_V2").await.unwrap().is_some(), "B kept");
    assert!(store.kv().get(publisher_key("ORDERS")).await.unwrap().is_none(), "record removed");
    stuck(serde_json::Value::Null).await;
    let out = retry_lease(&e, &["rollback", "ORDERS.ORDERS_V2"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (writes, ids, records) = live.finish(300, &[]).await;
    assert_eq!(writes, vec![Writes::A, Writes::A]);
    assert_once(&ids, &records);
    assert!(e.js.stream_info_opt("ORDERS_V2").await.unwrap().is_none());
    assert!(store.route("ORDERS", "worker").await.unwrap().is_none());
    let (_, a) = e.js.stream_info("ORDERS").await.unwrap();
    assert!(!a.config.sealed);
    assert!(e.js.consumer_info_opt("ORDERS", "worker").await.unwrap().is_some());
}

/// The nats-py apps through a dual-write run: the publisher written from
/// docs/protocol.md (tests/apps/dual_publisher.py), an old-version worker
/// on ORDERS that ignores routes and a new one that follows its route to
/// ORDERS_V2 (tests/apps/worker.py), both with the protocol's idempotency
/// guard: no publish error, every acknowledged message processed exactly
/// once, the publisher ends writing B only, and verify holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_py_apps_follow_the_dual_write_protocol() {
    use crate::pyapps::{lines, processed, App};
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let dir = e.server.dir();
    let out = dir.join("py-publisher.jsonl");
    let args = ["--server", e.server.url(), "--stream", "ORDERS", "--instance", "py-1"];
    let rest = ["--subject", "orders", "--count", "1000000", "--rate", "300", "--id-prefix", "py"];
    let py = App::start(
        "dual_publisher.py",
        &[&args[..], &rest[..], &["--out", out.to_str().unwrap()]].concat(),
    );
    let files = [dir.join("py-old.jsonl"), dir.join("py-new.jsonl")];
    let worker = |f: &std::path::Path, follow: bool| {
        let w = ["--server", e.server.url(), "--stream", "ORDERS", "--consumer", "worker"];
        let g = ["--mode", "pull", "--guard", "ORDERS_SEEN", "--out", f.to_str().unwrap()];
        let route: &[&str] = if follow { &["--follow-route"] } else { &[] };
        App::start("worker.py", &[&w[..], &g[..], route].concat())
    };
    let workers = [worker(&files[0], false), worker(&files[1], true)];
    wait_until("workers process", Duration::from_secs(30), || async {
        processed(&files).len() >= 200
    })
    .await;
    let cfg = b_config(&e, json!(["v2.orders.>"]));
    let run = e.cli(&dual_args(&["run"], &cfg, &["--yes", "--side-by-side", "1s"]));
    assert_eq!(run.code, 0, "{run:?}");
    let at_commit = lines(&out).len();
    wait_until("the publisher goes on", Duration::from_secs(30), || async {
        lines(&out).len() >= at_commit + 300
    })
    .await;
    py.stop();
    let text = std::fs::read_to_string(&out).unwrap();
    let done: serde_json::Value =
        text.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    assert_eq!((done["failed"].as_u64(), done["writes"].as_str()), (Some(0), Some("b")), "{done}");
    let recs = lines(&out);
    let ids: Vec<String> = recs.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect();
    let by = |w: &str| recs.iter().filter(|r| r["writes"] == w).count();
    assert!(by("a") > 0 && by("dual") > 0 && by("b") > 0, "the publisher went through every state");
    wait_until("every publish processed", Duration::from_secs(30), || async {
        let p = processed(&files);
        ids.iter().all(|id| p.contains_key(id))
    })
    .await;
    for w in workers {
        w.stop();
    }
    let p = processed(&files);
    let twice: Vec<_> = p.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "processed twice: {twice:?}");
    assert_eq!(p.len(), ids.len(), "processed ids no publisher had acknowledged");
    let from_b = files.iter().flat_map(|f| lines(f)).filter(|l| l["stream"] == "ORDERS_V2").count();
    eprintln!(
        "nats-py: {} acknowledged ({} to A, {} to both, {} to B), 0 failed, 0 lost, 0 twice; {from_b} processed from ORDERS_V2",
        ids.len(), by("a"), by("dual"), by("b")
    );
    assert!(from_b > 0);
    let v = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
    assert_eq!(v.code, 0, "{v:?}");
}

/// The runner killed after each step of a dual-write run (the crash hook),
/// then `run --resume`: the migration finishes, and with library publishers
/// and guarded workers running throughout, every acknowledged publish is
/// processed exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dual_write_resumes_after_a_crash_at_each_step() {
    for step in ["create_b", "dual_write", "consumer_created:worker", "move_publishers"] {
        let e = env().await;
        orders_stream(&e, 30_000).await;
        let live = Live::start(&e, &["p1", "p2"]).await;
        let cfg = b_config(&e, json!(["v2.orders.>"]));
        let mut args = vec!["--server", e.server.url()];
        args.extend(dual_args(&["run"], &cfg, &["--yes", "--lease-ttl", "1s"]));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nats-cutover"))
            .args(&args)
            .env(cutover_nats::test_hooks::CRASH_AFTER_VAR, step)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(cutover_nats::test_hooks::CRASH_EXIT_CODE),
            "{step}: {out:?}"
        );
        let n = live.seen.0.lock().unwrap().len();
        live.until_seen(n + 100).await;
        let resume = ["run", "--resume", "ORDERS.ORDERS_V2", "--lease-ttl", "1s"];
        let out = retry_lease(&e, &resume).await;
        assert_eq!(out.code, 0, "{step}: {out:?}");
        let (writes, ids, records) = live.finish(200, &[]).await;
        assert_eq!(writes, vec![Writes::B, Writes::B], "{step}");
        assert_once(&ids, &records);
        let v = e.cli(&["verify", "--migration", "ORDERS.ORDERS_V2"]);
        assert_eq!(v.code, 0, "{step}: {v:?}");
        eprintln!(
            "crash after {step}, resumed: {} published, 0 lost, 0 twice, verify holds",
            ids.len()
        );
    }
}

/// A publisher that does not follow the protocol writes ORDERS alone while
/// the library's publishers write both: the proof before the commit finds
/// its messages missing in ORDERS_V2 and the run stops before the commit,
/// naming them and the rollback; after the rollback every acknowledged
/// message (the stray publisher's too) is processed exactly once from
/// ORDERS, and publishers write ORDERS only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_publisher_outside_the_protocol_stops_the_run_before_the_commit() {
    let e = env().await;
    orders_stream(&e, 30_000).await;
    let live = Live::start(&e, &["p1"]).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stray =
        cutover_app::publisher::Publisher::new(e.js.client.clone(), Duration::from_secs(60));
    let stray_sent = Sent::default();
    let stray_task = {
        let (sent, mut stop) = (stray_sent.clone(), stop_rx);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            let mut i = 0;
            while !*stop.borrow_and_update() {
                tick.tick().await;
                let id = format!("stray-{i}");
                if stray.publish("orders.stray", &id, "s".into()).await.is_ok() {
                    sent.0.lock().unwrap().0.push(id);
                }
                i += 1;
            }
        })
    };
    let cfg = b_config(&e, json!(["v2.orders.>"]));
    let tail = ["--yes", "--side-by-side", "1s", "--fence-ack-timeout", "1s"];
    let out = e.cli(&dual_args(&["run"], &cfg, &tail));
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("have no copy in ORDERS_V2"), "{out:?}");
    assert!(out.stderr.contains("nats-cutover rollback ORDERS.ORDERS_V2"), "{out:?}");
    // Route followers are sent back to A's old durable at once, not left
    // reading B (which will never hold the stray messages) until a rollback.
    // The proof may catch the stray message before any route was written
    // (a CI run under load did): then there is none to take back.
    let routed = out.stderr.contains("route followers read ORDERS's old durables again");
    let store = JournalStore::open(&e.js, IfMissing::ReturnNone).await.unwrap().unwrap();
    assert!(store.route("ORDERS", "worker").await.unwrap().is_none(), "no route: {routed}");
    let j = store.load("ORDERS.ORDERS_V2").await.unwrap().unwrap();
    assert!(!j.phase.committed(), "{:?}", j.phase);
    let out = retry_lease(&e, &["rollback", "ORDERS.ORDERS_V2"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    stop_tx.send(true).unwrap();
    stray_task.await.unwrap();
    let stray_ids = stray_sent.0.lock().unwrap().0.clone();
    let (writes, ids, records) = live.finish(100, &stray_ids).await;
    assert_eq!(writes, vec![Writes::A]);
    assert_once(&ids, &records);
    let stray_done = records.iter().filter(|r| r.0.starts_with("stray-")).count();
    eprintln!(
        "stray publisher: {} acknowledged, all processed once after the rollback ({stray_done})",
        stray_ids.len()
    );
    assert_eq!(stray_done, stray_ids.len());
    assert!(e.js.stream_info_opt("ORDERS_V2").await.unwrap().is_none());
}

/// Two JetStream accounts of one server with no export and no import at
/// all: nothing crosses between them, which dual-write does not need.
const ISOLATED_ACCOUNTS: &str = r#"accounts {
  SRC { jetstream: enabled, users: [ { user: src, password: src } ] }
  DST { jetstream: enabled, users: [ { user: dst, password: dst } ] }
}
"#;

/// A server with [`ISOLATED_ACCOUNTS`], and a client of `src` and of `dst`.
async fn isolated_accounts() -> (NatsServer, async_nats::Client, async_nats::Client) {
    let opts = ServerOptions { config: Some(ISOLATED_ACCOUNTS.into()), ..Default::default() };
    let server = NatsServer::start_with(opts).unwrap_or_else(|e| panic!("{e}"));
    let connect = |u: &'static str| {
        let o = async_nats::ConnectOptions::new().user_and_password(u.into(), u.into());
        o.connect(server.url().to_string())
    };
    let (src, dst) = (connect("src").await.unwrap(), connect("dst").await.unwrap());
    (server, src, dst)
}

/// The CLI's connections: the target side as `dst`, the source side as `src`.
fn accounts_conn(url: &str) -> Vec<&str> {
    let to = ["--server", url, "--user", "dst", "--password", "dst"];
    [&to[..], &["--from-server", url, "--from-user", "src", "--from-password", "src"]].concat()
}

/// Strategy dual-write from ORDERS on `src`'s system to ORDERS_V2 on
/// `dst`'s, driven by the CLI with `conn` (both sides): library publishers
/// with a connection to each side (2 × 250 msg/s), an old-version worker on
/// ORDERS (`src`) and a new-version one on ORDERS_V2 (`dst`), both guarded
/// by msg-id. Every acknowledged publish processed exactly once, no publish
/// error, `verify` across both connections holds; the plan names the sides;
/// the journal and the records live on `dst` only, and B never read A.
/// Beside them the nats-py publisher written from docs/protocol.md
/// (tests/apps/dual_publisher.py) with a connection to each side, `py`
/// (source URL, target URL): it goes through every state with no publish
/// error, and its messages are processed exactly once too.
async fn live_dual_across(
    src: async_nats::Client,
    dst: async_nats::Client,
    conn: &[&str],
    py: (&str, &str),
    tag: &str,
) {
    let (src_js, dst_js) = (
        Js::new(src.clone(), Duration::from_secs(5)),
        Js::new(dst.clone(), Duration::from_secs(5)),
    );
    orders_on(&src_js).await;
    let live = Live::start_across(src.clone(), dst.clone(), &["p1", "p2"]).await;
    let dir = TempDir::new(&format!("dual-across-{tag}"));
    let cfg = dir.0.join("b.json");
    std::fs::write(&cfg, json!({ "subjects": ["v2.orders.>"] }).to_string()).unwrap();
    let cfg = cfg.to_str().unwrap();
    let plan = cli(&dual_args(&[conn, &["plan"]].concat(), cfg, &[]));
    assert_eq!(plan.code, 0, "{plan:?}");
    for said in ["ORDERS on the source side", "ORDERS_V2 on the target side", "No export or import"]
    {
        assert!(plan.stdout.contains(said), "the plan says {said}: {plan:?}");
    }
    let py_out = dir.0.join("py-publisher.jsonl");
    let py = crate::pyapps::App::start(
        "dual_publisher.py",
        &[
            &["--server", py.1, "--from-server", py.0, "--stream", "ORDERS", "--instance", "py-1"],
            &["--subject", "orders", "--count", "1000000", "--rate", "200", "--id-prefix", "py"],
            &["--out", py_out.to_str().unwrap()][..],
        ]
        .concat(),
    );
    let out = cli(&dual_args(&[conn, &["run"]].concat(), cfg, &["--yes", "--side-by-side", "1s"]));
    assert_eq!(out.code, 0, "{out:?}");
    let py_ids = py_publisher_after_the_run(py, &py_out).await;
    let (writes, ids, records) = live.finish(300, &py_ids).await;
    assert_eq!(writes, vec![Writes::B, Writes::B]);
    assert_once(&ids, &records);
    let from_b = records.iter().filter(|r| r.1 == "ORDERS_V2").count();
    eprintln!("dual-write across ({tag}): {} published, 0 lost, 0 twice, 0 publish errors, {from_b} processed from ORDERS_V2", ids.len());
    assert!(from_b > 0, "the new stream's durable processed nothing");
    let (_, a) = src_js.stream_info("ORDERS").await.unwrap();
    assert!(a.config.sealed, "ORDERS sealed on the source side");
    assert!(src_js.consumer_info_opt("ORDERS", "worker").await.unwrap().is_none());
    let (_, b) = dst_js.stream_info("ORDERS_V2").await.unwrap();
    assert!(b.config.sources.is_empty() && b.config.mirror.is_none(), "B never read A");
    assert!(dst_js.stream_info_opt("KV_CUTOVER").await.unwrap().is_some(), "journal on B's side");
    assert!(src_js.stream_info_opt("KV_CUTOVER").await.unwrap().is_none(), "none on A's");
    let v = cli(&[conn, &["--json", "verify", "--migration", "ORDERS.ORDERS_V2"]].concat());
    assert_eq!(v.code, 0, "verify across the two connections: {v:?}");
    let r = v.json();
    let c = &r["consumers"][0];
    eprintln!("verify ({tag}): {} of A after the dual point, {} missing in B; old {}, new {}, guarded {}, lost {}", r["a_after_point"], r["missing_in_b"], c["old"], c["new"], c["guarded"], c["lost"]);
    assert!(r["a_after_point"].as_u64().unwrap() > 0, "{r}");
    assert_eq!((r["missing_in_b"].as_u64(), c["lost"].as_u64()), (Some(0), Some(0)), "{r}");
}

/// Lets the nats-py dual publisher acknowledge 200 more messages after the
/// run, stops it and returns its acknowledged ids: it ended writing B only,
/// went through every state (A, both, B) and gave up on none.
async fn py_publisher_after_the_run(py: crate::pyapps::App, out: &std::path::Path) -> Vec<String> {
    use crate::pyapps::lines;
    let at_commit = lines(out).len();
    wait_until("the nats-py publisher goes on", Duration::from_secs(30), || async {
        lines(out).len() >= at_commit + 200
    })
    .await;
    py.stop();
    let text = std::fs::read_to_string(out).unwrap();
    let done: serde_json::Value =
        text.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    assert_eq!((done["failed"].as_u64(), done["writes"].as_str()), (Some(0), Some("b")), "{done}");
    let recs = lines(out);
    let by = |w: &str| recs.iter().filter(|r| r["writes"] == w).count();
    eprintln!(
        "nats-py across: {} to A, {} to both, {} to B, 0 failed",
        by("a"),
        by("dual"),
        by("b")
    );
    assert!(by("a") > 0 && by("dual") > 0 && by("b") > 0, "the publisher went through every state");
    recs.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

/// Dual-write from account SRC to account DST of one server with no export
/// or import between them ([`live_dual_across`]); `--from-api` is refused
/// as bad input, and so is a verify without the source side.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dual_write_from_one_account_to_another_without_imports_live_exactly() {
    let (server, src, dst) = isolated_accounts().await;
    let conn = accounts_conn(server.url());
    // How B sources A means nothing here: refused as bad input, unchanged.
    let dir = TempDir::new("dual-accounts");
    let cfg = dir.0.join("b.json");
    std::fs::write(&cfg, json!({ "subjects": ["v2.orders.>"] }).to_string()).unwrap();
    let args = ["--from-api", "JS.SRC.API"];
    let bad = cli(&dual_args(&[&conn[..], &["plan"]].concat(), cfg.to_str().unwrap(), &args));
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("leave them out"), "{bad:?}");
    let (py_src, py_dst) = (
        format!("nats://src:src@127.0.0.1:{}", server.port()),
        format!("nats://dst:dst@127.0.0.1:{}", server.port()),
    );
    live_dual_across(src, dst, &conn, (&py_src, &py_dst), "accounts").await;
    // Without the source side verify is refused, naming it (A is not in DST).
    let one_side = cli(&[&conn[..6], &["verify", "--migration", "ORDERS.ORDERS_V2"]].concat());
    assert_eq!(one_side.code, 2, "{one_side:?}");
    assert!(one_side.stderr.contains("--from-server"), "names what is missing: {one_side:?}");
}

/// Dual-write from a leaf node's JetStream domain to its hub's
/// ([`live_dual_across`]): nothing needs to cross the leaf connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dual_write_from_a_leaf_domain_to_the_hub_live_exactly() {
    let sys = LeafSystem::start(1).unwrap_or_else(|e| panic!("{e}"));
    let leaf = async_nats::connect(sys.leaf.url()).await.unwrap();
    let hub = async_nats::connect(sys.hub_urls()).await.unwrap();
    let hub_urls = sys.hub_urls();
    let conn = ["--server", &hub_urls, "--from-server", sys.leaf.url()];
    let first_hub = hub_urls.split(',').next().unwrap();
    live_dual_across(leaf, hub, &conn, (sys.leaf.url(), first_hub), "leaf").await;
}

/// A dual-write run across accounts killed once the new durable exists on
/// DST: a rollback without the source side is refused (exit 2, naming it)
/// and changes nothing; with both sides it deletes the publisher record, B
/// and the new durable on DST, leaves A and its durable on SRC as they were,
/// and every acknowledged publish is processed exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dual_write_across_accounts_rolled_back_after_the_new_durable_is_exact() {
    let (server, src, dst) = isolated_accounts().await;
    let t = Duration::from_secs(5);
    let (src_js, dst_js) = (Js::new(src.clone(), t), Js::new(dst.clone(), t));
    orders_on(&src_js).await;
    let live = Live::start_across(src, dst, &["p1"]).await;
    let dir = TempDir::new("dual-accounts-rollback");
    let cfg = dir.0.join("b.json");
    std::fs::write(&cfg, json!({ "subjects": ["v2.orders.>"] }).to_string()).unwrap();
    let conn = accounts_conn(server.url());
    let tail = ["--yes", "--lease-ttl", "1s"];
    let args = dual_args(&[&conn[..], &["run"]].concat(), cfg.to_str().unwrap(), &tail);
    crashed_once_the_new_durable_exists(&args);
    assert!(dst_js.consumer_info_opt("ORDERS_V2", "worker").await.unwrap().is_some());
    let one_side = cli(&[&conn[..6], &["rollback", "ORDERS.ORDERS_V2"]].concat());
    assert_eq!(one_side.code, 2, "{one_side:?}");
    assert!(one_side.stderr.contains("--from-server"), "{one_side:?}");
    assert!(dst_js.stream_info_opt("ORDERS_V2").await.unwrap().is_some(), "nothing changed");
    let n = live.seen.0.lock().unwrap().len();
    live.until_seen(n + 200).await;
    let out = until_lease_lapsed(&[&conn[..], &["rollback", "ORDERS.ORDERS_V2"]].concat()).await;
    assert_eq!(out.code, 0, "{out:?}");
    let (writes, ids, records) = live.finish(300, &[]).await;
    assert_eq!(writes, vec![Writes::A]);
    assert_once(&ids, &records);
    eprintln!("rolled back across accounts: {} published, each processed once", ids.len());
    assert!(dst_js.stream_info_opt("ORDERS_V2").await.unwrap().is_none(), "B deleted on DST");
    let store = JournalStore::open(&dst_js, IfMissing::ReturnNone).await.unwrap().unwrap();
    assert!(store.kv().get(publisher_key("ORDERS")).await.unwrap().is_none(), "record deleted");
    let (_, a) = src_js.stream_info("ORDERS").await.unwrap();
    assert!(!a.config.sealed);
    assert!(src_js.consumer_info_opt("ORDERS", "worker").await.unwrap().is_some());
}
