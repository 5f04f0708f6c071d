//! Strategy `dual-write` (docs/protocol.md, *Dual-write*): B has subjects of
//! its own; publishers that follow the protocol write each message to A and
//! to B with the same `Nats-Msg-Id` while the runner says so, then to B only.
//!
//! Pure decisions: how a subject of A maps to B's ([`SubjectMap`]), the
//! publisher record the runner writes and the registration publishers write,
//! where a consumer's new durable starts on B ([`start_after`]) and what the
//! proof that B holds every id A received since dual-writing began finds
//! ([`missing_in_b`]).

use crate::compat::{self, Report, Verdict};
use crate::model::{
    nanos, ConsumerInfo, RetentionPolicy, StreamConfig, StreamInfo, SubjectTransform,
};
use crate::plan::{self, ConsumerPlan, Mode, Plan, PlanError, PlanRequest, ServerFacts, Strategy};
use crate::subject;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::time::Duration;

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

/// The plan of a dual-write migration (`plan::build` calls it): B created with
/// subjects of its own and an explicit duplicate window; the consumers'
/// filters mapped to B's subjects; the publishers registered.
pub(crate) fn build_plan(req: &PlanRequest, facts: &ServerFacts) -> Result<Plan, PlanError> {
    plan::refuse_early(req, facts)?;
    let a: StreamInfo = plan::parse("stream", &facts.a_raw)?;
    let horizon = plan::retry_horizon(req, &a);
    let (b_config, b_subjects, b_exists) = plan::planned_b(req, facts, horizon)?;
    let b_view: StreamConfig = plan::parse("planned stream B", &b_config)?;
    let mut r = Report::new();
    r.add("plan", "strategy", "dual-write", "", Verdict::ChangedOnPurpose, WHEN);
    let map = rule_subjects(&mut r, &a.config.subjects, &b_subjects, b_exists);
    compat::check_against_server(&mut r, &a, &b_view, &b_subjects, &facts.checks);
    let dw = rule_b(&mut r, req, &a, &b_view);
    rule_publishers(&mut r, req, facts);
    let consumers = plan_consumers(&mut r, facts, map.as_ref())?;
    let safe = !r.findings.iter().any(|f| f.verdict == Verdict::Unsafe);
    let features = facts.version.features();
    Ok(Plan {
        format: plan::PLAN_FORMAT,
        from: req.from.clone(),
        to: req.to.clone(),
        strategy: Strategy::DualWrite,
        mode: req.mode,
        server_version: facts.version,
        features,
        relies_on: vec!["publishers and consumers that follow docs/protocol.md (dual-write): the publisher record, the idempotency guard".into()],
        b_exists,
        steps: steps(req, &b_subjects, &consumers, dw),
        b_config,
        b_final_subjects: b_subjects,
        consumers,
        findings: r.findings,
        checkpoint_rule: "F = the old consumer's ack floor (or its delivered sequence when nothing is ack-pending) once it is at or past the dual point; the new durable starts at the first B message whose msg-id is not among A's ids up to F; B messages after it that were processed from A are skipped by the idempotency guard".into(),
        timer_note: "no timer decides: publishers acknowledge each change of the record, and the proof compares ids".into(),
        quiescence: vec![],
        publishers_stopped: req.publishers_stopped,
        retry_horizon_ms: horizon.as_millis() as u64,
        promote_with: Default::default(),
        in_place: None,
        new_version: req.new_version.clone(),
        external: None,
        across: req.across,
        a_ingest: facts.checks.a_ingest,
        safe,
    })
}

/// When dual-write is the right choice, and when it is not (the plan says it).
const WHEN: &str = "B takes publishes of its own subjects from the start and gets no copy of A: use it when B cannot source A (another account or system, other subjects, a new subject layout) and every publisher links a library that follows docs/protocol.md (dual-write); every consumer of A must use the idempotency guard while old and new run side by side. B in another account or system needs no export or import: give `run` the source side's connection too (--from-server or --from-context) and the publishers a connection to each side. It is not the right choice when B can source A on the same server with A's subjects (strategy source or mirror: exact without any application change), when some publisher cannot be changed (it would write A only), or when A's history must be in B (only messages published after dual-writing began are)";

