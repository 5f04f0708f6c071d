//! An optional guard against processing a message twice: a redelivery (an
//! ack lost, an instance that died after processing), or two versions of an
//! application running side by side. Each message id is claimed in a KV
//! bucket whose entries expire after a TTL (the bucket's max_age): the first
//! claim wins (`create`), the winner marks it done once processed, and a later
//! claim of the same id sees it busy (processing elsewhere, or the claimer
//! died: try again after a while) or done (skip it and acknowledge).
//!
//! ```ignore
//! let guard = Guard::open(client, "orders_seen", Duration::from_secs(600)).await?;
//! match guard.claim(&msg_id).await? {
//!     Claim::First => { process(&m).await; guard.done(&msg_id).await?; m.double_ack().await? }
//!     Claim::Done => m.double_ack().await?,            // processed already: skip
//!     Claim::Busy => m.ack_with(AckKind::Nak(Some(delay))).await?, // elsewhere, for now
//! }
//! ```
//!
//! The guard covers ids within its TTL only; choose it longer than a message
//! can take to be redelivered (ack_wait × max_deliver) and than versions run
//! side by side (the time between the old consumer processing a message and
//! the new durable reaching it). A claim still `busy` after its claim timeout
//! ([`Guard::with_claim_timeout`], 30 s by default) is taken over: its claimer
//! died.

use async_nats::jetstream::{self, kv};
use std::time::Duration;

const BUSY: &[u8] = b"busy";
const DONE: &[u8] = b"done";

/// What a claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Nobody claimed the id within the TTL: process it, then [`Guard::done`].
    First,
    /// Claimed and not done: being processed elsewhere, or its claimer died
    /// (the claim expires after the TTL). Do not process it now.
    Busy,
    /// Processed already: skip it (acknowledge).
    Done,
}

#[derive(Clone)]
pub struct Guard {
    kv: kv::Store,
    /// A claim older than this that is still `busy` is taken over: its
    /// claimer died. Without it every redelivery would find the id busy and
    /// be nak'd until the server gave up on it (naks count toward
    /// max_deliver): lost (a reviewer found this).
    claim_timeout: Duration,
}

/// How long a claim is honoured by default: the server's default ack_wait.
/// Choose it longer than the longest processing of one message, and shorter
/// than ack_wait × (max_deliver − 1) so a redelivery can still take it over.
pub const DEFAULT_CLAIM_TIMEOUT: Duration = Duration::from_secs(30);

/// A KV key for any message id: ids made of key characters stay readable,
/// others are hex-encoded.
pub fn key_of(id: &str) -> String {
    let plain = !id.is_empty()
        && !id.starts_with('.')
        && !id.ends_with('.')
        && !id.contains("..")
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=./".contains(&b));
    if plain {
        format!("id.{id}")
    } else {
        let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
        format!("hex.{hex}")
    }
}

impl Guard {
    /// Opens KV bucket `bucket`, creating it with entries that expire after
    /// `ttl` if it does not exist.
    pub async fn open(
        client: async_nats::Client,
        bucket: &str,
        ttl: Duration,
    ) -> Result<Self, async_nats::Error> {
        let ctx = jetstream::new(client);
        let kv = match ctx.get_key_value(bucket).await {
            Ok(kv) => kv,
            Err(_) => {
                ctx.create_key_value(kv::Config {
                    bucket: bucket.into(),
                    description: "nats-cutover idempotency guard: message ids claimed".into(),
                    history: 1,
                    max_age: ttl,
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await?
            }
        };
        Ok(Self { kv, claim_timeout: DEFAULT_CLAIM_TIMEOUT })
    }

    /// The same guard, honouring a claim for `d` (see [`DEFAULT_CLAIM_TIMEOUT`]).
    pub fn with_claim_timeout(mut self, d: Duration) -> Self {
        self.claim_timeout = d;
        self
    }

    /// Claims message id `id`.
    pub async fn claim(&self, id: &str) -> Result<Claim, async_nats::Error> {
        let key = key_of(id);
        match self.kv.create(&key, BUSY.into()).await {
            Ok(_) => Ok(Claim::First),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                match self.kv.entry(&key).await? {
                    Some(en) if en.operation == kv::Operation::Put && &en.value[..] == DONE => {
                        Ok(Claim::Done)
                    }
                    Some(en) if en.operation == kv::Operation::Put => {
                        // The entry's age by the server's clock.
                        let age = time::OffsetDateTime::now_utc() - en.created;
                        if age < self.claim_timeout {
                            return Ok(Claim::Busy);
                        }
                        // Taken over only if nobody changed it meanwhile
                        // (compare and set on its revision); else look again.
                        match self.kv.update(&key, BUSY.into(), en.revision).await {
                            Ok(_) => Ok(Claim::First),
                            Err(_) => Box::pin(self.claim(id)).await,
                        }
                    }
                    // Released or expired between the two requests: try again.
                    _ => Box::pin(self.claim(id)).await,
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Marks a claimed id processed.
    pub async fn done(&self, id: &str) -> Result<(), async_nats::Error> {
        self.kv.put(key_of(id), DONE.into()).await?;
        Ok(())
    }

    /// Gives a claim up (processing failed: a redelivery may claim it again).
    pub async fn release(&self, id: &str) -> Result<(), async_nats::Error> {
        self.kv.delete(key_of(id)).await?;
        Ok(())
    }
}
