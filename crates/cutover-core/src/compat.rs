//! The compatibility report: every stream and consumer setting that decides whether
//! the cut-over can be exact, each judged ok / changed on purpose / unsafe, with
//! the reason. A plan with any unsafe finding is refused before the first write.

use crate::model::{
    nanos, AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy, DiscardPolicy, ReplayPolicy,
    RetentionPolicy, StreamConfig, StreamInfo,
};
use crate::subject;
use crate::version::ServerVersion;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Ok,
    ChangedOnPurpose,
    Unsafe,
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::ChangedOnPurpose => "changed-on-purpose",
            Verdict::Unsafe => "unsafe",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// `stream` or `consumer NAME` or `server`.
    pub scope: String,
    pub setting: String,
    pub from: String,
    pub to: String,
    pub verdict: Verdict,
    pub reason: String,
}

pub(crate) struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn new() -> Self {
        Self { findings: vec![] }
    }
    pub fn add(
        &mut self,
        scope: &str,
        setting: &str,
        from: impl ToString,
        to: impl ToString,
        verdict: Verdict,
        reason: impl Into<String>,
    ) {
        self.findings.push(Finding {
            scope: scope.into(),
            setting: setting.into(),
            from: from.to_string(),
            to: to.to_string(),
            verdict,
            reason: reason.into(),
        });
    }
    /// Same value: ok; different: changed on purpose with `why`.
    fn same_or_changed<T: PartialEq + std::fmt::Debug>(
        &mut self,
        scope: &str,
        setting: &str,
        a: T,
        b: T,
        why: &str,
    ) {
        let show = |v: &T| match format!("{v:?}").trim_matches('"') {
            "None" => "-".to_string(),
            s => s.strip_prefix("Some(").and_then(|s| s.strip_suffix(')')).unwrap_or(s).to_string(),
        };
        let (from, to) = (show(&a), show(&b));
        if a == b {
            self.add(scope, setting, from, to, Verdict::Ok, "unchanged");
        } else {
            self.add(scope, setting, from, to, Verdict::ChangedOnPurpose, why);
        }
    }
}

/// The scope of stream-level findings.
pub(crate) const STREAM: &str = "stream";

fn limit(v: i64) -> Option<i64> {
    (v > 0).then_some(v)
}

pub(crate) fn dur(ns: i64) -> String {
    if ns <= 0 {
        "unset".into()
    } else {
        format!("{:?}", nanos(ns))
    }
}

/// Stream-level rules. `b` is B's configuration as it will be while sourcing;
/// `b_final_subjects` the subjects B takes at the commit point. Each rule adds
/// its findings in turn: the order is the report's order.
pub(crate) fn check_streams(
    r: &mut Report,
    a: &StreamInfo,
    b: &StreamConfig,
    b_final_subjects: &[String],
    b_exists: bool,
    retry_horizon: Duration,
    version: ServerVersion,
) {
    let ac = &a.config;
    rule_a_takes_publishes(r, ac);
    rule_subjects(r, ac, b, b_final_subjects, b_exists);
    rule_sources(r, ac, b);
    rule_retention(r, ac, b);
    rule_limits(r, a, b);
    rule_max_age(r, ac, b);
    rule_discard(r, ac, b);
    rule_max_msg_size(r, ac, b);
    rule_duplicate_window(r, ac, b, retry_horizon, version);
    rule_sourced_msg_id_dedup(r, version);
    rule_carried_settings(r, ac, b);
    rule_b_not_sealed(r, b);
    rule_allow_direct(r, ac, b);
    rule_retention_sourcing(r, ac, b, version);
}

/// A must be a stream publishers write to, whose subjects can be released.
fn rule_a_takes_publishes(r: &mut Report, ac: &StreamConfig) {
    let s = STREAM;
    if ac.mirror.is_some() {
        r.add(s, "mirror", "A is a mirror", "", Verdict::Unsafe, "A is a mirror and takes no publishes; promote it first (mirror promotion needs 2.12) or migrate its origin");
    }
    if ac.sealed {
        r.add(s, "sealed", "true", "", Verdict::Unsafe, "A is sealed: its subjects cannot be released; nothing publishes to it, so move the consumers with a plain new durable instead");
    }
    if ac.subject_transform.is_some() {
        r.add(s, "subject_transform", "set on A", "", Verdict::Unsafe, "A rewrites subjects on ingest; B would have to repeat it for direct publishes after the cut-over, which this version does not plan; remove the transform or migrate by hand");
    }
}

