//! When is a consumer settled, what is its exact checkpoint, and where does the
//! new consumer start?
//!
//! # The checkpoint rule
//! nats-server reports `delivered.stream_seq` as `o.sseq - 1` (consumer.go,
//! `(*consumer).info`): the consumer has passed over every stream sequence up to
//! it, delivering the ones its filter selects and skipping the rest. When the
//! consumer is *paused* (no new deliveries, and since 2.11 no redeliveries either)
//! and `num_ack_pending == 0`, every delivered message has been acked or has left
//! pending for good (AckTerm, or MaxDeliver exhausted). So every sequence
//! `<= delivered.stream_seq` is settled or was never selected: that value is the
//! checkpoint `F`, and the new consumer must start at the first message after it.
//!
//! `ack_floor.stream_seq` is *not* the checkpoint: a MaxDeliver-exhausted message
//! leaves pending without an ack, so the floor stays below it while
//! `num_ack_pending` is 0; filtered consumers may also report a floor below
//! `delivered`. Starting from the floor would redeliver messages the old consumer
//! already settled.
//!
//! # Translating F
//! The new stream B sources A, so each of B's messages carries its origin sequence
//! in `Nats-Stream-Source`, strictly increasing with B's sequence. [`TranslateSearch`]
//! finds the first B sequence whose origin is `> F` with direct gets: an
//! interpolation guess (one get when A and B line up one to one) alternating with
//! bisection, so never more than about `2 * log2(N)` gets.

use crate::model::{AckPolicy, ConsumerInfo};
use serde::{Deserialize, Serialize};

/// What can be said about a consumer's position right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assessment {
    /// Every delivered message is acked or terminated.
    pub settled: bool,
    /// The checkpoint `F` if settled.
    pub checkpoint: Option<u64>,
    /// Settled *and* paused: the checkpoint cannot move.
    pub stable: bool,
    /// Messages the ack floor lags behind `delivered` (exhausted, terminated or
    /// filtered out): informative, never used as a position.
    pub floor_gap: u64,
    /// The reasoning, one line a fact, for humans.
    pub reasoning: Vec<String>,
}

pub fn assess(c: &ConsumerInfo) -> Assessment {
    let d = c.delivered.stream_seq;
    let f = c.ack_floor.stream_seq;
    let mut why = vec![];
    let ack_none = c.config.ack_policy == AckPolicy::None;
    if ack_none {
        why.push("ack policy is none: the server does not know which messages were processed, so no position is settled".into());
        return Assessment {
            settled: false,
            checkpoint: None,
            stable: false,
            floor_gap: 0,
            reasoning: why,
        };
    }
    why.push(format!(
        "delivered.stream_seq = {d}: the consumer has passed over every sequence up to {d} (delivered or not selected by its filter)"
    ));
    let settled = c.num_ack_pending == 0;
    if settled {
        why.push("num_ack_pending = 0: every delivered message was acked or left pending for good (AckTerm / MaxDeliver)".into());
    } else {
        why.push(format!(
            "num_ack_pending = {}: {} delivered message(s) are still being processed or waiting for redelivery",
            c.num_ack_pending, c.num_ack_pending
        ));
    }
    let floor_gap = d.saturating_sub(f);
    if settled && floor_gap > 0 {
        why.push(format!(
            "ack_floor.stream_seq = {f} < {d} although nothing is pending: the {floor_gap} sequence(s) between were exhausted (MaxDeliver), terminated, or not selected by the filter; none will be delivered again, so the floor is not the checkpoint"
        ));
    }
    let stable = settled && c.paused;
    if settled {
        if c.paused {
            why.push(format!("paused: no delivery can move the position, so F = {d} is exact"));
        } else {
            why.push(
                "not paused: this is a snapshot; a new delivery may move it at any moment".into(),
            );
        }
    }
    Assessment { settled, checkpoint: settled.then_some(d), stable, floor_gap, reasoning: why }
}

/// One probe result: the first existing message of B at or after the probed
/// sequence, with its origin sequence in A; `None` when B has no message there.
pub type Probe = Option<(u64, u64)>;

