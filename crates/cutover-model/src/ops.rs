//! What acts when the runner does not: a crash, the guard of a dead runner
//! (engine/compensate.rs), the operator's `run --resume` and `rollback`
//! (engine/rollback.rs, step by step).

use crate::env::Action;
use crate::mutants::Mutant;
use crate::world::{Cons, Cph, Pause, Pc, Ph, Run, State};
use crate::CutoverModel;
use cutover_core::journal::{ConsumerPhase as C, Phase as P};

impl CutoverModel {
    pub(crate) fn ops_actions(&self, s: &State, out: &mut Vec<Action>) {
        match s.run {
            Run::Running if s.crashes_left > 0 => out.push(Action::Crash),
            Run::Dead => out.push(Action::Guard),
            Run::Stopped if s.ops_left > 0 => {
                let p = s.journal.phase.0;
                if p != P::Done && p != P::RolledBack {
                    out.push(Action::Resume);
                }
                if self.rollback_allowed(s) {
                    out.push(Action::Rollback);
                }
            }
            _ => {}
        }
    }

    /// `rollback`'s refusals before any change: the journal's
    /// (`Journal::can_roll_back`), B holding the subjects
    /// (`refuse_if_committed`), and a new durable that delivered on a server
    /// without consumer reset (`refuse_without_reset`).
    fn rollback_allowed(&self, s: &State) -> bool {
        if !self.rules.can_roll_back(&s.journal) || s.b_owns() {
            return false;
        }
        let delivered_on_b = s.journal.c.0 >= C::Creating
            && s.new.exists
            && s.journal.b_start.is_some_and(|start| s.new.delivered() >= start);
        // Fence mode: an old durable that delivered above F and gives
        // messages up after max_deliver needs a reset to F + 1.
        let old_above_fence = self.fence()
            && s.journal.c.0 >= C::Creating
            && self.old_above_fence(s)
            && self.cfg.max_deliver > 0;
        self.rules.features.consumer_reset || !(delivered_on_b || old_above_fence)
    }

    /// Fence mode: the old durable delivered above the journaled fence.
    /// Consumer reset (2.14+) of the old durable to deliver from `seq`:
    /// its pending messages and delivery counts forgotten (consumer.go
    /// `resetLocalStartingSeq`: `o.pending, o.rdc = nil, nil`). Fence
    /// mode holds it first (rollback.rs `hold_old`).
    fn reset_old(&self, s: &mut State, seq: u8) {
        if self.holds_old() {
            s.old.paused = Pause::Forever;
        }
        s.old.next = seq;
        s.old.pending = 0;
        s.old.due = 0;
        s.old.again = 0;
        s.old.nakd = 0;
        s.old.exhausted = 0;
    }

    /// Fence mode's rollback holds the old durable from its settle until
    /// the instances followed the route's deletion (unless mutated).
    fn holds_old(&self) -> bool {
        self.fence() && self.mutant != Some(Mutant::RollbackUnheld)
    }

    pub(crate) fn old_above_fence(&self, s: &State) -> bool {
        s.journal.checkpoint.is_some_and(|f| s.old.exists && s.old.delivered() > f)
    }

    pub(crate) fn ops_apply(&self, s: &mut State, a: Action) {
        match a {
            Action::Crash => {
                s.crashes_left -= 1;
                s.run = if s.local.exposed && self.cfg.guard { Run::Dead } else { Run::Stopped };
                // Without a guard (or in fence mode before the route is
                // out), what it held stays held until a later run or
                // rollback gives it back.
                s.unguarded |= (s.local.exposed && !self.cfg.guard) || s.local.held;
                s.pc = Pc::Idle;
                s.local = Default::default();
            }
            Action::Guard => {
                self.guard(s);
                s.run = Run::Stopped;
            }
            Action::Resume => {
                s.ops_left -= 1;
                s.run = Run::Running;
                self.drive(s);
            }
            Action::Rollback => {
                s.ops_left -= 1;
                s.run = Run::RollingBack;
                s.pc = Pc::RbRestore;
            }
            _ => unreachable!("not an operator action: {a:?}"),
        }
    }

    /// compensate::drive: the commit window closed (commit.rs close_window),
    /// or drain mode's consumer given back or routed (release_consumers).
    fn guard(&self, s: &mut State) {
        let p = s.journal.phase.0;
        if p == P::SubjectsReleased {
            if s.b_owns() {
                s.journal.phase = Ph(P::SubjectsMoved);
            } else {
                s.a.owns = true;
                s.journal.phase = Ph(P::ConsumersMoved);
            }
            return;
        }
        if p >= P::ConsumersMoved || self.fence() {
            return;
        }
        let c = s.journal.c.0;
        let on_b = matches!(c, C::Creating | C::Created) && s.b.is_some() && s.new.exists;
        match c {
            C::Waiting | C::Settled | C::Creating if !on_b => {
                let held = s.old.exists && (s.old.paused() || c != C::Waiting);
                if held {
                    s.seen |= 4 * self.cfg.track_recovery as u8;
                    s.journal.c = Cph(C::Waiting);
                    s.journal.checkpoint = None;
                    s.journal.b_start = None;
                    s.old.paused = Pause::No;
                }
            }
            C::Created if s.route => {}
            C::Creating | C::Created => {
                s.seen |= 8 * self.cfg.track_recovery as u8;
                s.journal.c = Cph(C::Created);
                s.route = true;
            }
            _ => {}
        }
    }

