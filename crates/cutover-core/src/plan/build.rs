//! The plan of strategies `source` and `mirror`: the compatibility report
//! (`crate::compat`) and the plan's own rules, each a `rule_*` function that
//! adds its findings (the order of the calls is the order of the report),
//! the consumers' plans and the steps.

use super::b_config::{b_consumer_config, commit_touches, keep_alive_in_place, planned_b};
use super::checks;
use super::document::{ConsumerPlan, Plan, PLAN_FORMAT};
use super::request::{
    parse, retry_horizon, External, InPlaceHop, Mode, PlanError, PlanRequest, ServerFacts, Strategy,
};
use super::steps::{checkpoint_rule, steps, TIMER_NOTE};
use crate::compat::{self, Finding, Report, Verdict};
use crate::model::{nanos, ConsumerInfo, RetentionPolicy, StorageType, StreamConfig, StreamInfo};
use crate::quiescence::{self, QuiescentBound};
use crate::version::{Features, ServerVersion, MINIMUM};
use serde_json::{Map, Value};
use std::time::Duration;

pub(super) fn build(req: &PlanRequest, facts: &ServerFacts) -> Result<Plan, PlanError> {
    refuse_early(req, facts)?;
    let a: StreamInfo = parse("stream", &facts.a_raw)?;
    let retry_horizon = retry_horizon(req, &a);
    let (b_config, b_final_subjects, b_exists) = planned_b(req, facts, retry_horizon)?;
    let b_view: StreamConfig = parse("planned stream B", &b_config)?;
    // The findings, rule by rule: their order is the report's.
    let mut r = Report::new();
    checks::check_request(&mut r, req, &a);
    checks::check_against_server(&mut r, &a, &b_view, &b_final_subjects, &facts.checks);
    compat::check_streams(
        &mut r,
        &a,
        &b_view,
        &b_final_subjects,
        b_exists,
        retry_horizon,
        facts.version,
    );
    compat::check_external(&mut r, &b_view, req.external.as_ref().map(External::json).as_ref());
    rule_strategy(&mut r, req, facts.version);
    rule_across(&mut r, req);
    let moved = plan_consumers(&mut r, req, facts, &b_view)?;
    rule_mode(&mut r, req, facts, &moved.plans);
    rule_account_storage(&mut r, facts, &a, &b_view);
    rule_ingest_rate(&mut r, facts);
    rule_consumers_left_behind(&mut r, req, facts);
    rule_chained_instances(&mut r, req, facts);
    rule_downstream(&mut r, req, facts);
    rule_work_queue_overlaps(&mut r, &b_view, &moved.filters);
    let features = facts.version.features();
    let dw = nanos(b_view.duplicate_window);
    let handover = req.strategy == Strategy::Mirror
        && facts
            .checks
            .b_config_check
            .as_ref()
            .is_some_and(|c| c.result.is_ok() && c.dropped_duplicate_window);
    let steps = steps(
        req,
        b_exists,
        dw,
        features,
        &moved.plans,
        &b_final_subjects,
        handover.then_some((
            retry_horizon,
            match req.external.is_some() {
                true => Some("a move across systems: the live hand-over is not tried there yet"),
                false => super::handover_freeze_reason(&facts.a_raw["config"]),
            },
        )),
    );
    if !b_exists && b_config.get("republish").is_some_and(|v| !v.is_null()) {
        r.add("stream", "republish", "set", "at the commit point", Verdict::ChangedOnPurpose, "B takes A's republish at the commit point, not while it copies A (a stream republishes every message it stores, copied ones too): subscribers of the republished subjects get each message once");
    }
    let safe = !r.findings.iter().any(|f| f.verdict == Verdict::Unsafe);
    let (b_config, promote_with) = commit_touches(req, b_config, b_exists);
    // A B that existed has its own settings: nothing of A's is carried.
    let carried = match b_exists {
        true => Map::new(),
        false => super::carried_settings(&facts.a_raw["config"], &b_config, &promote_with),
    };
    Ok(Plan {
        format: PLAN_FORMAT,
        from: req.from.clone(),
        to: req.to.clone(),
        strategy: req.strategy,
        mode: req.mode,
        server_version: facts.version,
        features,
        relies_on: relies_on(features, facts.version),
        b_exists,
        b_config,
        b_final_subjects,
        consumers: moved.plans,
        findings: r.findings,
        checkpoint_rule: checkpoint_rule(req),
        timer_note: TIMER_NOTE.to_string(),
        steps,
        quiescence: moved.quiescence,
        publishers_stopped: req.publishers_stopped,
        retry_horizon_ms: retry_horizon.as_millis() as u64,
        promote_with,
        in_place: req.in_place,
        new_version: req.new_version.clone(),
        external: req.external.clone(),
        handover,
        in_place_then: Default::default(),
        keeps_name_across: false,
        across: false,
        a_ingest: facts.checks.a_ingest,
        carried,
        safe,
    })
}

