//! The plan of strategy `dual-write` (docs/protocol.md, *Dual-write*): B
//! created with subjects of its own and an explicit duplicate window; the
//! consumers' filters mapped to B's subjects; the publishers registered.
//! The protocol's pure parts (the subject map, the publisher record, where
//! a new durable starts, the proof) are `crate::dual`'s.

use super::b_config::{b_consumer_config, planned_b};
use super::build::refuse_early;
use super::checks;
use super::document::{ConsumerPlan, Plan, Step, PLAN_FORMAT};
use super::request::{parse, retry_horizon, Mode, PlanError, PlanRequest, ServerFacts, Strategy};
use crate::compat::{Report, Verdict};
use crate::dual::SubjectMap;
use crate::model::{nanos, ConsumerInfo, RetentionPolicy, StreamConfig, StreamInfo};
use crate::subject;
use std::time::Duration;

/// The plan of a dual-write migration (`super::build` calls it): B created with
/// subjects of its own and an explicit duplicate window; the consumers'
/// filters mapped to B's subjects; the publishers registered.
pub(crate) fn build(req: &PlanRequest, facts: &ServerFacts) -> Result<Plan, PlanError> {
    refuse_early(req, facts)?;
    let a: StreamInfo = parse("stream", &facts.a_raw)?;
    let horizon = retry_horizon(req, &a);
    let (b_config, b_subjects, b_exists) = planned_b(req, facts, horizon)?;
    let b_view: StreamConfig = parse("planned stream B", &b_config)?;
    let mut r = Report::new();
    r.add("plan", "strategy", "dual-write", "", Verdict::ChangedOnPurpose, WHEN);
    let map = rule_subjects(&mut r, &a.config.subjects, &b_subjects, b_exists);
    checks::check_against_server(&mut r, &a, &b_view, &b_subjects, &facts.checks);
    let dw = rule_b(&mut r, req, &a, &b_view);
    rule_publishers(&mut r, req, facts);
    let consumers = plan_consumers(&mut r, facts, map.as_ref())?;
    let safe = !r.findings.iter().any(|f| f.verdict == Verdict::Unsafe);
    let features = facts.version.features();
    Ok(Plan {
        format: PLAN_FORMAT,
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
        handover: false,
        in_place_then: Default::default(),
        keeps_name_across: false,
        across: req.across,
        a_ingest: facts.checks.a_ingest,
        carried: Default::default(),
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
        let c: ConsumerInfo = parse("consumer", raw)?;
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
            b_config: b_consumer_config(&old_cfg, &b_filters, false),
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
) -> Vec<Step> {
    let (a, b) = (&req.from, &req.to);
    // Across systems each step names the side it acts on.
    let (on_a, on_b) = if req.across { (" (source side)", " (target side)") } else { ("", "") };
    let mut steps = vec![];
    let mut add = |title: &str, detail: String| {
        let n = steps.len() as u32 + 1;
        steps.push(Step { n, title: title.into(), detail });
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

#[cfg(test)]
mod tests {
    use super::super::build;
    use super::*;

    #[test]
    fn the_plan_pairs_subjects_maps_filters_and_explains_the_choice() {
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
    fn one_consumer_facts(a: serde_json::Value, c: serde_json::Value) -> ServerFacts {
        ServerFacts {
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
        use super::super::request::External;
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
