//! B's configuration derived from A's raw JSON (A's settings and metadata
//! kept, the operator's changes applied, what the strategy needs set), and
//! each new durable's configuration derived from the old one's.

use super::request::{InPlaceHop, PlanError, PlanRequest, ServerFacts, Strategy};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Every stream setting of the server's StreamConfig (json tags of
/// server/stream.go, 2.15): a `--to-config` key outside this list is a typo the
/// server would silently ignore.
pub(super) const STREAM_SETTINGS: &[&str] = &[
    "name",
    "description",
    "subjects",
    "retention",
    "max_consumers",
    "max_msgs",
    "max_bytes",
    "max_age",
    "max_msgs_per_subject",
    "max_msg_size",
    "discard",
    "storage",
    "num_replicas",
    "no_ack",
    "duplicate_window",
    "placement",
    "mirror",
    "sources",
    "compression",
    "first_seq",
    "subject_transform",
    "republish",
    "allow_direct",
    "mirror_direct",
    "discard_new_per_subject",
    "sealed",
    "deny_delete",
    "deny_purge",
    "allow_rollup_hdrs",
    "consumer_limits",
    "allow_msg_ttl",
    "subject_delete_marker_ttl",
    "allow_msg_counter",
    "allow_atomic",
    "allow_msg_schedules",
    "persist_mode",
    "allow_batched",
    "metadata",
    "template_owner",
];

/// Fields of B's configuration the cut-over sets itself.
const OWNED: &[(&str, &str)] = &[
    ("name", "it is --to"),
    ("sources", "B sources exactly A"),
    ("mirror", "strategy source never mirrors"),
    ("sealed", "B must take messages"),
];

/// B's configuration while sourcing, from A's raw config and the overrides.
/// Unknown fields of A's config are carried over untouched.
pub fn b_config_from(
    a_config: &Value,
    to: &str,
    overrides: Option<&Map<String, Value>>,
    retry_horizon: Duration,
    strategy: Strategy,
) -> Result<(Value, Vec<String>), PlanError> {
    let mut b = a_config.as_object().cloned().unwrap_or_default();
    let a_name = b.get("name").and_then(|v| v.as_str()).unwrap_or_default().to_string();
    let mut final_subjects: Vec<String> = b
        .get("subjects")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
        .unwrap_or_default();
    // Sequence-bound or identity fields of A that must not be copied.
    for k in [
        "subjects",
        "mirror",
        "sources",
        "sealed",
        "first_seq",
        "mirror_direct",
        "created",
        "metadata",
    ] {
        b.remove(k);
    }
    // A's own window: B must drop no repeat A stored (see compat); a stream
    // without one (a sourcing A on 2.14+) gets the retry horizon.
    let a_dw = b.get("duplicate_window").and_then(|v| v.as_i64()).unwrap_or(0);
    let dw = if a_dw > 0 { a_dw } else { retry_horizon.as_nanos() as i64 };
    b.insert("duplicate_window".into(), json!(dw));
    if strategy != Strategy::Mirror {
        // Translation reads B by direct get; a mirror needs none (sequences
        // are kept) and keeps A's setting.
        b.insert("allow_direct".into(), json!(true));
    }
    let metadata = carried_metadata(a_config, &a_name);
    if let Some(o) = overrides {
        for (k, v) in o {
            if !STREAM_SETTINGS.contains(&k.as_str()) {
                return Err(PlanError::UnknownSetting {
                    field: k.clone(),
                    known: STREAM_SETTINGS.join(", "),
                });
            }
            if let Some((_, why)) = OWNED.iter().find(|(f, _)| f == k) {
                return Err(PlanError::ForbiddenOverride { field: k.clone(), why });
            }
            if k == "subjects" {
                final_subjects = v
                    .as_array()
                    .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
                    .unwrap_or_default();
                continue;
            }
            b.insert(k.clone(), v.clone());
        }
    }
    b.insert("name".into(), json!(to));
    b.insert("subjects".into(), json!([]));
    match strategy {
        // A mirror keeps A's sequences. It records the msg-ids it stores (it
        // does not check them: stream.go processJetStreamMsg "If we're mirroring
        // we can't deduplicate on our own", then storeMsgIdLocked) when its
        // window is set, so after promotion a retry of a message A stored meets
        // its id.
        Strategy::Mirror => b.insert("mirror".into(), json!({ "name": a_name })),
        // B takes publishes of its own from the start: no copy of A.
        Strategy::DualWrite => b.insert("subjects".into(), json!(final_subjects)),
        Strategy::Source => b.insert("sources".into(), json!([{ "name": a_name }])),
    };
    b.insert("metadata".into(), Value::Object(metadata));
    Ok((Value::Object(b), final_subjects))
}

