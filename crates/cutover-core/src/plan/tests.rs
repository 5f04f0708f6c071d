//! The plan's rules, against server facts written out by hand.

use super::*;
use crate::compat::Verdict;
use crate::version::ServerVersion;
use serde_json::{json, Value};

fn facts(a_cfg: Value, consumers: Vec<Value>) -> ServerFacts {
    ServerFacts {
        version: ServerVersion::new(2, 15, 1),
        a_raw: json!({"config": a_cfg, "state": {"messages": 10, "bytes": 1000, "first_seq": 1, "last_seq": 10}}),
        b_raw: None,
        consumers_raw: consumers,
        other_consumers: vec![],
        downstream: vec![],
        account: None,
        checks: Default::default(),
    }
}

fn req() -> PlanRequest {
    PlanRequest::source("A", "B", &["C"])
}

fn consumer(cfg: Value) -> Value {
    json!({"name": "C", "stream_name": "A", "config": cfg, "delivered": {"stream_seq": 5}, "ack_floor": {"stream_seq": 5}})
}

fn across_req(strategy: Strategy) -> PlanRequest {
    let ext = External {
        api: "JS.SRC.API".into(),
        deliver: Some("deliver.src".into()),
        repoint_publishers: false,
        split_publishers: false,
    };
    PlanRequest { strategy, external: Some(ext), ..req() }
}

fn plain_a() -> Value {
    json!({"name": "A", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64})
}

fn explicit_c() -> Vec<Value> {
    vec![consumer(json!({"durable_name": "C", "ack_policy": "explicit"}))]
}

#[test]
fn across_systems_b_reaches_a_through_the_external_block() {
    let ext = json!({"api": "JS.SRC.API", "deliver": "deliver.src"});
    let p = build(&across_req(Strategy::Source), &facts(plain_a(), explicit_c())).unwrap();
    assert!(p.safe, "{:#?}", p.unsafe_findings().collect::<Vec<_>>());
    assert_eq!(p.b_config["sources"], json!([{"name": "A", "external": ext}]));
    assert!(p.findings.iter().any(|f| f.setting == "applications"), "says what moves");
    let p = build(&across_req(Strategy::Mirror), &facts(plain_a(), explicit_c())).unwrap();
    assert_eq!(p.b_config["mirror"], json!({"name": "A", "external": ext}));
}

#[test]
fn split_publishers_wait_for_the_operator_and_refuse_what_cannot_be_exact() {
    let mut p = build(&across_req(Strategy::Source), &facts(plain_a(), explicit_c())).unwrap();
    p.split_publishers();
    assert!(p.safe, "{:#?}", p.unsafe_findings().collect::<Vec<_>>());
    assert!(p.external.as_ref().unwrap().split_publishers);
    let titles: Vec<&str> = p.steps.iter().map(|s| s.title.as_str()).collect();
    assert!(!titles.iter().any(|t| t.starts_with("commit point")), "{titles:?}");
    let wait = p.steps.iter().find(|s| s.title == "wait for the publishers").unwrap();
    assert!(wait.detail.contains("nats-cutover run --resume A.B --proceed"), "{wait:?}");
    assert_eq!(
        p.steps.iter().map(|s| s.n).collect::<Vec<_>>(),
        (1..=titles.len() as u32).collect::<Vec<_>>()
    );
    // A mirror (a same-name move's hop 1) is handed over to sourcing A
    // first, and B takes the subjects after it; even with a window of 0
    // asked for B (the hand-over sets one).
    let mut m = build(&across_req(Strategy::Mirror), &facts(plain_a(), explicit_c())).unwrap();
    assert!(!m.handover, "one server keeps a mirror's window: no hand-over unsplit");
    m.b_config["duplicate_window"] = json!(0);
    m.split_publishers();
    assert!(m.safe, "{:#?}", m.unsafe_findings().collect::<Vec<_>>());
    assert!(m.handover, "handed over before the split");
    let titles: Vec<&str> = m.steps.iter().map(|s| s.title.as_str()).collect();
    let at = |t: &str| titles.iter().position(|x| x.starts_with(t)).unwrap_or(usize::MAX);
    assert!(at("hand over") < at("B takes the subjects"), "{titles:?}");
    assert_eq!(titles.iter().filter(|t| **t == "hand over").count(), 1, "{titles:?}");
    let share = &m.steps[at("B takes the subjects")].detail;
    assert!(share.contains("retry horizon") && share.contains("origin"), "{share}");
    // No window, no dedup across the two copies; a server whose sourcing
    // stalls on a duplicate msg-id.
    let mut w = build(&across_req(Strategy::Source), &facts(plain_a(), explicit_c())).unwrap();
    w.b_config["duplicate_window"] = json!(0);
    w.split_publishers();
    assert!(!w.safe && w.unsafe_findings().any(|f| f.setting == "duplicate_window"));
    let mut old = facts(plain_a(), explicit_c());
    old.version = ServerVersion::new(2, 12, 4);
    let mut v = build(&across_req(Strategy::Source), &old).unwrap();
    v.split_publishers();
    assert!(!v.safe && v.unsafe_findings().any(|f| f.setting == "server"));
}

