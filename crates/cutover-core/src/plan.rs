//! The plan: what `plan` prints and `run` executes.
//!
//! Built from what the adapter read (stream and consumer infos as the server's raw
//! JSON) and the operator's options. Pure: the same inputs always give the same
//! plan, and a plan with an unsafe finding is refused before the first write.
//!
//! The plan document (JSON via `--json`, TOML via `--out`) is versioned by
//! [`PLAN_FORMAT`]; fields are only ever added.

use crate::compat::{self, Finding, Report, Verdict};
use crate::model::{nanos, ConsumerInfo, RetentionPolicy, StorageType, StreamConfig, StreamInfo};
use crate::quiescence::{self, QuiescentBound};
use crate::version::{Features, ServerVersion, MINIMUM};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::time::Duration;
use thiserror::Error;

pub const PLAN_FORMAT: u32 = 1;

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerPlan {
    pub name: String,
    pub push: bool,
    /// The old durable's filters on A; empty: all. `None` in plans written
    /// before this field existed (verify then reads them from the findings).
    #[serde(default)]
    pub a_filters: Option<Vec<String>>,
    /// Filters on B (A's filters mapped through B's source transforms); empty: all.
    pub b_filters: Vec<String>,
    /// The new durable's configuration on B without the start sequence, which is
    /// only known at the checkpoint.
    pub b_config: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub n: u32,
    pub title: String,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub format: u32,
    pub from: String,
    pub to: String,
    pub strategy: Strategy,
    pub mode: Mode,
    pub server_version: ServerVersion,
    pub features: Features,
    pub relies_on: Vec<String>,
    pub b_exists: bool,
    /// B's configuration while it sources A (no subjects).
    pub b_config: Value,
    /// The subjects B takes at the commit point.
    pub b_final_subjects: Vec<String>,
    pub consumers: Vec<ConsumerPlan>,
    pub findings: Vec<Finding>,
    pub checkpoint_rule: String,
    /// Why no timer is needed (or, with `quiescence`, where one is).
    #[serde(default)]
    pub timer_note: String,
    pub steps: Vec<Step>,
    /// Only where a timer is unavoidable (no pause: publishers stopped).
    pub quiescence: Vec<(String, QuiescentBound)>,
    pub publishers_stopped: bool,
    pub retry_horizon_ms: u64,
    /// Settings the promotion of a mirror sets with the same update (those a
    /// mirror may not have, and an in-place migration's final touches).
    #[serde(default)]
    pub promote_with: Map<String, Value>,
    /// Which hop of an in-place migration this plan is, if it is one.
    #[serde(default)]
    pub in_place: Option<InPlaceHop>,
    /// Mode rolling: the application version that reads the new durable.
    #[serde(default)]
    pub new_version: Option<String>,
    /// A move across systems: how B reaches A (B's source carries it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<External>,
    /// A move across systems without `external` (strategy dual-write): A is
    /// on the source side, B on the target side, and B never reads A.
    /// `run`, `verify` and `rollback` need both sides' connections.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub across: bool,
    /// A's ingest rate when planned (B must receive at least as fast).
    #[serde(default)]
    pub a_ingest: Option<crate::catchup::IngestRate>,
    /// No unsafe finding.
    pub safe: bool,
}