/// Requests refused before anything else is read or judged.
pub(super) fn refuse_early(req: &PlanRequest, facts: &ServerFacts) -> Result<(), PlanError> {
    if req.from == req.to {
        return Err(PlanError::SameStream(req.from.clone()));
    }
    if facts.version < MINIMUM {
        return Err(PlanError::ServerTooOld { found: facts.version });
    }
    // An in-place change of a stream without durables (a KV bucket's readers
    // and watchers use ephemeral consumers) moves the publishers alone.
    if facts.consumers_raw.is_empty() && !(req.in_place.is_some() && req.all_consumers) {
        return Err(PlanError::NoConsumer);
    }
    Ok(())
}

/// A move across systems: what goes where, what the plan cannot test, and
/// what is not supported across the boundary yet.
fn rule_across(r: &mut Report, req: &PlanRequest) {
    let Some(ext) = &req.external else { return };
    r.add("plan", "across", "one system", format!("B sources A through {}", ext.api), Verdict::ChangedOnPurpose, "A is read, paused and sealed through the source connection; B, its durables and the CUTOVER bucket (journal, lease, routes) live on the target side, where the run's result stays and a resume finds it");
    r.add("plan", "applications", "", "", Verdict::ChangedOnPurpose, format!("push consumers keep their deliver subject and group on {} where it crosses the boundary; pull applications follow the route record, on the target side, through a connection to it, or are redeployed there (docs/cross-system.md)", req.to));
    if req.mode != Mode::Drain {
        r.add("plan", "mode", req.mode.as_str(), "", Verdict::Unsafe, "fence and rolling modes across systems are not supported yet (instances register on one side): use --mode drain");
    }
    // Hop 1 of a move that keeps the name (`InPlaceHop::Out` across) is
    // planned here; hop 2 runs on the target side alone.
    if req.in_place == Some(InPlaceHop::Back) {
        r.add(
            "plan",
            "in-place",
            "",
            "",
            Verdict::Unsafe,
            "the second hop of an in-place change stays on one system: drop --from-server/--from-context",
        );
    }
}

fn rule_strategy(r: &mut Report, req: &PlanRequest, version: ServerVersion) {
    match req.strategy {
        Strategy::Source => {}
        Strategy::Mirror if version.features().mirror_promotion => r.add(
            "plan",
            "strategy",
            "mirror",
            "",
            Verdict::Ok,
            "B mirrors A: every message keeps its sequence, so each checkpoint carries over unchanged (no translation); at the commit point B is promoted (mirror removed and subjects added in one update, 2.12+), keeping sequences, timestamps and the gaps of deleted messages; B's explicit duplicate window records the mirrored msg-ids, so a publisher's retry across the move lands once",
        ),
        Strategy::Mirror if req.in_place.is_some() => r.add(
            "plan",
            "strategy",
            "mirror",
            "",
            Verdict::Unsafe,
            format!("an in-place change needs mirror promotion (nats-server 2.12+); this server is {version}: upgrade first, or move to a stream with another name (run --from {} --to NEW)", req.from),
        ),
        other => r.add(
            "plan",
            "strategy",
            other.as_str(),
            "",
            Verdict::Unsafe,
            format!(
                "strategy {} is planned for a later version{}; use --strategy source",
                other.as_str(),
                if other == Strategy::Mirror && !version.features().mirror_promotion {
                    " and needs mirror promotion (2.12+)"
                } else {
                    ""
                }
            ),
        ),
    }
}

