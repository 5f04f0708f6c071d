//! An instance's registration in KV bucket CUTOVER (docs/protocol.md,
//! *Registration*): written at start, on every heartbeat and at once when its
//! binding or fence acknowledgement changes; deleted when it stops cleanly.
//! `nats-cutover status` lists the registrations: which instance runs which
//! version on which stream.
//!
//! The registration is also the instance's lease (docs/protocol.md R15): the
//! runner counts an instance dead once its record is `ttl` old, and goes on
//! without it. An instance that was stopped or cut off that long (SIGSTOP, a
//! VM paused, the bucket out of reach) finds it at its next write, and its
//! [`Registration::epoch`] changes: what it fetched before must then be
//! dropped, neither processed nor acknowledged nor nak'd.

use cutover_core::journal::{valid_instance_id, FenceAck, InstanceRecord, INSTANCE_VERSION};
use cutover_nats::journal::{now_ms, IfMissing, JournalStore};
use std::sync::Arc;
use std::time::{Duration, Instant};
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
    lease: Arc<std::sync::Mutex<Lease>>,
    task: tokio::task::JoinHandle<()>,
}

/// When the last write of the record that the server took began, and how
/// many times the record had been older than its ttl by the next one.
#[derive(Debug, Clone, Copy)]
struct Lease {
    written: Instant,
    /// The same moment on the wall clock: the monotonic one leaves out a
    /// host's suspend and may stand still while a VM is paused, the wall
    /// clock does not (a wall clock set forward only lapses a lease early:
    /// messages dropped and delivered again, never acted on twice).
    written_wall: std::time::SystemTime,
    ttl: Duration,
    epoch: u64,
}

impl Lease {
    fn new(start: Instant, ttl: Duration) -> Self {
        Lease { written: start, written_wall: std::time::SystemTime::now(), ttl, epoch: 0 }
    }

    /// How long ago the last taken write began, by either clock.
    fn age(&self) -> Duration {
        let wall = self.written_wall.elapsed().unwrap_or_default();
        self.written.elapsed().max(wall)
    }

    /// A write that began at `start` was taken now. Lapsed when the record
    /// may have been `ttl` old before it landed: the server stamped the
    /// previous write no earlier than it began, and this one no later than
    /// now, so the runner (which reads that stamp) may have counted the
    /// instance dead in between.
    fn taken(&mut self, start: Instant, start_wall: std::time::SystemTime) {
        if self.age() >= self.ttl {
            self.epoch += 1;
        }
        if start > self.written {
            (self.written, self.written_wall) = (start, start_wall);
        }
    }
}

/// Writes `r` (stamped now) and records it in the lease once the server took it.
async fn write(
    store: &JournalStore,
    r: &mut InstanceRecord,
    lease: &std::sync::Mutex<Lease>,
) -> Result<(), async_nats::Error> {
    let (start, start_wall) = (Instant::now(), std::time::SystemTime::now());
    r.heartbeat_ms = now_ms();
    store.put_instance(r).await?;
    lease.lock().expect("lease").taken(start, start_wall);
    Ok(())
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
        let start = Instant::now();
        store.put_instance(&record).await?;
        let lease = Lease::new(start, opts.ttl);
        let lease = Arc::new(std::sync::Mutex::new(lease));
        let record = Arc::new(Mutex::new(record));
        let task =
            tokio::spawn(heartbeat(store.clone(), record.clone(), lease.clone(), opts.heartbeat));
        Ok(Self { store, record, lease, task })
    }

    /// The lease's epoch, confirmed: when the record's last write began half
    /// its ttl ago or more, it is written first (again until the server takes
    /// it), so the runner counts this instance live for a while yet. A
    /// message fetched under an older epoch MUST be dropped (R15): the
    /// runner may have gone on without this instance meanwhile and had it
    /// delivered to another.
    pub async fn epoch(&self) -> u64 {
        loop {
            let l = *self.lease.lock().expect("lease");
            if l.age() < l.ttl / 2 {
                return l.epoch;
            }
            let mut r = self.record.lock().await;
            if let Err(e) = write(&self.store, &mut r, &self.lease).await {
                tracing::warn!("registration of instance {}: {e}", r.instance);
                drop(r);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
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
        write(&self.store, &mut r, &self.lease).await
    }

    /// Stops heartbeating and removes the record.
    pub async fn stop(self) -> Result<(), async_nats::Error> {
        self.task.abort();
        let r = self.record.lock().await.clone();
        self.store.delete_instance(&r.stream, &r.consumer, &r.instance).await?;
        Ok(())
    }
}

async fn heartbeat(
    store: JournalStore,
    record: Arc<Mutex<InstanceRecord>>,
    lease: Arc<std::sync::Mutex<Lease>>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let mut r = record.lock().await;
        if let Err(e) = write(&store, &mut r, &lease).await {
            tracing::warn!("heartbeat of instance {}: {e}", r.instance);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_older_than_its_ttl_before_the_next_write_lapses_the_lease() {
        use std::time::SystemTime;
        let ttl = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut l = Lease::new(t0, ttl);
        l.taken(t0, SystemTime::now());
        assert_eq!(l.epoch, 0, "in time");
        // The previous write began more than ttl ago: the runner may have
        // counted the instance dead.
        l.written = t0.checked_sub(ttl).unwrap();
        let start = Instant::now();
        l.taken(start, SystemTime::now());
        assert_eq!(l.epoch, 1, "lapsed");
        assert_eq!(l.written, start);
        l.taken(Instant::now(), SystemTime::now());
        assert_eq!(l.epoch, 1, "live again");
        // A monotonic clock that stood still (a paused VM): the wall clock
        // says the record is ttl old.
        l.written_wall = SystemTime::now() - ttl;
        l.taken(Instant::now(), SystemTime::now());
        assert_eq!(l.epoch, 2, "lapsed by the wall clock");
    }
}
