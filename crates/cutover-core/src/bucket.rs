//! KV buckets and object stores as streams: their stream names and the
//! options of `nats kv add` / `nats obj add` mapped to stream settings.
//!
//! A KV bucket `x` is the stream `KV_x` (subjects `$KV.x.>`), an object store
//! `x` the stream `OBJ_x` (subjects `$O.x.C.>`, `$O.x.M.>`); clients find them
//! by those names (ADR-8, ADR-20). The option names are the nats CLI's, so an
//! operator writes `--set history=10 --set storage=memory` as for `nats kv add`.

use serde_json::{json, Map, Value};
use std::time::Duration;

/// Which kind of bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Kv,
    Obj,
}

impl Kind {
    /// The stream a bucket lives in.
    pub fn stream(self, bucket: &str) -> String {
        match self {
            Kind::Kv => format!("KV_{bucket}"),
            Kind::Obj => format!("OBJ_{bucket}"),
        }
    }

    /// The option names this kind takes, for messages.
    pub fn options(self) -> &'static [&'static str] {
        match self {
            Kind::Kv => &[
                "history",
                "ttl",
                "max-value-size",
                "max-bucket-size",
                "storage",
                "replicas",
                "compression",
                "description",
                "marker-ttl",
            ],
            Kind::Obj => {
                &["ttl", "max-bucket-size", "storage", "replicas", "compression", "description"]
            }
        }
    }

    fn command(self) -> &'static str {
        match self {
            Kind::Kv => "kv",
            Kind::Obj => "obj",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BucketError {
    #[error("--set {0:?} is not OPTION=VALUE: write e.g. --set storage=memory")]
    NotAPair(String),
    #[error(
        "`{cmd}` has no option {option:?}: use one of {known} (the names of `nats {cmd} add`)"
    )]
    UnknownOption { cmd: &'static str, option: String, known: String },
    #[error("--set {option}={value:?}: {why}")]
    BadValue { option: String, value: String, why: String },
    #[error("no new setting given: name at least one, e.g. --set storage=memory")]
    Nothing,
}

/// Maps `OPTION=VALUE` pairs to stream settings (the server's stream-config
/// names and units). Underscores are accepted for dashes.
pub fn settings(kind: Kind, pairs: &[String]) -> Result<Map<String, Value>, BucketError> {
    let mut m = Map::new();
    for pair in pairs {
        let Some((option, value)) = pair.split_once('=') else {
            return Err(BucketError::NotAPair(pair.clone()));
        };
        let option = option.trim().replace('_', "-");
        let value = value.trim();
        if !kind.options().contains(&option.as_str()) {
            return Err(BucketError::UnknownOption {
                cmd: kind.command(),
                option,
                known: kind.options().join(", "),
            });
        }
        one(&option, value, &mut m)?;
    }
    if m.is_empty() {
        return Err(BucketError::Nothing);
    }
    Ok(m)
}

/// One option into `m`.
fn one(option: &str, value: &str, m: &mut Map<String, Value>) -> Result<(), BucketError> {
    let bad = |why: &str| BucketError::BadValue {
        option: option.to_string(),
        value: value.to_string(),
        why: why.to_string(),
    };
    match option {
        "history" => {
            // ADR-8: at most 64 values per key.
            let n: i64 = value.parse().map_err(|_| bad("a whole number from 1 to 64"))?;
            if !(1..=64).contains(&n) {
                return Err(bad("a whole number from 1 to 64"));
            }
            m.insert("max_msgs_per_subject".into(), json!(n));
        }
        "ttl" => {
            let ns = nanos(duration(value).ok_or_else(|| bad(DURATION))?);
            m.insert("max_age".into(), json!(ns));
        }
        "marker-ttl" => {
            let d = duration(value).ok_or_else(|| bad(DURATION))?;
            if d < Duration::from_secs(1) {
                return Err(bad("at least 1s (the server's minimum for delete markers)"));
            }
            m.insert("subject_delete_marker_ttl".into(), json!(nanos(d)));
            m.insert("allow_msg_ttl".into(), json!(true));
        }
        "max-value-size" => {
            let n = size(value).ok_or_else(|| bad(SIZE))?;
            m.insert("max_msg_size".into(), json!(n));
        }
        "max-bucket-size" => {
            m.insert("max_bytes".into(), json!(size(value).ok_or_else(|| bad(SIZE))?));
        }
        "storage" => match value {
            "file" | "memory" => {
                m.insert("storage".into(), json!(value));
            }
            _ => return Err(bad("file or memory")),
        },
        "replicas" => {
            let n: i64 = value.parse().map_err(|_| bad("1, 3 or 5"))?;
            if !(1..=5).contains(&n) {
                return Err(bad("1, 3 or 5"));
            }
            m.insert("num_replicas".into(), json!(n));
        }
        "compression" => {
            let c = match value {
                "true" | "s2" => "s2",
                "false" | "none" => "none",
                _ => return Err(bad("true or false (s2 or none)")),
            };
            m.insert("compression".into(), json!(c));
        }
        "description" => {
            m.insert("description".into(), json!(value));
        }
        _ => unreachable!("every option in Kind::options is mapped"),
    }
    Ok(())
}