/// What B takes only at the commit point, in the update that gives it the
/// subjects (and promotes a mirror), and so leaves out while it copies A:
/// - `republish` (any B the run creates): a stream republishes every message
///   it stores, copied ones too, so the copy would republish A's history;
/// - `subject_delete_marker_ttl` (a mirror): "subject delete markers forbidden
///   on mirrors" (stream.go checkStreamCfg);
/// - `deny_purge`: B's work-queue copies are purged before each new
///   durable is created, which it would refuse;
/// - the last hop of an in-place change: the stream as it was plus the new
///   settings, so no mirror direct get (inherited from the temporary stream)
///   and no marker of ours; and its own direct get only then: while it
///   catches up it would answer for the stream's name from a partial copy,
///   and the temporary stream answers meanwhile (its mirror direct get, kept
///   through its promotion).
pub(super) fn commit_touches(
    req: &PlanRequest,
    mut b_config: Value,
    b_exists: bool,
) -> (Value, Map<String, Value>) {
    let mirror = req.strategy == Strategy::Mirror;
    let mut promote = Map::new();
    let mut take = |b_config: &mut Value, key: &str| {
        if let Some(v) = b_config.as_object_mut().and_then(|c| c.remove(key)) {
            if !v.is_null() {
                promote.insert(key.to_string(), v);
            }
        }
    };
    if !b_exists {
        take(&mut b_config, "republish");
        // Set with the subjects: before it a work-queue B's copies below
        // each new durable's start are purged, which deny_purge refuses
        // (jsStreamPurgeRequest); it can be set by an update, never unset.
        if b_config.get("deny_purge") == Some(&json!(true)) {
            take(&mut b_config, "deny_purge");
        }
    }
    if mirror && !b_exists {
        take(&mut b_config, "subject_delete_marker_ttl");
    }
    if mirror && req.in_place == Some(InPlaceHop::Back) {
        let mut md =
            b_config.get("metadata").and_then(|v| v.as_object()).cloned().unwrap_or_default();
        md.remove(FROM_KEY);
        promote.insert("metadata".into(), Value::Object(md));
        promote.insert("mirror_direct".into(), json!(false));
        let direct = b_config.get("allow_direct").cloned().unwrap_or(json!(false));
        promote.insert("allow_direct".into(), direct);
        b_config["allow_direct"] = json!(false);
    }
    (b_config, promote)
}

/// Settings of A the server updates in place that B is given as A has
/// them: an operator may change one on A while the run copies it (a
/// newcomer's `deny_purge` set on the temporary stream between the plan
/// and hop 2's commit was lost with it). The plan keeps A's values of
/// those B took unchanged ([`carried_settings`]), and right before the
/// commit a later change is carried to B (`recheck::settings_carried`).
pub const CARRIED: &[&str] = &[
    "description",
    "max_age",
    "max_msgs",
    "max_bytes",
    "max_msgs_per_subject",
    "max_msg_size",
    "discard",
    "discard_new_per_subject",
    "deny_delete",
    "deny_purge",
    "allow_rollup_hdrs",
    "allow_direct",
    "allow_msg_ttl",
    "subject_delete_marker_ttl",
];

/// A setting's value for comparison: absent, null, false, 0 and "" are the
/// server's "unset" alike (it omits some of them from its JSON).
fn unset_alike(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => Value::Null,
        Some(Value::Bool(false)) => Value::Null,
        Some(Value::String(s)) if s.is_empty() => Value::Null,
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => Value::Null,
        Some(v) => v.clone(),
    }
}

/// A's values of the [`CARRIED`] settings B was given unchanged (in its
/// configuration or at its promotion); one the operator changed for B
/// (`--set`, `--to-config`) is not carried.
pub fn carried_settings(
    a_config: &Value,
    b_config: &Value,
    promote_with: &Map<String, Value>,
) -> Map<String, Value> {
    CARRIED
        .iter()
        .filter(|k| {
            let b = promote_with.get(**k).or_else(|| b_config.get(**k));
            unset_alike(a_config.get(**k)) == unset_alike(b)
        })
        .map(|k| (k.to_string(), a_config.get(*k).cloned().unwrap_or(Value::Null)))
        .collect()
}

/// The carried settings A has changed since the plan: (name, then, now).
pub fn carried_changes(
    carried: &Map<String, Value>,
    a_config_now: &Value,
) -> Vec<(String, Value, Value)> {
    carried
        .iter()
        .filter(|(k, then)| unset_alike(Some(then)) != unset_alike(a_config_now.get(k.as_str())))
        .map(|(k, then)| {
            (k.clone(), then.clone(), a_config_now.get(k.as_str()).cloned().unwrap_or(Value::Null))
        })
        .collect()
}