#[test]
fn across_systems_fence_mode_and_an_unplanned_external_b_are_refused() {
    let fence = PlanRequest { mode: Mode::Fence, ..across_req(Strategy::Source) };
    let p = build(&fence, &facts(plain_a(), explicit_c())).unwrap();
    assert!(p.unsafe_findings().any(|f| f.setting == "mode"), "{:#?}", p.findings);
    // B exists, sourcing A through another system, but the run is on one.
    let mut f = facts(plain_a(), explicit_c());
    f.b_raw = Some(
        json!({"config": {"name": "B", "subjects": [], "duplicate_window": 120_000_000_000i64, "allow_direct": true, "sources": [{"name": "A", "external": {"api": "$JS.leaf.API"}}]}, "state": {"messages": 0}}),
    );
    let p = build(&req(), &f).unwrap();
    let bad: Vec<_> = p.unsafe_findings().map(|f| f.setting.as_str()).collect();
    assert!(bad.contains(&"sources.external"), "{bad:?}");
}

#[test]
fn a_plain_migration_is_safe_and_keeps_unknown_settings() {
    let a = json!({"name": "A", "subjects": ["orders.>"], "retention": "limits", "storage": "file", "some_future_field": 7, "duplicate_window": 120_000_000_000i64});
    let p = build(&req(), &facts(a, vec![consumer(json!({"durable_name": "C", "ack_policy": "explicit", "filter_subject": "orders.eu", "future_consumer_field": true}))])).unwrap();
    assert!(p.safe, "{:#?}", p.unsafe_findings().collect::<Vec<_>>());
    assert_eq!(p.b_config["some_future_field"], 7);
    assert_eq!(p.b_config["subjects"], json!([]));
    assert_eq!(p.b_config["sources"], json!([{"name": "A"}]));
    assert_eq!(p.b_final_subjects, vec!["orders.>"]);
    assert_eq!(p.consumers[0].b_config["future_consumer_field"], true);
    assert_eq!(p.consumers[0].b_config["filter_subject"], "orders.eu");
    assert_eq!(p.consumers[0].a_filters, Some(vec!["orders.eu".to_string()]));
    assert_eq!(p.consumers[0].b_config["deliver_policy"], "by_start_sequence");
}

#[test]
fn an_ingest_rate_above_the_sourcing_ceiling_is_warned_not_refused() {
    use crate::catchup::IngestRate;
    let a = json!({"name": "A", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64});
    let c = vec![consumer(json!({"durable_name": "C", "ack_policy": "explicit"}))];
    let mut f = facts(a, c);
    for (per_s, warned) in [(25_000.0, true), (1_000.0, false), (0.0, false)] {
        f.checks.a_ingest = Some(IngestRate { per_s, over_ms: 250 });
        let p = build(&req(), &f).unwrap();
        assert!(p.safe, "a warning, not a refusal");
        assert_eq!(p.a_ingest, Some(IngestRate { per_s, over_ms: 250 }));
        let w = p.findings.iter().find(|x| x.setting == "ingest rate");
        assert_eq!(w.is_some(), warned, "{per_s}: {w:?}");
        if let Some(w) = w {
            assert!(
                w.reason.starts_with("warning: A stored 25000 msg/s")
                    && w.reason.contains("above 18000 msg/s"),
                "{}",
                w.reason
            );
        }
    }
}

