//! Rendering the engine's events: a spinner on a terminal, plain lines
//! otherwise, JSON lines with --json. Which one is decided by the pure function
//! [`crate::term::display`].

use crate::render;
pub use crate::term::Mode;
use cutover_nats::engine::{Event, EventKind, Sink};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

/// How progress is shown; decided by [`crate::term::display`].
pub fn detect(json: bool) -> Mode {
    crate::term::detect(json).progress
}

pub struct Render {
    mode: Mode,
    bar: Option<ProgressBar>,
    t0: u64,
    /// Lines name their migration (`apply`: several run at once).
    fleet: bool,
    /// When each migration's repeated waits last printed a line.
    printed: std::sync::Mutex<std::collections::HashMap<(String, &'static str), u64>>,
}

/// A wait's repeated progress (catch-up each 250 ms, the retry horizon's
/// wait each second) prints a line at most this often as text: a KV
/// bucket's change on R3 waits two 120 s horizons, which printed 240
/// lines (a newcomer's trial). JSON events are all kept.
const REPEAT_EVERY_MS: u64 = 5_000;

impl Render {
    pub fn new(mode: Mode) -> Self {
        let bar = (mode == Mode::Spinner).then(|| {
            let b = ProgressBar::new_spinner();
            b.set_style(ProgressStyle::with_template("{spinner} {elapsed} {msg}").unwrap());
            b.enable_steady_tick(Duration::from_millis(100));
            b
        });
        Self {
            mode,
            bar,
            t0: cutover_nats::journal::now_ms(),
            fleet: false,
            printed: Default::default(),
        }
    }

    /// Whether this event repeats a wait's progress printed less than
    /// [`REPEAT_EVERY_MS`] ago (then its line is left out).
    fn repeats(&self, e: &Event) -> bool {
        use cutover_nats::engine::Progress;
        let wait = match &e.kind {
            EventKind::Progress(Progress::CatchUp { .. }) => "catch_up",
            EventKind::Progress(Progress::WindowRestored { .. }) => "window",
            _ => return false,
        };
        let mut printed = self.printed.lock().unwrap_or_else(|p| p.into_inner());
        let last = printed.entry((e.migration.clone(), wait)).or_insert(0);
        if *last != 0 && e.ts_ms.saturating_sub(*last) < REPEAT_EVERY_MS {
            return true;
        }
        *last = e.ts_ms.max(1);
        false
    }

    /// Lines that name their migration (`A.A_CUTOVER catch_up done ...`),
    /// for `apply`, whose migrations may run side by side.
    pub fn fleet(mode: Mode) -> Self {
        Self { fleet: true, ..Self::new(mode) }
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
            // Rollback's steps are not timed: no "done in 0 ms".
            EventKind::StepDone { ms: None, .. } => {
                format!("{} done {}", e.step, compact(&w.detail))
            }
            EventKind::StepDone { ms: Some(ms), .. } => {
                format!("{} done in {} {}", e.step, render::ms(*ms), compact(&w.detail))
            }
            // What a rolling run waits for, and the way on.
            EventKind::Progress(cutover_nats::engine::Progress::Rollout { on_old, on_new })
                if !on_old.is_empty() =>
            {
                format!(
                    "{} waiting for {} (still on the old consumer) to be replaced; on the new durable: {}; Ctrl-C stops at a safe point, then `nats-cutover run --resume {} --proceed` goes on without them",
                    e.step,
                    on_old.join(", "),
                    if on_new.is_empty() { "none yet".to_string() } else { on_new.join(", ") },
                    e.migration
                )
            }
            // A fence rollback waits for the instances to follow the route's deletion.
            EventKind::Progress(cutover_nats::engine::Progress::AwaitFollowers {
                consumer,
                instances,
                deadline_ms,
            }) => format!(
                "{} waiting for {} to stop fetching from {consumer} (the route is deleted; their registrations still list it in `bound`) before the old consumer is given back{}",
                e.step,
                instances.join(", "),
                match deadline_ms {
                    Some(ms) => format!(", {} at most", render::ms(*ms as f64)),
                    None => ": its max_deliver is limited, so a message they nak as above the fence could be given up; no deadline: stop an instance that does not follow the route record and the rollback goes on once its registration lapses".into(),
                }
            ),
            // A rollback's settle: what it waits for, for how long.
            EventKind::Progress(cutover_nats::engine::Progress::RollbackSettling {
                stream,
                ack_pending,
                delivered,
                ack_floor,
                waited_ms,
                timeout_ms,
            }) => format!(
                "{} held on {stream} for the rollback, waiting for its workers' acks: {ack_pending} unacknowledged (delivered {delivered}, ack floor {ack_floor}), {} of {} waited; past that the rollback fails with it serving",
                e.step,
                render::ms(*waited_ms as f64),
                render::ms(*timeout_ms as f64),
            ),
            // Publishers split across systems: what A still stores, and the way on.
            EventKind::Progress(cutover_nats::engine::Progress::AwaitPublishers {
                a_stored,
                interval_ms,
                idle_ms,
                next,
                ..
            }) => format!(
                "{} waiting for the publishers to be repointed to the target side: {} stored {a_stored} messages in the last {} ({} idle); once every publisher publishes on the target side, `{next}` seals it",
                e.step,
                e.migration.split('.').next().unwrap_or_default(),
                render::ms(*interval_ms),
                render::ms(*idle_ms),
            ),
            _ => format!("{} {} {}", e.step, w.kind, compact(&w.detail)),
        };
        if self.fleet {
            return Some(format!("[{t:>8.3}s] {} {text}", e.migration));
        }
        Some(format!("[{t:>8.3}s] {text}"))
    }
}

