//! What the CLI may draw: decided once per run by a pure function of the facts
//! about the terminal and the environment, like nextest's displayer config.
//!
//! ANSI escapes (colours, a spinner's cursor movements) go only to a terminal:
//! never into a pipe or a file. `NO_COLOR` (<https://no-color.org>, set and not
//! empty) turns colours off; it leaves the spinner, which has none. `TERM=dumb`
//! turns off both. A spinner also needs stdout to be a terminal: with stdout
//! redirected, progress goes there as plain lines, with the rest of the output.

use std::io::IsTerminal;

/// How progress is shown (`crate::cmd::progress::Render` draws it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Spinner,
    Lines,
    Json,
}

/// The facts the decision rests on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    pub stdout_tty: bool,
    pub stderr_tty: bool,
    /// `NO_COLOR` is set and not empty.
    pub no_color: bool,
    /// `CI` is set (and not `false` or `0`): no animation in CI logs.
    pub ci: bool,
    /// `TERM=dumb`: no escape sequences at all.
    pub dumb_term: bool,
}

/// What to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Display {
    /// How progress is shown (spinner, plain lines, JSON lines).
    pub progress: Mode,
    /// Colour in the log lines on stderr (`NATS_CUTOVER_LOG`).
    pub log_colour: bool,
}

pub fn display(json: bool, f: Facts) -> Display {
    let progress = if json {
        Mode::Json
    } else if f.stdout_tty && f.stderr_tty && !f.ci && !f.dumb_term {
        Mode::Spinner
    } else {
        Mode::Lines
    };
    Display { progress, log_colour: f.stderr_tty && !f.no_color && !f.dumb_term }
}

fn env_set(name: &str, off: &[&str]) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && !off.iter().any(|o| v == *o))
}

impl Facts {
    pub fn detect() -> Self {
        Self {
            stdout_tty: std::io::stdout().is_terminal(),
            stderr_tty: std::io::stderr().is_terminal(),
            no_color: env_set("NO_COLOR", &[]),
            ci: env_set("CI", &["false", "0"]),
            dumb_term: std::env::var_os("TERM").is_some_and(|t| t == "dumb"),
        }
    }
}

/// The display for this process.
pub fn detect(json: bool) -> Display {
    display(json, Facts::detect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTY: Facts =
        Facts { stdout_tty: true, stderr_tty: true, no_color: false, ci: false, dumb_term: false };

    #[test]
    fn a_human_terminal_gets_a_spinner_and_colours() {
        assert_eq!(display(false, TTY), Display { progress: Mode::Spinner, log_colour: true });
    }

    #[test]
    fn pipes_and_files_get_no_escapes() {
        let piped = Facts { stdout_tty: false, stderr_tty: false, ..TTY };
        assert_eq!(display(false, piped), Display { progress: Mode::Lines, log_colour: false });
        // `run | tee log`: progress lines go to the log, colours stay on stderr.
        let stdout_piped = Facts { stdout_tty: false, ..TTY };
        assert_eq!(
            display(false, stdout_piped),
            Display { progress: Mode::Lines, log_colour: true }
        );
        // `run 2> err.log`: no spinner (it draws on stderr), no colour in the file.
        let stderr_piped = Facts { stderr_tty: false, ..TTY };
        assert_eq!(
            display(false, stderr_piped),
            Display { progress: Mode::Lines, log_colour: false }
        );
    }

    #[test]
    fn no_color_turns_colours_off_and_keeps_the_spinner() {
        let f = Facts { no_color: true, ..TTY };
        assert_eq!(display(false, f), Display { progress: Mode::Spinner, log_colour: false });
    }

    #[test]
    fn dumb_terminals_and_ci_get_no_animation() {
        let dumb = Facts { dumb_term: true, ..TTY };
        assert_eq!(display(false, dumb), Display { progress: Mode::Lines, log_colour: false });
        let ci = Facts { ci: true, ..TTY };
        assert_eq!(display(false, ci), Display { progress: Mode::Lines, log_colour: true });
    }

    #[test]
    fn json_is_json_wherever_it_goes() {
        assert_eq!(display(true, TTY).progress, Mode::Json);
        assert_eq!(display(true, Facts::default()).progress, Mode::Json);
    }
}
