//! Step `move_consumers`: every planned consumer moved to B, a bounded
//! number at once, each running to its end or its compensation; drain
//! mode's move of one consumer (fence mode's is `crate::engine::fence`).

use super::drain::checkpoint;
use super::durable::position;
use super::routes::{publish_moved_route, retire_route_back};
use crate::engine::ctx::{Ctx, Exposure};
use crate::engine::events::{EventKind, Progress, StepResult};
use crate::engine::fence;
use crate::error::Result;
use cutover_core::journal::{ConsumerPhase, ConsumerResume, Phase, Route, Step};
use cutover_core::plan::{ConsumerPlan, Mode};
use futures::StreamExt;
use std::time::Instant;

/// Drain mode holds consumers while it moves them ([`Exposure::Consumers`]):
/// every move runs to its end or its compensation before this returns, so
/// only a runner that dies inside leaves any held.
pub(in crate::engine) async fn move_consumers(ctx: &Ctx<'_>) -> Result<()> {
    let drain = ctx.journal.lock().await.plan.mode == Mode::Drain;
    if drain {
        ctx.exposed(Exposure::Consumers, true);
    }
    let moved = move_consumers_now(ctx).await;
    if drain {
        ctx.exposed(Exposure::Consumers, false);
    }
    moved
}

async fn move_consumers_now(ctx: &Ctx<'_>) -> Result<()> {
    let t = ctx.begin(Step::MoveConsumers).await?;
    let todo: Vec<ConsumerPlan> = {
        let j = ctx.journal.lock().await;
        j.plan
            .consumers
            .iter()
            .filter(|c| {
                j.consumers.iter().any(|p| p.name == c.name && p.resume() != ConsumerResume::Moved)
            })
            .cloned()
            .collect()
    };
    // Concurrently (a bounded number at once): each consumer drains on its
    // own; no timer stacks up. Every started move runs to its end (moved, or
    // compensated) before the first error is reported.
    let moves: Vec<_> = todo.iter().map(|c| move_consumer(ctx, c)).collect();
    let results: Vec<Result<()>> = futures::stream::iter(moves)
        .buffer_unordered(ctx.opts.consumers_at_once.max(1))
        .collect()
        .await;
    for r in results {
        r?;
    }
    // A runner killed between journaling a consumer as created and writing its
    // route leaves the route missing: write every moved consumer's route again.
    let (from, to, moved) = {
        let j = ctx.journal.lock().await;
        (
            j.from.clone(),
            j.to.clone(),
            j.consumers
                .iter()
                .filter(|c| c.phase >= ConsumerPhase::Created)
                .cloned()
                .collect::<Vec<_>>(),
        )
    };
    for c in moved {
        publish_moved_route(ctx, &from, &to, &c).await?;
    }
    ctx.done(
        Step::MoveConsumers,
        t,
        Some(Phase::ConsumersMoved),
        StepResult::MoveConsumers { moved: todo.len() },
    )
    .await
}

/// Pauses, settles and checkpoints one consumer, then creates it on B (fence
/// mode: see `crate::engine::fence`).
async fn move_consumer(ctx: &Ctx<'_>, cp: &ConsumerPlan) -> Result<()> {
    if ctx.journal.lock().await.plan.mode.is_fenced() {
        return fence::move_consumer(ctx, cp).await;
    }
    let (from, to, prior) = ctx.consumer_state(&cp.name).await;
    let prior = super::recheck::operator_pause(ctx, &from, prior).await?;
    let (f, held_since) = checkpoint(ctx, cp, &from, &prior).await?;
    let cp = &match super::recheck::consumer_as_planned(ctx, cp, &from, &prior).await {
        Ok(cp) => cp,
        Err(e) => {
            let _ = super::undo::undo_consumer(ctx, &from, &cp.name, &prior).await;
            return Err(e);
        }
    };
    let pos = position(ctx, cp, (&from, &to), f, &prior, async { Ok(()) }).await?;
    moved(ctx, &cp.name, &from, &to, f, pos, held_since).await
}

/// The new durable exists: journal it, publish its route, report the move
/// (its gap: from `held_since`, when the old consumer last stopped
/// delivering, to the route's publication).
async fn moved(
    ctx: &Ctx<'_>,
    name: &str,
    from: &str,
    to: &str,
    f: u64,
    (start, gets): (u64, u32),
    held_since: Instant,
) -> Result<()> {
    // The route first: the new durable exists, so the route may name it
    // before the journal does. Journaled first, a failed write of that
    // record left the old durable paused for good with no route to the new
    // one until `run --resume` (found by the model checker: docs/model.md,
    // finding 4); now such a failure leaves the applications on the new
    // durable, and a resume (journal `creating`: it asks the server, finds
    // the durable at the journaled start) journals it and writes the route
    // again.
    let route = Route::moved(from, to, name, &ctx.id, f, start);
    ctx.hold_lease().await?;
    ctx.store.put_route(from, name, &route).await?;
    retire_route_back(ctx, from, to, name).await?;
    ctx.journal_consumer(name, |p| {
        p.phase = ConsumerPhase::Created;
        p.b_start = Some(start);
        p.translate_gets = Some(gets);
    })
    .await?;
    // The pause that held lasts until the route is out: the longest pause
    // is at least the gap (a journal write that waited on its bucket kept
    // it paused after it settled: a newcomer saw 8 ms beside an 8 s gap).
    let gap_ms = held_since.elapsed().as_secs_f64() * 1000.0;
    let longest_pause_ms = ctx
        .journal
        .lock()
        .await
        .consumer_mut(name)
        .and_then(|c| c.longest_pause_ms)
        .map(|l| l.max(gap_ms as u64));
    let moved = Progress::Moved {
        checkpoint: f,
        b_start: start,
        translate_gets: gets,
        gap_ms,
        longest_pause_ms,
    };
    ctx.emit(Step::Consumer(name.into()), EventKind::Progress(moved));
    if let Some(h) = &ctx.opts.after_step {
        h(&format!("consumer_created:{name}"));
    }
    Ok(())
}
