//! An instance's registration in KV bucket CUTOVER (docs/protocol.md,
//! *Registration*): written at start, on every heartbeat and at once when its
//! binding or fence acknowledgement changes; deleted when it stops cleanly.
//! `nats-cutover status` lists the registrations: which instance runs which
//! version on which stream.

use cutover_core::journal::{valid_instance_id, FenceAck, InstanceRecord, INSTANCE_VERSION};
use cutover_nats::journal::{now_ms, IfMissing, JournalStore};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// Who an instance is and how often it says it lives.
#[derive(Debug, Clone)]
pub struct InstanceOptions {
    /// Unique among the consumer's instances: letters, digits, `_`, `-`.
    pub id: String,
    /// The application's own version.
    pub app_version: String,
    pub heartbeat: Duration,
    /// Dead when not rewritten for this long.
    pub ttl: Duration,
}

impl InstanceOptions {
    /// `id` with the default heartbeat (1 s) and ttl (5 s).
    pub fn new(id: &str, app_version: &str) -> Self {
        Self {
            id: id.into(),
            app_version: app_version.into(),
            heartbeat: Duration::from_secs(1),
            ttl: Duration::from_secs(5),
        }
    }
}

/// A live registration; heartbeats run until it is stopped or dropped (a
/// drop without [`Registration::stop`] leaves the record to expire, as a
/// crashed instance's would).
pub struct Registration {
    store: JournalStore,
    record: Arc<Mutex<InstanceRecord>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Registration {
    /// Registers an instance of `stream`/`consumer` (its home binding).
    pub async fn start(
        client: async_nats::Client,
        stream: &str,
        consumer: &str,
        opts: &InstanceOptions,
    ) -> Result<Self, async_nats::Error> {
        if !valid_instance_id(&opts.id) {
            return Err(format!("instance id {:?} is not one KV key token: use letters, digits, '_' and '-' (e.g. host-pid)", opts.id).into());
        }
        let js = cutover_nats::Js::new(client, Duration::from_secs(5));
        let store = JournalStore::open(&js, IfMissing::Create).await?.expect("bucket");
        let record = InstanceRecord {
            version: INSTANCE_VERSION,
            instance: opts.id.clone(),
            app_version: opts.app_version.clone(),
            lang: "rust".into(),
            stream: stream.into(),
            consumer: consumer.into(),
            bound: vec![],
            fence_ack: None,
            ttl_ms: opts.ttl.as_millis() as u64,
            heartbeat_ms: now_ms(),
        };
        store.put_instance(&record).await?;
        let record = Arc::new(Mutex::new(record));
        let task = tokio::spawn(heartbeat(store.clone(), record.clone(), opts.heartbeat));
        Ok(Self { store, record, task })
    }

    /// The fence this instance acknowledged, if any.
    pub async fn fence_ack(&self) -> Option<FenceAck> {
        self.record.lock().await.fence_ack.clone()
    }

    /// Changes the record and writes it at once.
    pub async fn update(
        &self,
        change: impl FnOnce(&mut InstanceRecord),
    ) -> Result<(), async_nats::Error> {
        // Held across the write: a heartbeat never overwrites it with an
        // older copy.
        let mut r = self.record.lock().await;
        change(&mut r);
        r.heartbeat_ms = now_ms();
        self.store.put_instance(&r).await?;
        Ok(())
    }

    /// Stops heartbeating and removes the record.
    pub async fn stop(self) -> Result<(), async_nats::Error> {
        self.task.abort();
        let r = self.record.lock().await.clone();
        self.store.delete_instance(&r.stream, &r.consumer, &r.instance).await?;
        Ok(())
    }
}

async fn heartbeat(store: JournalStore, record: Arc<Mutex<InstanceRecord>>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let mut r = record.lock().await;
        r.heartbeat_ms = now_ms();
        if let Err(e) = store.put_instance(&r).await {
            tracing::warn!("heartbeat of instance {}: {e}", r.instance);
        }
    }
}
