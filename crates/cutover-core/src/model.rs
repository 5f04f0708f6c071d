//! The server's view of streams and consumers, as far as decisions need it.
//!
//! Parsed leniently from the JetStream API's JSON: every field is optional with the
//! server's default, unknown fields are ignored. The adapter keeps the raw JSON
//! next to these views and only ever edits the raw document, so a setting this
//! crate does not know is never dropped on an update.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// Durations travel as nanoseconds in the JetStream API.
pub fn nanos(d: i64) -> Duration {
    Duration::from_nanos(d.max(0) as u64)
}

/// A JetStream policy sent as a lowercase string. Values this version does not
/// know (a newer server's) parse as `Other` and print and serialize exactly as
/// received, so a view never fails to parse and a setting is never renamed.
macro_rules! policy {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $s:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant,)+
            /// A value this version does not know, as the server sent it.
            Other(String),
        }

        impl $name {
            /// The server's spelling.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $s,)+
                    Self::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($s => Self::$variant,)+
                    other => Self::Other(other.to_string()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d).map(|s| Self::from(s.as_str()))
            }
        }
    };
}

policy! {
    /// A stream's `retention`.
    RetentionPolicy {
        Limits = "limits",
        Interest = "interest",
        WorkQueue = "workqueue",
    }
}

impl RetentionPolicy {
    /// Interest and work-queue streams delete a message once it is acknowledged:
    /// a missing message there cannot be told from a processed one.
    pub fn removes_acked(&self) -> bool {
        matches!(self, Self::Interest | Self::WorkQueue)
    }
}

policy! {
    /// A stream's `storage`.
    StorageType {
        File = "file",
        Memory = "memory",
    }
}

policy! {
    /// A stream's `discard`: what happens when a limit is reached.
    DiscardPolicy {
        Old = "old",
        New = "new",
    }
}

policy! {
    /// A consumer's `ack_policy` (`flow_control`: nats-server 2.14+).
    AckPolicy {
        None = "none",
        All = "all",
        Explicit = "explicit",
        FlowControl = "flow_control",
    }
}

policy! {
    /// A consumer's `deliver_policy`.
    DeliverPolicy {
        All = "all",
        Last = "last",
        New = "new",
        ByStartSequence = "by_start_sequence",
        ByStartTime = "by_start_time",
        LastPerSubject = "last_per_subject",
    }
}

