//! Verification of a migration: did every consumer see every message exactly once
//! across the cut-over? Pure and streaming: the adapter reads A and B in order
//! (concurrently, each into its own half) and feeds them here; nothing is kept
//! per message but bits in compressed sequence sets.
//!
//! # What is checked, per moved consumer
//! - **Completeness and order.** Every message of A that the consumer's filter on
//!   A selects appears in B, selected by the new durable's filter, exactly once
//!   (by the origin sequence in `Nats-Stream-Source`) and in order; B holds no
//!   sourced message for that filter that A does not (*extra*).
//! - **Adjacency.** The old consumer processed everything up to its checkpoint F;
//!   the new one delivers from `b_start` on. Exact when every selected B message
//!   before `b_start` has origin `<= F` (else it is a *gap*: skipped by both) and
//!   every one from `b_start` on has origin `> F` (else an *overlap*: processed on
//!   both sides). A direct publish before `b_start` is a gap as well.
//! - **Settled.** The journal's evidence shows the old consumer paused with
//!   nothing ack-pending and delivered exactly up to F when F was taken.
//!
//! Stream-wide, messages published directly into B after the commit point must
//! not carry a `Nats-Msg-Id` that also reached B by source: a publisher's retry
//! that slipped past B's duplicate window (*slipped duplicate*). Ids are only
//! compared inside the window where a retry can happen (the retry horizon around
//! the first direct publish), and only hashes of the direct side are held.
//!
//! The optional audit ([`AuditSide`]) compares the applications' own records of
//! what they processed with what was published.
//!
//! # Memory
//! Per consumer: A's selected sequences, B's seen origins and direct sequences as
//! `RoaringTreemap`s (about one bit per sequence when dense). Offenders are kept
//! for the first N of each kind only; counts are exact.

mod aside;
mod audit;
mod bside;
mod legacy;
mod report;
mod slip;
#[cfg(test)]
mod test_support;

pub use self::aside::{countable, ASide};
pub use self::audit::AuditSide;
pub use self::bside::{BMsg, BSide, Origin};
pub use self::legacy::a_filters_of;
pub use self::report::{
    AKnown, AStats, Adjacency, AuditReport, BStats, ConsumerReport, Counts, Kind, Offender, Pos,
    ReadStats, Report, SlipReport, StreamsReport, REPORT_FORMAT,
};
pub use self::slip::{id_hash, SlipCandidate, SlipWindow};
pub use crate::subject::{matches, selects};
pub use roaring::RoaringTreemap;

use self::bside::BCons;
use self::report::{offender, Offenders};
use crate::journal::Settled;
use serde::{Deserialize, Serialize};

/// What one consumer's verification needs, from the journal and the new durable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerSpec {
    pub name: String,
    /// The old durable's filters on A (empty: everything).
    pub a_filters: Vec<String>,
    /// The new durable's filters on B (empty: everything).
    pub b_filters: Vec<String>,
    /// F: the old durable's last settled A sequence.
    pub checkpoint: u64,
    /// The first B sequence the new durable delivers (read from the durable if it
    /// still exists, else the journal's).
    pub b_start: u64,
    /// The journal's `b_start`.
    pub journal_b_start: u64,
    /// The settled state F was taken from, as journaled.
    pub evidence: Option<Settled>,
    /// Fence mode (docs/protocol.md): `evidence` is the paused old consumer
    /// when F was taken (messages up to F may still be ack-pending then) and
    /// `fence_settled` its state once they were all settled.
    #[serde(default)]
    pub fence: bool,
    #[serde(default)]
    pub fence_settled: Option<Settled>,
    /// Drain mode: the old consumer's state when it was retired (journal
    /// `retired_state`); a delivery above F there means F was read short.
    #[serde(default)]
    pub retired_state: Option<Settled>,
    /// The checkpoint was taken without a pause (servers before 2.11), which the
    /// plan allows only with publishers stopped: then nothing pending and
    /// nothing ack-pending is the evidence.
    pub publishers_stopped: bool,
    /// The new durable's ack floor when verification began: B messages after it
    /// may still be in processing, so the audit does not expect them yet.
    pub b_ack_floor: Option<u64>,
}

