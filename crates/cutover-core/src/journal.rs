//! The migration journal: one record per migration, in a KV bucket on the same
//! server, written before each step takes effect and after it completes.
//!
//! Every step is idempotent and re-checks the server, so the journal only needs
//! to say how far the migration got: `run` on an interrupted migration resumes
//! from [`Journal::phase`]. The record is also the control record applications
//! follow (see [`Route`]): it is designed so that a later "fence" handoff can be
//! driven from the same bucket without a format change (new fields only).
//!
//! # Stored as records (format 2)
//!
//! A KV value is at most the server's max_payload (1 MiB by default), and a
//! journal of 1,000 consumers is about 2 MB. Format 2 stores it as a head
//! record at [`journal_key`] (everything but the consumers: the plan without
//! its consumers and their findings, the list of consumer names) and one
//! record per consumer at [`consumer_key`] ([`ConsumerRecord`]: its plan, its
//! findings with their places in the plan, its progress). [`split`] and
//! [`join`] convert; they round-trip exactly.
//!
//! Each consumer's progress is written by that consumer's task alone, and the
//! head only by the steps that run one at a time, so no write depends on
//! another record being written with it: a runner killed between two writes
//! leaves every record as its last write, which is what resume reconciles.
//! A new journal's consumer records are written before its head: without a
//! head there is no migration (a kill before it leaves records the next run
//! overwrites). Format 1 (one value with every consumer) is still read; the
//! next save writes it as records, head last.
//!
//! The head has no `consumers` field, so a runner of format 1 cannot read it
//! (it refuses the journal as unreadable rather than see no consumers).

use crate::compat::Finding;
use crate::plan::{ConsumerPlan, Plan};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const BUCKET: &str = "CUTOVER";
pub const JOURNAL_FORMAT: u32 = 2;

pub fn migration_id(from: &str, to: &str) -> String {
    // Stream names cannot contain '.', so this is unambiguous and a valid key.
    format!("{from}.{to}")
}

pub fn journal_key(id: &str) -> String {
    format!("m.{id}")
}

/// Format 2: consumer `consumer`'s record of migration `id`.
pub fn consumer_key(id: &str, consumer: &str) -> String {
    format!("mc.{id}.{consumer}")
}

/// The key prefix of every consumer record of migration `id`.
pub fn consumer_prefix(id: &str) -> String {
    format!("mc.{id}.")
}

/// The operator's go-ahead for migration `id` waiting with its publishers
/// split between A and B (`run --resume ID --proceed` writes it; the waiting
/// runner watches it; docs/cross-system.md).
pub fn proceed_key(id: &str) -> String {
    format!("proceed.{id}")
}

pub fn lease_key(from: &str) -> String {
    format!("lease.{from}")
}

/// Where applications find the consumer they should read from.
pub fn route_key(stream: &str, consumer: &str) -> String {
    format!("route.{stream}.{consumer}")
}

/// Where an application instance of `stream`/`consumer` (its home binding)
/// registers (docs/protocol.md).
pub fn instance_key(stream: &str, consumer: &str, instance: &str) -> String {
    format!("inst.{stream}.{consumer}.{instance}")
}

/// The key prefix of every instance of `stream`/`consumer`.
pub fn instance_prefix(stream: &str, consumer: &str) -> String {
    format!("inst.{stream}.{consumer}.")
}

/// An instance id is one KV key token: letters, digits, `_` and `-`.
pub fn valid_instance_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Phases in order. Everything before [`Phase::SubjectsMoved`] can be rolled
/// back; from it on, publishers write to B and only rolling forward is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Planned,
    BReady,
    CaughtUp,
    ConsumersMoved,
    /// Across systems with publishers repointed by the operator
    /// (`External::split_publishers`): B took A's subjects on the target
    /// side while it still sources A, and A keeps its own; publishers may be
    /// on either side. Journaled before B's update.
    SubjectsShared,
    SubjectsReleased,
    SubjectsMoved,
    Sealed,
    SourceRemoved,
    Done,
    RolledBack,
}

/// The steps of a run (strategies source and mirror), in their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RunStep {
    CreateB,
    CatchUp,
    MoveConsumers,
    /// B takes A's subjects (with what goes before it: durables created on A
    /// meanwhile moved too, a hand-over, split publishers).
    Commit,
    Seal,
    RemoveSource,
    Retire,
}

impl Phase {
    /// The step a run takes next from this journaled phase (`None`: nothing
    /// is left, done or rolled back): the one ladder the engine's `drive`
    /// (engine/run.rs) and the model's runner (cutover-model) follow, so a
    /// resumed run starts where the last one stopped.
    pub fn next_step(self) -> Option<RunStep> {
        Some(match self {
            Phase::Planned => RunStep::CreateB,
            Phase::BReady => RunStep::CatchUp,
            Phase::CaughtUp => RunStep::MoveConsumers,
            Phase::ConsumersMoved | Phase::SubjectsShared | Phase::SubjectsReleased => {
                RunStep::Commit
            }
            Phase::SubjectsMoved => RunStep::Seal,
            Phase::Sealed => RunStep::RemoveSource,
            Phase::SourceRemoved => RunStep::Retire,
            Phase::Done | Phase::RolledBack => return None,
        })
    }

