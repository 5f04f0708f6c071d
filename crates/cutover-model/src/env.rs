//! The actions of everything beside the runner: the publisher, B's source,
//! the worker, runner crashes, the guard and the operator.

use crate::world::{bit, Held, Msg, Pause, Rs, Run, State};
use crate::CutoverModel;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The publisher sends its current message; `lose`: the answer is lost.
    Publish { lose: bool },
    /// B's source copies A's next message.
    Source,
    /// The worker fetches from the old or the new durable (drain mode: the
    /// one the route names; fence mode: as its view of the route allows).
    Fetch { new: bool },
    /// The worker processes the message it holds (the application's effect).
    Process,
    /// The worker acknowledges it (a double ack: the server applied it).
    Ack,
    /// Fence mode: the worker naks (with a delay) an old message above F.
    Nak,
    /// The worker dies holding its message (before its ack).
    Die,
    /// Fence mode: the worker's watch delivers the route as it is now.
    Follow,
    /// Fence mode: the worker's registration acknowledges the fence.
    AckFence,
    /// The drain's (or the gate's) pause lapses: nobody renews it.
    PauseLapses,
    /// A retry horizon (`--retry-horizon`, 2 minutes by default) passes
    /// after B's window was raised over copies it had made without one: a
    /// message first sent before the raise is retried no more (the model's
    /// one tick of time; docs/model.md, finding 1).
    HorizonPasses,
    /// The runner (or the rollback) performs its next step.
    Step,
    /// The drain cuts its pause (no ack progress: a worker holds or died).
    CutPause,
    /// The drain's settle timeout: the consumer is given back, the run fails.
    SettleTimeout,
    /// Fence mode: the wait for the instances' acknowledgements times out.
    FenceAckTimeout,
    /// The rollback's settle of the new durable times out.
    RollbackTimeout,
    /// The journal's bucket stops answering at this journal write (drain
    /// mode's consumer records): `applied`, the write took effect though
    /// its answer was lost.
    JournalFails { applied: bool },
    /// The commit fails inside its window (B refuses the subjects, or does
    /// not hold A's tail within the commit timeout).
    CommitFails,
    /// The runner is killed (SIGKILL) between two steps.
    Crash,
    /// The guard of a dead runner compensates what it held.
    Guard,
    /// The operator runs `run --resume`.
    Resume,
    /// The operator runs `rollback`.
    Rollback,
}

impl Action {
    /// Who acts.
    pub fn actor(self) -> &'static str {
        match self {
            Action::Publish { .. } => "publisher",
            Action::Source => "B's source",
            Action::Fetch { .. }
            | Action::Process
            | Action::Ack
            | Action::Nak
            | Action::Die
            | Action::Follow
            | Action::AckFence => "worker",
            Action::PauseLapses => "server",
            Action::HorizonPasses => "time",
            Action::Step
            | Action::CutPause
            | Action::SettleTimeout
            | Action::RollbackTimeout
            | Action::FenceAckTimeout
            | Action::CommitFails => "runner",
            Action::JournalFails { .. } => "fault",
            Action::Crash => "fault",
            Action::Guard => "guard",
            Action::Resume | Action::Rollback => "operator",
        }
    }
}

impl CutoverModel {
    pub(crate) fn env_actions(&self, s: &State, out: &mut Vec<Action>) {
        if (s.next_pub as usize) < self.cfg.msgs as usize && (s.a.owns || s.b_owns()) {
            out.push(Action::Publish { lose: false });
            if s.lost_left > 0 {
                out.push(Action::Publish { lose: true });
            }
        }
        if let Some(b) = &s.b {
            if b.sourcing && b.sourced < s.a.last_seq() && !self.source_stalls(s, b) {
                out.push(Action::Source);
            }
        }
        match s.held {
            None => {
                for &new in self.fetch_from(s) {
                    if self.deliverable(s, new).is_some() {
                        out.push(Action::Fetch { new });
                    }
                }
            }
            Some(h) => {
                if h.processed {
                    out.push(Action::Ack);
                } else if self.above_fence(s, h) {
                    out.push(Action::Nak);
                } else {
                    out.push(Action::Process);
                }
                if s.deaths_left > 0 {
                    out.push(Action::Die);
                }
            }
        }
        if self.fence() {
            let now = if s.route { s.rstate } else { Rs::None };
            if s.knows != now || (now != Rs::None && s.known_f != s.route_f) {
                out.push(Action::Follow);
            }
            if s.knows >= Rs::Fenced && !s.fence_acked {
                out.push(Action::AckFence);
            }
        }
        if s.old.paused == Pause::Drain && s.run != Run::Running {
            out.push(Action::PauseLapses);
        }
        if s.window_since {
            out.push(Action::HorizonPasses);
        }
    }