/// The facts about the streams the adapter read, for the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    pub migration: String,
    pub from: String,
    pub to: String,
    pub a_first_seq: u64,
    pub a_last_seq: u64,
    pub b_last_seq: u64,
    /// The audit stream (or subject) read, if any.
    pub audit_source: Option<String>,
    /// Per consumer, A's messages whose copies B held and then removed under
    /// its own limits (per subject, count, size, age): not lost. See
    /// [`lost_candidates`]; the adapter decides each one against B.
    #[serde(skip)]
    pub evicted_by_b: Vec<RoaringTreemap>,
}

/// Per consumer, A's selected messages with no copy in B: lost, unless B's own
/// limits removed the copy afterwards (the adapter checks, then fills
/// [`Facts::evicted_by_b`]).
pub fn lost_candidates(a: &ASide, b: &BSide) -> Vec<RoaringTreemap> {
    b.cons.iter().enumerate().map(|(i, c)| &a.selected[i] - &c.origins).collect()
}

fn settled_ok(spec: &ConsumerSpec) -> Result<(), String> {
    let f = spec.checkpoint;
    if spec.fence {
        return fence_settled_ok(spec);
    }
    match &spec.evidence {
        None => Err("the journal holds no settled state for the checkpoint (journal written before evidence was kept?)".into()),
        Some(e) if !e.paused && spec.publishers_stopped && e.num_pending != 0 => Err(format!("publishers were stopped but the old consumer had {} message(s) pending when checkpoint {f} was taken", e.num_pending)),
        Some(e) if !e.paused && !spec.publishers_stopped => Err(format!("the old consumer was not paused when checkpoint {f} was taken")),
        Some(e) if e.num_ack_pending != 0 => Err(format!("the old consumer had {} message(s) ack-pending when checkpoint {f} was taken", e.num_ack_pending)),
        Some(e) if e.delivered_stream_seq != f => Err(format!("the old consumer had delivered up to {} but the checkpoint is {f}", e.delivered_stream_seq)),
        // Paused for good since F: a later delivery above F means F was read
        // from a state that had not yet learned of it (a leader change).
        Some(_) => match &spec.retired_state {
            Some(r) if r.delivered_stream_seq > f => Err(format!("the old consumer, paused since checkpoint {f} was taken, showed messages delivered up to {} when it was retired: messages {} to {} may have been processed from both consumers (the checkpoint was read from a consumer leader that had not yet learned of their delivery)", r.delivered_stream_seq, f + 1, r.delivered_stream_seq)),
            _ => Ok(()),
        },
    }
}

/// Fence mode: F was the paused old consumer's last delivered sequence, and
/// later nothing up to F was unacknowledged on it (its ack floor reached F, or
/// nothing at all was ack-pending).
fn fence_settled_ok(spec: &ConsumerSpec) -> Result<(), String> {
    let f = spec.checkpoint;
    match (&spec.evidence, &spec.fence_settled) {
        (None, _) => {
            Err("the journal holds no state of the old consumer when the fence was taken".into())
        }
        (Some(e), _) if !e.paused => {
            Err(format!("the old consumer was not paused when fence {f} was taken"))
        }
        (Some(e), _) if e.delivered_stream_seq != f => Err(format!(
            "the old consumer had delivered up to {} but the fence is {f}",
            e.delivered_stream_seq
        )),
        (_, None) => Err(format!(
            "the journal holds no evidence that the old consumer settled up to fence {f}"
        )),
        (_, Some(s)) if s.ack_floor_stream_seq < f && s.num_ack_pending != 0 => Err(format!(
            "the old consumer's ack floor was {} (below fence {f}) with {} message(s) ack-pending",
            s.ack_floor_stream_seq, s.num_ack_pending
        )),
        // Instances never acknowledge above F on the old consumer: an ack
        // floor above it means F was read from a state that had not yet
        // learned of those deliveries (a consumer leader change during the
        // gate, seen on a cluster): they may have been processed twice.
        (_, Some(s)) if s.ack_floor_stream_seq > f => Err(format!(
            "the old consumer's ack floor reached {} after fence {f} was taken: messages {} to {} were acknowledged on the old consumer and the new durable starts after {f}, so they may have been processed twice (the fence was read from a consumer leader that had not yet learned of their delivery)",
            s.ack_floor_stream_seq, f + 1, s.ack_floor_stream_seq
        )),
        _ => Ok(()),
    }
}

