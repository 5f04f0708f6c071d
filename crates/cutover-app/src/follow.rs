//! Follows the route record (`route.<stream>.<consumer>` in the CUTOVER bucket).

use async_nats::jetstream::kv::{self, Operation};
use cutover_core::journal::{route_key, Route};
use cutover_nats::journal::IfMissing;
use futures::StreamExt;
use tokio::sync::watch;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub stream: String,
    pub consumer: String,
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
        let stats = client.statistics();
        let js = cutover_nats::Js::new(client, std::time::Duration::from_secs(5));
        let store = cutover_nats::journal::JournalStore::open(&js, IfMissing::Create)
            .await?
            .expect("bucket");
        let kv: kv::Store = store.kv().clone();
        let key = route_key(stream, consumer);
        let original = Binding { stream: stream.into(), consumer: consumer.into() };
        // Watch first, then read: an update between the two is not missed.
        let watch = kv.watch(&key).await?;
        let first = read_binding(&kv, &key).await?.unwrap_or_else(|| original.clone());
        let (tx, rx) = watch::channel(first);
        let task = tokio::spawn(follow(kv, key, original, tx, watch, stats));
        Ok(Self { rx, task })
    }

    pub fn current(&self) -> Binding {
        self.rx.borrow().clone()
    }

    /// A receiver that wakes when the binding changes.
    pub fn subscribe(&self) -> watch::Receiver<Binding> {
        self.rx.clone()
    }
}

async fn read_binding(kv: &kv::Store, key: &str) -> Result<Option<Binding>, async_nats::Error> {
    Ok(match kv.entry(key).await? {
        Some(e) if e.operation == Operation::Put => serde_json::from_slice::<Route>(&e.value)
            .ok()
            .map(|r| Binding { stream: r.stream, consumer: r.consumer }),
        _ => None,
    })
}

/// Applies route updates for as long as the follower lives. A watch ends when
/// the server restarts or the connection drops: it is set up again (and the
/// current value re-read, since updates may have been missed meanwhile), never
/// abandoned; dropping `tx` would tell the workers the route is gone.
///
/// A reconnection ends the watch too: after a server restart the watch's
/// consumer is gone, and async-nats notices only when its heartbeats stop
/// (seconds), while a route written meanwhile (a cut-over riding through the
/// restart) would leave the workers on a paused consumer.
async fn follow(
    kv: kv::Store,
    key: String,
    original: Binding,
    tx: watch::Sender<Binding>,
    mut w: kv::Watch,
    stats: std::sync::Arc<async_nats::Statistics>,
) {
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
            let b = match e.operation {
                Operation::Put => match serde_json::from_slice::<Route>(&e.value) {
                    Ok(r) => Binding { stream: r.stream, consumer: r.consumer },
                    Err(_) => continue,
                },
                // A rollback deletes the route: back to the original.
                _ => original.clone(),
            };
            tx.send_if_modified(|cur| {
                if *cur != b {
                    *cur = b;
                    true
                } else {
                    false
                }
            });
        }
        loop {
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let Ok(nw) = kv.watch(&key).await else { continue };
            match read_binding(&kv, &key).await {
                Ok(b) => {
                    let b = b.unwrap_or_else(|| original.clone());
                    tx.send_if_modified(|cur| {
                        if *cur != b {
                            *cur = b;
                            true
                        } else {
                            false
                        }
                    });
                    w = nw;
                    break;
                }
                Err(_) => continue,
            }
        }
    }
}
