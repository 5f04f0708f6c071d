//! The properties checked, each an `always` over every state within the
//! depth bound. "At the end" means a terminal state: no action of anyone is
//! enabled (every message published, sourced, delivered as far as it can
//! be, the runner finished or stopped with no operator command left).
//! docs/model.md states each one in words.

use crate::world::{bit, Rs, Run, State};
use crate::CutoverModel;
use cutover_core::journal::{ConsumerPhase as C, Phase as P};
use stateright::{Model, Property};

pub const LOST: &str = "no acknowledged publish is lost";
pub const TWICE: &str = "no message is processed twice";
pub const ACCEPTED: &str = "every publish is eventually accepted";
pub const PAUSED: &str = "no consumer stays paused once the run ended or failed";
pub const ROLLBACK: &str = "a rollback leaves A serving";
pub const JOURNAL: &str = "the journal never claims what the server does not show";

/// Moments a check must reach (`sometimes`), or it proves little.
pub const REACHED: [&str; 7] = [
    "a run ends done",
    "a rollback ends",
    "a retry after the commit meets its id in B's window",
    "a guard finds the commit window open",
    "the commit fails and A takes its subjects back",
    "a drain cuts its pause",
    "a message exhausts its deliveries",
];

/// Moments of the recovery paths: the guard's two actions (with a guard),
/// a resume's two outcomes of `checkpoint_holds` (without one, or after a
/// journal fault; with a guard the journal says waiting by then).
pub const RECOVERED: [&str; 4] = [
    "a resume reuses a journaled checkpoint",
    "a resume finds a journaled checkpoint stale and drains again",
    "a guard gives the old durable back",
    "a guard routes a consumer whose new durable exists",
];

pub fn all() -> Vec<Property<CutoverModel>> {
    vec![
        Property::sometimes(RECOVERED[0], |_, s: &State| s.seen & 1 != 0),
        Property::sometimes(RECOVERED[1], |_, s: &State| s.seen & 2 != 0),
        Property::sometimes(RECOVERED[2], |_, s: &State| s.seen & 4 != 0),
        Property::sometimes(RECOVERED[3], |_, s: &State| s.seen & 8 != 0),
        Property::sometimes(REACHED[0], |_, s: &State| {
            s.run == Run::Finished && s.journal.phase.0 == P::Done
        }),
        Property::sometimes(REACHED[1], |_, s: &State| {
            s.run == Run::Finished && s.journal.phase.0 == P::RolledBack
        }),
        Property::sometimes(REACHED[2], |_, s: &State| s.dup_in_b),
        Property::sometimes(REACHED[3], |_, s: &State| {
            s.run == Run::Dead && s.journal.phase.0 == P::SubjectsReleased
        }),
        Property::sometimes(REACHED[4], |m: &CutoverModel, s: &State| {
            s.commit_failures_left < m.cfg.commit_failures
        }),
        Property::sometimes(REACHED[5], |m: &CutoverModel, s: &State| {
            s.cuts_left < m.cfg.pause_cuts
        }),
        Property::sometimes(REACHED[6], |_, s: &State| s.gave_up != 0),
        Property::always(LOST, |m: &CutoverModel, s: &State| !m.terminal(s) || lost(s).is_none()),
        Property::always(TWICE, |_, s: &State| twice(s).is_none()),
        Property::always(ACCEPTED, |m: &CutoverModel, s: &State| {
            !m.terminal(s) || s.unguarded || s.next_pub as usize == m.cfg.msgs as usize
        }),
        Property::always(PAUSED, |_, s: &State| paused(s).is_none()),
        Property::always(ROLLBACK, |_, s: &State| rollback(s).is_none()),
        Property::always(JOURNAL, |m: &CutoverModel, s: &State| journal(m, s).is_none()),
    ]
}

impl CutoverModel {
    pub fn terminal(&self, s: &State) -> bool {
        let mut out = vec![];
        self.actions(s, &mut out);
        out.is_empty()
    }
}

/// An acknowledged msg-id (every one before the publisher's current
/// message) that no worker processed, that the serving durable will not
/// deliver (not in its stream at or after its position, not pending), and
/// that did not exhaust its deliveries (the application's `max_deliver`).
pub fn lost(s: &State) -> Option<u8> {
    let c = s.serving();
    let in_stream = |new: bool, id: u8, yet: &dyn Fn(u8) -> bool| {
        s.stream_of(new).is_some_and(|st| {
            st.msgs.iter().enumerate().any(|(i, m)| m.id == id && yet(i as u8 + 1))
        })
    };
    let will_deliver = |id: u8| {
        let ahead = c.exists && in_stream(s.route, id, &|seq| seq >= c.next);
        let pending = [false, true].into_iter().any(|new| {
            let d = s.cons(new);
            d.exists && in_stream(new, id, &|seq| d.pending & bit(seq) != 0)
        });
        ahead || pending
    };
    let exhausted = |id: u8| s.gave_up & (1 << id) != 0;
    (0..s.next_pub).find(|&id| !s.processed(id) && !will_deliver(id) && !exhausted(id))
}

