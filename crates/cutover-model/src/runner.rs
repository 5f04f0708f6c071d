//! The runner's program (strategies source and mirror, modes drain and
//! fence, one consumer), step by step as `cutover-nats`'s engine performs
//! it: one action is one server write or one journal write (reads are
//! folded into the step that relies on them), so a crash can fall between
//! any two. Its order and its resume
//! decisions are modelled from the engine's code (file references in
//! docs/model.md); every decision the core makes is the core's (`decide`).

use crate::decide::{checkpoint, consumer_info, mirror_start, progress, sourced_enough, translate};
use crate::env::Action;
use crate::mutants::Mutant;
use crate::world::{BStream, Cons, Cph, Pause, Pc, Ph, Rs, Run, State, Stream};
use crate::CutoverModel;
use cutover_core::journal::{ConsumerPhase as C, ConsumerResume, Phase as P, RunStep};

impl CutoverModel {
    fn mutant(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }

    /// The step `drive` (engine/run.rs) runs next from the journal's phase:
    /// the core's ladder (`Phase::next_step`).
    pub(crate) fn drive(&self, s: &mut State) {
        s.pc = match s.journal.phase.0.next_step() {
            Some(RunStep::CreateB) => Pc::CreateB,
            Some(RunStep::CatchUp) => Pc::CatchUp,
            Some(RunStep::MoveConsumers) => Pc::MoveBegin,
            Some(RunStep::Commit) => Pc::Commit,
            Some(RunStep::Seal) => Pc::Seal,
            Some(RunStep::RemoveSource) => Pc::RemoveSource,
            Some(RunStep::Retire) => Pc::Retire,
            None => {
                // Done: "already complete".
                s.run = Run::Finished;
                Pc::Idle
            }
        };
    }

    fn old_info(&self, s: &State) -> cutover_core::model::ConsumerInfo {
        consumer_info(&s.old, &s.a, self.cfg.max_deliver)
    }

    fn new_info(&self, s: &State) -> Option<cutover_core::model::ConsumerInfo> {
        let b = s.b.as_ref()?;
        s.new.exists.then(|| consumer_info(&s.new, &b.s, self.cfg.max_deliver))
    }

    /// The runner's (or rollback's) enabled actions: its next step when what
    /// it waits for holds, and the choices a wait has (cut the pause, time out).
    pub(crate) fn runner_actions(&self, s: &State, out: &mut Vec<Action>) {
        if !matches!(s.run, Run::Running | Run::RollingBack) {
            return;
        }
        if s.run == Run::Running && s.journal_faults_left > 0 && !self.fence() {
            let bit = match s.pc {
                Pc::JournalSettled => 1,
                Pc::JournalCreating => 2,
                Pc::JournalCreated => 4,
                _ => 0,
            };
            if self.cfg.journal_faults & bit != 0 {
                out.push(Action::JournalFails { applied: true });
                out.push(Action::JournalFails { applied: false });
            }
        }
        let ready = match s.pc {
            Pc::CatchUpWait | Pc::CommitKeepUp => {
                s.b.as_ref().is_some_and(|b| b.sourced >= s.local.target)
            }
            Pc::CommitWait | Pc::TakeSubjects if s.commit_failures_left > 0 => {
                out.push(Action::CommitFails);
                s.pc == Pc::TakeSubjects
                    || self.mutant(Mutant::CommitBeforeCaughtUp)
                    || s.b_holds_a()
            }
            Pc::CommitWait => self.mutant(Mutant::CommitBeforeCaughtUp) || s.b_holds_a(),
            // recheck::window_holds: a retry horizon after B's window was
            // raised over its copies, before anything is released.
            Pc::Commit => s.b_owns() || !s.window_since,
            Pc::Translate => s.b.as_ref().is_some_and(|b| match b.mirror {
                true => mirror_start(b, s.a.last_seq(), s.local.f).is_some(),
                false => sourced_enough(b, s.a.last_seq(), s.local.f),
            }),
            Pc::DrainRead => {
                let settled = checkpoint(&self.old_info(s), false).is_some();
                if !settled {
                    out.push(if s.cuts_left > 0 {
                        Action::CutPause
                    } else {
                        Action::SettleTimeout
                    });
                }
                settled
            }
            Pc::FSettle => {
                let done = self.settled_to_fence(s);
                if !done {
                    // No ack progress: resume it for a dead instance's
                    // messages, only once the fence is acknowledged.
                    let acked = s.fence_acked || self.mutant(Mutant::ResumeBeforeFenceAck);
                    if s.cuts_left > 0 && acked {
                        out.push(Action::CutPause);
                    } else if s.cuts_left == 0 {
                        out.push(Action::SettleTimeout);
                    }
                }
                done
            }
            Pc::FAwaitAcks => {
                if !s.fence_acked {
                    // await_acks' deadline: goes on, naming it.
                    out.push(Action::FenceAckTimeout);
                }
                s.fence_acked
            }
            Pc::RbAwaitFollow => {
                // rollback.rs await_followers: no live instance lists the
                // new durable in `bound` (it followed the route's deletion,
                // R1, and dropped its fence). With `max_deliver` unlimited
                // the wait has a deadline (a nak'd message comes back after
                // its delay); limited, none (a nak there may be the last).
                let on_new = s.knows >= Rs::Fenced || s.held.is_some_and(|h| h.new);
                if on_new && self.cfg.max_deliver == 0 {
                    out.push(Action::FenceAckTimeout);
                }
                !on_new
            }
            Pc::RbSettleNew => {
                // Fence mode: a reset forgets what is pending, so the old
                // durable settles to F first (settle_old_to_fence).
                let start = s.journal.b_start.unwrap_or(u8::MAX);
                let resets_old = self.old_above_fence(s) && self.rules.features.consumer_reset;
                let stable = self.new_info(s).is_some_and(|ci| checkpoint(&ci, false).is_some())
                    && (!self.fence()
                        || (s.new.delivered() < start && !resets_old)
                        || self.settled_to_fence(s));
                if !stable {
                    out.push(Action::RollbackTimeout);
                }
                stable
            }
            _ => true,
        };
        if ready {
            out.push(Action::Step);
        }
    }

