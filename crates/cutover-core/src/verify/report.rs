//! The report's types: what can be wrong ([`Kind`]), exact [`Counts`], the
//! first offenders of each kind, and the per-stream and per-consumer sections.

use crate::journal::Settled;
use serde::{Deserialize, Serialize};

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
    /// the count exactly (`ASide::counted`).
    Counted,
}

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
    pub(super) fn bump(&mut self, k: Kind, n: u64) {
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

    pub(super) fn add(&mut self, o: &Counts) {
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
pub(super) struct Offenders {
    n: usize,
    kept: [usize; KINDS],
    pub(super) list: Vec<Offender>,
}

impl Offenders {
    pub(super) fn new(n: usize) -> Self {
        Self { n, kept: [0; KINDS], list: vec![] }
    }

    pub(super) fn wants(&self, k: Kind) -> bool {
        self.kept[k as usize] < self.n
    }

    pub(super) fn push(&mut self, o: Offender) {
        if self.wants(o.kind) {
            self.kept[o.kind as usize] += 1;
            self.list.push(o);
        }
    }

    pub(super) fn extend(&mut self, other: Offenders) {
        for o in other.list {
            self.push(o);
        }
    }
}

pub(super) fn offender(
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pos {
    pub b_seq: u64,
    /// The origin sequence in A; none for a direct publish.
    pub origin: Option<u64>,
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
    /// Durables on A that the migration did not move (created by an
    /// application after the plan): they receive nothing new on A, so the
    /// migration does not hold while any is there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stranded: Vec<String>,
}
