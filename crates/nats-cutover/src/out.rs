//! Writing to stdout and stderr without ever panicking.
//!
//! `println!` panics when stdout is a pipe whose reader has gone
//! (`nats-cutover inspect A | head -1`): Rust ignores SIGPIPE, so the write fails
//! with EPIPE and the macro turns that into a panic. Every line the CLI prints
//! goes through [`outln!`] / [`errln!`] instead:
//!
//! - stdout: the first failed write marks stdout as gone (quietly for a broken
//!   pipe, with one warning on stderr for any other error, e.g. a full disk);
//!   later writes are dropped. The command itself goes on: `run` finishes (or
//!   stops at a safe point) rather than leaving a migration half done because
//!   its reader went away, and ends with its own exit code. `watch`, which
//!   would print forever, stops (see [`stdout_gone`]).
//! - stderr: errors are ignored; there is nowhere left to report them.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Writes to stdout unless it is gone; never panics.
pub fn out(args: fmt::Arguments<'_>) {
    if stdout_gone() {
        return;
    }
    let mut o = io::stdout().lock();
    if let Err(e) = o.write_fmt(args) {
        gone(&e);
    }
}

/// Flushes stdout (after a prompt without a newline); never panics.
pub fn flush() {
    if !stdout_gone() {
        if let Err(e) = io::stdout().lock().flush() {
            gone(&e);
        }
    }
}

fn gone(e: &io::Error) {
    if !STDOUT_GONE.swap(true, Ordering::SeqCst) && e.kind() != io::ErrorKind::BrokenPipe {
        err(format_args!(
            "warning: cannot write to stdout ({e}); the rest of the output is dropped\n"
        ));
    }
}

/// True once a write to stdout failed (its reader went away): output stops
/// there, and a command that would print forever stops too.
pub fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::SeqCst)
}

/// Writes to stderr; a failure is ignored (nowhere left to report it).
pub fn err(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// `println!` that never panics (see the module documentation).
macro_rules! outln {
    () => {
        $crate::out::out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that never panics.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::out(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::err(format_args!("{}\n", format_args!($($arg)*)))
    };
}