/// Publishers keep publishing to A's subjects, so B must take all of them, and
/// only at the commit point.
fn rule_subjects(
    r: &mut Report,
    ac: &StreamConfig,
    b: &StreamConfig,
    b_final_subjects: &[String],
    b_exists: bool,
) {
    let s = STREAM;
    for subj in &ac.subjects {
        if !b_final_subjects.iter().any(|bs| subject::covers(bs, subj)) {
            r.add(s, "subjects", subj, b_final_subjects.join(","), Verdict::Unsafe, format!("publishers to {subj} would find no stream after the cut-over: B's subjects must cover every subject of A"));
        }
    }
    if b_final_subjects != ac.subjects.as_slice() {
        r.add(
            s,
            "subjects",
            ac.subjects.join(","),
            b_final_subjects.join(","),
            Verdict::ChangedOnPurpose,
            "B takes these subjects at the commit point",
        );
    } else {
        r.add(s, "subjects", ac.subjects.join(","), b_final_subjects.join(","), Verdict::Ok, "B takes A's subjects at the commit point, after A releases them (two streams cannot share subjects, error 10065)");
    }
    if b_exists && !b.subjects.is_empty() {
        r.add(s, "subjects", "", b.subjects.join(","), Verdict::Unsafe, "B already takes direct publishes: they would interleave with A's history and the checkpoint could not be translated by origin sequence; give B no subjects until the cut-over");
    }
}

/// A subject transform of B's own rewrites the copies of A's messages too; the
/// moved consumers' filters are mapped only through the transform of B's
/// source, so the two must be the same mapping (or B has none), else a
/// filtered consumer would select none of its messages on B.
fn rule_b_subject_transform(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let Some(t) = &b.subject_transform else { return };
    let matched =
        b.sources.iter().find(|x| x.name == ac.name).is_some_and(|src| {
            src.subject_transforms.len() == 1 && src.subject_transforms[0] == *t
        });
    if !matched {
        r.add(STREAM, "subject_transform", "", format!("{} -> {}", t.src, t.dest), Verdict::Unsafe, "B's subject_transform would rewrite the subjects of A's messages as B stores them, and the moved consumers' filters would no longer select them; remove it, or create B yourself with the same mapping on its source of A");
    }
}

/// B sources exactly A, so every message in B carries an origin sequence of A.
fn rule_sources(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let s = STREAM;
    rule_b_subject_transform(r, ac, b);
    if let Some(m) = &b.mirror {
        rule_mirror(r, ac, b, m);
        return;
    }
    let sources_a: Vec<_> = b.sources.iter().filter(|x| x.name == ac.name).collect();
    if sources_a.len() != 1 || b.sources.len() != 1 || b.mirror.is_some() {
        r.add(s, "sources", "", b.sources.iter().map(|x| x.name.clone()).collect::<Vec<_>>().join(","), Verdict::Unsafe, format!("B must source exactly one stream, {}, and nothing else, so that every message in B carries an origin sequence of A", ac.name));
    } else {
        let src = sources_a[0];
        if src.opt_start_seq.is_some_and(|x| x > 1) {
            r.add(s, "sources.opt_start_seq", "", src.opt_start_seq.unwrap(), Verdict::ChangedOnPurpose, "B starts sourcing mid-stream: consumers whose checkpoint lies before it cannot be translated and are refused at run time");
        } else {
            r.add(s, "sources", "", ac.name.clone(), Verdict::Ok, "B sources A; every sourced message carries Nats-Stream-Source with its origin sequence");
        }
        // Sourced messages get B-side subjects through the source transform; after
        // the cut-over, direct publishes must get the same ones, or the moved
        // consumers' mapped filters silently miss them.
        if !src.subject_transforms.is_empty() {
            let same = src.subject_transforms.len() == 1
                && b.subject_transform.as_ref() == Some(&src.subject_transforms[0]);
            if !same {
                r.add(s, "sources.subject_transforms", "", format!("{} -> {}", src.subject_transforms[0].src, src.subject_transforms[0].dest), Verdict::Unsafe, "B's source rewrites subjects but B has no identical stream subject_transform: after the cut-over, direct publishes would keep their original subjects and the moved consumers' filters would miss them; give B the same mapping as its subject_transform");
            }
        }
    }
}

