//! The server's disk sync setting, judged for the plan: a message the server
//! acknowledged reaches the disk at the next sync (`sync_interval`, 2 minutes
//! by default, server/filestore.go `defaultSyncInterval`), or at once with
//! `sync_interval: always` (opts.go). Until then it is in the operating
//! system's memory: a machine crash loses it unless another replica holds it.
//!
//! A client sees the setting only in varz (`jetstream.config.sync_interval`,
//! `sync_always`: server/jetstream.go `JetStreamConfig`), which the server
//! gives on its monitoring port or to the system account, never to an
//! application account: `plan --monitor URL` reads it; without it the plan
//! says it was not read.

use crate::compat::{Finding, Verdict};
use crate::model::nanos;
use crate::plan::Plan;

/// What varz says about syncing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncSetting {
    /// `sync_interval: always`: every write is synced before it is acknowledged.
    pub always: bool,
    /// The background sync interval, in nanoseconds.
    pub interval_ns: i64,
}

/// The finding for B's durability under `sync` (`None`: not read). A memory
/// B is never synced: nothing to say.
pub fn judge(plan: &mut Plan, sync: Option<SyncSetting>) {
    if plan.b_config["storage"].as_str() == Some("memory") {
        return;
    }
    let replicas = plan.b_config["num_replicas"].as_i64().unwrap_or(1).max(1);
    let (from, verdict, reason) = match sync {
        None => (
            "not read".to_string(),
            Verdict::Ok,
            "the server's sync setting is shown only on its monitoring port (varz) or to the system account; pass --monitor with the address of its monitoring port (8222 by default) to have it checked (the default syncs every 2m: an acknowledged message may be on no disk for that long)".to_string(),
        ),
        Some(s) if s.always => (
            "always".into(),
            Verdict::Ok,
            "every acknowledged message is on disk (sync_interval: always)".into(),
        ),
        Some(s) => {
            let every = format!("{:?}", nanos(s.interval_ns));
            let loss = if replicas == 1 {
                "B is R1: a crash of its machine loses them".to_string()
            } else {
                format!("B is R{replicas}: they are lost only if all {replicas} machines holding them crash together")
            };
            (
                every.clone(),
                Verdict::ChangedOnPurpose,
                format!("WARNING: the server syncs to disk every {every} (sync_interval), not on each write: messages it acknowledged in the last {every} may be on no disk yet; {loss}; `jetstream {{ sync_interval: always }}` syncs every write (slower)"),
            )
        }
    };
    plan.findings.push(Finding {
        scope: "server".into(),
        setting: "sync_interval".into(),
        from,
        to: String::new(),
        verdict,
        reason,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{build, PlanRequest, ServerFacts};
    use crate::version::ServerVersion;
    use serde_json::json;

    fn plan(replicas: i64, storage: &str) -> Plan {
        let a =
            json!({"name": "A", "subjects": ["x.>"], "num_replicas": replicas, "storage": storage});
        let c = json!({"name": "C", "stream_name": "A", "config": {"durable_name": "C", "ack_policy": "explicit"}});
        let facts = ServerFacts {
            version: ServerVersion::new(2, 15, 1),
            a_raw: json!({"config": a, "state": {"messages": 0}}),
            b_raw: None,
            consumers_raw: vec![c],
            other_consumers: vec![],
            downstream: vec![],
            account: None,
            checks: Default::default(),
        };
        build(&PlanRequest::source("A", "B", &["C"]), &facts).unwrap()
    }

    fn sync_finding(p: &Plan) -> Option<&Finding> {
        p.findings.iter().find(|f| f.setting == "sync_interval")
    }

    #[test]
    fn an_interval_is_warned_about_always_is_not() {
        let every_2m = SyncSetting { always: false, interval_ns: 120_000_000_000 };
        let mut p = plan(1, "file");
        judge(&mut p, Some(every_2m));
        let f = sync_finding(&p).unwrap();
        assert_eq!(f.verdict, Verdict::ChangedOnPurpose);
        assert!(f.reason.starts_with("WARNING: the server syncs to disk every 120s"), "{f:?}");
        assert!(f.reason.contains("B is R1: a crash of its machine loses them"), "{f:?}");
        let mut p = plan(3, "file");
        judge(&mut p, Some(every_2m));
        assert!(sync_finding(&p).unwrap().reason.contains("all 3 machines"));
        let mut p = plan(1, "file");
        judge(&mut p, Some(SyncSetting { always: true, interval_ns: 120_000_000_000 }));
        assert_eq!(sync_finding(&p).unwrap().verdict, Verdict::Ok);
    }

    #[test]
    fn not_read_says_how_and_memory_says_nothing() {
        let mut p = plan(1, "file");
        judge(&mut p, None);
        let f = sync_finding(&p).unwrap();
        assert_eq!((f.verdict, f.from.as_str()), (Verdict::Ok, "not read"));
        assert!(f.reason.contains("--monitor"), "{f:?}");
        let mut p = plan(1, "memory");
        judge(&mut p, None);
        assert!(sync_finding(&p).is_none());
    }
}