    /// Whether `step` is still to run from this phase (it or one before
    /// it is next).
    pub fn due(self, step: RunStep) -> bool {
        self.next_step().is_some_and(|next| next <= step)
    }

    pub fn committed(self) -> bool {
        self >= Phase::SubjectsMoved && self != Phase::RolledBack
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Planned => "planned",
            Phase::BReady => "b_ready",
            Phase::CaughtUp => "caught_up",
            Phase::ConsumersMoved => "consumers_moved",
            Phase::SubjectsShared => "subjects_shared",
            Phase::SubjectsReleased => "subjects_released",
            Phase::SubjectsMoved => "subjects_moved",
            Phase::Sealed => "sealed",
            Phase::SourceRemoved => "source_removed",
            Phase::Done => "done",
            Phase::RolledBack => "rolled_back",
        }
    }
}

/// A step of a migration, as the journal, the events, the metrics and the
/// report name it. Its text (`create_b`, `consumer worker`, ...) is the stable
/// name in JSON and in the journal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    CreateB,
    CatchUp,
    MoveConsumers,
    /// One consumer's drain, checkpoint and move (a sub-step of move_consumers).
    Consumer(String),
    MovePublishers,
    /// Strategy mirror where the server drops a mirror's window: B handed
    /// over from mirroring to sourcing A ([`Plan::handover`]).
    Handover,
    /// Publishers split across systems: B takes A's subjects on its side.
    ShareSubjects,
    /// Publishers split across systems: the wait for the operator (or for
    /// A to go idle) before A is sealed.
    AwaitPublishers,
    SealA,
    RemoveSource,
    Retire,
    /// Rollback: A takes its subjects back.
    RestoreSubjects,
    /// Rollback: B, created by the run, is deleted.
    DeleteB,
    /// A run that found its migration under way or finished.
    Resume,
    Done,
    /// A name this version does not know (a newer runner's journal).
    Other(String),
}

