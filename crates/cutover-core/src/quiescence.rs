//! The timer bound, for the only cases where no exact signal exists.
//!
//! With a pausable consumer (2.11+) the cut-over never waits on a timer: it waits
//! for `num_ack_pending == 0` on a paused consumer, which is exact. On older servers
//! deliveries can only be stopped by stopping the publishers; then
//! `num_pending == 0 && num_ack_pending == 0` is exact again, and the interval below
//! is only the *deadline* after which the run gives up safely instead of waiting
//! forever on a consumer that never settles.
//!
//! Why not the seed's `ack_wait × (max_pending + 1)`: redelivery timers run per
//! message and in parallel, so `max_ack_pending` bounds how many messages are in
//! flight at once, not how many ack_wait periods pass one after another. What can
//! chain is the redeliveries *of one message*: up to `max_deliver - 1` of them, each
//! after its own backoff step (or ack_wait). The time to settle after the last first
//! delivery is that chain plus the processing time of the backlog still pending.

use crate::model::{nanos, ConsumerConfig};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuiescentBound {
    /// `None` when no bound exists (unlimited MaxDeliver).
    pub interval: Option<Duration>,
    pub derivation: Vec<String>,
}

/// `backlog`: messages still pending when deliveries stop; `processing`: time a
/// worker takes per message; `workers`: concurrent workers.
pub fn bound(
    c: &ConsumerConfig,
    backlog: u64,
    processing: Duration,
    workers: u32,
) -> QuiescentBound {
    let mut d = vec![];
    let ack_wait = nanos(c.ack_wait);
    let concurrency = {
        let mut k = workers.max(1) as u64;
        if c.max_ack_pending > 0 {
            k = k.min(c.max_ack_pending as u64);
        }
        k
    };
    let backlog_time = processing.saturating_mul((backlog.div_ceil(concurrency)) as u32);
    d.push(format!(
        "backlog: {backlog} message(s) over {concurrency} concurrent worker(s) at {processing:?} each = {backlog_time:?}"
    ));
    if c.max_deliver <= 0 {
        d.push("max_deliver is unlimited: a message whose processing keeps failing is redelivered forever, so no interval bounds the drain; set max_deliver or use a pausable server (2.11+)".into());
        return QuiescentBound { interval: None, derivation: d };
    }
    let redeliveries = (c.max_deliver - 1) as usize;
    let mut chain = Duration::ZERO;
    for i in 0..redeliveries {
        let step = if c.backoff.is_empty() {
            ack_wait
        } else {
            nanos(*c.backoff.get(i).unwrap_or_else(|| c.backoff.last().unwrap()))
        };
        chain += step;
    }
    // The last delivery still needs its own ack_wait to expire before the message
    // leaves pending as exhausted.
    let last_wait = if c.backoff.is_empty() { ack_wait } else { nanos(*c.backoff.last().unwrap()) };
    chain += last_wait;
    d.push(format!(
        "redelivery chain of one message: {redeliveries} redelivery step(s) (backoff or ack_wait) + the last ack wait = {chain:?}"
    ));
    let total = backlog_time + chain + processing;
    d.push(format!("bound = backlog + chain + one processing time = {total:?}"));
    d.push(format!(
        "the seed's ack_wait × (max_ack_pending + 1) would say {:?}: it multiplies parallel timers as if they ran one after another, and ignores max_deliver and backoff",
        ack_wait.saturating_mul((c.max_ack_pending.max(0) as u32).saturating_add(1))
    ));
    QuiescentBound { interval: Some(total), derivation: d }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_backoff_steps_of_one_message() {
        let c = ConsumerConfig {
            ack_wait: 30_000_000_000,
            max_deliver: 4,
            backoff: vec![1_000_000_000, 5_000_000_000],
            max_ack_pending: 1000,
            ..Default::default()
        };
        let b = bound(&c, 0, Duration::from_millis(1), 4);
        // 3 redeliveries: 1s + 5s + 5s, then the last wait 5s, plus 1ms.
        assert_eq!(b.interval, Some(Duration::from_millis(16_001)));
    }

    #[test]
    fn unlimited_max_deliver_has_no_bound() {
        let c = ConsumerConfig { max_deliver: -1, ..Default::default() };
        assert_eq!(bound(&c, 10, Duration::from_millis(1), 1).interval, None);
    }

    #[test]
    fn backlog_is_spread_over_workers() {
        let c = ConsumerConfig {
            ack_wait: 5_000_000_000,
            max_deliver: 1,
            max_ack_pending: 2,
            ..Default::default()
        };
        let b = bound(&c, 10, Duration::from_millis(10), 8);
        // concurrency min(8, 2) = 2 -> 5 rounds of 10ms; chain = last wait 5s; + 10ms.
        assert_eq!(b.interval, Some(Duration::from_millis(50 + 5_000 + 10)));
    }
}
