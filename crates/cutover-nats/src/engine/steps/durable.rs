//! The new durable on B: created right after the translated checkpoint
//! (intent journaled first, an existing one accepted only if it is ours),
//! and the evidence that lets a resumed run trust a journaled checkpoint.

use super::translate::translate;
use super::undo::undo_consumer;
use crate::api::Action;
use crate::engine::ctx::{can_pause, Ctx, FOREVER};
use crate::error::{Error, Result};
use cutover_core::journal::{ConsumerPhase, ConsumerProgress, Settled};
use cutover_core::model::ConsumerInfo;
use cutover_core::plan::ConsumerPlan;
use serde_json::{json, Value};

/// Translates checkpoint `f` (while `alongside` runs: fence mode pauses the
/// old consumer for good meanwhile) and creates the new durable there
/// (journaled); returns its start and the gets the translation used. A
/// failure gives the old durable back its state first (unless the server
/// cannot say whether the new one exists: then it stays paused).
pub(in crate::engine) async fn position(
    ctx: &Ctx<'_>,
    cp: &ConsumerPlan,
    (from, to): (&str, &str),
    f: u64,
    prior: &ConsumerProgress,
    alongside: impl std::future::Future<Output = Result<()>>,
) -> Result<(u64, u32)> {
    let name = cp.name.as_str();
    let (translated, done) = tokio::join!(translate(ctx, from, to, f), alongside);
    let (start, gets) = match translated.and_then(|x| done.map(|_| x)) {
        Ok(x) => x,
        Err(e) => {
            let _ = undo_consumer(ctx, from, name, prior).await;
            return Err(e);
        }
    };
    if let Err(e) = super::recheck::b_holds_from(ctx, (from, to), start).await {
        let _ = undo_consumer(ctx, from, name, prior).await;
        return Err(e);
    }
    let mut cfg = cp.b_config.clone();
    let work_queue = cfg["deliver_policy"] == "all";
    if work_queue {
        // A work-queue B (the plan allows it only as a mirror): the durable
        // delivers all, so B's copies below its start on its filters go first;
        // the old durable processed them (nothing was ack-pending at F).
        // Purging again on resume removes nothing more; once the durable
        // exists (a resume past the intent to create it) the purge, which
        // comes first, is done and must not be tried again: its failure
        // (someone gave B deny_purge since) would give the old durable back
        // beside the new one.
        let made = if prior.phase >= ConsumerPhase::Creating {
            match ctx.js.consumer_info_opt(to, name).await {
                Ok(c) => c.is_some(),
                Err(e) => return Err(Error::Stuck(format!("reading consumer {to}/{name} failed ({e}): whether it exists decides what comes next; the old durable stays paused; run again to continue or roll back"))),
            }
        } else {
            false
        };
        if !made {
            if let Err(e) = purge_below(ctx, to, &cp.b_filters, start).await {
                let _ = undo_consumer(ctx, from, name, prior).await;
                return Err(e);
            }
        }
    } else {
        cfg["opt_start_seq"] = json!(start);
    }
    if let Some(until) = &prior.paused_until {
        // The operator paused it: it stays paused on B until the same time.
        cfg["pause_until"] = json!(until);
    }
    if let Err(e) = create_durable(ctx, to, name, &cfg, start).await {
        if matches!(e, Error::Stuck(_)) {
            return Err(e);
        }
        // Compensate: the new durable does not exist (create_durable checked),
        // so the old one takes over again as if nothing happened.
        undo_consumer(ctx, from, name, prior).await?;
        return Err(e);
    }
    Ok((start, gets))
}

