//! A pull-consumer loop that follows the application protocol
//! (docs/protocol.md): the route record of version 2, in drain and in fence
//! mode, with its instance registered.
//!
//! Two slots fetch concurrently: the *old* one (the home binding, or the
//! route's old consumer while fenced) and the *new* one (the route's
//! consumer). A slot changes its binding only between batches, so messages
//! in hand are never dropped. Every message of the old consumer is checked
//! against the fence just before it is handled, and against the fence in
//! force when its batch was fetched (a rollback may delete the route while
//! the batch is in hand: docs/protocol.md R14): above either, it is nak'd
//! with the record's delay and never handed to the handler. The fence is
//! acknowledged in the registration as soon as the record is read, before
//! any further message is handled. Acks are double acks.
//!
//! Before a message is acted on (handled, acknowledged or nak'd) the
//! registration's lease is confirmed (R15): an instance the runner may have
//! counted dead meanwhile (stopped or cut off for its ttl) drops every
//! message it fetched before, reads the route again and fetches anew.

use crate::follow::{Binding, RouteWatch};
use crate::instance::{InstanceOptions, Registration};
use crate::worker::Outcome;
use async_nats::jetstream::{self, consumer::pull, consumer::PullConsumer, AckKind};
use cutover_core::journal::{FenceAck, Route, RouteState};
use cutover_core::plan::Mode;
use futures::StreamExt;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct FenceOptions {
    pub batch: usize,
    /// Pull request expiry (the old consumer's is at most 1 s: it is paused
    /// while fenced, and a request to it waits until it expires).
    pub expires: Duration,
    pub instance: InstanceOptions,
}

impl FenceOptions {
    pub fn new(instance: InstanceOptions) -> Self {
        Self { batch: 32, expires: Duration::from_millis(500), instance }
    }
}

/// What a finished loop did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consumed {
    /// Messages handled and acknowledged (confirmed by the server).
    pub acked: u64,
    /// Old-consumer messages above the fence nak'd without being handled.
    pub fenced_off: u64,
    /// Times the registration's lease lapsed and the messages in hand were
    /// dropped (R15).
    pub dropped_lapsed: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Old,
    New,
}

/// One of the two concurrent fetches.
struct Slot {
    role: Role,
    binding: Option<Binding>,
    consumer: Option<(Binding, PullConsumer)>,
    batch: Option<pull::Batch>,
    /// The old slot: the fence (and its nak delay) in force when the batch
    /// in hand was fetched.
    fetched_under: Option<Fence>,
    /// The registration's lease epoch when the batch in hand was fetched.
    epoch: u64,
    failed_at: Option<Instant>,
}

impl Slot {
    fn new(role: Role) -> Self {
        Self {
            role,
            binding: None,
            consumer: None,
            batch: None,
            fetched_under: None,
            epoch: 0,
            failed_at: None,
        }
    }
}

/// A fence an old message is held to: F and the nak delay of its record.
#[derive(Clone, Copy)]
struct Fence {
    f: u64,
    delay: Duration,
}

impl Fence {
    fn of(route: &Option<Route>) -> Option<Fence> {
        let (f, r) = (fence_of(route)?, route.as_ref()?);
        Some(Fence { f: f.fence, delay: Duration::from_millis(r.nak_delay_ms.max(1000)) })
    }
}

/// Where the old and the new slot of an instance of application `version`
/// fetch from under `route`. Mode rolling: an instance of another version
/// than the route's `new_version` stays on the old consumer (up to the fence)
/// until it is replaced.
fn targets(
    route: &Option<Route>,
    home: &Binding,
    version: &str,
) -> (Option<Binding>, Option<Binding>) {
    let Some(r) = route else { return (Some(home.clone()), None) };
    let new = Binding { stream: r.stream.clone(), consumer: r.consumer.clone(), routed: true };
    let old = Binding {
        stream: r.old_stream.clone().unwrap_or_else(|| home.stream.clone()),
        consumer: r.old_consumer.clone().unwrap_or_else(|| home.consumer.clone()),
        routed: false,
    };
    if r.mode == Mode::Rolling && r.new_version.as_deref() != Some(version) {
        return (Some(old), None);
    }
    if r.mode == Mode::Drain || r.state == RouteState::Moved {
        return (None, Some(new));
    }
    let old = (r.state == RouteState::Fenced).then_some(old);
    let new = (!r.ordered || r.state >= RouteState::Settled).then_some(new);
    (old, new)
}

