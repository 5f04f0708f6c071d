//! Hooks for tests, compiled in only with the `test-hooks` feature. The CLI's
//! integration tests enable it (a dev-dependency on this crate with the
//! feature), so the binary they run has it; `cargo build`, `cargo install` and
//! release builds do not: there [`crash_after_step`] is `None`, and neither the
//! variable nor the exit is in the program.

use std::sync::Arc;

/// The engine's `after_step` hook (`crate::engine::StepHook`).
type StepHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Names the step after which the runner dies (`subjects_released`,
/// `consumer_created:<C>`, or a step's name); `STEP#N` dies after the Nth
/// time STEP is journaled in this process (a fleet's migrations run side
/// by side, each with the same step names).
pub const CRASH_AFTER_VAR: &str = "NATS_CUTOVER_TEST_CRASH_AFTER";

/// The exit code of that death.
pub const CRASH_EXIT_CODE: i32 = 86;

/// The engine's `after_step` hook that makes the process die like a killed
/// runner (no cleanup, exit 86) right after the step named in
/// `$NATS_CUTOVER_TEST_CRASH_AFTER` was journaled, so resume and rollback can
/// be tested at every step; `None` if the variable is unset.
#[cfg(feature = "test-hooks")]
pub fn crash_after_step() -> Option<StepHook> {
    use std::sync::atomic::{AtomicU32, Ordering};
    let var = std::env::var(CRASH_AFTER_VAR).ok()?;
    let (at, nth) = match var.rsplit_once('#') {
        Some((step, n)) if n.parse::<u32>().is_ok() => (step.to_string(), n.parse().unwrap()),
        _ => (var, 1),
    };
    let seen = AtomicU32::new(0);
    Some(Arc::new(move |step: &str| {
        if step == at && seen.fetch_add(1, Ordering::SeqCst) + 1 == nth {
            std::process::exit(CRASH_EXIT_CODE);
        }
    }))
}

/// Without the `test-hooks` feature there is no crash hook.
#[cfg(not(feature = "test-hooks"))]
pub fn crash_after_step() -> Option<StepHook> {
    None
}

/// Makes journal writes fail like a bucket whose leader stopped answering:
/// `NEEDLE` — the first journal record write whose value contains it is
/// applied but reported as timed out (its answer lost), and every journal
/// write after it in this process fails without being applied.
pub const LOSE_WRITES_VAR: &str = "NATS_CUTOVER_TEST_LOSE_JOURNAL_WRITES";

/// `NEEDLE`: the first journal record write whose value contains it is
/// applied but its answer lost, as if timed out; nothing else fails (the
/// runner must send it again and recognise its own write).
pub const LOSE_ONE_VAR: &str = "NATS_CUTOVER_TEST_LOSE_ONE_JOURNAL_ANSWER";

/// What [`journal_write_fault`] makes of one journal write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFault {
    None,
    /// Applied, then reported as failed.
    LoseAnswer,
    /// Reported as failed, not applied.
    Refuse,
    /// Applied, then reported as timed out, once: the writer may retry.
    LoseOnce,
}

/// The fault `$NATS_CUTOVER_TEST_LOSE_JOURNAL_WRITES` asks for `value`'s
/// write (none without the variable, or without the `test-hooks` feature).
pub fn journal_write_fault(value: &[u8]) -> WriteFault {
    #[cfg(feature = "test-hooks")]
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        static TRIPPED: AtomicBool = AtomicBool::new(false);
        static LOST_ONE: AtomicBool = AtomicBool::new(false);
        if TRIPPED.load(Ordering::SeqCst) {
            return WriteFault::Refuse;
        }
        // The first write whose value holds `var`'s needle, once (`done`).
        let first_hit = |var: &str, done: &AtomicBool| {
            std::env::var(var).is_ok_and(|needle| {
                value.windows(needle.len().max(1)).any(|w| w == needle.as_bytes())
            }) && !done.swap(true, Ordering::SeqCst)
        };
        if first_hit(LOSE_ONE_VAR, &LOST_ONE) {
            return WriteFault::LoseOnce;
        }
        if first_hit(LOSE_WRITES_VAR, &TRIPPED) {
            return WriteFault::LoseAnswer;
        }
        WriteFault::None
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = value;
        WriteFault::None
    }
}

/// Set (to anything): `plan` takes the server for one that drops a mirror's
/// duplicate window (a clustered JetStream) and plans strategy mirror's
/// hand-over to sourcing (`engine::steps::handover`) on one server too.
pub const HANDOVER_VAR: &str = "NATS_CUTOVER_TEST_HANDOVER";

/// Whether `$NATS_CUTOVER_TEST_HANDOVER` asks for the hand-over (never
/// without the `test-hooks` feature).
pub fn force_handover() -> bool {
    #[cfg(feature = "test-hooks")]
    {
        std::env::var_os(HANDOVER_VAR).is_some()
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        false
    }
}

/// Set to `freeze`: the hand-over is made in a freeze even where it could be
/// made live (`engine::steps::handover`).
pub fn force_handover_freeze() -> bool {
    #[cfg(feature = "test-hooks")]
    {
        std::env::var(HANDOVER_VAR).is_ok_and(|v| v == "freeze")
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        false
    }
}

/// Set (to anything): B's update that takes the subjects at the commit is
/// refused, as a server refuses one (the failure the commit's undo is for:
/// A takes its subjects back before the error is reported).
pub const REFUSE_SUBJECTS_VAR: &str = "NATS_CUTOVER_TEST_REFUSE_SUBJECTS";

/// Whether `$NATS_CUTOVER_TEST_REFUSE_SUBJECTS` asks B's take of the
/// subjects to be refused (never without the `test-hooks` feature).
pub fn refuse_subjects() -> bool {
    #[cfg(feature = "test-hooks")]
    {
        std::env::var_os(REFUSE_SUBJECTS_VAR).is_some()
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        false
    }
}
