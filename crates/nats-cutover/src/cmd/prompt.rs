//! Talking to the operator at the terminal: the confirmation, and Ctrl-C
//! or SIGTERM as the run's shutdown input.

use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use std::io::{BufRead, IsTerminal};

/// Asks on the terminal whether to go on (the plan is printed already).
pub fn ask() -> Result<()> {
    ask_to("Run this cut-over now?")
}

/// Asks `question` on the terminal (what it is about is printed already).
pub fn ask_to(question: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::NotConfirmed(
            "refusing to run without confirmation: stdin is not a terminal; pass --yes".into(),
        ));
    }
    out!("\n{question} [y/N] ");
    crate::out::flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if matches!(line.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(CliError::NotConfirmed("not confirmed; nothing was changed".into()))
    }
}

/// Ctrl-C, or SIGTERM (what `timeout`, systemd and Kubernetes send), asks
/// the engine to stop at the next safe point; a second one aborts at once
/// (the guard process then compensates what the run held).
pub fn shutdown_on_ctrl_c() -> tokio::sync::watch::Receiver<bool> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let Ok(mut term) = signal(SignalKind::terminate()) else { return };
        let mut asked = async || {
            tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                r = term.recv() => r.is_some(),
            }
        };
        if asked().await {
            errln!("interrupt: stopping at the next safe point (Ctrl-C or SIGTERM again to abort at once)");
            let _ = tx.send(true);
            if asked().await {
                std::process::exit(ExitCode::Interrupted.code());
            }
        }
    });
    rx
}