/// B's settings dual-write rests on, and the mode: both streams keep their
/// messages, B has an explicit duplicate window and reads nothing of A.
/// Returns B's window.
fn rule_b(r: &mut Report, req: &PlanRequest, a: &StreamInfo, b: &StreamConfig) -> Duration {
    for (name, ret) in [("A", &a.config.retention), ("B", &b.retention)] {
        if *ret != RetentionPolicy::Limits {
            r.add("stream", "retention", ret, "", Verdict::Unsafe, format!("dual-write proves by msg-id that B holds what A received and verify matches both streams by id: {name} must keep its messages (limits retention)"));
        }
    }
    let dw = nanos(b.duplicate_window);
    if dw.is_zero() {
        r.add("stream", "duplicate_window", "", "0s", Verdict::Unsafe, "B needs an explicit duplicate window: a publisher retries each side with the same msg-id, and only the window makes a retry land once (leave duplicate_window out of --to-config, or give it a duration)");
    } else {
        r.add("stream", "duplicate_window", "", format!("{dw:?}"), Verdict::ChangedOnPurpose, "set explicitly on B: a publisher retries each side with the same msg-id, and the window makes a retry land once");
    }
    if !b.sources.is_empty() || b.mirror.is_some() {
        r.add("stream", "sources", "", "", Verdict::Unsafe, "dual-write's B takes publishes of its own subjects and must not source or mirror A (the publishers write it): leave sources and mirror out, or use strategy source or mirror");
    }
    if req.mode != Mode::Drain {
        r.add("plan", "mode", req.mode.as_str(), "", Verdict::Unsafe, "dual-write has its own consumer handoff (old and new consumers side by side, guarded by ids): leave --mode out");
    }
    if req.external.is_some() {
        r.add("plan", "external", "", "", Verdict::Unsafe, "dual-write's B does not source A, so it has no external block: leave --from-api and --from-deliver out (across systems give only the source side's connection, --from-server or --from-context)");
    }
    if req.across {
        r.add(
            "plan",
            "sides",
            format!("{} on the source side", req.from),
            format!("{} on the target side", req.to),
            Verdict::ChangedOnPurpose,
            SIDES,
        );
    }
    dw
}

/// Which side does what in a dual-write across systems (the plan says it).
const SIDES: &str = "across systems: the source side (--from-server/--from-context) holds A: the runner reads there A's msg-ids since dual-writing began, A's durables and how far they processed, and seals A and retires the old durables there; the target side (--server/--context) holds B: B and the new durables are created there, the proof reads B's ids there, and the journal, the lease and the publisher record pub.<A> live there (KV bucket CUTOVER). Publishers hold a connection to each side (DualPublisher::start_across) and register on the target side. No export or import between the systems is needed: nothing crosses the boundary, the publishers write each side themselves";

/// The registered publishers (read on the target side, where the record is).
fn rule_publishers(r: &mut Report, req: &PlanRequest, facts: &ServerFacts) {
    match facts.checks.live_publishers {
        Some(0) => r.add("plan", "publishers", "0 live", "", Verdict::Unsafe, format!("no live publisher of {} is registered (pubi.{}.* in KV bucket CUTOVER{}): dual-write needs publishers that follow docs/protocol.md (our library's, or your own); a publisher that does not would write A only and the proof would fail", req.from, req.from, if req.across { " on the target side" } else { "" })),
        Some(n) => r.add("plan", "publishers", format!("{n} live"), "", Verdict::Ok, "registered publishers follow the publisher record; every publisher of A must"),
        None => {}
    }
}

fn rule_subjects(r: &mut Report, a: &[String], b: &[String], b_exists: bool) -> Option<SubjectMap> {
    if b_exists {
        r.add("stream", "exists", "", "", Verdict::Unsafe, "dual-write creates B itself (subjects of its own, explicit duplicate window): delete it or pick another --to");
    }
    if b.is_empty() || b == a {
        r.add("stream", "subjects", a.join(","), b.join(","), Verdict::Unsafe, "dual-write needs B's own subjects, one per subject of A in the same order (--to-config {\"subjects\": [...]}), e.g. v2.orders.> for orders.>");
        return None;
    }
    for (x, y) in a.iter().flat_map(|x| b.iter().map(move |y| (x, y))) {
        if subject::overlaps(x, y) {
            r.add("stream", "subjects", x, y, Verdict::Unsafe, format!("B's subject {y} overlaps A's {x}: two streams cannot share subjects (error 10065); give B subjects of its own"));
            return None;
        }
    }
    match SubjectMap::new(a, b) {
        Ok(m) => {
            r.add("stream", "subjects", a.join(","), b.join(","), Verdict::ChangedOnPurpose, "publishers write each message to A's subject and to its pair on B while dual-writing, then to B's only");
            Some(m)
        }
        Err(e) => {
            r.add("stream", "subjects", a.join(","), b.join(","), Verdict::Unsafe, e);
            None
        }
    }
}

