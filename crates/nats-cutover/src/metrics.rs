//! Prometheus metrics for `run` and `watch`, served at `http://ADDR/metrics`
//! only when `--metrics-addr ADDR` is given, and bound to exactly that address.
//!
//! Names follow prometheus-nats-exporter's JetStream metrics: the server's JSON
//! field names under a prefix (`num_pending` becomes
//! `nats_cutover_consumer_num_pending`) and the labels `stream_name` and
//! `consumer_name`, so dashboards can join them with the exporter's series.
//!
//! The server is a few lines on a tokio `TcpListener` rather than a dependency:
//! one path, one verb, text format 0.0.4, `Connection: close`. It belongs to the
//! [`MetricsServer`] handle and stops when that drops.

use crate::error::{CliError, Result};
use cutover_core::journal::Step;
use cutover_nats::engine::{Event, EventKind, Progress, Sink};
use cutover_nats::observe::ConsumerSample;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

/// A metric family: name, help and type are fixed; samples come and go.
#[derive(Debug, Clone, Copy)]
pub struct Def {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

const fn gauge(name: &'static str, help: &'static str) -> Def {
    Def { name, help, kind: Kind::Gauge }
}

const fn counter(name: &'static str, help: &'static str) -> Def {
    Def { name, help, kind: Kind::Counter }
}

pub const STEP: Def =
    gauge("nats_cutover_step", "Cut-over step state: 1 running, 2 done (absent: not started).");
pub const STEP_SECONDS: Def =
    gauge("nats_cutover_step_duration_seconds", "How long a finished step took.");
pub const CONSUMERS_MOVED: Def =
    gauge("nats_cutover_consumers_moved", "Consumers whose new durable exists on the new stream.");
pub const CATCHUP_REMAINING: Def = gauge(
    "nats_cutover_catchup_remaining",
    "Messages of the old stream the new one has yet to source before the consumers move.",
);
pub const NUM_PENDING: Def = gauge(
    "nats_cutover_consumer_num_pending",
    "Messages the consumer has yet to deliver (num_pending).",
);
pub const NUM_ACK_PENDING: Def = gauge(
    "nats_cutover_consumer_num_ack_pending",
    "Delivered messages awaiting an ack (num_ack_pending).",
);
pub const NUM_WAITING: Def =
    gauge("nats_cutover_consumer_num_waiting", "Pull requests waiting (num_waiting).");
pub const DELIVERED: Def = gauge(
    "nats_cutover_consumer_delivered_stream_seq",
    "Stream sequence the consumer has delivered up to (delivered.stream_seq).",
);
pub const ACK_FLOOR: Def = gauge(
    "nats_cutover_consumer_ack_floor_stream_seq",
    "Stream sequence every message up to which is acked (ack_floor.stream_seq).",
);
pub const PAUSED: Def = gauge("nats_cutover_consumer_paused", "1 while the consumer is paused.");
pub const SETTLED: Def = gauge(
    "nats_cutover_consumer_settled",
    "1 while nothing awaits an ack (the checkpoint condition, with paused).",
);
pub const CHECKPOINT: Def = gauge("nats_cutover_checkpoint", "The consumer's checkpoint F: every sequence up to it is settled (paused and nothing awaiting an ack).");
pub const STATUS: Def = gauge(
    "nats_cutover_consumer_status",
    "1 for the consumer's current status (ok, draining, stalled, stopped), 0 for the others.",
);
pub const TICKS: Def = counter("nats_cutover_watch_ticks_total", "Consumer reads `watch` made.");
pub const WARNINGS: Def = counter(
    "nats_cutover_warnings_total",
    "Warnings the cut-over engine reported (e.g. a stuck message let through).",
);
pub const ERRORS: Def =
    counter("nats_cutover_errors_total", "Failed reads of the server, and failed runs.");

/// What `run` serves.
pub const RUN: &[Def] = &[
    STEP,
    STEP_SECONDS,
    CONSUMERS_MOVED,
    CATCHUP_REMAINING,
    NUM_PENDING,
    NUM_ACK_PENDING,
    CHECKPOINT,
    WARNINGS,
    ERRORS,
];
/// What `watch` serves.
pub const WATCH: &[Def] = &[
    NUM_PENDING,
    NUM_ACK_PENDING,
    NUM_WAITING,
    DELIVERED,
    ACK_FLOOR,
    PAUSED,
    SETTLED,
    CHECKPOINT,
    STATUS,
    TICKS,
    ERRORS,
];

type Labels = Vec<(String, String)>;

/// The metric values, shared by whoever updates them and the HTTP server.
pub struct Registry {
    families: Mutex<Vec<(Def, BTreeMap<Labels, f64>)>>,
}

fn labels(l: &[(&str, &str)]) -> Labels {
    l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

impl Registry {
    pub fn new(defs: &[Def]) -> Arc<Self> {
        Arc::new(Self {
            families: Mutex::new(defs.iter().map(|d| (*d, BTreeMap::new())).collect()),
        })
    }

    fn with(&self, def: &Def, f: impl FnOnce(&mut BTreeMap<Labels, f64>)) {
        let mut fams = self.families.lock().unwrap();
        if let Some((_, m)) = fams.iter_mut().find(|(d, _)| d.name == def.name) {
            f(m);
        }
    }

    pub fn set(&self, def: &Def, l: &[(&str, &str)], v: f64) {
        self.with(def, |m| {
            m.insert(labels(l), v);
        });
    }

    pub fn add(&self, def: &Def, l: &[(&str, &str)], v: f64) {
        self.with(def, |m| *m.entry(labels(l)).or_default() += v);
    }

    pub fn remove(&self, def: &Def, l: &[(&str, &str)]) {
        self.with(def, |m| {
            m.remove(&labels(l));
        });
    }

    #[cfg(test)]
    pub fn get(&self, def: &Def, l: &[(&str, &str)]) -> Option<f64> {
        let fams = self.families.lock().unwrap();
        fams.iter().find(|(d, _)| d.name == def.name).and_then(|(_, m)| m.get(&labels(l)).copied())
    }

    /// The Prometheus text exposition format (0.0.4). Counters start at 0 so a
    /// rate over them is defined before the first increment.
    pub fn render(&self) -> String {
        let fams = self.families.lock().unwrap();
        let mut out = String::new();
        for (d, samples) in fams.iter() {
            let kind = match d.kind {
                Kind::Gauge => "gauge",
                Kind::Counter => "counter",
            };
            let _ = writeln!(out, "# HELP {} {}", d.name, d.help);
            let _ = writeln!(out, "# TYPE {} {kind}", d.name);
            if samples.is_empty() && d.kind == Kind::Counter {
                let _ = writeln!(out, "{} 0", d.name);
            }
            for (l, v) in samples {
                let _ = writeln!(out, "{}{} {}", d.name, fmt_labels(l), fmt_value(*v));
            }
        }
        out
    }
}

fn fmt_labels(l: &Labels) -> String {
    if l.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = l
        .iter()
        .map(|(k, v)| {
            format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The HTTP server; stops when dropped.
pub struct MetricsServer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` (exactly: nothing else is opened) and serves the registry.
pub async fn serve(addr: SocketAddr, reg: Arc<Registry>) -> Result<MetricsServer> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Flag(format!("cannot serve metrics on --metrics-addr {addr}: {e}; pick a free address and port (e.g. 127.0.0.1:9477)")))?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else { continue };
            let reg = reg.clone();
            tokio::spawn(async move {
                // A slow or silent client must not hold a task forever.
                let _ = tokio::time::timeout(Duration::from_secs(5), answer(conn, &reg)).await;
            });
        }
    });
    Ok(MetricsServer { addr, task })
}

async fn answer(mut conn: TcpStream, reg: &Registry) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // Only the request line matters; read the head, bounded.
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", reg.render())
        }
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET /metrics\n".to_string(),
        ),
    };
    let mut resp = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    if method != "HEAD" {
        resp.push_str(&body);
    }
    conn.write_all(resp.as_bytes()).await?;
    conn.shutdown().await
}

/// `run`'s metrics from one engine event; `from` is the stream the consumers
/// leave (engine events name consumers only).
pub fn record_event(reg: &Registry, from: &str, e: &Event) {
    let m = e.migration.as_str();
    let step = e.step.to_string();
    match &e.kind {
        EventKind::StepStarted => reg.set(&STEP, &[("migration", m), ("step", &step)], 1.0),
        EventKind::StepDone { ms, .. } => {
            reg.set(&STEP, &[("migration", m), ("step", &step)], 2.0);
            if let Some(ms) = ms {
                reg.set(&STEP_SECONDS, &[("migration", m), ("step", &step)], ms / 1000.0);
            }
            if e.step == Step::CatchUp {
                reg.set(&CATCHUP_REMAINING, &[("migration", m)], 0.0);
            }
        }
        EventKind::Progress(Progress::CatchUp { remaining, .. }) => {
            reg.set(&CATCHUP_REMAINING, &[("migration", m)], *remaining as f64);
        }
        EventKind::Progress(p) => {
            let Some(consumer) = e.step.consumer() else { return };
            let l = [("stream_name", from), ("consumer_name", consumer)];
            match p {
                Progress::Draining { ack_pending, .. }
                | Progress::DrainingUnpaused { ack_pending, .. }
                | Progress::RollbackSettling { ack_pending, .. } => {
                    reg.set(&NUM_ACK_PENDING, &l, *ack_pending as f64)
                }
                Progress::Settled { checkpoint, .. } => {
                    reg.set(&CHECKPOINT, &l, *checkpoint as f64)
                }
                Progress::Moved { .. } => reg.add(&CONSUMERS_MOVED, &[("migration", m)], 1.0),
                Progress::CatchUp { .. }
                | Progress::WindowRaised { .. }
                | Progress::WindowRestored { .. }
                | Progress::Fenced { .. }
                | Progress::FenceSettled { .. }
                | Progress::Rollout { .. }
                | Progress::AwaitFollowers { .. }
                | Progress::AwaitPublishers { .. } => {}
            }
        }
        EventKind::Warning(_) => reg.add(&WARNINGS, &[], 1.0),
        EventKind::Info(_) => {}
    }
}

/// Passes the engine's events on to `inner`, feeding `run`'s metrics on the
/// way.
pub struct Feed<'a> {
    pub inner: &'a dyn Sink,
    pub reg: Arc<Registry>,
    /// The stream the consumers leave.
    pub from: String,
}

impl Sink for Feed<'_> {
    fn emit(&self, e: Event) {
        record_event(&self.reg, &self.from, &e);
        self.inner.emit(e);
    }
}

/// `run`'s consumer gauges from one sample of the sampler; `from` and `to` are
/// the plan's streams.
pub fn record_sample(reg: &Registry, from: &str, to: &str, s: &ConsumerSample) {
    let l = [("stream_name", s.stream.as_str()), ("consumer_name", s.consumer.as_str())];
    reg.set(&NUM_PENDING, &l, s.num_pending as f64);
    reg.set(&NUM_ACK_PENDING, &l, s.num_ack_pending as f64);
    if s.stream == to {
        // The old durable no longer delivers: drop its series rather than
        // leave its last value standing.
        let old = [("stream_name", from), ("consumer_name", s.consumer.as_str())];
        reg.remove(&NUM_PENDING, &old);
        reg.remove(&NUM_ACK_PENDING, &old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cutover_nats::engine::{StepResult, Warning};

    fn ev(step: Step, kind: EventKind) -> Event {
        Event { ts_ms: 0, migration: "A.B".into(), step, kind }
    }

    #[test]
    fn engine_events_become_metrics() {
        let reg = Registry::new(RUN);
        let w = || Step::Consumer("worker".into());
        for e in [
            ev(Step::CatchUp, EventKind::StepStarted),
            ev(
                Step::CatchUp,
                EventKind::Progress(Progress::CatchUp { remaining: 42, reported_lag: None }),
            ),
            ev(
                w(),
                EventKind::Progress(Progress::Draining {
                    ack_pending: 3,
                    delivered: 10,
                    ack_floor: 7,
                }),
            ),
            ev(w(), EventKind::Progress(Progress::Settled { checkpoint: 12, drain_ms: 4 })),
            ev(
                w(),
                EventKind::Progress(Progress::Moved {
                    checkpoint: 12,
                    b_start: 13,
                    translate_gets: 1,
                    gap_ms: 1.0,
                    longest_pause_ms: None,
                }),
            ),
            ev(w(), EventKind::Warning(Warning::PauseCut { stall_ms: 5, ack_pending: 1 })),
        ] {
            record_event(&reg, "A", &e);
        }
        assert_eq!(reg.get(&STEP, &[("migration", "A.B"), ("step", "catch_up")]), Some(1.0));
        assert_eq!(reg.get(&CATCHUP_REMAINING, &[("migration", "A.B")]), Some(42.0));
        let c = [("stream_name", "A"), ("consumer_name", "worker")];
        assert_eq!(reg.get(&NUM_ACK_PENDING, &c), Some(3.0));
        assert_eq!(reg.get(&CHECKPOINT, &c), Some(12.0));
        assert_eq!(reg.get(&CONSUMERS_MOVED, &[("migration", "A.B")]), Some(1.0));
        assert_eq!(reg.get(&WARNINGS, &[]), Some(1.0));
        let done =
            EventKind::StepDone { ms: Some(250.0), result: StepResult::CatchUp { origin_seq: 1 } };
        record_event(&reg, "A", &ev(Step::CatchUp, done));
        assert_eq!(reg.get(&STEP, &[("migration", "A.B"), ("step", "catch_up")]), Some(2.0));
        assert_eq!(reg.get(&CATCHUP_REMAINING, &[("migration", "A.B")]), Some(0.0));
        assert_eq!(
            reg.get(&STEP_SECONDS, &[("migration", "A.B"), ("step", "catch_up")]),
            Some(0.25)
        );
    }

    #[test]
    fn text_format_has_help_type_and_escaped_labels() {
        let reg = Registry::new(&[NUM_PENDING, ERRORS]);
        reg.set(&NUM_PENDING, &[("stream_name", "A"), ("consumer_name", "we\"ird\\")], 7.0);
        let t = reg.render();
        assert!(t.contains("# TYPE nats_cutover_consumer_num_pending gauge\n"), "{t}");
        assert!(t.contains("nats_cutover_consumer_num_pending{stream_name=\"A\",consumer_name=\"we\\\"ird\\\\\"} 7\n"), "{t}");
        assert!(
            t.contains("# TYPE nats_cutover_errors_total counter\nnats_cutover_errors_total 0\n"),
            "{t}"
        );
    }

    #[test]
    fn values_print_as_integers_when_whole() {
        assert_eq!(fmt_value(3.0), "3");
        assert_eq!(fmt_value(0.25), "0.25");
    }
}
