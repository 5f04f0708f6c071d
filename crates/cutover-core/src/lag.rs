//! A consumer's health from a short history of its state, in the spirit of
//! Burrow's lag evaluation rules: judged over a sliding window of samples, never
//! from a single read, because a single read cannot tell "busy" from "stuck".
//!
//! `watch` reads consumer info every tick and keeps the last `window` samples;
//! [`status`] turns them into one of four statuses. The rules, checked in this
//! order on the samples since the consumer's `paused` flag last changed (pausing
//! or resuming starts a new regime, so a pause never inherits "no progress" from
//! before it):
//!
//! 1. **ok**: nothing awaits an ack, and either nothing is pending or the consumer
//!    is paused (a paused, settled consumer's position is stable: the checkpoint
//!    condition of [`crate::checkpoint`]).
//! 2. **stalled**: messages awaited an ack in every read of a full window and
//!    there was no ack progress: the ack floor did not move and no delivery was
//!    acknowledged (see [`acked_between`]). A worker holds them, or the consumer is at
//!    `max_ack_pending` and cannot deliver more; running, `ack_wait` expiry
//!    (redelivery) moves it on, paused nothing does (the reason says which,
//!    and that a resumed push consumer may wait for a new message).
//! 3. **stopped**: not paused, messages are pending, and across a full window
//!    nothing was delivered (`delivered.stream_seq` unchanged) while no pull
//!    request waits (`num_waiting == 0` in the latest read): no worker is pulling.
//!    Push consumers have no pull requests, so for them this reads "nothing
//!    delivered although messages are pending".
//! 4. **draining**: paused with messages still awaiting an ack (being worked
//!    off), or not paused with nothing left to deliver and the ack-pending count
//!    falling across the window.
//! 5. otherwise **ok**: deliveries or acks are moving.
//!
//! Until a regime holds a full window of samples, the no-progress rules (2, 3)
//! do not fire: absence of progress is only evidence over time.
//!
//! One case rule 1 gets wrong needs what these samples do not hold: a
//! consumer paused all window long while its pending grows is ok only while
//! a migration's runner holds it. [`held_while_growing`] says when to ask;
//! `watch` asks the lease and reports **stopped** when nobody holds it.
//!
//! Like Burrow, the rules use counters, not rates, and no clock: the window is a
//! number of samples, so the caller's tick interval sets its length in time.

use crate::model::ConsumerInfo;
use serde::{Deserialize, Serialize};

/// One read of a consumer, as far as the rules need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LagSample {
    pub num_pending: u64,
    pub num_ack_pending: u64,
    pub num_waiting: u64,
    pub delivered_stream_seq: u64,
    /// Counts every delivery, redeliveries included.
    pub delivered_consumer_seq: u64,
    pub ack_floor_stream_seq: u64,
    pub paused: bool,
    /// A push consumer (it has a deliver subject): what moves a held
    /// message on differs (the stalled rule's reason).
    #[serde(default)]
    pub push: bool,
}

