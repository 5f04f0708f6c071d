//! `rollback`: undo a migration that has not passed its commit point.
//!
//! Before B takes the subjects, publishers still write to A (or are retrying
//! while A's subjects are released), so the old consumers can take over again:
//! each new durable on B is paused and settled, and if it processed messages
//! after the checkpoint, the old durable is reset past them (consumer reset,
//! 2.14+) so none is processed twice; then the new durable, its route and (if the
//! run created it) B are deleted, A's subjects restored and the old durables
//! resumed. After the commit point only rolling forward is safe.

use super::events::{Event, EventKind, Sink, StepResult, Warning};
use crate::api::{Js, Lookup, Via};
use crate::error::{Error, Result};
use crate::journal::{load_migration, now_ms, IfMissing, JournalStore, Lease};
use cutover_core::checkpoint::assess;
use cutover_core::journal::{ConsumerPhase, ConsumerProgress, Journal, Phase, Step};
use cutover_core::model::{ConsumerInfo, StreamInfo};
use cutover_core::plan::InPlaceHop;
use cutover_core::plan::Strategy;
use serde_json::json;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long a dual-write rollback waits for the publishers to acknowledge
/// writing A only (the runner's `fence_ack_timeout` default).
const DUAL_ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Fence mode: how long a rollback waits, with the old durable held, for the
/// live instances to stop fetching from the deleted new durable before it
/// gives the old one back anyway (only where its `max_deliver` is unlimited:
/// a message a stale instance naks there comes back after its delay).
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(30);

/// Fence mode: how long the old durable stays held once the last instance
/// dropped the new durable from `bound`. It dropped it on seeing the route
/// deleted, but a pull request it sent on the old durable just before, under
/// the fence, may still wait there: what the resume delivers into it is
/// nak'd as above the fence it was fetched under (docs/protocol.md R14),
/// one of the message's `max_deliver` deliveries and a `nak_delay_ms` wait
/// (30 s in a live test before this hold). R5: such a request MUST expire
/// within 1 s; a quarter second more for it to reach the consumer.
const OLD_FETCH_EXPIRY: Duration = Duration::from_millis(1250);

/// Paused "for good": until the rollback gives the durable back.
const HELD: &str = "9999-01-01T00:00:00Z";

pub async fn rollback(js: &Js, id: &str, sink: &dyn Sink, lease_ttl: Duration) -> Result<Journal> {
    let (store, j) = load_migration(js, id).await?;
    if j.phase == Phase::RolledBack {
        return Ok(j);
    }
    js.both_sides(&j.plan)?;
    refuse_rollback(&j)?;
    let mut lease = Lease::acquire(&store, &j.from, id, lease_ttl).await?;
    // Read again under the lease: a runner that held it until now may have
    // moved the migration on since the first read (and the journal writes
    // are compare-and-set on the revisions this read returns).
    let result = match store.load(id).await {
        Ok(Some(j)) if j.phase == Phase::RolledBack => Ok(j),
        Ok(Some(j)) => match refuse_rollback(&j) {
            Ok(()) => {
                let r = Undo { js, store: &store, sink }.run(j).await;
                if let Err(e) = &r {
                    note_failure(&store, id, e).await;
                }
                r
            }
            Err(e) => Err(e),
        },
        Ok(None) => Err(Error::NoMigration(format!(
            "no migration {id:?}; list them with `nats-cutover status`"
        ))),
        Err(e) => Err(e),
    };
    let _ = lease.release(&store).await;
    result
}

/// A rollback that failed part way says so in the journal, so that `status`
/// shows it as the migration's last error (it showed the run's, or none).
/// A refusal changes nothing and is not noted.
async fn note_failure(store: &JournalStore, id: &str, e: &Error) {
    if matches!(e, Error::Leased { .. }) {
        return; // another runner's journal now
    }
    if let Ok(Some(mut j)) = store.load(id).await {
        j.error = Some(format!("rollback: {e}"));
        j.updated_ms = now_ms();
        let _ = store.save(&j).await;
    }
}

