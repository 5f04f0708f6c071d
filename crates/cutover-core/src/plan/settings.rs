//! The settings an operator asks for by name (`--set`, `kv`/`obj`
//! options): known names, sane values, and which of them the server will
//! not update in place (so a migration is needed).

use super::b_config::STREAM_SETTINGS;
use super::request::PlanError;
use serde_json::{Map, Value};

/// Whether `key` is a stream setting's name (the server's stream config).
pub fn is_stream_setting(key: &str) -> bool {
    STREAM_SETTINGS.contains(&key)
}

/// Refuses, by name, a key that is not a stream setting (a typo the server
/// would silently ignore).
pub fn check_setting_names(settings: &Map<String, Value>) -> Result<(), PlanError> {
    match settings.keys().find(|k| !STREAM_SETTINGS.contains(&k.as_str())) {
        Some(k) => {
            Err(PlanError::UnknownSetting { field: k.clone(), known: STREAM_SETTINGS.join(", ") })
        }
        None => Ok(()),
    }
}

/// The values of the settings with a fixed set of values or a range, checked
/// before anything is judged (the server would refuse them later, or the
/// "no migration needed" answer would print an update it refuses).
pub fn check_setting_values(settings: &Map<String, Value>) -> Result<(), PlanError> {
    for (k, v) in settings {
        let one_of = |allowed: &[&str]| v.as_str().is_some_and(|s| allowed.contains(&s));
        let int_from = |min: i64| v.as_i64().is_some_and(|n| n >= min);
        let expected = match k.as_str() {
            "retention" if !one_of(&["limits", "interest", "workqueue"]) => {
                "limits, interest or workqueue"
            }
            "storage" if !one_of(&["file", "memory"]) => "file or memory",
            "discard" if !one_of(&["old", "new"]) => "old or new",
            "compression" if !one_of(&["none", "s2"]) => "none or s2",
            "num_replicas" if !v.as_i64().is_some_and(|n| (1..=5).contains(&n)) => "1 to 5",
            "max_msgs"
            | "max_bytes"
            | "max_msgs_per_subject"
            | "max_msg_size"
            | "max_consumers"
                if !int_from(-1) =>
            {
                "a whole number, -1 for no limit"
            }
            "max_age" | "duplicate_window" if !int_from(0) => {
                "nanoseconds, 0 for none (e.g. 3600000000000 for 1h)"
            }
            _ => continue,
        };
        return Err(PlanError::BadSettingValue {
            field: k.clone(),
            value: v.to_string(),
            expected,
        });
    }
    Ok(())
}

/// The settings among `changes` that the server refuses to update on a stream
/// with configuration `current` (nats-server stream.go
/// `configUpdateCheckLocked`), each with the server's reason. Empty: the
/// server takes them as a plain update and no migration is needed.
pub fn needs_migration(current: &Value, changes: &Map<String, Value>) -> Vec<(String, String)> {
    let cur = |k: &str| current.get(k).cloned().unwrap_or(Value::Null);
    let truthy = |v: &Value| v.as_bool().unwrap_or(false);
    let mut out = vec![];
    for (k, new) in changes {
        let old = cur(k);
        if *new == old {
            continue;
        }
        let why = match k.as_str() {
            "name" => Some("a stream's name cannot change"),
            "storage" => Some("the server cannot change a stream's storage type"),
            "retention"
                if new.as_str() == Some("workqueue") || old.as_str() == Some("workqueue") =>
            {
                Some("the server cannot change retention to or from workqueue")
            }
            "deny_delete" | "deny_purge" | "allow_msg_ttl" | "allow_msg_schedules"
                if truthy(&old) && !truthy(new) =>
            {
                Some("the server cannot turn this off once on")
            }
            "allow_msg_counter" => Some("the server cannot change the message counter setting"),
            "persist_mode" => Some("the server cannot change the persist mode"),
            "sealed" if truthy(&old) => Some("a sealed stream cannot be unsealed"),
            _ => None,
        };
        if let Some(w) = why {
            out.push((k.clone(), w.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_settings_the_server_will_not_update_need_a_migration() {
        let cur = json!({"name": "A", "storage": "file", "retention": "limits", "max_age": 0, "deny_delete": true});
        let m = |v: Value| v.as_object().unwrap().clone();
        assert!(needs_migration(
            &cur,
            &m(json!({"max_age": 60_000_000_000i64, "num_replicas": 3}))
        )
        .is_empty());
        assert!(needs_migration(&cur, &m(json!({"storage": "file"}))).is_empty(), "unchanged");
        let keys = |v| needs_migration(&cur, &m(v)).into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(keys(json!({"storage": "memory"})), ["storage"]);
        assert_eq!(keys(json!({"retention": "workqueue"})), ["retention"]);
        assert!(
            keys(json!({"retention": "interest"})).is_empty(),
            "limits to interest is an update"
        );
        assert_eq!(keys(json!({"deny_delete": false})), ["deny_delete"]);
    }
}
