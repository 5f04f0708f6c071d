//! Strategy `dual-write` (docs/protocol.md, *Dual-write*): B has subjects of
//! its own; publishers that follow the protocol write each message to A and
//! to B with the same `Nats-Msg-Id` while the runner says so, then to B only.
//!
//! Pure decisions: how a subject of A maps to B's ([`SubjectMap`]), the
//! publisher record the runner writes and the registration publishers write,
//! where a consumer's new durable starts on B ([`start_after`]) and what the
//! proof that B holds every id A received since dual-writing began finds
//! ([`missing_in_b`]). The plan of a dual-write migration is
//! `crate::plan`'s (`plan/dual.rs`).

use crate::model::SubjectTransform;
use crate::subject;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// The publisher record's key: `pub.<FROM>`.
pub fn publisher_key(from: &str) -> String {
    format!("pub.{from}")
}

/// A publisher instance's registration: `pubi.<FROM>.<INSTANCE>`.
pub fn publisher_instance_key(from: &str, instance: &str) -> String {
    format!("pubi.{from}.{instance}")
}

/// The key prefix of every publisher registration of `from`.
pub fn publisher_instance_prefix(from: &str) -> String {
    format!("pubi.{from}.")
}

pub const PUBLISHER_VERSION: u32 = 1;

/// Where publishers write (absent record: A only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Writes {
    /// A only (what a publisher does without a record).
    A,
    /// Each message to A and to B (subject mapped), the same msg-id.
    Dual,
    /// B only (subject mapped): the commit point.
    B,
}

impl Writes {
    pub fn as_str(self) -> &'static str {
        match self {
            Writes::A => "a",
            Writes::Dual => "dual",
            Writes::B => "b",
        }
    }
}

/// The runner's record at [`publisher_key`] (docs/protocol.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublisherRecord {
    pub version: u32,
    pub migration: String,
    pub from: String,
    pub to: String,
    pub writes: Writes,
    /// `[A's subject pattern, B's subject pattern]` pairs: a subject is
    /// published to B as the first pair whose A pattern matches maps it
    /// (wildcards carried in order).
    pub subjects: Vec<(String, String)>,
    #[serde(default)]
    pub updated_ms: u64,
}

/// What a publisher acknowledges: from now on every publish it starts follows
/// `writes` of `migration`, and every publish it started before has finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritesAck {
    pub migration: String,
    pub writes: Writes,
}

/// A publisher instance's registration at [`publisher_instance_key`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublisherRegistration {
    pub version: u32,
    pub instance: String,
    #[serde(default)]
    pub app_version: String,
    #[serde(default)]
    pub lang: String,
    /// The stream it publishes to without a record (FROM).
    pub stream: String,
    /// What it does now; `None` before any record.
    #[serde(default)]
    pub ack: Option<WritesAck>,
    pub ttl_ms: u64,
    #[serde(default)]
    pub heartbeat_ms: u64,
}

/// A's subject patterns paired with B's: the same wildcards in the same
/// order, literal tokens free.
#[derive(Debug, Clone, PartialEq)]
pub struct SubjectMap {
    pairs: Vec<SubjectTransform>,
}

impl SubjectMap {
    /// Pairs `a[i]` with `b[i]`; refused (with why) unless both lists have
    /// the same length and each pair the same wildcards in the same order.
    pub fn new(a: &[String], b: &[String]) -> Result<Self, String> {
        if a.len() != b.len() || a.is_empty() {
            return Err(format!(
                "B's subjects {b:?} must pair one to one with A's {a:?} (the same number, in the same order): each of A's subjects is published to B as its pair"
            ));
        }
        let wild = |s: &str| -> Vec<String> {
            s.split('.').filter(|t| *t == "*" || *t == ">").map(String::from).collect()
        };
        for (x, y) in a.iter().zip(b) {
            if wild(x) != wild(y) {
                return Err(format!(
                    "A's subject {x} and B's {y} must have the same wildcards in the same order (literal tokens may differ): a publish to {x} is written to B as {y}"
                ));
            }
        }
        Ok(Self {
            pairs: a
                .iter()
                .zip(b)
                .map(|(x, y)| SubjectTransform { src: x.clone(), dest: y.clone() })
                .collect(),
        })
    }

    pub fn from_pairs(pairs: &[(String, String)]) -> Result<Self, String> {
        let (a, b): (Vec<String>, Vec<String>) = pairs.iter().cloned().unzip();
        Self::new(&a, &b)
    }

    pub fn pairs(&self) -> Vec<(String, String)> {
        self.pairs.iter().map(|t| (t.src.clone(), t.dest.clone())).collect()
    }

    /// B's subject for a subject (or filter) of A; `None` when no pattern of
    /// A covers it.
    pub fn map(&self, subject: &str) -> Option<String> {
        subject::map_filter_through(subject, &self.pairs)
            .filter(|_| self.pairs.iter().any(|t| subject::covers(&t.src, subject)))
    }
}

