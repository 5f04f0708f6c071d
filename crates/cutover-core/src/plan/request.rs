//! What a plan is built from: the operator's request ([`PlanRequest`]: the
//! strategy, the mode, the consumers, the settings of B, across systems or
//! in place) and what the adapter read from the server ([`ServerFacts`],
//! [`ServerChecks`]), and how building one fails ([`PlanError`]).

use crate::model::{nanos, StreamInfo};
use crate::version::{ServerVersion, MINIMUM};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::time::Duration;
use thiserror::Error;

/// Publishers retry a publish that found no stream for up to this long by default;
/// B's duplicate window must cover it.
pub const DEFAULT_RETRY_HORIZON: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    #[default]
    Source,
    Mirror,
    DualWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    #[default]
    Drain,
    Fence,
    /// A fence that also splits versions (the seed's rolling upgrade): the
    /// old consumer's messages up to F are processed by the instances that
    /// stay on it (the old version), everything after F by instances of
    /// `new_version` from the new durable; the run ends once no live instance
    /// is bound to the old consumer (docs/protocol.md).
    Rolling,
}

impl Strategy {
    pub fn as_str(&self) -> &'static str {
        match self {
            Strategy::Source => "source",
            Strategy::Mirror => "mirror",
            Strategy::DualWrite => "dual-write",
        }
    }
}

impl Mode {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Drain => "drain",
            Mode::Fence => "fence",
            Mode::Rolling => "rolling",
        }
    }

    /// The handoff publishes a fence (fence and rolling).
    pub fn is_fenced(&self) -> bool {
        matches!(self, Mode::Fence | Mode::Rolling)
    }
}

/// What the operator asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanRequest {
    pub from: String,
    pub to: String,
    /// Empty with `all_consumers`: every durable of A.
    pub consumers: Vec<String>,
    pub all_consumers: bool,
    pub strategy: Strategy,
    pub mode: Mode,
    /// Settings for B in the server's stream-config JSON shape (`--to-config`).
    pub to_config: Option<Map<String, Value>>,
    pub publishers_stopped: bool,
    /// How long publishers retry a publish with the same msg-id; `None`: A's
    /// duplicate window (B takes A's window, so it cannot cover more).
    #[serde(default)]
    pub retry_horizon: Option<Duration>,
    /// Mode rolling: the application version that reads the new durable.
    #[serde(default)]
    pub new_version: Option<String>,
    /// A hop of an in-place migration: the stream keeps its name in the end,
    /// so streams clients find by name (KV buckets, object stores) may move.
    #[serde(default)]
    pub in_place: Option<InPlaceHop>,
    /// A move across systems (docs/cross-system.md): how B reaches A.
    #[serde(default)]
    pub external: Option<External>,
    /// Across systems: the publishers are repointed to the target side (see
    /// [`External::repoint_publishers`]).
    #[serde(default)]
    pub repoint_publishers: bool,
    /// A is reached through a connection of its own (the source side, across
    /// systems) while B has no `external` block: strategy dual-write, whose B
    /// never reads A (docs/cross-system.md, *Dual-write across systems*).
    #[serde(default)]
    pub across: bool,
}

/// How B reaches A on another system: the stream source's (or mirror's)
/// `external` block (server stream.go `ExternalStream`: `api` replaces
/// `$JS.API` in the consumer-create requests B's server sends for A,
/// `deliver` prefixes the subject A's messages come back on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct External {
    /// `$JS.<domain>.API` for another JetStream domain, or the prefix B's
    /// account imports A's `$JS.API.CONSUMER.>` to.
    pub api: String,
    /// Needed across accounts (the stream A's account exports), optional
    /// across domains of one account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver: Option<String>,
    /// The operator repoints the publishers to the target side at the
    /// commit point (B's subjects do not reach across from A's side).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repoint_publishers: bool,
    /// Set by the plan's probes: with `repoint_publishers`, publishes cross
    /// the boundary in neither direction, so the run does not take the
    /// subjects from A at the commit point: B takes them on the target side
    /// while it still sources A, A keeps its own, and the run waits for the
    /// operator (or for A to go idle) before sealing A ([`Plan::split_publishers`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_publishers: bool,
}

impl External {
    /// The `external` block, as the server takes it.
    pub fn json(&self) -> Value {
        let mut v = json!({ "api": self.api });
        if let Some(d) = &self.deliver {
            v["deliver"] = json!(d);
        }
        v
    }
}

/// Which hop of an in-place migration a plan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InPlaceHop {
    /// From the stream to the temporary one, which gets the new settings.
    Out,
    /// Back to the stream's own name: B is the final stream.
    Back,
}