impl Step {
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        use std::borrow::Cow::Borrowed;
        match self {
            Step::CreateB => Borrowed("create_b"),
            Step::CatchUp => Borrowed("catch_up"),
            Step::MoveConsumers => Borrowed("move_consumers"),
            Step::Consumer(c) => format!("consumer {c}").into(),
            Step::MovePublishers => Borrowed("move_publishers"),
            Step::ShareSubjects => Borrowed("share_subjects"),
            Step::AwaitPublishers => Borrowed("await_publishers"),
            Step::SealA => Borrowed("seal_a"),
            Step::RemoveSource => Borrowed("remove_source"),
            Step::Handover => Borrowed("handover"),
            Step::Retire => Borrowed("retire"),
            Step::RestoreSubjects => Borrowed("restore_subjects"),
            Step::DeleteB => Borrowed("delete_b"),
            Step::Resume => Borrowed("resume"),
            Step::Done => Borrowed("done"),
            Step::Other(s) => Borrowed(s),
        }
    }

    pub fn parse(s: &str) -> Step {
        match s {
            "create_b" => Step::CreateB,
            "catch_up" => Step::CatchUp,
            "move_consumers" => Step::MoveConsumers,
            "move_publishers" => Step::MovePublishers,
            "share_subjects" => Step::ShareSubjects,
            "await_publishers" => Step::AwaitPublishers,
            "seal_a" => Step::SealA,
            "remove_source" => Step::RemoveSource,
            "handover" => Step::Handover,
            "retire" => Step::Retire,
            "restore_subjects" => Step::RestoreSubjects,
            "delete_b" => Step::DeleteB,
            "resume" => Step::Resume,
            "done" => Step::Done,
            _ => match s.strip_prefix("consumer ") {
                Some(c) => Step::Consumer(c.into()),
                None => Step::Other(s.into()),
            },
        }
    }

    /// The consumer this step is about, if any.
    pub fn consumer(&self) -> Option<&str> {
        match self {
            Step::Consumer(c) => Some(c),
            _ => None,
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl Serialize for Step {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Step::parse(&String::deserialize(d)?))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerPhase {
    Waiting,
    /// Paused for good (far-future pause) and settled at `checkpoint`.
    Settled,
    /// About to create the new durable on B at `b_start` (journaled before the
    /// create request): it may or may not exist; resume and rollback ask the server.
    Creating,
    /// Fence mode: the new durable exists on B at `b_start` and the route
    /// record (state `fenced`) is published; the old durable is still
    /// finishing its messages up to the checkpoint (the fence).
    Fenced,
    /// The new durable exists on B at `b_start` (in fence mode: and the old
    /// one acknowledged everything up to the fence).
    Created,
    /// The old durable is deleted.
    Retired,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerProgress {
    pub name: String,
    pub phase: ConsumerPhase,
    /// The old consumer was paused before we started (rollback keeps it paused).
    pub was_paused: bool,
    /// The operator's `pause_until` on the old consumer when the run started:
    /// rollback restores it and the new durable is created with it.
    #[serde(default)]
    pub paused_until: Option<String>,
    pub checkpoint: Option<u64>,
    pub b_start: Option<u64>,
    pub translate_gets: Option<u32>,
    /// Times a stuck worker's message had to be let through (resume briefly).
    pub nudges: u32,
    pub drain_ms: Option<u64>,
    /// The longest single pause of the old consumer while it drained.
    #[serde(default)]
    pub longest_pause_ms: Option<u64>,
    /// The paused, settled consumer state the checkpoint was taken from
    /// (delivered, ack_floor, num_ack_pending, num_pending, paused): the
    /// evidence `verify` checks.
    #[serde(default)]
    pub evidence: Option<Settled>,
    /// Fence mode: the old consumer's state once nothing up to the fence was
    /// unacknowledged (ack floor >= F, or nothing ack-pending): `verify`'s
    /// evidence that every message up to F was settled on the old consumer.
    #[serde(default)]
    pub fence_settled: Option<Settled>,
    /// Drain mode: the old consumer's state when it was retired. Paused for
    /// good since F was taken, it delivered nothing since: a delivered
    /// sequence above F here means F was read short (a consumer leader
    /// change, seen once on a cluster in fence mode), and `verify` says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_state: Option<Settled>,
    /// The new durable's filters on B (empty: all).
    #[serde(default)]
    pub b_filters: Vec<String>,
}

/// Where one consumer's move goes on from its journaled progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerResume {
    /// Its new durable exists (fence mode: and the old one acknowledged
    /// everything up to the fence): only its route is written again.
    Moved,
    /// Fence mode: the new durable exists at `start` and the route says
    /// `fenced` at F: the handoff goes on settling to F.
    Fenced { f: u64, start: u64 },
    /// A checkpoint F was journaled: it is kept if the old durable, paused
    /// for good again, delivered nothing since ([`ConsumerProgress::evidence_holds`]),
    /// else taken again.
    Checkpointed { f: u64 },
    /// Nothing journaled to keep: the drain (or fence mode's gate) takes F.
    Fresh,
}

impl ConsumerProgress {
    /// The one rule of where a consumer's move goes on, followed by the
    /// engine (steps/consumers.rs, steps/drain.rs `checkpoint`, fence.rs
    /// `move_consumer` and `take_fence`) and the model's runner.
    pub fn resume(&self) -> ConsumerResume {
        match (self.phase, self.checkpoint, self.b_start) {
            (ConsumerPhase::Created | ConsumerPhase::Retired, _, _) => ConsumerResume::Moved,
            (ConsumerPhase::Fenced, Some(f), Some(start)) => ConsumerResume::Fenced { f, start },
            (ConsumerPhase::Settled | ConsumerPhase::Creating, Some(f), _) => {
                ConsumerResume::Checkpointed { f }
            }
            _ => ConsumerResume::Fresh,
        }
    }

    /// Whether the journaled checkpoint still holds, read from the old
    /// durable paused for good again (`checkpoint_holds`, steps/durable.rs):
    /// it delivered nothing since the evidence was taken. Without evidence
    /// it is taken again.
    pub fn evidence_holds(&self, paused: bool, delivered_stream_seq: u64) -> bool {
        self.evidence
            .as_ref()
            .is_some_and(|e| paused && delivered_stream_seq == e.delivered_stream_seq)
    }

    /// A consumer not moved yet, as the run found it (`paused_until`: the
    /// operator's pause, kept).
    pub fn waiting(name: &str, paused_until: Option<String>) -> Self {
        ConsumerProgress {
            name: name.into(),
            phase: ConsumerPhase::Waiting,
            was_paused: paused_until.is_some(),
            paused_until,
            checkpoint: None,
            b_start: None,
            translate_gets: None,
            nudges: 0,
            drain_ms: None,
            longest_pause_ms: None,
            evidence: None,
            fence_settled: None,
            retired_state: None,
            b_filters: vec![],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    pub delivered_stream_seq: u64,
    pub ack_floor_stream_seq: u64,
    pub num_ack_pending: u64,
    pub num_pending: u64,
    pub paused: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: Step,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    pub format: u32,
    pub id: String,
    pub from: String,
    pub to: String,
    pub plan: Plan,
    pub phase: Phase,
    /// The step under way (written before it takes effect).
    pub in_progress: Option<Step>,
    /// The run creates (or created) B: journaled before the create request, so
    /// rollback deletes B if it exists whatever moment the runner died at.
    pub created_b: bool,
    pub consumers: Vec<ConsumerProgress>,
    /// A's configuration before the run touched it (rollback restores subjects).
    pub a_subjects: Vec<String>,
    /// A's last sequence once it released its subjects.
    pub a_final_seq: Option<u64>,
    pub delete_old: bool,
    /// Leave the old durables in place (paused for good) instead of deleting
    /// them, for applications that are redeployed after the run.
    #[serde(default)]
    pub keep_old_consumers: bool,
    pub started_ms: u64,
    pub updated_ms: u64,
    pub steps: Vec<StepRecord>,
    pub error: Option<String>,
    /// Strategy dual-write: where dual-writing began (docs/protocol.md).
    #[serde(default)]
    pub dual: Option<DualProgress>,
    /// Publishers split across systems: where B was when it took the
    /// subjects beside A (journaled with the phase, before B's update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedAt>,
    /// `run --seal-when-idle`, in milliseconds: kept, so a resume without
    /// the flag goes on waiting the same way (a newcomer's waited for a
    /// go-ahead for good).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal_when_idle_ms: Option<u64>,
    /// Durables that appeared on A after its commit (created by an
    /// application meanwhile): left on A, which takes nothing new; named by
    /// the run and by verify, which does not hold while any is there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stranded: Vec<String>,
    /// When the run gave B its duplicate window again, right before the
    /// commit, after a server restart had cleared it (a mirror's): B
    /// records msg-ids only from then on, so the commit waits until a whole
    /// retry horizon has passed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_since_ms: Option<u64>,
    /// In place, hop 1: the applications' ephemeral push consumers on A
    /// (ordered consumers: KV and object store watchers, ordered
    /// subscriptions), read right before A is deleted (which deletes them,
    /// and tells their clients nothing), so hop 2 can create each again on
    /// A's new stream (see [`crate::watchers::Watcher`]). Hop 2: the same,
    /// journaled right before its create step creates them on A's new
    /// stream (once: never again on a resume), for its retire to delete
    /// those their clients left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watchers: Vec<crate::watchers::Watcher>,
    /// Strategy mirror on a server that drops a mirror's window
    /// ([`Plan::handover`]): how far B's hand-over from mirroring to
    /// sourcing A went (journaled before each of its writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<Handover>,
    /// The durable on A a paced copy reads A through (`CUTOVER_MIRROR_<B>`),
    /// journaled before it is made: retire and rollback delete it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced_by: Option<String>,
}

/// B's hand-over from mirroring A to sourcing A (see [`Plan::handover`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handover {
    /// The first sequence B sources (A's last + 1 in the freeze), journaled
    /// before B's update.
    pub x: Option<u64>,
    /// When A took its subjects back (live: when B's mirror was removed):
    /// from then on B records every msg-id A stores, and the commit waits
    /// one retry horizon after it.
    pub done_ms: Option<u64>,
    /// Made live, A serving throughout (`plan::handover_freeze_reason` found
    /// nothing that needs the freeze): B's mirror removed first, then its
    /// source of A added from B's next sequence. Journaled before either.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live: bool,
}

/// B when it took A's subjects on the target side: every message up to
/// `b_seq` was sourced from A, the newest with origin `origin_seq`; direct
/// publishes come after it, interleaved with what B still sources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedAt {
    pub b_seq: u64,
    pub origin_seq: u64,
}

/// Strategy dual-write's sequences of A, each journaled once known.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DualProgress {
    /// A's last sequence before the publisher record said `dual`: every
    /// message published to both streams is after it in A.
    pub before: u64,
    /// The dual point P: A's last sequence once every live publisher
    /// acknowledged `dual`; every message A stores after it is also in B.
    #[serde(default)]
    pub point: Option<u64>,
    /// The proof covered A's messages up to this sequence.
    #[serde(default)]
    pub proved_to: Option<u64>,
}

impl Journal {
    pub fn new(
        plan: Plan,
        a_subjects: Vec<String>,
        consumers_paused: &[(String, Option<String>)],
        delete_old: bool,
        now_ms: u64,
    ) -> Self {
        Self {
            format: JOURNAL_FORMAT,
            id: migration_id(&plan.from, &plan.to),
            from: plan.from.clone(),
            to: plan.to.clone(),
            phase: Phase::Planned,
            in_progress: None,
            created_b: false,
            consumers: consumers_paused
                .iter()
                .map(|(n, p)| ConsumerProgress::waiting(n, p.clone()))
                .collect(),
            a_subjects,
            a_final_seq: None,
            delete_old,
            keep_old_consumers: false,
            started_ms: now_ms,
            updated_ms: now_ms,
            steps: vec![],
            error: None,
            dual: None,
            shared: None,
            seal_when_idle_ms: None,
            stranded: vec![],
            window_since_ms: None,
            watchers: vec![],
            handover: None,
            paced_by: None,
            plan,
        }
    }

    pub fn consumer_mut(&mut self, name: &str) -> Option<&mut ConsumerProgress> {
        self.consumers.iter_mut().find(|c| c.name == name)
    }

    pub fn start_step(&mut self, step: &Step, now_ms: u64) {
        self.in_progress = Some(step.clone());
        self.steps.push(StepRecord { step: step.clone(), started_ms: now_ms, ended_ms: None });
        self.updated_ms = now_ms;
    }

    pub fn end_step(&mut self, now_ms: u64) {
        self.in_progress = None;
        if let Some(s) = self.steps.iter_mut().rev().find(|s| s.ended_ms.is_none()) {
            s.ended_ms = Some(now_ms);
        }
        self.updated_ms = now_ms;
    }

    /// Rollback is possible before publishers moved to B, and not while
    /// they may be split between A and B ([`Journal::publishers_split`]).
    pub fn can_roll_back(&self) -> bool {
        !self.phase.committed() && self.phase != Phase::RolledBack && !self.publishers_split()
    }

    /// The commands that go on from here, for the messages that stop a run:
    /// `run --resume`, and `rollback` only where one is accepted (before the
    /// commit point, and never for hop 2 of an in-place change, whose old
    /// copy hop 1 deleted). A newcomer was told "rollback undoes it" after
    /// hop 1's commit and after a kill in hop 2, and each rollback refused.
    /// Hop 1's resume goes on through hop 2.
    pub fn way_on(&self) -> String {
        let id = &self.id;
        if self.publishers_split() {
            return format!("publishers may be split between {} and {} (no rollback is exact from here): once every publisher publishes on the target side, `nats-cutover run --resume {id} --proceed` seals {} and finishes", self.from, self.to, self.from);
        }
        if self.phase == Phase::Done {
            return match self.plan.in_place {
                Some(crate::plan::InPlaceHop::Out) => format!("hop 1 of the in-place change is done: `nats-cutover run --resume {id}` goes on with hop 2 (only finishing it is safe from here)"),
                _ => "it is done: nothing is left to continue or undo".into(),
            };
        }
        let then = match self.plan.in_place {
            Some(crate::plan::InPlaceHop::Out) => " through both hops of the in-place change",
            _ => "",
        };
        if self.can_roll_back() && self.plan.in_place != Some(crate::plan::InPlaceHop::Back) {
            format!("`nats-cutover run --resume {id}` continues{then}, `nats-cutover rollback {id}` undoes it")
        } else {
            format!("`nats-cutover run --resume {id}` continues{then} (only finishing it is safe from here)")
        }
    }

    /// Across systems with publishers repointed by the operator: B holds
    /// A's subjects on the target side (or is about to), so publishers may
    /// write into either stream. No rollback can be exact from here: one
    /// repointed to B's side writes into B only, so its messages would never
    /// reach A's consumers, and after B gave up the subjects it would find
    /// no stream at all (its publishes do not cross to A's side). Only going
    /// on is safe.
    pub fn publishers_split(&self) -> bool {
        // (A hand-over's freeze, before the split, is SubjectsReleased too.)
        self.plan.external.as_ref().is_some_and(|e| e.split_publishers)
            && self.shared.is_some()
            && matches!(self.phase, Phase::SubjectsShared | Phase::SubjectsReleased)
    }
}

/// One consumer's part of a format 2 journal, at [`consumer_key`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerRecord {
    pub name: String,
    /// Its entry in the plan's `consumers`.
    #[serde(default)]
    pub plan: Option<ConsumerPlan>,
    /// Its findings (scope `consumer NAME`) and their places in the plan's.
    #[serde(default)]
    pub findings: Vec<PlacedFinding>,
    /// Its entry in the journal's `consumers`.
    #[serde(default)]
    pub progress: Option<ConsumerProgress>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacedFinding {
    /// Its index in the plan's findings.
    pub at: usize,
    pub finding: Finding,
}

/// Why stored records do not make a journal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JoinError {
    #[error("its head record does not parse ({0})")]
    Head(String),
    #[error("its record of consumer {0} is missing")]
    Missing(String),
}

