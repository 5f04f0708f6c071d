//! NACK's resources (github.com/nats-io/nack, `jetstream.nats.io/v1beta2`)
//! as stream-config fields: `Stream`, `KeyValue` and `ObjectStore`, with the
//! field names of NACK's CRDs (deploy/crds.yml; `StreamSpec`,
//! `KeyValueSpec`, `ObjectStoreSpec` in pkg/jetstream/apis/jetstream/v1beta2)
//! and the conversions of its controllers (internal/controller: durations
//! as Go duration strings, `history` as the per-subject limit, a KV
//! bucket's `compression` a boolean).
//!
//! Only the fields the resource sets are mapped: what it leaves out keeps
//! the server's value (NACK would reset it to a zero value; `apply` never
//! changes what the file does not mention). A field NACK does not define is
//! an error naming it, and so are the connection fields (`servers`,
//! `creds`, `account`, ...): `apply` connects with its own options.

use super::{stream_asset, Asset, AssetKind, DesiredError};
use serde_json::{json, Map, Value};

pub const API_VERSION: &str = "jetstream.nats.io/v1beta2";

/// How a spec field becomes stream-config fields.
#[derive(Clone, Copy)]
enum Rule {
    /// The same value under the stream-config name.
    As(&'static str),
    /// A Go duration string (`1h30m`, `90s`) as nanoseconds.
    Duration(&'static str),
    /// Ignored: NACK's own behaviour (apply never deletes).
    Ignore,
    Special,
}

const STREAM: &[(&str, Rule)] = &[
    ("name", Rule::Special),
    ("description", Rule::As("description")),
    ("subjects", Rule::As("subjects")),
    ("retention", Rule::As("retention")),
    ("maxConsumers", Rule::As("max_consumers")),
    ("maxMsgsPerSubject", Rule::As("max_msgs_per_subject")),
    ("maxMsgs", Rule::As("max_msgs")),
    ("maxBytes", Rule::As("max_bytes")),
    ("maxAge", Rule::Duration("max_age")),
    ("maxMsgSize", Rule::As("max_msg_size")),
    ("storage", Rule::As("storage")),
    ("discard", Rule::As("discard")),
    ("replicas", Rule::As("num_replicas")),
    ("noAck", Rule::As("no_ack")),
    ("duplicateWindow", Rule::Duration("duplicate_window")),
    ("placement", Rule::Special),
    ("mirror", Rule::Special),
    ("sources", Rule::Special),
    ("compression", Rule::Special),
    ("subjectTransform", Rule::Special),
    ("republish", Rule::Special),
    ("sealed", Rule::As("sealed")),
    ("denyDelete", Rule::As("deny_delete")),
    ("denyPurge", Rule::As("deny_purge")),
    ("allowDirect", Rule::As("allow_direct")),
    ("allowRollup", Rule::As("allow_rollup_hdrs")),
    ("mirrorDirect", Rule::As("mirror_direct")),
    ("discardPerSubject", Rule::As("discard_new_per_subject")),
    ("firstSequence", Rule::As("first_seq")),
    ("metadata", Rule::As("metadata")),
    ("consumerLimits", Rule::Special),
    ("allowMsgTtl", Rule::As("allow_msg_ttl")),
    ("subjectDeleteMarkerTtl", Rule::Duration("subject_delete_marker_ttl")),
    ("allowMsgCounter", Rule::As("allow_msg_counter")),
    ("allowAtomicPublish", Rule::As("allow_atomic")),
    ("allowMsgSchedules", Rule::As("allow_msg_schedules")),
    ("persistMode", Rule::As("persist_mode")),
    ("preventDelete", Rule::Ignore),
    ("preventUpdate", Rule::Special),
];

const KEY_VALUE: &[(&str, Rule)] = &[
    ("bucket", Rule::Special),
    ("description", Rule::As("description")),
    ("maxValueSize", Rule::As("max_msg_size")),
    ("history", Rule::Special),
    ("ttl", Rule::Duration("max_age")),
    ("maxBytes", Rule::As("max_bytes")),
    ("storage", Rule::As("storage")),
    ("replicas", Rule::As("num_replicas")),
    ("placement", Rule::Special),
    ("republish", Rule::Special),
    ("compression", Rule::Special),
    ("limitMarkerTtl", Rule::Special),
    ("preventDelete", Rule::Ignore),
    ("preventUpdate", Rule::Special),
];

const OBJECT_STORE: &[(&str, Rule)] = &[
    ("bucket", Rule::Special),
    ("description", Rule::As("description")),
    ("ttl", Rule::Duration("max_age")),
    ("maxBytes", Rule::As("max_bytes")),
    ("storage", Rule::As("storage")),
    ("replicas", Rule::As("num_replicas")),
    ("placement", Rule::Special),
    ("compression", Rule::Special),
    ("metadata", Rule::As("metadata")),
    ("preventDelete", Rule::Ignore),
    ("preventUpdate", Rule::Special),
];

/// NACK's connection fields (`ConnectionOpts`), refused with the way to
/// say the same to `apply`.
const CONNECTION: &[&str] = &["account", "creds", "nkey", "servers", "tls", "tlsFirst", "jsDomain"];

/// A NACK resource as an asset.
pub fn from_resource(doc: &Value, origin: &str) -> Result<Asset, DesiredError> {
    let err = |p: String| DesiredError::new(origin, p);
    let api = doc.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    if api != API_VERSION {
        return Err(err(format!(
            "apiVersion {api:?} is not NACK's {API_VERSION:?}: apply reads NACK's v1beta2 resources (convert older ones with NACK's own upgrade) and the nats CLI's stream JSON"
        )));
    }
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let (table, asset_kind) = match kind {
        "Stream" => (STREAM, AssetKind::Stream),
        "KeyValue" => (KEY_VALUE, AssetKind::Kv),
        "ObjectStore" => (OBJECT_STORE, AssetKind::Obj),
        other => {
            return Err(err(format!(
                "kind {other:?}: apply changes streams, KV buckets and object stores (kinds Stream, KeyValue, ObjectStore); consumers and accounts are left to NACK"
            )))
        }
    };
    let Some(spec) = doc.get("spec").and_then(Value::as_object) else {
        return Err(err(format!("a {kind} without `spec`: the settings go under spec")));
    };
    let ctx = |field: &str| format!("{kind} spec.{field}");
    let mut out = Map::new();
    let mut prevent_update = false;
    let mut name = None;
    for (field, v) in spec {
        let Some((_, rule)) = table.iter().find(|(f, _)| f == field) else {
            if CONNECTION.contains(&field.as_str()) {
                return Err(err(format!("{}: apply connects with its own options (--server, --context, --creds): remove the field, or run apply against that server", ctx(field))));
            }
            let known: Vec<&str> = table.iter().map(|(f, _)| *f).collect();
            return Err(err(format!(
                "{} is not a field of NACK's {kind}: use one of {}",
                ctx(field),
                known.join(", ")
            )));
        };
        let bad = |expected: &str| err(format!("{} = {v}: expected {expected}", ctx(field)));
        match (rule, field.as_str()) {
            (Rule::As(to), _) => {
                out.insert(to.to_string(), v.clone());
            }
            (Rule::Duration(to), _) => {
                let s = v.as_str().ok_or_else(|| bad("a duration string such as \"1h\""))?;
                let ns = go_duration(s)
                    .ok_or_else(|| bad("a Go duration such as \"90s\", \"1h30m\" or \"24h\""))?;
                out.insert(to.to_string(), json!(ns));
            }
            (Rule::Ignore, _) => {}
            (Rule::Special, "name" | "bucket") => {
                let s = v.as_str().filter(|s| !s.is_empty()).ok_or_else(|| bad("a name"))?;
                name = Some(s.to_string());
            }
            (Rule::Special, "preventUpdate") => {
                prevent_update = v.as_bool().ok_or_else(|| bad("true or false"))?;
            }
            (Rule::Special, "history") => {
                let n = v.as_i64().filter(|n| (1..=64).contains(n));
                out.insert("max_msgs_per_subject".into(), json!(n.ok_or_else(|| bad("1 to 64"))?));
            }
            (Rule::Special, "compression") => {
                let c = match v {
                    Value::Bool(true) => "s2",
                    Value::Bool(false) => "none",
                    Value::String(s) if s == "s2" || s == "none" => s.as_str(),
                    // The CRD's default: leave the server's setting.
                    Value::String(s) if s.is_empty() => continue,
                    _ => return Err(bad("s2 or none (true or false for buckets)")),
                };
                out.insert("compression".into(), json!(c));
            }
            (Rule::Special, "limitMarkerTtl") => {
                // KeyValueSpec.LimitMarkerTTL is a time.Duration: nanoseconds.
                let ns = v.as_i64().filter(|n| *n >= 0).ok_or_else(|| bad("nanoseconds"))?;
                if ns > 0 {
                    out.insert("allow_msg_ttl".into(), json!(true));
                }
                out.insert("subject_delete_marker_ttl".into(), json!(ns));
            }
            (Rule::Special, "placement") => {
                let p = v.as_object().ok_or_else(|| bad("{cluster, tags}"))?;
                let mut m = Map::new();
                for (k, x) in p {
                    match k.as_str() {
                        "cluster" | "tags" => m.insert(k.clone(), x.clone()),
                        _ => {
                            return Err(err(format!(
                                "{}.{k}: placement has cluster and tags",
                                ctx(field)
                            )))
                        }
                    };
                }
                out.insert("placement".into(), Value::Object(m));
            }
            (Rule::Special, "subjectTransform") => {
                out.insert("subject_transform".into(), transform(v, &ctx(field), origin)?);
            }
            (Rule::Special, "republish") => {
                let r = v.as_object().ok_or_else(|| bad("{source, destination, headers_only}"))?;
                let mut m = Map::new();
                for (k, x) in r {
                    let to = match k.as_str() {
                        "source" => "src",
                        "destination" => "dest",
                        "headers_only" => "headers_only",
                        _ => {
                            return Err(err(format!(
                                "{}.{k}: republish has source, destination and headers_only",
                                ctx(field)
                            )))
                        }
                    };
                    m.insert(to.into(), x.clone());
                }
                out.insert("republish".into(), Value::Object(m));
            }
            (Rule::Special, "consumerLimits") => {
                let c = v.as_object().ok_or_else(|| bad("{inactiveThreshold, maxAckPending}"))?;
                let mut m = Map::new();
                for (k, x) in c {
                    match k.as_str() {
                        "maxAckPending" => m.insert("max_ack_pending".into(), x.clone()),
                        "inactiveThreshold" => {
                            let ns = x.as_str().and_then(go_duration).ok_or_else(|| {
                                err(format!(
                                    "{}.{k} = {x}: expected a Go duration such as \"5m\"",
                                    ctx(field)
                                ))
                            })?;
                            m.insert("inactive_threshold".into(), json!(ns))
                        }
                        _ => {
                            return Err(err(format!(
                                "{}.{k}: consumerLimits has inactiveThreshold and maxAckPending",
                                ctx(field)
                            )))
                        }
                    };
                }
                out.insert("consumer_limits".into(), Value::Object(m));
            }
            (Rule::Special, "mirror") => {
                out.insert("mirror".into(), source(v, &ctx(field), origin)?);
            }
            (Rule::Special, "sources") => {
                let a = v.as_array().ok_or_else(|| bad("a list of sources"))?;
                let list = a
                    .iter()
                    .enumerate()
                    .map(|(i, s)| source(s, &format!("{}[{i}]", ctx(field)), origin))
                    .collect::<Result<Vec<_>, _>>()?;
                out.insert("sources".into(), Value::Array(list));
            }
            (Rule::Special, other) => unreachable!("special field {other} is mapped"),
        }
    }
    let key = if asset_kind == AssetKind::Stream { "name" } else { "bucket" };
    let Some(name) = name else {
        return Err(err(format!("a {kind} without spec.{key}: name it")));
    };
    let stream = match asset_kind {
        AssetKind::Stream => name.clone(),
        AssetKind::Kv => crate::bucket::Kind::Kv.stream(&name),
        AssetKind::Obj => crate::bucket::Kind::Obj.stream(&name),
    };
    stream_asset(asset_kind, name, stream, out, origin, prevent_update)
}

/// NACK's `{source, dest}` as the server's `{src, dest}`.
fn transform(v: &Value, at: &str, origin: &str) -> Result<Value, DesiredError> {
    let t = v
        .as_object()
        .ok_or_else(|| DesiredError::new(origin, format!("{at}: expected {{source, dest}}")))?;
    let mut m = Map::new();
    for (k, x) in t {
        let to = match k.as_str() {
            "source" => "src",
            "dest" => "dest",
            _ => {
                return Err(DesiredError::new(
                    origin,
                    format!("{at}.{k}: a subject transform has source and dest"),
                ))
            }
        };
        m.insert(to.into(), x.clone());
    }
    Ok(Value::Object(m))
}

/// NACK's `StreamSource` as the server's.
fn source(v: &Value, at: &str, origin: &str) -> Result<Value, DesiredError> {
    let err = |p: String| DesiredError::new(origin, p);
    let s = v.as_object().ok_or_else(|| err(format!("{at}: expected {{name, ...}}")))?;
    let mut m = Map::new();
    let mut external = Map::new();
    for (k, x) in s {
        match k.as_str() {
            "name" => m.insert("name".into(), x.clone()),
            "optStartSeq" => m.insert("opt_start_seq".into(), x.clone()),
            "optStartTime" => m.insert("opt_start_time".into(), x.clone()),
            "filterSubject" => m.insert("filter_subject".into(), x.clone()),
            "externalApiPrefix" => external.insert("api".into(), x.clone()),
            "externalDeliverPrefix" => external.insert("deliver".into(), x.clone()),
            "subjectTransforms" => {
                let a = x.as_array().ok_or_else(|| err(format!("{at}.{k}: expected a list")))?;
                let list = a
                    .iter()
                    .enumerate()
                    .map(|(i, t)| transform(t, &format!("{at}.{k}[{i}]"), origin))
                    .collect::<Result<Vec<_>, _>>()?;
                m.insert("subject_transforms".into(), Value::Array(list))
            }
            _ => return Err(err(format!("{at}.{k} is not a field of NACK's StreamSource: use name, optStartSeq, optStartTime, filterSubject, externalApiPrefix, externalDeliverPrefix, subjectTransforms"))),
        };
    }
    if !external.is_empty() {
        m.insert("external".into(), Value::Object(external));
    }
    Ok(Value::Object(m))
}

/// A Go duration (`time.ParseDuration`: `300ms`, `1.5h`, `2h45m`, `0`) in
/// nanoseconds; `None` when it is not one (or negative).
pub fn go_duration(s: &str) -> Option<i64> {
    let s = s.trim();
    if s == "0" {
        return Some(0);
    }
    if s.is_empty() || s.starts_with('-') {
        return None;
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, tail) = rest.split_at(n);
        let num: f64 = num.parse().ok()?;
        let u = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(u);
        let mult = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += num * mult;
        rest = tail;
    }
    (total <= i64::MAX as f64).then_some(total.round() as i64)
}
