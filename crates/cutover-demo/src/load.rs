//! A live workload: a paced publisher (msg-id, retry) and K workers that follow
//! their consumer's route, recording every message they process. The end-to-end
//! tests, the demo and the benchmark all measure a cut-over with it.
//!
//! Bounded by construction: at most `max_messages`, for at most `duration`.

use async_nats::jetstream;
use bytes::Bytes;
use cutover_app::dual::DualPublisher;
use cutover_app::fence::{self, FenceOptions};
use cutover_app::idempotency::{Claim, Guard};
use cutover_app::instance::InstanceOptions;
use cutover_app::publisher::{PublishFailed, Published, Publisher};
use cutover_app::worker::{consume_across, Outcome, WorkerOptions};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Semaphore};

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub stream: String,
    pub consumer: String,
    /// Messages go to `{subject_prefix}.{i % 4}`.
    pub subject_prefix: String,
    pub rate: u32,
    pub max_messages: u64,
    pub duration: Duration,
    pub workers: usize,
    pub processing: Duration,
    pub batch: usize,
    pub retry_horizon: Duration,
    /// Workers follow the application protocol (docs/protocol.md, needed by
    /// fence mode; registered as instances `load-<i>`) instead of the route
    /// follower.
    pub protocol: bool,
    /// Workers are push subscribers in queue group [`PUSH_GROUP`] on the
    /// durable's deliver subject ([`push_subject`]) instead of pull workers:
    /// the durable must be a push consumer with that subject and group. A
    /// moved push durable keeps them, so the workers follow nothing.
    pub push: bool,
}

/// The queue group of push workers.
pub const PUSH_GROUP: &str = "workers";

/// The deliver subject of a push workload's durable.
pub fn push_subject(cfg: &LoadConfig) -> String {
    format!("_deliver.{}.{}", cfg.stream, cfg.consumer)
}

impl Default for LoadConfig {
    fn default() -> Self {
        Self {
            stream: "ORDERS".into(),
            consumer: "worker".into(),
            subject_prefix: "orders".into(),
            rate: 1000,
            max_messages: 1_000_000,
            duration: Duration::from_secs(10),
            workers: 4,
            processing: Duration::from_millis(1),
            batch: 32,
            retry_horizon: Duration::from_secs(120),
            protocol: false,
            push: false,
        }
    }
}

/// One sample a tick (for the timeline report).
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub t_ms: u64,
    pub published: u64,
    pub processed: u64,
}

#[derive(Default)]
struct Shared {
    processed: Mutex<HashMap<u64, u32>>,
    redelivered: Mutex<std::collections::HashSet<u64>>,
    /// Where each id was first processed, and the ids processed from two
    /// streams (the old one and the new one: a move's duplicate).
    first_stream: Mutex<HashMap<u64, Delivery>>,
    /// Each processing of an id after its first: where both came from.
    duplicate_details: Mutex<Vec<String>>,
    /// For each id, how many messages had been processed when it was first.
    first_index: Mutex<HashMap<u64, u64>>,
    across: Mutex<std::collections::HashSet<u64>>,
    published: Mutex<Vec<u64>>,
    publish_failures: AtomicU64,
    retried: AtomicU64,
    max_stall_us: AtomicU64,
    max_retried_us: AtomicU64,
    max_gap_us: AtomicU64,
    last_processed: Mutex<Option<Instant>>,
    /// When each message was processed (ms since the epoch), in order.
    processed_at: Mutex<Vec<f64>>,
    processed_count: AtomicU64,
    published_count: AtomicU64,
    publishing: AtomicBool,
    /// Publishers held (the seed's manual procedure pauses them): nothing is
    /// published while set; what fell due meanwhile goes out on release.
    hold: AtomicBool,
    /// The publisher that takes over from the next message on (a move across
    /// systems whose publishers are repointed to the target side).
    repoint: Mutex<Option<Pub>>,
    samples: Mutex<Vec<Sample>>,
}