#[test]
fn strategy_mirror_needs_mirror_promotion_and_mirrors_a() {
    let a = json!({"name": "A", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64});
    let c = vec![consumer(json!({"durable_name": "C", "ack_policy": "explicit"}))];
    let mut r = req();
    r.strategy = Strategy::Mirror;
    let p = build(&r, &facts(a.clone(), c.clone())).unwrap();
    assert!(p.safe, "{:#?}", p.unsafe_findings().collect::<Vec<_>>());
    assert_eq!(p.b_config["mirror"], json!({"name": "A"}));
    assert!(p.b_config.get("sources").is_none());
    assert_eq!(p.b_config["duplicate_window"], 120_000_000_000i64, "explicit: it records ids");
    let mut old = facts(a, c);
    old.version = ServerVersion::new(2, 11, 11);
    let p = build(&r, &old).unwrap();
    assert!(!p.safe);
    assert!(p.unsafe_findings().any(|f| f.reason.contains("mirror promotion (2.12+)")));
}

#[test]
fn refuses_ack_none_and_interest_b() {
    let a = json!({"name": "A", "subjects": ["x.>"]});
    let p = build(
        &req(),
        &facts(a.clone(), vec![consumer(json!({"durable_name": "C", "ack_policy": "none"}))]),
    )
    .unwrap();
    assert!(!p.safe);
    assert!(p.unsafe_findings().any(|f| f.setting == "ack_policy"));
    let mut r = req();
    r.to_config = Some(json!({"retention": "interest"}).as_object().unwrap().clone());
    let p = build(&r, &facts(a, vec![consumer(json!({"durable_name": "C"}))])).unwrap();
    assert!(p.unsafe_findings().any(|f| f.setting == "retention"));
}

#[test]
fn refuses_subjects_that_lose_publishers_and_owned_overrides() {
    let a = json!({"name": "A", "subjects": ["x.>", "y"]});
    let mut r = req();
    r.to_config = Some(json!({"subjects": ["x.>"]}).as_object().unwrap().clone());
    let p = build(&r, &facts(a.clone(), vec![consumer(json!({"durable_name": "C"}))])).unwrap();
    assert!(p.unsafe_findings().any(|f| f.setting == "subjects" && f.from == "y"));
    r.to_config = Some(json!({"sources": []}).as_object().unwrap().clone());
    assert!(matches!(
        build(&r, &facts(a, vec![consumer(json!({"durable_name": "C"}))])),
        Err(PlanError::ForbiddenOverride { .. })
    ));
}

#[test]
fn refuses_same_stream_old_server_and_no_pause_without_stopped_publishers() {
    let a = json!({"name": "A", "subjects": ["x"]});
    let mut r = req();
    r.to = "A".into();
    assert!(matches!(
        build(&r, &facts(a.clone(), vec![consumer(json!({"durable_name": "C"}))])),
        Err(PlanError::SameStream(_))
    ));
    let mut f = facts(a.clone(), vec![consumer(json!({"durable_name": "C", "max_deliver": 3}))]);
    f.version = ServerVersion::new(2, 9, 25);
    assert!(matches!(build(&req(), &f), Err(PlanError::ServerTooOld { .. })));
    f.version = ServerVersion::new(2, 10, 20);
    let p = build(&req(), &f).unwrap();
    assert!(p.unsafe_findings().any(|x| x.setting == "pause"));
    let mut r = req();
    r.publishers_stopped = true;
    let p = build(&r, &f).unwrap();
    assert!(p.safe, "{:#?}", p.unsafe_findings().collect::<Vec<_>>());
    assert!(p.quiescence[0].1.interval.is_some());
}

#[test]
fn consumers_and_streams_left_behind_are_unsafe() {
    let a = json!({"name": "A", "subjects": ["x"]});
    let mut f = facts(a, vec![consumer(json!({"durable_name": "C"}))]);
    f.other_consumers = vec![("D".into(), true), ("eph".into(), false)];
    f.downstream = vec!["MIRROR_OF_A".into()];
    let p = build(&req(), &f).unwrap();
    let unsafe_: Vec<_> = p.unsafe_findings().map(|x| x.from.clone()).collect();
    assert_eq!(unsafe_, vec!["D".to_string(), "MIRROR_OF_A".to_string()]);
    assert!(p.findings.iter().any(|x| x.from == "eph" && x.verdict == Verdict::ChangedOnPurpose));
}