impl Plan {
    pub fn unsafe_findings(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.verdict == Verdict::Unsafe)
    }

    /// Across systems, publishers repointed by the operator where publishes
    /// cross in neither direction (the adapter's probes said so): B takes
    /// A's subjects on the target side after the consumers moved, while it
    /// still sources A, and A keeps its own (no conflict: they are on two
    /// systems), so a publisher on either side is served and nothing it
    /// publishes is lost; the run waits for the operator's go-ahead (or A
    /// idle for `--seal-when-idle`) before it seals A. Refused (unsafe) where
    /// that cannot be exact: a mirror takes no subjects while it mirrors;
    /// without an explicit duplicate window B would not match a retry sent
    /// once into A and once into B (a sourced and a direct copy share msg-id
    /// dedup only then: server stream.go `processJetStreamMsg` checks the
    /// msg-id of sourced messages too, and records ids only while a window
    /// is set); on 2.10-2.12.5 such a sourced duplicate stalls sourcing.
    pub fn split_publishers(&mut self) {
        let Some(ext) = self.external.as_mut() else { return };
        ext.split_publishers = true;
        let mut refuse = |setting: &str, from: String, reason: &str| {
            self.findings.push(Finding {
                scope: "plan".into(),
                setting: setting.into(),
                from,
                to: "publishers split".into(),
                verdict: Verdict::Unsafe,
                reason: reason.into(),
            })
        };
        if self.strategy == Strategy::Mirror {
            refuse("strategy", "mirror".into(), "publishers repointed across systems need B to take A's subjects while it still copies A, and a mirror takes no subjects: use --strategy source");
        }
        if self.b_config["duplicate_window"].as_i64().unwrap_or(0) <= 0 {
            refuse("duplicate_window", "0".into(), "publishers repointed across systems need B's duplicate window set explicitly: a retry sent once into A and once into B lands once only then; drop duplicate_window 0 from --to-config");
        }
        if self.features.duplicate_sourced_msg_id_stalls_source {
            refuse("server", self.server_version.to_string(), "publishers repointed across systems can send a msg-id into B that also reaches it from A, and on 2.10-2.12.5 such a duplicate stalls sourcing: upgrade the target side to 2.12.8+, or let publishes cross (export/import B's subjects)");
        }
        self.safe = self.safe && self.unsafe_findings().next().is_none();
        let keep = self.steps.iter().take_while(|s| !s.title.starts_with("commit point")).count();
        self.steps.truncate(keep);
        let (a, b, subjects) = (&self.from, &self.to, &self.b_final_subjects);
        let mut add = |title: &str, detail: String| {
            let n = self.steps.len() as u32 + 1;
            self.steps.push(Step { n, title: title.into(), detail });
        };
        add("B takes the subjects (publishers split)", format!("update {b}: subjects {subjects:?} on the target side while it still sources {a}; {a} keeps its subjects on its side. From here repoint the publishers to the target side, any time: those repointed publish into {b}, those not yet publish into {a} and reach {b} through the source, and a retry sent once into each lands once ({b}'s duplicate window). No rollback from here (publishers may be on either side): only going on"));
        add("wait for the publishers", format!("the run waits, reporting every few seconds how many messages {a} stored meanwhile, until the operator confirms that every publisher was repointed: `nats-cutover run --resume {a}.{b} --proceed` (from any terminal; the waiting runner sees it), or with --seal-when-idle D until {a} stored nothing for D"));
        add("seal A and finish sourcing", format!("update {a}: subjects [] (a publisher still on its side gets no responders from here), wait until {b} holds every message {a} stored ({a}'s last sequence the same in two reads), seal {a}, remove {b}'s source"));
        add(
            "retire",
            format!("delete the old consumers on {a}; keep sealed {a} unless --delete-old"),
        );
    }

    /// Why the plan is unsafe, in one line: `scope setting: reason; ...`.
    pub fn unsafe_reasons(&self) -> String {
        let reasons: Vec<String> = self
            .unsafe_findings()
            .map(|f| format!("{} {}: {}", f.scope, f.setting, f.reason))
            .collect();
        reasons.join("; ")
    }
}

