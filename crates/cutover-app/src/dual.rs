//! A publisher that follows the publisher record `pub.<FROM>` (docs/protocol.md,
//! *Dual-write*): without a record it writes the old stream A; while the record
//! says `dual` it writes each message to A and to B (the subject mapped to
//! B's, the same `Nats-Msg-Id`), each side retried until acknowledged; once it
//! says `b`, to B only. It registers at `pubi.<FROM>.<INSTANCE>` and
//! acknowledges each change only when every publish started before it has
//! finished: the runner's proof rests on that.
//!
//! Across accounts or systems ([`DualPublisher::start_across`]) it holds a
//! connection to each side: A's publishes go to the source side, B's to the
//! target side, where the record and the registration are too (the runner's
//! journal is there: docs/cross-system.md). No export or import is needed.
//!
//! ```ignore
//! let p = DualPublisher::start(client, "ORDERS", &InstanceOptions::new("api-1", "1.4"), horizon).await?;
//! p.publish("orders.eu", &order_id, payload).await?;
//! // A in one account or system, B in another:
//! let p = DualPublisher::start_across(src, dst, "ORDERS", &opts, horizon).await?;
//! ```

use crate::follow::{follow_key, Seen};
use crate::instance::InstanceOptions;
use crate::publisher::{PublishFailed, Published, Publisher};
use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use cutover_core::dual::{
    publisher_instance_key, publisher_key, PublisherRecord, PublisherRegistration, SubjectMap,
    Writes, WritesAck, PUBLISHER_VERSION,
};
use cutover_core::journal::valid_instance_id;
use cutover_nats::journal::{now_ms, IfMissing, JournalStore};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, RwLock};

/// The record in force and its subject map.
#[derive(Clone)]
struct State {
    record: PublisherRecord,
    map: SubjectMap,
}