    /// fence.rs settle_to_fence: nothing up to F unacknowledged on the old
    /// durable (its ack floor reached F, or nothing ack-pending).
    fn settled_to_fence(&self, s: &State) -> bool {
        let f = s.journal.checkpoint.unwrap_or(0);
        s.old.ack_floor() >= f || s.old.pending == 0
    }

    /// The run fails: `run` gives back a waiting consumer it still holds
    /// (`undo::still_held`) and ends a migration that changed nothing.
    fn fail(&self, s: &mut State) {
        if s.journal.c.0 == C::Waiting && s.old.exists && s.old.paused() {
            s.old.paused = Pause::No;
        }
        if s.journal.phase.0 == P::Planned && s.b.is_none() {
            s.journal.phase = Ph(P::RolledBack);
        }
        s.run = Run::Stopped;
        s.pc = Pc::Idle;
        s.local.exposed = false;
        s.unguarded = false;
    }

    /// The journal's bucket stops answering at a consumer record's write
    /// (`ctx.journal_consumer`): the step's own failure path, with every
    /// later journal write of the run refused (the final save included).
    fn journal_fails(&self, s: &mut State, applied: bool) {
        s.journal_faults_left -= 1;
        let pc = s.pc;
        if applied {
            self.step(s);
        }
        match pc {
            // drain.rs checkpoint, durable.rs position: the old durable
            // given back (undo_consumer: its journal write refused).
            Pc::JournalSettled | Pc::JournalCreating => {
                s.old.paused = Pause::No;
            }
            // consumers.rs moved: no compensation; the route is not written.
            _ => {}
        }
        self.fail_keeping_journal(s);
    }

    /// [`fail`] when the journal cannot be written: what `fail` changes on
    /// the server only.
    fn fail_keeping_journal(&self, s: &mut State) {
        let j = s.journal.clone();
        self.fail(s);
        s.journal = j;
    }

    /// `undo::undo_consumer`: journaled waiting, then the old durable resumed.
    fn undo_consumer(&self, s: &mut State) {
        s.journal.c = Cph(C::Waiting);
        s.journal.checkpoint = None;
        s.journal.b_start = None;
        s.old.paused = Pause::No;
    }

    fn create_b(&self, s: &mut State) {
        let window = self.rules.b_created_with_window() && !self.mutant(Mutant::NoDedupWindow);
        let mirror = self.rules.mirror();
        s.b = Some(BStream { s: Stream::new(false, window), sourcing: true, sourced: 0, mirror });
        s.b_ours = true;
    }