/// B reaches A across systems exactly as the migration was planned
/// (`across`: the plan's `external` block), or not at all.
pub(crate) fn check_external(r: &mut Report, b: &StreamConfig, across: Option<&Value>) {
    let (setting, has) = match &b.mirror {
        Some(m) => ("mirror.external", m.external.as_ref()),
        None => ("sources.external", b.sources.first().and_then(|s| s.external.as_ref())),
    };
    let has = has.filter(|v| !v.is_null());
    match (has, across) {
        (None, None) => {}
        (Some(h), Some(a)) if h == a => r.add(STREAM, setting, "", h.to_string(), Verdict::ChangedOnPurpose, "B reaches A on the source side's system through this API prefix (a move across systems: docs/cross-system.md)"),
        (Some(h), _) => r.add(STREAM, setting, "", h.to_string(), Verdict::Unsafe, "B reaches A on another system through another way than this migration's: plan the move across systems with the source side's connection (--from-server or --from-context) and --from-api naming this prefix"),
        (None, Some(a)) => r.add(STREAM, setting, "", a.to_string(), Verdict::Unsafe, "B exists and reads A on its own system, but this migration crosses systems: give B the external block of the plan, or let the run create B"),
    }
}

/// Strategy mirror: B mirrors exactly A, whole and unchanged, so its sequences
/// are A's.
fn rule_mirror(
    r: &mut Report,
    ac: &StreamConfig,
    b: &StreamConfig,
    m: &crate::model::StreamSource,
) {
    let s = STREAM;
    let whole = m.filter_subject.as_deref().is_none_or(|f| f.is_empty() || f == ">")
        && m.subject_transforms.is_empty()
        && m.opt_start_seq.is_none_or(|x| x <= 1);
    if m.name != ac.name || !b.sources.is_empty() {
        r.add(
            s,
            "mirror",
            "",
            &m.name,
            Verdict::Unsafe,
            format!("B must mirror {} and source nothing", ac.name),
        );
    } else if !whole {
        r.add(s, "mirror", "", &m.name, Verdict::Unsafe, "B's mirror filters, transforms or starts mid-stream: its sequences would not be A's whole history; mirror all of A");
    } else {
        r.add(
            s,
            "mirror",
            "",
            &m.name,
            Verdict::Ok,
            "B mirrors A: same sequences, the checkpoint carries over unchanged",
        );
    }
}

/// Retention may change, but B must not drop what nobody is subscribed to yet.
fn rule_retention(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let s = STREAM;
    match (&ac.retention, &b.retention) {
        (x, y) if x == y => r.add(s, "retention", x, y, Verdict::Ok, "unchanged"),
        (_, RetentionPolicy::Interest) => r.add(s, "retention", &ac.retention, &b.retention, Verdict::Unsafe, "an interest stream drops messages nobody is subscribed to; until the new consumer exists on B every sourced message would be dropped; create B with limits retention"),
        (x, y) => r.add(s, "retention", x, y, Verdict::ChangedOnPurpose, "retention changes with the new stream (the reason to migrate)"),
    }
    if b.retention == RetentionPolicy::Interest && ac.retention == RetentionPolicy::Interest {
        r.findings.pop();
        r.add(s, "retention", "interest", "interest", Verdict::Unsafe, "an interest stream drops messages nobody is subscribed to; until the new consumer exists on B every sourced message would be dropped; create B with limits retention");
    }
}

/// Limits that could drop messages not consumed yet.
fn rule_limits(r: &mut Report, a: &StreamInfo, b: &StreamConfig) {
    let ac = &a.config;
    for (name, av, bv) in [
        ("max_msgs", ac.max_msgs, b.max_msgs),
        ("max_bytes", ac.max_bytes, b.max_bytes),
        ("max_msgs_per_subject", ac.max_msgs_per_subject, b.max_msgs_per_subject),
    ] {
        rule_limit(r, a, b, name, av, bv);
    }
}