fn rule_mode(r: &mut Report, req: &PlanRequest, facts: &ServerFacts, consumers: &[ConsumerPlan]) {
    if !req.mode.is_fenced() {
        return;
    }
    if req.mode == Mode::Rolling {
        match &req.new_version {
            Some(v) => r.add("plan", "mode", "rolling", v, Verdict::ChangedOnPurpose, format!("rolling upgrade: instances of version {v} read the new durable (everything after the fence); instances of other versions stay on the old consumer and process its messages up to the fence only; the run ends once no live instance is bound to the old consumer (replace them one by one; `run --resume ID --proceed` goes on without the ones that never move)")),
            None => r.add("plan", "mode", "rolling", "", Verdict::Unsafe, "mode rolling needs --new-version: the application version that reads the new durable"),
        }
    }
    if !facts.version.features().consumer_pause {
        r.add("plan", "mode", "fence", "", Verdict::Unsafe, "fence mode stops the old consumer delivering past the fence with a consumer pause (nats-server 2.11+); use --mode drain with --publishers-stopped, or upgrade the server");
        return;
    }
    for c in consumers.iter().filter(|c| c.push) {
        r.add(&format!("consumer {}", c.name), "mode", "fence", "", Verdict::Unsafe, "fence mode needs pull consumers (instances fetch from the old and the new durable at once); move push consumers with --mode drain");
    }
    for (name, n) in facts.checks.live_new_version.iter().flatten().filter(|(_, n)| *n == 0) {
        // Not unsafe (the old version finishes up to F, the new one starts
        // later), but everything after F waits for it: a newcomer measured
        // a 9.1 s gap. Said where the operator looks.
        let v = req.new_version.as_deref().unwrap_or_default();
        r.add(&format!("consumer {name}"), "instances", format!("{n} live of version {v}"), "", Verdict::ChangedOnPurpose, format!("no live instance of version {v} is registered yet: nothing after the fence is processed until one starts (start at least one instance of version {v} before the run, then replace the others)"));
    }
    for (name, live) in facts.checks.live_instances.iter().flatten() {
        let scope = format!("consumer {name}");
        if *live == 0 {
            r.add(&scope, "instances", "0 live", "", Verdict::Unsafe, format!("fence mode: no live application instance of {}/{name} is registered (inst.{}.{name}.* in KV bucket CUTOVER); start applications that follow docs/protocol.md, or use --mode drain", req.from, req.from));
        } else {
            r.add(
                &scope,
                "instances",
                format!("{live} live"),
                "",
                Verdict::Ok,
                "registered instances follow the fence; every instance of the consumer must",
            );
        }
    }
    r.add("plan", "mode", "fence", "", Verdict::ChangedOnPurpose, "no stop of consumption: the old consumer stops delivering new messages at the fence F (its last delivered sequence) while instances finish and acknowledge what they hold, and fetch everything after F from the new durable at once; every application instance of the consumers must follow docs/protocol.md (register in KV bucket CUTOVER, nak the old consumer's messages above F, acknowledge the fence): `run` refuses a consumer no live instance registered for, and an application that ignores the protocol could process a message twice");
}

/// What [`plan_consumers`] found: the consumers that can move, the timer bounds
/// where no pause exists, and each moved consumer's filters on B.
#[derive(Default)]
struct Consumers {
    plans: Vec<ConsumerPlan>,
    quiescence: Vec<(String, QuiescentBound)>,
    /// (consumer, filter on B; `>` for all), for the work-queue overlap rule.
    filters: Vec<(String, String)>,
}

