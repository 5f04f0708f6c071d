//! The steps after the commit: A sealed, B's source of A removed, the old
//! durables looked at a last time and retired (deleted, or kept paused for
//! good), A deleted if asked.

use super::durable::settled_state;
use crate::engine::ctx::{can_pause, Ctx};
use crate::engine::events::{EventKind, StepResult, Warning};
use crate::error::Result;
use cutover_core::journal::{ConsumerPhase, Phase, Step};
use cutover_core::plan::{InPlaceHop, Mode};
use futures::{StreamExt, TryStreamExt};
use serde_json::{json, Value};

pub(in crate::engine) async fn seal_a(ctx: &Ctx<'_>) -> Result<()> {
    let from = ctx.journal.lock().await.from.clone();
    let t = ctx.begin(Step::SealA).await?;
    // A gone (a memory stream lost in a restart: commit::a_lost) has
    // nothing left to seal.
    let Some((raw, a)) = ctx.js.stream_info_opt(&from).await? else {
        return ctx.done(Step::SealA, t, Some(Phase::Sealed), StepResult::Sealed).await;
    };
    if !a.config.sealed {
        let mut cfg = raw["config"].clone();
        cfg["sealed"] = json!(true);
        if let Err(e) = ctx.js.stream_update(&cfg).await {
            // Sent again after its answer was lost (a server restart), the
            // update finds A sealed, which also denies deletes and purges,
            // and the same body would lift that: refused (10052). Whether
            // it took effect is the server's to say.
            if !ctx.js.stream_info(&from).await?.1.config.sealed {
                return Err(e);
            }
        }
    }
    ctx.done(Step::SealA, t, Some(Phase::Sealed), StepResult::Sealed).await
}

pub(in crate::engine) async fn remove_source(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone())
    };
    let t = ctx.begin(Step::RemoveSource).await?;
    // No catch-up wait here: B held every message of A before it took the
    // subjects (the commit window waits for that, with A's last sequence
    // stable over two reads, so a publish A had queued is stored and copied
    // first). (B's newest messages are direct publishes now, without a
    // source header, so a header-based probe would not even apply.)
    let (raw, b) = ctx.js.stream_info(&to).await?;
    if b.config.sources.iter().any(|s| s.name == from) {
        let mut cfg = raw["config"].clone();
        let rest: Vec<Value> = cfg["sources"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s["name"] != json!(from))
            .collect();
        if rest.is_empty() {
            cfg.as_object_mut().unwrap().remove("sources");
        } else {
            cfg["sources"] = json!(rest);
        }
        // The hand-over's mark goes with the source it describes.
        if let Some(m) = cfg["metadata"].as_object_mut() {
            m.remove(cutover_core::plan::HANDOVER_KEY);
        }
        ctx.js.stream_update(&cfg).await?;
    }
    ctx.done(Step::RemoveSource, t, Some(Phase::SourceRemoved), StepResult::SourceRemoved).await
}

/// Drain mode, before the old durables go: each one's state, journaled with
/// it (`retired_state`). Paused for good since its F was taken, it has
/// delivered nothing since; one that shows a delivery above F had its F read
/// short (fence mode saw that once, on a cluster, right after a consumer
/// leader change): warned here, and `verify` does not hold.
async fn last_look(ctx: &Ctx<'_>, from: &str, names: &[String]) -> Result<()> {
    let drain = {
        let j = ctx.journal.lock().await;
        j.plan.mode == Mode::Drain && j.plan.strategy != cutover_core::plan::Strategy::DualWrite
    };
    if !drain || !can_pause(ctx.js) {
        return Ok(());
    }
    let reads: Vec<_> = names.iter().map(|n| ctx.js.consumer_info_opt(from, n)).collect();
    let states: Vec<_> = futures::stream::iter(reads)
        .buffered(ctx.opts.consumers_at_once.max(1))
        .try_collect()
        .await?;
    let mut j = ctx.journal.lock().await;
    for (name, state) in names.iter().zip(states) {
        let Some((_, ci)) = state else { continue };
        let p = j.consumer_mut(name).expect("consumer in journal");
        let f = p.checkpoint.unwrap_or(u64::MAX);
        p.retired_state = Some(settled_state(&ci));
        if ci.delivered.stream_seq > f {
            let w = Warning::DeliveredAboveCheckpoint {
                checkpoint: f,
                delivered: ci.delivered.stream_seq,
            };
            ctx.emit(Step::Consumer(name.clone()), EventKind::Warning(w));
        }
    }
    Ok(())
}

pub(in crate::engine) async fn retire(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, names, delete_old, keep, in_place) = {
        let j = ctx.journal.lock().await;
        (
            j.from.clone(),
            j.to.clone(),
            j.consumers.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            j.delete_old,
            j.keep_old_consumers,
            j.plan.in_place,
        )
    };
    let t = ctx.begin(Step::Retire).await?;
    // Kept durables stay paused until year 9999 and A is sealed: they can never
    // deliver again, so applications still bound to them wait (no error) until
    // they are redeployed to the new stream.
    // A sealed A that is gone was deleted here by a runner that died after
    // it: its consumers went with it.
    let a_exists = ctx.js.stream_info_opt(&from).await?.is_some();
    if a_exists && delete_old {
        super::recheck::b_holds_all_of_a(ctx, &from, &to, in_place.is_some()).await?;
    }
    if a_exists {
        super::recheck::stranded(ctx, &from).await?;
        last_look(ctx, &from, &names).await?;
        // The paced copy's durable (steps::create), if B read A through one.
        if let Some(paced) = ctx.journal.lock().await.paced_by.clone() {
            ctx.js.consumer_delete(&from, &paced).await?;
        }
    }
    if !keep {
        // Deletes are idempotent (a resumed retire deletes again): sent
        // several at once, all journaled retired once all are done.
        if a_exists {
            let deletes: Vec<_> = names.iter().map(|n| ctx.js.consumer_delete(&from, n)).collect();
            futures::stream::iter(deletes)
                .buffer_unordered(ctx.opts.consumers_at_once.max(1))
                .try_collect::<Vec<()>>()
                .await?;
        }
        let mut j = ctx.journal.lock().await;
        for n in &names {
            j.consumer_mut(n).unwrap().phase = ConsumerPhase::Retired;
        }
    }
    if delete_old && a_exists {
        if in_place == Some(InPlaceHop::Out) {
            super::watchers::keep(ctx, &from).await?;
        }
        ctx.js.stream_delete(&from).await?;
    }
    if in_place == Some(InPlaceHop::Back) {
        super::watchers::tidy(ctx, &to).await?;
    }
    ctx.done(
        Step::Retire,
        t,
        Some(Phase::Done),
        StepResult::Retired { deleted_old_stream: delete_old, kept_old_consumers: keep },
    )
    .await
}