/// One count or size limit: A's value `av` against B's `bv`.
fn rule_limit(r: &mut Report, a: &StreamInfo, b: &StreamConfig, name: &str, av: i64, bv: i64) {
    let s = STREAM;
    match (limit(av), limit(bv)) {
        (_, None) => r.add(
            s,
            name,
            av,
            bv,
            if limit(av).is_some() { Verdict::ChangedOnPurpose } else { Verdict::Ok },
            if limit(av).is_some() { "B keeps more than A" } else { "unlimited" },
        ),
        (Some(x), Some(y)) if y >= x => r.add(
            s,
            name,
            av,
            bv,
            if x == y { Verdict::Ok } else { Verdict::ChangedOnPurpose },
            "B keeps at least as much as A",
        ),
        (_, Some(y)) => {
            let now = match name {
                "max_msgs" => a.state.messages as i64,
                "max_bytes" => a.state.bytes as i64,
                _ => -1,
            };
            if now > y || b.discard == DiscardPolicy::New {
                r.add(s, name, av, bv, Verdict::Unsafe, format!("B keeps less than A ({y} vs {}): with discard {} it would {} messages the consumers may not have processed", if av > 0 { av.to_string() } else { "unlimited".into() }, b.discard, if b.discard == DiscardPolicy::New { "refuse sourced" } else { "drop" }));
            } else {
                r.add(
                    s,
                    name,
                    av,
                    bv,
                    Verdict::ChangedOnPurpose,
                    format!(
                        "B keeps less than A but more than A holds now ({now}); watch consumer lag"
                    ),
                );
            }
        }
    }
}

fn rule_max_age(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let s = STREAM;
    match (limit(ac.max_age), limit(b.max_age)) {
        (x, y) if x == y => r.add(s, "max_age", dur(ac.max_age), dur(b.max_age), Verdict::Ok, "unchanged"),
        (_, None) => r.add(s, "max_age", dur(ac.max_age), dur(b.max_age), Verdict::ChangedOnPurpose, "B keeps messages longer"),
        (Some(x), Some(y)) if y >= x => r.add(s, "max_age", dur(ac.max_age), dur(b.max_age), Verdict::ChangedOnPurpose, "B keeps messages longer"),
        _ => r.add(s, "max_age", dur(ac.max_age), dur(b.max_age), Verdict::ChangedOnPurpose, "B keeps messages for less time: a consumer lagging more than that would lose messages; check lag first"),
    }
}

fn rule_discard(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let s = STREAM;
    if b.discard == DiscardPolicy::New
        && [b.max_msgs, b.max_bytes, b.max_msgs_per_subject].iter().any(|v| *v > 0)
    {
        r.add(s, "discard", &ac.discard, &b.discard, Verdict::ChangedOnPurpose, "discard new: when B is full, publishes are refused (publishers see errors, nothing is silently dropped)");
    } else {
        r.same_or_changed(
            s,
            "discard",
            ac.discard.as_str(),
            b.discard.as_str(),
            "discard policy changes",
        );
    }
}

fn rule_max_msg_size(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let s = STREAM;
    // A sourced copy carries the Nats-Stream-Source header, which counts
    // against B's limit (a mirror's copy is the message as it is).
    let growth = b.sources.iter().find(|x| x.name == ac.name).map(|src| {
        let filter = src.filter_subject.as_deref().unwrap_or(">");
        let dest = src.subject_transforms.first().map(|t| t.dest.as_str()).unwrap_or(">");
        crate::source_header::growth(
            &ac.name,
            filter,
            dest,
            &"x".repeat(crate::source_header::longest_subject(&ac.subjects)),
        )
    });
    if limit(b.max_msg_size).is_some()
        && (limit(ac.max_msg_size).is_none() || b.max_msg_size < ac.max_msg_size)
    {
        r.add(s, "max_msg_size", ac.max_msg_size, b.max_msg_size, Verdict::Unsafe, "B refuses messages A accepts: sourcing would stall on the first large message; give B at least A's max_msg_size");
    } else if let (Some(g), true) = (growth, limit(b.max_msg_size).is_some()) {
        let need = ac.max_msg_size + g as i64;
        if b.max_msg_size < need {
            r.add(s, "max_msg_size", ac.max_msg_size, b.max_msg_size, Verdict::Unsafe, format!("B stores each message of A with a Nats-Stream-Source header of up to {g} bytes, which counts against its limit: a message A accepted at its limit would exceed B's and stall sourcing for good at that message; give B a max_msg_size of at least {need} (or none: -1)"));
            return;
        }
        r.same_or_changed(
            s,
            "max_msg_size",
            ac.max_msg_size,
            b.max_msg_size,
            "B accepts larger messages",
        );
    } else {
        r.same_or_changed(
            s,
            "max_msg_size",
            ac.max_msg_size,
            b.max_msg_size,
            "B accepts larger messages",
        );
    }
}

