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
    let (to, from, b_config, journaled, hop2) = {
        let j = ctx.journal.lock().await;
        let hop2 = j.plan.in_place == Some(cutover_core::plan::InPlaceHop::Back);
        (j.to.clone(), j.from.clone(), j.plan.b_config.clone(), j.created_b, hop2)
    };
    let created = match ctx.js.stream_info_opt(&to).await? {
        Some((_, b)) => {
            let takes_a = b.config.sources.iter().any(|s| s.name == from)
                || b.config.mirror.as_ref().is_some_and(|m| m.name == from);
            if !takes_a {
                return Err(Error::Unsafe(format!("stream {to} exists but does not source {from}; it was changed since the plan was made")));
            }
            repace(ctx, &from, &to).await?;
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
            pace(ctx, &from, &to, &mut cfg).await?;
            ctx.js.stream_create(&cfg).await?;
            true
        }
    };
    if hop2 {
        // In place: the watchers hop 1 kept, on A's new stream at once.
        super::watchers::restore(ctx, &to, &from).await?;
    }
    ctx.done(Step::CreateB, t, Some(Phase::BReady), StepResult::CreateB { created }).await
}

/// A mirror's copy, paced (issue 23): the server's own mirror consumer
/// (stream.go `setupMirrorConsumer`: ack none, flow control, a window of
/// `JsFlowControlMaxPending`, 32 MiB) queues on A's one outgoing queue
/// (consumer.go `outq: mset.outq`), which A's publish acks share
/// (`processJetStreamMsg`), and A's one `internalLoop` sends all of it
/// first: publishes to A waited 405–586 ms while a million messages were
/// copied (docs/benchmarks.md). From 2.14 a mirror may read A through a
/// durable named in its config (`mirror.consumer`) with ack policy
/// `flow_control`, whose `max_ack_pending` caps what is in flight
/// (`checkConsumerCfg` wants flow control, a 1 s heartbeat and no ack wait
/// or max deliver). Only for a limits stream on this system, a mirror of all
/// of it: on a work-queue or interest stream the durable's acks would count
/// as consumption (ADR-60). The durable is ours (`api::mirror_consumer_name`,
/// never moved as an application's) and deleted once B no longer mirrors A
/// (handover, retire) or with B (rollback); made anew here, so a
/// copy started again never inherits an old one's position.
async fn pace(ctx: &Ctx<'_>, from: &str, to: &str, cfg: &mut serde_json::Value) -> Result<()> {
    let window = ctx.opts.copy_window;
    let Some(m) = cfg.get("mirror").filter(|m| m.is_object()) else { return Ok(()) };
    let whole =
        ["filter_subject", "subject_transforms", "external", "opt_start_seq", "opt_start_time"]
            .iter()
            .all(|k| {
                m.get(*k).is_none_or(|v| {
                    v.is_null()
                        || v.as_array().is_some_and(|a| a.is_empty())
                        || v.as_str() == Some("")
                })
            });
    let can = ctx.js.target_version().is_some_and(|v| v.features().mirror_durable_consumer);
    // Not a replicated copy: a newcomer's R3 copies through the paced
    // durable of streams that remove messages while written (a KV bucket's
    // history, max_msgs_per_subject) broke 4 of 4 times on 2.15.1 (the
    // copy's followers logged "failed to apply delete range ... expected
    // sequence does not match store" and it had no leader from then on);
    // through the server's own mirror consumer, 3 of 3 were exact. On R3
    // the pacing did not keep publishes under 100 ms anyway
    // (docs/benchmarks.md).
    let replicated = cfg["num_replicas"].as_i64().unwrap_or(1) > 1;
    if window == 0 || !whole || !can || replicated {
        return Ok(());
    }
    let (a_raw, _) = ctx.js.stream_info(from).await?;
    if a_raw["config"]["retention"].as_str().unwrap_or("limits") != "limits" {
        return Ok(());
    }
    // A's consumer limits would be the durable's too (consumer.go
    // setConsumerConfigDefaults): an inactive_threshold deletes it while B
    // is away (a leader election), and the mirror then waits for it for
    // good; the server's own consumer is made again by the mirror.
    let limits = &a_raw["config"]["consumer_limits"];
    if limits.as_object().is_some_and(|l| l.values().any(|v| v.as_i64().unwrap_or(0) != 0)) {
        return Ok(());
    }
    let name = crate::api::mirror_consumer_name(to);
    // Intent first: retire and rollback delete what it names.
    ctx.journal.lock().await.paced_by = Some(name.clone());
    ctx.save().await?;
    let c = paced(from, to, window, None);
    let made: Result<()> = async {
        ctx.js.consumer_delete(from, &name).await?;
        ctx.js.consumer_create(from, &name, &c, crate::api::Action::Create).await?;
        Ok(())
    }
    .await;
    match made {
        Ok(()) => {
            cfg["mirror"]["consumer"] =
                json!({"name": name, "deliver_subject": c["deliver_subject"]})
        }
        // Not granted (docs/permissions.md), or A's account at its consumer
        // limit: the copy is made as the server makes it.
        Err(e) => {
            tracing::warn!("{from}: the paced copy's durable {name} could not be made ({e}); {to} copies through the server's own mirror consumer");
            // Not made, or not ours to see (not granted): nothing to delete.
            if !matches!(ctx.js.consumer_info_opt(from, &name).await, Ok(Some(_))) {
                ctx.journal.lock().await.paced_by = None;
                ctx.save().await?;
            }
        }
    }
    Ok(())
}

