//! A pull-consumer worker loop that follows its consumer across a migration.

use crate::follow::{Binding, Follower};
use async_nats::jetstream::{self, consumer::pull, consumer::PullConsumer};
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
    /// Not now: ask for redelivery after this delay (e.g. the idempotency
    /// guard found the message being processed elsewhere).
    NakAfter(Duration),
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
    /// How long the worker waits for the server's answer to a request (binding
    /// to the consumer, a double ack). A request sent while the server goes
    /// away (a restart) is lost, and async-nats does not send it again after
    /// reconnecting: it waits for its timeout, the connection's 10 s default,
    /// during which the worker processed nothing. Binding is retried at once,
    /// and an ack whose answer is lost is no less settled for the wait.
    pub request_timeout: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            batch: 32,
            expires: Duration::from_millis(500),
            request_timeout: Duration::from_secs(1),
        }
    }
}

/// `f`'s output, or `None` if the client reconnected first: a request sent
/// just before the connection dropped (a server restart) is lost, and
/// async-nats does not send it again; its answer would never come.
async fn unless_reconnected<T>(
    stats: &async_nats::Statistics,
    f: impl Future<Output = T>,
) -> Option<T> {
    use std::sync::atomic::Ordering::Relaxed;
    let connects = stats.connects.load(Relaxed);
    tokio::pin!(f);
    loop {
        tokio::select! {
            out = &mut f => return Some(out),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {
                if stats.connects.load(Relaxed) != connects {
                    return None;
                }
            }
        }
    }
}

/// The consumer to fetch from; `None` if it is not there, or if the client
/// reconnected meanwhile (the caller binds again at once).
async fn bind(
    ctx: &jetstream::Context,
    b: &Binding,
    stats: &async_nats::Statistics,
) -> Option<PullConsumer> {
    let get = async { ctx.get_stream(&b.stream).await.ok()?.get_consumer(&b.consumer).await.ok() };
    unless_reconnected(stats, get).await.flatten()
}

/// Consumes `stream`/`consumer` (following its route) until `shutdown` turns
/// true or the handler returns [`Outcome::Die`]. Returns how many messages were
/// acknowledged.
pub async fn consume<F, Fut>(
    client: async_nats::Client,
    stream: &str,
    consumer: &str,
    opts: WorkerOptions,
    shutdown: watch::Receiver<bool>,
    handler: F,
) -> Result<u64, async_nats::Error>
where
    F: FnMut(jetstream::Message) -> Fut,
    Fut: Future<Output = (Outcome, jetstream::Message)>,
{
    consume_across(client, None, stream, consumer, opts, shutdown, handler).await
}

/// [`consume`] for a move across systems (docs/cross-system.md): `home`
/// reaches `stream`, the old stream; `target` (when given) the system the
/// migration moves it to, where the route record and every other stream
/// are.
pub async fn consume_across<F, Fut>(
    home: async_nats::Client,
    target: Option<async_nats::Client>,
    stream: &str,
    consumer: &str,
    opts: WorkerOptions,
    shutdown: watch::Receiver<bool>,
    mut handler: F,
) -> Result<u64, async_nats::Error>
where
    F: FnMut(jetstream::Message) -> Fut,
    Fut: Future<Output = (Outcome, jetstream::Message)>,
{
    let target = target.unwrap_or_else(|| home.clone());
    let context = |c: &async_nats::Client| {
        jetstream::ContextBuilder::new().timeout(opts.request_timeout).build(c.clone())
    };
    let (home_ctx, target_ctx) = (context(&home), context(&target));
    let follower = Follower::start(target.clone(), stream, consumer).await?;
    let mut sig =
        Signals { route: follower.subscribe(), route_open: true, shutdown, shutdown_open: true };
    let mut acked = 0u64;
    while !*sig.shutdown.borrow() {
        let binding = sig.route.borrow_and_update().clone();
        // A route names the target side's stream, whatever its name (across
        // systems under the same name its last hop names the home stream).
        let (ctx, stats) = if !binding.routed {
            (&home_ctx, home.statistics())
        } else {
            (&target_ctx, target.statistics())
        };
        let Some(pull) = bind(ctx, &binding, &stats).await else {
            // Not there (yet, or any more): wait for a route change or retry soon.
            sig.wait(Duration::from_millis(20)).await;
            continue;
        };
        let Ok(mut batch) =
            pull.fetch().max_messages(opts.batch).expires(opts.expires).messages().await
        else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        if let After::Stop = work(&mut batch, &mut sig, &mut handler, &mut acked).await {
            break;
        }
    }
    Ok(acked)
}

