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

use crate::audit::AuditRecord;
use crate::compat::Verdict;
use crate::journal::Settled;
use crate::plan::Plan;
pub use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

pub const REPORT_FORMAT: u32 = 1;

/// What can be wrong with a message, one name per check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Lost,
    Duplicated,
    Extra,
    OutOfOrder,
    Gap,
    Overlap,
    Unsettled,
    StartMismatch,
    SlippedDuplicate,
    AuditLost,
    AuditDuplicated,
    AuditUnknown,
}

const KINDS: usize = 12;

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lost => "lost",
            Kind::Duplicated => "duplicated",
            Kind::Extra => "extra",
            Kind::OutOfOrder => "out_of_order",
            Kind::Gap => "gap",
            Kind::Overlap => "overlap",
            Kind::Unsettled => "unsettled",
            Kind::StartMismatch => "start_mismatch",
            Kind::SlippedDuplicate => "slipped_duplicate",
            Kind::AuditLost => "audit_lost",
            Kind::AuditDuplicated => "audit_duplicated",
            Kind::AuditUnknown => "audit_unknown",
        }
    }
}

/// One offending message (or consumer, for `unsettled`/`start_mismatch`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offender {
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The message's sequence in A (its origin sequence), if it has one.
    pub a_seq: Option<u64>,
    /// Its sequence in B, if it is in B.
    pub b_seq: Option<u64>,
    pub msg_id: Option<String>,
    pub subject: Option<String>,
    /// What is wrong, for humans.
    pub detail: String,
}

/// Exact counts; every field but `checked` must be 0 for the migration to hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Messages whose fate was checked: A's selected messages plus B's direct ones.
    pub checked: u64,
    /// A's messages B held and then removed under its own limits (not a failure).
    #[serde(default)]
    pub evicted_by_b: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub extra: u64,
    pub out_of_order: u64,
    pub gaps: u64,
    pub overlaps: u64,
    pub unsettled: u64,
    pub start_mismatches: u64,
    pub slipped_duplicates: u64,
    pub audit_lost: u64,
    pub audit_duplicated: u64,
    pub audit_unknown: u64,
}

impl Counts {
    fn bump(&mut self, k: Kind, n: u64) {
        let f = match k {
            Kind::Lost => &mut self.lost,
            Kind::Duplicated => &mut self.duplicated,
            Kind::Extra => &mut self.extra,
            Kind::OutOfOrder => &mut self.out_of_order,
            Kind::Gap => &mut self.gaps,
            Kind::Overlap => &mut self.overlaps,
            Kind::Unsettled => &mut self.unsettled,
            Kind::StartMismatch => &mut self.start_mismatches,
            Kind::SlippedDuplicate => &mut self.slipped_duplicates,
            Kind::AuditLost => &mut self.audit_lost,
            Kind::AuditDuplicated => &mut self.audit_duplicated,
            Kind::AuditUnknown => &mut self.audit_unknown,
        };
        *f += n;
    }

    pub fn failures(&self) -> u64 {
        self.lost
            + self.duplicated
            + self.extra
            + self.out_of_order
            + self.gaps
            + self.overlaps
            + self.unsettled
            + self.start_mismatches
            + self.slipped_duplicates
            + self.audit_lost
            + self.audit_duplicated
            + self.audit_unknown
    }

    fn add(&mut self, o: &Counts) {
        self.checked += o.checked;
        self.evicted_by_b += o.evicted_by_b;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.extra += o.extra;
        self.out_of_order += o.out_of_order;
        self.gaps += o.gaps;
        self.overlaps += o.overlaps;
        self.unsettled += o.unsettled;
        self.start_mismatches += o.start_mismatches;
        self.slipped_duplicates += o.slipped_duplicates;
        self.audit_lost += o.audit_lost;
        self.audit_duplicated += o.audit_duplicated;
        self.audit_unknown += o.audit_unknown;
    }
}

/// Keeps the first `n` offenders of each kind.
#[derive(Debug, Clone)]
struct Offenders {
    n: usize,
    kept: [usize; KINDS],
    list: Vec<Offender>,
}

impl Offenders {
    fn new(n: usize) -> Self {
        Self { n, kept: [0; KINDS], list: vec![] }
    }

    fn wants(&self, k: Kind) -> bool {
        self.kept[k as usize] < self.n
    }

    fn push(&mut self, o: Offender) {
        if self.wants(o.kind) {
            self.kept[o.kind as usize] += 1;
            self.list.push(o);
        }
    }

    fn extend(&mut self, other: Offenders) {
        for o in other.list {
            self.push(o);
        }
    }
}

fn offender(
    kind: Kind,
    consumer: &str,
    a_seq: Option<u64>,
    b_seq: Option<u64>,
    msg_id: Option<&str>,
    detail: String,
) -> Offender {
    Offender {
        kind,
        consumer: Some(consumer.to_string()),
        a_seq,
        b_seq,
        msg_id: msg_id.map(String::from),
        subject: None,
        detail,
    }
}

pub use crate::subject::{matches, selects};

/// A stable 64-bit hash of a `Nats-Msg-Id` (ids are only held as hashes; a
/// hash match is confirmed against the real ids before it is reported).
pub fn id_hash(id: &str) -> u64 {
    // `DefaultHasher::new()` is keyed the same every time: stable within a run.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// The old durable's filters on A, as the plan recorded them. Plans written
/// before [`crate::plan::ConsumerPlan::a_filters`] existed have them only in the finding that
/// compared them with B's (`from`: the filters joined by commas, or `(all)`).
pub fn a_filters_of(plan: &Plan, consumer: &str) -> Option<Vec<String>> {
    let cp = plan.consumers.iter().find(|c| c.name == consumer)?;
    if let Some(f) = &cp.a_filters {
        return Some(f.clone());
    }
    let scope = format!("consumer {consumer}");
    let f = plan.findings.iter().find(|f| {
        f.scope == scope && f.setting == "filter_subject" && f.verdict != Verdict::Unsafe
    })?;
    Some(if f.from == "(all)" { vec![] } else { f.from.split(',').map(String::from).collect() })
}

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
    /// The checkpoint was taken without a pause (servers before 2.11), which the
    /// plan allows only with publishers stopped: then nothing pending and
    /// nothing ack-pending is the evidence.
    pub publishers_stopped: bool,
    /// The new durable's ack floor when verification began: B messages after it
    /// may still be in processing, so the audit does not expect them yet.
    pub b_ack_floor: Option<u64>,
}

