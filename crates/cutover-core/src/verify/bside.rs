//! B's side of verification: B read once in order, each message judged for
//! every consumer whose filter on B selects it, as it arrives.

use super::report::{offender, Counts, Kind, Offender, Offenders, Pos};
use super::slip::{SlipCandidate, SlipWindow, MAX_SLIP_CANDIDATES};
use super::ConsumerSpec;
use crate::subject::selects;
use roaring::RoaringTreemap;

/// Where a message of B came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin<'a> {
    /// Sourced from A at this sequence.
    A(u64),
    /// Published directly into B (no source header).
    Direct,
    /// Sourced from another stream (named), or a source header that cannot be read.
    Other(&'a str),
}

#[derive(Debug, Clone, Copy)]
pub struct BMsg<'a> {
    pub seq: u64,
    pub subject: &'a str,
    pub origin: Origin<'a>,
    pub msg_id: Option<&'a str>,
    /// B's timestamp for the message, ms since the epoch.
    pub ts_ms: i64,
}

/// One consumer's view of B.
#[derive(Debug, Clone, Default)]
pub(super) struct BCons {
    pub(super) origins: RoaringTreemap,
    pub(super) direct: RoaringTreemap,
    pub(super) pending_a: RoaringTreemap,
    pub(super) pending_b: RoaringTreemap,
    max_origin: u64,
    pub(super) sourced: u64,
    pub(super) counts: Counts,
    pub(super) last_before_start: Option<Pos>,
    pub(super) first_at_start: Option<Pos>,
}

/// B's side: per consumer, the origins seen (duplicates and order checked as
/// they arrive) and the handoff; stream-wide, slipped duplicates.
#[derive(Debug, Clone)]
pub struct BSide {
    pub(super) specs: Vec<ConsumerSpec>,
    pub(super) cons: Vec<BCons>,
    pub(super) offenders: Offenders,
    pub(super) slip: Option<SlipWindow>,
    slip_candidates: Vec<SlipCandidate>,
    pub(super) slipped: u64,
    pub(super) sourced_compared: u64,
    pub read: u64,
    pub sourced: u64,
    pub direct: u64,
    pub other: u64,
}

impl BSide {
    pub fn new(specs: &[ConsumerSpec], first_n: usize, slip: Option<SlipWindow>) -> Self {
        Self {
            specs: specs.to_vec(),
            cons: vec![BCons::default(); specs.len()],
            offenders: Offenders::new(first_n),
            slip,
            slip_candidates: vec![],
            slipped: 0,
            sourced_compared: 0,
            read: 0,
            sourced: 0,
            direct: 0,
            other: 0,
        }
    }

    /// One message of B, in sequence order.
    pub fn message(&mut self, m: &BMsg<'_>) {
        self.read += 1;
        match m.origin {
            Origin::A(o) => {
                self.sourced += 1;
                self.compare_slip(m, o);
            }
            Origin::Direct => self.direct += 1,
            Origin::Other(_) => self.other += 1,
        }
        for (spec, c) in self.specs.iter().zip(self.cons.iter_mut()) {
            if !selects(&spec.b_filters, m.subject) {
                continue;
            }
            let mut at = Judged { spec, c, offenders: &mut self.offenders, m };
            match m.origin {
                Origin::A(o) => at.sourced(o),
                Origin::Direct => at.direct(),
                Origin::Other(from) => {
                    at.report(Kind::Extra, None, format!("came from {from:?}, not from A: B must hold only A's messages and direct publishes"));
                }
            }
        }
    }

    /// A sourced message (origin `o`) inside the retry window whose id hashes
    /// like a direct publish's is a candidate slipped duplicate.
    fn compare_slip(&mut self, m: &BMsg<'_>, o: u64) {
        let (Some(id), Some(w)) = (m.msg_id, &self.slip) else {
            return;
        };
        if !w.compares(m.seq, m.ts_ms) {
            return;
        }
        self.sourced_compared += 1;
        if let Some(d) = w.direct_with(id) {
            if self.slip_candidates.len() < MAX_SLIP_CANDIDATES {
                self.slip_candidates.push(SlipCandidate {
                    sourced_b_seq: m.seq,
                    origin: o,
                    msg_id: id.to_string(),
                    direct_b_seq: d,
                });
            }
        }
    }

    /// The hash matches to confirm with the real ids ([`BSide::confirm_slip`]).
    pub fn slip_candidates(&self) -> &[SlipCandidate] {
        &self.slip_candidates
    }