/// Every stream setting of the server's StreamConfig (json tags of
/// server/stream.go, 2.15): a `--to-config` key outside this list is a typo the
/// server would silently ignore.
const STREAM_SETTINGS: &[&str] = &[
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

pub(crate) fn parse<T: serde::de::DeserializeOwned>(what: &str, v: &Value) -> Result<T, PlanError> {
    serde_json::from_value(v.clone())
        .map_err(|e| PlanError::BadServerJson { what: what.into(), why: e.to_string() })
}

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
/// - the last hop of an in-place change: the stream as it was plus the new
///   settings, so no mirror direct get (inherited from the temporary stream)
///   and no marker of ours; and its own direct get only then: while it
///   catches up it would answer for the stream's name from a partial copy,
///   and the temporary stream answers meanwhile (its mirror direct get, kept
///   through its promotion).
fn commit_touches(
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

/// An in-place migration as `plan` shows it: hop 1 in full (judged before
/// anything is written), hop 2 in outline (planned when hop 1 is done), and
/// what the rebuild copies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InPlaceOutline {
    pub stream: String,
    pub via: String,
    pub hop1: Plan,
    /// Messages and bytes each hop copies (A's now; more arrive meanwhile).
    pub copies_messages: u64,
    pub copies_bytes: u64,
    /// Both copies, from the mirror rate measured on this project's machine
    /// kind ([`copy_estimate`]).
    pub estimate_ms: u64,
}

/// How long one mirror copy of `messages` messages and `bytes` bytes takes,
/// from the rates measured on this project's machine kind (2 cores,
/// loopback, R1; docs/benchmarks.md): a per-message cost (1M messages of 128
/// bytes: 2.1-2.2 s a hop) plus a per-byte cost (100k messages of 4 KiB:
/// 1.2-1.9 s a hop). Replicated streams and busier servers take longer; the
/// run shows the real progress.
pub fn copy_estimate(messages: u64, bytes: u64) -> Duration {
    const MSGS_PER_S: u64 = 450_000;
    const BYTES_PER_S: u64 = 220_000_000;
    let ms = messages.saturating_mul(1000) / MSGS_PER_S + bytes.saturating_mul(1000) / BYTES_PER_S;
    Duration::from_millis(ms)
}

/// The metadata key that tells which stream B was made from.
pub const FROM_KEY: &str = "nats-cutover.from";

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

pub fn build(req: &PlanRequest, facts: &ServerFacts) -> Result<Plan, PlanError> {
    if req.strategy == Strategy::DualWrite {
        return crate::dual::build_plan(req, facts);
    }
    refuse_early(req, facts)?;
    let a: StreamInfo = parse("stream", &facts.a_raw)?;
    let retry_horizon = retry_horizon(req, &a);
    let (b_config, b_final_subjects, b_exists) = planned_b(req, facts, retry_horizon)?;
    let b_view: StreamConfig = parse("planned stream B", &b_config)?;
    // The findings, rule by rule: their order is the report's.
    let mut r = Report::new();
    compat::check_request(&mut r, req, &a);
    compat::check_against_server(&mut r, &a, &b_view, &b_final_subjects, &facts.checks);
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
    let steps = steps(req, b_exists, dw, features, &moved.plans, &b_final_subjects);
    if !b_exists && b_config.get("republish").is_some_and(|v| !v.is_null()) {
        r.add("stream", "republish", "set", "at the commit point", Verdict::ChangedOnPurpose, "B takes A's republish at the commit point, not while it copies A (a stream republishes every message it stores, copied ones too): subscribers of the republished subjects get each message once");
    }
    let safe = !r.findings.iter().any(|f| f.verdict == Verdict::Unsafe);
    let (b_config, promote_with) = commit_touches(req, b_config, b_exists);
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
        across: false,
        a_ingest: facts.checks.a_ingest,
        safe,
    })
}