/// How a consumer's selected messages of A were known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AKnown {
    /// A was read (the filter's subjects).
    #[default]
    Read,
    /// The consumer selects everything: A's state (first, last, deleted) says.
    State,
    /// A's selected messages were counted, not read, and B's origins matched
    /// the count exactly ([`ASide::counted`]).
    Counted,
}

/// A's side: which of A's sequences each consumer's filter selects.
#[derive(Debug, Clone)]
pub struct ASide {
    filters: Vec<Vec<String>>,
    selected: Vec<RoaringTreemap>,
    known: Vec<AKnown>,
    /// The consumers whose sets a read of A fills.
    feed: Vec<bool>,
    pub read: u64,
}

/// Can consumer `spec`'s selected messages of A be counted instead of read
/// ([`ASide::counted`])? Only when it filters on both sides and every subject
/// its filter on B selects is one its filter on A selects: then a sourced B
/// message it selects (B keeps A's subject; the adapter also requires that no
/// subject transform applies) is one A's filter selects, if A holds it.
pub fn countable(spec: &ConsumerSpec) -> bool {
    !spec.a_filters.is_empty()
        && !spec.b_filters.is_empty()
        && spec
            .b_filters
            .iter()
            .all(|b| spec.a_filters.iter().any(|a| crate::subject::covers(a, b)))
}

impl ASide {
    pub fn new(specs: &[ConsumerSpec]) -> Self {
        let n = specs.len();
        Self {
            filters: specs.iter().map(|s| s.a_filters.clone()).collect(),
            selected: vec![RoaringTreemap::new(); n],
            known: vec![AKnown::Read; n],
            feed: vec![true; n],
            read: 0,
        }
    }

    /// One message of A, in sequence order.
    pub fn message(&mut self, seq: u64, subject: &str) {
        self.read += 1;
        for ((f, set), feed) in self.filters.iter().zip(self.selected.iter_mut()).zip(&self.feed) {
            if *feed && selects(f, subject) && set.try_push(seq).is_err() {
                set.insert(seq);
            }
        }
    }

    /// Does any consumer select by subject? If none does, A's selected
    /// messages are simply the ones it holds ([`ASide::holds`]): no read needed.
    pub fn needs_subjects(&self) -> bool {
        self.filters.iter().any(|f| !f.is_empty())
    }

    /// Must A be read, for some consumer's set?
    pub fn reads(&self) -> bool {
        self.feed.iter().any(|f| *f)
    }

    /// The subjects to read A with: the filters of every consumer a read fills,
    /// or everything (`None`) when one of them selects everything.
    pub fn read_filters(&self) -> Option<Vec<String>> {
        let fed = || self.filters.iter().zip(&self.feed).filter(|(_, f)| **f).map(|(x, _)| x);
        if fed().any(|f| f.is_empty()) {
            return None;
        }
        let mut all: Vec<String> = fed().flatten().cloned().collect();
        all.sort();
        all.dedup();
        Some(all)
    }

    /// A holds every sequence from `first` to `last` but `deleted`: what each
    /// consumer that selects everything selects. Only for such consumers (a
    /// read of A no longer fills them).
    pub fn holds(&mut self, first: u64, last: u64, deleted: &[u64]) {
        for (i, (f, set)) in self.filters.iter().zip(self.selected.iter_mut()).enumerate() {
            if f.is_empty() {
                if first >= 1 && first <= last {
                    set.insert_range(first..=last);
                    for d in deleted {
                        set.remove(*d);
                    }
                }
                self.known[i] = AKnown::State;
                self.feed[i] = false;
            }
        }
    }

    /// Consumer `i` is to be counted after B is read ([`ASide::counted`]), not
    /// filled by a read of A.
    pub fn defer(&mut self, i: usize) {
        self.known[i] = AKnown::Counted;
        self.feed[i] = false;
    }

    /// Consumer `i` ([`countable`]; deferred), with A holding every sequence
    /// from `first` to `last` but `deleted`, and `count` of them selected by its
    /// filter on A (A unchanged meanwhile). B, read, gives the origins it
    /// selects; those A holds are each selected on A (countable), so they are a
    /// subset of A's selected set, and with as many elements they are all of it.
    /// Then A's set is exactly them and true is returned. Otherwise (something
    /// is lost, or B holds more than A selects) false: A must be read for this
    /// consumer (fed only with [`ASide::feed_only`]) to name the offenders.
    pub fn counted(
        &mut self,
        i: usize,
        b: &BSide,
        first: u64,
        last: u64,
        deleted: &[u64],
        count: u64,
    ) -> bool {
        let mut held = b.cons[i].origins.clone();
        if first > last || first == 0 {
            held.clear();
        } else {
            held.remove_range(..first);
            held.remove_range(last + 1..);
            for d in deleted {
                held.remove(*d);
            }
        }
        if held.len() == count {
            self.selected[i] = held;
            self.known[i] = AKnown::Counted;
            true
        } else {
            self.known[i] = AKnown::Read;
            false
        }
    }

    /// A read of A fills only these consumers' sets.
    pub fn feed_only(&mut self, which: &[usize]) {
        for (i, f) in self.feed.iter_mut().enumerate() {
            *f = which.contains(&i);
        }
    }

    /// Bytes the sets take serialized (a close measure of their heap size).
    pub fn set_bytes(&self) -> u64 {
        self.selected.iter().map(|s| s.serialized_size() as u64).sum()
    }
}

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

