//! Desired state for a fleet (`nats-cutover apply`): assets read from the
//! documents operators keep, compared with what the server holds, and judged
//! into one action each.
//!
//! An [`Asset`] is a stream (a KV bucket and an object store are their
//! streams, `KV_x` and `OBJ_x`) with the stream-config fields its document
//! sets, in the server's names and units. The desired configuration is the
//! server's current one with those fields laid over it: a field the document
//! does not mention keeps the server's value (an existing stream) or the
//! server's default (a new one). Configurations stay raw JSON, as everywhere
//! in this project, so a setting this code does not know survives.
//!
//! # Layout
//! - this file: [`Asset`], reading a document ([`from_document`]: the nats
//!   CLI's stream JSON, bare or under `config`; a bucket with `nats kv add` /
//!   `nats obj add` option names), the field diff ([`diff`]),
//!   the judgement ([`judge`] → [`Needs`]), selection ([`glob`]).
//! - [`nack`]: NACK's resources (`jetstream.nats.io/v1beta2` `Stream`,
//!   `KeyValue`, `ObjectStore`) mapped to stream-config fields.

pub mod nack;

use crate::plan::{check_setting_names, check_setting_values, needs_migration, PlanError};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// What an asset is to its users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AssetKind {
    Stream,
    Kv,
    Obj,
}

impl AssetKind {
    /// The kind of the stream `name` (`KV_x` is a bucket, `OBJ_x` a store).
    pub fn of_stream(name: &str) -> (AssetKind, String) {
        if let Some(b) = name.strip_prefix("KV_") {
            (AssetKind::Kv, b.to_string())
        } else if let Some(b) = name.strip_prefix("OBJ_") {
            (AssetKind::Obj, b.to_string())
        } else {
            (AssetKind::Stream, name.to_string())
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AssetKind::Stream => "stream",
            AssetKind::Kv => "kv",
            AssetKind::Obj => "obj",
        }
    }
}

/// One asset as a document describes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Asset {
    pub kind: AssetKind,
    /// The stream's name, or the bucket's for KV and object stores.
    pub name: String,
    /// The stream it lives in.
    pub stream: String,
    /// Where it was read: `FILE` or `FILE, document N`.
    pub origin: String,
    /// The stream-config fields the document sets (`name` among them).
    pub settings: Map<String, Value>,
    /// NACK's `preventUpdate: true`: an existing stream is left as it is.
    pub prevent_update: bool,
}

impl Asset {
    /// The configuration `apply` creates the stream with: for a bucket or an
    /// object store, what the nats clients create (ADR-8, ADR-20) under the
    /// document's fields; for a stream, the document's fields alone (the
    /// server fills in its defaults).
    pub fn create_config(&self) -> Value {
        let mut c = match self.kind {
            AssetKind::Stream => Map::new(),
            AssetKind::Kv => bucket_defaults(json!({
                "subjects": [format!("$KV.{}.>", self.name)],
                "max_msgs_per_subject": 1,
                "deny_delete": true,
            })),
            AssetKind::Obj => bucket_defaults(json!({
                "subjects": [format!("$O.{}.C.>", self.name), format!("$O.{}.M.>", self.name)],
            })),
        };
        for (k, v) in &self.settings {
            c.insert(k.clone(), v.clone());
        }
        // The clients' duplicate window: 2 minutes, or the TTL when shorter.
        if self.kind != AssetKind::Stream && !self.settings.contains_key("duplicate_window") {
            let ttl = c.get("max_age").and_then(Value::as_i64).unwrap_or(0);
            let two_min = 120_000_000_000i64;
            let dw = if ttl > 0 { ttl.min(two_min) } else { two_min };
            c.insert("duplicate_window".into(), json!(dw));
        }
        Value::Object(c)
    }

    /// `stream ORDERS`, `kv config`, `obj files`.
    pub fn label(&self) -> String {
        format!("{} {}", self.kind.as_str(), self.name)
    }
}