/// The paced copy's durable on `from` for copy `to`, delivering from
/// `start` (all without).
fn paced(from: &str, to: &str, window: u64, start: Option<u64>) -> serde_json::Value {
    let name = crate::api::mirror_consumer_name(to);
    let mut c = json!({
        "name": name, "durable_name": name, "deliver_subject": format!("_CUTOVER.MIRROR.{to}"),
        "deliver_policy": "all", "ack_policy": "flow_control", "flow_control": true,
        "idle_heartbeat": 1_000_000_000u64, "max_ack_pending": window,
        "description": format!("nats-cutover: the copy {to} reads {from} through it (paced); deleted with the copy's mirror"),
    });
    if let Some(s) = start {
        c["deliver_policy"] = json!("by_start_sequence");
        c["opt_start_seq"] = json!(s);
    }
    c
}

/// A resumed run whose B reads A through the paced durable: if the durable
/// is gone (an operator, a limit), B's mirror would wait for it for good
/// (stream.go: it asks the named consumer for a reset, and nothing
/// answers): it is made again from B's next sequence.
async fn repace(ctx: &Ctx<'_>, from: &str, to: &str) -> Result<()> {
    let (b_raw, b) = ctx.js.stream_info(to).await?;
    let m = &b_raw["config"]["mirror"];
    let name = crate::api::mirror_consumer_name(to);
    if m["consumer"]["name"].as_str() != Some(name.as_str()) {
        return Ok(());
    }
    if ctx.js.consumer_info_opt(from, &name).await?.is_some() {
        return Ok(());
    }
    paced_from(ctx, (from, to), &name, b.state.last_seq + 1).await
}

/// The paced durable `name` made on A for B from sequence `next` (B's next),
/// with the run's copy window (the default where the run asked for none: B
/// names the durable already).
async fn paced_from(ctx: &Ctx<'_>, (from, to): (&str, &str), name: &str, next: u64) -> Result<()> {
    let window = if ctx.opts.copy_window > 0 {
        ctx.opts.copy_window
    } else {
        crate::engine::ctx::DEFAULT_COPY_WINDOW
    };
    let c = paced(from, to, window, Some(next));
    ctx.js.consumer_create(from, name, &c, crate::api::Action::Create).await?;
    Ok(())
}

/// A copy reading A through the paced durable that copies nothing more: the
/// durable made again from B's next sequence (deleted first where it is
/// there); returns that sequence, or `None` where B is not paced (by this
/// run: `paced_by`). The durable is this run's own and B's mirror asks it
/// for B's next sequence, so nothing is copied twice or skipped.
pub(in crate::engine) async fn repace_stalled(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
) -> Result<Option<u64>> {
    let Some(name) = ctx.journal.lock().await.paced_by.clone() else { return Ok(None) };
    let (b_raw, b) = ctx.js.stream_info(to).await?;
    if b_raw["config"]["mirror"]["consumer"]["name"].as_str() != Some(name.as_str()) {
        return Ok(None);
    }
    if ctx.js.consumer_info_opt(from, &name).await?.is_some() {
        ctx.js.consumer_delete(from, &name).await?;
    }
    let next = b.state.last_seq + 1;
    paced_from(ctx, (from, to), &name, next).await?;
    Ok(Some(next))
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