/// The scope of a consumer's findings (as `compat::check_consumer` names it).
fn finding_scope(name: &str) -> String {
    format!("consumer {name}")
}

/// Every consumer named by the journal or its plan, journal order first.
fn consumer_names(j: &Journal) -> Vec<String> {
    let mut names: Vec<String> = j.consumers.iter().map(|c| c.name.clone()).collect();
    for c in &j.plan.consumers {
        if !names.contains(&c.name) {
            names.push(c.name.clone());
        }
    }
    names
}

/// Consumer `name`'s record of `j`.
pub fn consumer_record(j: &Journal, name: &str) -> ConsumerRecord {
    let scope = finding_scope(name);
    ConsumerRecord {
        name: name.into(),
        plan: j.plan.consumers.iter().find(|c| c.name == name).cloned(),
        findings: j
            .plan
            .findings
            .iter()
            .enumerate()
            .filter(|(_, f)| f.scope == scope)
            .map(|(at, f)| PlacedFinding { at, finding: f.clone() })
            .collect(),
        progress: j.consumers.iter().find(|c| c.name == name).cloned(),
    }
}

/// The head record of `j` (format 2): `j` without its consumers, its plan
/// without its consumers and their findings, and `consumer_names`.
pub fn head(j: &Journal) -> Value {
    let names = consumer_names(j);
    let scopes: std::collections::HashSet<String> =
        names.iter().map(|n| finding_scope(n)).collect();
    let mut plan = Plan { consumers: vec![], findings: vec![], ..j.plan.clone() };
    plan.findings =
        j.plan.findings.iter().filter(|f| !scopes.contains(&f.scope)).cloned().collect();
    let light = Journal { consumers: vec![], plan, ..j.clone() };
    let mut v = serde_json::to_value(&light).expect("journal serializes");
    let o = v.as_object_mut().expect("journal is an object");
    o.remove("consumers");
    o["plan"].as_object_mut().expect("plan is an object").remove("consumers");
    o.insert("format".into(), JOURNAL_FORMAT.into());
    o.insert("consumer_names".into(), serde_json::to_value(&names).unwrap());
    v
}