/// The ids of the direct publishes a retry could have produced, as hashes, and
/// from when on sourced messages are compared with them.
#[derive(Debug, Clone, Default)]
pub struct SlipWindow {
    direct: HashMap<u64, u64>,
    /// Sourced messages stored before this (ms since the epoch) cannot be the
    /// original of a retry that landed in the window.
    pub sourced_from_ms: i64,
    pub window_ms: u64,
    pub first_direct_seq: u64,
    pub last_direct_seq: u64,
}

impl SlipWindow {
    pub fn new(first_direct_seq: u64, first_direct_ms: i64, window_ms: u64) -> Self {
        Self {
            direct: HashMap::new(),
            sourced_from_ms: first_direct_ms - window_ms as i64,
            window_ms,
            first_direct_seq,
            last_direct_seq: first_direct_seq,
        }
    }

    pub fn add_direct(&mut self, b_seq: u64, msg_id: &str) {
        self.direct.entry(id_hash(msg_id)).or_insert(b_seq);
        self.last_direct_seq = self.last_direct_seq.max(b_seq);
    }

    pub fn len(&self) -> usize {
        self.direct.len()
    }

    pub fn is_empty(&self) -> bool {
        self.direct.is_empty()
    }
}

/// A sourced message whose id hash equals a direct publish's: confirmed (or
/// not) by comparing the real ids before it is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlipCandidate {
    pub sourced_b_seq: u64,
    pub origin: u64,
    pub msg_id: String,
    pub direct_b_seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pos {
    pub b_seq: u64,
    /// The origin sequence in A; none for a direct publish.
    pub origin: Option<u64>,
}

#[derive(Debug, Clone, Default)]
struct BCons {
    origins: RoaringTreemap,
    direct: RoaringTreemap,
    pending_a: RoaringTreemap,
    pending_b: RoaringTreemap,
    max_origin: u64,
    sourced: u64,
    counts: Counts,
    last_before_start: Option<Pos>,
    first_at_start: Option<Pos>,
}

/// B's side: per consumer, the origins seen (duplicates and order checked as
/// they arrive) and the handoff; stream-wide, slipped duplicates.
#[derive(Debug, Clone)]
pub struct BSide {
    specs: Vec<ConsumerSpec>,
    cons: Vec<BCons>,
    offenders: Offenders,
    slip: Option<SlipWindow>,
    slip_candidates: Vec<SlipCandidate>,
    slipped: u64,
    sourced_compared: u64,
    pub read: u64,
    pub sourced: u64,
    pub direct: u64,
    pub other: u64,
}

/// Hash-equal candidates kept for confirmation (real retries are few; more
/// than this means something else is wrong and the first ones are enough).
const MAX_SLIP_CANDIDATES: usize = 10_000;

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
                if let (Some(id), Some(w)) = (m.msg_id, &self.slip) {
                    if m.ts_ms >= w.sourced_from_ms && m.seq < w.first_direct_seq {
                        self.sourced_compared += 1;
                        if let Some(&d) = w.direct.get(&id_hash(id)) {
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
                }
            }
            Origin::Direct => self.direct += 1,
            Origin::Other(_) => self.other += 1,
        }
        for (spec, c) in self.specs.iter().zip(self.cons.iter_mut()) {
            if !selects(&spec.b_filters, m.subject) {
                continue;
            }
            let name = spec.name.as_str();
            let f = spec.checkpoint;
            let mut report = |k: Kind, a_seq: Option<u64>, detail: String| {
                c.counts.bump(k, 1);
                if self.offenders.wants(k) {
                    self.offenders.push(offender(k, name, a_seq, Some(m.seq), m.msg_id, detail));
                }
            };
            match m.origin {
                Origin::A(o) => {
                    if !c.origins.insert(o) {
                        report(
                            Kind::Duplicated,
                            Some(o),
                            format!("A's message {o} is in B more than once (again at {})", m.seq),
                        );
                    } else if o < c.max_origin {
                        report(
                            Kind::OutOfOrder,
                            Some(o),
                            format!(
                                "A's message {o} comes after A's message {} in B",
                                c.max_origin
                            ),
                        );
                    }
                    c.max_origin = c.max_origin.max(o);
                    c.sourced += 1;
                    let pos = Pos { b_seq: m.seq, origin: Some(o) };
                    if m.seq < spec.b_start {
                        c.last_before_start = Some(pos);
                        if o > f {
                            report(Kind::Gap, Some(o), format!("A's message {o} is after the old consumer's checkpoint {f} but before the new consumer's start {}: neither delivers it", spec.b_start));
                        }
                    } else {
                        c.first_at_start.get_or_insert(pos);
                        if o <= f {
                            report(Kind::Overlap, Some(o), format!("A's message {o} is at or before the old consumer's checkpoint {f} and at or after the new consumer's start {}: both deliver it", spec.b_start));
                        }
                    }
                    if spec.b_ack_floor.is_some_and(|floor| m.seq > floor) {
                        c.pending_a.insert(o);
                    }
                }
                Origin::Direct => {
                    if c.direct.try_push(m.seq).is_err() {
                        c.direct.insert(m.seq);
                    }
                    if m.seq < spec.b_start {
                        c.last_before_start = Some(Pos { b_seq: m.seq, origin: None });
                        report(Kind::Gap, None, format!("published directly into B before the new consumer's start {}: neither consumer delivers it", spec.b_start));
                    } else {
                        c.first_at_start.get_or_insert(Pos { b_seq: m.seq, origin: None });
                    }
                    if spec.b_ack_floor.is_some_and(|floor| m.seq > floor) {
                        c.pending_b.insert(m.seq);
                    }
                }
                Origin::Other(from) => {
                    report(Kind::Extra, None, format!("came from {from:?}, not from A: B must hold only A's messages and direct publishes"));
                }
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
            + self.slip.as_ref().map(|w| (w.direct.capacity() * 17) as u64).unwrap_or(0)
    }
}

