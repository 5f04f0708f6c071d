//! Exit codes: the one documented list (also in docs/exit-codes.md).
//!
//! | code | name          | meaning |
//! |------|---------------|---------|
//! | 0    | OK            | done: the plan is safe, the migration completed, verification holds |
//! | 1    | FAILED        | the operation failed for another reason (see the message) |
//! | 2    | BAD_INPUT     | invalid arguments, names, files, or a stream/consumer that does not exist; nothing was changed |
//! | 3    | INCOMPATIBLE  | the plan is unsafe (or the server too old); nothing was changed |
//! | 4    | SERVER        | the server could not be reached, refused the credentials, or failed a request |
//! | 5    | INTERRUPTED   | stopped at a safe point (Ctrl-C); the message says how to resume or roll back |
//! | 6    | NOT_VERIFIED  | verification found lost, duplicated or extra messages |

pub const OK: i32 = 0;
pub const FAILED: i32 = 1;
pub const BAD_INPUT: i32 = 2;
pub const INCOMPATIBLE: i32 = 3;
pub const SERVER: i32 = 4;
pub const INTERRUPTED: i32 = 5;
pub const NOT_VERIFIED: i32 = 6;

use cutover_nats::{Error, ErrorKind};

/// Maps the adapter's errors to exit codes: the only such mapping.
pub fn code_for(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.0;
        }
        if let Some(err) = cause.downcast_ref::<Error>() {
            return match err.kind() {
                ErrorKind::Input => BAD_INPUT,
                ErrorKind::Incompatible => INCOMPATIBLE,
                ErrorKind::Server => SERVER,
                ErrorKind::State => FAILED,
                ErrorKind::Interrupted => INTERRUPTED,
            };
        }
        if cause.downcast_ref::<cutover_core::names::NameError>().is_some() {
            return BAD_INPUT;
        }
    }
    FAILED
}

/// An error that already knows its exit code (e.g. an unsafe plan, which is not
/// an adapter error but a verdict).
#[derive(Debug)]
pub struct Coded(pub i32, pub String);

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for Coded {}
