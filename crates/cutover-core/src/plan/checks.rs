//! The plan's rules on what was asked (before any server state) and on the
//! server beyond A and B (other streams' subjects, per-subject counts, the
//! scratch stream's verdict on B's configuration); A against B is
//! `crate::compat`'s.

use super::request::{InPlaceHop, PlanRequest, ServerChecks};
use crate::compat::{dur, Report, Verdict, STREAM};
use crate::model::{nanos, StreamConfig, StreamInfo};
use crate::subject;

/// Rules on what was asked, before any server state: streams clients find by
/// name, A's own sources, the retry horizon against A's window.
pub(super) fn check_request(r: &mut Report, req: &PlanRequest, a: &StreamInfo) {
    let s = STREAM;
    if req.in_place == Some(InPlaceHop::Out) {
        let what = if a.config.name.starts_with("OBJ_") {
            "deleting or overwriting objects while a hop copies leaves their old chunks in the copy (storage, not data readers see)"
        } else {
            "a message deleted or purged while a hop copies comes back in the copy, where a durable may deliver it"
        };
        r.add(s, "deletes", "", "", Verdict::ChangedOnPurpose, format!(
            "a mirror copies what {} stores, not what is deleted from it afterwards: {what}; do not delete or purge during the change (KV deletes and purges are messages and are carried)",
            a.config.name
        ));
    }
    if req.in_place == Some(InPlaceHop::Out)
        && a.config.name.starts_with("KV_")
        && !a.config.allow_direct
    {
        r.add(s, "allow_direct", false, false, Verdict::ChangedOnPurpose, format!(
            "readers of this bucket ask the stream {} itself (no direct get): while the last hop's copy catches up (see the estimate), a get may answer an older value or 'key not found'; writes, revision checks and watchers stay exact. To avoid it, pause the readers, or enable direct get first (nats stream edit {} --allow-direct) and restart them so they bind anew",
            a.config.name, a.config.name
        ));
    }
    for (prefix, what) in [("KV_", "a KV bucket"), ("OBJ_", "an object store")] {
        if req.in_place.is_some() {
            // Each hop of an in-place migration ends with the name kept.
            break;
        }
        if let Some(bucket) = a.config.name.strip_prefix(prefix) {
            r.add(s, "name", &a.config.name, &req.to, Verdict::Unsafe, format!(
                "{} is {what}: clients find it by its name ({bucket}), so after a move to {} they would still read and write the old, sealed stream; change its settings under its own name instead (nats-cutover kv|obj BUCKET --set ..., or run --in-place)",
                a.config.name, req.to
            ));
        }
    }
    if !a.config.sources.is_empty() {
        let names: Vec<&str> = a.config.sources.iter().map(|x| x.name.as_str()).collect();
        r.add(s, "sources", names.join(","), "", Verdict::Unsafe, format!(
            "A sources {}: once A is sealed it receives nothing more from them, and B sources only A, so their new messages would never reach the moved consumers; remove A's sources (or point them at the new stream) first",
            names.join(", ")
        ));
    }
    if let Some(h) = req.retry_horizon {
        let aw = a.config.duplicate_window;
        if aw > 0 && h > nanos(aw) {
            r.add(s, "retry horizon", format!("{h:?}"), dur(aw), Verdict::Unsafe, format!(
                "B takes A's duplicate window ({:?}) so that it drops no message A stored, which is shorter than --retry-horizon {h:?}: retries later than that could land twice; raise A's window first (nats stream edit {} --dupe-window {}s) or lower --retry-horizon",
                nanos(aw), a.config.name, h.as_secs().max(1)
            ));
        }
    }
}

/// Rules that need more of the server than A and B: other streams' subjects,
/// A's per-subject counts, and the server's own verdict on B's configuration.
pub(super) fn check_against_server(
    r: &mut Report,
    a: &StreamInfo,
    b: &StreamConfig,
    b_final_subjects: &[String],
    checks: &ServerChecks,
) {
    let s = STREAM;
    for (other, subjects) in &checks.other_streams {
        for bs in b_final_subjects {
            if let Some(os) = subjects.iter().find(|os| subject::overlaps(bs, os)) {
                r.add(s, "subjects", bs, format!("{other}: {os}"), Verdict::Unsafe, format!(
                    "stream {other} already takes {os}, which overlaps {bs}: B could not take its subjects at the commit point (error 10065); leave {bs} out of --to-config's subjects or change {other} first"
                ));
            }
        }
    }
    if let Some((subj, n)) = &checks.a_max_per_subject {
        let lim = b.max_msgs_per_subject;
        if lim > 0 && *n > lim as u64 {
            r.add(s, "max_msgs_per_subject", a.config.max_msgs_per_subject, lim, Verdict::Unsafe, format!(
                "A holds {n} messages on {subj} but B keeps {lim} per subject: B would drop the older ones while it sources them, before every consumer has processed them; give B at least {n}"
            ));
        }
    }
    if let Some(c) = &checks.b_config_check {
        match &c.result {
            Ok(()) if c.dropped_duplicate_window => r.add(s, "duplicate_window", "", "handed over", Verdict::ChangedOnPurpose, format!(
                "the server accepted B's configuration but did not keep its duplicate_window (scratch stream {}, deleted): a clustered JetStream drops it from every mirror (nats-server jetstream_cluster.go decodeStreamAssignmentConfig, fixCfgMirrorWithDedupWindow) and a mirror records no msg-ids, while a sourcing stream keeps an explicit window on a cluster, through leader changes and restarts. So B mirrors A until it caught up and the consumers moved, and is then handed over to sourcing A with the window, in a freeze of about 0.2 s (A releases its subjects until B holds exactly A's last message and its source is set up; publishes in between get no responders and are retried); the commit waits one retry horizon after it, so a retry of a publish A stored meets its id in B; B keeps A's sequences (checked at the commit)",
                c.scratch
            )),
            Ok(()) => r.add(s, "server check", "", &c.scratch, Verdict::Ok, format!(
                "the server accepted B's configuration: scratch stream {} was created with it (sourcing nothing of A) and deleted",
                c.scratch
            )),
            Err(e) => r.add(s, "server check", "", &c.scratch, Verdict::Unsafe, format!(
                "the server refuses B's configuration: {e}; fix --to-config (nothing was changed: the check used a scratch stream {}, deleted)",
                c.scratch
            )),
        }
    }
}