    pub(crate) fn runner_apply(&self, s: &mut State, a: Action) {
        match a {
            Action::CutPause => {
                s.old.paused = Pause::No;
                s.cuts_left -= 1;
                s.pc = if self.fence() { Pc::FRedeliverWait } else { Pc::CutWait };
            }
            Action::SettleTimeout if self.fence() => {
                // The new durable serves; the old one stays paused for good
                // until `run --resume` (or a rollback).
                self.fail(s);
                s.unguarded = true;
            }
            Action::SettleTimeout => {
                self.undo_consumer(s);
                self.fail(s);
            }
            Action::FenceAckTimeout if s.pc == Pc::RbAwaitFollow => {
                // The deadline: the old durable given back anyway.
                if !s.a.sealed && s.old.exists {
                    s.old.paused = Pause::No;
                }
                s.pc = Pc::RbDeleteB;
            }
            Action::FenceAckTimeout => s.pc = Pc::FPublishMoved,
            Action::RollbackTimeout => {
                // settle_new_durable's deadline: the new durable serves on.
                s.new.paused = Pause::No;
                s.run = Run::Stopped;
                s.pc = Pc::Idle;
            }
            Action::CommitFails => {
                // give_subjects_back: A takes its subjects back (B holds none).
                s.commit_failures_left -= 1;
                s.a.owns = true;
                s.pc = Pc::CommitUndone;
            }
            Action::JournalFails { applied } => self.journal_fails(s, applied),
            Action::Step => self.step(s),
            _ => unreachable!("not a runner action: {a:?}"),
        }
    }