/// What the nats clients create a bucket's stream with, besides `own`.
fn bucket_defaults(own: Value) -> Map<String, Value> {
    let mut m = json!({
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msg_size": -1,
        "storage": "file",
        "discard": "new",
        "num_replicas": 1,
        "allow_rollup_hdrs": true,
        "allow_direct": true,
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    m.extend(own.as_object().cloned().unwrap_or_default());
    m
}

/// A document that cannot be an asset: the whole message names the place,
/// the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {problem}")]
pub struct DesiredError {
    pub origin: String,
    pub problem: String,
}

impl DesiredError {
    pub fn new(origin: &str, problem: impl Into<String>) -> Self {
        Self { origin: origin.to_string(), problem: problem.into() }
    }
}

/// One document (already parsed from JSON or YAML) as an asset: a NACK
/// resource when it has `apiVersion`, else the nats CLI's stream
/// configuration (`nats stream add --config`'s shape), bare or under
/// `config` (`nats stream info --json`).
pub fn from_document(doc: &Value, origin: &str) -> Result<Asset, DesiredError> {
    let Some(obj) = doc.as_object() else {
        return Err(DesiredError::new(origin, "not an object: a stream configuration ({\"name\": \"ORDERS\", ...}) or a NACK resource (apiVersion: jetstream.nats.io/v1beta2)"));
    };
    if obj.contains_key("apiVersion") || obj.contains_key("kind") {
        return nack::from_resource(doc, origin);
    }
    for (key, kind) in [("kv", crate::bucket::Kind::Kv), ("obj", crate::bucket::Kind::Obj)] {
        if obj.contains_key(key) {
            return bucket_options(obj, key, kind, origin);
        }
    }
    let config = match obj.get("config") {
        Some(Value::Object(c)) => c.clone(),
        Some(_) => return Err(DesiredError::new(origin, "`config` is not an object: give the stream configuration itself, or `nats stream info --json`'s output")),
        None => obj.clone(),
    };
    let Some(name) = config.get("name").and_then(Value::as_str).map(String::from) else {
        return Err(DesiredError::new(
            origin,
            "no `name`: a stream configuration names its stream (\"name\": \"ORDERS\")",
        ));
    };
    let (kind, bucket) = AssetKind::of_stream(&name);
    stream_asset(kind, bucket, name, config, origin, false)
}

/// A bucket with `nats kv add` / `nats obj add` option names:
/// `{"kv": "config", "history": 10, "ttl": "24h", "storage": "memory"}`
/// (the options `kv`/`obj --set` take, mapped by `cutover_core::bucket`).
fn bucket_options(
    obj: &Map<String, Value>,
    key: &str,
    kind: crate::bucket::Kind,
    origin: &str,
) -> Result<Asset, DesiredError> {
    let Some(bucket) = obj.get(key).and_then(Value::as_str).filter(|b| !b.is_empty()) else {
        return Err(DesiredError::new(
            origin,
            format!("`{key}` names the bucket: \"{key}\": \"config\""),
        ));
    };
    let pairs: Vec<String> = obj
        .iter()
        .filter(|(k, _)| *k != key)
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    let settings = if pairs.is_empty() {
        Map::new()
    } else {
        crate::bucket::settings(kind, &pairs)
            .map_err(|e| DesiredError::new(origin, e.to_string().replace("--set ", "")))?
    };
    let (asset_kind, stream) = match kind {
        crate::bucket::Kind::Kv => (AssetKind::Kv, kind.stream(bucket)),
        crate::bucket::Kind::Obj => (AssetKind::Obj, kind.stream(bucket)),
    };
    stream_asset(asset_kind, bucket.to_string(), stream, settings, origin, false)
}

/// The asset of stream `stream` with `settings`, checked: a stream name, the
/// fields the server's stream configuration has, values of their type.
pub(crate) fn stream_asset(
    kind: AssetKind,
    name: String,
    stream: String,
    mut settings: Map<String, Value>,
    origin: &str,
    prevent_update: bool,
) -> Result<Asset, DesiredError> {
    crate::names::stream(&stream)
        .map_err(|e| DesiredError::new(origin, format!("stream name {stream:?}: {e}")))?;
    settings.insert("name".into(), json!(stream));
    // What `nats stream info --json` prints under `config` that is state,
    // not a setting to apply.
    settings.remove("created");
    let plan_err = |e: PlanError| DesiredError::new(origin, e.to_string());
    check_setting_names(&settings).map_err(plan_err)?;
    check_setting_values(&settings).map_err(plan_err)?;
    let typed = Value::Object(settings.clone());
    if let Err(e) = serde_json::from_value::<crate::model::StreamConfig>(typed) {
        return Err(DesiredError::new(origin, format!("a value does not have the server's type ({e}): lists and objects as JSON, durations in nanoseconds (\"max_age\": 3600000000000)")));
    }
    Ok(Asset { kind, name, stream, origin: origin.to_string(), settings, prevent_update })
}

/// A field whose desired value differs from the current one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    pub field: String,
    pub current: Value,
    pub desired: Value,
}

/// The fields of `settings` whose values `current` (the server's stream
/// configuration) does not already have. An object counts as had when
/// every field it sets is had (the server adds defaults to nested objects,
/// e.g. a source's), and the server's own `_nats.*` metadata is not
/// compared.
pub fn diff(current: &Value, settings: &Map<String, Value>) -> Vec<Change> {
    let mut out = vec![];
    for (k, want) in settings {
        if k == "name" {
            continue;
        }
        let have = current.get(k).cloned().unwrap_or(Value::Null);
        let want_cmp = if k == "metadata" { without_server_metadata(want) } else { want.clone() };
        let had = contains(&have, &want_cmp) || (is_empty(&want_cmp) && is_empty(&have));
        if !had {
            out.push(Change { field: k.clone(), current: have, desired: want.clone() });
        }
    }
    out
}

fn without_server_metadata(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with("_nats."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Null, false, zero, an empty string, list or object: the zero values
/// the server omits from its JSON (Go's `omitempty`), so a file that
/// writes `"first_seq": 0` reads as the server's missing `first_seq`.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// `have` holds `want`: equal, or for objects every field of `want` held.
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w.iter().all(|(k, wv)| match h.get(k) {
            Some(hv) => contains(hv, wv),
            None => is_empty(wv),
        }),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(a, b)| contains(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => have == want,
    }
}

/// What an asset needs to reach its document's state.
#[derive(Debug, Clone, PartialEq)]
pub enum Needs {
    /// The server holds it as described.
    Unchanged,
    /// Not on the server: created with [`Asset::create_config`].
    Create,
    /// Every change is one the server takes as a plain update.
    Update(Vec<Change>),
    /// Some change the server refuses to update (each with its reason):
    /// a live change in place, if its plan is safe.
    InPlace { changes: Vec<Change>, refused_by_server: Vec<(String, String)> },
    /// Cannot be done: why, and what would make it possible.
    Refused { changes: Vec<Change>, reason: String, fix: String },
}

/// Judges `asset` against the server's stream configuration `current`
/// (`None`: no such stream).
pub fn judge(asset: &Asset, current: Option<&Value>) -> Needs {
    let Some(current) = current else { return Needs::Create };
    let changes = diff(current, &asset.settings);
    if changes.is_empty() {
        return Needs::Unchanged;
    }
    if asset.prevent_update {
        return Needs::Refused {
            changes,
            reason: "the resource sets preventUpdate: true".into(),
            fix: "remove preventUpdate (or set it false) to let apply change it".into(),
        };
    }
    if changes.iter().any(|c| c.field == "mirror") {
        return Needs::Refused {
            changes,
            reason: "mirror: the server cannot change what a stream mirrors, and a change in place sets the mirror itself".into(),
            fix: "create the new mirror under another name (a file with a new name), or leave mirror as the server has it".into(),
        };
    }
    let m: Map<String, Value> =
        changes.iter().map(|c| (c.field.clone(), c.desired.clone())).collect();
    let refused_by_server = needs_migration(current, &m);
    if refused_by_server.is_empty() {
        return Needs::Update(changes);
    }
    if let Some((f, why)) = refused_by_server.iter().find(|(f, _)| f == "sealed") {
        return Needs::Refused {
            changes: changes.clone(),
            reason: format!("{f}: {why}"),
            fix: "leave sealed out of the file (a sealed stream keeps its messages read-only); a new stream under another name takes new writes".into(),
        };
    }
    Needs::InPlace { changes, refused_by_server }
}

/// The changed fields as the settings of an in-place change (their desired
/// values).
pub fn settings_of(changes: &[Change]) -> Map<String, Value> {
    changes.iter().map(|c| (c.field.clone(), c.desired.clone())).collect()
}

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters (none too) and every other character for itself.
pub fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Whether an asset (by its name or its stream's) is selected by `--only`
/// (any of them; none given: all) and not excluded by `--except`.
pub fn selected(name: &str, stream: &str, only: &[String], except: &[String]) -> bool {
    let hit = |p: &String| glob(p, name) || glob(p, stream);
    (only.is_empty() || only.iter().any(hit)) && !except.iter().any(hit)
}

#[cfg(test)]
mod tests;