/// `j` as records: its head and each consumer's record.
pub fn split(j: &Journal) -> (Value, Vec<ConsumerRecord>) {
    let records = consumer_names(j).iter().map(|n| consumer_record(j, n)).collect();
    (head(j), records)
}

/// The consumer names a head record lists (empty for a format 1 journal).
pub fn head_consumer_names(head: &Value) -> Vec<String> {
    serde_json::from_value(head["consumer_names"].clone()).unwrap_or_default()
}

/// A format 1 journal: one value holding every consumer.
pub fn is_single_value(head: &Value) -> bool {
    head.get("consumers").is_some()
}

/// The journal a head and its consumer records (found by name) make.
pub fn join(
    head: &Value,
    mut record: impl FnMut(&str) -> Option<ConsumerRecord>,
) -> Result<Journal, JoinError> {
    let mut v = head.clone();
    let names = head_consumer_names(&v);
    let o = v.as_object_mut().ok_or_else(|| JoinError::Head("not an object".into()))?;
    o.remove("consumer_names");
    o.insert("consumers".into(), Value::Array(vec![]));
    if let Some(p) = o.get_mut("plan").and_then(Value::as_object_mut) {
        p.insert("consumers".into(), Value::Array(vec![]));
    }
    let mut j: Journal = serde_json::from_value(v).map_err(|e| JoinError::Head(e.to_string()))?;
    let mut placed = vec![];
    for n in &names {
        let r = record(n).ok_or_else(|| JoinError::Missing(n.clone()))?;
        j.plan.consumers.extend(r.plan);
        j.consumers.extend(r.progress);
        placed.extend(r.findings);
    }
    // Inserted in the order of their places, each lands where it was.
    placed.sort_by_key(|p| p.at);
    for p in placed {
        let at = p.at.min(j.plan.findings.len());
        j.plan.findings.insert(at, p.finding);
    }
    Ok(j)
}