/// Each consumer's rules, in the order asked, and the plan of each that can move.
fn plan_consumers(
    r: &mut Report,
    req: &PlanRequest,
    facts: &ServerFacts,
    b_view: &StreamConfig,
) -> Result<Consumers, PlanError> {
    let mut moved = Consumers::default();
    for raw in &facts.consumers_raw {
        let c: ConsumerInfo = parse("consumer", raw)?;
        if b_view.retention == RetentionPolicy::WorkQueue
            && c.config.ack_policy != crate::model::AckPolicy::Explicit
        {
            r.add(&format!("consumer {}", c.name), "ack_policy", &c.config.ack_policy, "explicit", Verdict::Unsafe, "B is a work queue, whose consumers must acknowledge each message (error 10098): give the durable explicit acks first");
        }
        if req.in_place == Some(InPlaceHop::Out) {
            in_place_consumer_note(r, &c, req);
        }
        if let Some(b_filters) = compat::check_consumer(
            r,
            &c,
            b_view,
            facts.version,
            (req.publishers_stopped, req.in_place.is_some()),
        ) {
            let old_cfg = raw.get("config").cloned().unwrap_or(Value::Null);
            moved.plans.push(ConsumerPlan {
                name: c.name.clone(),
                push: c.config.is_push(),
                b_config: keep_alive_in_place(
                    b_consumer_config(
                        &old_cfg,
                        &b_filters,
                        b_view.retention == RetentionPolicy::WorkQueue,
                    ),
                    req.in_place,
                ),
                a_filters: Some(c.config.filters()),
                b_filters: b_filters.clone(),
            });
            let fs = if b_filters.is_empty() { vec![">".to_string()] } else { b_filters };
            for f in fs {
                moved.filters.push((c.name.clone(), f));
            }
        }
        if !facts.version.features().consumer_pause && req.publishers_stopped {
            moved.quiescence.push((
                c.name.clone(),
                quiescence::bound(&c.config, c.num_pending, Duration::from_millis(100), 1),
            ));
        }
    }
    Ok(moved)
}

/// The plan of a durable that appeared on A after `plan` read it (an
/// application created it while the run moved the others): the same
/// consumer rules against the B the plan made (`plan.b_config`, sources and
/// mirror aside), with its findings. `Err` names what makes it unsafe to
/// move (it is then left where it is, and the run stops before the
/// commit). Its findings are the caller's to journal.
pub fn appeared_consumer(plan: &Plan, raw: &Value) -> Result<(ConsumerPlan, Vec<Finding>), String> {
    let c: ConsumerInfo = parse("consumer", raw).map_err(|e| e.to_string())?;
    let b_view: StreamConfig =
        parse("planned stream B", &plan.b_config).map_err(|e| e.to_string())?;
    let mut req = PlanRequest::source(&plan.from, &plan.to, &[&c.name]);
    (req.strategy, req.mode, req.in_place) = (plan.strategy, plan.mode, plan.in_place);
    req.publishers_stopped = plan.publishers_stopped;
    let facts = ServerFacts {
        version: plan.server_version,
        a_raw: Value::Null,
        b_raw: None,
        consumers_raw: vec![raw.clone()],
        other_consumers: vec![],
        downstream: vec![],
        account: None,
        checks: Default::default(),
    };
    let mut r = Report::new();
    let moved = plan_consumers(&mut r, &req, &facts, &b_view).map_err(|e| e.to_string())?;
    let unsafe_: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Unsafe)
        .map(|f| format!("{} {}: {}", f.scope, f.setting, f.reason))
        .collect();
    match moved.plans.into_iter().next() {
        Some(p) if unsafe_.is_empty() => Ok((p, r.findings)),
        _ => Err(unsafe_.join("; ")),
    }
}

/// B holds a copy of A while it sources it: the account must have room.
fn rule_account_storage(
    r: &mut Report,
    facts: &ServerFacts,
    a: &StreamInfo,
    b_view: &StreamConfig,
) {
    let Some(acc) = &facts.account else { return };
    let (used_key, limit_key) = if b_view.storage == StorageType::Memory {
        ("memory", "max_memory")
    } else {
        ("storage", "max_storage")
    };
    let used = acc[used_key].as_i64().unwrap_or(0);
    let limit = acc["limits"][limit_key].as_i64().unwrap_or(-1);
    let need = a.state.bytes as i64;
    if limit > 0 && used + need > limit {
        r.add("stream", "account storage", format!("{used} of {limit} bytes used"), format!("+{need} bytes"), Verdict::Unsafe, format!(
            "B copies A's {need} bytes while it sources A, but the account has {} of {limit} {used_key} bytes left: B would stop sourcing; raise the account's JetStream limit or make room first", limit - used
        ));
    } else {
        r.add("stream", "account storage", format!("{used} bytes used"), format!("+{need} bytes"), Verdict::Ok, if limit > 0 { format!("B's copy of A fits the account's {used_key} limit ({limit} bytes)") } else { format!("B holds a copy of A ({need} bytes) until A is deleted; the account has no {used_key} limit") });
    }
}