/// Puts the halves together. `first_n` bounds the offenders listed per kind.
pub fn finish(
    a: ASide,
    b: BSide,
    audit: Option<AuditSide>,
    facts: &Facts,
    first_n: usize,
) -> Report {
    let mut offenders = Offenders::new(first_n);
    let mut consumers = vec![];
    let mut summary = Counts::default();
    let mut audit_offenders = audit.as_ref().map(|x| x.offenders.clone());
    for (i, (spec, c)) in b.specs.iter().zip(b.cons.iter()).enumerate() {
        let j = Joined { spec, b: c, selected: &a.selected[i], first_n };
        let mut counts = c.counts;
        counts.checked = j.selected.len() + c.direct.len();
        j.lost(facts.evicted_by_b.get(i), &mut counts, &mut offenders);
        let before_a_first = j.extra(facts.a_first_seq, &mut counts, &mut offenders);
        j.settled(&mut counts, &mut offenders);
        j.start(&mut counts, &mut offenders);
        let audit_pending = audit.as_ref().map(|au| {
            let ao = audit_offenders.as_mut().expect("audit offenders");
            j.audit(au, i, &mut counts, ao)
        });
        summary.add(&counts);
        consumers.push(j.report(counts, before_a_first, a.known[i], audit_pending));
    }
    summary.slipped_duplicates += b.slipped;
    Report {
        format: REPORT_FORMAT,
        migration: facts.migration.clone(),
        from: facts.from.clone(),
        to: facts.to.clone(),
        holds: summary.failures() == 0,
        summary,
        streams: streams_report(&a, &b, facts),
        consumers,
        audit: audit.map(|au| au.report(facts.audit_source.clone().unwrap_or_default())),
        offenders: in_report_order(b.offenders, offenders, audit_offenders),
        read: None,
        stranded: vec![],
    }
}

/// One consumer's halves, put together by [`finish`]: each step counts what
/// it finds and names the first offenders.
struct Joined<'a> {
    spec: &'a ConsumerSpec,
    b: &'a BCons,
    /// A's messages the consumer's filter on A selects.
    selected: &'a RoaringTreemap,
    first_n: usize,
}