fn plan_consumers(
    r: &mut Report,
    facts: &ServerFacts,
    map: Option<&SubjectMap>,
) -> Result<Vec<ConsumerPlan>, PlanError> {
    let mut out = vec![];
    for raw in &facts.consumers_raw {
        let c: ConsumerInfo = plan::parse("consumer", raw)?;
        let scope = format!("consumer {}", c.name);
        if c.config.is_push() {
            r.add(
                &scope,
                "deliver_subject",
                "push",
                "",
                Verdict::Unsafe,
                "dual-write runs the old and the new consumer side by side: pull consumers only",
            );
            continue;
        }
        let a_filters = c.config.filters();
        let Some(map) = map else { continue };
        let b_filters: Option<Vec<String>> = if a_filters.is_empty() {
            Some(vec![])
        } else {
            a_filters.iter().map(|f| map.map(f)).collect()
        };
        let Some(b_filters) = b_filters else {
            r.add(&scope, "filter", a_filters.join(","), "", Verdict::Unsafe, "the filter does not map to B's subjects (no pair of A's subjects covers it): change the filter or B's subjects");
            continue;
        };
        r.add(
            &scope,
            "filter",
            a_filters.join(","),
            b_filters.join(","),
            Verdict::Ok,
            "the same messages, with B's subjects",
        );
        let old_cfg = raw.get("config").cloned().unwrap_or(serde_json::Value::Null);
        out.push(ConsumerPlan {
            name: c.name.clone(),
            push: false,
            b_config: plan::b_consumer_config(&old_cfg, &b_filters, false),
            a_filters: Some(a_filters),
            b_filters,
        });
    }
    Ok(out)
}