/// A msg-id processed by two different deliveries: two durables, or two
/// sequences (a copy stored twice). A redelivery of the same sequence to
/// the same durable after its worker died is the application's normal
/// at-least-once, not "twice" (docs/reliability.md counts only the
/// server's forgetting apart, which the model does not have).
pub fn twice(s: &State) -> Option<u8> {
    (0..crate::world::MAX_MSGS as u8).find(|&id| s.processings(id) > 1)
}

/// Once nobody acts (the run ended, or failed and its guard finished), the
/// durable the route names exists and is not paused. (Without a guard, a
/// dead runner's consumer stays held until the operator acts: not checked
/// then, by design.)
pub fn paused(s: &State) -> Option<&'static str> {
    if !matches!(s.run, Run::Stopped | Run::Finished) || s.unguarded {
        return None;
    }
    let c = s.serving();
    if !c.exists {
        return Some("the durable the route names does not exist");
    }
    c.paused().then_some("the durable the route names is paused")
}

/// After a rollback: A holds the subjects, its durable runs, no route
/// points away from it, and B is gone if the migration created it.
pub fn rollback(s: &State) -> Option<&'static str> {
    if s.journal.phase.0 != P::RolledBack || s.run != Run::Finished {
        return None;
    }
    if !s.a.owns || s.b_owns() {
        return Some("A does not hold the subjects");
    }
    if !s.old.exists || s.old.paused() {
        return Some("A's durable is not running");
    }
    if s.route {
        return Some("the route still names the new durable");
    }
    (s.b.is_some() && s.b_ours).then_some("B, created by the migration, is still there")
}

/// What a journal state claims, against the streams and durables. Not
/// checked while a rollback runs (it saves the journal once, at its end).
pub fn journal(m: &CutoverModel, s: &State) -> Option<&'static str> {
    if s.run == Run::RollingBack {
        return None;
    }
    let p = s.journal.phase.0;
    if p == P::RolledBack {
        return None;
    }
    if p >= P::BReady && s.b.is_none() {
        return Some("phase b_ready or later, and B does not exist");
    }
    if p >= P::CaughtUp {
        let at = s.caught_up_at.unwrap_or(u8::MAX);
        if s.b.as_ref().is_none_or(|b| b.sourced < at) {
            return Some("phase caught_up or later, and B lacks what A held when catch-up began");
        }
    }
    if p >= P::ConsumersMoved && !(s.journal.c.0 >= C::Created && s.route) {
        return Some("phase consumers_moved or later, and the consumer has no route to B");
    }
    // Phase::committed: the point of no return.
    if p.committed() && !(s.b_owns() && !s.a.owns && s.b_holds_a()) {
        return Some(
            "phase subjects_moved or later, and B does not hold the subjects and all of A",
        );
    }
    if p >= P::Sealed && !s.a.sealed {
        return Some("phase sealed or later, and A is not sealed");
    }
    if p >= P::SourceRemoved && s.b.as_ref().is_some_and(|b| b.sourcing) {
        return Some("phase source_removed or later, and B still sources A");
    }
    let c = s.journal.c.0;
    // (Fence mode: from `fenced` on the old durable is resumed to redeliver
    // a dead instance's messages, and delivers above F, which are nak'd.)
    // (After the journal stopped answering, a journaled `settled` or
    // `creating` is evidence only: the old durable was given back, and a
    // resumed run trusts F only through checkpoint_holds.)
    let journal_failed = m.cfg.journal_faults != 0 && s.journal_faults_left == 0;
    let held_at_f = match (m.fence(), journal_failed) {
        (true, _) => matches!(c, C::Settled | C::Creating),
        (false, false) => matches!(c, C::Settled | C::Creating | C::Created),
        (false, true) => c == C::Created,
    };
    if held_at_f && s.old.exists {
        let f = s.journal.checkpoint.unwrap_or(u8::MAX);
        if s.old.delivered() != f || !s.old.paused() {
            return Some(
                "a checkpoint F journaled, and the old durable is not paused at delivered = F",
            );
        }
    }
    if s.route && s.rstate >= Rs::Settled && s.old.exists {
        // (Pending above F is nak'd there, and a message up to F given up
        // after max_deliver is the application's: neither is unacknowledged
        // up to F.)
        let f = s.route_f;
        let up_to_f = s.old.pending & (bit(f + 1) - 1);
        if !(s.old.ack_floor() >= f || up_to_f == 0) {
            return Some("the route says settled or moved, and the old durable has messages up to F unacknowledged");
        }
    }
    if matches!(c, C::Fenced | C::Created) {
        let start = s.journal.b_start.unwrap_or(u8::MAX);
        if !(s.new.exists && s.new.start == start) {
            return Some("consumer created, and no durable on B at the journaled start");
        }
    }
    None
}
