//! The actions of everything beside the runner: the publisher, B's source,
//! the worker, runner crashes, the guard and the operator.

use crate::world::{bit, Held, Msg, State};
use crate::CutoverModel;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The publisher sends its current message; `lose`: the answer is lost.
    Publish { lose: bool },
    /// B's source copies A's next message.
    Source,
    /// The worker fetches from the durable the route names.
    Fetch,
    /// The worker processes the message it holds (the application's effect).
    Process,
    /// The worker acknowledges it (a double ack: the server applied it).
    Ack,
    /// The worker dies holding its message (before its ack).
    Die,
    /// The runner (or the rollback) performs its next step.
    Step,
    /// The drain cuts its pause (no ack progress: a worker holds or died).
    CutPause,
    /// The drain's settle timeout: the consumer is given back, the run fails.
    SettleTimeout,
    /// The rollback's settle of the new durable times out.
    RollbackTimeout,
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
            Action::Fetch | Action::Process | Action::Ack | Action::Die => "worker",
            Action::Step
            | Action::CutPause
            | Action::SettleTimeout
            | Action::RollbackTimeout
            | Action::CommitFails => "runner",
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
                if self.deliverable(s).is_some() {
                    out.push(Action::Fetch);
                }
            }
            Some(h) => {
                if h.processed {
                    out.push(Action::Ack);
                } else {
                    out.push(Action::Process);
                }
                if s.deaths_left > 0 {
                    out.push(Action::Die);
                }
            }
        }
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

    /// What the serving durable delivers next: a due redelivery first,
    /// else its next sequence. (durable is new, sequence)
    fn deliverable(&self, s: &State) -> Option<(bool, u8)> {
        let new = s.route;
        let c = s.cons(new);
        let stream = s.stream_of(new)?;
        if !c.exists || c.paused() {
            return None;
        }
        if c.due != 0 {
            return Some((new, c.due.trailing_zeros() as u8));
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
            Action::Fetch => {
                let (new, seq) = self.deliverable(s).expect("deliverable");
                let id = s.stream_of(new).and_then(|st| st.at(seq)).expect("message").id;
                let c = s.cons_mut(new);
                if c.due & bit(seq) != 0 {
                    c.due &= !bit(seq);
                    c.again |= bit(seq);
                } else {
                    c.next += 1;
                    c.pending |= bit(seq);
                }
                s.held = Some(Held { new, seq, id, processed: false });
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
            Action::Die => {
                let h = s.held.take().expect("held");
                s.deaths_left -= 1;
                let max_deliver = self.cfg.max_deliver;
                let c = s.cons_mut(h.new);
                if c.exists && c.pending & bit(h.seq) != 0 {
                    let deliveries = if c.again & bit(h.seq) != 0 { 2 } else { 1 };
                    if deliveries >= max_deliver {
                        c.pending &= !bit(h.seq);
                        c.exhausted |= bit(h.seq);
                        s.gave_up |= 1 << h.id;
                    } else {
                        c.due |= bit(h.seq);
                    }
                }
            }
            _ => unreachable!("not an environment action: {a:?}"),
        }
    }
}
