//! The migration journal: one record per migration, in a KV bucket on the same
//! server, written before each step takes effect and after it completes.
//!
//! Every step is idempotent and re-checks the server, so the journal only needs
//! to say how far the migration got: `run` on an interrupted migration resumes
//! from [`Journal::phase`]. The record is also the control record applications
//! follow (see [`Route`]): it is designed so that a later "fence" handoff can be
//! driven from the same bucket without a format change (new fields only).

use crate::plan::Plan;
use serde::{Deserialize, Serialize};

pub const BUCKET: &str = "CUTOVER";
pub const JOURNAL_FORMAT: u32 = 1;

pub fn migration_id(from: &str, to: &str) -> String {
    // Stream names cannot contain '.', so this is unambiguous and a valid key.
    format!("{from}.{to}")
}

pub fn journal_key(id: &str) -> String {
    format!("m.{id}")
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
    SubjectsReleased,
    SubjectsMoved,
    Sealed,
    SourceRemoved,
    Done,
    RolledBack,
}

impl Phase {
    pub fn committed(self) -> bool {
        self >= Phase::SubjectsMoved && self != Phase::RolledBack
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Planned => "planned",
            Phase::BReady => "b_ready",
            Phase::CaughtUp => "caught_up",
            Phase::ConsumersMoved => "consumers_moved",
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
            Step::SealA => Borrowed("seal_a"),
            Step::RemoveSource => Borrowed("remove_source"),
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
            "seal_a" => Step::SealA,
            "remove_source" => Step::RemoveSource,
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
    /// The new durable's filters on B (empty: all).
    #[serde(default)]
    pub b_filters: Vec<String>,
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
                .map(|(n, p)| ConsumerProgress {
                    name: n.clone(),
                    phase: ConsumerPhase::Waiting,
                    was_paused: p.is_some(),
                    paused_until: p.clone(),
                    checkpoint: None,
                    b_start: None,
                    translate_gets: None,
                    nudges: 0,
                    drain_ms: None,
                    longest_pause_ms: None,
                    evidence: None,
                    fence_settled: None,
                    b_filters: vec![],
                })
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

    /// Rollback is possible before publishers moved to B.
    pub fn can_roll_back(&self) -> bool {
        !self.phase.committed() && self.phase != Phase::RolledBack
    }
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
    fn phases_order_and_commit_point() {
        assert!(Phase::Planned < Phase::ConsumersMoved);
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
            Step::SealA,
            Step::RemoveSource,
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