/// Finds the first sequence of B whose origin sequence is greater than `F`.
///
/// Drive it with [`TranslateSearch::next_probe`] / [`TranslateSearch::observe`]
/// until [`TranslateSearch::result`] is `Some`. Pure: the adapter does the gets.
#[derive(Debug, Clone)]
pub struct TranslateSearch {
    f: u64,
    /// Every existing B message below `lo` has origin `<= F`.
    lo: u64,
    /// Every existing B message at or above `hi` has origin `> F`.
    hi: u64,
    lo_anchor: Option<(u64, u64)>,
    hi_anchor: Option<(u64, u64)>,
    probes: u32,
    pending: Option<u64>,
}

impl TranslateSearch {
    /// `first`/`last`: B's first and last sequence; `last_origin`: the origin of
    /// B's last message (the caller has read it to know B caught up to `F`).
    pub fn new(f: u64, first: u64, last: u64, last_origin: Option<u64>) -> Self {
        let first = first.max(1);
        let mut s = Self {
            f,
            lo: first,
            hi: last.max(first - 1) + 1,
            lo_anchor: None,
            hi_anchor: None,
            probes: 0,
            pending: None,
        };
        if let Some(o) = last_origin {
            if o <= f {
                s.lo = s.hi; // everything in B is at or before F
            } else {
                s.hi_anchor = Some((last, o));
            }
        }
        if f == 0 {
            s.hi = s.lo;
        }
        s
    }

    pub fn result(&self) -> Option<u64> {
        (self.lo >= self.hi).then_some(self.lo)
    }

    pub fn probes(&self) -> u32 {
        self.probes
    }

    /// The sequence to read next (first existing message at or after it).
    pub fn next_probe(&mut self) -> Option<u64> {
        if self.result().is_some() {
            return None;
        }
        let (lo, hi) = (self.lo, self.hi);
        let bisect = lo + (hi - lo) / 2;
        let guess = if self.probes.is_multiple_of(2) {
            // Interpolate between the anchors; A and B usually line up one to one,
            // so the first guess lands on F itself.
            let (ls, lorig) = self.lo_anchor.unwrap_or((lo.saturating_sub(1), 0));
            match self.hi_anchor {
                Some((hs, horig)) if horig > lorig && hs > ls => {
                    let want = self.f.saturating_sub(lorig) as u128;
                    let span = (hs - ls) as u128;
                    let est = ls as u128 + want * span / (horig - lorig) as u128;
                    (est as u64).clamp(lo, hi - 1)
                }
                _ => bisect,
            }
        } else {
            bisect
        };
        self.pending = Some(guess);
        Some(guess)
    }

    pub fn observe(&mut self, probe: Probe) {
        let Some(at) = self.pending.take() else { return };
        self.probes += 1;
        match probe {
            Some((seq, origin)) if seq < self.hi => {
                if origin == self.f {
                    // Origins strictly increase with B's sequence, so the next
                    // existing message is the first one after F.
                    self.lo = seq + 1;
                    self.hi = self.lo;
                } else if origin < self.f {
                    self.lo = seq + 1;
                    self.lo_anchor = Some((seq, origin));
                } else {
                    self.hi = at.max(self.lo);
                    self.hi_anchor = Some((seq, origin));
                }
            }
            // Nothing exists in [at, hi): everything at or after `at` is past F.
            _ => self.hi = at.max(self.lo),
        }
    }
}

/// Whether B's reach towards checkpoint F — a mirror's last sequence, or a
/// sourcing B's last message's origin (`None`: B holds nothing) — is at
/// F already; if not, [`holds_through`] needs A's next message after it.
pub fn reached(reach: Option<u64>, f: u64) -> bool {
    reach.is_some_and(|r| r >= f)
}

