//! Follows the route record (`route.<stream>.<consumer>` in the CUTOVER bucket):
//! [`Follower`] the binding it names, [`RouteWatch`] the whole record.

use async_nats::jetstream::kv::{self, Operation};
use cutover_core::journal::{route_key, Route};
use cutover_nats::journal::{IfMissing, JournalStore};
use futures::StreamExt;
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub stream: String,
    pub consumer: String,
    /// Named by a route record, not the home binding. Across systems under
    /// the same name the route's last hop names the home stream and
    /// consumer again, on the target side: a worker that reaches both
    /// sides tells them apart by this.
    pub routed: bool,
}

impl Binding {
    /// The binding an application starts with (no route record).
    pub fn home(stream: &str, consumer: &str) -> Self {
        Binding { stream: stream.into(), consumer: consumer.into(), routed: false }
    }
}

/// The stream/consumer an application should read from, kept current.
pub struct Follower {
    rx: watch::Receiver<Binding>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Follower {
    /// Starts following `stream`/`consumer`; until a route exists the binding is
    /// the original one. Creates the bucket if the engine has not yet.
    pub async fn start(
        client: async_nats::Client,
        stream: &str,
        consumer: &str,
    ) -> Result<Self, async_nats::Error> {
        let original = Binding::home(stream, consumer);
        let map = move |r: Option<Route>| match r {
            Some(r) => Binding { stream: r.stream, consumer: r.consumer, routed: true },
            None => original.clone(),
        };
        let w = watch_route(client, stream, consumer, map).await?;
        Ok(Self { rx: w.rx, task: w.task })
    }

    pub fn current(&self) -> Binding {
        self.rx.borrow().clone()
    }

    /// A receiver that wakes when the binding changes.
    pub fn subscribe(&self) -> watch::Receiver<Binding> {
        self.rx.clone()
    }
}

/// The whole route record of `stream`/`consumer` (`None`: no record, the
/// home binding), kept current: what a fence-mode instance follows
/// (docs/protocol.md).
pub struct RouteWatch {
    rx: watch::Receiver<Option<Route>>,
    applied: Arc<Applied<Option<Route>>>,
    store: JournalStore,
    key: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RouteWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RouteWatch {
    pub async fn start(
        client: async_nats::Client,
        stream: &str,
        consumer: &str,
    ) -> Result<Self, async_nats::Error> {
        let w = watch_route(client, stream, consumer, |r| r).await?;
        Ok(Self { rx: w.rx, applied: w.applied, store: w.store, key: w.key, task: w.task })
    }

    /// A receiver that wakes when the record changes.
    pub fn subscribe(&self) -> watch::Receiver<Option<Route>> {
        self.rx.clone()
    }

    /// Reads the record again from the bucket's leader and applies it (unless
    /// the watch already applied a later one): what an instance whose lease
    /// lapsed does before it fetches again (R15), since its watch may still
    /// be delivering what was written while it was stopped.
    pub async fn reread(&self) -> Result<Option<Route>, async_nats::Error> {
        let e = self.store.entry(&self.key, "cannot read the route").await?;
        self.applied.apply(Seen::Reread(e), |r| r);
        Ok(self.rx.borrow().clone())
    }
}

/// The value a watch keeps current, and the revision of the entry it was
/// last set from (R8: an entry at or below it is older, whatever its source).
struct Applied<T> {
    tx: watch::Sender<T>,
    revision: std::sync::Mutex<u64>,
}

impl<T: PartialEq> Applied<T> {
    /// Applies what was seen unless it is older than what was applied; a
    /// change that is not a route is skipped.
    fn apply(&self, seen: Seen, map: impl Fn(Option<Route>) -> T) {
        let (revision, r) = match seen {
            Seen::Changed(e) => {
                let r = match e.operation {
                    Operation::Put => serde_json::from_slice::<Route>(&e.value).ok().map(Some),
                    // A rollback deletes the route: back to the original.
                    _ => Some(None),
                };
                (e.revision, r)
            }
            Seen::Reread(e) => {
                let revision = e.as_ref().map_or(0, |e| e.revision);
                let r = match e {
                    // R2: a record that does not parse is ignored, here too.
                    Some(e) if e.operation == Operation::Put => {
                        serde_json::from_slice::<Route>(&e.value).ok().map(Some)
                    }
                    _ => Some(None),
                };
                (revision, r)
            }
        };
        let mut last = self.revision.lock().expect("revision");
        // A re-read that finds no entry at all (the bucket made again, the
        // marker compacted away) is no record now, whatever came before.
        let none_now = revision == 0;
        if !none_now && revision <= *last {
            return;
        }
        *last = revision;
        if let Some(r) = r {
            send_changed(&self.tx, map(r));
        }
    }
}

/// A watched route: the value, what applies changes to it, and the task.
struct Watched<T> {
    rx: watch::Receiver<T>,
    applied: Arc<Applied<T>>,
    store: JournalStore,
    key: String,
    task: tokio::task::JoinHandle<()>,
}

/// Watches `route.<stream>.<consumer>` (creating the bucket if the engine has
/// not yet) and keeps `map(record)` current in a watch channel.
async fn watch_route<T, M>(
    client: async_nats::Client,
    stream: &str,
    consumer: &str,
    map: M,
) -> Result<Watched<T>, async_nats::Error>
where
    T: PartialEq + Send + Sync + 'static,
    M: Fn(Option<Route>) -> T + Clone + Send + Sync + 'static,
{
    let stats = client.statistics();
    let js = cutover_nats::Js::new(client, std::time::Duration::from_secs(5));
    let store =
        cutover_nats::journal::JournalStore::open(&js, IfMissing::Create).await?.expect("bucket");
    let key = route_key(stream, consumer);
    // Watch first, then read: an update between the two is not missed, and
    // the watch's first value, which may be older than the read, is skipped
    // by its revision.
    let watch = store.kv().watch(&key).await?;
    let first = store.entry(&key, "cannot read the route").await?;
    let revision = first.as_ref().map_or(0, |e| e.revision);
    let (tx, rx) = watch::channel(map(route_of(first)));
    let applied = Arc::new(Applied { tx, revision: std::sync::Mutex::new(revision) });
    let task = tokio::spawn(follow(store.clone(), key.clone(), map, applied.clone(), watch, stats));
    Ok(Watched { rx, applied, store, key, task })
}

/// The route an entry read holds (`None`: none, or not a route).
fn route_of(e: Option<kv::Entry>) -> Option<Route> {
    match e {
        Some(e) if e.operation == Operation::Put => serde_json::from_slice::<Route>(&e.value).ok(),
        _ => None,
    }
}

fn send_changed<T: PartialEq>(tx: &watch::Sender<T>, v: T) {
    tx.send_if_modified(|cur| {
        if *cur != v {
            *cur = v;
            true
        } else {
            false
        }
    });
}

/// Applies route updates, in revision order (R8), for as long as the
/// follower lives (see [`follow_key`]); dropping the sender would tell the
/// workers the route is gone.
async fn follow<T: PartialEq, M: Fn(Option<Route>) -> T>(
    store: JournalStore,
    key: String,
    map: M,
    applied: Arc<Applied<T>>,
    w: kv::Watch,
    stats: Arc<async_nats::Statistics>,
) {
    let apply = |seen: Seen| {
        applied.apply(seen, &map);
        std::future::ready(())
    };
    follow_key(&store, &key, w, stats, || !applied.tx.is_closed(), apply).await
}

/// What [`follow_key`] saw of its key.
pub(crate) enum Seen {
    /// A change the watch delivered.
    Changed(kv::Entry),
    /// The key as read again from the bucket's leader once the watch was set
    /// up again (it may have missed changes meanwhile).
    Reread(Option<kv::Entry>),
}

/// Calls `apply` with every change of `key` in the bucket for as long as
/// `live()` holds (the caller also aborts it). A watch ends when the server
/// restarts or the connection drops: it is set up again and the key read
/// again, never abandoned: a follower that stopped would keep its
/// application on an old route, or a publisher writing as an old record
/// said.
///
/// A reconnection ends the watch too: after a server restart the watch's
/// consumer is gone, and async-nats notices only when its heartbeats stop
/// (seconds), while a change written meanwhile (a cut-over riding through the
/// restart) would go unseen.
pub(crate) async fn follow_key<L, F, Fut>(
    store: &JournalStore,
    key: &str,
    mut w: kv::Watch,
    stats: Arc<async_nats::Statistics>,
    live: L,
    mut apply: F,
) where
    L: Fn() -> bool,
    F: FnMut(Seen) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use std::sync::atomic::Ordering::Relaxed;
    loop {
        let connects = stats.connects.load(Relaxed);
        loop {
            let e = tokio::select! {
                e = w.next() => e,
                _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {
                    if stats.connects.load(Relaxed) == connects { continue }
                    break;
                }
            };
            let Some(Ok(e)) = e else { break };
            apply(Seen::Changed(e)).await;
        }
        loop {
            if !live() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let Ok(nw) = store.kv().watch(key).await else { continue };
            let Ok(e) = store.entry(key, "cannot read the followed key").await else { continue };
            apply(Seen::Reread(e)).await;
            w = nw;
            break;
        }
    }
}