    /// Reports a candidate whose direct publish carries exactly its id.
    pub fn confirm_slip(&mut self, c: &SlipCandidate) {
        self.slipped += 1;
        self.offenders.push(Offender {
            kind: Kind::SlippedDuplicate,
            consumer: None,
            a_seq: Some(c.origin),
            b_seq: Some(c.direct_b_seq),
            msg_id: Some(c.msg_id.clone()),
            subject: None,
            detail: format!("published directly into B at {} with the Nats-Msg-Id of A's message {} (sourced into B at {}): a retry that slipped past B's duplicate window", c.direct_b_seq, c.origin, c.sourced_b_seq),
        });
    }

    pub fn set_bytes(&self) -> u64 {
        self.cons
            .iter()
            .map(|c| {
                (c.origins.serialized_size()
                    + c.direct.serialized_size()
                    + c.pending_a.serialized_size()
                    + c.pending_b.serialized_size()) as u64
            })
            .sum::<u64>()
            + self.slip.as_ref().map(SlipWindow::heap_bytes).unwrap_or(0)
    }
}

/// One message of B judged for one consumer whose filter on B selects it.
struct Judged<'a, 'm> {
    spec: &'a ConsumerSpec,
    c: &'a mut BCons,
    offenders: &'a mut Offenders,
    m: &'a BMsg<'m>,
}

impl Judged<'_, '_> {
    /// Counts a finding, and names it while fewer than N of its kind are.
    fn report(&mut self, k: Kind, a_seq: Option<u64>, detail: String) {
        self.c.counts.bump(k, 1);
        if self.offenders.wants(k) {
            let m = self.m;
            self.offenders.push(offender(k, &self.spec.name, a_seq, Some(m.seq), m.msg_id, detail));
        }
    }

    /// Sourced from A's message `o`: seen once, in order, on the right side of
    /// the handoff.
    fn sourced(&mut self, o: u64) {
        self.once_in_order(o);
        self.c.sourced += 1;
        self.handoff_sourced(o);
        if self.after_ack_floor() {
            self.c.pending_a.insert(o);
        }
    }

    fn once_in_order(&mut self, o: u64) {
        let seq = self.m.seq;
        let max = self.c.max_origin;
        if !self.c.origins.insert(o) {
            self.report(
                Kind::Duplicated,
                Some(o),
                format!("A's message {o} is in B more than once (again at {seq})"),
            );
        } else if o < max {
            self.report(
                Kind::OutOfOrder,
                Some(o),
                format!("A's message {o} comes after A's message {max} in B"),
            );
        }
        self.c.max_origin = max.max(o);
    }

    /// Before the new durable's start only what the old consumer processed
    /// (origin <= F); from it on only what it did not.
    fn handoff_sourced(&mut self, o: u64) {
        let (f, start) = (self.spec.checkpoint, self.spec.b_start);
        let pos = Pos { b_seq: self.m.seq, origin: Some(o) };
        if self.m.seq < start {
            self.c.last_before_start = Some(pos);
            if o > f {
                self.report(Kind::Gap, Some(o), format!("A's message {o} is after the old consumer's checkpoint {f} but before the new consumer's start {start}: neither delivers it"));
            }
        } else {
            self.c.first_at_start.get_or_insert(pos);
            if o <= f {
                self.report(Kind::Overlap, Some(o), format!("A's message {o} is at or before the old consumer's checkpoint {f} and at or after the new consumer's start {start}: both deliver it"));
            }
        }
    }

    /// Published directly into B: only the new consumer can deliver it, so it
    /// must come from its start on.
    fn direct(&mut self) {
        let (seq, start) = (self.m.seq, self.spec.b_start);
        if self.c.direct.try_push(seq).is_err() {
            self.c.direct.insert(seq);
        }
        let pos = Pos { b_seq: seq, origin: None };
        if seq < start {
            self.c.last_before_start = Some(pos);
            self.report(Kind::Gap, None, format!("published directly into B before the new consumer's start {start}: neither consumer delivers it"));
        } else {
            self.c.first_at_start.get_or_insert(pos);
        }
        if self.after_ack_floor() {
            self.c.pending_b.insert(seq);
        }
    }

    /// After the new durable's ack floor: may still be in processing.
    fn after_ack_floor(&self) -> bool {
        self.spec.b_ack_floor.is_some_and(|floor| self.m.seq > floor)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::Kind;

    #[test]
    fn direct_publishes_after_the_start_are_new_messages_and_before_it_a_gap() {
        let a = a_msgs(10);
        let mut b = b_copy(&a);
        b.push(B { seq: 11, subject: "s.1".into(), origin: None, id: None, ts: 0 });
        let (r, _) = run(&[spec("all", &[], 5, 6)], &a, &b, None);
        assert!(r.holds);
        assert_eq!(r.consumers[0].counts.checked, 11);
        let (r, _) = run(&[spec("all", &[], 10, 12)], &a, &b, None);
        only(&r, Kind::Gap, 1);
    }
}