#[test]
fn b_must_fit_in_the_account() {
    let a = json!({"name": "A", "subjects": ["x"]});
    let mut f = facts(a, vec![consumer(json!({"durable_name": "C"}))]);
    // A holds 1000 bytes: 500 used + 1000 > 1200.
    f.account = Some(
        json!({"storage": 500, "memory": 0, "limits": {"max_storage": 1200, "max_memory": -1}}),
    );
    let p = build(&req(), &f).unwrap();
    assert!(p.unsafe_findings().any(|x| x.setting == "account storage"), "{:#?}", p.findings);
    f.account = Some(
        json!({"storage": 500, "memory": 0, "limits": {"max_storage": 1500, "max_memory": -1}}),
    );
    assert!(build(&req(), &f).unwrap().safe);
}

#[test]
fn fewer_replicas_on_b_is_warned_about_not_refused() {
    let a = json!({"name": "A", "subjects": ["x"], "num_replicas": 3});
    let c = || vec![consumer(json!({"durable_name": "C", "ack_policy": "explicit"}))];
    let mut r = req();
    r.to_config = Some(json!({"num_replicas": 1}).as_object().unwrap().clone());
    let p = build(&r, &facts(a.clone(), c())).unwrap();
    let f = p.findings.iter().find(|f| f.setting == "num_replicas").unwrap();
    assert_eq!(f.verdict, Verdict::ChangedOnPurpose, "{f:?}");
    assert!(f.reason.starts_with("WARNING: B keeps 1 replica(s) where A keeps 3"), "{f:?}");
    let p = build(&req(), &facts(a, c())).unwrap();
    let f = p.findings.iter().find(|f| f.setting == "num_replicas").unwrap();
    assert_eq!((f.verdict, f.reason.as_str()), (Verdict::Ok, "unchanged"));
}

#[test]
fn smaller_limits_than_held_are_unsafe() {
    let a = json!({"name": "A", "subjects": ["x"]});
    let mut r = req();
    r.to_config = Some(json!({"max_msgs": 5}).as_object().unwrap().clone());
    let p = build(&r, &facts(a, vec![consumer(json!({"durable_name": "C"}))])).unwrap();
    assert!(p.unsafe_findings().any(|f| f.setting == "max_msgs"));
}

/// A durable created on A while the run moved the planned ones is planned
/// on the spot against the same B; one the rules refuse says why.
#[test]
fn a_durable_that_appeared_mid_run_is_planned_against_the_same_b() {
    let p = build(&req(), &facts(plain_a(), explicit_c())).unwrap();
    let late = json!({"name": "late", "stream_name": "A", "config": {"durable_name": "late", "ack_policy": "explicit", "filter_subject": "orders.eu"}, "delivered": {"stream_seq": 3}, "ack_floor": {"stream_seq": 3}});
    let (cp, findings) = appeared_consumer(&p, &late).unwrap();
    assert_eq!(cp.name, "late");
    assert_eq!(cp.b_filters, vec!["orders.eu".to_string()]);
    assert_eq!(cp.b_config["deliver_policy"], json!("by_start_sequence"));
    assert!(findings.iter().all(|f| f.verdict != Verdict::Unsafe));
    let none = json!({"name": "none", "stream_name": "A", "config": {"durable_name": "none", "ack_policy": "none"}});
    let why = appeared_consumer(&p, &none).unwrap_err();
    assert!(why.contains("ack_policy"), "{why}");
}

/// A sourced copy carries the Nats-Stream-Source header, which counts
/// against B's max_msg_size: a B no larger than A stalls on A's largest
/// message (a newcomer's 2,048-byte message, both limits 2,048); a B with
/// room for the header is fine; a mirror copies messages as they are.
#[test]
fn a_sourcing_b_needs_room_for_the_source_header() {
    let a = json!({"name": "A", "subjects": ["orders.eu"], "duplicate_window": 120_000_000_000i64, "max_msg_size": 2048});
    let p = build(&req(), &facts(a.clone(), explicit_c())).unwrap();
    let why = p.unsafe_reasons();
    assert!(
        !p.safe && why.contains("Nats-Stream-Source") && why.contains("at least 2127"),
        "{why}"
    );
    let mut roomy = req();
    roomy.to_config = json!({"max_msg_size": 4096}).as_object().cloned();
    assert!(build(&roomy, &facts(a.clone(), explicit_c())).unwrap().safe);
    let mirror = PlanRequest { strategy: Strategy::Mirror, ..req() };
    let p = build(&mirror, &facts(a, explicit_c())).unwrap();
    assert!(
        !p.findings.iter().any(|f| f.setting == "max_msg_size" && f.verdict == Verdict::Unsafe),
        "{}",
        p.unsafe_reasons()
    );
}