/// B must receive A's messages at least as fast as A stores them: above
/// [`crate::catchup::INGEST_WARN_PER_S`] a warning (not a refusal: `run`
/// measures B's pace while it catches up and stops before any commit if B
/// falls behind).
fn rule_ingest_rate(r: &mut Report, facts: &ServerFacts) {
    use crate::catchup::INGEST_WARN_PER_S;
    let Some(rate) = facts.checks.a_ingest else { return };
    if rate.per_s <= INGEST_WARN_PER_S {
        return;
    }
    r.add("stream", "ingest rate", format!("{:.0} msg/s", rate.per_s), "", Verdict::Ok, format!(
        "warning: A stored {:.0} msg/s while sampled ({} ms), above {INGEST_WARN_PER_S:.0} msg/s, where sourcing into one stream was reported to top out (nats-server issue 8612): B may not catch up; run stops before the commit if B's lag keeps growing over its catch-up window; run at a quieter time if it does",
        rate.per_s, rate.over_ms
    ));
}

/// After the commit point A is sealed and takes nothing new: whatever else reads
/// A would silently stop receiving. Durables must move too (or be deleted
/// first); ephemeral ones are their owners' to recreate on B (in place, the
/// run creates push ones again on the stream's new copy).
fn rule_consumers_left_behind(r: &mut Report, req: &PlanRequest, facts: &ServerFacts) {
    for (name, durable) in &facts.other_consumers {
        if *durable {
            r.add("stream", "consumers", name, "", Verdict::Unsafe, format!(
                "durable {name} on {} is not being moved: after the cut-over it would receive no new message; move it too (--consumer {name} or --all-consumers) or delete it first if it is no longer needed", req.from
            ));
        } else if req.in_place.is_some() {
            // steps/watchers.rs in the engine: hop 1 keeps push ones, hop 2
            // creates them again (their clients reset at the first message).
            r.add("stream", "consumers", name, "", Verdict::ChangedOnPurpose, format!("ephemeral consumer {name} (an ordered consumer: a KV or object store watcher, an ordered subscription) goes with {} at the end of hop 1; a push one is created again on its new stream as soon as hop 2 creates it, under its name and after what it had delivered, and its client resets onto the stream from its own position at the first message (revisions of a key written more often than the bucket's history between hop 1's commit and then are not delivered: 0.6 s on a 3-node cluster); a pull one's client is told at once and re-creates it (nats.js 3.x's ordered consumer, `js.consumers.get(stream)`, only 70-85 s after the change, after its missed heartbeats: restart such applications; docs/clients.md)", req.from));
        } else {
            r.add("stream", "consumers", name, "", Verdict::ChangedOnPurpose, format!("ephemeral consumer {name} on {} stops receiving new messages at the cut-over; its owner must subscribe to {} instead", req.from, req.to));
        }
    }
}

/// Instances that followed an earlier migration into A watch the route of
/// their home binding, which this migration does not write: when it retires
/// A's consumer they would stop consuming (a newcomer's trial stranded two
/// protocol workers this way). Routes are not chained (docs/protocol.md,
/// "Moving again").
fn rule_chained_instances(r: &mut Report, req: &PlanRequest, facts: &ServerFacts) {
    for (consumer, instance, home) in &facts.checks.chained_instances {
        r.add(&format!("consumer {consumer}"), "instances", instance, "", Verdict::Unsafe, format!(
            "instance {instance} fetches from {from}/{consumer} but registered home binding {home}: it follows route.{home_key}, which this migration does not write, and would stop consuming once {from}/{consumer} is retired; restart it with home binding {from}/{consumer} (it then registers as inst.{from}.{consumer}.*) and plan again",
            from = req.from, home_key = home.replace('/', ".")
        ));
    }
}

fn rule_downstream(r: &mut Report, req: &PlanRequest, facts: &ServerFacts) {
    for d in &facts.downstream {
        let why = if req.in_place.is_some() {
            format!("stream {d} sources or mirrors {}: an in-place change deletes and recreates {} under its name, and carrying the streams that source or mirror it through both hops is not supported yet; move {} to a stream with another name instead (run --from {} --to NEW), and point {d} at it", req.from, req.from, req.from, req.from)
        } else {
            format!("stream {d} sources or mirrors {}: after the cut-over it would receive nothing new; point it at {} first (or migrate it too)", req.from, req.to)
        };
        r.add("stream", "downstream", d, "", Verdict::Unsafe, why);
    }
}

