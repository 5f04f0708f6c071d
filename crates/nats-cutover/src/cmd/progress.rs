//! Rendering the engine's events: a spinner on a terminal, plain lines
//! otherwise, JSON lines with --json. Which one is decided by the pure function
//! [`crate::term::display`].

use crate::render;
use cutover_nats::engine::{Event, EventKind, Sink};
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
        // The details as the JSON events carry them, for a generic key=value line.
        let w = e.wire();
        let text = match &e.kind {
            EventKind::StepStarted => return None,
            EventKind::StepDone { ms, .. } => format!(
                "{} done in {} {}",
                e.step,
                render::ms(ms.unwrap_or(0.0)),
                compact(&w.detail)
            ),
            _ => format!("{} {} {}", e.step, w.kind, compact(&w.detail)),
        };
        Some(format!("[{t:>8.3}s] {text}"))
    }
}

/// An event's details as `key=value`, numbers rounded: `gap_ms: 12.3456789`
/// reads `gap=12.3 ms` (the JSON events keep the exact value).
fn compact(v: &serde_json::Value) -> String {
    match v.as_object() {
        Some(m) => m
            .iter()
            .filter(|(k, _)| *k != "ms")
            .map(|(k, v)| match (k.strip_suffix("_ms"), v.as_f64()) {
                (Some(name), Some(x)) => format!("{name}={}", render::ms(x)),
                _ if v.is_number() => format!("{k}={}", render::number(v)),
                _ => format!("{k}={v}"),
            })
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
                    if e.kind == EventKind::StepStarted {
                        b.set_message(e.step.to_string());
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
    use cutover_core::journal::Step;
    use cutover_nats::engine::StepResult;
    use serde_json::json;

    #[test]
    fn event_details_print_rounded() {
        assert_eq!(compact(&json!({"gap_ms": 12.345678901})), "gap=12.3 ms");
        assert_eq!(compact(&json!({"drain_ms": 1234})), "drain=1234 ms");
        assert_eq!(compact(&json!({"ratio": 0.123456})), "ratio=0.123");
        assert_eq!(compact(&json!({"checkpoint": 10})), "checkpoint=10");
        assert_eq!(compact(&json!({"moved": true, "ms": 3.0})), "moved=true");
    }

    #[test]
    fn a_finished_step_prints_its_duration_rounded() {
        let r = Render::new(Mode::Lines);
        let e = Event {
            ts_ms: r.t0 + 1500,
            kind: EventKind::StepDone {
                ms: Some(12.345678901),
                result: StepResult::CatchUp { origin_seq: 10 },
            },
            step: Step::CatchUp,
            migration: "A.B".into(),
        };
        assert_eq!(r.line(&e).unwrap(), "[   1.500s] catch_up done in 12.3 ms origin_seq=10");
    }
}