/// The first sequence of B (in `b`, read in order: `(seq, msg-id)`) whose id
/// the old consumer did not process (`processed`: the ids of A's messages up
/// to its ack floor that may be in B). Every B message before it was
/// processed from A; after it, a message processed from A may still come
/// (B's order is not A's under concurrent publishers): the idempotency guard
/// skips those. `None`: every id B holds so far was processed (start after
/// B's last sequence).
pub fn start_after(
    processed: &HashSet<String>,
    b: impl IntoIterator<Item = (u64, String)>,
) -> Option<u64> {
    b.into_iter().find(|(_, id)| !processed.contains(id)).map(|(s, _)| s)
}

/// The proof of dual-writing: the ids of A's messages after the dual point
/// (`a`: `(seq, msg-id)`, a message without an id is missing by definition:
/// the protocol's publishers always send one) that B does not hold.
pub fn missing_in_b(
    a: impl IntoIterator<Item = (u64, Option<String>)>,
    b_ids: &HashSet<String>,
) -> Vec<u64> {
    a.into_iter()
        .filter(|(_, id)| id.as_ref().is_none_or(|id| !b_ids.contains(id)))
        .map(|(s, _)| s)
        .collect()
}

/// A stored message as dual-write verification reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Msg {
    pub seq: u64,
    pub subject: String,
    pub id: Option<String>,
}

/// One moved consumer as the journal recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Handoff {
    pub name: String,
    /// F: the old durable had processed A up to it.
    pub checkpoint: u64,
    /// S: the new durable's first sequence on B.
    pub b_start: u64,
    pub a_filters: Vec<String>,
    pub b_filters: Vec<String>,
}

/// What dual-write verification found for one consumer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandoffReport {
    pub name: String,
    pub checkpoint: u64,
    pub b_start: u64,
    /// A's messages up to F it selects: processed from the old durable.
    pub old: u64,
    /// B's messages from S on it selects whose id is not one of those:
    /// delivered by the new durable.
    pub new: u64,
    /// B's messages from S on whose id was processed from A up to F: the new
    /// durable delivers them again, and the idempotency guard must skip
    /// them (not an error: the protocol requires the guard).
    pub guarded: u64,
    /// Messages neither side delivers: of A after F without a copy in B at
    /// or after S, or of B only (no copy in A) before S.
    pub lost: u64,
    /// The first lost ones: `(stream, seq, msg-id)`.
    pub first_lost: Vec<(String, u64, String)>,
}

/// The verification of a dual-write migration: by msg-id, since B's
/// messages are the publishers' own, not copies of A's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DualReport {
    pub migration: String,
    pub from: String,
    pub to: String,
    pub holds: bool,
    /// The dual point P.
    pub point: u64,
    /// A's messages after P (each must be in B).
    pub a_after_point: u64,
    /// Those without a copy in B.
    pub missing_in_b: u64,
    pub first_missing: Vec<u64>,
    /// A's and B's messages read.
    pub read: (u64, u64),
    pub consumers: Vec<HandoffReport>,
}

/// Judges a dual-write migration from everything A and B hold (`a`, `b` in
/// sequence order). Ids are kept in maps: dual-write streams are matched by
/// id, which no sequence set can do.
pub fn judge(
    (migration, from, to): (&str, &str, &str),
    point: u64,
    a: &[Msg],
    b: &[Msg],
    handoffs: &[Handoff],
    first_n: usize,
) -> DualReport {
    let b_seq: std::collections::HashMap<&str, u64> =
        b.iter().filter_map(|m| m.id.as_deref().map(|id| (id, m.seq))).collect();
    let a_seq: std::collections::HashMap<&str, u64> =
        a.iter().filter_map(|m| m.id.as_deref().map(|id| (id, m.seq))).collect();
    let after: Vec<&Msg> = a.iter().filter(|m| m.seq > point).collect();
    let missing: Vec<u64> = after
        .iter()
        .filter(|m| m.id.as_deref().is_none_or(|id| !b_seq.contains_key(id)))
        .map(|m| m.seq)
        .collect();
    let consumers: Vec<HandoffReport> = handoffs
        .iter()
        .map(|h| judge_one(h, a, b, (&a_seq, &b_seq), (from, to), first_n))
        .collect();
    DualReport {
        migration: migration.into(),
        from: from.into(),
        to: to.into(),
        holds: missing.is_empty() && consumers.iter().all(|c| c.lost == 0),
        point,
        a_after_point: after.len() as u64,
        missing_in_b: missing.len() as u64,
        first_missing: missing.into_iter().take(first_n).collect(),
        read: (a.len() as u64, b.len() as u64),
        consumers,
    }
}

type Seqs<'a> = std::collections::HashMap<&'a str, u64>;