/// The audit: what the applications say they processed.
#[derive(Debug, Clone)]
pub struct AuditSide {
    names: Vec<String>,
    from: String,
    to: String,
    b_last_seq: u64,
    seen_a: Vec<RoaringTreemap>,
    seen_b: Vec<RoaringTreemap>,
    counts: Vec<Counts>,
    offenders: Offenders,
    pub records: u64,
    pub other_consumers: u64,
    pub unreadable: u64,
    pub after_snapshot: u64,
}

impl AuditSide {
    /// `b_last_seq`: B's last sequence when verification began; records of later
    /// messages are not judged.
    pub fn new(
        specs: &[ConsumerSpec],
        from: &str,
        to: &str,
        b_last_seq: u64,
        first_n: usize,
    ) -> Self {
        Self {
            names: specs.iter().map(|s| s.name.clone()).collect(),
            from: from.into(),
            to: to.into(),
            b_last_seq,
            seen_a: vec![RoaringTreemap::new(); specs.len()],
            seen_b: vec![RoaringTreemap::new(); specs.len()],
            counts: vec![Counts::default(); specs.len()],
            offenders: Offenders::new(first_n),
            records: 0,
            other_consumers: 0,
            unreadable: 0,
            after_snapshot: 0,
        }
    }

    /// An audit message that is not a record this version can read.
    pub fn unreadable(&mut self) {
        self.records += 1;
        self.unreadable += 1;
    }

