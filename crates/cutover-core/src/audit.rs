//! The audit record: one small JSON document an application publishes per message
//! it processed, so that `verify --audit` can tell, per message, whether it was
//! processed never, once, or more than once, across the cut-over.
//!
//! The format is documented in `docs/audit.md` and only ever gains fields.
//!
//! A message is identified by where it was *first* stored: its origin stream and
//! sequence. A message the old consumer read from A at sequence 42 and the same
//! message read by the new consumer from B (sourced, `Nats-Stream-Source: A 42`)
//! have the same identity `(A, 42)`; a message published directly into B after the
//! commit point is `(B, seq)`. That identity is what makes double processing
//! across the two streams visible.

use crate::source_header;
use serde::{Deserialize, Serialize};

pub const AUDIT_FORMAT: u32 = 1;

/// Where a processed message was read from (its delivery), as opposed to its
/// identity. Two records of the same message with the same delivery are one
/// record published twice (a retried publish), not a double processing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Via {
    pub stream: String,
    pub seq: u64,
    /// The delivery attempt (1 for the first delivery).
    pub delivered: u64,
}

/// Who processes: the same for every record an application instance publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub consumer: String,
    pub instance: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Format version ([`AUDIT_FORMAT`]).
    #[serde(default = "format_default")]
    pub format: u32,
    /// The message's `Nats-Msg-Id`, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg_id: Option<String>,
    /// The stream the message was first stored in (A for everything published
    /// before the commit point, even when read from B).
    pub stream: String,
    /// Its sequence in that stream.
    pub seq: u64,
    /// The durable consumer that processed it.
    pub consumer: String,
    /// Which application instance processed it (host, pod, pid...).
    pub instance: String,
    /// The application's version.
    pub version: String,
    /// The delivery: stream and sequence it was read from, and the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
}

fn format_default() -> u32 {
    AUDIT_FORMAT
}

impl AuditRecord {
    /// The record for a message delivered as `via`, with its `Nats-Stream-Source`
    /// header (if any) deciding its identity.
    pub fn new(
        via: Via,
        source_header: Option<&str>,
        msg_id: Option<&str>,
        worker: &Worker,
    ) -> Self {
        // An unreadable source header cannot name an origin: the delivery is the
        // best identity there is, and verify reports it as unknown if it is wrong.
        let (stream, seq) = match source_header.map(source_header::parse) {
            Some(Ok(r)) => (r.stream, r.seq),
            _ => (via.stream.clone(), via.seq),
        };
        Self {
            format: AUDIT_FORMAT,
            msg_id: msg_id.map(String::from),
            stream,
            seq,
            consumer: worker.consumer.clone(),
            instance: worker.instance.clone(),
            version: worker.version.clone(),
            via: Some(via),
        }
    }

    /// A `Nats-Msg-Id` for the audit publish itself: a retried audit publish is
    /// deduplicated, while a second *processing* (another delivery, or the same
    /// message read from the other stream) has another id and is kept.
    pub fn publish_id(&self) -> String {
        match &self.via {
            Some(v) => format!("audit:{}:{}:{}:{}", self.consumer, v.stream, v.seq, v.delivered),
            None => format!("audit:{}:{}:{}", self.consumer, self.stream, self.seq),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w() -> Worker {
        Worker { consumer: "worker".into(), instance: "host-1".into(), version: "1.0".into() }
    }

    fn via(stream: &str, seq: u64, delivered: u64) -> Via {
        Via { stream: stream.into(), seq, delivered }
    }

    #[test]
    fn identity_is_the_origin_for_sourced_messages() {
        let r = AuditRecord::new(via("B", 7, 1), Some("A 42 > > orders.eu"), Some("m-41"), &w());
        assert_eq!((r.stream.as_str(), r.seq), ("A", 42));
        assert_eq!(r.via, Some(Via { stream: "B".into(), seq: 7, delivered: 1 }));
        let direct = AuditRecord::new(via("B", 9, 2), None, None, &w());
        assert_eq!((direct.stream.as_str(), direct.seq), ("B", 9));
    }

    #[test]
    fn the_same_message_read_from_both_streams_has_two_publish_ids() {
        let old = AuditRecord::new(via("A", 42, 1), None, Some("m"), &w());
        let new = AuditRecord::new(via("B", 40, 1), Some("A 42"), Some("m"), &w());
        assert_eq!((&old.stream, old.seq), (&new.stream, new.seq));
        assert_ne!(old.publish_id(), new.publish_id());
    }

    #[test]
    fn json_round_trips_and_tolerates_minimal_records() {
        let r = AuditRecord::new(via("B", 7, 1), Some("A 42"), Some("m-41"), &w());
        let back: AuditRecord = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        let min: AuditRecord = serde_json::from_str(
            r#"{"stream":"A","seq":1,"consumer":"c","instance":"i","version":"v"}"#,
        )
        .unwrap();
        assert_eq!(min.format, AUDIT_FORMAT);
        assert!(min.via.is_none() && min.msg_id.is_none());
    }
}
