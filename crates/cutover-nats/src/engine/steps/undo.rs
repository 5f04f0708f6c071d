//! The compensating action of a consumer's move: the old durable given back
//! its state (running, or the operator's pause), and, after a failed run,
//! every consumer the run still holds.

use crate::engine::ctx::{can_pause, Ctx};
use crate::error::Result;
use cutover_core::journal::{ConsumerPhase, ConsumerProgress};

/// The compensating action of a consumer's move, for a consumer whose new
/// durable does not exist: journal it as waiting, then give the old durable
/// back its state (running, or the operator's pause), also when the journal
/// could not be written (its bucket's leader unreachable: a newcomer's trial
/// saw the consumer left paused for good by a run that said "every consumer
/// is as it was"). A checkpoint the journal may still hold is then stale,
/// and never trusted: it is used again only while the old consumer has
/// delivered nothing since it was taken ([`checkpoint_holds`]).
pub(in crate::engine) async fn undo_consumer(
    ctx: &Ctx<'_>,
    from: &str,
    name: &str,
    prior: &ConsumerProgress,
) -> Result<()> {
    let journaled = ctx
        .journal_consumer(name, |p| {
            p.phase = ConsumerPhase::Waiting;
            p.checkpoint = None;
            p.b_start = None;
        })
        .await;
    if can_pause(ctx.js) {
        ctx.js.consumer_pause(from, name, prior.paused_until.as_deref()).await?;
    }
    journaled
}

/// After a failed run: every consumer the journal calls waiting is given
/// back its state if this run still holds it paused (a compensation that
/// could not resume it, a drain dropped part way). Returns the ones the
/// server did not let go, for the message.
pub(in crate::engine) async fn still_held(ctx: &Ctx<'_>) -> Vec<String> {
    if !can_pause(ctx.js) {
        return vec![];
    }
    let (from, waiting) = {
        let j = ctx.journal.lock().await;
        let waiting: Vec<_> =
            j.consumers.iter().filter(|c| c.phase == ConsumerPhase::Waiting).cloned().collect();
        (j.from.clone(), waiting)
    };
    let mut held = vec![];
    for c in waiting {
        // Only a consumer the server shows held is given back (or named):
        // one it cannot show is not claimed either way.
        let back = match ctx.js.consumer_info_opt(&from, &c.name).await {
            Ok(Some((_, ci))) if ci.paused != c.was_paused => {
                ctx.js.consumer_pause(&from, &c.name, c.paused_until.as_deref()).await.is_ok()
            }
            _ => true,
        };
        if !back {
            held.push(c.name);
        }
    }
    held
}