pub struct Load {
    shared: Arc<Shared>,
    stop_publishing: watch::Sender<bool>,
    /// One per worker (a rolling upgrade stops them one by one).
    stop_workers: Vec<watch::Sender<bool>>,
    /// What a replacement worker needs (mode rolling).
    client: async_nats::Client,
    cfg: LoadConfig,
    publisher: tokio::task::JoinHandle<()>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    sampler: tokio::task::JoinHandle<()>,
    t0: Instant,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub published: u64,
    pub processed_unique: u64,
    pub processed_total: u64,
    /// Published (acknowledged by JetStream) but not processed when the
    /// workers stopped: lost, or still pending on the final durable (see
    /// [`LoadReport::pending_on_b`]).
    pub lost: Vec<u64>,
    /// Of `lost`, how many the final durable still held (pending or awaiting
    /// an ack) when the workers stopped: late, not lost. Set by whoever knows
    /// the final durable ([`LoadReport::count_pending`]); 0 until then.
    pub pending_on_b: u64,
    /// Processed more than once: (id, times).
    pub duplicated: Vec<(u64, u32)>,
    /// Processed at least once from a JetStream redelivery (delivered > 1).
    pub redelivered: Vec<u64>,
    /// Processed from two different streams: a duplicate the move made (one
    /// from the old stream's durable, one from the new one's), never one of
    /// JetStream's own redeliveries, which come from the same durable.
    pub duplicated_across_streams: Vec<u64>,
    /// For each message processed more than once, how many messages had been
    /// processed (the [`Load::processed`] count) when it first was: a test
    /// that killed the server tells the redeliveries of what the server
    /// forgot (processed just before the kill) from any other.
    #[serde(skip)]
    pub duplicated_first_processed: Vec<(u64, u64)>,
    /// For each processing of a message after its first, where both came
    /// from (stream, consumer, stream sequence, delivery count, time): what a
    /// failing test prints to tell a redelivery from a move's duplicate.
    #[serde(skip)]
    pub duplicate_details: Vec<String>,
    /// Processed but never acknowledged to the publisher.
    pub extra: Vec<u64>,
    pub publish_failures: u64,
    pub publish_retries: u64,
    /// The longest any publish took from first attempt to ack (includes the
    /// machine's own latency spikes).
    pub max_publish_stall_ms: f64,
    /// The longest a publish that had to retry took: the stall the subject move
    /// caused.
    pub max_retried_publish_ms: f64,
    pub max_consumer_gap_ms: f64,
    pub samples: Vec<Sample>,
    /// When each message was processed (ms since the epoch), in order: for
    /// the gap of one window ([`LoadReport::gap_overlapping`]).
    #[serde(skip)]
    pub processed_at_ms: Vec<f64>,
}

impl LoadReport {
    /// Published and never processed, and not pending on the final durable.
    pub fn lost_count(&self) -> u64 {
        (self.lost.len() as u64).saturating_sub(self.pending_on_b)
    }

    /// Reads the final durable (`stream`/`consumer`) once the workers have
    /// stopped: what it still holds for them is pending, not lost (at most
    /// what was not processed).
    pub async fn count_pending(&mut self, js: &cutover_nats::Js, stream: &str, consumer: &str) {
        if self.lost.is_empty() {
            return;
        }
        if let Ok(Some((_, c))) = js.consumer_info_opt(stream, consumer).await {
            self.pending_on_b = (c.num_pending + c.num_ack_pending).min(self.lost.len() as u64);
        }
    }

    /// The longest time between two processed messages that overlaps
    /// `[from_ms, to_ms]` (wall clock), also one begun before it.
    pub fn gap_overlapping(&self, from_ms: f64, to_ms: f64) -> f64 {
        let t = &self.processed_at_ms;
        t.windows(2)
            .filter(|w| w[1] >= from_ms && w[0] <= to_ms)
            .map(|w| w[1] - w[0])
            .fold(0.0, f64::max)
    }