/// Purges `stream` below `start` on each filter (all of it with none).
async fn purge_below(ctx: &Ctx<'_>, stream: &str, filters: &[String], start: u64) -> Result<()> {
    // Read again right before the purge: the plan keeps `deny_purge` off B
    // until the commit, but someone may have set it since (the purge would
    // fail with the server's bare refusal).
    let (_, b) = ctx.js.stream_info(stream).await?;
    if b.config.deny_purge {
        let id = ctx.id.clone();
        return Err(Error::Unsafe(format!(
            "stream {stream} was given deny_purge after the plan (by someone else: the run sets it only at the commit), and its copies below {start} must be purged before the durable that delivers all is created there; the consumer was given back, nothing of it moved; the server cannot take deny_purge back (error 10052), so undo with `nats-cutover rollback {id}` (it deletes {stream}) and run again"
        )));
    }
    if filters.is_empty() {
        ctx.js.stream_purge_below(stream, None, start).await?;
    }
    for f in filters {
        ctx.js.stream_purge_below(stream, Some(f), start).await?;
    }
    Ok(())
}

/// Whether a journaled checkpoint (F, with the consumer state it was taken
/// from) still holds for a resumed run: the old consumer, paused for good
/// again now, has delivered nothing since. A compensation that gave the
/// consumer back without journaling it ([`undo_consumer`]) leaves one that
/// does not: the consumer is then drained (or gated) again. Without consumer
/// pause (< 2.11) the drain never paused it: the journal is taken as it is.
pub(in crate::engine) async fn checkpoint_holds(
    ctx: &Ctx<'_>,
    from: &str,
    name: &str,
    prior: &ConsumerProgress,
) -> Result<bool> {
    if !can_pause(ctx.js) {
        return Ok(true);
    }
    if prior.evidence.is_none() {
        return Ok(false);
    }
    ctx.js.consumer_pause(from, name, Some(FOREVER)).await?;
    let (_, ci) = ctx.js.consumer_info(from, name).await?;
    Ok(prior.evidence_holds(ci.paused, ci.delivered.stream_seq))
}

/// Creates the new durable at `start`, journaling the intent first. A durable of
/// that name already on B is accepted only if it is ours (a runner died after
/// creating it): positioned at the journaled start. On error the durable does
/// not exist.
pub(in crate::engine) async fn create_durable(
    ctx: &Ctx<'_>,
    to: &str,
    name: &str,
    cfg: &Value,
    start: u64,
) -> Result<()> {
    ctx.journal_consumer(name, |p| {
        p.phase = ConsumerPhase::Creating;
        p.b_start = Some(start);
    })
    .await?;
    // Ours: positioned at the start, or on a work queue (delivers all; B is
    // created by this run, so no one else made a durable there).
    let ours =
        |c: &ConsumerInfo| c.config.opt_start_seq == Some(start) || cfg["deliver_policy"] == "all";
    if let Some((_, existing)) = ctx.js.consumer_info_opt(to, name).await? {
        if ours(&existing) {
            return Ok(());
        }
        return Err(Error::Unsafe(format!(
            "consumer {to}/{name} already exists but starts at {:?}, not at the checkpoint's {start}: it was not created by this run; delete it (nats consumer rm {to} {name}) and run again",
            existing.config.opt_start_seq
        )));
    }
    match ctx.js.consumer_create(to, name, cfg, Action::Create).await {
        Ok(_) => Ok(()),
        Err(e) => {
            // The request may have taken effect even though its answer was
            // lost (timeout): ask the server rather than assume.
            match ctx.js.consumer_info_opt(to, name).await {
                Ok(Some((_, c))) if ours(&c) => Ok(()),
                Ok(None) => Err(e),
                // Unknown: the old consumer must stay paused; resume decides.
                _ => Err(Error::Stuck(format!("creating consumer {to}/{name} failed ({e}) and the server could not say whether it exists; the old durable stays paused; run again to continue or roll back"))),
            }
        }
    }
}

/// The consumer state a checkpoint was taken from, as the journal keeps it.
pub(in crate::engine) fn settled_state(ci: &ConsumerInfo) -> Settled {
    Settled {
        delivered_stream_seq: ci.delivered.stream_seq,
        ack_floor_stream_seq: ci.ack_floor.stream_seq,
        num_ack_pending: ci.num_ack_pending,
        num_pending: ci.num_pending,
        paused: ci.paused,
    }
}