#[test]
fn a_mirror_whose_window_the_server_drops_is_handed_over_not_refused() {
    let mirror = PlanRequest { strategy: Strategy::Mirror, ..req() };
    let mut f = facts(plain_a(), explicit_c());
    f.checks.b_config_check = Some(ConfigCheck {
        scratch: "CUTOVER_CHECK_B".into(),
        result: Ok(()),
        dropped_duplicate_window: true,
    });
    let p = build(&mirror, &f).unwrap();
    assert!(p.safe, "{}", p.unsafe_reasons());
    assert!(p.handover);
    let titles: Vec<&str> = p.steps.iter().map(|s| s.title.as_str()).collect();
    let at = titles.iter().position(|t| *t == "hand over").expect("a hand-over step");
    assert_eq!(titles[at + 1], "commit point: move publishers", "{titles:?}");
    let kept =
        ConfigCheck { dropped_duplicate_window: false, ..f.checks.b_config_check.clone().unwrap() };
    f.checks.b_config_check = Some(kept);
    let p = build(&mirror, &f).unwrap();
    assert!(!p.handover && p.steps.iter().all(|s| s.title != "hand over"));
    // Strategy source keeps its window: never handed over.
    let mut f = facts(plain_a(), explicit_c());
    f.checks.b_config_check = Some(ConfigCheck {
        scratch: "CUTOVER_CHECK_B".into(),
        result: Ok(()),
        dropped_duplicate_window: true,
    });
    assert!(!build(&req(), &f).unwrap().handover);
}

#[test]
fn a_work_queue_b_names_what_a_durable_that_started_late_never_delivered() {
    let mut r = req();
    r.strategy = Strategy::Mirror;
    r.to_config = Some(json!({"retention": "workqueue"}).as_object().unwrap().clone());
    let c = |policy: &str| {
        vec![consumer(
            json!({"durable_name": "C", "ack_policy": "explicit", "deliver_policy": policy}),
        )]
    };
    let finding = |policy: &str| {
        let p = build(&r, &facts(plain_a(), c(policy))).unwrap();
        assert!(p.safe, "{:#?}", p.unsafe_findings().collect::<Vec<_>>());
        p.findings.into_iter().find(|f| f.setting == "deliver_policy").unwrap()
    };
    let late = finding("new");
    assert_eq!(late.to, "all");
    assert!(late.reason.contains("never delivered, and those are purged"), "{}", late.reason);
    let all = finding("all");
    assert!(!all.reason.contains("never delivered"), "{}", all.reason);
}

#[test]
fn the_hand_over_is_made_live_only_where_a_removes_no_new_message() {
    use super::handover_freeze_reason as why;
    let plain = json!({"retention": "limits", "max_msgs": -1, "max_bytes": -1, "max_age": 0, "max_msgs_per_subject": -1});
    assert_eq!(why(&plain), None, "a plain limits stream");
    let big = json!({"max_msgs": 10_000_000, "max_age": 86_400_000_000_000i64});
    assert_eq!(why(&big), None, "limits that do not turn it over in seconds");
    for (cfg, what) in [
        (json!({"retention": "workqueue"}), "work-queue"),
        (json!({"max_msgs_per_subject": 10}), "per-subject"),
        (json!({"allow_rollup_hdrs": true}), "roll-up"),
        (json!({"allow_msg_ttl": true}), "TTL"),
        (json!({"max_msgs": 1_000}), "max_msgs"),
        (json!({"max_age": 30_000_000_000i64}), "max_age"),
    ] {
        assert!(why(&cfg).is_some_and(|r| r.contains(what)), "{cfg}: {:?}", why(&cfg));
    }
}