    /// The largest gap inside each window of `window_ms` (consecutive,
    /// not overlapping) from the first processed message to `until_ms`:
    /// the steady state measured the way the handoff is (the longest gap
    /// overlapping a window of the handoff's length). Returns the median
    /// and the largest of those per-window maxima; `None` without a whole
    /// window.
    pub fn steady_window_gaps(&self, until_ms: f64, window_ms: f64) -> Option<(f64, f64)> {
        let t = &self.processed_at_ms;
        let first = *t.first()?;
        if window_ms <= 0.0 {
            return None;
        }
        let mut maxima = vec![];
        let mut from = first;
        while from + window_ms <= until_ms {
            maxima.push(self.gap_overlapping(from, from + window_ms));
            from += window_ms;
        }
        maxima.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Some((*maxima.get(maxima.len() / 2)?, *maxima.last()?))
    }

    /// The median time between two processed messages before `until_ms`.
    pub fn steady_gap_before(&self, until_ms: f64) -> f64 {
        let mut g: Vec<f64> = self
            .processed_at_ms
            .windows(2)
            .filter(|w| w[1] < until_ms)
            .map(|w| w[1] - w[0])
            .collect();
        g.sort_by(|a, b| a.partial_cmp(b).unwrap());
        g.get(g.len() / 2).copied().unwrap_or(0.0)
    }
}

impl Load {
    pub async fn start(client: async_nats::Client, cfg: LoadConfig) -> Self {
        Self::start_with_audit(client, cfg, None).await
    }

    /// Like [`Load::start`]; with `audit_subject`, every worker publishes an
    /// audit record ([`crate::audit`]) for each message before acknowledging it.
    pub async fn start_with_audit(
        client: async_nats::Client,
        cfg: LoadConfig,
        audit_subject: Option<String>,
    ) -> Self {
        let p = Pub::Plain(Box::new(Publisher::new(client.clone(), cfg.retry_horizon)));
        Self::start_inner(client, None, cfg, audit_subject, String::new(), p, None).await
    }

    /// Like [`Load::start`] for a move across systems: the publisher and the
    /// workers start on `home` (the old stream's system); the workers follow
    /// their route, read on `target`, to the new stream there.
    pub async fn start_across(
        home: async_nats::Client,
        target: async_nats::Client,
        cfg: LoadConfig,
    ) -> Self {
        let p = Pub::Plain(Box::new(Publisher::new(home.clone(), cfg.retry_horizon)));
        Self::start_inner(home, Some(target), cfg, None, String::new(), p, None).await
    }

    /// Like [`Load::start`], for strategy dual-write (docs/protocol.md,
    /// *Dual-write*): the publisher follows the publisher record (the
    /// library's `DualPublisher`, registered as `load-pub`) and every worker
    /// claims each msg-id in the idempotency guard (KV bucket
    /// `<stream>_SEEN`) before processing it.
    pub async fn start_dual(
        client: async_nats::Client,
        cfg: LoadConfig,
    ) -> Result<Self, async_nats::Error> {
        let opts = InstanceOptions::new("load-pub", env!("CARGO_PKG_VERSION"));
        let dp =
            DualPublisher::start(client.clone(), &cfg.stream, &opts, cfg.retry_horizon).await?;
        let guard =
            Guard::open(client.clone(), &format!("{}_SEEN", cfg.stream), Duration::from_secs(600))
                .await?;
        let p = Pub::Dual(Arc::new(dp));
        Ok(Self::start_inner(client, None, cfg, None, String::new(), p, Some(guard)).await)
    }