/// What an application of this durable sees through an in-place change. Every
/// durable makes both hops: holding one paused on the old stream through the
/// rebuild instead would not shorten a plain pull application's wait (it
/// cannot read the temporary stream either way, and the old stream and its
/// durables go at the end of hop 1) but would cost push applications and route
/// followers the whole rebuild.
fn in_place_consumer_note(r: &mut Report, c: &ConsumerInfo, req: &PlanRequest) {
    let s = format!("consumer {}", c.name);
    if req.external.is_some() {
        // Across systems under the same name: the durable leaves the
        // source side for good (a newcomer read the one-system note, "they
        // resume by retrying", and waited 4 minutes for it).
        let what = if c.config.is_push() {
            "push applications receive from the target side's durable once it exists (its deliver subject must cross the boundary), with a pause from hop 1's drain until then"
        } else {
            "pull applications bound to it by name on the source side get nothing from hop 1's pause on (the durable is retired there): reconnect them to the target side once the run ends, where the durable has its name and position (between the hops it is the temporary stream's); route followers with a connection to the target side follow both hops"
        };
        r.add(
            &s,
            "across, same name",
            if c.config.is_push() { "push" } else { "pull" },
            "target side",
            Verdict::ChangedOnPurpose,
            what,
        );
        return;
    }
    if c.config.is_push() {
        r.add(&s, "in place", "push", "push", Verdict::Ok, "push applications keep receiving on the same deliver subject through both hops: nothing to do");
    } else {
        r.add(&s, "in place", "pull", "pull", Verdict::ChangedOnPurpose, format!(
            "pull applications bound to {s_name}/{c_name} by name see no messages from hop 1's pause until hop 2 recreates the durable under its name at its position, with 'consumer not found' once {s_name} is deleted; they resume by retrying (no redeploy), for about hop 2's copy and, where each hop waits a retry horizon before its commit (a cluster), hop 1's horizon too: a newcomer's R3 workers waited 13-23 s with a 10 s horizon (fetch loops of nats-py, nats.go and nats.js: 0.02-0.28 s after the change's end, docs/clients.md); nats.js 3.x `consume()` only about 40 s after it: told `409 Consumer Deleted`, it waits for two missed 30 s heartbeats (jetstream/src/consumer.ts: 'stall, missed heartbeats will resuscitate'), so restart such applications after the change or have them use fetch(); applications following the route record (docs/json.md) read {via} meanwhile",
            s_name = req.from, c_name = c.name, via = req.to
        ));
    }
}

/// A work queue allows one consumer per subject: the moved filters must not overlap.
fn rule_work_queue_overlaps(
    r: &mut Report,
    b_view: &StreamConfig,
    workqueue_filters: &[(String, String)],
) {
    if b_view.retention == RetentionPolicy::WorkQueue {
        for (i, (c1, f1)) in workqueue_filters.iter().enumerate() {
            for (c2, f2) in &workqueue_filters[i + 1..] {
                if c1 != c2 && crate::subject::overlaps(f1, f2) {
                    r.add("stream", "retention", "", "workqueue", Verdict::Unsafe, format!("B is a work queue, which allows one consumer per subject, but consumers {c1} ({f1}) and {c2} ({f2}) overlap"));
                }
            }
        }
    }
}

/// The server features the plan relies on, and what their absence means.
fn relies_on(features: Features, version: ServerVersion) -> Vec<String> {
    let mut relies_on = vec![];
    if features.consumer_pause {
        relies_on.push("consumer pause (2.11+): the old consumer is held at an exact position while publishers keep publishing".into());
    } else {
        relies_on.push(format!(
            "no consumer pause on {}: publishers must be stopped (--publishers-stopped)",
            version
        ));
    }
    if features.consumer_reset {
        relies_on.push("consumer reset (2.14+): not needed to move; rollback resumes the paused consumer where it was (and resets it past what a new durable processed, when one did)".into());
    }
    relies_on.push(if features.sourcing_streams_get_no_default_dedup_window {
        "2.14+: a sourcing stream gets no duplicate window by default, so B's is set explicitly"
            .into()
    } else {
        "before 2.14: B's duplicate window is still set explicitly".into()
    });
    if features.duplicate_sourced_msg_id_stalls_source {
        relies_on.push("2.10-2.12.5: a duplicate msg-id arriving by source stalls sourcing; strategy source never sends one".into());
    }
    relies_on
}
