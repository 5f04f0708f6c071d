//! Rendering the engine's events: a spinner on a terminal, plain lines
//! otherwise, JSON lines with --json. Which one is decided by a pure function.

use cutover_nats::engine::{Event, Sink};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Spinner,
    Lines,
    Json,
}

/// A spinner only for a human at a terminal; never in CI, never with --json.
pub fn choose(json: bool, stderr_is_tty: bool, ci: bool) -> Mode {
    if json {
        Mode::Json
    } else if stderr_is_tty && !ci {
        Mode::Spinner
    } else {
        Mode::Lines
    }
}

pub fn detect(json: bool) -> Mode {
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    choose(json, std::io::stderr().is_terminal(), ci)
}

pub struct Render {
    mode: Mode,
    bar: Option<ProgressBar>,
    t0: u64,
}

impl Render {
    pub fn new(mode: Mode) -> Self {
        let bar = (mode == Mode::Spinner).then(|| {
            let b = ProgressBar::new_spinner();
            b.set_style(ProgressStyle::with_template("{spinner} {elapsed} {msg}").unwrap());
            b.enable_steady_tick(Duration::from_millis(100));
            b
        });
        Self { mode, bar, t0: cutover_nats::journal::now_ms() }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    fn line(&self, e: &Event) -> Option<String> {
        let t = (e.ts_ms.saturating_sub(self.t0)) as f64 / 1000.0;
        let d = &e.detail;
        let text = match e.kind.as_str() {
            "step_started" => return None,
            "step_done" => format!(
                "{} done in {:.1} ms {}",
                e.step,
                d["ms"].as_f64().unwrap_or(0.0),
                compact(d)
            ),
            _ => format!("{} {} {}", e.step, e.kind, compact(d)),
        };
        Some(format!("[{t:>8.3}s] {text}"))
    }
}

fn compact(v: &serde_json::Value) -> String {
    match v.as_object() {
        Some(m) => m
            .iter()
            .filter(|(k, _)| *k != "ms")
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        None => String::new(),
    }
}

impl Sink for Render {
    fn emit(&self, e: Event) {
        match self.mode {
            Mode::Json => outln!("{}", serde_json::to_string(&e).unwrap()),
            Mode::Lines => {
                if let Some(l) = self.line(&e) {
                    outln!("{l}");
                }
            }
            Mode::Spinner => {
                if let Some(b) = &self.bar {
                    if e.kind == "step_started" {
                        b.set_message(e.step.clone());
                    } else if let Some(l) = self.line(&e) {
                        b.println(l);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spinner_only_for_a_human_terminal() {
        assert_eq!(choose(false, true, false), Mode::Spinner);
        assert_eq!(choose(false, true, true), Mode::Lines);
        assert_eq!(choose(false, false, false), Mode::Lines);
        assert_eq!(choose(true, true, false), Mode::Json);
    }
}