const DURATION: &str = "a duration such as 90s, 30m, 12h or 7d; 0 for none";
const SIZE: &str = "bytes, or with a unit: 512KB, 10MB, 1GiB; -1 for no limit";

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// `0`, or a humantime duration (`90s`, `1h 30m`, `7d`).
fn duration(v: &str) -> Option<Duration> {
    if v == "0" {
        return Some(Duration::ZERO);
    }
    humantime::parse_duration(v).ok()
}

/// Bytes: a number with an optional unit, decimal (KB, MB, GB, TB) or binary
/// (KiB, MiB, GiB, TiB; K, M, G, T as the nats CLI reads them); -1: no limit.
fn size(v: &str) -> Option<i64> {
    if v == "-1" {
        return Some(-1);
    }
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: i64 = num.parse().ok()?;
    let mult: i64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "K" | "KIB" => 1 << 10,
        "M" | "MIB" => 1 << 20,
        "G" | "GIB" => 1 << 30,
        "T" | "TIB" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(pairs: &[&str]) -> Result<Map<String, Value>, BucketError> {
        settings(Kind::Kv, &pairs.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn kv_options_map_to_stream_settings() {
        let m = s(&[
            "history=10",
            "ttl=1h",
            "storage=memory",
            "max-value-size=1KiB",
            "max_bucket_size=10MB",
            "replicas=3",
            "compression=true",
            "marker-ttl=5m",
        ])
        .unwrap();
        assert_eq!(m["max_msgs_per_subject"], 10);
        assert_eq!(m["max_age"], 3_600_000_000_000i64);
        assert_eq!(m["storage"], "memory");
        assert_eq!(m["max_msg_size"], 1024);
        assert_eq!(m["max_bytes"], 10_000_000);
        assert_eq!(m["num_replicas"], 3);
        assert_eq!(m["compression"], "s2");
        assert_eq!(m["subject_delete_marker_ttl"], 300_000_000_000i64);
        assert_eq!(m["allow_msg_ttl"], true);
    }

    #[test]
    fn bad_input_names_the_problem() {
        assert!(matches!(s(&["history=0"]), Err(BucketError::BadValue { .. })));
        assert!(matches!(s(&["history=65"]), Err(BucketError::BadValue { .. })));
        assert!(matches!(s(&["storage=disk"]), Err(BucketError::BadValue { .. })));
        assert!(matches!(s(&["ttl=soon"]), Err(BucketError::BadValue { .. })));
        assert!(matches!(s(&["max-value-size=1XB"]), Err(BucketError::BadValue { .. })));
        assert!(matches!(s(&["storage"]), Err(BucketError::NotAPair(_))));
        assert_eq!(s(&[]), Err(BucketError::Nothing));
        let e = s(&["retention=workqueue"]).unwrap_err().to_string();
        assert!(e.contains("history, ttl"), "{e}");
        let obj = settings(Kind::Obj, &["history=5".to_string()]).unwrap_err();
        assert!(matches!(obj, BucketError::UnknownOption { cmd: "obj", .. }));
    }

    #[test]
    fn streams_are_named_as_clients_find_them() {
        assert_eq!(Kind::Kv.stream("cfg"), "KV_cfg");
        assert_eq!(Kind::Obj.stream("files"), "OBJ_files");
    }
}
