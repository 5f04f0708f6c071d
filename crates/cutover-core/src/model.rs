//! The server's view of streams and consumers, as far as decisions need it.
//!
//! Parsed leniently from the JetStream API's JSON: every field is optional with the
//! server's default, unknown fields are ignored. The adapter keeps the raw JSON
//! next to these views and only ever edits the raw document, so a setting this
//! crate does not know is never dropped on an update.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Durations travel as nanoseconds in the JetStream API.
pub fn nanos(d: i64) -> Duration {
    Duration::from_nanos(d.max(0) as u64)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubjectTransform {
    pub src: String,
    pub dest: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamSource {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opt_start_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_subject: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subject_transforms: Vec<SubjectTransform>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamConfig {
    pub name: String,
    pub subjects: Vec<String>,
    pub retention: String,
    pub max_consumers: i64,
    pub max_msgs: i64,
    pub max_bytes: i64,
    pub max_age: i64,
    pub max_msgs_per_subject: i64,
    pub max_msg_size: i64,
    pub discard: String,
    pub storage: String,
    pub num_replicas: i64,
    pub duplicate_window: i64,
    pub placement: Option<serde_json::Value>,
    pub mirror: Option<StreamSource>,
    pub sources: Vec<StreamSource>,
    pub sealed: bool,
    pub deny_delete: bool,
    pub deny_purge: bool,
    pub allow_direct: bool,
    pub subject_transform: Option<SubjectTransform>,
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            subjects: vec![],
            retention: "limits".into(),
            max_consumers: -1,
            max_msgs: -1,
            max_bytes: -1,
            max_age: 0,
            max_msgs_per_subject: -1,
            max_msg_size: -1,
            discard: "old".into(),
            storage: "file".into(),
            num_replicas: 1,
            duplicate_window: 0,
            placement: None,
            mirror: None,
            sources: vec![],
            sealed: false,
            deny_delete: false,
            deny_purge: false,
            allow_direct: false,
            subject_transform: None,
            metadata: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamState {
    pub messages: u64,
    pub bytes: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub num_deleted: u64,
    pub consumer_count: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SourceInfo {
    pub name: String,
    pub lag: u64,
    /// Nanoseconds since the source last delivered; -1 when never.
    pub active: i64,
    pub filter_subject: Option<String>,
    pub error: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamInfo {
    pub config: StreamConfig,
    pub state: StreamState,
    pub sources: Vec<SourceInfo>,
    pub mirror: Option<SourceInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsumerConfig {
    pub durable_name: Option<String>,
    pub name: Option<String>,
    pub deliver_policy: String,
    pub opt_start_seq: Option<u64>,
    pub ack_policy: String,
    pub ack_wait: i64,
    pub max_deliver: i64,
    pub backoff: Vec<i64>,
    pub filter_subject: Option<String>,
    pub filter_subjects: Vec<String>,
    pub replay_policy: String,
    pub max_waiting: i64,
    pub max_ack_pending: i64,
    pub headers_only: bool,
    pub inactive_threshold: i64,
    pub num_replicas: i64,
    pub mem_storage: bool,
    pub deliver_subject: Option<String>,
    pub deliver_group: Option<String>,
    pub flow_control: bool,
    pub idle_heartbeat: i64,
    pub rate_limit_bps: u64,
    pub pause_until: Option<String>,
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            durable_name: None,
            name: None,
            deliver_policy: "all".into(),
            opt_start_seq: None,
            ack_policy: "explicit".into(),
            ack_wait: 30_000_000_000,
            max_deliver: -1,
            backoff: vec![],
            filter_subject: None,
            filter_subjects: vec![],
            replay_policy: "instant".into(),
            max_waiting: 0,
            max_ack_pending: 0,
            headers_only: false,
            inactive_threshold: 0,
            num_replicas: 0,
            mem_storage: false,
            deliver_subject: None,
            deliver_group: None,
            flow_control: false,
            idle_heartbeat: 0,
            rate_limit_bps: 0,
            pause_until: None,
            metadata: None,
        }
    }
}

impl ConsumerConfig {
    /// All filters, whichever of the two fields the server used.
    pub fn filters(&self) -> Vec<String> {
        let mut f: Vec<String> = self.filter_subjects.clone();
        if let Some(s) = &self.filter_subject {
            if !s.is_empty() {
                f.push(s.clone());
            }
        }
        f
    }

    pub fn is_push(&self) -> bool {
        self.deliver_subject.as_deref().is_some_and(|s| !s.is_empty())
    }

    pub fn is_durable(&self) -> bool {
        self.durable_name.as_deref().is_some_and(|s| !s.is_empty())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SequenceInfo {
    pub consumer_seq: u64,
    pub stream_seq: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsumerInfo {
    pub stream_name: String,
    pub name: String,
    pub config: ConsumerConfig,
    pub delivered: SequenceInfo,
    pub ack_floor: SequenceInfo,
    pub num_ack_pending: u64,
    pub num_redelivered: u64,
    pub num_waiting: u64,
    pub num_pending: u64,
    pub paused: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_consumer_info_from_server_json() {
        let j = r#"{"stream_name":"A","name":"C","created":"2026-01-01T00:00:00Z",
          "config":{"durable_name":"C","deliver_policy":"all","ack_policy":"explicit",
          "ack_wait":30000000000,"max_deliver":-1,"filter_subject":"a.>","replay_policy":"instant",
          "max_waiting":512,"max_ack_pending":1000,"num_replicas":0,"unknown_future_field":1},
          "delivered":{"consumer_seq":10,"stream_seq":12,"last_active":"2026-01-01T00:00:00Z"},
          "ack_floor":{"consumer_seq":9,"stream_seq":11},
          "num_ack_pending":1,"num_redelivered":0,"num_waiting":2,"num_pending":5,"paused":true}"#;
        let c: ConsumerInfo = serde_json::from_str(j).unwrap();
        assert_eq!(c.delivered.stream_seq, 12);
        assert_eq!(c.config.filters(), vec!["a.>".to_string()]);
        assert!(c.paused && !c.config.is_push());
    }
}