    /// Undo::run, one server write (or one wait) a step.
    pub(crate) fn rollback_step(&self, s: &mut State, pc: Pc) {
        let a_serving = !s.a.sealed;
        match pc {
            Pc::RbRestore => {
                // restore_subjects: B gives up any, A takes its own back.
                if a_serving && !s.a.owns {
                    if let Some(b) = s.b.as_mut() {
                        b.s.owns = false;
                    }
                    s.a.owns = true;
                }
                let new_may_exist = s.journal.c.0 >= C::Creating && s.b.is_some() && s.new.exists;
                s.pc = if new_may_exist { Pc::RbPauseNew } else { Pc::RbConsumer };
            }
            Pc::RbPauseNew => {
                // Fence mode: the old durable held before anything of it is
                // read (`undo_consumer`), until the instances follow the
                // route's deletion (`hold_old`): a fenced instance naks what
                // it delivers above F, and `max_deliver` naks give a message
                // up (finding 3).
                if self.holds_old() && a_serving && s.old.exists {
                    s.old.paused = Pause::Forever;
                }
                s.new.paused = Pause::Forever;
                s.pc = Pc::RbSettleNew;
            }
            Pc::RbSettleNew => {
                // Settled: the old durable reset past what the new one
                // processed (its last delivery's origin), then it is deleted.
                let f_b = s.new.delivered();
                let b_start = s.journal.b_start.unwrap_or(u8::MAX);
                if f_b >= b_start && a_serving {
                    // A mirror has A's sequences; a source's copy names its origin.
                    let origin = match self.rules.mirror() {
                        true => Some(f_b),
                        false => s.b.as_ref().and_then(|b| b.s.at(f_b)).map(|m| m.origin),
                    };
                    if let Some(o) = origin.filter(|o| Some(*o) > s.journal.checkpoint) {
                        if !self.rules.features.consumer_reset {
                            // reset_old_past refuses: the new durable serves on.
                            s.new.paused = Pause::No;
                            s.run = Run::Stopped;
                            s.pc = Pc::Idle;
                            return;
                        }
                        self.reset_old(s, o + 1);
                    }
                } else if a_serving && self.fence() && self.old_above_fence(s) {
                    // rollback.rs reset_old_to_fence (finding 3 of
                    // docs/model.md): the old durable back to F + 1, so a
                    // message nak'd there until max_deliver is not lost.
                    if self.rules.features.consumer_reset {
                        self.reset_old(s, s.journal.checkpoint.expect("fence") + 1);
                    } else if self.cfg.max_deliver > 0 {
                        s.new.paused = Pause::No;
                        s.run = Run::Stopped;
                        s.pc = Pc::Idle;
                        return;
                    }
                }
                s.new = Cons::gone();
                s.pc = Pc::RbConsumer;
            }
            Pc::RbConsumer => {
                // The route deleted, the old durable given back its state
                // (fence mode: once no instance fetches from the new one).
                s.route = false;
                if self.holds_old() && s.journal.c.0 >= C::Creating {
                    if a_serving && s.old.exists {
                        s.old.paused = Pause::Forever;
                    }
                    s.pc = Pc::RbAwaitFollow;
                    return;
                }
                if a_serving && s.old.exists {
                    s.old.paused = Pause::No;
                }
                s.pc = Pc::RbDeleteB;
            }
            Pc::RbAwaitFollow => {
                // await_followers: no live instance lists the new durable.
                if a_serving && s.old.exists {
                    s.old.paused = Pause::No;
                }
                s.pc = Pc::RbDeleteB;
            }
            Pc::RbDeleteB => {
                if s.journal.created_b && s.b.is_some() {
                    s.b = None;
                    s.new = Cons::gone();
                }
                s.pc = Pc::RbJournal;
            }
            Pc::RbJournal => {
                s.journal.phase = Ph(P::RolledBack);
                s.journal.c = Cph(C::Waiting);
                s.journal.checkpoint = None;
                s.journal.b_start = None;
                s.run = Run::Finished;
                s.pc = Pc::Idle;
                s.unguarded = false;
            }
            other => unreachable!("not a rollback step: {other:?}"),
        }
    }
}