policy! {
    /// A consumer's `replay_policy`.
    ReplayPolicy {
        Instant = "instant",
        Original = "original",
    }
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
    pub retention: RetentionPolicy,
    pub max_consumers: i64,
    pub max_msgs: i64,
    pub max_bytes: i64,
    pub max_age: i64,
    pub max_msgs_per_subject: i64,
    pub max_msg_size: i64,
    pub discard: DiscardPolicy,
    pub storage: StorageType,
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
            retention: RetentionPolicy::Limits,
            max_consumers: -1,
            max_msgs: -1,
            max_bytes: -1,
            max_age: 0,
            max_msgs_per_subject: -1,
            max_msg_size: -1,
            discard: DiscardPolicy::Old,
            storage: StorageType::File,
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

impl StreamConfig {
    /// Whether a direct get (`$JS.API.DIRECT.GET`) reads this stream exactly:
    /// only when it has one replica. On a replicated stream every replica
    /// answers direct gets, a follower as soon as it is 90% synchronized
    /// (nats-server jetstream_cluster.go `monitorStream`, `syncThreshold`), and
    /// the server hands a client's request to a random member of the queue
    /// group, local or across a route (client.go `processMsgResults`,
    /// `selectQSub`): two gets in a row may be answered by replicas that hold
    /// different tails, and a lagging one answers "no message" for one the
    /// leader holds. A position computed from such reads can be wrong (a new
    /// durable started one message early: processed from both streams).
    /// Positions, the journal and verify read the leader
    /// (`$JS.API.STREAM.MSG.GET`) on replicated streams.
    pub fn exact_direct_gets(&self) -> bool {
        self.allow_direct && self.num_replicas <= 1
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
    pub deliver_policy: DeliverPolicy,
    pub opt_start_seq: Option<u64>,
    pub ack_policy: AckPolicy,
    pub ack_wait: i64,
    pub max_deliver: i64,
    pub backoff: Vec<i64>,
    pub filter_subject: Option<String>,
    pub filter_subjects: Vec<String>,
    pub replay_policy: ReplayPolicy,
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
            deliver_policy: DeliverPolicy::All,
            opt_start_seq: None,
            ack_policy: AckPolicy::Explicit,
            ack_wait: 30_000_000_000,
            max_deliver: -1,
            backoff: vec![],
            filter_subject: None,
            filter_subjects: vec![],
            replay_policy: ReplayPolicy::Instant,
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
        assert_eq!(c.config.ack_policy, AckPolicy::Explicit);
        assert_eq!(c.config.deliver_policy, DeliverPolicy::All);
        assert_eq!(c.config.replay_policy, ReplayPolicy::Instant);
    }

    /// Every known spelling parses to its variant and back; anything else is
    /// kept as sent, through Display and serde alike.
    fn round_trips<T>(known: &[(&str, T)])
    where
        T: for<'a> From<&'a str>
            + fmt::Display
            + fmt::Debug
            + PartialEq
            + Serialize
            + serde::de::DeserializeOwned,
    {
        for (s, v) in known {
            assert_eq!(&T::from(*s), v);
            assert_eq!(v.to_string(), *s);
            let json = serde_json::to_string(v).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(&serde_json::from_str::<T>(&json).unwrap(), v);
        }
        for unknown in ["some_future_policy", "Limits", ""] {
            let v: T = serde_json::from_value(serde_json::json!(unknown)).unwrap();
            assert_eq!(v.to_string(), unknown);
            assert_eq!(serde_json::to_value(&v).unwrap(), serde_json::json!(unknown));
            assert!(known.iter().all(|(_, k)| *k != v), "{unknown:?} parsed as a known value");
        }
        assert!(serde_json::from_value::<T>(serde_json::json!(null)).is_err());
    }

    #[test]
    fn policies_round_trip_known_and_unknown_values() {
        use RetentionPolicy as R;
        round_trips(&[
            ("limits", R::Limits),
            ("interest", R::Interest),
            ("workqueue", R::WorkQueue),
        ]);
        round_trips(&[("file", StorageType::File), ("memory", StorageType::Memory)]);
        round_trips(&[("old", DiscardPolicy::Old), ("new", DiscardPolicy::New)]);
        round_trips(&[
            ("none", AckPolicy::None),
            ("all", AckPolicy::All),
            ("explicit", AckPolicy::Explicit),
            ("flow_control", AckPolicy::FlowControl),
        ]);
        use DeliverPolicy as D;
        round_trips(&[
            ("all", D::All),
            ("last", D::Last),
            ("new", D::New),
            ("by_start_sequence", D::ByStartSequence),
            ("by_start_time", D::ByStartTime),
            ("last_per_subject", D::LastPerSubject),
        ]);
        round_trips(&[("instant", ReplayPolicy::Instant), ("original", ReplayPolicy::Original)]);
    }

    #[test]
    fn an_unknown_policy_survives_a_view_round_trip_and_pads_like_a_string() {
        let j = serde_json::json!({"retention": "queue_v2", "storage": "file", "discard": "new"});
        let c: StreamConfig = serde_json::from_value(j).unwrap();
        assert_eq!(c.retention, RetentionPolicy::Other("queue_v2".into()));
        assert_eq!(c.discard, DiscardPolicy::New);
        let back = serde_json::to_value(&c).unwrap();
        assert_eq!(back["retention"], "queue_v2");
        assert_eq!(back["storage"], "file");
        assert_eq!(format!("[{:>8}]", c.discard), format!("[{:>8}]", "new"));
        assert_eq!(StreamConfig::default().retention, RetentionPolicy::Limits);
    }
}