    /// Like [`Load::start`] with a publisher that never retries: one
    /// attempt, `ack_wait` for its ack (as a plain client's JetStream
    /// publish); an error ("no responders" while no stream holds the
    /// subjects) is counted in `publish_failures`, the message not sent again.
    pub async fn start_without_retries(
        client: async_nats::Client,
        cfg: LoadConfig,
        ack_wait: Duration,
    ) -> Self {
        let mut p = Publisher::new(client.clone(), Duration::ZERO);
        (p.ack_timeout, p.min_first_wait) = (ack_wait, ack_wait);
        let p = Pub::Plain(Box::new(p));
        Self::start_inner(client, None, cfg, None, String::new(), p, None).await
    }

    /// Like [`Load::start`], with msg-ids `{tag}m-{i}`: several loads on one
    /// stream (each its own durable) then do not share msg-ids, which the
    /// stream's duplicate window would drop.
    pub async fn start_tagged(client: async_nats::Client, cfg: LoadConfig, tag: &str) -> Self {
        let p = Pub::Plain(Box::new(Publisher::new(client.clone(), cfg.retry_horizon)));
        Self::start_inner(client, None, cfg, None, tag.to_string(), p, None).await
    }

    async fn start_inner(
        client: async_nats::Client,
        target: Option<async_nats::Client>,
        cfg: LoadConfig,
        audit_subject: Option<String>,
        tag: String,
        p: Pub,
        guard: Option<Guard>,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        shared.publishing.store(true, Ordering::SeqCst);
        let (stop_pub_tx, stop_pub_rx) = watch::channel(false);
        let t0 = Instant::now();
        let mut stop_workers = vec![];
        let workers = (0..cfg.workers)
            .map(|i| {
                let audit = audit_subject.clone().map(|subject| (subject, audit_worker(&cfg, i)));
                let (tx, rx) = watch::channel(false);
                stop_workers.push(tx);
                let version = env!("CARGO_PKG_VERSION").to_string();
                let w = Who { i, id: format!("load-{i}"), version, guard: guard.clone() };
                spawn_worker(
                    w,
                    (client.clone(), target.clone()),
                    cfg.clone(),
                    shared.clone(),
                    rx,
                    audit,
                )
            })
            .collect();
        let publisher = {
            let (shared, cfg) = (shared.clone(), cfg.clone());
            tokio::spawn(async move { publish_loop(p, cfg, shared, stop_pub_rx, tag).await })
        };
        let sampler = spawn_sampler(shared.clone(), t0);
        Self {
            shared,
            stop_publishing: stop_pub_tx,
            stop_workers,
            client,
            cfg,
            publisher,
            workers,
            sampler,
            t0,
        }
    }

    pub fn published(&self) -> u64 {
        self.shared.published_count.load(Ordering::Relaxed)
    }

    pub fn processed(&self) -> u64 {
        self.shared.processed_count.load(Ordering::Relaxed)
    }

