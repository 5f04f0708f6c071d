//! In place: the applications' ordered consumers (KV and object store
//! watchers, ordered subscriptions) that hop 1 reads before it deletes the
//! stream and hop 2 creates again (the engine's `steps/watchers.rs`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// An application's ephemeral push consumer, as hop 1 of an in-place change
/// found it before deleting its stream.
///
/// The server sends a push consumer's deliver subject nothing when the
/// consumer or its stream is deleted (server consumer.go: only pending pull
/// requests get `409 Consumer Deleted`), so an ordered consumer learns of
/// the loss only from missed idle heartbeats: nats.js 3.x forces them to
/// 30 s and resets after two missed ticks (jetstream/src/pushconsumer.ts,
/// `IdleHeartbeatMonitor(30_000, {maxOut: 2})`): a KV watcher was silent
/// 82-85 s after a bucket change; nats.go and nats-py 10-20 s. Created
/// again on the new stream under its name and deliver subject, the first
/// message it delivers has consumer sequence 1, which every ordered client
/// takes as a gap: it resets at once, from its own cursor, onto the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Watcher {
    pub name: String,
    /// Its configuration as the server reported it, without its start
    /// position ([`watcher_config`] gives the one to create).
    pub config: Value,
    /// `delivered.stream_seq`: where one that had received nothing yet
    /// (and so keeps this consumer) goes on.
    pub delivered: u64,
}

/// The most watchers hop 1 keeps in the journal's head (each a few hundred
/// bytes; the head is one message): the rest reset by themselves, later.
pub const MAX_WATCHERS: usize = 256;

/// A consumer's info, if it is an application's ephemeral push consumer (a
/// deliver subject, no durable name, not one of the server's own).
pub fn watcher(info: &Value) -> Option<Watcher> {
    let c = &info["config"];
    let durable = c["durable_name"].as_str().is_some_and(|s| !s.is_empty());
    let servers = c["direct"].as_bool() == Some(true) || c["sourcing"].as_bool() == Some(true);
    let deliver = c["deliver_subject"].as_str().is_some_and(|s| !s.is_empty());
    if durable || servers || !deliver {
        return None;
    }
    let mut config = c.clone();
    let o = config.as_object_mut()?;
    for k in ["deliver_policy", "opt_start_seq", "opt_start_time", "durable_name"] {
        o.remove(k);
    }
    o.retain(|_, v| !v.is_null());
    Some(Watcher {
        name: info["name"].as_str().or(c["name"].as_str())?.to_string(),
        config,
        delivered: info["delivered"]["stream_seq"].as_u64().unwrap_or(0),
    })
}

/// The configuration that creates `w` again on the new stream: its own
/// name and deliver subject, starting right after what it had delivered.
pub fn watcher_config(w: &Watcher) -> Value {
    let mut c = w.config.clone();
    c["name"] = json!(w.name);
    c["deliver_policy"] = json!("by_start_sequence");
    c["opt_start_seq"] = json!(w.delivered + 1);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ephemeral_push_consumers_are_watchers_and_go_on_after_what_they_had() {
        let info =
            |cfg: Value| json!({"name": "oc_x_1", "config": cfg, "delivered": {"stream_seq": 41}});
        let ordered = json!({"name": "oc_x_1", "deliver_subject": "_INBOX.x.1", "deliver_policy": "last_per_subject", "opt_start_seq": null, "ack_policy": "none", "flow_control": true, "filter_subject": "$KV.x.>", "idle_heartbeat": 30_000_000_000i64});
        let w = watcher(&info(ordered)).expect("an ordered push consumer");
        assert_eq!((w.name.as_str(), w.delivered), ("oc_x_1", 41));
        assert!(
            w.config.get("deliver_policy").is_none() && w.config.get("opt_start_seq").is_none()
        );
        let c = watcher_config(&w);
        assert_eq!(c["deliver_policy"], "by_start_sequence");
        assert_eq!(c["opt_start_seq"], 42);
        assert_eq!(
            (c["name"].as_str(), c["deliver_subject"].as_str()),
            (Some("oc_x_1"), Some("_INBOX.x.1"))
        );
        assert_eq!(c["filter_subject"], "$KV.x.>");
        let durable =
            json!({"durable_name": "d", "deliver_subject": "deliver.d", "ack_policy": "explicit"});
        assert!(watcher(&info(durable)).is_none(), "durables move as durables");
        let pull = json!({"name": "p", "ack_policy": "explicit"});
        assert!(watcher(&info(pull)).is_none(), "ephemeral pull: its client learns at once (409)");
        let sourcing = json!({"name": "s", "deliver_subject": "$JS.S.x", "sourcing": true});
        assert!(watcher(&info(sourcing)).is_none(), "the server's own");
    }
}
