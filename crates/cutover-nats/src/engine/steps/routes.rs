//! The route records (`route.<FROM>.<CONSUMER>`, docs/protocol.md) that
//! applications following a consumer read: moved, and fenced (fence mode).

use crate::engine::ctx::Ctx;
use crate::error::Result;
use crate::journal::now_ms;
use cutover_core::journal::{ConsumerProgress, Route, RouteState, ROUTE_VERSION};
use cutover_core::plan::Mode;

/// Writes moved consumer `c`'s route (state `moved`, at its journaled
/// checkpoint and start) and retires the route an earlier move left
/// pointing back.
pub(in crate::engine) async fn publish_moved_route(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    c: &ConsumerProgress,
) -> Result<()> {
    let (f, start) = (c.checkpoint.unwrap_or(0), c.b_start.unwrap_or(0));
    let (mode, keeps_name) = {
        let j = ctx.journal.lock().await;
        (j.plan.mode, j.plan.keeps_name_across)
    };
    let route = match mode {
        Mode::Drain => Route::moved(from, to, &c.name, &ctx.id, f, start),
        Mode::Fence | Mode::Rolling => {
            fenced_route(ctx, (from, to), &c.name, (f, start), RouteState::Moved).await
        }
    };
    ctx.hold_lease().await?;
    ctx.store.put_route(from, &c.name, &route).await?;
    if keeps_name {
        // Across systems under the same name: the first hop's route
        // (`route.<to>.<consumer>`, pointing at `from`) now names the durable
        // on the target side under the old name. Deleting it, as on one
        // system, would send its followers home: to the old system.
        ctx.hold_lease().await?;
        let here = Route::moved(from, to, &c.name, &ctx.id, f, start);
        return ctx.store.put_route(to, &c.name, &here).await;
    }
    retire_route_back(ctx, from, to, &c.name).await
}

/// A move back (B → A after A → B, as the second hop of an in-place
/// migration) makes the first move's route, `route.<to>.<consumer>` pointing
/// at `from`, obsolete once the durable is back on `to`: it is deleted, so
/// applications following it return to their own binding.
pub(in crate::engine) async fn retire_route_back(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    name: &str,
) -> Result<()> {
    if ctx.store.route(to, name).await?.is_some_and(|r| r.stream == from) {
        ctx.hold_lease().await?;
        ctx.store.delete_route(to, name).await?;
    }
    Ok(())
}

/// The route record of a fenced consumer in `state`.
pub(in crate::engine) async fn fenced_route(
    ctx: &Ctx<'_>,
    (from, to): (&str, &str),
    name: &str,
    (f, start): (u64, u64),
    state: RouteState,
) -> Route {
    let (ordered, mode, new_version) = {
        let j = ctx.journal.lock().await;
        let ordered = j.plan.consumers.iter().find(|c| c.name == name);
        let ordered = ordered.is_some_and(|c| c.b_config["max_ack_pending"].as_i64() == Some(1));
        (ordered, j.plan.mode, j.plan.new_version.clone())
    };
    Route {
        version: ROUTE_VERSION,
        stream: to.into(),
        consumer: name.into(),
        migration: ctx.id.clone(),
        checkpoint: f,
        start_seq: start,
        mode,
        state,
        old_stream: Some(from.into()),
        old_consumer: Some(name.into()),
        fence: Some(f),
        ordered,
        nak_delay_ms: ctx.opts.nak_delay.as_millis() as u64,
        ack_deadline_ms: Some(now_ms() + ctx.opts.fence_ack_timeout.as_millis() as u64),
        new_version,
        updated_ms: now_ms(),
    }
}
