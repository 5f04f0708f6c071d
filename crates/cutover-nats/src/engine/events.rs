//! Progress events: what the engine reports while it works. The CLI renders
//! them (human lines, a spinner, or one JSON object per line); the demo and the
//! report record them.

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    pub migration: String,
    /// `step_started`, `step_done`, `progress`, `info`, `warning`.
    pub kind: String,
    pub step: String,
    pub detail: Value,
}

pub trait Sink: Send + Sync {
    fn emit(&self, e: Event);
}

/// Discards events.
pub struct NoSink;

impl Sink for NoSink {
    fn emit(&self, _: Event) {}
}

/// Collects events (tests, reports).
#[derive(Default)]
pub struct Collect(pub std::sync::Mutex<Vec<Event>>);

impl Sink for Collect {
    fn emit(&self, e: Event) {
        self.0.lock().unwrap().push(e);
    }
}

impl<F: Fn(Event) + Send + Sync> Sink for F {
    fn emit(&self, e: Event) {
        self(e)
    }
}