/// Whether B holds everything of A a durable at checkpoint F needs
/// (`translate_once`'s readiness, engine/steps/translate.rs, and the
/// model's): it [`reached`] F, or A has nothing B takes between its reach
/// and F (`next_after_reach`: A's next such sequence; read only when B did
/// not reach F).
pub fn holds_through(reach: Option<u64>, next_after_reach: Option<u64>, f: u64) -> bool {
    reached(reach, f) || next_after_reach.is_none_or(|seq| seq > f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ConsumerConfig, SequenceInfo};
    use proptest::prelude::*;

    #[test]
    fn b_holds_through_f_once_it_reached_it_or_a_has_nothing_between() {
        assert!(holds_through(Some(5), None, 5) && holds_through(Some(6), Some(7), 5));
        assert!(!holds_through(Some(3), Some(4), 5), "A's 4 is still to come");
        assert!(holds_through(Some(3), Some(6), 5), "A has nothing B takes in 4..=5");
        assert!(holds_through(Some(3), None, 5), "A has nothing after 3");
        assert!(!holds_through(None, Some(1), 1) && holds_through(None, Some(2), 1));
        assert!(!reached(None, 0) && reached(Some(0), 0));
    }

    fn info(delivered: u64, floor: u64, pending: u64, paused: bool) -> ConsumerInfo {
        ConsumerInfo {
            delivered: SequenceInfo { consumer_seq: delivered, stream_seq: delivered },
            ack_floor: SequenceInfo { consumer_seq: floor, stream_seq: floor },
            num_ack_pending: pending,
            paused,
            config: ConsumerConfig::default(),
            ..Default::default()
        }
    }

    #[test]
    fn settled_paused_consumer_checkpoints_at_delivered_not_floor() {
        // MaxDeliver exhausted 3 messages: floor lags, nothing pending.
        let a = assess(&info(100, 97, 0, true));
        assert!(a.settled && a.stable);
        assert_eq!(a.checkpoint, Some(100));
        assert_eq!(a.floor_gap, 3);
    }

    #[test]
    fn pending_or_unpaused_is_not_stable() {
        let a = assess(&info(100, 90, 2, true));
        assert!(!a.settled && a.checkpoint.is_none());
        let a = assess(&info(100, 100, 0, false));
        assert!(a.settled && !a.stable);
        let mut i = info(5, 5, 0, true);
        i.config.ack_policy = AckPolicy::None;
        assert!(!assess(&i).settled);
    }

    /// B as a sorted map seq -> origin, gets returning the first at or after.
    fn run(b: &[(u64, u64)], first: u64, last: u64, f: u64) -> (u64, u32) {
        let last_origin = b.iter().rev().find(|(s, _)| *s <= last).map(|(_, o)| *o);
        let mut s = TranslateSearch::new(f, first, last, last_origin);
        let mut n = 0;
        while let Some(p) = s.next_probe() {
            let r = b.iter().find(|(seq, _)| *seq >= p).copied();
            s.observe(r);
            n += 1;
            assert!(n < 200, "search does not converge");
        }
        (s.result().unwrap(), s.probes())
    }

    /// A start is exact when every message before it is at or before F and every
    /// message from it on is after F (gaps in B make several starts equivalent).
    fn exact(b: &[(u64, u64)], last: u64, start: u64, f: u64) -> bool {
        start >= 1
            && start <= last + 1
            && b.iter().all(|(s, o)| if *s < start { *o <= f } else { *o > f })
    }

    #[test]
    fn one_to_one_streams_translate_in_one_get() {
        let b: Vec<(u64, u64)> = (1..=1_000_000u64).map(|s| (s, s)).collect();
        let (start, probes) = run(&b, 1, 1_000_000, 654_321);
        assert_eq!(start, 654_322);
        assert_eq!(probes, 1);
    }

    #[test]
    fn empty_and_edge_checkpoints() {
        let b: Vec<(u64, u64)> = (1..=10u64).map(|s| (s, s + 100)).collect();
        assert_eq!(run(&b, 1, 10, 0).0, 1);
        assert_eq!(run(&b, 1, 10, 50).0, 1);
        assert_eq!(run(&b, 1, 10, 110).0, 11);
        assert_eq!(run(&b, 1, 10, 105).0, 6);
    }

    proptest! {
        #[test]
        fn finds_the_exact_start_in_logarithmic_gets(
            steps in prop::collection::vec((1u64..4, 1u64..5), 1..3000),
            fpick in 0usize..4000,
        ) {
            // B sequences with gaps (deleted in B), origins with gaps (filtered / deleted in A).
            let mut b = vec![];
            let (mut s, mut o) = (0u64, 0u64);
            for (ds, dor) in &steps { s += ds; o += dor; b.push((s, o)); }
            let last = s;
            let f = if fpick < b.len() { b[fpick].1 } else { (fpick as u64) % (o + 2) };
            let (start, probes) = run(&b, 1, last, f);
            prop_assert!(exact(&b, last, start, f), "start {} for F {}", start, f);
            let n = last as f64;
            prop_assert!((probes as f64) <= 2.0 * n.log2().ceil() + 3.0, "{} probes for {} seqs", probes, last);
        }
    }
}