/// Why migration `j` cannot be rolled back, if it cannot.
fn refuse_rollback(j: &Journal) -> Result<()> {
    let id = &j.id;
    if j.plan.in_place == Some(InPlaceHop::Back) {
        // Hop 1 deleted the old stream: undoing hop 2 alone would leave the
        // stream under the temporary name.
        return Err(Error::Unsafe(format!(
            "migration {id} is hop 2 of an in-place change: the stream's old copy is gone, so it can only be finished: {}",
            finish_hint(j)
        )));
    }
    if j.phase == Phase::Done {
        return Err(Error::Unsafe(format!(
            "migration {id} is complete: {} serves the publishers and the consumers; a rollback undoes a migration before its commit point only, so there is nothing to undo and nothing was changed",
            j.to
        )));
    }
    if j.publishers_split() {
        return Err(Error::Unsafe(format!(
            "migration {id} has its publishers split between {from} and {to}: {to} holds the subjects on the target side beside {from}, so a publisher repointed there writes into {to} only; a rollback would hide its messages from {from}'s consumers and leave it with no stream (its publishes do not cross to {from}'s side), so none can be exact; nothing was changed; finish instead: once every publisher publishes on the target side, `nats-cutover run --resume {id} --proceed`",
            from = j.from,
            to = j.to
        )));
    }
    if !j.can_roll_back() {
        return Err(Error::Unsafe(format!(
            "migration {id} passed its commit point ({}): {}",
            j.phase.as_str(),
            finish_hint(j)
        )));
    }
    Ok(())
}

/// The rollback's steps, each asking the server rather than the journal.
struct Undo<'a> {
    js: &'a Js,
    store: &'a JournalStore,
    sink: &'a dyn Sink,
}