    /// The durables the worker fetches from: the one the route names (drain
    /// mode); in fence mode per its view: none yet, the old one; `fenced`,
    /// both; `settled` or `moved`, the new one.
    fn fetch_from(&self, s: &State) -> &'static [bool] {
        let view = if self.fence() {
            s.knows
        } else if s.route {
            Rs::Moved
        } else {
            Rs::None
        };
        match view {
            Rs::None => &[false],
            Rs::Fenced => &[false, true],
            Rs::Settled | Rs::Moved => &[true],
        }
    }

    /// Fence mode: an old message above the fence the worker knows, or
    /// above the one it knew when it fetched the message: never processed,
    /// nak'd (docs/protocol.md; the rule is checked just before processing).
    /// Without the second, a delivery fetched under the fence and handled
    /// after a rollback deleted the route was processed though the new
    /// durable had processed it too (docs/model.md, finding 2).
    fn above_fence(&self, s: &State, h: Held) -> bool {
        let now = self.fence() && !h.new && s.knows >= Rs::Fenced && h.seq > s.known_f;
        let then = self.mutant != Some(crate::mutants::Mutant::FenceAtHandling)
            && h.fetched_under.is_some_and(|f| h.seq > f);
        now || then
    }

    /// Before 2.12.6 a msg-id B already recorded, arriving again by source,
    /// stalls the source for good (`Features::duplicate_sourced_msg_id_stalls_source`).
    fn source_stalls(&self, s: &State, b: &crate::world::BStream) -> bool {
        let next = s.a.msgs[b.sourced as usize];
        !b.mirror
            && self.rules.features.duplicate_sourced_msg_id_stalls_source
            && b.s.dedup
            && b.s.ids & (1 << next.id) != 0
    }

    /// What a durable delivers next: a due redelivery first, else its next
    /// sequence. (durable is new, sequence)
    fn deliverable(&self, s: &State, new: bool) -> Option<(bool, u8)> {
        let c = s.cons(new);
        let stream = s.stream_of(new)?;
        if !c.exists || c.paused() {
            return None;
        }
        // A nak'd message comes back after the nak's delay (30 s by
        // default), which outlasts the instance's route watch: by then the
        // worker's view of the route is current.
        let now = if s.route { s.rstate } else { Rs::None };
        let current = !self.fence() || (s.knows == now && s.known_f == s.route_f);
        let due = if current { c.due } else { c.due & !c.nakd };
        if due != 0 {
            return Some((new, due.trailing_zeros() as u8));
        }
        (c.next <= stream.last_seq()).then_some((new, c.next))
    }

    pub(crate) fn env_apply(&self, s: &mut State, a: Action) {
        match a {
            Action::Publish { lose } => {
                let m = Msg { id: s.next_pub, origin: 0 };
                if s.a.owns {
                    s.a.store(m);
                } else if let Some(b) = s.b.as_mut().filter(|b| b.s.owns) {
                    s.dup_in_b |= !b.s.store(m);
                }
                if lose {
                    s.lost_left -= 1;
                } else {
                    s.next_pub += 1;
                    s.pub_old = false;
                }
            }
            Action::Source => {
                let b = s.b.as_mut().expect("B sources");
                let m = s.a.msgs[b.sourced as usize];
                b.sourced += 1;
                if b.mirror {
                    // A mirror checks no msg-id; with a window it records them.
                    if b.s.dedup {
                        b.s.ids |= 1 << m.id;
                    }
                    b.s.msgs.push(Msg { id: m.id, origin: b.sourced });
                } else {
                    b.s.store(Msg { id: m.id, origin: b.sourced });
                }
            }
            Action::Fetch { new } => {
                let (new, seq) = self.deliverable(s, new).expect("deliverable");
                let id = s.stream_of(new).and_then(|st| st.at(seq)).expect("message").id;
                let c = s.cons_mut(new);
                if c.due & bit(seq) != 0 {
                    c.due &= !bit(seq);
                    c.nakd &= !bit(seq);
                    c.again |= bit(seq);
                } else {
                    c.next += 1;
                    c.pending |= bit(seq);
                }
                let fenced = self.fence() && !new && s.knows >= Rs::Fenced;
                let fetched_under = fenced.then_some(s.known_f);
                s.held = Some(Held { new, seq, id, processed: false, fetched_under });
            }
            Action::Process => {
                let h = s.held.as_mut().expect("held");
                h.processed = true;
                let set = if h.new { &mut s.proc_new } else { &mut s.proc_old };
                set[h.id as usize] |= bit(h.seq);
            }
            Action::Ack => {
                let h = s.held.take().expect("held");
                let c = s.cons_mut(h.new);
                if c.exists && c.pending & bit(h.seq) != 0 {
                    c.pending &= !bit(h.seq);
                    c.acked |= bit(h.seq);
                }
            }
            Action::Die | Action::Nak => {
                // Left unacknowledged: redelivered once ack_wait (or the
                // nak's delay) expired, unless that was its last delivery.
                let h = s.held.take().expect("held");
                if a == Action::Die {
                    s.deaths_left -= 1;
                    // Its replacement reads the route as it starts and
                    // acknowledges the fence only once it follows it.
                    s.knows = if s.route { s.rstate } else { Rs::None };
                    s.known_f = s.route_f;
                    s.fence_acked = false;
                }
                let max_deliver = self.cfg.max_deliver;
                let c = s.cons_mut(h.new);
                if c.exists && c.pending & bit(h.seq) != 0 {
                    let deliveries = if c.again & bit(h.seq) != 0 { 2 } else { 1 };
                    if max_deliver > 0 && deliveries >= max_deliver {
                        c.pending &= !bit(h.seq);
                        c.exhausted |= bit(h.seq);
                        if a == Action::Die {
                            s.gave_up |= 1 << h.id;
                        }
                    } else {
                        c.due |= bit(h.seq);
                        if a == Action::Nak {
                            c.nakd |= bit(h.seq);
                        }
                    }
                }
            }
            Action::Follow => {
                s.knows = if s.route { s.rstate } else { Rs::None };
                s.known_f = s.route_f;
                if s.knows == Rs::None {
                    // A deleted route after a fence is a rollback: drop the fence.
                    s.fence_acked = false;
                }
            }
            Action::AckFence => s.fence_acked = true,
            Action::PauseLapses => s.old.paused = Pause::No,
            Action::HorizonPasses => {
                // The publisher's retries of a message sent before the
                // raise end here (its answer was lost, it is stored: sent
                // before the raise, it went to A, which held the subjects).
                s.window_since = false;
                if s.pub_old {
                    s.pub_old = false;
                    s.next_pub += 1;
                }
            }
            _ => unreachable!("not an environment action: {a:?}"),
        }
    }
}