/// An event's details as `key=value`, numbers rounded: `gap_ms: 12.3456789`
/// reads `gap=12.3 ms` (the JSON events keep the exact value).
fn compact(v: &serde_json::Value) -> String {
    match v.as_object() {
        Some(m) => m
            .iter()
            .filter(|(k, v)| *k != "ms" && !v.is_null())
            .map(|(k, v)| match (k.strip_suffix("_ms"), v.as_f64()) {
                // `fence` and `fence_ms` are two things: keep the suffix then.
                (Some(name), Some(x)) if !m.contains_key(name) => {
                    format!("{name}={}", render::ms(x))
                }
                (Some(_), Some(x)) => format!("{k}={}", render::ms(x)),
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
            Mode::Lines | Mode::Spinner if self.repeats(&e) => {}
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
        assert_eq!(
            compact(&json!({"fence": 1754, "fence_ms": 40.23, "longest_pause_ms": null})),
            "fence=1754 fence_ms=40.2 ms"
        );
        assert_eq!(compact(&json!({"ratio": 0.123456})), "ratio=0.123");
        assert_eq!(compact(&json!({"checkpoint": 10})), "checkpoint=10");
        assert_eq!(compact(&json!({"moved": true, "ms": 3.0})), "moved=true");
    }

    #[test]
    fn a_waits_repeated_progress_prints_once_each_five_seconds() {
        let r = Render::new(Mode::Lines);
        let wait = |ms: u64, migration: &str| Event {
            ts_ms: r.t0 + ms,
            kind: EventKind::Progress(cutover_nats::engine::Progress::WindowRestored {
                duplicate_window_ns: 120_000_000_000,
                remaining_ms: 120_000 - ms,
            }),
            step: Step::MovePublishers,
            migration: migration.into(),
        };
        let shown: Vec<u64> =
            (0..=12).map(|s| s * 1000).filter(|ms| !r.repeats(&wait(*ms, "A.B"))).collect();
        assert_eq!(shown, [0, 5000, 10_000]);
        assert!(!r.repeats(&wait(10_500, "B.A")), "another migration's wait is its own");
        let done = Event { kind: EventKind::StepStarted, ..wait(10_600, "A.B") };
        assert!(!r.repeats(&done), "only a wait's progress repeats");
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

    #[test]
    fn a_rolling_wait_says_who_and_the_way_on() {
        let r = Render::new(Mode::Lines);
        let rollout =
            cutover_nats::engine::Progress::Rollout { on_old: vec!["l2@1".into()], on_new: vec![] };
        let e = Event {
            ts_ms: r.t0,
            kind: EventKind::Progress(rollout),
            step: Step::Consumer("worker".into()),
            migration: "A.B".into(),
        };
        let line = r.line(&e).unwrap();
        assert!(line.contains("waiting for l2@1 (still on the old consumer)"), "{line}");
        assert!(line.contains("on the new durable: none yet"), "{line}");
        assert!(line.contains("`nats-cutover run --resume A.B --proceed`"), "{line}");
    }

    #[test]
    fn a_rollback_settle_says_what_it_waits_for_and_how_long_it_may() {
        let r = Render::new(Mode::Lines);
        let settling = cutover_nats::engine::Progress::RollbackSettling {
            stream: "ORDERS_V2".into(),
            ack_pending: 3,
            delivered: 40,
            ack_floor: 37,
            waited_ms: 2000,
            timeout_ms: 60000,
        };
        let e = Event {
            ts_ms: r.t0,
            kind: EventKind::Progress(settling),
            step: Step::Consumer("worker".into()),
            migration: "A.B".into(),
        };
        let line = r.line(&e).unwrap();
        assert!(line.contains("held on ORDERS_V2 for the rollback"), "{line}");
        assert!(line.contains("3 unacknowledged (delivered 40, ack floor 37)"), "{line}");
        assert!(line.contains("2000 ms of 1m waited"), "{line}");
    }

    #[test]
    fn a_wait_for_split_publishers_says_what_a_stored_and_the_way_on() {
        let r = Render::new(Mode::Lines);
        let wait = cutover_nats::engine::Progress::AwaitPublishers {
            a_stored: 12,
            interval_ms: 3000.4,
            a_last_seq: 500,
            idle_ms: 0.5,
            waited_ms: 4000.0,
            next: "nats-cutover run --resume A.B --proceed".into(),
        };
        let e = Event {
            ts_ms: r.t0,
            kind: EventKind::Progress(wait),
            step: Step::AwaitPublishers,
            migration: "A.B".into(),
        };
        let line = r.line(&e).unwrap();
        assert!(line.contains("A stored 12 messages in the last 3000 ms"), "{line}");
        assert!(line.contains("`nats-cutover run --resume A.B --proceed` seals it"), "{line}");
    }
}
