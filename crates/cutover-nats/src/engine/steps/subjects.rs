//! A's and B's subjects around a commit: what A keeps once it released the
//! publishers' ones, A taking them back (the commit's undo, and the end of
//! the hand-over's freeze), and B's last sequence made A's before B takes
//! them (strategy mirror). Used by `commit` and `handover`.

use crate::engine::ctx::Ctx;
use crate::error::{Error, Result};
use cutover_core::plan::InPlaceHop;
use serde_json::json;

/// Strategy mirror keeps A's sequences, so B's last must be A's before B
/// takes the subjects: the next publish gets A's next sequence there, where
/// the moved durables (at F + 1) and the clients' own cursors (an ordered
/// consumer's, a KV revision) expect it.
///
/// A stream whose messages are all gone (purged, expired, a drained work
/// queue) still has a last sequence N; a mirror of it holds nothing and is
/// aligned to N only by the mirror consumer's setup, on its leader alone
/// (stream.go `setupMirrorConsumer`: `PurgeEx(Delivered.Stream+1)` when the
/// mirror is empty; not proposed to the replicas): promoted before that, or
/// led by another replica, it numbered new messages from 1 and a moved
/// durable at N + 1 skipped the first N of them. An empty B is purged up to
/// N + 1 (a replicated request; on an empty stream it sets first N + 1 and
/// last N). A B that holds messages but ends before A's last (A's newest
/// messages removed) cannot be moved on without a new message of A: the
/// commit is refused, A keeps its subjects.
pub(in crate::engine) async fn same_last(ctx: &Ctx<'_>, from: &str, to: &str) -> Result<()> {
    let (_, a) = ctx.js.stream_info(from).await?;
    let (_, b) = ctx.js.stream_info(to).await?;
    let n = a.state.last_seq;
    if b.state.last_seq == n {
        return Ok(());
    }
    if b.state.last_seq < n && b.state.messages == 0 && a.state.messages == 0 {
        ctx.js.stream_purge_below(to, None, n + 1).await?;
        let (_, b) = ctx.js.stream_info(to).await?;
        if b.state.last_seq == n {
            return Ok(());
        }
    }
    Err(Error::Stuck(format!(
        "{to} ends at sequence {}, {from} at {n} ({} messages: its newest were removed after {to} copied it); {to} keeps {from}'s sequences, so its next message must be {from}'s next: run again once {from} has stored a new message",
        b.state.last_seq, a.state.messages
    )))
}

/// The subjects A keeps once it released the publishers' ones: none, unless
/// the server would then give A its own name as subject (a stream without
/// subjects gets one) and B's subjects match that name: then a subject no
/// publisher uses.
pub fn released_subjects(from: &str, final_subjects: &[String]) -> Vec<String> {
    if final_subjects.iter().any(|s| cutover_core::subject::covers(s, from)) {
        vec![format!("_cutover.released.{from}")]
    } else {
        vec![]
    }
}

/// Undo of the commit window: A takes its subjects back, unless B holds them
/// (then the commit happened: `Ok(true)`).
///
/// B that cannot be read (on a cluster under load, a memory B of an R3
/// bucket answered "knows no leader" in a hand-over's freeze, and A was
/// left without its subjects: publishers had no stream) does not stop A's
/// taking them back: the server refuses two streams the same subjects
/// (10065), so A gets them only if B does not hold them; that refusal is
/// then reported.
pub(in crate::engine) async fn give_subjects_back(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    final_subjects: &[String],
) -> Result<bool> {
    match ctx.js.stream_info(to).await {
        Ok((_, b)) if !final_subjects.is_empty() && b.config.subjects == final_subjects => {
            return Ok(true)
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(
            "{to} could not be read ({e}): {from} takes its subjects back all the same"
        ),
    }
    let (a_subjects, plan) = {
        let j = ctx.journal.lock().await;
        (j.a_subjects.clone(), j.plan.clone())
    };
    let (a_raw, a) = ctx.js.stream_info(from).await?;
    // (An in-place hop 1 also turned A's direct get off: the mirror kept A's
    // setting, so the plan knows it.)
    let direct = match plan.in_place {
        Some(InPlaceHop::Out) => plan.b_config["allow_direct"].as_bool().unwrap_or(false),
        _ => a.config.allow_direct,
    };
    if a.config.subjects != a_subjects || a.config.allow_direct != direct {
        let mut cfg = a_raw["config"].clone();
        cfg["subjects"] = json!(a_subjects);
        cfg["allow_direct"] = json!(direct);
        ctx.js.stream_update(&cfg).await?;
    }
    Ok(false)
}

/// B's configuration when it takes A's subjects: `final_subjects`, its
/// mirror removed (2.12+: stream.go configUpdateCheckLocked allows dropping
/// it; updateWithAdvisory stops the mirror consumer) and what the plan keeps
/// for the commit (republish, and what a mirror may not have).
pub(in crate::engine) fn taking_subjects(
    b_raw: &serde_json::Value,
    final_subjects: &[String],
    promote_with: &serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    let mut cfg = b_raw["config"].clone();
    cfg["subjects"] = json!(final_subjects);
    if let Some(c) = cfg.as_object_mut() {
        c.remove("mirror");
        c.extend(promote_with.clone());
    }
    cfg
}
