//! Follows the route record (`route.<stream>.<consumer>` in the CUTOVER bucket).

use async_nats::jetstream::kv::{self, Operation};
use cutover_core::journal::{route_key, Route};
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
    pub async fn start(client: async_nats::Client, stream: &str, consumer: &str) -> Result<Self, async_nats::Error> {
        let js = cutover_nats::Js::new(client, std::time::Duration::from_secs(5));
        let store = cutover_nats::journal::JournalStore::open(&js, true).await?.expect("bucket");
        let kv: kv::Store = store.kv().clone();
        let key = route_key(stream, consumer);
        // Watch first, then read: an update between the two is not missed.
        let mut watch = kv.watch(&key).await?;
        let initial = match kv.entry(&key).await? {
            Some(e) if e.operation == Operation::Put => serde_json::from_slice::<Route>(&e.value).ok(),
            _ => None,
        };
        let original = Binding { stream: stream.into(), consumer: consumer.into() };
        let first = initial.map(|r| Binding { stream: r.stream, consumer: r.consumer }).unwrap_or_else(|| original.clone());
        let (tx, rx) = watch::channel(first);
        let task = tokio::spawn(async move {
            while let Some(Ok(e)) = watch.next().await {
                let b = match e.operation {
                    Operation::Put => match serde_json::from_slice::<Route>(&e.value) {
                        Ok(r) => Binding { stream: r.stream, consumer: r.consumer },
                        Err(_) => continue,
                    },
                    // A rollback deletes the route: back to the original.
                    _ => original.clone(),
                };
                if tx.send(b).is_err() {
                    break;
                }
            }
        });
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
