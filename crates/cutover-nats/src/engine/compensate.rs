//! A guard's run (`RunOptions::guard`, started by `super::guard`): what
//! compensates a runner that died holding something, instead of the steps.
//! The commit window is closed (A gets its subjects back, or B is found
//! holding them), and drain mode's consumers are given back or routed.

use super::ctx::Ctx;
use super::steps::commit::close_window;
use super::steps::routes::publish_moved_route;
use super::steps::undo::undo_consumer;
use crate::error::{Error, Result};
use cutover_core::journal::{ConsumerPhase, Phase};
use cutover_core::plan::Mode;

/// A guard's run: compensates what the dead runner left held, then stops
/// (with an error saying what it did, what state remains and the command
/// that continues or undoes it).
pub(in crate::engine) async fn drive(ctx: &Ctx<'_>) -> Result<()> {
    let (phase, mode, split) = {
        let j = ctx.journal.lock().await;
        let split = j.plan.external.as_ref().is_some_and(|e| e.split_publishers);
        (j.phase, j.plan.mode, split)
    };
    // (Split publishers release A after B holds the subjects: that window
    // is not marked, and its release is undone by the run itself.)
    if phase == Phase::SubjectsReleased && !split {
        return close_window(ctx).await;
    }
    if phase < Phase::ConsumersMoved && mode == Mode::Drain {
        return release_consumers(ctx).await;
    }
    Ok(())
}

/// Drain mode, runner dead while moving consumers: an old durable it paused
/// and whose new durable does not exist gets its state back (running, or
/// the operator's pause: the compensating action of a failed drain); one
/// whose new durable exists is journaled as moved and its route published,
/// so its applications follow it. Nothing is left paused.
async fn release_consumers(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, consumers) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone(), j.consumers.clone())
    };
    let (mut given_back, mut routed) = (vec![], vec![]);
    for c in consumers {
        let on_b = match c.phase {
            ConsumerPhase::Creating | ConsumerPhase::Created => {
                ctx.js.consumer_info_opt(&to, &c.name).await?.is_some()
            }
            _ => false,
        };
        match c.phase {
            ConsumerPhase::Waiting | ConsumerPhase::Settled | ConsumerPhase::Creating if !on_b => {
                let held = match ctx.js.consumer_info_opt(&from, &c.name).await? {
                    Some((_, ci)) => ci.paused != c.was_paused || c.phase != ConsumerPhase::Waiting,
                    None => false,
                };
                if held {
                    undo_consumer(ctx, &from, &c.name, &c).await?;
                    given_back.push(c.name);
                }
            }
            ConsumerPhase::Created if ctx.store.route(&from, &c.name).await?.is_some() => {}
            ConsumerPhase::Creating | ConsumerPhase::Created => {
                ctx.journal_consumer(&c.name, |p| p.phase = ConsumerPhase::Created).await?;
                publish_moved_route(ctx, &from, &to, &c).await?;
                routed.push(c.name);
            }
            _ => {}
        }
    }
    let mut did = vec![];
    if !given_back.is_empty() {
        did.push(format!(
            "gave back consumer(s) {} (not moved: running again on {from})",
            given_back.join(", ")
        ));
    }
    if !routed.is_empty() {
        did.push(format!(
            "published the route of consumer(s) {} (moved: their new durable on {to} serves)",
            routed.join(", ")
        ));
    }
    if did.is_empty() {
        return Ok(());
    }
    Err(Error::Stuck(format!(
        "its runner died while moving consumers; the guard {}",
        did.join(" and ")
    )))
}