fn steps(
    req: &PlanRequest,
    b_subjects: &[String],
    consumers: &[ConsumerPlan],
    dw: Duration,
) -> Vec<plan::Step> {
    let (a, b) = (&req.from, &req.to);
    // Across systems each step names the side it acts on.
    let (on_a, on_b) = if req.across { (" (source side)", " (target side)") } else { ("", "") };
    let mut steps = vec![];
    let mut add = |title: &str, detail: String| {
        let n = steps.len() as u32 + 1;
        steps.push(plan::Step { n, title: title.into(), detail });
    };
    add("validate", "check every setting as in this report; refuse before the first write if anything is unsafe".into());
    add(
        "journal",
        format!(
            "record the migration in KV bucket CUTOVER{on_b}, take the lease on the source stream"
        ),
    );
    add(
        "create B",
        format!(
            "create {b}{on_b} with subjects {b_subjects:?} and duplicate_window {dw:?}; no copy of {a}"
        ),
    );
    add("dual-write", format!("journal {a}'s last sequence, write pub.{a} (writes: dual), wait until every live registered publisher acknowledged it; the dual point P = {a}'s last sequence then; prove that {b}{on_b} holds the msg-id of every message {a}{on_a} stored after P"));
    for c in consumers {
        add(&format!("move consumer {}", c.name), format!("wait until {a}/{n}'s{on_a} ack floor F is at or past P; start durable {n} on {b}{on_b} at the first message whose msg-id is not one of {a}'s up to F; publish the route; the old consumer keeps running beside it (both guarded by msg-id)", n = c.name));
    }
    add("commit point: stop writes to A", format!("prove again that {b}{on_b} holds every id {a}{on_a} stored since the last proof; journal the commit, write pub.{a} (writes: b), wait until every live publisher acknowledged it, then seal {a}{on_a} (a stray publish to it fails instead of going unread)"));
    add("retire", format!("wait until the old consumers acknowledged everything {a} holds, then delete them; keep {a} unless --delete-old"));
    steps
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

    #[test]
    fn the_plan_pairs_subjects_maps_filters_and_explains_the_choice() {
        use crate::plan::{build, PlanRequest};
        use serde_json::json;
        let a = json!({"name": "A", "subjects": ["orders.*.new"], "retention": "limits", "duplicate_window": 120_000_000_000i64});
        let c = json!({"name": "C", "config": {"durable_name": "C", "ack_policy": "explicit", "filter_subject": "orders.eu.new"}});
        let mut facts = one_consumer_facts(a, c);
        facts.checks.live_publishers = Some(2);
        let mut req = PlanRequest::source("A", "B", &["C"]);
        req.strategy = Strategy::DualWrite;
        req.to_config = json!({"subjects": ["v2.orders.*"]}).as_object().cloned();
        let p = build(&req, &facts).unwrap();
        assert!(p.safe, "{}", p.unsafe_reasons());
        assert_eq!(p.b_config["subjects"], json!(["v2.orders.*"]));
        assert!(p.b_config.get("sources").is_none() && p.b_config.get("mirror").is_none());
        assert_eq!(p.b_config["duplicate_window"], json!(120_000_000_000i64));
        assert_eq!(p.consumers[0].b_filters, vec!["v2.orders.eu".to_string()]);
        let why = p.findings.iter().find(|f| f.setting == "strategy").unwrap();
        assert!(
            why.reason.contains("another account or system")
                && why.reason.contains("not the right choice")
        );
        facts.checks.live_publishers = Some(0);
        let p = build(&req, &facts).unwrap();
        assert!(!p.safe && p.unsafe_reasons().contains("no live publisher of A"));
    }

    /// A 2.15.1 server with stream `a` (one message) and consumer `c`.
    fn one_consumer_facts(a: serde_json::Value, c: serde_json::Value) -> crate::plan::ServerFacts {
        crate::plan::ServerFacts {
            version: crate::version::ServerVersion::new(2, 15, 1),
            a_raw: serde_json::json!({"config": a, "state": {"messages": 1, "bytes": 1, "first_seq": 1, "last_seq": 1}}),
            b_raw: None,
            consumers_raw: vec![c],
            other_consumers: vec![],
            downstream: vec![],
            account: None,
            checks: Default::default(),
        }
    }

    #[test]
    fn across_systems_the_plan_names_the_sides_and_refuses_what_dual_write_cannot_use() {
        use crate::plan::{build, External, PlanRequest};
        use serde_json::json;
        let a = json!({"name": "A", "subjects": ["orders.>"], "retention": "limits", "duplicate_window": 120_000_000_000i64});
        let c = json!({"name": "C", "config": {"durable_name": "C", "ack_policy": "explicit"}});
        let mut facts = one_consumer_facts(a, c);
        facts.checks.live_publishers = Some(1);
        let mut req = PlanRequest::source("A", "B", &["C"]);
        req.strategy = Strategy::DualWrite;
        req.across = true;
        req.to_config = json!({"subjects": ["v2.orders.>"]}).as_object().cloned();
        let p = build(&req, &facts).unwrap();
        assert!(p.safe, "{}", p.unsafe_reasons());
        assert!(p.across && p.external.is_none());
        let sides = p.findings.iter().find(|f| f.setting == "sides").expect("the sides named");
        assert!(sides.reason.contains("source side") && sides.reason.contains("target side"));
        assert!(sides.reason.contains("No export or import"));
        assert!(p.steps.iter().any(|s| s.detail.contains("B (target side)")));
        assert!(p.b_config.get("sources").is_none() && p.b_config.get("mirror").is_none());
        // A B that would source A (an external block), and no duplicate window.
        let ext = External {
            api: "JS.SRC.API".into(),
            deliver: None,
            repoint_publishers: false,
            split_publishers: false,
        };
        let bad = PlanRequest { external: Some(ext), ..req.clone() };
        let p = build(&bad, &facts).unwrap();
        assert!(p.unsafe_findings().any(|f| f.setting == "external"), "{}", p.unsafe_reasons());
        let mut bad = req.clone();
        bad.to_config =
            json!({"subjects": ["v2.orders.>"], "duplicate_window": 0}).as_object().cloned();
        let p = build(&bad, &facts).unwrap();
        let why = p.unsafe_reasons();
        assert!(why.contains("explicit duplicate window"), "{why}");
        // On one system nothing names sides.
        req.across = false;
        let p = build(&req, &facts).unwrap();
        assert!(!p.across && !p.findings.iter().any(|f| f.setting == "sides"));
    }
}