/// The publishers' retries across the subject move land in B, so B needs a
/// duplicate window covering the retry horizon; and B must not drop what A
/// stored: a publisher that reuses a msg-id after A's window has passed gets a
/// new message in A, and a longer window on B would drop its sourced copy.
fn rule_duplicate_window(
    r: &mut Report,
    ac: &StreamConfig,
    b: &StreamConfig,
    retry_horizon: Duration,
    version: ServerVersion,
) {
    let s = STREAM;
    let (aw, bw) = (nanos(ac.duplicate_window), nanos(b.duplicate_window));
    if b.duplicate_window <= 0 || bw < retry_horizon {
        r.add(s, "duplicate_window", dur(ac.duplicate_window), dur(b.duplicate_window), Verdict::Unsafe, format!("B needs an explicit duplicate_window of at least the publishers' retry horizon ({retry_horizon:?}) so that retried publishes land once"));
    } else if ac.duplicate_window > 0 && bw > aw {
        r.add(s, "duplicate_window", dur(ac.duplicate_window), dur(b.duplicate_window), Verdict::Unsafe, format!("B's window is longer than A's: a msg-id reused after {aw:?} is a new message in A but would be dropped as a duplicate in B; give B A's window ({} ns)", ac.duplicate_window));
    } else {
        r.add(s, "duplicate_window", dur(ac.duplicate_window), dur(b.duplicate_window), Verdict::Ok, format!(
            "A's window, explicit: B drops no repeat A stored, and a publisher's retry within {retry_horizon:?} lands once{}",
            if version.features().sourcing_streams_get_no_default_dedup_window { "; on 2.14+ a sourcing stream gets no window unless set, so it is set explicitly" } else { "" }
        ));
    }
}

fn rule_sourced_msg_id_dedup(r: &mut Report, version: ServerVersion) {
    if version.features().duplicate_sourced_msg_id_stalls_source {
        r.add("server", "sourced msg-id dedup", version, "", Verdict::ChangedOnPurpose, "on 2.10-2.12.5 a duplicate Nats-Msg-Id arriving by source stalls sourcing: publishers must not retry into B a message that also reaches B from A (they do not in strategy source: B takes the subjects only after A released them)");
    }
}

/// Settings that only change on purpose with the new stream.
fn rule_carried_settings(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let s = STREAM;
    r.same_or_changed(
        s,
        "storage",
        ac.storage.as_str(),
        b.storage.as_str(),
        "storage changes with the new stream",
    );
    rule_replicas(r, ac, b);
    r.same_or_changed(
        s,
        "placement",
        ac.placement.clone(),
        b.placement.clone(),
        "placement changes with the new stream",
    );
    r.same_or_changed(s, "deny_delete", ac.deny_delete, b.deny_delete, "deny_delete changes");
}

/// Fewer replicas on B is allowed (it may be the point of the move) but
/// warned about: what A kept on three servers B keeps on one.
fn rule_replicas(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let (x, y) = (ac.num_replicas.max(1), b.num_replicas.max(1));
    if y < x {
        r.add(STREAM, "num_replicas", x, y, Verdict::ChangedOnPurpose, format!("WARNING: B keeps {y} replica(s) where A keeps {x}: acknowledged messages then live on fewer servers, and losing {} server(s) loses them; set num_replicas: {x} in --to-config unless this is intended", y));
    } else {
        r.same_or_changed(
            STREAM,
            "num_replicas",
            x,
            y,
            "replica count changes with the new stream",
        );
    }
}

fn rule_b_not_sealed(r: &mut Report, b: &StreamConfig) {
    if b.sealed {
        r.add(STREAM, "sealed", "", "true", Verdict::Unsafe, "B is sealed and can take nothing");
    }
}

fn rule_allow_direct(r: &mut Report, ac: &StreamConfig, b: &StreamConfig) {
    let s = STREAM;
    if !b.allow_direct && b.mirror.is_none() {
        r.add(s, "allow_direct", ac.allow_direct, b.allow_direct, Verdict::ChangedOnPurpose, "B has no direct get: translation uses STREAM.MSG.GET (same count of requests, slower each)");
    }
}

