//! A publisher that survives the subject move.

use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::HeaderMap;
use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

#[derive(Debug, Error)]
#[error(
    "publish of {msg_id} to {subject} failed after {attempts} attempt(s) over {elapsed:?}: {last}"
)]
pub struct PublishFailed {
    pub subject: String,
    pub msg_id: String,
    pub attempts: u32,
    pub elapsed: Duration,
    pub last: String,
}

#[derive(Debug, Clone)]
pub struct Published {
    pub stream: String,
    pub seq: u64,
    pub duplicate: bool,
    pub attempts: u32,
    /// Time from the first attempt to the ack: the stall this publish saw.
    pub latency: Duration,
}

#[derive(Clone)]
pub struct Publisher {
    ctx: jetstream::Context,
    /// How long a publish is retried; the new stream's duplicate window covers it.
    pub horizon: Duration,
    /// The longest wait for one attempt's ack.
    pub ack_timeout: Duration,
    /// The shortest wait for a first attempt's ack (see [`Publisher::first_wait`]).
    pub min_first_wait: Duration,
    /// Typical ack latency of a first attempt, in µs (moving average, shared
    /// by the clones).
    typical_us: Arc<AtomicU64>,
}

/// Errors worth retrying with the same msg-id: nobody took the subject (the
/// move is under way), or no ack came back (the message may or may not be
/// stored; the duplicate window decides).
fn retryable(k: PublishErrorKind) -> bool {
    matches!(
        k,
        PublishErrorKind::StreamNotFound
            | PublishErrorKind::TimedOut
            | PublishErrorKind::BrokenPipe
            | PublishErrorKind::Other
    )
}

impl Publisher {
    pub fn new(client: async_nats::Client, horizon: Duration) -> Self {
        // Short ack waits (see first_wait): in a cluster, a publish sent while
        // the subjects move between streams can be forwarded by stale interest
        // to a stream that no longer takes it and is dropped without "no
        // responders"; only the wait's end notices. Retrying is safe (same
        // msg-id, deduplicated).
        Self {
            ctx: jetstream::new(client),
            horizon,
            ack_timeout: Duration::from_millis(500),
            min_first_wait: Duration::from_millis(20),
            typical_us: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How long attempt `n` (from 1) waits for its ack: eight times the
    /// typical ack latency (at least `min_first_wait`) for the first, twice as
    /// long for each next one, at most `ack_timeout`. On a cluster a publish
    /// sent while the subjects move can be forwarded by interest not yet
    /// withdrawn to a server whose stream no longer takes it, and is dropped
    /// without an answer: a flat 500 ms wait stalled such a publish ~500 ms
    /// (4 runs of 6), where a loopback ack takes a millisecond or two. A
    /// retry that was not needed is deduplicated by its msg-id.
    pub fn first_wait(&self, n: u32) -> Duration {
        let typical = Duration::from_micros(self.typical_us.load(Ordering::Relaxed));
        let first = (typical * 8).max(self.min_first_wait);
        (first * 2u32.saturating_pow(n.saturating_sub(1))).min(self.ack_timeout)
    }

    /// Folds a first attempt's ack latency into the typical one (1/8 weight).
    fn observe(&self, latency: Duration) {
        let l = latency.as_micros().min(u64::MAX as u128) as u64;
        let t = self.typical_us.load(Ordering::Relaxed);
        let next = if t == 0 { l } else { t - t / 8 + l / 8 };
        self.typical_us.store(next, Ordering::Relaxed);
    }

    pub async fn publish(
        &self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
    ) -> Result<Published, PublishFailed> {
        let start = Instant::now();
        let mut attempts = 0u32;
        // The subject move lasts a few milliseconds: retry soon and often, so a
        // publish does not oversleep the window by more than a few ms.
        let mut backoff = Duration::from_micros(250);
        loop {
            attempts += 1;
            let mut h = HeaderMap::new();
            h.insert("Nats-Msg-Id", msg_id);
            let r = match self
                .ctx
                .publish_with_headers(subject.to_string(), h, payload.clone())
                .await
            {
                Ok(fut) => match tokio::time::timeout(self.first_wait(attempts), fut).await {
                    Ok(r) => r.map_err(|e| (e.kind(), e.to_string())),
                    Err(_) => Err((PublishErrorKind::TimedOut, "no ack".into())),
                },
                Err(e) => Err((e.kind(), e.to_string())),
            };
            match r {
                Ok(ack) => {
                    if attempts == 1 {
                        self.observe(start.elapsed());
                    }
                    return Ok(Published {
                        stream: ack.stream,
                        seq: ack.sequence,
                        duplicate: ack.duplicate,
                        attempts,
                        latency: start.elapsed(),
                    });
                }
                Err((kind, msg)) if retryable(kind) && start.elapsed() < self.horizon => {
                    tracing::debug!(%msg_id, %msg, "publish retry");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(4));
                }
                Err((_, msg)) => {
                    return Err(PublishFailed {
                        subject: subject.into(),
                        msg_id: msg_id.into(),
                        attempts,
                        elapsed: start.elapsed(),
                        last: msg,
                    })
                }
            }
        }
    }
}
