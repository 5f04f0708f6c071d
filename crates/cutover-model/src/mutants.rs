//! Mutants: each breaks one rule of the protocol on purpose; the checker
//! must find a counterexample for every one.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// F is the ack floor instead of the settled rule's delivered sequence.
    AckFloor,
    /// Each server write is made before the journal records its intent:
    /// B before `created_b`, the new durable before `creating`, A's release
    /// before `subjects_released`.
    EffectBeforeJournal,
    /// B never gets A's duplicate window (created without one, never
    /// raised, and the runner's window checks skipped).
    NoDedupWindow,
    /// B takes the subjects without waiting until it holds A's tail (the
    /// commit's waits skipped).
    CommitBeforeCaughtUp,
    /// B's window raised over copies it made without one (a sourcing B on
    /// 2.14+), and the commit does not wait a retry horizon after it
    /// (docs/model.md, finding 1).
    NoHorizonWait,
    /// Fence mode: the old durable is resumed for a dead instance's
    /// messages before the instance acknowledged the fence.
    ResumeBeforeFenceAck,
    /// Fence mode: an old delivery is held to the fence the instance knows
    /// when it handles it, not also to the one it knew when it fetched it
    /// (docs/model.md, finding 2).
    FenceAtHandling,
    /// Fence mode: the rollback neither holds the old durable nor waits
    /// for the instances to follow the route's deletion; it resumes it as
    /// it deletes the route (docs/model.md, finding 3).
    RollbackUnheld,
}

impl Mutant {
    pub const ALL: [Mutant; 8] = [
        Mutant::AckFloor,
        Mutant::EffectBeforeJournal,
        Mutant::NoDedupWindow,
        Mutant::CommitBeforeCaughtUp,
        Mutant::NoHorizonWait,
        Mutant::ResumeBeforeFenceAck,
        Mutant::FenceAtHandling,
        Mutant::RollbackUnheld,
    ];

    /// It breaks a rule of fence mode only.
    pub fn fence_only(self) -> bool {
        matches!(
            self,
            Mutant::ResumeBeforeFenceAck | Mutant::FenceAtHandling | Mutant::RollbackUnheld
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Mutant::AckFloor => "ack-floor",
            Mutant::EffectBeforeJournal => "effect-before-journal",
            Mutant::NoDedupWindow => "no-dedup-window",
            Mutant::CommitBeforeCaughtUp => "commit-before-caught-up",
            Mutant::NoHorizonWait => "no-horizon-wait",
            Mutant::ResumeBeforeFenceAck => "resume-before-fence-ack",
            Mutant::FenceAtHandling => "fence-at-handling",
            Mutant::RollbackUnheld => "rollback-unheld",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Mutant::AckFloor => "the checkpoint F is the old durable's ack floor, not the delivered sequence the settled rule (checkpoint::assess) gives",
            Mutant::EffectBeforeJournal => "every server write comes before its journaled intent (B before created_b, the new durable before creating, A's release before subjects_released)",
            Mutant::NoDedupWindow => "B never gets A's duplicate window (created without one, never raised; the runner's window checks skipped)",
            Mutant::CommitBeforeCaughtUp => "B takes the subjects without waiting until it holds A's tail (b_keeps_up and the commit window's wait skipped)",
            Mutant::NoHorizonWait => "the commit does not wait a retry horizon after B's window was raised over copies it made without one, so a late retry of such a message is stored twice (a sourcing B on 2.14+: --server 2.15.1)",
            Mutant::ResumeBeforeFenceAck => "fence mode: the old durable is resumed for a dead instance's messages before the instance acknowledged the fence (--mode fence only)",
            Mutant::FenceAtHandling => "fence mode: an old delivery is held only to the fence the instance knows when it handles it, not to the one it knew when it fetched it, so one fetched under the fence and handled after a rollback deleted the route is processed (--mode fence --strategy mirror --server 2.15.1: the rollback's consumer reset needs 2.14+)",
            Mutant::RollbackUnheld => "fence mode: the rollback resumes the old durable as it deletes the route, without holding it before it reads it or waiting until no instance fetches from the new durable, so an instance that still knows the fence naks a message above F until max_deliver gives it up: lost (--mode fence, max_deliver 2)",
        }
    }

    pub fn parse(s: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == s)
    }
}