/// A's own metadata goes along (the server sets its `_nats.*` keys anew),
/// with a note of where B comes from.
fn carried_metadata(a_config: &Value, a_name: &str) -> Map<String, Value> {
    let mut m: Map<String, Value> = a_config
        .get("metadata")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.starts_with("_nats."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    m.insert(FROM_KEY.into(), json!(a_name));
    m
}

/// The metadata key that tells which stream B was made from.
pub const FROM_KEY: &str = "nats-cutover.from";

/// The metadata key B carries from its hand-over ([`super::Plan::handover`])
/// until its source of A is removed: the first sequence it sources (its
/// sequences are A's, so its progress is read like a mirror's).
pub const HANDOVER_KEY: &str = "nats-cutover.handover";

/// Why B's hand-over from mirroring to sourcing A ([`super::Plan::handover`])
/// must be made in a freeze, A's subjects released; `None`: it is made live.
///
/// A source stores each message at B's next sequence and fills no gap (only
/// a mirror does: nats-server stream.go `processInboundMirrorMsg` →
/// `skipMsgs`), so a message A stored after B's mirror stopped and removed
/// before B's source read it would shift every later sequence of B. Live,
/// B's mirror is removed while A serves, and B then sources A from its
/// next sequence: A must not remove so new a message in between, which
/// takes the seconds of B's update (the server scans B's messages for a
/// source header, stream.go `setStartingSequenceForSources`: 2.5 s for
/// 200,000 messages on R3). A limits stream removes only its oldest,
/// unless its limits turn it over that fast; what else removes a new one
/// is below. (A message deleted by a client meanwhile shifts B too, in a
/// freeze as well: the commit's check finds it, `tail_exact`.)
pub fn handover_freeze_reason(a: &Value) -> Option<&'static str> {
    let n = |k: &str| a[k].as_i64().unwrap_or(0);
    let on = |k: &str| a[k].as_bool() == Some(true);
    if a["retention"].as_str().unwrap_or("limits") != "limits" {
        return Some("a work-queue or interest stream removes messages as they are consumed");
    }
    if n("max_msgs_per_subject") > 0 {
        return Some("a per-subject limit (a KV bucket's history) removes a subject's older messages as new ones come");
    }
    if on("allow_rollup_hdrs") {
        return Some("a roll-up removes a subject's or the stream's earlier messages");
    }
    if on("allow_msg_ttl") {
        return Some("a message with its own TTL may expire before older ones");
    }
    let small = |k: &str, below: i64| (1..below).contains(&n(k));
    if small("max_msgs", 100_000)
        || small("max_bytes", 64 << 20)
        || small("max_age", 600_000_000_000)
    {
        return Some("its limits (max_msgs under 100,000, max_bytes under 64 MiB or max_age under 10 min) could remove a message stored in seconds");
    }
    None
}

/// The new durable on B: the old one's configuration, unknown fields included,
/// positioned by `opt_start_seq` later and with filters as B stores them.
///
/// On a work-queue B a consumer must deliver all (consumer.go, error 10101):
/// it starts after the checkpoint because B's copies below it are purged
/// first (see the engine's move_consumer).
pub fn b_consumer_config(old_raw_config: &Value, b_filters: &[String], work_queue: bool) -> Value {
    let mut c = old_raw_config.as_object().cloned().unwrap_or_default();
    for k in ["pause_until", "opt_start_time", "opt_start_seq", "filter_subject", "filter_subjects"]
    {
        c.remove(k);
    }
    let policy = if work_queue { "all" } else { "by_start_sequence" };
    c.insert("deliver_policy".into(), json!(policy));
    match b_filters.len() {
        0 => {}
        1 => {
            c.insert("filter_subject".into(), json!(b_filters[0]));
        }
        _ => {
            c.insert("filter_subjects".into(), json!(b_filters));
        }
    }
    Value::Object(c)
}

/// Where an in-place hop 1's durable keeps its `inactive_threshold`, to be
/// restored by hop 2.
pub const INACTIVE_KEY: &str = "nats-cutover.inactive_threshold";

