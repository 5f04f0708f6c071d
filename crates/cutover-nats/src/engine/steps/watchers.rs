//! In place: the applications' ordered consumers (KV and object store
//! watchers, ordered subscriptions) through the two hops.
//!
//! They are ephemeral push consumers on A, which hop 1 deletes to free A's
//! name: the server tells their deliver subjects nothing (consumer.go sends
//! `409 Consumer Deleted` only to pending pull requests), so each client
//! learns of the loss from missed heartbeats alone, which nats.js 3.x
//! checks every 30 s and acts on after two (a KV watcher was silent 82-85 s
//! after a bucket change; nats.go and nats-py 10-20 s). Hop 1 reads them
//! into its journal right before the delete ([`keep`]); hop 2, once A's new
//! stream holds the subjects, creates each again under its name and deliver
//! subject after what it had delivered ([`restore`]). Its first message has
//! consumer sequence 1, which every ordered client takes as a gap: it
//! resets at once onto A, from its own cursor (nothing missed, nothing
//! repeated), and the one it leaves is deleted.

use crate::api::Action;
use crate::engine::ctx::Ctx;
use crate::engine::events::{EventKind, Info, Warning};
use crate::error::Result;
use cutover_core::api_error::ApiErrorCode;
use cutover_core::journal::{migration_id, Step};
use cutover_core::watchers::{watcher, watcher_config, MAX_WATCHERS};
use std::time::{Duration, Instant};

/// How long [`restore`] waits for the clients to leave the consumers it
/// created (each resets at its first message, or at its first heartbeat
/// for nats.go and nats-py, whose ordered consumers beat every 5 s): one
/// still bound then keeps it (it had received nothing, or nothing was
/// written since) and resets at the next message.
const LEAVE_WAIT: Duration = Duration::from_secs(10);

/// Hop 1, right before A is deleted: its ephemeral push consumers, into the
/// journal (the delete is not undone, so they are saved first).
pub(in crate::engine) async fn keep(ctx: &Ctx<'_>, stream: &str) -> Result<()> {
    let mut found: Vec<_> =
        ctx.js.consumer_infos(stream).await?.iter().filter_map(watcher).collect();
    found.truncate(MAX_WATCHERS);
    if found.is_empty() {
        return Ok(());
    }
    let count = found.len();
    ctx.journal.lock().await.watchers = found;
    ctx.save().await?;
    ctx.emit(Step::Retire, EventKind::Info(Info::WatchersKept { stream: stream.into(), count }));
    Ok(())
}

/// Hop 2, once `stream` (A's new stream) holds the subjects: hop 1's
/// watchers created on it again, then those their clients left deleted.
/// Idempotent (a resumed retire finds them created); a consumer that
/// cannot be created is named, not fatal: its client resets by itself.
pub(in crate::engine) async fn restore(ctx: &Ctx<'_>, stream: &str, via: &str) -> Result<()> {
    let Some(hop1) = ctx.store.load(&migration_id(stream, via)).await? else {
        return Ok(());
    };
    if hop1.watchers.is_empty() {
        return Ok(());
    }
    let mut created = vec![];
    for w in &hop1.watchers {
        match ctx.js.consumer_create(stream, &w.name, &watcher_config(w), Action::Create).await {
            Ok(_) => created.push(w.name.clone()),
            Err(e)
                if matches!(e.api_code(), Some(c) if c == ApiErrorCode::CONSUMER_ALREADY_EXISTS
                    || c == ApiErrorCode::CONSUMER_NAME_EXISTS) =>
            {
                created.push(w.name.clone())
            }
            Err(e) => ctx.emit(
                Step::Retire,
                EventKind::Warning(Warning::Skipped {
                    what: format!("the ordered consumer {} could not be created again on {stream} ({e}): its client resets by itself, after its heartbeats are missed", w.name),
                }),
            ),
        }
    }
    let total = created.len();
    let deadline = Instant::now() + LEAVE_WAIT;
    let mut left = 0;
    while !created.is_empty() {
        let mut bound = vec![];
        for name in created {
            match ctx.js.consumer_info_opt(stream, &name).await? {
                // Its client deleted it itself (nats.js: the same name).
                None => left += 1,
                Some((raw, _)) if raw["push_bound"].as_bool() != Some(true) => {
                    // Its client reset onto a consumer of its own.
                    ctx.js.consumer_delete(stream, &name).await?;
                    left += 1;
                }
                Some(_) => bound.push(name),
            }
        }
        created = bound;
        if created.is_empty() || Instant::now() >= deadline {
            break;
        }
        ctx.tick(false).await?;
        tokio::time::sleep(ctx.opts.poll).await;
    }
    let info = Info::WatchersRestored { stream: stream.into(), created: total, reset: left };
    ctx.emit(Step::Retire, EventKind::Info(info));
    Ok(())
}