impl PlanRequest {
    /// Strategy source, mode drain, publishers running, the default retry
    /// horizon: the common request.
    pub fn source(from: &str, to: &str, consumers: &[&str]) -> Self {
        Self {
            from: from.into(),
            to: to.into(),
            consumers: consumers.iter().map(|c| c.to_string()).collect(),
            all_consumers: false,
            strategy: Strategy::Source,
            mode: Mode::Drain,
            to_config: None,
            publishers_stopped: false,
            retry_horizon: None,
            in_place: None,
            new_version: None,
            external: None,
            repoint_publishers: false,
            across: false,
        }
    }
}

/// What the adapter read from the server.
#[derive(Debug, Clone)]
pub struct ServerFacts {
    pub version: ServerVersion,
    pub a_raw: Value,
    pub b_raw: Option<Value>,
    /// Raw consumer infos of the consumers asked for (or all of A's).
    pub consumers_raw: Vec<Value>,
    /// A's other consumers, not asked for: (name, durable).
    pub other_consumers: Vec<(String, bool)>,
    /// Other streams that source or mirror A.
    pub downstream: Vec<String>,
    /// The account's JetStream info (`$JS.API.INFO`): usage and limits.
    pub account: Option<Value>,
    /// Further reads and server-side checks (see [`ServerChecks`]).
    pub checks: ServerChecks,
}

/// What the adapter learned from the server beyond the streams themselves.
#[derive(Debug, Clone, Default)]
pub struct ServerChecks {
    /// Every other stream of the account (not A, not B) and its subjects.
    pub other_streams: Vec<(String, Vec<String>)>,
    /// The largest number of messages A holds on one subject, when B would
    /// keep fewer per subject than A (read only then).
    pub a_max_per_subject: Option<(String, u64)>,
    /// The server's answer to B's configuration: a scratch stream with it was
    /// created and deleted (`None`: not tried, e.g. B exists).
    pub b_config_check: Option<ConfigCheck>,
    /// Fence mode: each consumer's live registered application instances
    /// (docs/protocol.md) (`None`: not read).
    pub live_instances: Option<Vec<(String, usize)>>,
    /// Live instances that fetch from A's consumer but registered another
    /// home binding (they followed an earlier migration into A): consumer,
    /// instance id, home `stream/consumer`.
    pub chained_instances: Vec<(String, String, String)>,
    /// Mode rolling: each consumer's live instances of the new version.
    pub live_new_version: Option<Vec<(String, usize)>>,
    /// A's ingest rate, sampled (`None`: not read).
    pub a_ingest: Option<crate::catchup::IngestRate>,
    /// Strategy dual-write: A's live registered publishers (`None`: not read).
    pub live_publishers: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConfigCheck {
    /// The scratch stream's name.
    pub scratch: String,
    /// `Err(server error)` when the server refused it.
    pub result: Result<(), String>,
    /// The server accepted it but did not keep its `duplicate_window`: a
    /// clustered JetStream drops it from every mirror (nats-server
    /// jetstream_cluster.go `decodeStreamAssignmentConfig` calls
    /// `fixCfgMirrorWithDedupWindow`), a newcomer's trial found.
    pub dropped_duplicate_window: bool,
}

#[derive(Debug, Error, PartialEq)]
pub enum PlanError {
    #[error("--from and --to both name stream {0:?}: the new stream must have another name (pick e.g. {0}_v2)")]
    SameStream(String),
    #[error("server {found} is too old: nats-cutover needs nats-server {MINIMUM} or newer (multiple filters and subject transforms); upgrade the server first")]
    ServerTooOld { found: ServerVersion },
    #[error("no consumer to move: name one with --consumer NAME or pass --all-consumers")]
    NoConsumer,
    #[error(
        "--to-config sets {field:?}, which the cut-over owns ({why}); remove it from the file"
    )]
    ForbiddenOverride { field: String, why: &'static str },
    #[error("{field:?}, which is not a stream setting nats-cutover knows (a typo?), is set by --set or --to-config; the stream settings are: {known}; remove or rename it")]
    UnknownSetting { field: String, known: String },
    #[error("{field}={value} is not a value the server takes: {expected}")]
    BadSettingValue { field: String, value: String, expected: &'static str },
    #[error("cannot read the server's {what} info: {why}")]
    BadServerJson { what: String, why: String },
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(what: &str, v: &Value) -> Result<T, PlanError> {
    serde_json::from_value(v.clone())
        .map_err(|e| PlanError::BadServerJson { what: what.into(), why: e.to_string() })
}

/// Publishers' retries must land in B's window, which is A's.
pub(crate) fn retry_horizon(req: &PlanRequest, a: &StreamInfo) -> Duration {
    req.retry_horizon.unwrap_or(if a.config.duplicate_window > 0 {
        nanos(a.config.duplicate_window)
    } else {
        DEFAULT_RETRY_HORIZON
    })
}