impl From<&ConsumerInfo> for LagSample {
    fn from(c: &ConsumerInfo) -> Self {
        Self {
            num_pending: c.num_pending,
            num_ack_pending: c.num_ack_pending,
            num_waiting: c.num_waiting,
            delivered_stream_seq: c.delivered.stream_seq,
            delivered_consumer_seq: c.delivered.consumer_seq,
            ack_floor_stream_seq: c.ack_floor.stream_seq,
            paused: c.paused,
            push: c.config.is_push(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Draining,
    Stalled,
    Stopped,
}

impl Status {
    pub const ALL: [Status; 4] = [Status::Ok, Status::Draining, Status::Stalled, Status::Stopped];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Draining => "draining",
            Status::Stalled => "stalled",
            Status::Stopped => "stopped",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub status: Status,
    /// Why, in one sentence, for humans.
    pub reason: String,
}

/// Deliveries acknowledged (or terminated, or exhausted) between two reads:
/// every delivery raises `delivered.consumer_seq` and, unless it is a
/// redelivery, `num_ack_pending`; whatever the second did not keep was settled.
/// A redelivery counts as progress too, which it is: the held message moves on.
pub fn acked_between(a: &LagSample, b: &LagSample) -> u64 {
    let deliveries = b.delivered_consumer_seq.saturating_sub(a.delivered_consumer_seq);
    (a.num_ack_pending + deliveries).saturating_sub(b.num_ack_pending)
}

/// The status of a consumer from its recent samples, oldest first; `window` is
/// how many samples make a full window (at least 2). The first rule that
/// applies decides, in this order.
pub fn status(samples: &[LagSample], window: usize) -> Verdict {
    let window = window.max(2);
    if samples.is_empty() {
        return Verdict { status: Status::Ok, reason: "no read yet".into() };
    }
    let r = Regime::of(samples, window);
    settled(&r)
        .or_else(|| stalled(&r))
        .or_else(|| stopped(&r))
        .or_else(|| paused_draining(&r))
        .or_else(|| draining(&r))
        .unwrap_or_else(|| delivering(&r))
}

/// The current regime: the samples since `paused` last changed, at most a
/// window (never empty).
struct Regime<'a> {
    w: &'a [LagSample],
    window: usize,
    /// As many samples as a window.
    full: bool,
}

impl<'a> Regime<'a> {
    fn of(samples: &'a [LagSample], window: usize) -> Self {
        let last = samples.last().expect("a sample");
        let tail = &samples[samples.len().saturating_sub(window)..];
        let start = tail.iter().rposition(|s| s.paused != last.paused).map_or(0, |i| i + 1);
        let w = &tail[start..];
        Self { w, window, full: w.len() >= window }
    }

    fn first(&self) -> &LagSample {
        &self.w[0]
    }

    fn last(&self) -> &LagSample {
        &self.w[self.w.len() - 1]
    }

    fn ticks(&self) -> usize {
        self.w.len() - 1
    }

    fn pairs(&self) -> impl Iterator<Item = (&LagSample, &LagSample)> {
        self.w.windows(2).map(|p| (&p[0], &p[1]))
    }

    /// Was anything acknowledged between two samples?
    fn ack_progress(&self) -> bool {
        self.pairs().any(|(a, b)| {
            b.ack_floor_stream_seq > a.ack_floor_stream_seq || acked_between(a, b) > 0
        })
    }
}

/// Nothing awaits an ack, and nothing is pending or the consumer is paused.
fn settled(r: &Regime) -> Option<Verdict> {
    let last = r.last();
    if last.num_ack_pending != 0 || (last.num_pending != 0 && !last.paused) {
        return None;
    }
    let reason = if last.paused {
        format!(
            "paused and nothing awaits an ack: position {} is stable ({} pending stay put)",
            last.delivered_stream_seq, last.num_pending
        )
    } else {
        "caught up: nothing pending, nothing awaiting an ack".to_string()
    };
    Some(Verdict { status: Status::Ok, reason })
}

/// Messages await an ack all window long and none was acknowledged.
fn stalled(r: &Regime) -> Option<Verdict> {
    if !r.full || !r.w.iter().all(|s| s.num_ack_pending > 0) || r.ack_progress() {
        return None;
    }
    let last = r.last();
    // What moves them on: nothing while paused (a paused consumer holds
    // redeliveries; acks still count: consumer.go loopAndGatherMsgs sends
    // nothing before the pause deadline); running, a redelivery once a
    // message's ack_wait expired, which a push consumer resumed by a pause
    // request without a deadline does not make until a new message arrives:
    // the resume only stops the unpause timer, without signalling the
    // delivery loop (consumer.go updatePauseState; 2.11 to 2.15; cutover-nats
    // api.rs consumer_pause resumes with a pause ending a moment later).
    let cause = match (last.paused, last.push) {
        (true, _) => "the consumer is paused, and a paused consumer redelivers nothing (acks still count): a worker holds them, or one that died held them and they come back once the consumer is resumed and their ack_wait expired",
        (false, false) => "a worker holds them, or max_ack_pending is reached; each comes back once its ack_wait expired, to a worker that fetches",
        (false, true) => "a subscriber holds them, or max_ack_pending is reached; each comes back once its ack_wait expired, but a push consumer resumed by a pause request without a deadline redelivers nothing until a new message arrives on its stream (nats-server 2.11 to 2.15); resume it with a pause that ends a second from now, or publish to its stream",
    };
    Some(Verdict {
        status: Status::Stalled,
        reason: format!(
            "{} message(s) await an ack and none was acknowledged for {} ticks (ack floor stuck at {}): {cause}",
            last.num_ack_pending,
            r.ticks(),
            last.ack_floor_stream_seq
        ),
    })
}

/// Messages pending, nothing delivered all window long, nobody pulling.
fn stopped(r: &Regime) -> Option<Verdict> {
    let last = r.last();
    let idle = !last.paused
        && last.num_pending > 0
        && r.full
        && last.delivered_stream_seq == r.first().delivered_stream_seq
        && last.num_waiting == 0;
    idle.then(|| Verdict {
        status: Status::Stopped,
        reason: format!("{} message(s) pending, nothing delivered for {} ticks and no pull request waiting: no worker is pulling", last.num_pending, r.ticks()),
    })
}

/// Paused, with acks still to come.
fn paused_draining(r: &Regime) -> Option<Verdict> {
    let last = r.last();
    last.paused.then(|| Verdict {
        status: Status::Draining,
        reason: format!(
            "paused: {} message(s) still await an ack, no new deliveries",
            last.num_ack_pending
        ),
    })
}

/// Nothing left to deliver, and the acks pending falling.
fn draining(r: &Regime) -> Option<Verdict> {
    let (first, last) = (r.first(), r.last());
    let falling =
        last.num_pending == 0 && r.w.len() >= 2 && last.num_ack_pending < first.num_ack_pending;
    falling.then(|| Verdict {
        status: Status::Draining,
        reason: format!(
            "nothing left to deliver; ack pending fell from {} to {} over {} ticks",
            first.num_ack_pending,
            last.num_ack_pending,
            r.ticks()
        ),
    })
}

/// Otherwise all is well: still watching, or delivering.
fn delivering(r: &Regime) -> Verdict {
    let (first, last) = (r.first(), r.last());
    let reason = if !r.full {
        format!(
            "{} pending, {} awaiting an ack; watching ({} of {} samples)",
            last.num_pending,
            last.num_ack_pending,
            r.w.len(),
            r.window
        )
    } else {
        format!(
            "delivering: {} delivered and {} acknowledged over {} ticks; {} pending, {} awaiting an ack",
            last.delivered_stream_seq.saturating_sub(first.delivered_stream_seq),
            r.pairs().map(|(a, b)| acked_between(a, b)).sum::<u64>(),
            r.ticks(),
            last.num_pending,
            last.num_ack_pending
        )
    };
    Verdict { status: Status::Ok, reason }
}

/// Paused in every read of a full window while its pending count grew:
/// messages keep arriving that the consumer will not deliver; returns how
/// many arrived over the window. [`status`] calls a paused, settled
/// consumer ok (a drain's checkpoint is exactly that, for a moment); held
/// like this, it is ok only while a migration's runner holds it and will let
/// it go, which the caller checks (`watch`).
pub fn held_while_growing(samples: &[LagSample], window: usize) -> Option<u64> {
    let window = window.max(2);
    let w = &samples[samples.len().checked_sub(window)?..];
    let grew = w[w.len() - 1].num_pending.saturating_sub(w[0].num_pending);
    (w.iter().all(|s| s.paused) && grew > 0).then_some(grew)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_while_growing_needs_a_full_paused_window_and_growth() {
        let p = |pending: u64, paused: bool| LagSample {
            num_pending: pending,
            paused,
            ..s(0, 0, 5, 5)
        };
        assert_eq!(held_while_growing(&[p(1, true), p(2, true), p(3, true)], 3), Some(2));
        assert_eq!(held_while_growing(&[p(1, true), p(2, true)], 3), None, "not a full window");
        let resumed = [p(1, false), p(2, true), p(3, true)];
        assert_eq!(held_while_growing(&resumed, 3), None, "resumed in it");
        let still = [p(3, true), p(3, true), p(3, true)];
        assert_eq!(held_while_growing(&still, 3), None, "nothing arrives");
        let last = [p(9, false), p(1, true), p(2, true)];
        assert_eq!(held_while_growing(&last, 2), Some(1), "the last window");
    }

    fn s(pending: u64, ack_pending: u64, delivered: u64, floor: u64) -> LagSample {
        LagSample {
            num_pending: pending,
            num_ack_pending: ack_pending,
            delivered_stream_seq: delivered,
            delivered_consumer_seq: delivered,
            ack_floor_stream_seq: floor,
            ..Default::default()
        }
    }

    fn paused(mut x: LagSample) -> LagSample {
        x.paused = true;
        x
    }

    fn waiting(mut x: LagSample, n: u64) -> LagSample {
        x.num_waiting = n;
        x
    }

    #[test]
    fn nothing_pending_is_ok_at_once() {
        assert_eq!(status(&[s(0, 0, 10, 10)], 5).status, Status::Ok);
    }

    #[test]
    fn pending_with_nobody_pulling_is_stopped_only_after_a_full_window() {
        let w = vec![s(20, 0, 0, 0); 4];
        assert_eq!(status(&w, 5).status, Status::Ok, "four reads are not yet evidence");
        let w = vec![s(20, 0, 0, 0); 5];
        let v = status(&w, 5);
        assert_eq!(v.status, Status::Stopped, "{}", v.reason);
    }

    #[test]
    fn a_waiting_pull_request_is_not_stopped() {
        let w = vec![waiting(s(20, 0, 0, 0), 1); 5];
        assert_ne!(status(&w, 5).status, Status::Stopped);
    }

    #[test]
    fn held_messages_without_ack_progress_are_stalled() {
        let mut w = vec![s(20, 0, 0, 0); 3];
        w.extend(vec![s(15, 5, 5, 0); 5]);
        let v = status(&w, 5);
        assert_eq!(v.status, Status::Stalled, "{}", v.reason);
        assert!(v.reason.contains("a worker holds them"), "{}", v.reason);
        // Paused all window long: nothing redelivers until it is resumed.
        let held: Vec<LagSample> = w.iter().map(|x| paused(*x)).collect();
        let v = status(&held, 5);
        assert_eq!(v.status, Status::Stalled, "{}", v.reason);
        assert!(v.reason.contains("a paused consumer redelivers nothing"), "{}", v.reason);
        // A push consumer: the resume that does not wake it is named.
        let push: Vec<LagSample> = w.iter().map(|x| LagSample { push: true, ..*x }).collect();
        let v = status(&push, 5);
        assert!(v.reason.contains("until a new message arrives"), "{}", v.reason);
        // While the delivery is still inside the window it is progress of sorts:
        // not stopped, and not yet stalled either (the ack pending rose, not fell).
        let v = status(&w[..6], 5);
        assert_eq!(v.status, Status::Ok, "{}", v.reason);
    }

    #[test]
    fn busy_consumer_with_acks_moving_is_ok() {
        let w: Vec<LagSample> = (0..6).map(|i| s(100, 32, 10 + i * 32, i * 32)).collect();
        let v = status(&w, 5);
        assert_eq!(v.status, Status::Ok, "{}", v.reason);
    }

    #[test]
    fn a_held_message_among_flowing_acks_is_not_stalled() {
        // The ack floor stays behind one held message while others are acked.
        let w: Vec<LagSample> = (0..6)
            .map(|i| LagSample {
                num_pending: 100,
                num_ack_pending: 1 + (i % 2) * 10,
                delivered_stream_seq: 10 + i * 10,
                delivered_consumer_seq: 10 + i * 10,
                ack_floor_stream_seq: 3,
                ..Default::default()
            })
            .collect();
        assert_ne!(status(&w, 5).status, Status::Stalled);
    }

    #[test]
    fn pausing_starts_a_new_regime() {
        let mut w = vec![s(15, 5, 5, 0); 6];
        assert_eq!(status(&w, 5).status, Status::Stalled);
        w.push(paused(s(15, 5, 5, 0)));
        let v = status(&w, 5);
        assert_eq!(v.status, Status::Draining, "{}", v.reason);
        // Still held after a full paused window: stalled again (the engine's
        // nudge exists for exactly this).
        w.extend(vec![paused(s(15, 5, 5, 0)); 4]);
        assert_eq!(status(&w, 5).status, Status::Stalled);
    }

    #[test]
    fn paused_with_acks_coming_in_is_draining_then_ok_once_settled() {
        let w = vec![
            paused(s(15, 5, 5, 0)),
            paused(s(15, 3, 5, 2)),
            paused(s(15, 1, 5, 4)),
            paused(s(15, 1, 5, 4)),
            paused(s(15, 1, 5, 4)),
        ];
        assert_eq!(status(&w, 5).status, Status::Draining);
        let mut w = w;
        w.push(paused(s(15, 0, 5, 5)));
        let v = status(&w, 5);
        assert_eq!(v.status, Status::Ok, "{}", v.reason);
        assert!(v.reason.contains("stable"));
    }

    #[test]
    fn finishing_in_flight_work_with_nothing_left_is_draining() {
        let w = vec![s(0, 30, 100, 70), s(0, 20, 100, 80), s(0, 10, 100, 90)];
        let v = status(&w, 5);
        assert_eq!(v.status, Status::Draining, "{}", v.reason);
    }

    #[test]
    fn acks_are_counted_from_deliveries_and_ack_pending() {
        let a = s(10, 5, 5, 0);
        let mut b = s(5, 3, 10, 0);
        b.delivered_consumer_seq = 10;
        // 5 new deliveries, ack pending went from 5 to 3: 7 settled.
        assert_eq!(acked_between(&a, &b), 7);
        assert_eq!(acked_between(&a, &a), 0);
    }

    #[test]
    fn empty_history_is_ok() {
        assert_eq!(status(&[], 5).status, Status::Ok);
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> impl Strategy<Value = LagSample> {
        let counts = (0u64..50, 0u64..10, 0u64..3, 0u64..100, 0u64..100, 0u64..100);
        (counts, any::<bool>(), any::<bool>()).prop_map(|((p, ap, w, d, dc, f), paused, push)| {
            LagSample {
                num_pending: p,
                num_ack_pending: ap,
                num_waiting: w,
                delivered_stream_seq: d,
                delivered_consumer_seq: dc,
                ack_floor_stream_seq: f,
                paused,
                push,
            }
        })
    }

    proptest! {
        /// No-progress verdicts need evidence: a full window in the current regime.
        #[test]
        fn stalled_and_stopped_need_a_full_window(h in prop::collection::vec(sample(), 1..12), window in 2usize..6) {
            let v = status(&h, window);
            if matches!(v.status, Status::Stalled | Status::Stopped) {
                let last = h.last().unwrap();
                let regime = h.iter().rev().take_while(|s| s.paused == last.paused).count();
                prop_assert!(regime >= window, "{:?} after {} read(s) of a {}-read window", v.status, regime, window);
            }
        }

        /// Nothing pending and nothing awaiting an ack is ok, whatever came before.
        #[test]
        fn caught_up_is_ok(h in prop::collection::vec(sample(), 0..12), window in 2usize..6) {
            let mut h = h;
            h.push(LagSample { num_pending: 0, num_ack_pending: 0, ..Default::default() });
            prop_assert_eq!(status(&h, window).status, Status::Ok);
        }
    }
}