    pub fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Holds the publisher (an operator pausing the applications' publishes):
    /// messages that fall due meanwhile are published on release, and their
    /// stall counts from when they fell due.
    pub fn hold_publishers(&self) {
        self.shared.hold.store(true, Ordering::SeqCst);
    }

    pub fn release_publishers(&self) {
        self.shared.hold.store(false, Ordering::SeqCst);
    }

    /// A move across systems whose publishers are repointed: from the next
    /// message on the publisher publishes on `client` (a connection to the
    /// target side), with the same msg-id sequence; the first connection
    /// gets nothing new (publishes in flight there finish, retrying as
    /// before).
    pub fn repoint_publisher(&self, client: async_nats::Client) {
        let p = Pub::Plain(Box::new(Publisher::new(client, self.cfg.retry_horizon)));
        *self.shared.repoint.lock().unwrap() = Some(p);
    }

    /// Mode rolling: replaces worker `i` by a protocol instance of `version`
    /// (`load-<i>-<version>`): the new one is registered first, then the old
    /// one stops (it finishes the message in hand and deregisters).
    pub async fn replace_worker(&mut self, i: usize, version: &str) {
        let (tx, rx) = watch::channel(false);
        let id = format!("load-{i}-{}", version.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
        let w = Who { i, id, version: version.into(), guard: None };
        let cfg = self.cfg.clone();
        let new = spawn_worker(w, (self.client.clone(), None), cfg, self.shared.clone(), rx, None);
        let _ = self.stop_workers[i].send(true);
        self.stop_workers[i] = tx;
        let mut old = std::mem::replace(&mut self.workers[i], new);
        // It ends once it deregistered (given up on after 5 s).
        if tokio::time::timeout(Duration::from_secs(5), &mut old).await.is_err() {
            old.abort();
        }
    }

    /// Stops publishing and waits for the publisher (and its retries) to finish.
    pub async fn finish_publishing(&mut self) {
        let _ = self.stop_publishing.send(true);
        (&mut self.publisher).await.ok();
        self.shared.publishing.store(false, Ordering::SeqCst);
    }

    /// Waits until every published id was processed, or the deadline passes.
    pub async fn drain(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let done = {
                let published = self.shared.published.lock().unwrap();
                let processed = self.shared.processed.lock().unwrap();
                published.iter().all(|id| processed.contains_key(id))
            };
            if done {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn stop(mut self) -> LoadReport {
        if !self.publisher.is_finished() {
            self.finish_publishing().await;
        }
        for s in &self.stop_workers {
            let _ = s.send(true);
        }
        for w in self.workers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
        }
        self.sampler.abort();
        let s = &self.shared;
        let published = s.published.lock().unwrap().clone();
        let processed = s.processed.lock().unwrap().clone();
        let pubset: std::collections::HashSet<u64> = published.iter().copied().collect();
        let mut lost: Vec<u64> =
            published.iter().copied().filter(|id| !processed.contains_key(id)).collect();
        lost.sort();
        let mut duplicated: Vec<(u64, u32)> =
            processed.iter().filter(|(_, n)| **n > 1).map(|(k, v)| (*k, *v)).collect();
        duplicated.sort();
        let mut extra: Vec<u64> =
            processed.keys().copied().filter(|id| !pubset.contains(id)).collect();
        extra.sort();
        let mut redelivered: Vec<u64> = s.redelivered.lock().unwrap().iter().copied().collect();
        redelivered.sort();
        let mut duplicated_across_streams: Vec<u64> =
            s.across.lock().unwrap().iter().copied().collect();
        duplicated_across_streams.sort();
        let first = s.first_index.lock().unwrap();
        let duplicated_first_processed =
            duplicated.iter().map(|(id, _)| (*id, first.get(id).copied().unwrap_or(0))).collect();
        LoadReport {
            redelivered,
            duplicated_across_streams,
            duplicated_first_processed,
            duplicate_details: s.duplicate_details.lock().unwrap().clone(),
            published: published.len() as u64,
            processed_unique: processed.len() as u64,
            processed_total: processed.values().map(|n| *n as u64).sum(),
            lost,
            pending_on_b: 0,
            duplicated,
            extra,
            publish_failures: s.publish_failures.load(Ordering::Relaxed),
            publish_retries: s.retried.load(Ordering::Relaxed),
            max_publish_stall_ms: s.max_stall_us.load(Ordering::Relaxed) as f64 / 1000.0,
            max_retried_publish_ms: s.max_retried_us.load(Ordering::Relaxed) as f64 / 1000.0,
            max_consumer_gap_ms: s.max_gap_us.load(Ordering::Relaxed) as f64 / 1000.0,
            samples: s.samples.lock().unwrap().clone(),
            processed_at_ms: s.processed_at.lock().unwrap().clone(),
        }
    }
}

/// The audit subject and who worker `i` is in its records.
type Audit = Option<(String, cutover_app::audit::Worker)>;

/// Worker `i` as its audit records name it.
fn audit_worker(cfg: &LoadConfig, i: usize) -> cutover_app::audit::Worker {
    cutover_app::audit::Worker {
        consumer: cfg.consumer.clone(),
        instance: format!("load-{i}"),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// Who a worker is: its index, its instance id and application version
/// (protocol workers register with them), and the guard it claims ids in.
struct Who {
    i: usize,
    id: String,
    version: String,
    guard: Option<Guard>,
}

/// A worker: consumes the durable wherever its route points until stopped,
/// each message handled by [`process`].
fn spawn_worker(
    Who { i, id, version, guard }: Who,
    (client, target): (async_nats::Client, Option<async_nats::Client>),
    cfg: LoadConfig,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    audit: Audit,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let audit_client = client.clone();
        let handler = |m| {
            let (shared, audit, guard) = (shared.clone(), audit.clone(), guard.clone());
            let c = audit_client.clone();
            async move {
                match guard {
                    Some(g) => guarded(m, g, shared, cfg.processing, audit, c).await,
                    None => process(m, shared, cfg.processing, audit, c).await,
                }
            }
        };
        if cfg.push {
            push_worker(i, client, &cfg, stop, handler).await;
        } else if cfg.protocol {
            let instance = InstanceOptions::new(&id, &version);
            let opts = FenceOptions { batch: cfg.batch, ..FenceOptions::new(instance) };
            let r = fence::consume(client, &cfg.stream, &cfg.consumer, opts, stop, handler).await;
            if let Err(e) = r {
                tracing::warn!("worker load-{i}: {e}");
            }
        } else {
            let opts = WorkerOptions { batch: cfg.batch, ..Default::default() };
            let (stream, consumer) = (&cfg.stream, &cfg.consumer);
            let _ = consume_across(client, target, stream, consumer, opts, stop, handler).await;
        }
    })
}

/// A push worker: the durable's deliver subject in the queue group, each
/// message handled then acknowledged (double ack) or nak'd.
async fn push_worker<F, Fut>(
    i: usize,
    client: async_nats::Client,
    cfg: &LoadConfig,
    mut stop: watch::Receiver<bool>,
    handler: F,
) where
    F: Fn(jetstream::Message) -> Fut,
    Fut: std::future::Future<Output = (Outcome, jetstream::Message)>,
{
    use futures::StreamExt;
    let context = jetstream::new(client.clone());
    let mut sub = match client.queue_subscribe(push_subject(cfg), PUSH_GROUP.into()).await {
        Ok(s) => s,
        Err(e) => return tracing::warn!("push worker {i}: {e}"),
    };
    loop {
        let message = tokio::select! {
            _ = stop.changed() => return,
            m = sub.next() => match m { Some(m) => m, None => return },
        };
        let (outcome, m) = handler(jetstream::Message { message, context: context.clone() }).await;
        let _ = match outcome {
            Outcome::Ack => m.double_ack().await,
            Outcome::NakAfter(d) => m.ack_with(jetstream::AckKind::Nak(Some(d))).await,
            Outcome::Nak | Outcome::Die => m.ack_with(jetstream::AckKind::Nak(None)).await,
        };
    }
}

/// One message: the processing time, its audit record (if audited), then
/// counted as processed and acked.
async fn process(
    m: jetstream::Message,
    shared: Arc<Shared>,
    processing: Duration,
    audit: Audit,
    audit_client: async_nats::Client,
) -> (Outcome, jetstream::Message) {
    if !processing.is_zero() {
        tokio::time::sleep(processing).await;
    }
    if let Some((subject, worker)) = &audit {
        // Recorded before the ack: an acknowledged message always
        // has its record. A failed record is a failed processing.
        if let Err(e) = cutover_app::audit::record_message(&audit_client, subject, &m, worker).await
        {
            tracing::warn!("{e}");
            return (Outcome::Nak, m);
        }
    }
    shared.count_processed(&m);
    (Outcome::Ack, m)
}

/// [`process`] behind the idempotency guard: only the first claim of an id
/// processes it (then marks it done); a done id is acknowledged unprocessed,
/// a busy one given back for later.
async fn guarded(
    m: jetstream::Message,
    guard: Guard,
    shared: Arc<Shared>,
    processing: Duration,
    audit: Audit,
    audit_client: async_nats::Client,
) -> (Outcome, jetstream::Message) {
    let id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).map(|v| v.to_string());
    let id = id.unwrap_or_default();
    match guard.claim(&id).await {
        Ok(Claim::First) => {
            let (outcome, m) = process(m, shared, processing, audit, audit_client).await;
            let done = match outcome {
                Outcome::Ack => guard.done(&id).await,
                _ => guard.release(&id).await,
            };
            if let Err(e) = done {
                tracing::warn!("idempotency guard: {e}");
            }
            (outcome, m)
        }
        Ok(Claim::Done) => (Outcome::Ack, m),
        Ok(Claim::Busy) | Err(_) => (Outcome::NakAfter(Duration::from_millis(100)), m),
    }
}

/// The workload's publisher: plain (retrying, A's subjects), or following
/// the publisher record (strategy dual-write).
#[derive(Clone)]
enum Pub {
    Plain(Box<Publisher>),
    Dual(Arc<DualPublisher>),
}

impl Pub {
    async fn publish(
        &self,
        subject: &str,
        id: &str,
        payload: Bytes,
    ) -> Result<Published, PublishFailed> {
        match self {
            Pub::Plain(p) => p.publish(subject, id, payload).await,
            Pub::Dual(p) => p.publish(subject, id, payload).await,
        }
    }

    /// Removes a dual publisher's registration (the last clone).
    async fn stop(self) {
        if let Pub::Dual(p) = self {
            if let Ok(p) = Arc::try_unwrap(p) {
                if let Err(e) = p.stop().await {
                    tracing::warn!("publisher registration: {e}");
                }
            }
        }
    }
}

impl Shared {
    /// Counts a processed message: its id (and whether it was a redelivery),
    /// and the gap since the previous one while publishing goes on.
    fn count_processed(&self, m: &jetstream::Message) {
        if let Some(id) = m
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Msg-Id"))
            .and_then(|v| v.as_str().rsplit_once("m-").map(|(_, n)| n))
            .and_then(|s| s.parse::<u64>().ok())
        {
            *self.processed.lock().unwrap().entry(id).or_default() += 1;
            let index = self.processed_count.load(Ordering::Relaxed);
            self.first_index.lock().unwrap().entry(id).or_insert(index);
            // A JetStream redelivery (an ack lost, say, while a
            // consumer leader changed): at-least-once, not the move.
            if m.info().is_ok_and(|i| i.delivered > 1) {
                self.redelivered.lock().unwrap().insert(id);
            }
            if let Ok(i) = m.info() {
                let this = Delivery {
                    stream: i.stream.to_string(),
                    consumer: i.consumer.to_string(),
                    stream_seq: i.stream_sequence,
                    delivered: i.delivered as u64,
                    at_ms: cutover_nats::journal::now_ms(),
                };
                let mut first = self.first_stream.lock().unwrap();
                match first.get(&id) {
                    None => {
                        first.insert(id, this);
                    }
                    Some(f) => {
                        if f.stream != this.stream {
                            self.across.lock().unwrap().insert(id);
                        }
                        let line = format!(
                            "id {id}: first {f}, again {this} ({} ms later)",
                            this.at_ms.saturating_sub(f.at_ms)
                        );
                        self.duplicate_details.lock().unwrap().push(line);
                    }
                }
            }
        }
        self.processed_count.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut last = self.last_processed.lock().unwrap();
        if let Some(l) = *last {
            if self.publishing.load(Ordering::Relaxed) {
                self.max_gap_us
                    .fetch_max(now.duration_since(l).as_micros() as u64, Ordering::Relaxed);
            }
        }
        *last = Some(now);
        // Fractions of a millisecond kept: the steady gap between two
        // processed messages is well under one at 5,000 msg/s.
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0);
        self.processed_at.lock().unwrap().push(wall);
    }
}

/// One processing of a message: where it came from, and when.
struct Delivery {
    stream: String,
    consumer: String,
    stream_seq: u64,
    delivered: u64,
    at_ms: u64,
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self { stream, consumer, stream_seq, delivered, at_ms } = self;
        write!(f, "from {stream}/{consumer} seq {stream_seq} delivery {delivered} at {at_ms}")
    }
}