fn judge_one(
    h: &Handoff,
    a: &[Msg],
    b: &[Msg],
    (a_seq, b_seq): (&Seqs<'_>, &Seqs<'_>),
    (from, to): (&str, &str),
    first_n: usize,
) -> HandoffReport {
    let (f, s) = (h.checkpoint, h.b_start);
    let mut r = HandoffReport {
        name: h.name.clone(),
        checkpoint: f,
        b_start: s,
        old: 0,
        new: 0,
        guarded: 0,
        lost: 0,
        first_lost: vec![],
    };
    let lose = |r: &mut HandoffReport, stream: &str, m: &Msg| {
        r.lost += 1;
        if r.first_lost.len() < first_n {
            r.first_lost.push((stream.into(), m.seq, m.id.clone().unwrap_or_default()));
        }
    };
    for m in a.iter().filter(|m| subject::selects(&h.a_filters, &m.subject)) {
        if m.seq <= f {
            r.old += 1;
        } else if m.id.as_deref().and_then(|id| b_seq.get(id)).is_none_or(|bs| *bs < s) {
            lose(&mut r, from, m);
        }
    }
    for m in b.iter().filter(|m| subject::selects(&h.b_filters, &m.subject)) {
        let in_a = m.id.as_deref().and_then(|id| a_seq.get(id)).copied();
        match (m.seq >= s, in_a) {
            (true, Some(x)) if x <= f => r.guarded += 1,
            (true, _) => r.new += 1,
            // Before S: processed from A up to F (or judged on A's side).
            (false, Some(_)) => {}
            (false, None) => lose(&mut r, to, m),
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn subjects_map_by_wildcards_in_order() {
        let m = SubjectMap::new(&v(&["orders.*.new", "pay.>"]), &v(&["v2.orders.*", "v2.pay.>"]))
            .unwrap();
        assert_eq!(m.map("orders.eu.new").as_deref(), Some("v2.orders.eu"));
        assert_eq!(m.map("pay.a.b").as_deref(), Some("v2.pay.a.b"));
        assert_eq!(m.map("pay.>").as_deref(), Some("v2.pay.>"));
        assert_eq!(m.map("other.x"), None);
        assert!(SubjectMap::new(&v(&["a.*"]), &v(&["b.>"])).is_err());
        assert!(SubjectMap::new(&v(&["a.*", "c"]), &v(&["b.*"])).is_err());
        let back = SubjectMap::from_pairs(&m.pairs()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn the_start_is_the_first_b_id_not_processed() {
        let processed: HashSet<String> = v(&["1", "2", "4"]).into_iter().collect();
        let b = vec![(1, "2".into()), (2, "1".into()), (3, "3".into()), (4, "4".into())];
        // 4 comes after the start: the guard skips it.
        assert_eq!(start_after(&processed, b.clone()), Some(3));
        assert_eq!(start_after(&processed, b[..2].to_vec()), None);
    }

    #[test]
    fn the_proof_names_what_b_lacks() {
        let b: HashSet<String> = v(&["x", "y"]).into_iter().collect();
        let a =
            vec![(7, Some("x".into())), (8, None), (9, Some("z".into())), (10, Some("y".into()))];
        assert_eq!(missing_in_b(a, &b), vec![8, 9]);
    }

    fn msg(seq: u64, subject: &str, id: &str) -> Msg {
        Msg { seq, subject: subject.into(), id: Some(id.into()) }
    }

    #[test]
    fn verification_counts_old_new_guarded_and_lost() {
        // A: 1..=3 before dual-writing (P = 3), 4..=6 dual (ids d4..d6).
        let a = vec![
            msg(1, "o.x", "a1"),
            msg(2, "o.x", "a2"),
            msg(3, "o.x", "a3"),
            msg(4, "o.x", "d4"),
            msg(5, "o.x", "d5"),
            msg(6, "o.x", "d6"),
        ];
        // B in another order, then B only (b7, b8).
        let b = vec![
            msg(1, "v2.o.x", "d5"),
            msg(2, "v2.o.x", "d4"),
            msg(3, "v2.o.x", "d6"),
            msg(4, "v2.o.x", "b7"),
            msg(5, "v2.o.x", "b8"),
        ];
        // F = 4 (d4 processed from A), S = 1 (d5 is not processed).
        let h = Handoff {
            name: "w".into(),
            checkpoint: 4,
            b_start: 1,
            a_filters: vec![],
            b_filters: vec![],
        };
        let r = judge(("A.B", "A", "B"), 3, &a, &b, std::slice::from_ref(&h), 5);
        assert!(r.holds, "{r:?}");
        let c = &r.consumers[0];
        assert_eq!((c.old, c.new, c.guarded, c.lost), (4, 4, 1, 0));
        assert_eq!((r.a_after_point, r.missing_in_b), (3, 0));
        // A start past d5 loses it; a B copy missing is named.
        let late = Handoff { b_start: 2, ..h.clone() };
        let r = judge(("A.B", "A", "B"), 3, &a, &b[1..], &[late], 5);
        assert!(!r.holds);
        assert_eq!(r.missing_in_b, 1);
        assert_eq!(r.first_missing, vec![5]);
        assert_eq!(r.consumers[0].first_lost, vec![("A".to_string(), 5, "d5".to_string())]);
    }
}