/// Requests refused before anything else is read or judged.
pub(crate) fn refuse_early(req: &PlanRequest, facts: &ServerFacts) -> Result<(), PlanError> {
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

/// Publishers' retries must land in B's window, which is A's.
pub(crate) fn retry_horizon(req: &PlanRequest, a: &StreamInfo) -> Duration {
    req.retry_horizon.unwrap_or(if a.config.duplicate_window > 0 {
        nanos(a.config.duplicate_window)
    } else {
        DEFAULT_RETRY_HORIZON
    })
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

/// A move across systems: what goes where, what the plan cannot test, and
/// what is not supported across the boundary yet.
fn rule_across(r: &mut Report, req: &PlanRequest) {
    let Some(ext) = &req.external else { return };
    r.add("plan", "across", "one system", format!("B sources A through {}", ext.api), Verdict::ChangedOnPurpose, "A is read, paused and sealed through the source connection; B, its durables and the CUTOVER bucket (journal, lease, routes) live on the target side, where the run's result stays and a resume finds it");
    r.add("plan", "applications", "", "", Verdict::ChangedOnPurpose, format!("push consumers keep their deliver subject and group on {} where it crosses the boundary; pull applications follow the route record, on the target side, through a connection to it, or are redeployed there (docs/cross-system.md)", req.to));
    if req.mode != Mode::Drain {
        r.add("plan", "mode", req.mode.as_str(), "", Verdict::Unsafe, "fence and rolling modes across systems are not supported yet (instances register on one side): use --mode drain");
    }
    if req.in_place.is_some() {
        r.add(
            "plan",
            "in-place",
            "",
            "",
            Verdict::Unsafe,
            "an in-place change stays on one system: drop --from-server/--from-context",
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
        if let Some(b_filters) =
            compat::check_consumer(r, &c, b_view, facts.version, req.publishers_stopped)
        {
            let old_cfg = raw.get("config").cloned().unwrap_or(Value::Null);
            moved.plans.push(ConsumerPlan {
                name: c.name.clone(),
                push: c.config.is_push(),
                b_config: b_consumer_config(
                    &old_cfg,
                    &b_filters,
                    b_view.retention == RetentionPolicy::WorkQueue,
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
/// first); ephemeral ones are their owners' to recreate on B.
fn rule_consumers_left_behind(r: &mut Report, req: &PlanRequest, facts: &ServerFacts) {
    for (name, durable) in &facts.other_consumers {
        if *durable {
            r.add("stream", "consumers", name, "", Verdict::Unsafe, format!(
                "durable {name} on {} is not being moved: after the cut-over it would receive no new message; move it too (--consumer {name} or --all-consumers) or delete it first if it is no longer needed", req.from
            ));
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
    if c.config.is_push() {
        r.add(&s, "in place", "push", "push", Verdict::Ok, "push applications keep receiving on the same deliver subject through both hops: nothing to do");
    } else {
        r.add(&s, "in place", "pull", "pull", Verdict::ChangedOnPurpose, format!(
            "pull applications bound to {s_name}/{c_name} by name see no messages from hop 1's pause until hop 2 recreates the durable under its name at its position, with 'consumer not found' once {s_name} is deleted; they resume by retrying (no redeploy), for about the copy's time; applications following the route record (docs/json.md) read {via} meanwhile",
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

/// Why `run` waits for no timer (see [`Plan::timer_note`]).
pub(crate) const TIMER_NOTE: &str = "no quiescent interval is waited for: the exact signal is num_ack_pending = 0 on a paused consumer. The seed's ack_wait × (max_pending + 1) is not a bound of anything: redelivery timers run per message and in parallel (max_ack_pending limits how many are in flight, not how many ack_waits pass one after another), it ignores backoff and max_deliver, and no timer can prove that a slow worker has finished";

/// How each consumer's checkpoint is taken and carried to B.
fn checkpoint_rule(req: &PlanRequest) -> String {
    if req.mode.is_fenced() {
        return format!(
            "fence: pause the old consumer and read it twice; F = delivered.stream_seq at once (messages up to F may still be in processing: no wait); the new durable on {to} starts at the first message after F ({how}) and the route says `fenced`; instances keep processing the old consumer's messages up to F and nak those above it, and fetch the new durable meanwhile; the old consumer is retired once its ack floor reached F (or nothing is ack-pending) and every live instance acknowledged the fence (docs/protocol.md)",
            to = req.to,
            how = if req.strategy == Strategy::Mirror { "F + 1, the same sequences" } else { "by its Nats-Stream-Source origin sequence, O(log N) message gets: direct gets on an R1 stream that allows them, else through the leader" }
        );
    }
    if req.strategy == Strategy::Mirror {
        return format!(
            "pause the old consumer; wait until num_ack_pending = 0 (a pause is bounded: after min(run --max-pause, default 5 s, and ack_wait) without ack progress the consumer is resumed for as long and paused again); F = delivered.stream_seq; {} mirrors {} with the same sequences, so the new durable starts at F + 1 once {} holds F; it is created only once positioned",
            req.to, req.from, req.to
        );
    }
    format!(
        "pause the old consumer; wait until num_ack_pending = 0 (a pause is bounded: after min(run --max-pause, default 5 s, and ack_wait) without ack progress, from a dead worker, a nak with backoff or a client's partial batch, the consumer is resumed for as long and paused again; the longest pause is reported; a consumer that never settles within --settle-timeout is resumed and nothing moves); F = delivered.stream_seq (every sequence <= F was delivered and settled, or not selected by the filter; the ack floor is not used: MaxDeliver-exhausted messages keep it below F); the new durable on {} starts at the first sequence whose Nats-Stream-Source origin sequence is > F, found by O(log N) message gets (direct gets on an R1 stream that allows them, else through the leader: a follower may not hold the tail yet); it is created only once positioned", req.to
    )
}

/// What `create B` does: nothing if B exists, else the configuration it gets.
fn create_b_detail(req: &PlanRequest, b_exists: bool, dw: Duration, features: Features) -> String {
    let mirror = req.strategy == Strategy::Mirror;
    if b_exists {
        format!("{} exists: checked compatible and sourcing {}", req.to, req.from)
    } else if mirror {
        format!(
                "create {} mirroring {}, no subjects, duplicate_window {dw:?} (A's: the mirror records the msg-ids it stores, for retries after the promotion)",
                req.to, req.from
            )
    } else {
        format!(
            "create {} sourcing {}, no subjects, allow_direct, duplicate_window {dw:?} (A's){}",
            req.to,
            req.from,
            if features.sourcing_streams_get_no_default_dedup_window {
                "; it sources without dedup until it holds A's history older than one window, so msg-ids A stored again after its window are all kept"
            } else {
                "; before 2.14 a sourcing stream cannot turn dedup off: msg-ids reused in A's history within that window of each other can be dropped while B catches up"
            }
        )
    }
}

/// The step that hands one consumer over, by mode.
fn consumer_step(req: &PlanRequest, c: &ConsumerPlan) -> (String, String) {
    if req.mode.is_fenced() {
        return (format!("fence consumer {}", c.name), format!(
            "pause {}/{n} and take the fence F (its last delivered sequence), create durable {n} on {} at the next sequence, publish the route `fenced`; wait until the old consumer acknowledged everything up to F (`settled`) and every live instance acknowledged the fence (`moved`){}",
            req.from, req.to,
            if req.mode == Mode::Rolling { "; then wait until no live instance is bound to the old consumer (or --proceed)" } else { "" },
            n = c.name
        ));
    }
    (format!("move consumer {}", c.name), format!(
        "pause {}/{n}, settle, checkpoint F, translate F to {}, create durable {n} on {} at the next sequence{}; publish the new route in the control record",
        req.from, req.to, req.to,
        if c.push { " with the same deliver subject/group (subscribers keep receiving)" } else { "" },
        n = c.name
    ))
}
/// What the commit-point step says of publishers that never retry.
const BRIDGE: &str = "for publishers that never retry, `run --answer-publishes` has the runner answer the window's publishes itself and store them once a stream holds the subjects (exact only for publishes with a Nats-Msg-Id, the only ones it answers; others time out)";

/// The steps `run` takes, in order.
fn steps(
    req: &PlanRequest,
    b_exists: bool,
    dw: Duration,
    features: Features,
    consumers: &[ConsumerPlan],
    b_final_subjects: &[String],
) -> Vec<Step> {
    let mirror = req.strategy == Strategy::Mirror;
    let mut steps = vec![];
    let mut add = |title: &str, detail: String| {
        let n = steps.len() as u32 + 1;
        steps.push(Step { n, title: title.into(), detail });
    };
    add("validate", "check every setting as in this report; refuse before the first write if anything is unsafe".into());
    add("journal", "record the migration in KV bucket CUTOVER (plan, step, checkpoints), take the lease on the source stream".into());
    add("create B", create_b_detail(req, b_exists, dw, features));
    add(
        "catch up",
        if mirror {
            format!(
                "wait until {}'s last sequence reaches {}'s (a mirror keeps A's sequences)",
                req.to, req.from
            )
        } else {
            format!("wait until {}'s newest Nats-Stream-Source origin sequence reaches {}'s last sequence (sequences compared, not the lag field)", req.to, req.from)
        },
    );
    for c in consumers {
        let (title, detail) = consumer_step(req, c);
        add(&title, detail);
    }
    if mirror {
        add("commit point: move publishers", format!(
            "update {a}: subjects [], wait until {b} holds every message {a} stored, promote {b} (remove its mirror and take subjects {s:?} in one update); publishes in between get no responders and are retried with the same Nats-Msg-Id, and a retry of a message {a} already stored meets its id in {b}'s window; {BRIDGE}",
            a = req.from, b = req.to, s = b_final_subjects
        ));
        add("seal A", format!("seal {} (nothing can enter it any more)", req.from));
        let retire = match req.in_place {
            Some(InPlaceHop::Out) => {
                format!("delete the old consumers and {} (frees its name for hop 2)", req.from)
            }
            Some(InPlaceHop::Back) => {
                format!("delete the old consumers and the temporary stream {}", req.from)
            }
            None => format!(
                "delete the old consumers on {}; keep sealed {} unless --delete-old",
                req.from, req.from
            ),
        };
        add("retire", retire);
        return steps;
    }
    add("commit point: move publishers", format!(
        "update {a}: subjects [], wait until {b} holds every message {a} stored, update {b}: subjects {s:?}; publishes in between get no responders and are retried with the same Nats-Msg-Id, and a retry of a message {a} already stored meets its sourced copy in {b}'s duplicate window; {BRIDGE}",
        a = req.from, b = req.to, s = b_final_subjects
    ));
    add(
        "seal A and finish sourcing",
        format!("seal {} (nothing can enter it any more), remove {}'s source", req.from, req.to),
    );
    add(
        "retire",
        format!(
            "delete the old consumers on {}; keep sealed {} unless --delete-old",
            req.from, req.from
        ),
    );
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // A mirror takes no subjects; no window, no dedup across the two copies;
        // a server whose sourcing stalls on a duplicate msg-id.
        let mut m = build(&across_req(Strategy::Mirror), &facts(plain_a(), explicit_c())).unwrap();
        m.split_publishers();
        assert!(!m.safe && m.unsafe_findings().any(|f| f.setting == "strategy"));
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
        let a =
            json!({"name": "A", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64});
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
        let a =
            json!({"name": "A", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64});
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
        let mut f =
            facts(a.clone(), vec![consumer(json!({"durable_name": "C", "max_deliver": 3}))]);
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
        assert!(p
            .findings
            .iter()
            .any(|x| x.from == "eph" && x.verdict == Verdict::ChangedOnPurpose));
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
mod needs_migration_tests {
    use super::*;

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