    pub fn record(&mut self, r: &AuditRecord) {
        self.records += 1;
        let Some(i) = self.names.iter().position(|n| *n == r.consumer) else {
            self.other_consumers += 1;
            return;
        };
        let (set, a_seq, b_seq) = if r.stream == self.from {
            (&mut self.seen_a[i], Some(r.seq), None)
        } else if r.stream == self.to {
            if r.seq > self.b_last_seq {
                self.after_snapshot += 1;
                return;
            }
            (&mut self.seen_b[i], None, Some(r.seq))
        } else {
            self.counts[i].bump(Kind::AuditUnknown, 1);
            self.offenders.push(Offender {
                kind: Kind::AuditUnknown,
                consumer: Some(r.consumer.clone()),
                a_seq: None,
                b_seq: None,
                msg_id: r.msg_id.clone(),
                subject: None,
                detail: format!(
                    "processed by {} a message of stream {:?} {}, which is neither {} nor {}",
                    r.instance, r.stream, r.seq, self.from, self.to
                ),
            });
            return;
        };
        if !set.insert(r.seq) {
            self.counts[i].bump(Kind::AuditDuplicated, 1);
            self.offenders.push(Offender {
                kind: Kind::AuditDuplicated,
                consumer: Some(r.consumer.clone()),
                a_seq,
                b_seq,
                msg_id: r.msg_id.clone(),
                subject: None,
                detail: format!(
                    "processed more than once (again by {} version {}{})",
                    r.instance,
                    r.version,
                    r.via
                        .as_ref()
                        .map(|v| format!(", read from {} {}", v.stream, v.seq))
                        .unwrap_or_default()
                ),
            });
        }
    }
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AStats {
    pub name: String,
    pub first_seq: u64,
    pub last_seq: u64,
    pub read: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BStats {
    pub name: String,
    pub last_seq: u64,
    pub read: u64,
    pub sourced: u64,
    pub direct: u64,
    /// Sourced from another stream, or with an unreadable source header.
    pub other: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlipReport {
    pub window_ms: u64,
    pub first_direct_seq: u64,
    pub last_direct_seq: u64,
    /// Distinct ids among the direct publishes in the window.
    pub direct_ids: u64,
    /// Sourced messages compared with them.
    pub sourced_compared: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamsReport {
    pub a: AStats,
    pub b: BStats,
    /// Absent when B holds no direct publish with an id (nothing can have slipped).
    pub slip: Option<SlipReport>,
    pub slipped_duplicates: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Adjacency {
    /// The last message the new durable's filter selects before its start.
    pub last_before_start: Option<Pos>,
    /// The first one at or after its start.
    pub first_at_start: Option<Pos>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerReport {
    pub name: String,
    pub a_filters: Vec<String>,
    pub b_filters: Vec<String>,
    pub checkpoint: u64,
    pub b_start: u64,
    pub journal_b_start: u64,
    pub evidence: Option<Settled>,
    pub counts: Counts,
    /// A's messages the old filter selects.
    pub a_selected: u64,
    /// B's sourced and direct messages the new filter selects.
    pub b_sourced: u64,
    pub b_direct: u64,
    /// Sourced origins below A's first sequence (A no longer holds them: not judged).
    pub before_a_first: u64,
    /// How A's selected messages were known: `read`, `state` (no filter: A's
    /// state says), or `counted` (counted on A, equal to B's origins).
    #[serde(default)]
    pub a_known: AKnown,
    pub adjacency: Adjacency,
    /// Messages after the new durable's ack floor, not expected in the audit yet.
    pub audit_pending: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    pub source: String,
    pub records: u64,
    pub other_consumers: u64,
    pub unreadable: u64,
    /// Records of B messages published after verification began (not judged).
    pub after_snapshot: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadStats {
    pub ms: f64,
    pub messages: u64,
    pub per_sec: f64,
}

/// The verification report (`verify --json` prints it; see docs/verify.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    pub migration: String,
    pub from: String,
    pub to: String,
    /// Everything holds: all counts but `checked` are 0.
    pub holds: bool,
    pub summary: Counts,
    pub streams: StreamsReport,
    pub consumers: Vec<ConsumerReport>,
    pub audit: Option<AuditReport>,
    /// The first N offenders of each kind.
    pub offenders: Vec<Offender>,
    #[serde(default)]
    pub read: Option<ReadStats>,
}

fn settled_ok(spec: &ConsumerSpec) -> Result<(), String> {
    let f = spec.checkpoint;
    match &spec.evidence {
        None => Err("the journal holds no settled state for the checkpoint (journal written before evidence was kept?)".into()),
        Some(e) if !e.paused && spec.publishers_stopped && e.num_pending != 0 => Err(format!("publishers were stopped but the old consumer had {} message(s) pending when checkpoint {f} was taken", e.num_pending)),
        Some(e) if !e.paused && !spec.publishers_stopped => Err(format!("the old consumer was not paused when checkpoint {f} was taken")),
        Some(e) if e.num_ack_pending != 0 => Err(format!("the old consumer had {} message(s) ack-pending when checkpoint {f} was taken", e.num_ack_pending)),
        Some(e) if e.delivered_stream_seq != f => Err(format!("the old consumer had delivered up to {} but the checkpoint is {f}", e.delivered_stream_seq)),
        Some(_) => Ok(()),
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
        let name = spec.name.as_str();
        let mut counts = c.counts;
        let selected = &a.selected[i];
        counts.checked = selected.len() + c.direct.len();
        // Lost: selected in A, never seen in B (copies B's limits removed later
        // are not lost: they were there and are gone by B's own rules).
        let mut lost = selected - &c.origins;
        if let Some(ev) = facts.evicted_by_b.get(i) {
            counts.evicted_by_b = (&lost & ev).len();
            lost -= ev;
        }
        counts.lost = lost.len();
        for s in lost.iter().take(first_n) {
            offenders.push(offender(
                Kind::Lost,
                name,
                Some(s),
                None,
                None,
                format!("A's message {s} is not in B"),
            ));
        }
        // Extra: seen in B, not selected in A; origins A no longer holds are not judged.
        let extra = &c.origins - selected;
        let before_a_first = extra.range_cardinality(..facts.a_first_seq.max(1));
        counts.extra += extra.len() - before_a_first;
        for s in extra.iter().filter(|s| *s >= facts.a_first_seq).take(first_n) {
            offenders.push(offender(Kind::Extra, name, Some(s), None, None, format!("B holds A's message {s}, which the consumer's filter on A does not select or A does not hold")));
        }
        if let Err(why) = settled_ok(spec) {
            counts.unsettled = 1;
            offenders.push(offender(Kind::Unsettled, name, Some(spec.checkpoint), None, None, why));
        }
        if spec.b_start != spec.journal_b_start {
            counts.start_mismatches = 1;
            offenders.push(offender(
                Kind::StartMismatch,
                name,
                None,
                Some(spec.b_start),
                None,
                format!(
                    "the new durable starts at {} but the journal recorded {}",
                    spec.b_start, spec.journal_b_start
                ),
            ));
        }
        let mut audit_pending = None;
        if let Some(au) = &audit {
            let ac = au.counts[i];
            counts.audit_duplicated += ac.audit_duplicated;
            counts.audit_unknown += ac.audit_unknown;
            // Expected: every selected message, minus those the new durable may
            // still be processing.
            let expected_a = selected - &c.pending_a;
            let expected_b = &c.direct - &c.pending_b;
            audit_pending = Some(c.pending_a.len() + c.pending_b.len());
            let lost_a = &expected_a - &au.seen_a[i];
            let lost_b = &expected_b - &au.seen_b[i];
            counts.audit_lost += lost_a.len() + lost_b.len();
            let ao = audit_offenders.as_mut().expect("audit offenders");
            for s in lost_a.iter().take(first_n) {
                ao.push(offender(Kind::AuditLost, name, Some(s), None, None, format!("A's message {s} was published and acknowledged, but no audit record says it was processed")));
            }
            for s in lost_b.iter().take(first_n) {
                ao.push(offender(Kind::AuditLost, name, None, Some(s), None, format!("B's message {s} (published directly) was acknowledged, but no audit record says it was processed")));
            }
            let unknown_a = &au.seen_a[i] - selected;
            let unknown_b = &au.seen_b[i] - &c.direct;
            counts.audit_unknown += unknown_a.len() + unknown_b.len();
            for s in unknown_a.iter().take(first_n) {
                ao.push(offender(Kind::AuditUnknown, name, Some(s), None, None, format!("an audit record says A's message {s} was processed, but the consumer's filter does not select it or A does not hold it")));
            }
            for s in unknown_b.iter().take(first_n) {
                ao.push(offender(Kind::AuditUnknown, name, None, Some(s), None, format!("an audit record says B's message {s} was processed, but it is not a direct publish the consumer's filter selects")));
            }
        }
        summary.add(&counts);
        consumers.push(ConsumerReport {
            name: spec.name.clone(),
            a_filters: spec.a_filters.clone(),
            b_filters: spec.b_filters.clone(),
            checkpoint: spec.checkpoint,
            b_start: spec.b_start,
            journal_b_start: spec.journal_b_start,
            evidence: spec.evidence.clone(),
            counts,
            a_selected: selected.len(),
            b_sourced: c.sourced,
            b_direct: c.direct.len(),
            before_a_first,
            a_known: a.known[i],
            adjacency: Adjacency {
                last_before_start: c.last_before_start,
                first_at_start: c.first_at_start,
            },
            audit_pending,
        });
    }
    summary.slipped_duplicates += b.slipped;
    // Order: per-message findings first as found, then the set differences.
    let mut all = b.offenders;
    all.extend(offenders);
    if let Some(ao) = audit_offenders {
        all.extend(ao);
    }
    let mut list = all.list;
    list.sort_by_key(|o| o.kind);
    Report {
        format: REPORT_FORMAT,
        migration: facts.migration.clone(),
        from: facts.from.clone(),
        to: facts.to.clone(),
        holds: summary.failures() == 0,
        summary,
        streams: StreamsReport {
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
        },
        consumers,
        audit: audit.map(|au| AuditReport {
            source: facts.audit_source.clone().unwrap_or_default(),
            records: au.records,
            other_consumers: au.other_consumers,
            unreadable: au.unreadable,
            after_snapshot: au.after_snapshot,
        }),
        offenders: list,
        read: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Via, Worker};
    use proptest::prelude::*;

    fn settled(f: u64) -> Option<Settled> {
        Some(Settled {
            delivered_stream_seq: f,
            ack_floor_stream_seq: f,
            num_ack_pending: 0,
            num_pending: 0,
            paused: true,
        })
    }

    fn spec(name: &str, a_filters: &[&str], f: u64, start: u64) -> ConsumerSpec {
        ConsumerSpec {
            name: name.into(),
            a_filters: a_filters.iter().map(|s| s.to_string()).collect(),
            b_filters: a_filters.iter().map(|s| s.to_string()).collect(),
            checkpoint: f,
            b_start: start,
            journal_b_start: start,
            evidence: settled(f),
            publishers_stopped: false,
            b_ack_floor: None,
        }
    }

    /// A: seq i on subject `s.{i % 4}`; B: a one-to-one copy.
    fn a_msgs(n: u64) -> Vec<(u64, String)> {
        (1..=n).map(|i| (i, format!("s.{}", i % 4))).collect()
    }

    #[derive(Clone, Debug)]
    struct B {
        seq: u64,
        subject: String,
        origin: Option<u64>,
        id: Option<String>,
        ts: i64,
    }

    fn b_copy(a: &[(u64, String)]) -> Vec<B> {
        a.iter()
            .map(|(s, subj)| B {
                seq: *s,
                subject: subj.clone(),
                origin: Some(*s),
                id: Some(format!("m-{s}")),
                ts: 100 + *s as i64,
            })
            .collect()
    }

    fn run(
        specs: &[ConsumerSpec],
        a: &[(u64, String)],
        b: &[B],
        slip: Option<SlipWindow>,
    ) -> (Report, Vec<SlipCandidate>) {
        let mut asd = ASide::new(specs);
        for (s, subj) in a {
            asd.message(*s, subj);
        }
        let mut bsd = BSide::new(specs, 5, slip);
        for m in b {
            let origin = match m.origin {
                Some(o) => Origin::A(o),
                None => Origin::Direct,
            };
            bsd.message(&BMsg {
                seq: m.seq,
                subject: &m.subject,
                origin,
                msg_id: m.id.as_deref(),
                ts_ms: m.ts,
            });
        }
        let cands = bsd.slip_candidates().to_vec();
        for c in &cands {
            bsd.confirm_slip(c);
        }
        let facts = Facts {
            migration: "A.B".into(),
            from: "A".into(),
            to: "B".into(),
            a_first_seq: a.first().map(|x| x.0).unwrap_or(1),
            a_last_seq: a.last().map(|x| x.0).unwrap_or(0),
            b_last_seq: b.last().map(|x| x.seq).unwrap_or(0),
            audit_source: None,
            evicted_by_b: vec![],
        };
        (finish(asd, bsd, None, &facts, 5), cands)
    }

    fn only(r: &Report, k: Kind, n: u64) {
        let mut want = Counts { checked: r.summary.checked, ..Default::default() };
        want.bump(k, n);
        assert_eq!(r.summary, want, "{:#?}", r.offenders);
        assert_eq!(r.offenders.iter().filter(|o| o.kind == k).count() as u64, n.min(5));
        assert!(!r.holds);
    }

    #[test]
    fn old_plans_give_their_a_filters_through_the_finding() {
        use crate::plan::{build, PlanRequest, ServerFacts};
        use crate::version::ServerVersion;
        let facts = ServerFacts {
            version: ServerVersion::new(2, 15, 1),
            a_raw: serde_json::json!({"config": {"name": "A", "subjects": ["o.>"], "duplicate_window": 120_000_000_000i64}, "state": {}}),
            b_raw: None,
            consumers_raw: vec![
                serde_json::json!({"name": "C", "config": {"durable_name": "C", "filter_subjects": ["o.a", "o.b"]}}),
                serde_json::json!({"name": "D", "config": {"durable_name": "D"}}),
            ],
            other_consumers: vec![],
            downstream: vec![],
            account: None,
            checks: Default::default(),
        };
        let req = PlanRequest {
            from: "A".into(),
            to: "B".into(),
            consumers: vec!["C".into(), "D".into()],
            all_consumers: false,
            strategy: Default::default(),
            mode: Default::default(),
            to_config: None,
            publishers_stopped: false,
            retry_horizon: None,
        };
        let mut p = build(&req, &facts).unwrap();
        assert_eq!(a_filters_of(&p, "C"), Some(vec!["o.a".to_string(), "o.b".to_string()]));
        p.consumers.iter_mut().for_each(|c| c.a_filters = None);
        assert_eq!(a_filters_of(&p, "C"), Some(vec!["o.a".to_string(), "o.b".to_string()]));
        assert_eq!(a_filters_of(&p, "D"), Some(vec![]));
        assert_eq!(a_filters_of(&p, "E"), None);
    }

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
    fn a_stream_read_and_a_stream_known_from_its_state_give_the_same_sets() {
        let specs = [spec("all", &[], 3, 4)];
        let a: Vec<(u64, String)> =
            a_msgs(20).into_iter().filter(|(s, _)| ![1, 7, 20].contains(s)).collect();
        let mut read = ASide::new(&specs);
        a.iter().for_each(|(s, subj)| read.message(*s, subj));
        let mut known = ASide::new(&specs);
        assert!(!known.needs_subjects());
        known.holds(2, 20, &[7, 20]);
        assert_eq!(read.selected, known.selected);
        let f = ASide::new(&[spec("a", &["s.1", "s.2"], 0, 1), spec("b", &["s.1"], 0, 1)]);
        assert_eq!(f.read_filters(), Some(vec!["s.1".to_string(), "s.2".to_string()]));
        assert!(ASide::new(&[spec("a", &["s.1"], 0, 1), spec("b", &[], 0, 1)])
            .read_filters()
            .is_none());
    }

    /// The counted path: A's selected set taken from B's origins when their
    /// number equals A's count, as `run` does it but without reading A.
    fn run_counted(
        specs: &[ConsumerSpec],
        a: &[(u64, String)],
        a_range: (u64, u64),
        b: &[B],
    ) -> (Report, Vec<AKnown>) {
        let mut asd = ASide::new(specs);
        let deleted: Vec<u64> =
            (a_range.0..=a_range.1).filter(|s| !a.iter().any(|x| x.0 == *s)).collect();
        asd.holds(a_range.0, a_range.1, &deleted);
        let idx: Vec<usize> = (0..specs.len()).filter(|i| countable(&specs[*i])).collect();
        idx.iter().for_each(|i| asd.defer(*i));
        let mut bsd = BSide::new(specs, 5, None);
        for m in b {
            let origin = m.origin.map(Origin::A).unwrap_or(Origin::Direct);
            bsd.message(&BMsg {
                seq: m.seq,
                subject: &m.subject,
                origin,
                msg_id: m.id.as_deref(),
                ts_ms: m.ts,
            });
        }
        let unequal: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|i| {
                !asd.counted(
                    *i,
                    &bsd,
                    a_range.0,
                    a_range.1,
                    &deleted,
                    a.iter().filter(|x| selects(&specs[*i].a_filters, &x.1)).count() as u64,
                )
            })
            .collect();
        if !unequal.is_empty() {
            asd.feed_only(&unequal);
            a.iter().for_each(|(s, subj)| asd.message(*s, subj));
        }
        let known = asd.known.clone();
        let facts = Facts {
            migration: "A.B".into(),
            from: "A".into(),
            to: "B".into(),
            a_first_seq: a_range.0,
            a_last_seq: a_range.1,
            b_last_seq: b.last().map(|x| x.seq).unwrap_or(0),
            audit_source: None,
            evicted_by_b: vec![],
        };
        (finish(asd, bsd, None, &facts, 5), known)
    }

    #[test]
    fn a_counted_filter_finds_what_a_read_one_finds() {
        let a = a_msgs(40);
        let specs = [
            spec("eu", &["s.1"], 9, 10),
            spec("two", &["s.0", "s.3"], 8, 9),
            spec("all", &[], 9, 10),
        ];
        let (r, known) = run_counted(&specs, &a, (1, 40), &b_copy(&a));
        assert!(r.holds, "{:#?}", r.offenders);
        assert_eq!(known, vec![AKnown::Counted, AKnown::Counted, AKnown::State]);
        assert_eq!(r.consumers[0].a_selected, 10);
        // A message lost from B: the count differs, A is read, the loss named.
        let mut b = b_copy(&a);
        b.retain(|m| m.seq != 13);
        let (r, known) = run_counted(&specs, &a, (1, 40), &b);
        assert_eq!(known[0], AKnown::Read);
        assert_eq!(r.consumers[0].counts.lost, 1);
        assert_eq!(r.offenders.iter().find(|o| o.kind == Kind::Lost).unwrap().a_seq, Some(13));
        // Lost 13, and 17 deleted from A after it was sourced (B holds it):
        // equal sizes, but the deleted origin is no message A holds, so the
        // count still differs and both are named.
        let a2: Vec<(u64, String)> = a.iter().filter(|x| x.0 != 17).cloned().collect();
        let (r, known) = run_counted(&specs[..1], &a2, (1, 40), &b);
        assert_eq!(known[0], AKnown::Read);
        assert_eq!(
            (r.consumers[0].counts.lost, r.consumers[0].counts.extra),
            (1, 1),
            "{:#?}",
            r.offenders
        );
        // A duplicate and an origin beyond A's last: the set of origins A
        // holds still equals A's, the duplicate is found on B's side and the
        // unknown origin is extra, as when A is read.
        let mut b = b_copy(&a);
        let mut dup = b[12].clone();
        dup.seq = 41;
        b.push(dup);
        b.push(B { seq: 42, subject: "s.1".into(), origin: Some(77), id: None, ts: 0 });
        let (r, known) = run_counted(&specs[..1], &a, (1, 40), &b);
        assert_eq!(known[0], AKnown::Counted);
        assert_eq!(
            (
                r.consumers[0].counts.duplicated,
                r.consumers[0].counts.extra,
                r.consumers[0].counts.lost
            ),
            (1, 1, 0),
            "{:#?}",
            r.offenders
        );
        // A B filter wider than A's: not countable.
        let mut s = spec("eu", &["s.1"], 9, 10);
        s.b_filters = vec!["s.*".into()];
        assert!(!countable(&s));
        s.b_filters = vec!["s.1".into()];
        s.a_filters = vec!["s.*".into()];
        assert!(countable(&s));
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

    #[test]
    fn a_direct_publish_with_a_sourced_id_is_a_slipped_duplicate() {
        let a = a_msgs(50);
        let specs = [spec("all", &[], 20, 21)];
        let mut b = b_copy(&a);
        for (i, id) in [(51, "new-1"), (52, "m-48"), (53, "new-2")] {
            b.push(B {
                seq: i,
                subject: "s.1".into(),
                origin: None,
                id: Some(id.into()),
                ts: 100 + i as i64,
            });
        }
        let mut w = SlipWindow::new(51, 151, 60);
        for m in &b[50..] {
            w.add_direct(m.seq, m.id.as_deref().unwrap());
        }
        let (r, cands) = run(&specs, &a, &b, Some(w.clone()));
        only(&r, Kind::SlippedDuplicate, 1);
        assert_eq!(
            cands,
            vec![SlipCandidate {
                sourced_b_seq: 48,
                origin: 48,
                msg_id: "m-48".into(),
                direct_b_seq: 52
            }]
        );
        assert_eq!(r.streams.slip.as_ref().unwrap().sourced_compared, 50);
        // Outside the window (sourced long before the first direct publish): a
        // reused id, not a retry.
        let mut w2 = SlipWindow::new(51, 151, 2);
        for m in &b[50..] {
            w2.add_direct(m.seq, m.id.as_deref().unwrap());
        }
        assert!(run(&specs, &a, &b, Some(w2)).0.holds);
    }

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

    fn rec(consumer: &str, stream: &str, seq: u64, via: (&str, u64)) -> AuditRecord {
        let w = Worker { consumer: consumer.into(), instance: "i".into(), version: "v".into() };
        let h = (stream == "A" && via.0 == "B").then(|| format!("A {seq}"));
        AuditRecord::new(
            Via { stream: via.0.into(), seq: via.1, delivered: 1 },
            h.as_deref(),
            None,
            &w,
        )
    }

    #[test]
    fn the_audit_names_lost_doubled_and_unknown_messages() {
        let a = a_msgs(10);
        let mut b = b_copy(&a);
        b.push(B { seq: 11, subject: "s.3".into(), origin: None, id: None, ts: 0 });
        b.push(B { seq: 12, subject: "s.0".into(), origin: None, id: None, ts: 0 });
        let mut s = spec("all", &[], 5, 6);
        s.b_ack_floor = Some(11);
        let specs = [s];
        let feed = |records: &[AuditRecord]| {
            let mut asd = ASide::new(&specs);
            a.iter().for_each(|(s, subj)| asd.message(*s, subj));
            let mut bsd = BSide::new(&specs, 5, None);
            for m in &b {
                let origin = m.origin.map(Origin::A).unwrap_or(Origin::Direct);
                bsd.message(&BMsg {
                    seq: m.seq,
                    subject: &m.subject,
                    origin,
                    msg_id: None,
                    ts_ms: 0,
                });
            }
            let mut au = AuditSide::new(&specs, "A", "B", 12, 5);
            records.iter().for_each(|r| au.record(r));
            au.record(&rec("someone-else", "A", 1, ("A", 1)));
            finish(
                asd,
                bsd,
                Some(au),
                &Facts {
                    migration: "A.B".into(),
                    from: "A".into(),
                    to: "B".into(),
                    a_first_seq: 1,
                    a_last_seq: 10,
                    b_last_seq: 12,
                    audit_source: Some("AUDIT".into()),
                    evicted_by_b: vec![],
                },
                5,
            )
        };
        let mut good: Vec<AuditRecord> = (1..=5).map(|i| rec("all", "A", i, ("A", i))).collect();
        good.extend((6..=10).map(|i| rec("all", "A", i, ("B", i))));
        good.push(rec("all", "B", 11, ("B", 11)));
        // B's 12 is after the new durable's ack floor: not expected yet.
        let r = feed(&good);
        assert!(r.holds, "{:#?}", r.offenders);
        assert_eq!(r.consumers[0].audit_pending, Some(1));
        assert_eq!(r.audit.as_ref().unwrap().other_consumers, 1);
        let mut bad = good.clone();
        bad.remove(6); // A's 7, processed via B: missing
        bad.push(rec("all", "A", 5, ("B", 5))); // A's 5 processed again, from B
        bad.push(rec("all", "B", 3, ("B", 3))); // a B sequence that is no direct publish
        let r = feed(&bad);
        assert_eq!(
            (r.summary.audit_lost, r.summary.audit_duplicated, r.summary.audit_unknown),
            (1, 1, 1),
            "{:#?}",
            r.offenders
        );
        let lost = r.offenders.iter().find(|o| o.kind == Kind::AuditLost).unwrap();
        assert_eq!(lost.a_seq, Some(7));
        let dup = r.offenders.iter().find(|o| o.kind == Kind::AuditDuplicated).unwrap();
        assert_eq!(dup.a_seq, Some(5));
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

        /// With B's copies keeping A's subjects (what sourcing without a
        /// transform does), counting A's selected messages finds exactly what
        /// reading A does.
        #[test]
        fn counting_a_gives_the_report_reading_a_gives(
            n in 1u64..200,
            deleted_in_a in prop::collection::vec(0u64..200, 0..8),
            mutations in prop::collection::vec((0u8..3, 0usize..300, 0usize..300), 0..6),
            filter in prop::sample::select(vec![vec!["s.1".to_string()], vec!["s.0".to_string(), "s.3".to_string()], vec!["s.*".to_string()]]),
            fpick in 0u64..200,
            skew in -2i64..3,
            a_first in 1u64..4,
        ) {
            let a: Vec<(u64, String)> = a_msgs(n).into_iter().filter(|(s, _)| !deleted_in_a.contains(s) && *s >= a_first).collect();
            let mut b: Vec<B> = b_copy(&a_msgs(n));
            for (op, i, j) in mutations {
                if b.is_empty() { break; }
                let (i, j) = (i % b.len(), j % b.len());
                match op {
                    0 => { b.remove(i); }
                    1 => { let m = b[i].clone(); b.insert(j, m); }
                    _ => { b.insert(j, B { seq: 0, subject: format!("s.{}", i % 4), origin: None, id: None, ts: 0 }); }
                }
            }
            for (k, m) in b.iter_mut().enumerate() { m.seq = k as u64 + 1; }
            let f = fpick % (n + 1);
            let start = (f as i64 + 1 + skew).max(1) as u64;
            let mut s = spec("c", &[], f, start);
            s.a_filters = filter.clone();
            s.b_filters = filter;
            let (read, _) = {
                let mut asd = ASide::new(std::slice::from_ref(&s));
                a.iter().for_each(|(q, subj)| asd.message(*q, subj));
                let mut bsd = BSide::new(std::slice::from_ref(&s), 5, None);
                for m in &b {
                    let origin = m.origin.map(Origin::A).unwrap_or(Origin::Direct);
                    bsd.message(&BMsg { seq: m.seq, subject: &m.subject, origin, msg_id: m.id.as_deref(), ts_ms: m.ts });
                }
                let facts = Facts { migration: "A.B".into(), from: "A".into(), to: "B".into(), a_first_seq: a_first, a_last_seq: n, b_last_seq: b.last().map(|x| x.seq).unwrap_or(0), audit_source: None, evicted_by_b: vec![] };
                (finish(asd, bsd, None, &facts, 5), ())
            };
            let (counted, _) = run_counted(std::slice::from_ref(&s), &a, (a_first, n), &b);
            let strip = |r: &Report| { let mut r = r.clone(); r.consumers.iter_mut().for_each(|c| c.a_known = AKnown::Read); r.streams.a.read = 0; r };
            prop_assert_eq!(strip(&counted), strip(&read));
        }

    }
}
