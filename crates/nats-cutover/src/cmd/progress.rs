//! Rendering the engine's events: a spinner on a terminal, plain lines
//! otherwise, JSON lines with --json. Which one is decided by the pure function
//! [`crate::term::display`].

use cutover_nats::engine::{Event, Sink};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Spinner,
    Lines,
    Json,
}

/// How progress is shown; decided by [`crate::term::display`].
pub fn detect(json: bool) -> Mode {
    crate::term::detect(json).progress
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