impl Joined<'_> {
    fn name(&self) -> &str {
        &self.spec.name
    }

    /// Lost: selected in A, never seen in B (copies B's limits removed later
    /// are not lost: they were there and are gone by B's own rules).
    fn lost(&self, evicted: Option<&RoaringTreemap>, counts: &mut Counts, out: &mut Offenders) {
        let mut lost = self.selected - &self.b.origins;
        if let Some(ev) = evicted {
            counts.evicted_by_b = (&lost & ev).len();
            lost -= ev;
        }
        counts.lost = lost.len();
        for s in lost.iter().take(self.first_n) {
            let detail = format!("A's message {s} is not in B");
            out.push(offender(Kind::Lost, self.name(), Some(s), None, None, detail));
        }
    }

    /// Extra: seen in B, not selected in A; origins A no longer holds (below
    /// `a_first_seq`) are not judged, and their number is returned.
    fn extra(&self, a_first_seq: u64, counts: &mut Counts, out: &mut Offenders) -> u64 {
        let extra = &self.b.origins - self.selected;
        let before_a_first = extra.range_cardinality(..a_first_seq.max(1));
        counts.extra += extra.len() - before_a_first;
        for s in extra.iter().filter(|s| *s >= a_first_seq).take(self.first_n) {
            out.push(offender(Kind::Extra, self.name(), Some(s), None, None, format!("B holds A's message {s}, which the consumer's filter on A does not select or A does not hold")));
        }
        before_a_first
    }

    /// The journal's evidence that the old consumer was settled at F.
    fn settled(&self, counts: &mut Counts, out: &mut Offenders) {
        if let Err(why) = settled_ok(self.spec).and(self.stayed_stopped()) {
            counts.unsettled = 1;
            out.push(offender(
                Kind::Unsettled,
                self.name(),
                Some(self.spec.checkpoint),
                None,
                None,
                why,
            ));
        }
    }

    /// Without a pause (servers before 2.11) the old consumer kept delivering
    /// after F: exact only if A stored nothing it selects above F, as the
    /// operator stated (publishers stopped). A message A stored after F was
    /// also copied to B after the new durable's start: it may have been
    /// processed from both streams (a newcomer's trial found 5 such).
    fn stayed_stopped(&self) -> Result<(), String> {
        let f = self.spec.checkpoint;
        let unpaused =
            self.spec.publishers_stopped && self.spec.evidence.as_ref().is_some_and(|e| !e.paused);
        let after = self.selected.range_cardinality(f + 1..);
        if !unpaused || after == 0 {
            return Ok(());
        }
        Err(format!(
            "publishers were stated stopped but A stored {after} message(s) for this consumer after checkpoint {f} (the first {}), while the old consumer could not be paused (server before 2.11): they may have been processed from both streams",
            self.selected.iter().find(|s| *s > f).unwrap_or_default()
        ))
    }

    /// The new durable starts where the journal says it does.
    fn start(&self, counts: &mut Counts, out: &mut Offenders) {
        let spec = self.spec;
        if spec.b_start != spec.journal_b_start {
            counts.start_mismatches = 1;
            out.push(offender(
                Kind::StartMismatch,
                self.name(),
                None,
                Some(spec.b_start),
                None,
                format!(
                    "the new durable starts at {} but the journal recorded {}",
                    spec.b_start, spec.journal_b_start
                ),
            ));
        }
    }

    /// The audit of consumer `i`: every selected message (minus those the new
    /// durable may still be processing) processed, nothing else. Returns how
    /// many are not expected yet.
    fn audit(&self, au: &AuditSide, i: usize, counts: &mut Counts, out: &mut Offenders) -> u64 {
        let ac = au.counts[i];
        counts.audit_duplicated += ac.audit_duplicated;
        counts.audit_unknown += ac.audit_unknown;
        self.audit_lost(au, i, counts, out);
        self.audit_unknown(au, i, counts, out);
        self.b.pending_a.len() + self.b.pending_b.len()
    }

    fn audit_lost(&self, au: &AuditSide, i: usize, counts: &mut Counts, out: &mut Offenders) {
        let (c, name, n) = (self.b, self.name(), self.first_n);
        let expected_a = self.selected - &c.pending_a;
        let expected_b = &c.direct - &c.pending_b;
        let lost_a = &expected_a - &au.seen_a[i];
        let lost_b = &expected_b - &au.seen_b[i];
        counts.audit_lost += lost_a.len() + lost_b.len();
        for s in lost_a.iter().take(n) {
            out.push(offender(Kind::AuditLost, name, Some(s), None, None, format!("A's message {s} was published and acknowledged, but no audit record says it was processed")));
        }
        for s in lost_b.iter().take(n) {
            out.push(offender(Kind::AuditLost, name, None, Some(s), None, format!("B's message {s} (published directly) was acknowledged, but no audit record says it was processed")));
        }
    }

    fn audit_unknown(&self, au: &AuditSide, i: usize, counts: &mut Counts, out: &mut Offenders) {
        let (c, name, n) = (self.b, self.name(), self.first_n);
        let unknown_a = &au.seen_a[i] - self.selected;
        let unknown_b = &au.seen_b[i] - &c.direct;
        counts.audit_unknown += unknown_a.len() + unknown_b.len();
        for s in unknown_a.iter().take(n) {
            out.push(offender(Kind::AuditUnknown, name, Some(s), None, None, format!("an audit record says A's message {s} was processed, but the consumer's filter does not select it or A does not hold it")));
        }
        for s in unknown_b.iter().take(n) {
            out.push(offender(Kind::AuditUnknown, name, None, Some(s), None, format!("an audit record says B's message {s} was processed, but it is not a direct publish the consumer's filter selects")));
        }
    }

    fn report(
        &self,
        counts: Counts,
        before_a_first: u64,
        a_known: AKnown,
        audit_pending: Option<u64>,
    ) -> ConsumerReport {
        let (spec, c) = (self.spec, self.b);
        ConsumerReport {
            name: spec.name.clone(),
            a_filters: spec.a_filters.clone(),
            b_filters: spec.b_filters.clone(),
            checkpoint: spec.checkpoint,
            b_start: spec.b_start,
            journal_b_start: spec.journal_b_start,
            evidence: spec.evidence.clone(),
            counts,
            a_selected: self.selected.len(),
            b_sourced: c.sourced,
            b_direct: c.direct.len(),
            before_a_first,
            a_known,
            adjacency: Adjacency {
                last_before_start: c.last_before_start,
                first_at_start: c.first_at_start,
            },
            audit_pending,
        }
    }
}