    fn step(&self, s: &mut State) {
        let ebj = self.mutant(Mutant::EffectBeforeJournal);
        match s.pc {
            Pc::Idle => unreachable!("an idle runner has no step"),
            // engine/steps/create.rs
            Pc::CreateB => {
                s.pc = if s.b.is_some() {
                    Pc::CreateBDone
                } else if ebj {
                    self.create_b(s);
                    Pc::CreateBJournal
                } else {
                    s.journal.created_b = true;
                    Pc::CreateBCreate
                }
            }
            Pc::CreateBCreate => {
                self.create_b(s);
                s.pc = Pc::CreateBDone;
            }
            Pc::CreateBJournal => {
                s.journal.created_b = true;
                s.pc = Pc::CreateBDone;
            }
            Pc::CreateBDone => {
                s.journal.phase = Ph(P::BReady);
                self.drive(s);
            }
            // engine/steps/catch_up.rs: raise_window (every message of A is
            // younger than one window, so B needs none of them first), the
            // window check, then the wait for what A held.
            Pc::CatchUp => {
                let nodedup = self.mutant(Mutant::NoDedupWindow);
                let b = s.b.as_mut().expect("B exists from b_ready");
                if !b.s.dedup && self.rules.plan_window_ns > 0 && !nodedup {
                    b.s.dedup = true;
                    // raise_window: B copied (young) messages without a
                    // window, so a retry of one after the commit would be
                    // stored again: window_since_ms is kept and the commit
                    // waits a retry horizon (finding 1, closed).
                    if b.sourced > 0 && !self.mutant(Mutant::NoHorizonWait) {
                        s.window_since = true;
                        s.pub_old = s.a.msgs.iter().any(|m| m.id == s.next_pub);
                    }
                }
                let window = if b.s.dedup { self.rules.plan_window_ns } else { 0 };
                if !nodedup && !self.rules.window_covers_horizon(window) {
                    return self.fail(s);
                }
                s.local.target = s.a.last_seq();
                s.pc = Pc::CatchUpWait;
            }
            Pc::CatchUpWait => {
                s.journal.phase = Ph(P::CaughtUp);
                s.caught_up_at = Some(s.local.target);
                self.drive(s);
            }
            // engine/steps/consumers.rs move_consumer, drain.rs checkpoint.
            Pc::MoveBegin => {
                // Drain mode holds consumers while it moves them (a guard's
                // exposure); fence mode's are its known limit (`held`).
                s.local.exposed = !self.fence();
                // The core's resume rule (`ConsumerProgress::resume`).
                s.pc = match progress(&s.journal).resume() {
                    ConsumerResume::Moved => Pc::MoveDone,
                    ConsumerResume::Fenced { f, start } => {
                        s.local.f = f as u8;
                        s.local.start = start as u8;
                        Pc::FPublishFenced
                    }
                    ConsumerResume::Checkpointed { .. } => Pc::HoldsPause,
                    ConsumerResume::Fresh if self.fence() => Pc::FGate,
                    ConsumerResume::Fresh => Pc::DrainPause,
                };
            }
            // engine/fence.rs: the gate, F, paused for good while F is
            // translated, the route `fenced`, settle to F, `settled`, the
            // instances' acknowledgements, `moved`.
            Pc::FGate => {
                s.old.paused = Pause::Drain;
                s.local.held = true;
                s.pc = Pc::FRead;
            }
            Pc::FRead => {
                let ci = self.old_info(s);
                let f = match self.mutant(Mutant::AckFloor) {
                    true => ci.ack_floor.stream_seq,
                    false => ci.delivered.stream_seq,
                };
                s.local.f = f as u8;
                s.pc = Pc::FForever;
            }
            Pc::FForever => {
                s.old.paused = Pause::Forever;
                s.pc = Pc::Translate;
            }
            Pc::FPublishFenced => {
                // A resumed run publishes it again unless it is past `fenced`.
                if !(s.route && s.route_f == s.local.f) {
                    s.route = true;
                    s.rstate = Rs::Fenced;
                    s.route_f = s.local.f;
                }
                s.local.held = false;
                s.pc = if s.journal.c.0 == C::Fenced { Pc::FSettle } else { Pc::JournalFenced };
            }
            Pc::JournalFenced => {
                s.journal.c = Cph(C::Fenced);
                s.journal.b_start = Some(s.local.start);
                s.pc = Pc::FSettle;
            }
            Pc::FSettle => s.pc = Pc::FPublishSettled,
            Pc::FRedeliverWait => {
                s.old.paused = Pause::Forever;
                s.pc = Pc::FSettle;
            }
            Pc::FPublishSettled => {
                if s.rstate < Rs::Settled {
                    s.rstate = Rs::Settled;
                }
                s.pc = if s.rstate < Rs::Moved { Pc::FAwaitAcks } else { Pc::JournalCreated };
            }
            Pc::FAwaitAcks => s.pc = Pc::FPublishMoved,
            Pc::FPublishMoved => {
                s.rstate = Rs::Moved;
                s.pc = Pc::JournalCreated;
            }
            Pc::HoldsPause => {
                // durable.rs checkpoint_holds: paused for good, and it
                // delivered nothing since the evidence was taken.
                s.old.paused = Pause::Forever;
                let ci = self.old_info(s);
                let holds = progress(&s.journal).evidence_holds(ci.paused, ci.delivered.stream_seq);
                if self.cfg.track_recovery {
                    s.seen |= if holds { 1 } else { 2 };
                }
                if holds {
                    s.local.f = s.journal.checkpoint.expect("checkpoint");
                    s.local.held = self.fence();
                    s.pc = Pc::Translate;
                } else {
                    s.pc = if self.fence() { Pc::FGate } else { Pc::DrainPause };
                }
            }
            Pc::DrainPause => {
                s.old.paused = Pause::Drain;
                s.pc = Pc::DrainRead;
            }
            Pc::DrainRead => {
                let f = checkpoint(&self.old_info(s), self.mutant(Mutant::AckFloor));
                s.local.f = f.expect("settled");
                s.pc = Pc::PauseForever;
            }
            Pc::CutWait => {
                s.old.paused = Pause::Drain;
                s.pc = Pc::DrainRead;
            }
            Pc::PauseForever => {
                // try_settle: paused for good, then the settled read agrees.
                s.old.paused = Pause::Forever;
                let again = checkpoint(&self.old_info(s), self.mutant(Mutant::AckFloor));
                s.pc = if again == Some(s.local.f) { Pc::JournalSettled } else { Pc::DrainRead };
            }
            Pc::JournalSettled => {
                s.journal.c = Cph(C::Settled);
                s.journal.checkpoint = Some(s.local.f);
                s.journal.evidence = Some(s.old.delivered());
                s.pc = Pc::Translate;
            }
            Pc::Translate => {
                let b = s.b.as_ref().expect("B");
                s.local.start = match b.mirror {
                    true => mirror_start(b, s.a.last_seq(), s.local.f).expect("held"),
                    false => translate(b, s.local.f),
                };
                s.pc = if ebj { Pc::CreateDurable } else { Pc::JournalCreating };
            }
            Pc::JournalCreating => {
                s.journal.c = Cph(C::Creating);
                s.journal.b_start = Some(s.local.start);
                if self.fence() {
                    // take_fence's F and evidence, saved with the intent.
                    s.journal.checkpoint = Some(s.local.f);
                    s.journal.evidence = Some(s.old.delivered());
                }
                s.pc = match (ebj, self.fence()) {
                    (false, _) => Pc::CreateDurable,
                    (true, true) => Pc::FPublishFenced,
                    (true, false) => Pc::WriteRoute,
                };
            }
            Pc::CreateDurable => {
                // durable.rs create_durable: an existing durable is accepted
                // only at the journaled start.
                if s.new.exists {
                    if s.new.start != s.local.start {
                        self.undo_consumer(s);
                        return self.fail(s);
                    }
                } else {
                    s.new = Cons::new(s.local.start);
                }
                s.pc = match (ebj, self.fence()) {
                    (true, _) => Pc::JournalCreating,
                    (false, true) => Pc::FPublishFenced,
                    (false, false) => Pc::WriteRoute,
                };
            }
            Pc::JournalCreated => {
                s.journal.c = Cph(C::Created);
                s.journal.b_start = Some(s.local.start);
                s.pc = Pc::MoveDone;
            }
            // steps/consumers.rs moved: the route to the new durable, which
            // exists, before the journal says so (finding 4 of
            // docs/model.md: a failed `created` write left the old durable
            // paused for good with no route to the new one).
            Pc::WriteRoute => {
                s.route = true;
                s.rstate = Rs::Moved;
                s.route_f = s.local.f;
                s.pc = Pc::JournalCreated;
            }
            Pc::MoveDone => {
                // Every moved consumer's route written again, then the phase.
                s.route = true;
                s.rstate = Rs::Moved;
                s.journal.phase = Ph(P::ConsumersMoved);
                s.local.exposed = false;
                self.drive(s);
            }
            // engine/steps/commit.rs move_publishers.
            Pc::Commit => {
                if s.b_owns() {
                    s.journal.phase = Ph(P::SubjectsMoved);
                    return self.drive(s);
                }
                // recheck::window_holds (its wait of a retry horizon after a
                // raise is the step's readiness above; after a restart, not
                // modelled: the model's servers do not restart).
                let b = s.b.as_mut().expect("B");
                if !b.s.dedup && !self.mutant(Mutant::NoDedupWindow) {
                    b.s.dedup = true;
                }
                s.local.target = s.a.last_seq();
                s.pc = if self.mutant(Mutant::CommitBeforeCaughtUp) {
                    self.release_first()
                } else {
                    Pc::CommitKeepUp
                };
            }
            Pc::CommitKeepUp => s.pc = self.release_first(),
            Pc::JournalReleased => {
                s.journal.phase = Ph(P::SubjectsReleased);
                s.local.exposed = true;
                s.pc = if ebj { Pc::CommitWait } else { Pc::ReleaseA };
            }
            Pc::ReleaseA => {
                s.a.owns = false;
                s.pc = if ebj { Pc::JournalReleased } else { Pc::CommitWait };
            }
            Pc::CommitWait => s.pc = Pc::TakeSubjects,
            Pc::CommitUndone => {
                // The journal back to consumers_moved; the run fails.
                s.journal.phase = Ph(P::ConsumersMoved);
                s.local.exposed = false;
                self.fail(s);
            }
            Pc::TakeSubjects => {
                let b = s.b.as_mut().expect("B");
                b.s.owns = true;
                if b.mirror {
                    // Promoted in the same update: the mirror removed.
                    b.mirror = false;
                    b.sourcing = false;
                }
                s.pc = Pc::JournalMoved;
            }
            Pc::JournalMoved => {
                s.journal.phase = Ph(P::SubjectsMoved);
                s.local.exposed = false;
                self.drive(s);
            }
            // engine/steps/retire.rs
            Pc::Seal => {
                s.a.sealed = true;
                s.pc = Pc::JournalSealed;
            }
            Pc::JournalSealed => {
                s.journal.phase = Ph(P::Sealed);
                self.drive(s);
            }
            Pc::RemoveSource => {
                s.b.as_mut().expect("B").sourcing = false;
                s.pc = Pc::JournalSourceRemoved;
            }
            Pc::JournalSourceRemoved => {
                s.journal.phase = Ph(P::SourceRemoved);
                self.drive(s);
            }
            Pc::Retire => {
                s.old = Cons::gone();
                s.pc = Pc::JournalDone;
            }
            Pc::JournalDone => {
                s.journal.phase = Ph(P::Done);
                s.journal.c = Cph(C::Retired);
                s.run = Run::Finished;
                s.unguarded = false;
                s.pc = Pc::Idle;
            }
            rb => self.rollback_step(s, rb),
        }
    }

    /// The commit's intent and A's release, in the engine's order (the
    /// intent first) or, mutated, the other way round.
    fn release_first(&self) -> Pc {
        if self.mutant(Mutant::EffectBeforeJournal) {
            Pc::ReleaseA
        } else {
            Pc::JournalReleased
        }
    }
}
