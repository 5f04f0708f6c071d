//! The bounds of one check: how many messages, faults and operator actions
//! the model allows, which server version's rules apply, and the BFS depth.

use cutover_core::plan::{Mode, Strategy};
use cutover_core::version::ServerVersion;

/// What one check explores. Every count is an upper bound on how often the
/// fault or action may happen on one path (0 turns it off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Messages the one publisher publishes, in order, each with its own msg-id.
    pub msgs: u8,
    /// Publish answers lost on the way back (the message may have been stored;
    /// the publisher retries with the same msg-id).
    pub lost_answers: u8,
    /// Runner crashes (SIGKILL at any step boundary).
    pub crashes: u8,
    /// Worker deaths while it holds a message (before or after processing it,
    /// always before its ack).
    pub worker_deaths: u8,
    /// The consumer's `max_deliver` (1 or 2; 0: unlimited): a message
    /// delivered this many times and not acknowledged leaves ack-pending
    /// without an ack (exhausted).
    pub max_deliver: u8,
    /// How often a drain may cut its pause (resume, let held messages be
    /// redelivered, pause again) before its settle timeout.
    pub pause_cuts: u8,
    /// Operator commands after a run stopped: `run --resume` or `rollback`.
    pub operator_acts: u8,
    /// Commits that fail inside the window (B refuses the subjects, or does
    /// not hold A's tail within the commit timeout): A takes them back.
    pub commit_failures: u8,
    /// Where the journal's bucket may stop answering (once a path): a
    /// write applied or not, its answer lost, every later write of that
    /// run refused (the test hook `NATS_CUTOVER_TEST_LOSE_JOURNAL_WRITES`).
    /// Bits: 1 the checkpoint (`settled`), 2 the intent (`creating`), 4
    /// the durable created (`created`). 0: the journal always answers.
    pub journal_faults: u8,
    /// Record which recovery paths a path took (`State::seen`), so that the
    /// check can say it reached them; off in `--ci`, where it costs 40 % more
    /// states (the unit tests turn it on).
    pub track_recovery: bool,
    /// A guard runs beside the runner (the CLI starts one; an application
    /// embedding the engine, or `NATS_CUTOVER_GUARD=off`, has none: what a
    /// dead runner held stays held until the operator resumes or rolls back).
    pub guard: bool,
    /// `source` (B sources A, translation) or `mirror` (B mirrors A, same
    /// sequences, promoted at the commit).
    pub strategy: Strategy,
    /// `drain` (pause, settle, move) or `fence` (the old durable a gate;
    /// the worker a protocol instance: docs/protocol.md).
    pub mode: Mode,
    /// The server whose rules apply (B's window at its create, consumer reset).
    pub server: ServerVersion,
    /// BFS depth bound (actions on one path).
    pub depth: usize,
}

impl Config {
    /// The configuration `scripts/model-check.sh --ci` checks, the real rules
    /// and every mutant.
    pub fn ci() -> Self {
        Config {
            msgs: 2,
            lost_answers: 1,
            crashes: 2,
            worker_deaths: 2,
            max_deliver: 2,
            pause_cuts: 1,
            operator_acts: 2,
            commit_failures: 1,
            guard: true,
            journal_faults: 0,
            track_recovery: false,
            strategy: Strategy::Source,
            mode: Mode::Drain,
            // The tests' server: a sourcing B starts without a window there
            // (finding 1, closed by the commit's wait of a retry horizon).
            server: ServerVersion::new(2, 15, 1),
            depth: 80,
        }
    }

    /// Fence mode's configuration in `--ci` (its instance doubles the
    /// interleavings): one crash, one death, one operator command, and
    /// `max_deliver` 2 (docs/model.md, *Found*, finding 3).
    pub fn fence() -> Self {
        Config {
            mode: Mode::Fence,
            crashes: 1,
            worker_deaths: 1,
            max_deliver: 2,
            operator_acts: 1,
            ..Config::ci()
        }
    }

    /// Fence mode's unit-test configuration: without a failed commit, on
    /// 2.13.0's rules (no consumer reset: a rollback's other path).
    pub fn small_fence() -> Self {
        Config { commit_failures: 0, server: PRE_2_14, ..Config::fence() }
    }

    /// The unit tests' configuration (debug build): smaller, same shape.
    pub fn small() -> Self {
        Config {
            crashes: 1,
            operator_acts: 1,
            worker_deaths: 1,
            max_deliver: 1,
            track_recovery: true,
            server: PRE_2_14,
            ..Config::ci()
        }
    }
}

/// The unit tests' server by default: before 2.14 (no consumer reset, B
/// created with its window), the rules CI's configuration does not check.
const PRE_2_14: ServerVersion = ServerVersion::new(2, 13, 0);