fn streams_report(a: &ASide, b: &BSide, facts: &Facts) -> StreamsReport {
    StreamsReport {
        a: AStats {
            name: facts.from.clone(),
            first_seq: facts.a_first_seq,
            last_seq: facts.a_last_seq,
            read: a.read,
        },
        b: BStats {
            name: facts.to.clone(),
            last_seq: facts.b_last_seq,
            read: b.read,
            sourced: b.sourced,
            direct: b.direct,
            other: b.other,
        },
        slip: b.slip.as_ref().map(|w| SlipReport {
            window_ms: w.window_ms,
            first_direct_seq: w.first_direct_seq,
            last_direct_seq: w.last_direct_seq,
            direct_ids: w.len() as u64,
            sourced_compared: b.sourced_compared,
        }),
        slipped_duplicates: b.slipped,
    }
}

/// Per-message findings first as found, then the set differences, then the
/// audit's; grouped by kind (a stable sort keeps that order within a kind).
fn in_report_order(
    per_message: Offenders,
    sets: Offenders,
    audit: Option<Offenders>,
) -> Vec<Offender> {
    let mut all = per_message;
    all.extend(sets);
    if let Some(ao) = audit {
        all.extend(ao);
    }
    let mut list = all.list;
    list.sort_by_key(|o| o.kind);
    list
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_correct_migration_holds() {
        let a = a_msgs(100);
        let specs = [spec("all", &[], 40, 41), spec("eu", &["s.1"], 37, 38)];
        let (r, _) = run(&specs, &a, &b_copy(&a), None);
        assert!(r.holds, "{:#?}", r.offenders);
        assert_eq!(r.consumers[0].counts.checked, 100);
        assert_eq!(r.consumers[1].a_selected, 25);
        assert_eq!(
            r.consumers[0].adjacency.last_before_start,
            Some(Pos { b_seq: 40, origin: Some(40) })
        );
        assert_eq!(
            r.consumers[0].adjacency.first_at_start,
            Some(Pos { b_seq: 41, origin: Some(41) })
        );
        // A filtered consumer whose checkpoint lies on an unselected message:
        // any start between its last selected and next selected message is exact.
        let (r, _) = run(&[spec("eu", &["s.1"], 38, 40)], &a, &b_copy(&a), None);
        assert!(r.holds, "{:#?}", r.offenders);
    }

    #[test]
    fn each_fault_is_caught_and_named() {
        let a = a_msgs(50);
        let specs = [spec("all", &[], 20, 21)];
        let mut b = b_copy(&a);
        b.remove(30);
        only(&run(&specs, &a, &b, None).0, Kind::Lost, 1);
        let mut b = b_copy(&a);
        let mut dup = b[33].clone();
        dup.seq = 51;
        b.push(dup);
        only(&run(&specs, &a, &b, None).0, Kind::Duplicated, 1);
        let mut b = b_copy(&a);
        b.swap(10, 11);
        let (o10, o11) = (b[10].origin, b[11].origin);
        b[10].seq = 11;
        b[11].seq = 12;
        assert_eq!((o10, o11), (Some(12), Some(11)));
        only(&run(&specs, &a, &b, None).0, Kind::OutOfOrder, 1);
        // One too early: B's 20 (origin 20 = F) is delivered again.
        let r = run(&[spec("all", &[], 20, 20)], &a, &b_copy(&a), None).0;
        only(&r, Kind::Overlap, 1);
        assert_eq!(r.offenders[0].b_seq, Some(20));
        // One too late: B's 21 (origin 21) is delivered by neither.
        let r = run(&[spec("all", &[], 20, 22)], &a, &b_copy(&a), None).0;
        only(&r, Kind::Gap, 1);
        assert_eq!(r.offenders[0].a_seq, Some(21));
        // Extra: B holds an origin A does not.
        let mut b = b_copy(&a);
        b.push(B { seq: 51, subject: "s.0".into(), origin: Some(77), id: None, ts: 51 });
        only(&run(&specs, &a, &b, None).0, Kind::Extra, 1);
        // Not settled.
        let mut s = spec("all", &[], 20, 21);
        s.evidence.as_mut().unwrap().num_ack_pending = 2;
        only(&run(&[s], &a, &b_copy(&a), None).0, Kind::Unsettled, 1);
        // The durable on B does not start where the journal says.
        let mut s = spec("all", &[], 20, 21);
        s.journal_b_start = 22;
        only(&run(&[s], &a, &b_copy(&a), None).0, Kind::StartMismatch, 1);
    }

    /// Without a pause the operator's "publishers stopped" is the evidence:
    /// A storing anything the consumer selects after F contradicts it.
    #[test]
    fn publishers_stated_stopped_but_a_grew_is_caught() {
        let a = a_msgs(50);
        let unpaused = |f: u64| {
            let mut s = spec("all", &[], f, f + 1);
            s.publishers_stopped = true;
            s.evidence.as_mut().unwrap().paused = false;
            s
        };
        let (r, _) = run(&[unpaused(50)], &a, &b_copy(&a), None);
        assert!(r.holds, "{:#?}", r.offenders);
        let r = run(&[unpaused(45)], &a, &b_copy(&a), None).0;
        only(&r, Kind::Unsettled, 1);
        assert!(r.offenders[0].detail.contains("A stored 5 message(s)"), "{:#?}", r.offenders);
        // With a pause, messages after F are normal (the consumer stopped).
        let mut paused = unpaused(45);
        paused.evidence.as_mut().unwrap().paused = true;
        assert!(run(&[paused], &a, &b_copy(&a), None).0.holds);
    }

    /// Fence mode: messages up to F may be ack-pending when F is taken; the
    /// later settled read is the evidence, and its absence or an ack floor
    /// below F with messages pending is caught.
    #[test]
    fn a_fence_is_judged_by_its_settled_read() {
        let a = a_msgs(50);
        let fenced = |settled: Option<(u64, u64)>| {
            let mut s = spec("all", &[], 20, 21);
            s.fence = true;
            s.evidence.as_mut().unwrap().num_ack_pending = 5;
            s.fence_settled = settled.map(|(floor, pending)| Settled {
                ack_floor_stream_seq: floor,
                num_ack_pending: pending,
                ..s.evidence.clone().unwrap()
            });
            s
        };
        // Settled: floor at F with the nak'd messages above it still pending.
        let (r, _) = run(&[fenced(Some((20, 3)))], &a, &b_copy(&a), None);
        assert!(r.holds, "{:#?}", r.offenders);
        let (r, _) = run(&[fenced(Some((12, 0)))], &a, &b_copy(&a), None);
        assert!(r.holds, "nothing pending at all: {:#?}", r.offenders);
        only(&run(&[fenced(Some((19, 1)))], &a, &b_copy(&a), None).0, Kind::Unsettled, 1);
        only(&run(&[fenced(None)], &a, &b_copy(&a), None).0, Kind::Unsettled, 1);
        // An ack floor above F: acknowledged on the old consumer after the
        // fence was taken (a stale read after a leader change, on a cluster).
        let r = run(&[fenced(Some((21, 0)))], &a, &b_copy(&a), None).0;
        only(&r, Kind::Unsettled, 1);
        assert!(r.offenders[0].detail.contains("messages 21 to 21"), "{:#?}", r.offenders);
    }

    /// Drain mode: the old consumer's state at retire must not show a
    /// delivery above F (it was paused for good since F was taken).
    #[test]
    fn a_delivery_above_the_checkpoint_at_retire_is_caught() {
        let a = a_msgs(50);
        let retired = |delivered: u64| {
            let mut s = spec("all", &[], 20, 21);
            s.retired_state =
                Some(Settled { delivered_stream_seq: delivered, ..s.evidence.clone().unwrap() });
            s
        };
        assert!(run(&[retired(20)], &a, &b_copy(&a), None).0.holds);
        let r = run(&[retired(22)], &a, &b_copy(&a), None).0;
        only(&r, Kind::Unsettled, 1);
        assert!(r.offenders[0].detail.contains("messages 21 to 22"), "{:#?}", r.offenders);
    }

    /// The streaming checker, against the definitions computed naively.
    fn naive(spec: &ConsumerSpec, a: &[(u64, String)], b: &[B]) -> Counts {
        let sel: Vec<u64> =
            a.iter().filter(|(_, s)| selects(&spec.a_filters, s)).map(|x| x.0).collect();
        let bs: Vec<&B> = b.iter().filter(|m| selects(&spec.b_filters, &m.subject)).collect();
        let mut c = Counts::default();
        let mut seen: Vec<u64> = vec![];
        let mut max = 0;
        for m in &bs {
            match m.origin {
                Some(o) => {
                    if seen.contains(&o) {
                        c.duplicated += 1;
                    } else {
                        if o < max {
                            c.out_of_order += 1;
                        }
                        seen.push(o);
                    }
                    max = max.max(o);
                    if m.seq < spec.b_start && o > spec.checkpoint {
                        c.gaps += 1;
                    }
                    if m.seq >= spec.b_start && o <= spec.checkpoint {
                        c.overlaps += 1;
                    }
                }
                None => {
                    if m.seq < spec.b_start {
                        c.gaps += 1;
                    }
                }
            }
        }
        c.lost = sel.iter().filter(|s| !seen.contains(s)).count() as u64;
        c.extra = seen.iter().filter(|o| !sel.contains(o)).count() as u64;
        c.checked = sel.len() as u64 + bs.iter().filter(|m| m.origin.is_none()).count() as u64;
        c
    }

    proptest! {
        #[test]
        fn streaming_counts_equal_the_naive_definitions(
            n in 1u64..300,
            deleted_in_a in prop::collection::vec(0u64..300, 0..10),
            mutations in prop::collection::vec((0u8..5, 0usize..400, 0usize..400), 0..6),
            filter in prop::sample::select(vec![vec![], vec!["s.1".to_string()], vec!["s.0".to_string(), "s.3".to_string()], vec!["s.*".to_string()]]),
            fpick in 0u64..300,
            skew in -2i64..3,
        ) {
            let a: Vec<(u64, String)> = a_msgs(n).into_iter().filter(|(s, _)| !deleted_in_a.contains(s)).collect();
            let mut b: Vec<B> = b_copy(&a_msgs(n));
            // B may hold what A no longer does (deleted after sourcing): extra.
            for (op, i, j) in mutations {
                if b.is_empty() { break; }
                let (i, j) = (i % b.len(), j % b.len());
                match op {
                    0 => { b.remove(i); }
                    1 => { let m = b[i].clone(); b.insert(j, m); }
                    2 => { let (oi, oj) = (b[i].origin, b[j].origin); b[i].origin = oj; b[j].origin = oi; }
                    3 => { b.insert(j, B { seq: 0, subject: format!("s.{}", i % 4), origin: None, id: None, ts: 0 }); }
                    _ => { b[i].subject = format!("s.{}", j % 4); }
                }
            }
            for (k, m) in b.iter_mut().enumerate() { m.seq = k as u64 + 1; }
            let f = fpick % (n + 1);
            let start = (f as i64 + 1 + skew).max(1) as u64;
            let mut s = spec("c", &[], f, start);
            s.a_filters = filter.clone();
            s.b_filters = filter;
            let want = naive(&s, &a, &b);
            let (r, _) = run(std::slice::from_ref(&s), &a, &b, None);
            let mut got = r.consumers[0].counts;
            // `before_a_first` is not judged; the naive model does not know it.
            got.extra += r.consumers[0].before_a_first;
            prop_assert_eq!(got, want);
            prop_assert_eq!(r.holds, want.failures() == r.consumers[0].before_a_first);
        }

    }
}
