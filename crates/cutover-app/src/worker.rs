//! A pull-consumer worker loop that follows its consumer across a migration.

use crate::follow::{Binding, Follower};
use async_nats::jetstream::{self, consumer::PullConsumer};
use futures::StreamExt;
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;

/// What the handler did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Processed: acknowledge (double ack: the server confirmed it).
    Ack,
    /// Processing failed: ask for redelivery.
    Nak,
    /// The worker "dies" holding the message: no ack, and the loop ends
    /// (tests use it to simulate a crashed instance).
    Die,
}

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub batch: usize,
    /// Pull request expiry: also bounds how long a route change can go unnoticed
    /// if the watch were missed.
    pub expires: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self { batch: 32, expires: Duration::from_millis(500) }
    }
}

async fn bind(ctx: &jetstream::Context, b: &Binding) -> Option<PullConsumer> {
    ctx.get_stream(&b.stream).await.ok()?.get_consumer(&b.consumer).await.ok()
}

/// Consumes `stream`/`consumer` (following its route) until `shutdown` turns
/// true or the handler returns [`Outcome::Die`]. Returns how many messages were
/// acknowledged.
pub async fn consume<F, Fut>(
    client: async_nats::Client,
    stream: &str,
    consumer: &str,
    opts: WorkerOptions,
    mut shutdown: watch::Receiver<bool>,
    mut handler: F,
) -> Result<u64, async_nats::Error>
where
    F: FnMut(jetstream::Message) -> Fut,
    Fut: Future<Output = (Outcome, jetstream::Message)>,
{
    let ctx = jetstream::new(client.clone());
    let follower = Follower::start(client, stream, consumer).await?;
    let mut route = follower.subscribe();
    let mut acked = 0u64;
    let mut route_open = true;
    let mut shutdown_open = true;
    'outer: loop {
        if *shutdown.borrow() {
            break;
        }
        let binding = route.borrow_and_update().clone();
        let Some(pull) = bind(&ctx, &binding).await else {
            // Not there (yet, or any more): wait for a route change or retry soon.
            tokio::select! {
                _ = route.changed(), if route_open => {}
                _ = shutdown.changed(), if shutdown_open => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            continue;
        };
        let mut batch =
            match pull.fetch().max_messages(opts.batch).expires(opts.expires).messages().await {
                Ok(b) => b,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            };
        loop {
            tokio::select! {
                biased;
                m = batch.next() => {
                    let Some(m) = m else { break };
                    let Ok(m) = m else { break };
                    let (outcome, m) = handler(m).await;
                    match outcome {
                        Outcome::Ack => {
                            if m.double_ack().await.is_ok() {
                                acked += 1;
                            }
                        }
                        Outcome::Nak => {
                            let _ = m.ack_with(jetstream::AckKind::Nak(None)).await;
                        }
                        Outcome::Die => break 'outer,
                    }
                }
                // The route moved: nothing is in flight on the old consumer (the
                // engine moves it only once settled), so switch now. A closed
                // channel means no more changes, not a change: keep consuming.
                changed = route.changed(), if route_open => match changed {
                    Ok(()) => break,
                    Err(_) => route_open = false,
                },
                // A dropped sender means nobody can ask to stop any more.
                res = shutdown.changed(), if shutdown_open => match res {
                    Ok(()) => if *shutdown.borrow() { break 'outer },
                    Err(_) => shutdown_open = false,
                },
            }
        }
    }
    Ok(acked)
}