impl Undo<'_> {
    fn emit(&self, j: &Journal, step: Step, kind: EventKind) {
        self.sink.emit(Event::new(&j.id, step, kind));
    }

    fn done(&self, j: &Journal, step: Step, result: StepResult) {
        self.emit(j, step, EventKind::StepDone { ms: None, result });
    }

    async fn run(&self, mut j: Journal) -> Result<Journal> {
        let b_now = self.js.stream_info_opt(&j.to).await?;
        if j.plan.strategy == Strategy::DualWrite {
            // B holds its own subjects from the start; the commit is the
            // journal's (written before the publisher record says `b`).
            // Publishers back to A only first: A never stopped taking them.
            super::dual::delete_record(self.store, &j.from).await?;
        } else {
            refuse_if_committed(&j, b_now.as_ref().map(|(_, b)| b))?;
            self.refuse_without_reset(&j).await?;
            self.refuse_losing_the_only_copy(&j, b_now.as_ref()).await?;
        }
        let a_now = self.a_still_serving(&j).await?;
        if let Some((a_raw, a)) = &a_now {
            if a.config.subjects != j.a_subjects {
                self.restore_subjects(&j, a_raw, b_now.as_ref()).await?;
            }
        }
        for i in 0..j.consumers.len() {
            self.undo_consumer(&j, &j.consumers[i], a_now.is_some(), b_now.is_some()).await?;
            let c = &mut j.consumers[i];
            c.phase = ConsumerPhase::Waiting;
            c.checkpoint = None;
            c.b_start = None;
            let name = c.name.clone();
            self.done(&j, Step::Consumer(name), StepResult::ConsumerRestored);
        }
        if j.created_b && self.js.stream_info_opt(&j.to).await?.is_some() {
            if j.plan.strategy == Strategy::DualWrite {
                self.await_a_only(&j).await?;
            }
            self.js.stream_delete(&j.to).await?;
            self.done(&j, Step::DeleteB, StepResult::BDeleted { stream: j.to.clone() });
        }
        // The paced copy's durable on A (steps::create), gone with B's mirror.
        if let Some(paced) = j.paced_by.clone() {
            if self.js.stream_info_opt(&j.from).await?.is_some() {
                self.js.consumer_delete(&j.from, &paced).await?;
            }
        }
        j.phase = Phase::RolledBack;
        j.in_progress = None;
        // Its advice (resume or undo) no longer applies.
        j.error = None;
        j.updated_ms = now_ms();
        self.store.save(&j).await?;
        Ok(j)
    }

    /// Dual-write: waits until every live publisher acknowledged the removed
    /// record (its registration's `ack` is `null`: it writes A only) before
    /// B, which they may still be writing, goes away. A newcomer's publisher
    /// in the middle of a dual publish, retrying B's side as the protocol
    /// says, retried it forever once B was deleted under it. Bounded: one
    /// that does not acknowledge stops the rollback with B kept and the
    /// publishers writing A (the record is gone), so running it again
    /// finishes.
    async fn await_a_only(&self, j: &Journal) -> Result<()> {
        let deadline = Instant::now() + DUAL_ACK_TIMEOUT;
        loop {
            let writing = super::dual::unacknowledged(self.js, self.store, &j.from, None).await?;
            if writing.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Stuck(format!("publisher(s) {} of {} have not acknowledged writing {} only within {DUAL_ACK_TIMEOUT:?} (the publisher record is removed); {} is kept, since they may still be writing it: run `nats-cutover rollback {}` again once they have, or once they stopped", writing.join(", "), j.from, j.from, j.to, j.id)));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Before any change: a new durable that already delivered messages can
    /// only be undone by moving the old one past them (consumer reset, 2.14+).
    /// Without it the rollback would stop half-way with both durables paused
    /// (a newcomer's trial on 2.11 was told to roll back, then refused).
    async fn refuse_without_reset(&self, j: &Journal) -> Result<()> {
        if self.js.server_version().is_some_and(|v| v.features().consumer_reset) {
            return Ok(());
        }
        for c in j.consumers.iter().filter(|c| c.phase >= ConsumerPhase::Creating) {
            // Fence mode: an old durable that delivered above its fence
            // and gives messages up after max_deliver needs a reset to
            // F + 1 (`reset_old_to_fence`).
            if let (true, Some(f)) = (j.plan.mode.is_fenced(), c.checkpoint) {
                if let Some((_, oc)) = self.js.consumer_info_opt(&j.from, &c.name).await? {
                    if oc.delivered.stream_seq > f && oc.config.max_deliver > 0 {
                        return Err(Error::Unsafe(format!(
                            "consumer {}/{} delivered messages above its fence {f} (up to {}) and gives a message up after {} deliveries (max_deliver), so one nak'd there may be given up; undoing that needs consumer reset (nats-server 2.14+), which this server lacks; nothing was changed; roll forward instead: `nats-cutover run --resume {}`",
                            j.from, c.name, oc.delivered.stream_seq, oc.config.max_deliver, j.id
                        )));
                    }
                }
            }
            let Some(start) = c.b_start else { continue };
            if let Some((_, bc)) = self.js.consumer_info_opt(&j.to, &c.name).await? {
                if bc.delivered.stream_seq >= start {
                    return Err(Error::Unsafe(format!(
                        "consumer {} already delivered messages from {} (up to {}); undoing that needs consumer reset (nats-server 2.14+), which this server lacks; nothing was changed; roll forward instead: `nats-cutover run --resume {}`",
                        c.name, j.to, bc.delivered.stream_seq, j.id
                    )));
                }
            }
        }
        Ok(())
    }

    /// A, if it can still take publishes. A stream that is gone or sealed moved
    /// on since (another migration, or by hand): nothing of it is restored; the
    /// rollback only removes what this migration left elsewhere.
    /// A rollback deletes the B it created: never while B holds messages A
    /// no longer has (A gone, or back empty: a memory stream after a server
    /// restart), which would delete their only copy.
    async fn refuse_losing_the_only_copy(
        &self,
        j: &Journal,
        b_now: Option<&(Value, StreamInfo)>,
    ) -> Result<()> {
        let Some((_, b)) = b_now else { return Ok(()) };
        if !j.created_b || b.state.messages == 0 {
            return Ok(());
        }
        // The newest of A's sequences B holds: its own where it keeps A's
        // (mirror), else its last message's origin.
        let b_holds = match j.plan.strategy {
            Strategy::Mirror => b.state.last_seq,
            _ => match self.js.last_msg(&j.to, false).await? {
                Some(m) => m.origin_seq(&j.from)?.unwrap_or(0),
                None => 0,
            },
        };
        let a_last = self.js.stream_info_opt(&j.from).await?.map(|(_, a)| a.state.last_seq);
        if a_last.is_some_and(|last| last >= b_holds) {
            return Ok(());
        }
        Err(Error::Unsafe(format!(
            "{from} {} (a memory stream does not survive a server restart), and {to} holds {n} of its messages, up to its sequence {b_holds}: their only copy; a rollback deletes {to}, so it is refused and nothing was changed; finish instead: `nats-cutover run --resume {id}` ({to} takes {from}'s subjects once every durable moved)",
            match a_last {
                None => "is gone".to_string(),
                Some(l) => format!("holds only up to sequence {l}"),
            },
            from = j.from,
            to = j.to,
            n = b.state.messages,
            id = j.id
        )))
    }

    async fn a_still_serving(&self, j: &Journal) -> Result<Option<(Value, StreamInfo)>> {
        let a_now = self.js.stream_info_opt(&j.from).await?.filter(|(_, a)| !a.config.sealed);
        if a_now.is_none() {
            let what = format!(
                "{} is gone or sealed: its subjects and consumers are left as they are",
                j.from
            );
            self.emit(j, Step::RestoreSubjects, EventKind::Warning(Warning::Skipped { what }));
        }
        Ok(a_now)
    }

    /// Publishers first: A takes its subjects back (B gives up any it holds).
    async fn restore_subjects(
        &self,
        j: &Journal,
        a_raw: &Value,
        b_now: Option<&(Value, StreamInfo)>,
    ) -> Result<()> {
        if let Some((b_raw, b)) = b_now {
            if !b.config.subjects.is_empty() {
                let mut cfg = b_raw["config"].clone();
                cfg["subjects"] = json!([]);
                self.js.stream_update(&cfg).await?;
            }
        }
        let mut cfg = a_raw["config"].clone();
        cfg["subjects"] = json!(j.a_subjects);
        self.js.stream_update(&cfg).await?;
        let subjects = j.a_subjects.clone();
        self.done(j, Step::RestoreSubjects, StepResult::SubjectsRestored { subjects });
        Ok(())
    }

    /// One consumer: the new durable (if it may exist and does) is held,
    /// settled, the old one reset past what it processed, and it is deleted
    /// with its route; the old durable gets its state back.
    async fn undo_consumer(
        &self,
        j: &Journal,
        c: &ConsumerProgress,
        a_serving: bool,
        b_exists: bool,
    ) -> Result<()> {
        // From `creating` on, the new durable may exist (its create request was
        // journaled first): the server says whether it does.
        // Fence mode: the old durable is held first, before anything of it
        // is read, and stays held until the instances followed the route's
        // deletion (`hold_old`): what the reads below see is then all it
        // delivered.
        let fenced = j.plan.mode.is_fenced() && a_serving;
        if c.phase >= ConsumerPhase::Creating {
            if fenced {
                self.hold_old(j, c).await?;
            }
            let on_b = match b_exists {
                true => self.js.consumer_info_opt(&j.to, &c.name).await?,
                false => None,
            };
            if on_b.is_some() && j.plan.strategy == Strategy::DualWrite {
                // Dual-write: the old durable never stopped and both sides
                // claim each id in the idempotency guard, so the new durable
                // is only deleted (settling it could wait forever: a paused
                // durable does not redeliver what its instances nak'd as
                // claimed elsewhere).
                self.js.consumer_delete(&j.to, &c.name).await?;
            } else if on_b.is_some() {
                let f_b = self.settle_new_durable(j, &c.name).await?;
                let past = f_b >= c.b_start.unwrap_or(u64::MAX) && a_serving;
                let undone = async {
                    if past {
                        // Where the old durable resumes, known before its
                        // settle: only a settle a reset follows may cut its
                        // hold (`settle_old_to_fence`).
                        let target = self.past_origin(j, c, f_b).await?;
                        if fenced {
                            // A reset forgets what is pending: the old
                            // consumer's messages up to the fence must be
                            // acknowledged first.
                            self.settle_old_to_fence(j, c, target.is_some()).await?;
                        }
                        match target {
                            Some(o) => self.reset_old_past(j, c, o).await,
                            None => Ok(()),
                        }
                    } else if fenced {
                        self.reset_old_to_fence(j, c).await
                    } else {
                        Ok(())
                    }
                };
                if let Err(e) = undone.await {
                    // The new durable serves on: never leave it held (the
                    // old one stays held, as the run holds it between its
                    // steps in fence mode; a resume or a rollback again
                    // gives it back).
                    let _ = self.js.consumer_pause(&j.to, &c.name, None).await;
                    return Err(e);
                }
                self.js.consumer_delete(&j.to, &c.name).await?;
            }
            self.store.delete_route(&j.from, &c.name).await?;
            if fenced {
                self.await_followers(j, c).await?;
            }
        }
        // As the operator left it: running, or paused until the same time (a
        // durable deleted since, with its stream moved on, stays gone).
        let can_pause = self.js.server_version().is_some_and(|v| v.features().consumer_pause);
        if a_serving && (c.was_paused || can_pause) {
            match self.js.consumer_pause(&j.from, &c.name, c.paused_until.as_deref()).await {
                Ok(_) | Err(Error::ConsumerNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Holds the new durable still and returns what it settled: its delivered
    /// stream sequence once nothing is ack-pending. Held, it redelivers
    /// nothing, so its hold is cut when no ack comes (`settle_held`): what
    /// it delivers then is processed there as before the rollback, and the
    /// old durable is reset past it.
    async fn settle_new_durable(&self, j: &Journal, name: &str) -> Result<u64> {
        self.js.consumer_pause(&j.to, name, Some(HELD)).await?;
        let settled = self.settle_held(j, name, &j.to, true, |ci| assess(ci).stable).await;
        match settled {
            Ok(Ok(ci)) => Ok(ci.delivered.stream_seq),
            Err(e) => {
                // It serves on: never left held.
                let _ = self.js.consumer_pause(&j.to, name, None).await;
                Err(e)
            }
            Ok(Err((ci, cuts))) => {
                let _ = self.js.consumer_pause(&j.to, name, None).await;
                let on = format!("{}/{name}", j.to);
                let holders: Vec<String> = self
                    .store
                    .instances(Some((&j.from, name)))
                    .await
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|i| i.live && i.record.bound.contains(&on))
                    .map(|i| i.record.instance)
                    .collect();
                let by = match holders.is_empty() {
                    true => String::new(),
                    false => {
                        format!(" (live instance(s) fetching from it: {})", holders.join(", "))
                    }
                };
                Err(Error::Stuck(format!("consumer {on} did not settle for the rollback: {} message(s) still unacknowledged though it was resumed {cuts} time(s) for their redelivery{by}: its workers hold them; it serves on, nothing was undone; try the rollback again", ci.num_ack_pending)))
            }
        }
    }

    /// Waits, with `stream/name` held, until `settled` holds on a read taken
    /// while held. A held consumer redelivers nothing, so a message an
    /// instance died holding would wait for ever (a newcomer's rollback on
    /// R3 failed after 60 s, again and again): with `can_cut`, when no ack
    /// comes for min(ack_wait, 2 s), the hold is cut as the run's drain cuts
    /// its pause: resumed until the ack floor moves, nothing is pending or an
    /// ack_wait passed, then held again. `Err((last read, cuts))` after
    /// max(60 s, 3 × ack_wait).
    async fn settle_held(
        &self,
        j: &Journal,
        name: &str,
        stream: &str,
        can_cut: bool,
        settled: impl Fn(&ConsumerInfo) -> bool,
    ) -> Result<std::result::Result<ConsumerInfo, (ConsumerInfo, u32)>> {
        let (_, first) = self.js.consumer_info(stream, name).await?;
        let ack_wait =
            cutover_core::model::nanos(first.config.ack_wait).max(Duration::from_millis(1));
        let stall = ack_wait.min(Duration::from_secs(2));
        let timeout = Duration::from_secs(60).max(ack_wait * 3);
        let (started, mut last_emit) = (Instant::now(), Instant::now());
        let deadline = started + timeout;
        let (mut floor, mut moved_at, mut cuts) =
            (first.ack_floor.stream_seq, Instant::now(), 0u32);
        loop {
            let (_, ci) = self.js.consumer_info(stream, name).await?;
            if settled(&ci) {
                return Ok(Ok(ci));
            }
            // Not silent while it waits (a newcomer saw nothing for a
            // minute but the cuts' warnings).
            if last_emit.elapsed() >= Duration::from_secs(1) {
                let p = super::events::Progress::RollbackSettling {
                    stream: stream.into(),
                    ack_pending: ci.num_ack_pending,
                    delivered: ci.delivered.stream_seq,
                    ack_floor: ci.ack_floor.stream_seq,
                    waited_ms: started.elapsed().as_millis() as u64,
                    timeout_ms: timeout.as_millis() as u64,
                };
                self.emit(j, Step::Consumer(name.into()), EventKind::Progress(p));
                last_emit = Instant::now();
            }
            if ci.ack_floor.stream_seq != floor {
                (floor, moved_at) = (ci.ack_floor.stream_seq, Instant::now());
            }
            if Instant::now() > deadline {
                return Ok(Err((ci, cuts)));
            }
            if can_cut && moved_at.elapsed() > stall {
                let cut = Warning::PauseCut {
                    stall_ms: stall.as_millis() as u64,
                    ack_pending: ci.num_ack_pending,
                };
                self.emit(j, Step::Consumer(name.into()), EventKind::Warning(cut));
                if let Err(e) = self.js.consumer_pause(stream, name, None).await {
                    // Its answer may be lost with the resume applied.
                    self.hold(stream, name).await?;
                    return Err(e);
                }
                let resumed = Instant::now();
                let cut = loop {
                    let read = self.js.consumer_info(stream, name).await;
                    let done = match &read {
                        Ok((_, n)) => n.num_ack_pending == 0 || n.ack_floor.stream_seq != floor,
                        Err(_) => true,
                    };
                    if done || resumed.elapsed() > ack_wait {
                        break read.map(|_| ());
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                // Held again before anything else, even after a failed read.
                self.hold(stream, name).await?;
                cut?;
                (cuts, moved_at) = (cuts + 1, Instant::now());
                continue;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Fence mode: waits until the old consumer has nothing unacknowledged up
    /// to the fence (its instances finish them; the old durable is held, and
    /// a held consumer still counts acks). Its hold is cut for a dead
    /// instance's messages (`settle_held`) only where a reset follows
    /// (consumer reset, 2.14+): the reset forgets what was pending and every
    /// delivery count (`resetLocalStartingSeq`), so what a cut delivers
    /// above F, nak'd by instances that still know the fence, is as if
    /// undelivered.
    async fn settle_old_to_fence(
        &self,
        j: &Journal,
        c: &ConsumerProgress,
        resets: bool,
    ) -> Result<()> {
        let f = c.checkpoint.unwrap_or(0);
        let can_cut =
            resets && self.js.server_version().is_some_and(|v| v.features().consumer_reset);
        let settled = |ci: &ConsumerInfo| ci.ack_floor.stream_seq >= f || ci.num_ack_pending == 0;
        let Err((ci, cuts)) = self.settle_held(j, &c.name, &j.from, can_cut, settled).await? else {
            return Ok(());
        };
        let why = match can_cut {
            true => format!("they were not acknowledged though the consumer was resumed {cuts} time(s) for their redelivery: its instances hold them"),
            false => "it is held, and a held consumer redelivers nothing: an instance that died holding them gets them back only once it runs (this server has no consumer reset, so the rollback cannot let it run here)".to_string(),
        };
        Err(Error::Stuck(format!("consumer {}/{} still has {} unacknowledged message(s) up to the fence {f} (ack floor {}): {why}; try the rollback again, or finish with `nats-cutover run --resume {}`", j.from, c.name, ci.num_ack_pending, ci.ack_floor.stream_seq, j.id)))
    }

    /// Fence mode, the new durable delivered nothing of its own: the old one
    /// may have delivered above the fence F meanwhile (the settle resumes it
    /// for a dead instance's messages), and its instances nak those (the
    /// new durable has them) until `max_deliver` gives them up there; given
    /// back as it is, the old durable would never deliver them again: lost
    /// (found by the model checker: docs/model.md, finding 3). So it is
    /// reset to F + 1 (consumer reset, 2.14+; without it, an unlimited
    /// `max_deliver` redelivers them after their nak delay, and a limited
    /// one makes `refuse_without_reset` refuse the rollback before any
    /// change). The old durable is held already (`undo_consumer`), so the
    /// delivered read here cannot grow before the reset: read running, a
    /// delivery above F between the read and the hold would be nak'd once,
    /// its last delivery with `max_deliver` 1.
    async fn reset_old_to_fence(&self, j: &Journal, c: &ConsumerProgress) -> Result<()> {
        let Some(f) = c.checkpoint else { return Ok(()) };
        let limited = match self.js.consumer_info_opt(&j.from, &c.name).await? {
            Some((_, oc)) if oc.delivered.stream_seq > f => oc.config.max_deliver > 0,
            _ => return Ok(()),
        };
        if !self.js.server_version().is_some_and(|v| v.features().consumer_reset) {
            if !limited {
                return Ok(());
            }
            return Err(Error::Unsafe(format!("consumer {}/{} delivered messages above its fence {f} and gives a message up after max_deliver deliveries; giving it back needs consumer reset (2.14+), which this server lacks; roll forward instead: `nats-cutover run --resume {}`", j.from, c.name, j.id)));
        }
        // Held, it delivers nothing more; acks still count (a paused
        // consumer accepts them), so its instances finish what is theirs.
        self.settle_old_to_fence(j, c, true).await?;
        self.reset_old_to(j, c, f + 1).await
    }

    /// Fence mode: the old durable paused before the rollback reads it, until
    /// the instances followed the route's deletion. Resumed meanwhile (the
    /// settle's resume for a dead instance's messages, left running by a
    /// killed runner), it delivered above F to instances that still knew
    /// the fence, which nak'd each delivery until `max_deliver` gave the
    /// message up there: after the rollback nobody processed it (found by
    /// the model checker: docs/model.md, finding 3). Paused, it delivers
    /// nothing, acks still count, and a reset (consumer.go
    /// `resetLocalStartingSeq` forgets pending messages and their delivery
    /// counts, `o.pending, o.rdc = nil, nil`) starts it afresh.
    async fn hold_old(&self, j: &Journal, c: &ConsumerProgress) -> Result<()> {
        self.hold(&j.from, &c.name).await
    }

    /// Pauses `stream/name` until the rollback gives it back (`HELD`); a
    /// durable that is gone needs no hold.
    async fn hold(&self, stream: &str, name: &str) -> Result<()> {
        match self.js.consumer_pause(stream, name, Some(HELD)).await {
            Ok(_) | Err(Error::ConsumerNotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Fence mode, the route deleted: waits until no live instance lists
    /// the new durable in its `bound` (docs/protocol.md R9: it drops it once
    /// it saw the deletion, R1, and with it the fence) before the old
    /// durable is given back, so none naks what it then delivers as above a
    /// fence it no longer has. With `max_deliver` unlimited a nak only
    /// delays a message: after `FOLLOW_TIMEOUT` the old durable is given
    /// back anyway, with a warning naming them; limited, the wait has no
    /// deadline (one nak there may be a message's last delivery) and names
    /// them as it goes. Once none lists it, the old durable stays held for
    /// `OLD_FETCH_EXPIRY`, until a pull request sent under the fence expired.
    async fn await_followers(&self, j: &Journal, c: &ConsumerProgress) -> Result<()> {
        let Some((_, oc)) = self.js.consumer_info_opt(&j.from, &c.name).await? else {
            return Ok(());
        };
        let limited = oc.config.max_deliver > 0;
        let on_new = format!("{}/{}", j.to, c.name);
        let step = Step::Consumer(c.name.clone());
        let deadline = Instant::now() + FOLLOW_TIMEOUT;
        let mut last: Option<Vec<String>> = None;
        loop {
            let live = self.store.instances(Some((&j.from, &c.name))).await?;
            let still: Vec<String> = live
                .into_iter()
                .filter(|i| i.live && i.record.bound.contains(&on_new))
                .map(|i| i.record.instance)
                .collect();
            if still.is_empty() {
                // Seen now; its last fetch under the fence went out before.
                tokio::time::sleep(OLD_FETCH_EXPIRY).await;
                return Ok(());
            }
            if !limited && Instant::now() > deadline {
                let w = Warning::StillOnNewDurable { consumer: on_new, instances: still };
                self.emit(j, step, EventKind::Warning(w));
                return Ok(());
            }
            if last.as_ref() != Some(&still) {
                let left = deadline.saturating_duration_since(Instant::now()).as_millis() as u64;
                let p = super::events::Progress::AwaitFollowers {
                    consumer: on_new.clone(),
                    instances: still.clone(),
                    deadline_ms: (!limited).then_some(left),
                };
                self.emit(j, step.clone(), EventKind::Progress(p));
                last = Some(still);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The new durable processed B messages up to `f_b`: the old one must
    /// resume after their origin sequence (consumer reset, 2.14+).
    /// The origin on A of the new durable's last delivery `f_b`, if above
    /// the checkpoint: the old durable resumes after it.
    async fn past_origin(
        &self,
        j: &Journal,
        c: &ConsumerProgress,
        f_b: u64,
    ) -> Result<Option<u64>> {
        let (_, b) = self.js.stream_info(&j.to).await?;
        let via = Via::direct_if(b.config.exact_direct_gets());
        let origin = if j.plan.strategy == Strategy::Mirror {
            // A mirror has A's sequences.
            Some(f_b)
        } else {
            match self.js.get_msg(&j.to, f_b, Lookup::Exact, via).await? {
                Some(m) => m.origin_seq(&j.from)?,
                None => None,
            }
        };
        Ok(origin.filter(|o| Some(*o) > c.checkpoint))
    }

    /// The old durable resumes after origin `o` (`past_origin`).
    async fn reset_old_past(&self, j: &Journal, c: &ConsumerProgress, o: u64) -> Result<()> {
        if !self.js.server_version().is_some_and(|v| v.features().consumer_reset) {
            return Err(Error::Unsafe(format!("consumer {} processed messages on {} up to origin {o}; moving the old durable past them needs consumer reset (2.14+), which this server lacks; nothing was undone; roll forward instead: `nats-cutover run --resume {}`", c.name, j.to, j.id)));
        }
        self.reset_old_to(j, c, o + 1).await
    }

    /// The old durable resets to deliver from `seq` (consumer reset, 2.14+).
    async fn reset_old_to(&self, j: &Journal, c: &ConsumerProgress, seq: u64) -> Result<()> {
        self.js
            .api(
                &format!("reset consumer {}/{}", j.from, c.name),
                &format!("CONSUMER.RESET.{}.{}", j.from, c.name),
                &json!({ "seq": seq }),
            )
            .await?;
        let step = Step::Consumer(c.name.clone());
        self.done(j, step, StepResult::ConsumerReset { reset_to: seq });
        Ok(())
    }
}

/// The journal may trail the server by one write (it is written before each
/// effect): once B holds the subjects, the commit happened.
fn refuse_if_committed(j: &Journal, b: Option<&StreamInfo>) -> Result<()> {
    let finals = &j.plan.b_final_subjects;
    match b {
        Some(b) if !finals.is_empty() && &b.config.subjects == finals => {
            Err(Error::Unsafe(format!(
                "migration {} passed its commit point ({} holds the subjects): {}",
                j.id,
                j.to,
                finish_hint(j)
            )))
        }
        _ => Ok(()),
    }
}

/// What finishes a migration past its commit point: the same in-place
/// command (it resumes whichever hop is under way), or `run --resume`.
fn finish_hint(j: &Journal) -> String {
    let stream = match j.plan.in_place {
        Some(InPlaceHop::Out) => &j.from,
        Some(InPlaceHop::Back) => &j.to,
        None => {
            return format!(
                "publishers write to {} now, so only rolling forward is safe: `nats-cutover run --resume {}`",
                j.to, j.id
            )
        }
    };
    let resume = match j.plan.in_place {
        Some(InPlaceHop::Out) => {
            format!("`nats-cutover run --resume {}` (it goes on through hop 2)", j.id)
        }
        _ => format!("`nats-cutover run --resume {}`", j.id),
    };
    format!(
        "only finishing the in-place change of {stream} is safe: {resume}, or its own command again (`nats-cutover run --in-place {stream}`, `nats-cutover kv|obj BUCKET` for a bucket, with the same settings); either resumes whichever hop is under way"
    )
}

pub async fn list(js: &Js) -> Result<Vec<Journal>> {
    match JournalStore::open(js, IfMissing::ReturnNone).await? {
        Some(s) => s.list().await,
        None => Ok(vec![]),
    }
}

/// What `forget` removed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Forgotten {
    pub id: String,
    /// The journal's phase, if there was one.
    pub phase: Option<Phase>,
    /// An expired lease of this migration was removed too.
    pub lease_removed: bool,
}

/// Removes the record of a migration that is over (done, rolled back) or never
/// changed anything, and its expired lease; refuses a live one. The routes of a
/// finished migration stay: applications follow them.
pub async fn forget(js: &Js, id: &str) -> Result<Forgotten> {
    let store = JournalStore::open(js, IfMissing::ReturnNone).await?.ok_or_else(|| {
        Error::NoMigration(
            "no migration journal on this server (KV bucket CUTOVER does not exist)".into(),
        )
    })?;
    let journal = store.load(id).await?;
    if let Some(j) = &journal {
        let untouched = j.phase == Phase::Planned
            && !j.created_b
            && j.consumers.iter().all(|c| c.phase == ConsumerPhase::Waiting);
        // A gone before the commit (a memory stream lost in a restart):
        // the resume says nothing can finish it and names `forget` once the
        // operator recreated the durables; forget refused it as under way
        // (a newcomer went round resume, forget and rollback, each refusing).
        // Forgetting changes nothing on the server: B, the only copy, stays.
        // Only while no durable moved: one made on B (or maybe made) is
        // the resume's to finish from the copy, which forgetting would strand.
        let a_lost = !j.phase.committed()
            && j.consumers.iter().all(|c| c.phase < ConsumerPhase::Creating)
            && j.phase != Phase::RolledBack
            && js.stream_info_opt(&j.from).await?.is_none()
            && js.stream_info_opt(&j.to).await?.is_some();
        if !(j.phase == Phase::Done || j.phase == Phase::RolledBack || untouched || a_lost) {
            // Server state stops it, not an unsafe plan (it was shown as
            // "the plan is unsafe: ..." and exited 3).
            return Err(Error::Journal(format!(
                "migration {id} is under way ({}): forgetting it would lose what it changed; finish it with `nats-cutover run --resume {id}` or undo it with `nats-cutover rollback {id}` first",
                j.phase.as_str()
            )));
        }
    }
    let lease = store.leases().await?.into_iter().find(|l| l.migration == id);
    if let Some(l) = &lease {
        if l.live {
            return Err(crate::journal::leased(id.into(), l.holder.clone(), l.expires_ms));
        }
    }
    if journal.is_none() && lease.is_none() {
        return Err(Error::NoMigration(format!(
            "no migration {id:?} and no lease of it; `nats-cutover status` lists them"
        )));
    }
    if journal.is_some() {
        store.delete_journal(id).await?;
    }
    if let Some(l) = &lease {
        store.delete_lease(&l.stream).await?;
    }
    Ok(Forgotten { id: id.into(), phase: journal.map(|j| j.phase), lease_removed: lease.is_some() })
}

/// Every registered application instance, for `status` (docs/protocol.md).
pub async fn instances(js: &Js) -> Result<Vec<crate::journal::Instance>> {
    match JournalStore::open(js, IfMissing::ReturnNone).await? {
        Some(s) => s.instances(None).await,
        None => Ok(vec![]),
    }
}

/// Every lease, for `status` (orphans included: a lease whose migration has
/// no journal, left by a runner that died before writing one).
pub async fn leases(js: &Js) -> Result<Vec<crate::journal::LeaseInfo>> {
    match JournalStore::open(js, IfMissing::ReturnNone).await? {
        Some(s) => s.leases().await,
        None => Ok(vec![]),
    }
}
