//! Hooks for tests, compiled in only with the `test-hooks` feature. The CLI's
//! integration tests enable it (a dev-dependency on this crate with the
//! feature), so the binary they run has it; `cargo build`, `cargo install` and
//! release builds do not: there [`crash_after_step`] is `None`, and neither the
//! variable nor the exit is in the program.

use crate::engine::run::StepHook;

/// Names the step after which the runner dies (`subjects_released`,
/// `consumer_created:<C>`, or a step's name).
pub const CRASH_AFTER_VAR: &str = "NATS_CUTOVER_TEST_CRASH_AFTER";

/// The exit code of that death.
pub const CRASH_EXIT_CODE: i32 = 86;

/// The engine's `after_step` hook that makes the process die like a killed
/// runner (no cleanup, exit 86) right after the step named in
/// `$NATS_CUTOVER_TEST_CRASH_AFTER` was journaled, so resume and rollback can
/// be tested at every step; `None` if the variable is unset.
#[cfg(feature = "test-hooks")]
pub fn crash_after_step() -> Option<StepHook> {
    let at = std::env::var(CRASH_AFTER_VAR).ok()?;
    Some(std::sync::Arc::new(move |step: &str| {
        if step == at {
            std::process::exit(CRASH_EXIT_CODE);
        }
    }))
}

/// Without the `test-hooks` feature there is no crash hook.
#[cfg(not(feature = "test-hooks"))]
pub fn crash_after_step() -> Option<StepHook> {
    None
}