/// Work queues on either side: B can be one only as a mirror, and sourcing
/// from one (or from an interest stream) is reliable only from 2.14.
fn rule_retention_sourcing(
    r: &mut Report,
    ac: &StreamConfig,
    b: &StreamConfig,
    version: ServerVersion,
) {
    let s = STREAM;
    if b.retention == RetentionPolicy::WorkQueue {
        rule_work_queue_b(r, ac, b, version);
    } else if ac.retention != RetentionPolicy::Limits && !version.at_least(2, 14, 0) {
        // ADR-60 (nats-server 2.14.0, PR 7613): before it, a stream sourcing a
        // work-queue or interest stream is not reliable (its source consumer
        // competes with the durables).
        r.add(s, "retention", &ac.retention, &b.retention, Verdict::Unsafe, format!("A has {} retention: reliable sourcing from work-queue and interest streams needs nats-server 2.14 (ADR-60); this server is {version}: upgrade first", ac.retention));
    } else if ac.retention == RetentionPolicy::WorkQueue {
        r.add(s, "retention", &ac.retention, &b.retention, Verdict::Ok, "work queue to limits: B keeps every message A held; each moved consumer keeps its filters");
    }
}

/// B a work queue: a consumer there must deliver all (consumer.go, error
/// 10101), so the new durable cannot start at a sequence; with a mirror, B's
/// copies below the checkpoint on the durable's filter are purged first (the
/// old durable processed them), and it starts after F by delivering all.
fn rule_work_queue_b(r: &mut Report, ac: &StreamConfig, b: &StreamConfig, version: ServerVersion) {
    let s = STREAM;
    let (from, to) = (&ac.retention, &b.retention);
    if b.mirror.is_none() {
        r.add(s, "retention", from, to, Verdict::Unsafe, "B would be a work queue, where a consumer must deliver all (error 10101): with strategy source the new durable could not start after the checkpoint; use --strategy mirror (B's copies below the checkpoint are purged before the durable is created), or give B limits retention");
    } else if ac.retention == RetentionPolicy::Interest {
        r.add(s, "retention", from, to, Verdict::Unsafe, "interest to work queue is not supported: an interest stream removes messages once every consumer acked them, so B could not tell which ones a durable still needs");
    } else if ac.retention == RetentionPolicy::WorkQueue && !version.at_least(2, 14, 0) {
        r.add(s, "retention", from, to, Verdict::Unsafe, format!("A is a work queue: reliable mirroring from work-queue streams needs nats-server 2.14 (ADR-60); this server is {version}: upgrade first"));
    } else {
        r.add(s, "retention", from, to, Verdict::ChangedOnPurpose, "B is a work queue: each new durable delivers all (error 10101 otherwise), so before it is created B's copies below its start on its filter are purged (the old durable processed them, nothing being ack-pending at the checkpoint, or never delivered them if it started after them: see each consumer's deliver_policy); messages no moved durable's filter selects stay in B as work for a future consumer; each message B holds is removed once acknowledged");
    }
}

/// Consumer-level rules, in the report's order. Returns the consumer's filters
/// as B stores their subjects (empty: all), or `None` when they cannot be
/// mapped exactly.
pub(crate) fn check_consumer(
    r: &mut Report,
    c: &ConsumerInfo,
    b: &StreamConfig,
    version: ServerVersion,
    (publishers_stopped, in_place): (bool, bool),
) -> Option<Vec<String>> {
    let scope = format!("consumer {}", c.name);
    let s = scope.as_str();
    let cc: &ConsumerConfig = &c.config;
    rule_durable(r, s, cc);
    rule_ack_policy(r, s, cc);
    rule_redelivery(r, s, cc);
    rule_push_or_pull(r, s, cc);
    rule_start_and_replay(r, s, cc, b);
    rule_inactive_threshold(r, s, cc, in_place);
    rule_carried_flags(r, s, cc);
    rule_pause(r, s, c, version, publishers_stopped);
    rule_filters(r, s, cc, b)
}

/// Only a durable has state to move.
fn rule_durable(r: &mut Report, s: &str, cc: &ConsumerConfig) {
    if !cc.is_durable() {
        r.add(
            s,
            "durable_name",
            "",
            "",
            Verdict::Unsafe,
            "an ephemeral consumer has no durable state to move; its owner recreates it on B",
        );
    }
}