/// In place, a durable with `inactive_threshold` lives on the temporary
/// stream with none: applications bound to it by name cannot reach it there
/// (a newcomer's trial: nobody pulled, the server deleted it during hop 2's
/// copy with its position, and every resume failed). Hop 1 keeps the value
/// in the durable's metadata ([`INACTIVE_KEY`]); hop 2 restores it and
/// drops the key, so the durable on the stream's own name is as it was.
pub fn keep_alive_in_place(mut cfg: Value, hop: Option<InPlaceHop>) -> Value {
    let Some(c) = cfg.as_object_mut() else { return cfg };
    match hop {
        Some(InPlaceHop::Out) => {
            let threshold = c.get("inactive_threshold").and_then(Value::as_i64).unwrap_or(0);
            if threshold > 0 {
                c.remove("inactive_threshold");
                let meta = c.entry("metadata").or_insert_with(|| json!({}));
                if let Some(m) = meta.as_object_mut() {
                    m.insert(INACTIVE_KEY.into(), json!(threshold.to_string()));
                }
            }
        }
        Some(InPlaceHop::Back) => {
            let kept = c
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .and_then(|m| m.remove(INACTIVE_KEY))
                .and_then(|v| v.as_str().and_then(|s| s.parse::<i64>().ok()));
            if c.get("metadata").and_then(Value::as_object).is_some_and(|m| m.is_empty()) {
                c.remove("metadata");
            }
            if let Some(t) = kept {
                c.insert("inactive_threshold".into(), json!(t));
            }
        }
        None => {}
    }
    cfg
}

/// B's configuration (as it exists, or as it will be created), the subjects it
/// takes at the commit point, and whether it exists.
pub(crate) fn planned_b(
    req: &PlanRequest,
    facts: &ServerFacts,
    retry_horizon: Duration,
) -> Result<(Value, Vec<String>, bool), PlanError> {
    let a_cfg_raw = facts.a_raw.get("config").cloned().unwrap_or(Value::Null);
    Ok(match &facts.b_raw {
        Some(b) => {
            let cfg = b.get("config").cloned().unwrap_or(Value::Null);
            let subjects = b_config_from(
                &a_cfg_raw,
                &req.to,
                req.to_config.as_ref(),
                retry_horizon,
                req.strategy,
            )?
            .1;
            (cfg, subjects, true)
        }
        None => {
            let (mut cfg, subjects) = b_config_from(
                &a_cfg_raw,
                &req.to,
                req.to_config.as_ref(),
                retry_horizon,
                req.strategy,
            )?;
            if let Some(ext) = &req.external {
                match req.strategy {
                    Strategy::Mirror => cfg["mirror"]["external"] = ext.json(),
                    Strategy::Source => cfg["sources"][0]["external"] = ext.json(),
                    // No source to carry it: the dual-write plan refuses it.
                    Strategy::DualWrite => {}
                }
            }
            (cfg, subjects, false)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_b_took_as_a_had_it_is_carried_and_a_change_of_it_found() {
        let a = json!({"max_age": 0, "max_msgs": 100, "deny_purge": false, "description": "x"});
        // B's max_msgs was set for it (--set): not carried; an omitted
        // deny_purge is A's false.
        let b = json!({"max_age": 0, "max_msgs": 5, "description": "x"});
        let carried = carried_settings(&a, &b, &Map::new());
        assert!(!carried.contains_key("max_msgs"));
        assert_eq!(carried["deny_purge"], json!(false));
        assert_eq!(carried_changes(&carried, &a), vec![], "nothing changed");
        let now = json!({"max_age": 0, "max_msgs": 7, "deny_purge": true, "description": ""});
        let changes = carried_changes(&carried, &now);
        let names: Vec<&str> = changes.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(names, ["deny_purge", "description"], "max_msgs is B's own");
        // Taken at the promotion: compared there.
        let promote: Map<String, Value> =
            [("deny_purge".to_string(), json!(true))].into_iter().collect();
        let a2 = json!({"deny_purge": true});
        assert_eq!(carried_settings(&a2, &json!({}), &promote)["deny_purge"], json!(true));
    }

    #[test]
    fn an_inactive_threshold_is_kept_through_both_in_place_hops() {
        let old = json!({"durable_name": "w", "inactive_threshold": 30_000_000_000i64, "metadata": {"team": "a"}});
        let hop1 = keep_alive_in_place(old.clone(), Some(InPlaceHop::Out));
        assert!(hop1.get("inactive_threshold").is_none(), "{hop1}");
        assert_eq!(hop1["metadata"][INACTIVE_KEY], json!("30000000000"));
        assert_eq!(hop1["metadata"]["team"], json!("a"));
        let hop2 = keep_alive_in_place(hop1, Some(InPlaceHop::Back));
        assert_eq!(hop2, old);
        // Without a threshold nothing changes; a plain move keeps it.
        let plain = json!({"durable_name": "w"});
        let back = keep_alive_in_place(plain.clone(), Some(InPlaceHop::Out));
        assert_eq!(keep_alive_in_place(back, Some(InPlaceHop::Back)), plain);
        assert_eq!(keep_alive_in_place(old.clone(), None), old);
    }
}