pub struct DualPublisher {
    /// Publishes to A (the source side's connection).
    to_a: Publisher,
    /// Publishes to B (the target side's: the same connection on one system).
    to_b: Publisher,
    /// Held for reading by every publish from start to end: a change (held
    /// for writing) waits until the publishes started before it finished.
    state: Arc<RwLock<Option<State>>>,
    store: JournalStore,
    registration: Arc<Mutex<PublisherRegistration>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for DualPublisher {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Applies the record's changes for as long as the publisher lives
/// ([`follow_key`]: a watch that ends is set up again). A publisher that
/// stopped following would go on writing as the old record said and never
/// acknowledge a new one; the runner would wait for it.
async fn follow(
    store: JournalStore,
    key: String,
    state: Arc<RwLock<Option<State>>>,
    registration: Arc<Mutex<PublisherRegistration>>,
    w: kv::Watch,
    stats: Arc<async_nats::Statistics>,
) {
    let next = |seen: Seen| match seen {
        Seen::Changed(e) => parse(Some(e)),
        Seen::Reread(e) => parse(e),
    };
    let (store, state, registration) = (&store, &*state, &*registration);
    let on_seen = |seen| apply(store, state, registration, next(seen));
    follow_key(store, &key, w, stats, || true, on_seen).await
}

/// Takes `next` as what publishes follow (once every publish started before
/// has finished) and acknowledges it in the registration.
async fn apply(
    store: &JournalStore,
    state: &RwLock<Option<State>>,
    registration: &Mutex<PublisherRegistration>,
    next: Option<State>,
) {
    let mut w = state.write().await; // every earlier publish finished
    if ack_of(&w) == ack_of(&next) {
        return;
    }
    *w = next;
    let ack = ack_of(&w);
    drop(w);
    let mut r = registration.lock().await;
    r.ack = ack;
    r.heartbeat_ms = now_ms();
    if let Err(e) = put(store, &r).await {
        tracing::warn!("publisher registration {}: {e}", r.instance);
    }
}

fn parse(entry: Option<kv::Entry>) -> Option<State> {
    let e = entry.filter(|e| e.operation == Operation::Put)?;
    let record: PublisherRecord = serde_json::from_slice(&e.value).ok()?;
    let map = SubjectMap::from_pairs(&record.subjects).ok()?;
    Some(State { record, map })
}

fn ack_of(s: &Option<State>) -> Option<WritesAck> {
    s.as_ref().map(|s| WritesAck { migration: s.record.migration.clone(), writes: s.record.writes })
}

async fn put(store: &JournalStore, r: &PublisherRegistration) -> Result<(), async_nats::Error> {
    let v = serde_json::to_vec(r)?;
    store.kv().put(publisher_instance_key(&r.stream, &r.instance), v.into()).await?;
    Ok(())
}

impl DualPublisher {
    /// Registers a publisher of `from` (the old stream) and follows its
    /// record; `horizon` is how long each side of a publish is retried. A and
    /// B are reached through `client` (one system).
    pub async fn start(
        client: async_nats::Client,
        from: &str,
        opts: &InstanceOptions,
        horizon: Duration,
    ) -> Result<Self, async_nats::Error> {
        Self::start_across(client.clone(), client, from, opts, horizon).await
    }

    /// Like [`DualPublisher::start`] with A on `source`'s system (another
    /// account, JetStream domain or cluster) and B on `target`'s: the
    /// record is read and the registration written on `target`, where the
    /// runner keeps them (KV bucket `CUTOVER`).
    pub async fn start_across(
        source: async_nats::Client,
        target: async_nats::Client,
        from: &str,
        opts: &InstanceOptions,
        horizon: Duration,
    ) -> Result<Self, async_nats::Error> {
        if !valid_instance_id(&opts.id) {
            return Err(format!(
                "publisher id {:?} is not one KV key token: use letters, digits, '_' and '-'",
                opts.id
            )
            .into());
        }
        let js = cutover_nats::Js::new(target.clone(), Duration::from_secs(5));
        let store = JournalStore::open(&js, IfMissing::Create).await?.expect("bucket");
        let key = publisher_key(from);
        // Watch first, then read: a change between the two is not missed.
        let watch = store.kv().watch(&key).await?;
        let first = parse(store.entry(&key, "cannot read the dual-write state").await?);
        let registration = PublisherRegistration {
            version: PUBLISHER_VERSION,
            instance: opts.id.clone(),
            app_version: opts.app_version.clone(),
            lang: "rust".into(),
            stream: from.into(),
            ack: ack_of(&first),
            ttl_ms: opts.ttl.as_millis() as u64,
            heartbeat_ms: now_ms(),
        };
        put(&store, &registration).await?;
        let state = Arc::new(RwLock::new(first));
        let registration = Arc::new(Mutex::new(registration));
        let (st, reg, s) = (state.clone(), registration.clone(), store.clone());
        let follow = tokio::spawn(follow(s, key, st, reg, watch, target.statistics()));
        let (reg, s, every) = (registration.clone(), store.clone(), opts.heartbeat);
        let heartbeat = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let mut r = reg.lock().await;
                r.heartbeat_ms = now_ms();
                if let Err(e) = put(&s, &r).await {
                    tracing::warn!("publisher heartbeat {}: {e}", r.instance);
                }
            }
        });
        Ok(Self {
            to_a: Publisher::new(source, horizon),
            to_b: Publisher::new(target, horizon),
            state,
            store,
            registration,
            tasks: vec![follow, heartbeat],
        })
    }

    /// Where publishes go now (`a` without a record).
    pub async fn writes(&self) -> Writes {
        self.state.read().await.as_ref().map(|s| s.record.writes).unwrap_or(Writes::A)
    }

    /// Publishes `payload` to `subject` (a subject of A) as the record says.
    /// Returns the acknowledgement of the stream publishers end on (B's once
    /// dual-writing, which the migration moves them to).
    pub async fn publish(
        &self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
    ) -> Result<Published, PublishFailed> {
        let state = self.state.read().await; // held until the publish ends
        let Some(s) = state.as_ref().filter(|s| s.record.writes != Writes::A) else {
            return self.to_a.publish(subject, msg_id, payload).await;
        };
        let Some(b_subject) = s.map.map(subject) else {
            return Err(PublishFailed {
                subject: subject.into(),
                msg_id: msg_id.into(),
                attempts: 0,
                elapsed: Duration::ZERO,
                last: format!(
                    "no subject of {} maps {subject} to {} (publisher record)",
                    s.record.from, s.record.to
                ),
            });
        };
        if s.record.writes == Writes::B {
            return self.to_b.publish(&b_subject, msg_id, payload).await;
        }
        let (a, b) = tokio::join!(
            self.to_a.publish(subject, msg_id, payload.clone()),
            self.to_b.publish(&b_subject, msg_id, payload)
        );
        a?;
        b
    }

    /// Stops following and removes the registration.
    pub async fn stop(self) -> Result<(), async_nats::Error> {
        for t in &self.tasks {
            t.abort();
        }
        let r = self.registration.lock().await.clone();
        self.store.kv().delete(publisher_instance_key(&r.stream, &r.instance)).await?;
        Ok(())
    }
}