/// The checkpoint is exact only where the server learns what was processed.
fn rule_ack_policy(r: &mut Report, s: &str, cc: &ConsumerConfig) {
    match &cc.ack_policy {
        AckPolicy::None => r.add(s, "ack_policy", "none", "", Verdict::Unsafe, "ack policy none: the server never learns which messages were processed, so no exact checkpoint exists and exactly-once is impossible; use explicit acks"),
        AckPolicy::All => r.add(s, "ack_policy", "all", "all", Verdict::Ok, "cumulative acks: num_ack_pending still tells when everything delivered is settled"),
        p => r.add(s, "ack_policy", p, p, Verdict::Ok, "explicit acks give an exact settled position"),
    }
}

/// Acknowledgement and redelivery settings, carried over to the new durable.
fn rule_redelivery(r: &mut Report, s: &str, cc: &ConsumerConfig) {
    r.add(s, "ack_wait", dur(cc.ack_wait), dur(cc.ack_wait), Verdict::Ok, "carried over unchanged");
    r.add(
        s,
        "max_ack_pending",
        cc.max_ack_pending,
        cc.max_ack_pending,
        Verdict::Ok,
        "carried over unchanged",
    );
    r.add(s, "max_deliver", cc.max_deliver, cc.max_deliver, Verdict::Ok, if cc.max_deliver > 0 {
        "carried over; messages exhausted before the checkpoint stay exhausted (they are at or before F)"
    } else {
        "carried over (unlimited)"
    });
    if !cc.backoff.is_empty() {
        r.add(
            s,
            "backoff",
            format!("{:?}", cc.backoff.iter().map(|n| nanos(*n)).collect::<Vec<_>>()),
            "same",
            Verdict::Ok,
            "carried over unchanged",
        );
    }
}

/// How the applications receive: push keeps its deliver subject, pull fetches.
fn rule_push_or_pull(r: &mut Report, s: &str, cc: &ConsumerConfig) {
    if cc.is_push() {
        r.add(s, "deliver_subject", cc.deliver_subject.clone().unwrap_or_default(), "same", Verdict::Ok, format!(
            "push consumer: the new durable on B keeps deliver subject{} so the applications' subscriptions receive from B without a redeploy",
            if cc.deliver_group.is_some() { " and deliver group" } else { "" }
        ));
    } else {
        // A plain application that fetches the old durable by name is not
        // moved by anything the runner does (a newcomer's trial found one
        // stranded after a SAFE plan): say so where the operator looks.
        r.add(s, "type", "pull", "pull", Verdict::ChangedOnPurpose, "pull consumer: applications that follow the route record (docs/protocol.md, the cutover-app library) fetch from the new durable on B once it exists (it appears only when positioned exactly); an application that fetches this durable on the old stream by name must be repointed to B (or restarted with the new stream's name): after the move it gets 'consumer not found' (with --keep-old-consumers, no messages) until then; in place (--in-place) keeps the names, so it rides through");
        r.add(
            s,
            "max_waiting",
            cc.max_waiting,
            cc.max_waiting,
            Verdict::Ok,
            "carried over unchanged",
        );
    }
}

fn rule_start_and_replay(r: &mut Report, s: &str, cc: &ConsumerConfig, b: &StreamConfig) {
    if b.retention == RetentionPolicy::WorkQueue && cc.deliver_policy != DeliverPolicy::All {
        // A newcomer's limits stream with a `deliver_policy: new` durable
        // became a work queue: the messages before its start, which it never
        // delivered, were purged, while the plan said "processed".
        r.add(s, "deliver_policy", &cc.deliver_policy, "all", Verdict::ChangedOnPurpose, format!("B is a work queue, so the new durable delivers all after B's copies below its start are purged: this one started with deliver_policy {}, after messages A still holds that it never delivered, and those are purged from B with the ones it processed (a work queue keeps only messages a consumer will deliver); copy them elsewhere first if they are needed", cc.deliver_policy));
    } else if b.retention == RetentionPolicy::WorkQueue {
        r.add(s, "deliver_policy", &cc.deliver_policy, "all", Verdict::ChangedOnPurpose, "B is a work queue: the new durable delivers all, after B's copies below its start (those it processed) are purged");
    } else {
        r.add(s, "deliver_policy", &cc.deliver_policy, "by_start_sequence", Verdict::ChangedOnPurpose, "the new durable starts at the translated checkpoint; the original policy only mattered when the old one was created");
    }
    if cc.replay_policy == ReplayPolicy::Original {
        r.add(s, "replay_policy", "original", "original", Verdict::ChangedOnPurpose, "replay original paces by B's timestamps, which are the sourcing times, not A's publish times");
    }
}