/// What the worker loop listens to besides messages: route changes and the
/// request to stop. A closed channel means no more changes, not a change.
struct Signals {
    route: watch::Receiver<Binding>,
    route_open: bool,
    shutdown: watch::Receiver<bool>,
    /// A dropped sender means nobody can ask to stop any more.
    shutdown_open: bool,
}

impl Signals {
    /// Waits for a route change, a request to stop, or `at_most`.
    async fn wait(&mut self, at_most: Duration) {
        tokio::select! {
            _ = self.route.changed(), if self.route_open => {}
            _ = self.shutdown.changed(), if self.shutdown_open => {}
            _ = tokio::time::sleep(at_most) => {}
        }
    }
}

/// How a batch ended.
enum After {
    /// Used up, or the route moved: fetch again (from the route's consumer).
    Fetch,
    /// Asked to stop, or the handler died.
    Stop,
}

/// Handles a batch's messages until it ends, the route moves or the worker is
/// to stop.
async fn work<F, Fut>(
    batch: &mut pull::Batch,
    sig: &mut Signals,
    handler: &mut F,
    acked: &mut u64,
) -> After
where
    F: FnMut(jetstream::Message) -> Fut,
    Fut: Future<Output = (Outcome, jetstream::Message)>,
{
    loop {
        tokio::select! {
            biased;
            m = batch.next() => {
                let Some(Ok(m)) = m else { return After::Fetch };
                let (outcome, m) = handler(m).await;
                if !settle(outcome, m, acked).await {
                    return After::Stop;
                }
            }
            // The route moved: nothing is in flight on the old consumer (the
            // engine moves it only once settled), so switch now.
            changed = sig.route.changed(), if sig.route_open => match changed {
                Ok(()) => return After::Fetch,
                Err(_) => sig.route_open = false,
            },
            res = sig.shutdown.changed(), if sig.shutdown_open => match res {
                Ok(()) => if *sig.shutdown.borrow() { return After::Stop },
                Err(_) => sig.shutdown_open = false,
            },
        }
    }
}

/// How long a double ack is asked again when no answer comes.
const ACK_RETRY_FOR: Duration = Duration::from_secs(5);

/// A double ack, sent again until the server confirms it (at most
/// [`ACK_RETRY_FOR`], backing off from 20 ms to 500 ms): an ack lost with
/// the connection (a server restarted under it, even gracefully) would be a
/// redelivery after ack_wait, the message processed twice (seen in
/// `server_faults` after a SIGTERM). Asking again is harmless: the server
/// answers an ack of a message no longer pending all the same (consumer.go
/// `processAckMsgLocked` falls through to `updateAcks`, which replies). It
/// does not answer an ack above its next sequence (a delivery a killed
/// server forgot, which it delivers again anyway): hence the bound.
///
/// Sent as a request, not with `Message::double_ack`: async-nats 0.51 takes
/// any reply as the confirmation (jetstream/message.rs `double_ack_with`:
/// `Some(_) => Ok(())`), the server's `503` "no responders" included (a
/// consumer leader being elected, or the consumer deleted), so an ack that
/// reached nobody counted as confirmed and was not sent again
/// (docs/protocol.md R3). `Client::request` returns that status as an error.
pub(crate) async fn double_ack(m: &jetstream::Message) -> bool {
    let Some(reply) = m.message.reply.clone() else { return false };
    let client = m.context.client();
    let started = std::time::Instant::now();
    let mut backoff = Duration::from_millis(20);
    loop {
        let ask = client.request(reply.clone(), "+ACK".into());
        if matches!(tokio::time::timeout(Duration::from_secs(2), ask).await, Ok(Ok(_))) {
            return true;
        }
        if started.elapsed() >= ACK_RETRY_FOR {
            return false;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

/// Acknowledges or naks a handled message, counting the confirmed acks; false
/// when the handler died holding it. The ack is waited for (at most the
/// request timeout) even across a reconnection: dropped while the client's
/// queue is full (publishes pile up while disconnected), it would never be
/// sent, and the message would be delivered and processed again; without an
/// answer it is sent again ([`double_ack`]).
async fn settle(outcome: Outcome, m: jetstream::Message, acked: &mut u64) -> bool {
    match outcome {
        Outcome::Ack => {
            if double_ack(&m).await {
                *acked += 1;
            }
        }
        Outcome::Nak => {
            let _ = m.ack_with(jetstream::AckKind::Nak(None)).await;
        }
        Outcome::NakAfter(d) => {
            let _ = m.ack_with(jetstream::AckKind::Nak(Some(d))).await;
        }
        Outcome::Die => return false,
    }
    true
}
