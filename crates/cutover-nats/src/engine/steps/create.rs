//! Step `create_b`: B, sourcing or mirroring A, created with the plan's
//! configuration (intent journaled first), or found as this run left it.

use crate::api::Js;
use crate::engine::ctx::Ctx;
use crate::engine::events::StepResult;
use crate::error::{Error, Result};
use cutover_core::journal::{Phase, Step};
use serde_json::json;

pub(in crate::engine) async fn create_b(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::CreateB).await?;
    let (to, from, b_config, journaled) = {
        let j = ctx.journal.lock().await;
        (j.to.clone(), j.from.clone(), j.plan.b_config.clone(), j.created_b)
    };
    let created = match ctx.js.stream_info_opt(&to).await? {
        Some((_, b)) => {
            let takes_a = b.config.sources.iter().any(|s| s.name == from)
                || b.config.mirror.as_ref().is_some_and(|m| m.name == from);
            if !takes_a {
                return Err(Error::Unsafe(format!("stream {to} exists but does not source {from}; it was changed since the plan was made")));
            }
            journaled
        }
        None => {
            // Intent first: a runner killed during the create leaves a journal
            // that says B is ours, so rollback deletes it if it exists.
            ctx.journal.lock().await.created_b = true;
            ctx.save().await?;
            let mut cfg = b_config.clone();
            // (A mirror checks no msg-id, so it needs no such start.)
            let window = cfg["duplicate_window"].as_i64().unwrap_or(0);
            if cfg.get("mirror").is_none()
                && dedup_off_while_sourcing(ctx.js)
                && history_older_than(ctx.js, &from, window).await?
            {
                // See raise_window: B starts without dedup and gets A's window
                // once it holds A's history older than that window. Without
                // such history B has the window from the start: set later,
                // what B copied before it would not be recorded (the model
                // checker found a retry after the commit stored twice).
                cfg["duplicate_window"] = json!(0);
            }
            ctx.js.stream_create(&cfg).await?;
            true
        }
    };
    ctx.done(Step::CreateB, t, Some(Phase::BReady), StepResult::CreateB { created }).await
}

/// Whether A holds messages stored more than `window_ns` ago (msg-ids it
/// may have stored again since, which B must not drop while it copies).
async fn history_older_than(js: &Js, from: &str, window_ns: i64) -> Result<bool> {
    let (_, a) = js.stream_info(from).await?;
    if a.state.messages == 0 || window_ns <= 0 {
        return Ok(false);
    }
    let first_recent = super::catch_up::first_within(js, &a, window_ns).await?;
    Ok(first_recent.is_none_or(|m| m.seq > a.state.first_seq))
}

/// From 2.14 a sourcing stream may have no duplicate window (dedup off:
/// stream.go applies the 2-minute default only to streams that neither mirror
/// nor source).
fn dedup_off_while_sourcing(js: &Js) -> bool {
    js.target_version().is_some_and(|v| v.features().sourcing_streams_get_no_default_dedup_window)
}
