//! A publisher that survives the subject move.

use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::HeaderMap;
use bytes::Bytes;
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
    pub ack_timeout: Duration,
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
        // A short ack timeout: in a cluster, a publish sent while the subjects
        // move between streams can be forwarded by stale interest to a stream
        // that no longer takes it and is dropped without "no responders"; only
        // the timeout notices. Retrying is safe (same msg-id, deduplicated).
        Self { ctx: jetstream::new(client), horizon, ack_timeout: Duration::from_millis(500) }
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
                Ok(fut) => match tokio::time::timeout(self.ack_timeout, fut).await {
                    Ok(r) => r.map_err(|e| (e.kind(), e.to_string())),
                    Err(_) => Err((PublishErrorKind::TimedOut, "no ack".into())),
                },
                Err(e) => Err((e.kind(), e.to_string())),
            };
            match r {
                Ok(ack) => {
                    return Ok(Published {
                        stream: ack.stream,
                        seq: ack.sequence,
                        duplicate: ack.duplicate,
                        attempts,
                        latency: start.elapsed(),
                    })
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
