//! In place: the applications' ordered consumers (KV and object store
//! watchers, ordered subscriptions) through the two hops.
//!
//! They are ephemeral push consumers on A, which hop 1 deletes to free A's
//! name: the server tells their deliver subjects nothing (consumer.go sends
//! `409 Consumer Deleted` only to pending pull requests), so each client
//! learns of the loss from missed heartbeats alone, which nats.js 3.x
//! checks every 30 s and acts on after two (a KV watcher was silent 82-85 s
//! after a bucket change; nats.go and nats-py 10-20 s). Hop 1 reads them
//! into its journal right before the delete ([`keep`]); hop 2, as soon as
//! A's new stream exists (its create step, while it still copies the
//! temporary stream), creates each again under its name and deliver subject
//! after what it had delivered ([`restore`]). Its first message has consumer
//! sequence 1, which every ordered client takes as a gap: it resets at once
//! onto A's new stream (the name it binds to), from its own cursor (nothing
//! missed, nothing repeated), and reads there what the copy brings. Hop 2's
//! retire deletes the ones their clients left ([`tidy`]).
//!
//! Why so early: from hop 1's commit the old stream gets no writes, and a
//! watcher reads none until it is on A's new stream; the temporary stream
//! and the new one keep a bucket's history per key (max_msgs_per_subject)
//! meanwhile, so a key written more often than that in the gap loses the
//! revisions in between for the watcher. Created at hop 2's retire (after
//! its hand-over and, on a cluster, a retry horizon: 12-13 s), a
//! newcomer's R3 nats.js watcher missed 330 revisions with history 10.

use crate::api::Action;
use crate::engine::ctx::Ctx;
use crate::engine::events::{EventKind, Info, Warning};
use crate::error::Result;
use cutover_core::journal::{migration_id, Step};
use cutover_core::watchers::{watcher, watcher_config, MAX_WATCHERS};

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

/// Hop 2, once A's new stream `to` exists (it still copies the temporary
/// stream `via`): hop 1's watchers created on it again. Its intent is
/// journaled first, and then it is never done again: a client that reset
/// off one already (its own consumer now, maybe on the same inbox) must
/// not get a second. One that cannot be created is named, not fatal: its
/// client resets by itself after its missed heartbeats.
pub(in crate::engine) async fn restore(ctx: &Ctx<'_>, to: &str, via: &str) -> Result<()> {
    if !ctx.journal.lock().await.watchers.is_empty() {
        return Ok(());
    }
    let Some(hop1) = ctx.store.load(&migration_id(to, via)).await? else {
        return Ok(());
    };
    if hop1.watchers.is_empty() {
        return Ok(());
    }
    ctx.journal.lock().await.watchers = hop1.watchers.clone();
    ctx.save().await?;
    let mut created = 0;
    for w in &hop1.watchers {
        match ctx.js.consumer_create(to, &w.name, &watcher_config(w), Action::Create).await {
            Ok(_) => created += 1,
            Err(e) => ctx.emit(
                Step::CreateB,
                EventKind::Warning(Warning::Skipped {
                    what: format!("the ordered consumer {} could not be created again on {to} ({e}): its client resets by itself, after its heartbeats are missed", w.name),
                }),
            ),
        }
    }
    ctx.emit(Step::CreateB, EventKind::Info(Info::WatchersRestored { stream: to.into(), created }));
    Ok(())
}

/// Hop 2's retire: of the watchers [`restore`] created on `stream`, those
/// their clients left are deleted (a client that reset onto a consumer of
/// its own leaves this one unbound; nats.js deletes it itself). One still
/// bound received nothing since (nothing written to its subjects): it goes
/// on with it and resets at the next message. Idempotent.
pub(in crate::engine) async fn tidy(ctx: &Ctx<'_>, stream: &str) -> Result<()> {
    let names: Vec<String> =
        ctx.journal.lock().await.watchers.iter().map(|w| w.name.clone()).collect();
    if names.is_empty() {
        return Ok(());
    }
    let (mut left, mut bound) = (0, 0);
    for name in &names {
        match ctx.js.consumer_info_opt(stream, name).await? {
            None => left += 1,
            Some((raw, _)) if raw["push_bound"].as_bool() != Some(true) => {
                ctx.js.consumer_delete(stream, name).await?;
                left += 1;
            }
            Some(_) => bound += 1,
        }
    }
    ctx.emit(
        Step::Retire,
        EventKind::Info(Info::WatchersLeft { stream: stream.into(), left, bound }),
    );
    Ok(())
}