fn rule_inactive_threshold(r: &mut Report, s: &str, cc: &ConsumerConfig, in_place: bool) {
    if cc.inactive_threshold > 0 {
        let why = match in_place {
            true => "applications bound to it by name cannot reach it on the temporary stream, so it lives there without a threshold (kept in its metadata) and gets it back on the stream's own name: the server cannot delete it, with its position, during the change",
            false => "the durable is deleted after this long without a pull; redeploy the instances to B within it or the new durable vanishes",
        };
        r.add(
            s,
            "inactive_threshold",
            dur(cc.inactive_threshold),
            dur(cc.inactive_threshold),
            Verdict::ChangedOnPurpose,
            why,
        );
    }
}

fn rule_carried_flags(r: &mut Report, s: &str, cc: &ConsumerConfig) {
    if cc.headers_only {
        r.add(s, "headers_only", true, true, Verdict::Ok, "carried over unchanged");
    }
    if cc.mem_storage || cc.num_replicas > 0 {
        r.add(
            s,
            "mem_storage/num_replicas",
            format!("{}/{}", cc.mem_storage, cc.num_replicas),
            "same",
            Verdict::Ok,
            "carried over unchanged",
        );
    }
}

/// The old consumer is held at an exact position by a pause (2.11+), or by
/// publishers that were stopped.
fn rule_pause(
    r: &mut Report,
    s: &str,
    c: &ConsumerInfo,
    version: ServerVersion,
    publishers_stopped: bool,
) {
    if c.paused {
        r.add(
            s,
            "paused",
            "true",
            "",
            Verdict::ChangedOnPurpose,
            "the consumer is already paused; the run leaves the old one paused and retires it",
        );
    }
    if !version.features().consumer_pause && !publishers_stopped {
        r.add(s, "pause", version, "", Verdict::Unsafe, format!(
            "server {version} cannot pause consumers (2.11+), so the old consumer cannot be held at an exact position while publishers run; stop the publishers and pass --publishers-stopped, or upgrade the server"
        ));
    }
}

/// The consumer's filters through B's source filter and subject transforms:
/// the new durable must select the same messages, with subjects as B stores them.
fn rule_filters(
    r: &mut Report,
    s: &str,
    cc: &ConsumerConfig,
    b: &StreamConfig,
) -> Option<Vec<String>> {
    let src = b.sources.first();
    let transforms = src.map(|x| x.subject_transforms.clone()).unwrap_or_default();
    let src_filter = src.and_then(|x| x.filter_subject.clone()).filter(|f| !f.is_empty());
    let filters = cc.filters();
    let mut mapped = vec![];
    let mut ok = true;
    let list = if filters.is_empty() { vec![">".to_string()] } else { filters.clone() };
    for f in &list {
        if let Some(sf) = &src_filter {
            if !subject::covers(sf, f) {
                r.add(s, "filter_subject", f, "", Verdict::Unsafe, format!("B sources only {sf} from A, which does not include every message of filter {f}"));
                ok = false;
                continue;
            }
        }
        match subject::map_filter_through(f, &transforms) {
            Some(m) => mapped.push(m),
            None => {
                r.add(s, "filter_subject", f, "", Verdict::Unsafe, format!("filter {f} cannot be mapped exactly through B's source subject transform; use a transform whose source covers it with whole wildcards"));
                ok = false;
            }
        }
    }
    if ok {
        let from = if filters.is_empty() { "(all)".to_string() } else { filters.join(",") };
        let to = if filters.is_empty() && transforms.is_empty() {
            "(all)".to_string()
        } else {
            mapped.join(",")
        };
        let v = if from == to { Verdict::Ok } else { Verdict::ChangedOnPurpose };
        r.add(
            s,
            "filter_subject",
            from,
            to,
            v,
            "the same messages, with subjects as B stores them",
        );
        if filters.is_empty() && transforms.is_empty() {
            mapped.clear();
        }
        Some(mapped)
    } else {
        None
    }
}