/// The fence the old consumer's messages are held to, if any.
fn fence_of(route: &Option<Route>) -> Option<FenceAck> {
    let r = route.as_ref().filter(|r| r.mode.is_fenced())?;
    Some(FenceAck { migration: r.migration.clone(), fence: r.fence? })
}

/// Consumes `stream`/`consumer` (its home binding) following the protocol
/// until `shutdown` turns true or the handler returns [`Outcome::Die`] (then
/// the registration is left to expire, as a crashed instance's).
pub async fn consume<F, Fut>(
    client: async_nats::Client,
    stream: &str,
    consumer: &str,
    opts: FenceOptions,
    mut shutdown: watch::Receiver<bool>,
    mut handler: F,
) -> Result<Consumed, async_nats::Error>
where
    F: FnMut(jetstream::Message) -> Fut,
    Fut: Future<Output = (Outcome, jetstream::Message)>,
{
    let ctx = jetstream::new(client.clone());
    let reg = Registration::start(client.clone(), stream, consumer, &opts.instance).await?;
    let watch = RouteWatch::start(client, stream, consumer).await?;
    let mut routes = watch.subscribe();
    let home = Binding::home(stream, consumer);
    let mut l = Loop { ctx, opts, reg, home, slots: [Slot::new(Role::Old), Slot::new(Role::New)] };
    let mut route = routes.borrow_and_update().clone();
    let (mut done, mut open) = (Consumed::default(), true);
    // The lease's epoch the route was last read under, and whether a
    // message was dropped for a lapse since.
    let (mut seen, mut dropped) = (l.reg.epoch().await, false);
    while !*shutdown.borrow() {
        let epoch = l.reg.epoch().await;
        if epoch != seen {
            // R15: the runner may have gone on without this instance. What
            // it fetched before is dropped unanswered (redelivered after
            // ack_wait, or forgotten by a reset), and the route read again
            // from the bucket's leader before anything is fetched (its watch
            // may still be delivering what was written meanwhile).
            let held = dropped || l.slots.iter().any(|s| s.batch.is_some());
            for s in &mut l.slots {
                (s.batch, s.fetched_under) = (None, None);
            }
            if held {
                done.dropped_lapsed += 1;
                tracing::warn!(
                    "instance {}: its registration lapsed (stopped or cut off for its ttl): dropped the messages in hand",
                    l.opts.instance.id
                );
            }
            route = loop {
                match watch.reread().await {
                    Ok(r) => break r,
                    Err(e) => {
                        tracing::warn!("reading the route again: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            routes.borrow_and_update();
            (seen, dropped) = (epoch, false);
        }
        l.acknowledge(&route).await?;
        l.refill(&route, seen).await?;
        let [old, new] = &mut l.slots;
        let idle = old.batch.is_none() && new.batch.is_none();
        tokio::select! {
            m = next(&mut old.batch) => match m {
                Some(m) => {
                    let fences = [Fence::of(&route), old.fetched_under];
                    if l.reg.epoch().await != old.epoch {
                        dropped = true; // and the rest, at the top
                    } else if !handle(Role::Old, m, fences, &mut handler, &mut done).await {
                        return Ok(done); // died holding it
                    }
                }
                None => old.batch = None,
            },
            m = next(&mut new.batch) => match m {
                Some(m) => {
                    if l.reg.epoch().await != new.epoch {
                        dropped = true;
                    } else if !handle(Role::New, m, [None, None], &mut handler, &mut done).await {
                        return Ok(done);
                    }
                }
                None => new.batch = None,
            },
            _ = routes.changed() => route = routes.borrow_and_update().clone(),
            // A dropped sender: nobody can ask to stop any more.
            res = shutdown.changed(), if open => open = res.is_ok(),
            _ = tokio::time::sleep(Duration::from_millis(20)), if idle => {}
        }
    }
    l.reg.stop().await?;
    Ok(done)
}

/// The next message of a slot's batch; pending forever without one.
async fn next(batch: &mut Option<pull::Batch>) -> Option<jetstream::Message> {
    match batch {
        Some(b) => match b.next().await {
            Some(Ok(m)) => Some(m),
            _ => None,
        },
        None => std::future::pending().await,
    }
}

struct Loop {
    ctx: jetstream::Context,
    opts: FenceOptions,
    reg: Registration,
    home: Binding,
    slots: [Slot; 2],
}

impl Loop {
    /// Acknowledges the route's fence, once: from here on every old message
    /// is checked against it (the caller handles messages only after this).
    async fn acknowledge(&self, route: &Option<Route>) -> Result<(), async_nats::Error> {
        let Some(f) = fence_of(route) else { return Ok(()) };
        if self.reg.fence_ack().await.as_ref() != Some(&f) {
            self.reg.update(|r| r.fence_ack = Some(f)).await?;
        }
        Ok(())
    }

    /// Rebinds each slot without a batch in hand to its target and starts a
    /// fetch; updates the registration when the bindings change.
    /// `seen`: the lease's epoch `route` was read under; under another, no
    /// fetch goes out (the loop reads the route again first).
    async fn refill(&mut self, route: &Option<Route>, seen: u64) -> Result<(), async_nats::Error> {
        let (old, new) = targets(route, &self.home, &self.opts.instance.app_version);
        let before: Vec<Option<Binding>> = self.slots.iter().map(|s| s.binding.clone()).collect();
        for (i, want) in [old, new].into_iter().enumerate() {
            let expires = match self.slots[i].role {
                Role::Old => self.opts.expires.min(Duration::from_secs(1)),
                Role::New => self.opts.expires,
            };
            let slot = &mut self.slots[i];
            if slot.batch.is_some() {
                continue;
            }
            slot.binding = want;
            if slot.failed_at.is_some_and(|t| t.elapsed() < Duration::from_millis(20)) {
                continue;
            }
            // The epoch first: a lapse found after the request went out
            // drops what it brings; one found now, before it, goes back to
            // the loop's top, which reads the route again.
            slot.epoch = self.reg.epoch().await;
            if slot.epoch != seen {
                return Ok(());
            }
            slot.batch = fetch(&self.ctx, slot, self.opts.batch, expires).await;
            slot.failed_at = slot.batch.is_none().then(Instant::now);
            // Read before the pull request went out: what it brings is held
            // to this fence even if the route is gone when it is handled.
            slot.fetched_under = Fence::of(route).filter(|_| slot.role == Role::Old);
        }
        let after: Vec<Option<Binding>> = self.slots.iter().map(|s| s.binding.clone()).collect();
        if before != after {
            let bound = after.iter().flatten().map(|b| format!("{}/{}", b.stream, b.consumer));
            let bound: Vec<String> = bound.collect();
            self.reg.update(|r| r.bound = bound).await?;
        }
        Ok(())
    }
}

/// A pull request on the slot's binding (`None`: no binding, or the consumer
/// cannot be reached now).
async fn fetch(
    ctx: &jetstream::Context,
    slot: &mut Slot,
    batch: usize,
    expires: Duration,
) -> Option<pull::Batch> {
    let b = slot.binding.clone()?;
    if slot.consumer.as_ref().is_none_or(|(cb, _)| *cb != b) {
        let c = ctx.get_stream(&b.stream).await.ok()?.get_consumer(&b.consumer).await.ok()?;
        slot.consumer = Some((b, c));
    }
    let (_, c) = slot.consumer.as_ref()?;
    match c.fetch().max_messages(batch).expires(expires).messages().await {
        Ok(batch) => Some(batch),
        Err(_) => {
            slot.consumer = None;
            None
        }
    }
}

/// The fence an old message at `seq` is above (and so nak'd with its
/// delay), of the route's now and the one its batch was fetched under.
fn above(seq: u64, fences: [Option<Fence>; 2]) -> Option<Fence> {
    fences.into_iter().flatten().find(|f| seq > f.f)
}

/// One message: from the old consumer above a fence (the route's now, or
/// the one its batch was fetched under), nak'd with the record's delay and
/// not handled; else handled and settled. False when the handler died
/// holding it.
async fn handle<F, Fut>(
    role: Role,
    m: jetstream::Message,
    fences: [Option<Fence>; 2],
    handler: &mut F,
    done: &mut Consumed,
) -> bool
where
    F: FnMut(jetstream::Message) -> Fut,
    Fut: Future<Output = (Outcome, jetstream::Message)>,
{
    if role == Role::Old {
        let seq = m.info().map(|i| i.stream_sequence).unwrap_or(0);
        if let Some(f) = above(seq, fences) {
            let _ = m.ack_with(AckKind::Nak(Some(f.delay))).await;
            done.fenced_off += 1;
            return true;
        }
    }
    let (outcome, m) = handler(m).await;
    match outcome {
        Outcome::Ack => {
            // A double ack, asked again on failure: the runner reads the ack
            // floor, and a lost ack would mean a redelivery.
            if crate::worker::double_ack(&m).await {
                done.acked += 1;
            }
        }
        Outcome::Nak => {
            let _ = m.ack_with(AckKind::Nak(None)).await;
        }
        Outcome::NakAfter(d) => {
            let _ = m.ack_with(AckKind::Nak(Some(d))).await;
        }
        Outcome::Die => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fenced(state: RouteState, ordered: bool) -> Option<Route> {
        let mut r = Route::moved("A", "B", "c", "A.B", 10, 11);
        r.mode = Mode::Fence;
        r.state = state;
        r.fence = Some(10);
        r.ordered = ordered;
        Some(r)
    }

    /// R14: a message fetched under the fence stays held to it when the
    /// route is gone (a rollback) by the time it is handled.
    #[test]
    fn a_message_fetched_under_the_fence_stays_held_to_it() {
        let under = Fence::of(&fenced(RouteState::Fenced, false));
        assert_eq!(under.map(|f| f.f), Some(10));
        let gone: Option<Route> = None;
        assert!(
            above(11, [Fence::of(&gone), under]).is_some(),
            "nak'd: above the fence it was fetched under"
        );
        assert!(above(10, [Fence::of(&gone), under]).is_none(), "at F: processed");
        assert!(
            above(11, [Fence::of(&gone), None]).is_none(),
            "fetched after the rollback: processed"
        );
        assert!(above(11, [under, None]).is_some(), "the fence now");
    }

    #[test]
    fn the_slots_follow_the_states() {
        let home = Binding::home("A", "c");
        let b = Binding { stream: "B".into(), consumer: "c".into(), routed: true };
        let t = |r: &Option<Route>| targets(r, &home, "1");
        assert_eq!(t(&None), (Some(home.clone()), None));
        let both = (Some(home.clone()), Some(b.clone()));
        assert_eq!(t(&fenced(RouteState::Fenced, false)), both);
        assert_eq!(t(&fenced(RouteState::Fenced, true)), (Some(home.clone()), None));
        assert_eq!(t(&fenced(RouteState::Settled, true)), (None, Some(b.clone())));
        assert_eq!(t(&fenced(RouteState::Moved, false)), (None, Some(b.clone())));
        let drain = Some(Route::moved("A", "B", "c", "A.B", 10, 11));
        assert_eq!(t(&drain), (None, Some(b.clone())));
        // Rolling to version 2: version 1 stays on the old consumer in every
        // state; version 2 moves as in fence mode.
        let mut rolling = fenced(RouteState::Moved, false);
        rolling.as_mut().unwrap().mode = Mode::Rolling;
        rolling.as_mut().unwrap().new_version = Some("2".into());
        assert_eq!(t(&rolling), (Some(home.clone()), None));
        assert_eq!(targets(&rolling, &home, "2"), (None, Some(b)));
        assert!(fence_of(&rolling).is_some(), "version 1 keeps the fence rule");
        assert_eq!(fence_of(&drain), None);
        let f = fence_of(&fenced(RouteState::Moved, false)).unwrap();
        assert_eq!((f.migration.as_str(), f.fence), ("A.B", 10));
    }
}