/// The route record's format (docs/protocol.md); version 1 had only
/// `stream`, `consumer`, `migration`, `checkpoint` and `start_seq`.
pub const ROUTE_VERSION: u32 = 2;

fn route_v1() -> u32 {
    1
}

/// Where a consumer's handoff stands, as applications read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RouteState {
    /// Fence published: old consumer up to the fence, new durable for the rest.
    Fenced,
    /// The old consumer acknowledged everything up to the fence.
    Settled,
    /// Only the new durable (drain mode writes this state directly).
    #[default]
    Moved,
}

impl RouteState {
    pub fn as_str(self) -> &'static str {
        match self {
            RouteState::Fenced => "fenced",
            RouteState::Settled => "settled",
            RouteState::Moved => "moved",
        }
    }
}

/// The control record at [`route_key`]: which stream/consumer applications of
/// `consumer` read from now and, in fence mode, up to which sequence they
/// still process the old consumer's messages. Written once the new durable is
/// positioned exactly. Fields are only added (version 1 readers read
/// `stream` and `consumer`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    #[serde(default = "route_v1")]
    pub version: u32,
    pub stream: String,
    pub consumer: String,
    pub migration: String,
    pub checkpoint: u64,
    pub start_seq: u64,
    #[serde(default)]
    pub mode: crate::plan::Mode,
    #[serde(default)]
    pub state: RouteState,
    #[serde(default)]
    pub old_stream: Option<String>,
    #[serde(default)]
    pub old_consumer: Option<String>,
    /// Fence mode: F, the last old-stream sequence processed from the old consumer.
    #[serde(default)]
    pub fence: Option<u64>,
    /// Nothing from the new durable before the old one settled to the fence.
    #[serde(default)]
    pub ordered: bool,
    #[serde(default)]
    pub nak_delay_ms: u64,
    #[serde(default)]
    pub ack_deadline_ms: Option<u64>,
    /// Mode rolling: instances of this application version read the new
    /// durable; instances of other versions stay on the old consumer.
    #[serde(default)]
    pub new_version: Option<String>,
    #[serde(default)]
    pub updated_ms: u64,
}

impl Route {
    /// A drain-mode route: the new durable only.
    pub fn moved(
        from: &str,
        to: &str,
        consumer: &str,
        migration: &str,
        f: u64,
        start: u64,
    ) -> Self {
        Route {
            version: ROUTE_VERSION,
            stream: to.into(),
            consumer: consumer.into(),
            migration: migration.into(),
            checkpoint: f,
            start_seq: start,
            mode: crate::plan::Mode::Drain,
            state: RouteState::Moved,
            old_stream: Some(from.into()),
            old_consumer: Some(consumer.into()),
            fence: None,
            ordered: false,
            nak_delay_ms: 0,
            ack_deadline_ms: None,
            new_version: None,
            updated_ms: 0,
        }
    }
}

/// A fence acknowledged by an instance: the route's migration and fence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceAck {
    pub migration: String,
    pub fence: u64,
}

pub const INSTANCE_VERSION: u32 = 1;