/// Samples the published and processed counts every 100 ms, for the timeline.
fn spawn_sampler(shared: Arc<Shared>, t0: Instant) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let s = Sample {
                t_ms: t0.elapsed().as_millis() as u64,
                published: shared.published_count.load(Ordering::Relaxed),
                processed: shared.processed_count.load(Ordering::Relaxed),
            };
            shared.samples.lock().unwrap().push(s);
        }
    })
}

async fn publish_loop(
    mut p: Pub,
    cfg: LoadConfig,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    tag: String,
) {
    // Publishes concurrently (bounded in flight) so the rate does not depend on
    // the round trip; each publish retries on its own.
    let inflight = Arc::new(Semaphore::new(256));
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut next = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    // While held: since when (the run is longer by the time held), and the
    // ids below `held_below` fell due during a hold (their stall counts from
    // when they fell due).
    let (mut held_since, mut held_total, mut held_below) = (None::<Instant>, Duration::ZERO, 0);
    'outer: loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        if let Some(to) = shared.repoint.lock().unwrap().take() {
            p = to;
        }
        if shared.hold.load(Ordering::SeqCst) {
            held_since.get_or_insert_with(Instant::now);
            continue;
        }
        let due = ((start.elapsed().as_secs_f64() * cfg.rate as f64) as u64).min(cfg.max_messages);
        if let Some(h) = held_since.take() {
            held_total += h.elapsed();
            held_below = due;
        }
        while next < due {
            if start.elapsed() > cfg.duration + held_total || *stop.borrow() {
                break 'outer;
            }
            let permit = inflight.clone().acquire_owned().await.unwrap();
            let due_at = (next < held_below)
                .then(|| start + Duration::from_secs_f64(next as f64 / cfg.rate as f64));
            let (p, shared, id, msg_id) =
                (p.clone(), shared.clone(), next, format!("{tag}m-{next}"));
            let subject = format!("{}.{}", cfg.subject_prefix, id % 4);
            tasks.spawn(async move {
                let r = p.publish(&subject, &msg_id, Bytes::from(id.to_string())).await;
                drop(permit);
                shared.count_published(id, r, due_at);
            });
            next += 1;
        }
        while tasks.try_join_next().is_some() {}
        if next >= cfg.max_messages || start.elapsed() > cfg.duration + held_total {
            break;
        }
    }
    while tasks.join_next().await.is_some() {}
    p.stop().await;
}

impl Shared {
    /// Records a publish's result: its stall (from `due_at` when a hold
    /// delayed it, else from its first attempt) and retries.
    fn count_published(
        &self,
        id: u64,
        r: Result<Published, PublishFailed>,
        due_at: Option<Instant>,
    ) {
        match r {
            Ok(ok) => {
                self.published.lock().unwrap().push(id);
                self.published_count.fetch_add(1, Ordering::Relaxed);
                let stall = due_at.map_or(ok.latency, |d| d.elapsed().max(ok.latency));
                self.max_stall_us.fetch_max(stall.as_micros() as u64, Ordering::Relaxed);
                if ok.attempts > 1 {
                    self.retried.fetch_add(1, Ordering::Relaxed);
                    self.max_retried_us.fetch_max(ok.latency.as_micros() as u64, Ordering::Relaxed);
                }
            }
            Err(e) => {
                tracing::warn!("{e}");
                self.publish_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