/// An application instance's registration at [`instance_key`] (docs/protocol.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub version: u32,
    pub instance: String,
    #[serde(default)]
    pub app_version: String,
    #[serde(default)]
    pub lang: String,
    /// The home binding.
    pub stream: String,
    pub consumer: String,
    /// `stream/consumer` pairs it fetches from now.
    #[serde(default)]
    pub bound: Vec<String>,
    #[serde(default)]
    pub fence_ack: Option<FenceAck>,
    pub ttl_ms: u64,
    #[serde(default)]
    pub heartbeat_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_runs_the_steps_after_it_in_order_once() {
        use Phase::*;
        let phases = [
            Planned,
            BReady,
            CaughtUp,
            ConsumersMoved,
            SubjectsShared,
            SubjectsReleased,
            SubjectsMoved,
            Sealed,
            SourceRemoved,
            Done,
        ];
        let steps: Vec<RunStep> = phases.iter().filter_map(|p| p.next_step()).collect();
        assert!(steps.windows(2).all(|w| w[0] <= w[1]), "a later phase never goes back: {steps:?}");
        assert_eq!(steps.len(), phases.len() - 1, "only done has no next step");
        for p in phases {
            // due(step) holds for the next step and every later one only.
            if let Some(n) = p.next_step() {
                assert!(p.due(n) && p.due(RunStep::Retire));
                assert!(n == RunStep::CreateB || !p.due(RunStep::CreateB), "{p:?}");
            }
        }
        assert_eq!((Done.next_step(), RolledBack.next_step()), (None, None));
        assert!(!RolledBack.due(RunStep::Retire), "a rolled-back run retires nothing");
        assert_eq!(SubjectsReleased.next_step(), Some(RunStep::Commit), "a commit is finished");
    }

    #[test]
    fn a_consumer_resumes_from_what_its_journal_holds() {
        let mut p = ConsumerProgress::waiting("c", None);
        assert_eq!(p.resume(), ConsumerResume::Fresh);
        p.phase = ConsumerPhase::Settled;
        assert_eq!(p.resume(), ConsumerResume::Fresh, "settled without F is taken again");
        p.checkpoint = Some(7);
        assert_eq!(p.resume(), ConsumerResume::Checkpointed { f: 7 });
        assert!(!p.evidence_holds(true, 7), "no evidence: F is taken again");
        p.evidence = Some(Settled {
            delivered_stream_seq: 9,
            ack_floor_stream_seq: 7,
            num_ack_pending: 0,
            num_pending: 0,
            paused: true,
        });
        assert!(p.evidence_holds(true, 9));
        assert!(!p.evidence_holds(true, 10), "it delivered since");
        assert!(!p.evidence_holds(false, 9), "not paused");
        p.phase = ConsumerPhase::Fenced;
        assert_eq!(p.resume(), ConsumerResume::Fresh, "fenced without a start");
        p.b_start = Some(8);
        assert_eq!(p.resume(), ConsumerResume::Fenced { f: 7, start: 8 });
        for moved in [ConsumerPhase::Created, ConsumerPhase::Retired] {
            p.phase = moved;
            assert_eq!(p.resume(), ConsumerResume::Moved);
        }
    }

    #[test]
    fn no_rollback_while_publishers_are_split() {
        let mut j = three_consumer_journal();
        j.phase = Phase::SubjectsShared;
        assert!(j.can_roll_back(), "a move on one system never splits them");
        let ext = crate::plan::External {
            api: "JS.SRC.API".into(),
            deliver: None,
            repoint_publishers: true,
            split_publishers: true,
        };
        j.plan.external = Some(ext);
        // A hand-over's freeze before the split is SubjectsReleased too: not
        // split while B has not taken the subjects (`shared` unset).
        j.phase = Phase::SubjectsReleased;
        assert!(!j.publishers_split() && j.can_roll_back(), "the hand-over's freeze");
        j.shared = Some(SharedAt { b_seq: 10, origin_seq: 10 });
        for (phase, split) in [
            (Phase::ConsumersMoved, false),
            (Phase::SubjectsShared, true),
            (Phase::SubjectsReleased, true),
            (Phase::SubjectsMoved, false),
        ] {
            j.phase = phase;
            assert_eq!(j.publishers_split(), split, "{phase:?}");
        }
        j.phase = Phase::SubjectsShared;
        assert!(!j.can_roll_back());
        j.phase = Phase::ConsumersMoved;
        assert!(j.can_roll_back());
    }

    #[test]
    fn phases_order_and_commit_point() {
        assert!(Phase::Planned < Phase::ConsumersMoved);
        assert!(Phase::ConsumersMoved < Phase::SubjectsShared);
        assert!(Phase::SubjectsShared < Phase::SubjectsReleased);
        assert!(!Phase::SubjectsShared.committed());
        assert!(!Phase::SubjectsReleased.committed());
        assert!(Phase::SubjectsMoved.committed());
        assert!(Phase::Done.committed());
        assert!(!Phase::RolledBack.committed());
    }

    #[test]
    fn step_names_round_trip() {
        for s in [
            Step::CreateB,
            Step::CatchUp,
            Step::MoveConsumers,
            Step::Consumer("worker".into()),
            Step::MovePublishers,
            Step::ShareSubjects,
            Step::AwaitPublishers,
            Step::SealA,
            Step::RemoveSource,
            Step::Handover,
            Step::Retire,
            Step::RestoreSubjects,
            Step::DeleteB,
            Step::Resume,
            Step::Done,
            Step::Other("future_step".into()),
        ] {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Step>(&json).unwrap(), s, "{json}");
            assert_eq!(Step::parse(&s.name()), s);
        }
        assert_eq!(Step::Consumer("w".into()).to_string(), "consumer w");
    }

    #[test]
    fn keys_are_valid_kv_keys() {
        assert_eq!(journal_key(&migration_id("A", "B")), "m.A.B");
        assert_eq!(route_key("A", "C"), "route.A.C");
        assert_eq!(lease_key("A"), "lease.A");
        assert_eq!(instance_key("A", "C", "h-1"), "inst.A.C.h-1");
        assert!(
            valid_instance_id("host_1-2") && !valid_instance_id("a.b") && !valid_instance_id("")
        );
    }

    /// A plan of three consumers built by the planner (its findings
    /// interleave stream, consumer and plan scopes).
    fn three_consumer_journal() -> Journal {
        use crate::plan::{build, PlanRequest, ServerFacts};
        use crate::version::ServerVersion;
        use serde_json::json;
        let consumer = |n: &str| json!({"name": n, "stream_name": "A", "config": {"durable_name": n, "ack_policy": "explicit", "filter_subject": format!("orders.{n}")}, "delivered": {"stream_seq": 5}, "ack_floor": {"stream_seq": 5}});
        let facts = ServerFacts {
            version: ServerVersion::new(2, 15, 1),
            a_raw: json!({"config": {"name": "A", "subjects": ["orders.>"], "duplicate_window": 120_000_000_000i64}, "state": {"messages": 10, "bytes": 1000, "first_seq": 1, "last_seq": 10}}),
            b_raw: None,
            consumers_raw: vec![consumer("c1"), consumer("c2"), consumer("c3")],
            other_consumers: vec![],
            downstream: vec![],
            account: None,
            checks: Default::default(),
        };
        let plan = build(&PlanRequest::source("A", "B", &["c1", "c2", "c3"]), &facts).unwrap();
        let paused = [
            ("c1".into(), None),
            ("c2".into(), Some("2030-01-01T00:00:00Z".into())),
            ("c3".into(), None),
        ];
        let mut j = Journal::new(plan, vec!["orders.>".into()], &paused, false, 7);
        j.consumer_mut("c2").unwrap().phase = ConsumerPhase::Created;
        j.consumer_mut("c2").unwrap().checkpoint = Some(4);
        j.start_step(&Step::MoveConsumers, 9);
        j
    }

    #[test]
    fn a_journal_split_into_records_joins_back_exactly() {
        let j = three_consumer_journal();
        assert!(j.plan.findings.iter().any(|f| f.scope == "consumer c2"));
        let (head, records) = split(&j);
        assert_eq!(head["format"], 2);
        assert!(head.get("consumers").is_none() && head["plan"].get("consumers").is_none());
        let scopes: Vec<&str> = head["plan"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["scope"].as_str().unwrap())
            .collect();
        assert!(!scopes.iter().any(|s| s.starts_with("consumer ")), "{scopes:?}");
        assert!(!is_single_value(&head));
        assert_eq!(head_consumer_names(&head), ["c1", "c2", "c3"]);
        let back = join(&head, |n| records.iter().find(|r| r.name == n).cloned()).unwrap();
        assert_eq!(back, Journal { format: JOURNAL_FORMAT, ..j.clone() });
        let c2 = consumer_record(&j, "c2");
        assert_eq!(c2.progress.unwrap().checkpoint, Some(4));
        assert!(c2.findings.iter().all(|f| j.plan.findings[f.at] == f.finding));
        let missing = join(&head, |n| records.iter().find(|r| r.name == n && n != "c3").cloned());
        assert_eq!(missing.unwrap_err(), JoinError::Missing("c3".into()));
    }

    #[test]
    fn a_format_1_journal_is_told_apart() {
        let j = Journal { format: 1, ..three_consumer_journal() };
        let v = serde_json::to_value(&j).unwrap();
        assert!(is_single_value(&v));
        assert_eq!(serde_json::from_value::<Journal>(v).unwrap(), j);
        // A format 1 runner requires `consumers`: it refuses a head.
        assert!(serde_json::from_value::<Journal>(head(&j)).is_err());
    }

    #[test]
    fn a_version_1_route_reads_as_a_drain_move() {
        let v1 = r#"{"stream":"B","consumer":"c","migration":"A.B","checkpoint":4,"start_seq":5}"#;
        let r: Route = serde_json::from_str(v1).unwrap();
        assert_eq!((r.version, r.state, r.fence), (1, RouteState::Moved, None));
        let v2 = serde_json::to_value(Route::moved("A", "B", "c", "A.B", 4, 5)).unwrap();
        assert_eq!(v2["version"], 2);
        assert_eq!(v2["state"], "moved");
        assert_eq!(v2["mode"], "drain");
        assert_eq!(v2["stream"], "B");
    }
}
