//! The self-contained HTML report of a `demo` or a `run`: one file, no network
//! fetch, readable offline and attachable to a change ticket.
//!
//! What it shows: a timeline (publish and processed rates, consumer `num_pending`
//! and `num_ack_pending`) with every step and each checkpoint marked, the summary
//! (published, processed, lost, duplicated, stalls, cut-over time, step
//! durations), the verification, the consumers' checkpoints and the plan.
//!
//! How: Rust prepares everything that needs deciding (rates, step spans,
//! markers; pure functions, unit-tested) and renders the tables as escaped HTML;
//! an inline script draws the chart as SVG from the embedded JSON. The script
//! marks the page for tests: `data-chart="drawn"` and `data-points` on `<body>`
//! once the chart is drawn, `data-errors` if a script error or a
//! `console.error` happened.

use cutover_core::journal::Journal;
use cutover_core::plan::Plan;
use cutover_core::verify::Report as VerifyReport;
use cutover_demo::load::{LoadReport, Sample};
use cutover_demo::scenario::Outcome;
use cutover_nats::engine::{Event, EventKind, Progress};
use cutover_nats::observe::RunRecord;
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// Everything a report shows: what the run left ([`RunRecord`], assembled by
/// `cutover_nats::observe`) and, for the demo, the workload it measured.
#[derive(Debug, Clone)]
pub struct ReportData {
    /// What ran: "demo" or "run".
    pub kind: String,
    pub run: RunRecord,
    /// The live workload, when there was one (the demo's).
    pub load: Option<LoadSection>,
    /// How long the cut-over took, when measured by the caller; otherwise the
    /// span of the step events.
    pub cutover_ms: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct LoadSection {
    pub rate: u32,
    pub workers: usize,
    pub report: LoadReport,
    /// Every published message processed exactly once, nothing extra.
    pub verified: bool,
}

impl ReportData {
    pub fn from_outcome(o: &Outcome) -> Self {
        Self {
            kind: "demo".into(),
            run: RunRecord {
                server_version: o.server_version.clone(),
                started_ms: o.started_ms,
                plan: o.plan.clone(),
                events: o.events.clone(),
                consumer_samples: o.consumer_samples.clone(),
                journal: Some(o.journal.clone()),
                error: None,
                verify: None,
            },
            load: Some(LoadSection {
                rate: o.rate,
                workers: o.workers,
                report: o.load.clone(),
                verified: o.verified,
            }),
            cutover_ms: Some(o.cutover_ms),
        }
    }

    /// `run`'s report.
    pub fn from_run(run: RunRecord) -> Self {
        Self { kind: "run".into(), run, load: None, cutover_ms: None }
    }

    /// The cut-over's duration: measured by the caller, else first step start
    /// to last step end.
    fn cutover_ms(&self) -> Option<f64> {
        self.cutover_ms.or_else(|| {
            let first = self.run.events.iter().find(|e| e.kind == EventKind::StepStarted)?.ts_ms;
            let last = self
                .run
                .events
                .iter()
                .rev()
                .find(|e| matches!(e.kind, EventKind::StepDone { .. }))?
                .ts_ms;
            Some(last.saturating_sub(first) as f64)
        })
    }

    fn verdict(&self) -> (&'static str, &'static str) {
        if let Some(Ok(v)) = &self.run.verify {
            if !v.holds {
                return ("bad", "NOT VERIFIED: the streams show lost, duplicated, out-of-order or misplaced messages");
            }
        }
        match (&self.run.error, &self.load) {
            (Some(_), _) => ("bad", "FAILED"),
            (None, Some(l)) if l.verified => ("good", "VERIFIED: every published message was processed exactly once"),
            (None, Some(_)) => ("bad", "NOT VERIFIED: messages were lost, duplicated or extra"),
            (None, None) => match &self.run.journal {
                Some(j) if j.phase == cutover_core::journal::Phase::Done => match &self.run.verify {
                    Some(Ok(_)) => ("good", "VERIFIED: every consumer moved at an exact checkpoint, the new stream holds every message once"),
                    _ => ("good", "DONE: every consumer moved at an exact checkpoint"),
                },
                Some(_) => ("bad", "NOT FINISHED"),
                None => ("bad", "NO JOURNAL"),
            },
        }
    }
}

/// A rate (messages per second) at time `t` (seconds).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RatePoint {
    pub t: f64,
    pub publish: f64,
    pub processed: f64,
}

/// Rates from the workload's cumulative counters, each over the trailing
/// `window_ms` (the counters are sampled every 100 ms; a few samples smooth
/// the batching of pull workers without hiding a stall of that order).
pub fn rates(samples: &[Sample], window_ms: u64) -> Vec<RatePoint> {
    let mut out = Vec::with_capacity(samples.len());
    for (i, s) in samples.iter().enumerate() {
        let j = samples[..i].iter().rposition(|p| p.t_ms + window_ms <= s.t_ms).unwrap_or(0);
        if j == i {
            continue;
        }
        let p = &samples[j];
        let dt = s.t_ms.saturating_sub(p.t_ms);
        if dt == 0 {
            continue;
        }
        let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 * 1000.0 / dt as f64;
        out.push(RatePoint {
            t: s.t_ms as f64 / 1000.0,
            publish: per_s(p.published, s.published),
            processed: per_s(p.processed, s.processed),
        });
    }
    out
}

/// A step's span on the timeline (seconds); `end` is `None` if it never finished.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSpan {
    pub name: String,
    pub start: f64,
    pub end: Option<f64>,
    pub ms: Option<f64>,
}

/// Pairs each `step_started` with the `step_done` of the same step after it.
pub fn step_spans(events: &[Event], started_ms: u64) -> Vec<StepSpan> {
    let secs = |ts: u64| (ts as f64 - started_ms as f64) / 1000.0;
    let mut spans: Vec<StepSpan> = vec![];
    for e in events {
        let name = e.step.to_string();
        match &e.kind {
            EventKind::StepStarted => {
                spans.push(StepSpan { name, start: secs(e.ts_ms), end: None, ms: None })
            }
            EventKind::StepDone { ms, .. } => {
                if let Some(s) = spans.iter_mut().rev().find(|s| s.name == name && s.end.is_none())
                {
                    s.end = Some(secs(e.ts_ms));
                    s.ms = *ms;
                } else {
                    // Done without a start in this recording (resumed run): a point.
                    spans.push(StepSpan {
                        name,
                        start: secs(e.ts_ms),
                        end: Some(secs(e.ts_ms)),
                        ms: *ms,
                    });
                }
            }
            _ => {}
        }
    }
    spans
}

/// A labelled instant on the timeline (seconds).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Marker {
    pub t: f64,
    pub label: String,
}

/// The checkpoints (each consumer settled at F) and the moves (its new durable
/// positioned on B), from the engine's per-consumer progress events.
pub fn checkpoint_markers(events: &[Event], started_ms: u64) -> (Vec<Marker>, Vec<Marker>) {
    let secs = |ts: u64| (ts as f64 - started_ms as f64) / 1000.0;
    let (mut checkpoints, mut moves) = (vec![], vec![]);
    for e in events {
        let (Some(consumer), EventKind::Progress(p)) = (e.step.consumer(), &e.kind) else {
            continue;
        };
        // The engine reports a consumer twice: settled at F (with its drain
        // time), then moved (with the new durable's start on B).
        match p {
            Progress::Moved { b_start, .. } => moves.push(Marker {
                t: secs(e.ts_ms),
                label: format!("{consumer} on new stream from seq {b_start}"),
            }),
            Progress::Settled { checkpoint: f, .. } => checkpoints
                .push(Marker { t: secs(e.ts_ms), label: format!("checkpoint {consumer} F={f}") }),
            _ => {}
        }
    }
    (checkpoints, moves)
}

/// The chart's data: everything the inline script draws, in seconds.
pub fn chart_data(d: &ReportData) -> Value {
    let rates = d.load.as_ref().map(|l| rates(&l.report.samples, 300)).unwrap_or_default();
    let mut consumers: Vec<(String, Vec<Value>)> = vec![];
    for p in &d.run.consumer_samples {
        let point = json!({ "t": p.t_ms as f64 / 1000.0, "pending": p.num_pending, "ack_pending": p.num_ack_pending, "stream": p.stream });
        match consumers.iter_mut().find(|(n, _)| *n == p.consumer) {
            Some((_, v)) => v.push(point),
            None => consumers.push((p.consumer.clone(), vec![point])),
        }
    }
    let steps = step_spans(&d.run.events, d.run.started_ms);
    let (checkpoints, moves) = checkpoint_markers(&d.run.events, d.run.started_ms);
    let mut t_max: f64 = 0.0;
    t_max = rates.iter().map(|r| r.t).fold(t_max, f64::max);
    t_max = d.run.consumer_samples.iter().map(|p| p.t_ms as f64 / 1000.0).fold(t_max, f64::max);
    t_max = steps.iter().map(|s| s.end.unwrap_or(s.start)).fold(t_max, f64::max);
    json!({
        "t_max": t_max,
        "rates": rates,
        "consumers": consumers.into_iter().map(|(name, points)| json!({ "name": name, "points": points })).collect::<Vec<_>>(),
        "steps": steps,
        "checkpoints": checkpoints,
        "moves": moves,
    })
}

pub fn write(path: &Path, d: &ReportData) -> std::io::Result<()> {
    std::fs::write(path, render(d))
}

pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

pub(crate) fn table(out: &mut String, headers: &[&str], rows: &[Vec<String>]) {
    out.push_str("<table><thead><tr>");
    for h in headers {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for r in rows {
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<td>{}</td>", esc(c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

/// The structural verification: every message of the old stream once in the
/// new one, in order, and each consumer handed over without gap or overlap.
fn verify_section(h: &mut String, v: &VerifyReport) {
    let _ = write!(
        h,
        "<h3>Streams</h3><p class=\"verdict {}\">{}</p><p>{} and {} read once (headers only): {} message(s) of {} sourced into {}, {} published to it directly; slipped duplicates {}.</p>",
        if v.holds { "good" } else { "bad" },
        if v.holds { "HOLDS: every message once, in order, handed over exactly" } else { "DOES NOT HOLD" },
        esc(&v.from),
        esc(&v.to),
        v.streams.b.sourced,
        esc(&v.from),
        esc(&v.to),
        v.streams.b.direct,
        v.streams.slipped_duplicates
    );
    let rows: Vec<Vec<String>> = v
        .consumers
        .iter()
        .map(|c| [render::counts_cells(c), vec![c.b_start.to_string()]].concat())
        .collect();
    let headers =
        [&render::COUNTS_HEADERS[..], &["settled at F", "F (old)", "start (new)"]].concat();
    table(h, &headers, &rows);
    if !v.offenders.is_empty() {
        let rows: Vec<Vec<String>> = v
            .offenders
            .iter()
            .map(|o| [render::offender_cells(o), vec![o.detail.clone()]].concat())
            .collect();
        h.push_str("<p>Offending messages (the first of each kind):</p>");
        table(h, &["kind", "consumer", "old seq", "new seq", "msg id", "what"], &rows);
    }
}

use crate::render::{self, ms};

/// Embeds JSON in a `<script>`: `<` escaped so no `</script>` or `<!--` can end
/// or confuse the element (valid JSON: only strings contain `<`).
fn script_json(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into()).replace('<', "\\u003c")
}

pub fn render(d: &ReportData) -> String {
    let generated = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let mut h = String::new();
    header(&mut h, d, &generated);
    timeline_section(&mut h);
    summary_section(&mut h, d);
    verification_section(&mut h, d);
    consumers_section(&mut h, d);
    plan_section(&mut h, &d.run.plan);
    let _ = write!(h, "<footer>{} engine events recorded.</footer>", d.run.events.len());
    let _ = write!(
        h,
        "<script id=chart-data type=application/json>{}</script>",
        script_json(&chart_data(d))
    );
    let _ = write!(h, "<script>{CHART}</script></body></html>");
    h
}

/// The document's head, the error capture, and the header with the verdict.
fn header(h: &mut String, d: &ReportData, generated: &str) {
    let plan = &d.run.plan;
    let (verdict_class, verdict) = d.verdict();
    let _ = write!(
        h,
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width,initial-scale=1\"><title>nats-cutover {} report: {} to {}</title><style>{CSS}</style></head><body>",
        esc(&d.kind),
        esc(&plan.from),
        esc(&plan.to)
    );
    // First thing in <body>: from here on every script error is recorded.
    let _ = write!(h, "<script>{ERROR_CAPTURE}</script>");
    let _ = write!(
        h,
        "<header><h1>nats-cutover {}: {} &rarr; {}</h1><p class=meta>server {} &middot; strategy {} &middot; mode {} &middot; generated {}</p><p class=\"verdict {verdict_class}\">{}</p>",
        esc(&d.kind),
        esc(&plan.from),
        esc(&plan.to),
        esc(&d.run.server_version),
        plan.strategy.as_str(),
        plan.mode.as_str(),
        esc(generated),
        esc(verdict)
    );
    if let Some(e) = &d.run.error {
        let _ = write!(h, "<p class=\"verdict bad\">error: {}</p>", esc(e));
    }
    h.push_str("</header>");
}

fn timeline_section(h: &mut String) {
    h.push_str("<section><h2>Timeline</h2><div id=chart role=img aria-label=\"timeline of rates and consumer state with the cut-over steps\"></div>");
    h.push_str("<p class=note>Time in seconds from the start. Bands: the cut-over's steps. Red: a consumer's checkpoint F (paused and settled). Teal: its new durable positioned on the new stream.</p></section>");
}

fn summary_section(h: &mut String, d: &ReportData) {
    h.push_str("<section><h2>Summary</h2>");
    let mut rows = workload_rows(d.load.as_ref());
    rows.push(vec![
        "cut-over duration".into(),
        d.cutover_ms().map(ms).unwrap_or_else(|| "-".into()),
    ]);
    if let Some(r) = d.run.plan.a_ingest {
        // Where B would stop keeping up: the threshold plan warns at.
        rows.push(vec![
            format!("{}'s ingest when planned", d.run.plan.from),
            format!(
                "{:.0} msg/s (plan warns above {:.0} msg/s; run stops before the commit if {} falls behind)",
                r.per_s,
                cutover_core::catchup::INGEST_WARN_PER_S,
                d.run.plan.to
            ),
        ]);
    }
    table(h, &["measure", "value"], &rows);
    let spans = step_spans(&d.run.events, d.run.started_ms);
    let step_rows: Vec<Vec<String>> = spans
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                format!("{:.3} s", s.start),
                s.ms.map(ms).unwrap_or_else(|| "unfinished".into()),
            ]
        })
        .collect();
    h.push_str("<h3>Steps</h3>");
    table(h, &["step", "started at", "duration"], &step_rows);
    h.push_str("</section>");
}

/// The summary's rows about the workload, when one was measured.
fn workload_rows(load: Option<&LoadSection>) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = vec![];
    match load {
        Some(l) => {
            let r = &l.report;
            rows.push(vec!["workload".into(), format!("{} msg/s, {} workers", l.rate, l.workers)]);
            rows.push(vec!["published (acked by JetStream)".into(), r.published.to_string()]);
            rows.push(vec![
                "processed".into(),
                format!("{} ({} unique)", r.processed_total, r.processed_unique),
            ]);
            rows.push(vec!["lost".into(), r.lost_count().to_string()]);
            rows.push(vec![
                "pending on B when the workers stopped (late, not lost)".into(),
                r.pending_on_b.to_string(),
            ]);
            rows.push(vec!["duplicated".into(), r.duplicated.len().to_string()]);
            rows.push(vec!["extra (processed, never published)".into(), r.extra.len().to_string()]);
            rows.push(vec![
                "publish retries (same msg-id) / failures".into(),
                format!("{} / {}", r.publish_retries, r.publish_failures),
            ]);
            rows.push(vec!["max publisher stall".into(), ms(r.max_publish_stall_ms)]);
            rows.push(vec!["max consumer gap".into(), ms(r.max_consumer_gap_ms)]);
        }
        None => rows.push(vec![
            "workload".into(),
            "none measured: `run` moves real applications; `demo` measures a workload end to end"
                .into(),
        ]),
    }
    rows
}

fn verification_section(h: &mut String, d: &ReportData) {
    h.push_str("<section><h2>Verification</h2>");
    match &d.load {
        Some(l) => workload_verification(h, &l.report),
        None => h.push_str("<p>No workload was measured. The evidence each checkpoint was taken from (the paused, settled consumer state) is under Consumers.</p>"),
    }
    match &d.run.verify {
        Some(Ok(v)) => verify_section(h, v),
        Some(Err(e)) => {
            let _ = write!(h, "<p class=bad>The streams could not be verified: {}. Run <code>nats-cutover verify --migration {}.{}</code>.</p>", esc(e), esc(&d.run.plan.from), esc(&d.run.plan.to));
        }
        None => {}
    }
    h.push_str("</section>");
}

/// Every message the publisher got an ack for against what the workers processed.
fn workload_verification(h: &mut String, r: &LoadReport) {
    let _ = write!(
        h,
        "<p>Every message the publisher got a JetStream ack for was compared with what the workers processed: {} published, {} processed once, {} lost, {} pending on B when the workers stopped (late, not lost), {} duplicated, {} extra, {} publish failure(s).</p>",
        r.published,
        r.processed_unique,
        r.lost_count(),
        r.pending_on_b,
        r.duplicated.len(),
        r.extra.len(),
        r.publish_failures
    );
    if !r.lost.is_empty() {
        let _ = write!(
            h,
            "<p class=bad>not processed (first 20; lost unless pending on B): {}</p>",
            esc(&format!("{:?}", &r.lost[..r.lost.len().min(20)]))
        );
    }
    if !r.duplicated.is_empty() {
        let _ = write!(
            h,
            "<p class=bad>duplicated (id, times; first 20): {}</p>",
            esc(&format!("{:?}", &r.duplicated[..r.duplicated.len().min(20)]))
        );
    }
}

fn consumers_section(h: &mut String, d: &ReportData) {
    h.push_str("<section><h2>Consumers</h2>");
    match &d.run.journal {
        Some(j) => consumers_table(h, j),
        None => h.push_str("<p>No journal was written.</p>"),
    }
    h.push_str("</section>");
}

/// Each consumer's progress and the settled state its checkpoint was taken from.
fn consumers_table(h: &mut String, j: &Journal) {
    let rows: Vec<Vec<String>> = j
        .consumers
        .iter()
        .map(|c| {
            let mut row = render::progress_cells(c);
            row.push(
                c.evidence
                    .as_ref()
                    .map(|e| {
                        format!(
                            "delivered {}, ack floor {}, ack pending {}, pending {}, paused {}",
                            e.delivered_stream_seq,
                            e.ack_floor_stream_seq,
                            e.num_ack_pending,
                            e.num_pending,
                            e.paused
                        )
                    })
                    .unwrap_or_else(|| "-".into()),
            );
            row
        })
        .collect();
    let _ = write!(h, "<p>Migration {}, phase {}.</p>", esc(&j.id), esc(j.phase.as_str()));
    let (f_col, start_col) = (format!("checkpoint F on {}", j.from), format!("start on {}", j.to));
    table(
        h,
        &["consumer", "phase", &f_col, &start_col, "gets", "drain", "nudges", "settled state at F"],
        &rows,
    );
}

fn plan_section(h: &mut String, plan: &Plan) {
    h.push_str("<section><h2>Plan</h2>");
    let _ = write!(
        h,
        "<p>Move {} from {} to {}; strategy {}, mode {}, server {}.</p>",
        esc(&plan.consumers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")),
        esc(&plan.from),
        esc(&plan.to),
        plan.strategy.as_str(),
        plan.mode.as_str(),
        esc(&plan.server_version.to_string())
    );
    h.push_str("<h3>Findings</h3>");
    table(h, &render::FINDING_HEADERS, &render::finding_rows(&plan.findings));
    let _ = write!(
        h,
        "<h3>Checkpoint rule</h3><p>{}</p><h3>Steps</h3><ol>",
        esc(&plan.checkpoint_rule)
    );
    for s in &plan.steps {
        let _ = write!(h, "<li><b>{}</b>: {}</li>", esc(&s.title), esc(&s.detail));
    }
    h.push_str("</ol></section>");
}

pub(crate) const CSS: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1240px;color:#1e293b;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e2e8f0;padding-bottom:4px}h3{font-size:14px;margin:16px 0 6px}
.meta{color:#64748b;margin:0 0 8px}.note{color:#64748b;font-size:12px}
.verdict{display:inline-block;padding:4px 10px;border-radius:4px;font-weight:600;margin:4px 0}
.verdict.good{background:#dcfce7;color:#166534}.verdict.bad,.bad{background:#fee2e2;color:#991b1b}
table{border-collapse:collapse;margin:6px 0;font-size:13px}th,td{border:1px solid #e2e8f0;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f8fafc}
#chart svg{width:100%;height:auto;display:block}footer{margin-top:28px;color:#94a3b8;font-size:12px}
"#;

/// Records script errors and console errors on `<body>` (`data-errors`), so a
/// headless browser can tell a page that failed from one that drew.
const ERROR_CAPTURE: &str = r#"
(function(){
  var errors=[];
  function record(m){errors.push(String(m));document.body.dataset.errors=errors.join(" | ");}
  window.onerror=function(msg,src,line,col){record(msg+" at line "+line+":"+col);};
  window.addEventListener("unhandledrejection",function(e){record("unhandled rejection: "+e.reason);});
  var ce=console.error;
  console.error=function(){record(Array.prototype.slice.call(arguments).join(" "));return ce.apply(console,arguments);};
})();
"#;

/// Draws the timeline as inline SVG from #chart-data. Two panels share the time
/// axis: rates (when a workload was measured) and consumer state.
const CHART: &str = r##"
(function(){
  var NS="http://www.w3.org/2000/svg";
  var data=JSON.parse(document.getElementById("chart-data").textContent);
  var W=1200, L=72, R=24, laneH=15, points=0;
  function el(name,attrs,parent,text){var e=document.createElementNS(NS,name);for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;if(parent)parent.appendChild(e);return e;}
  // Round axis steps (1, 2 or 5 times a power of ten), at least minStep.
  function nice(max,minStep){minStep=minStep||0;if(!(max>0))return {top:Math.max(1,minStep),step:Math.max(1,minStep)};var raw=max/5,p=Math.pow(10,Math.floor(Math.log10(raw))),m=raw/p,s=Math.max(minStep,(m<=1?1:m<=2?2:m<=5?5:10)*p);return {top:Math.ceil(max/s-1e-9)*s,step:s};}
  // The axis ends with the data; ticks at round steps within it.
  var tMax=data.t_max>0?data.t_max:1, tx=nice(tMax);
  function x(t){return L+(W-L-R)*Math.max(0,t)/tMax;}
  // Step labels go in lanes above the plot, each in the first lane where it does not overlap.
  var lanes=[], labels=[];
  data.steps.forEach(function(s){
    var text=s.name+(s.ms!=null?" "+s.ms.toFixed(1)+" ms":" (unfinished)"), x0=x(s.start), w=text.length*6.2+8, lane=0;
    while(lanes[lane]!==undefined&&lanes[lane]>x0)lane++;
    lanes[lane]=x0+w;labels.push({s:s,text:text,lane:lane});
  });
  var top=8+Math.max(1,lanes.length)*laneH+6;
  var panels=[];
  if(data.rates.length)panels.push({title:"messages per second",series:[
    {name:"publish rate",color:"#2563eb",dash:"",pts:data.rates.map(function(r){return [r.t,r.publish];})},
    {name:"processed rate",color:"#16a34a",dash:"",pts:data.rates.map(function(r){return [r.t,r.processed];})}]});
  var cs=[];
  data.consumers.forEach(function(c,i){
    var dash=["","6 3","2 3"][i%3];
    cs.push({name:c.name+" num_pending",color:"#9333ea",dash:dash,pts:c.points.map(function(p){return [p.t,p.pending];})});
    cs.push({name:c.name+" num_ack_pending",color:"#ea580c",dash:dash,pts:c.points.map(function(p){return [p.t,p.ack_pending];})});
  });
  if(cs.length)panels.push({title:"consumer messages",series:cs});
  var PH=230, GAP=46, H=top+18+panels.length*(PH+GAP)-GAP+34;
  if(!panels.length)H=top+60;
  var svg=el("svg",{viewBox:"0 0 "+W+" "+H,xmlns:NS,"font-family":"system-ui,sans-serif","font-size":"11"});
  el("rect",{x:0,y:0,width:W,height:H,fill:"#fff"},svg);
  // The plot areas: bands and markers cover these, not the panel titles and legends.
  var areas=panels.map(function(p,pi){var y0=top+pi*(PH+GAP)+18;return [y0,y0+PH];});
  if(!areas.length)areas=[[top+18,H-30]];
  var plotTop=areas[0][0], lastArea=areas[areas.length-1];
  function vline(xv,attrs){areas.forEach(function(a){var l={x1:xv,x2:xv,y1:a[0],y2:a[1]};for(var k in attrs)if(k!=="tip")l[k]=attrs[k];var ln=el("line",l,svg);if(attrs.tip)el("title",{},ln,attrs.tip);});}
  data.steps.forEach(function(s,i){
    var x0=x(s.start), x1=x(s.end!=null?s.end:tMax);
    areas.forEach(function(a){el("rect",{x:x0,y:a[0],width:Math.max(1,x1-x0),height:a[1]-a[0],fill:i%2?"#e2e8f0":"#cbd5e1","fill-opacity":0.45},svg);});
    vline(x0,{stroke:"#475569","stroke-width":1,tip:s.name+" started at "+s.start.toFixed(3)+" s"});
    if(s.end!=null)vline(x1,{stroke:"#94a3b8","stroke-width":1,"stroke-dasharray":"3 3"});
  });
  labels.forEach(function(l){
    var y=8+l.lane*laneH+11, x0=x(l.s.start);
    el("line",{x1:x0,x2:x0,y1:y+2,y2:plotTop,stroke:"#94a3b8","stroke-width":0.6},svg);
    el("text",{x:x0+3,y:y,fill:"#334155"},svg,l.text);
  });
  function vmarks(list,color,yText){
    list.forEach(function(m,i){
      var xm=x(m.t);
      vline(xm,{stroke:color,"stroke-width":2,tip:m.label+" at "+m.t.toFixed(3)+" s"});
      var t=el("text",{x:xm+4,y:yText+i*13,fill:color,"font-weight":"600"},svg,m.label);
      if(xm>W-260){t.setAttribute("x",xm-4);t.setAttribute("text-anchor","end");}
    });
  }
  panels.forEach(function(p,pi){
    var y0=top+pi*(PH+GAP)+18, y1=y0+PH;
    var max=0;p.series.forEach(function(s){s.pts.forEach(function(q){if(q[1]>max)max=q[1];});});
    // Message counts and rates are whole numbers: no fractional ticks.
    var ny=nice(max*1.05,1);
    function y(v){return y1-(y1-y0)*v/ny.top;}
    el("text",{x:L,y:y0-6,"font-weight":"600",fill:"#0f172a","font-size":"12"},svg,p.title);
    for(var v=0;v<=ny.top+1e-9;v+=ny.step){
      el("line",{x1:L,x2:W-R,y1:y(v),y2:y(v),stroke:"#e2e8f0"},svg);
      el("text",{x:L-6,y:y(v)+4,"text-anchor":"end",fill:"#64748b"},svg,Math.round(v).toLocaleString("en-US"));
    }
    el("line",{x1:L,x2:L,y1:y0,y2:y1,stroke:"#64748b"},svg);
    el("line",{x1:L,x2:W-R,y1:y1,y2:y1,stroke:"#64748b"},svg);
    p.series.forEach(function(s){
      if(!s.pts.length)return;
      var d=s.pts.map(function(q){return x(q[0]).toFixed(1)+","+y(q[1]).toFixed(1);}).join(" ");
      var pl=el("polyline",{points:d,fill:"none",stroke:s.color,"stroke-width":1.8,"stroke-dasharray":s.dash,"stroke-linejoin":"round"},svg);
      el("title",{},pl,s.name);
      points+=s.pts.length;
    });
    // Legend, right-aligned above the panel.
    var lx=W-R;
    p.series.slice().reverse().forEach(function(s){
      var t=el("text",{x:lx,y:y0-6,"text-anchor":"end",fill:"#334155"},svg,s.name);
      var w=s.name.length*6.2;
      el("line",{x1:lx-w-26,x2:lx-w-6,y1:y0-10,y2:y0-10,stroke:s.color,"stroke-width":2.5,"stroke-dasharray":s.dash},svg);
      lx-=w+40;
    });
  });
  vmarks(data.checkpoints,"#dc2626",lastArea[1]-40);
  vmarks(data.moves,"#0d9488",lastArea[1]-14);
  // Time axis.
  for(var t=0;t<=tMax+1e-9;t+=tx.step){
    el("line",{x1:x(t),x2:x(t),y1:lastArea[1],y2:lastArea[1]+4,stroke:"#64748b"},svg);
    el("text",{x:x(t),y:lastArea[1]+16,"text-anchor":"middle",fill:"#64748b"},svg,(Math.round(t*1000)/1000)+" s");
  }
  document.getElementById("chart").appendChild(svg);
  document.body.dataset.points=String(points);
  document.body.dataset.chart="drawn";
})();
"##;

#[cfg(test)]
mod tests {
    use super::*;

    use cutover_core::journal::Step;
    use cutover_nats::engine::StepResult;

    fn ev(ts: u64, step: Step, kind: EventKind) -> Event {
        Event { ts_ms: ts, migration: "A.B".into(), step, kind }
    }

    fn worker() -> Step {
        Step::Consumer("worker".into())
    }

    #[test]
    fn rates_come_from_cumulative_counters_over_a_trailing_window() {
        let s: Vec<Sample> = (0..5)
            .map(|i| Sample { t_ms: i * 100, published: i * 30, processed: i * 20 })
            .collect();
        let r = rates(&s, 300);
        assert_eq!(r.len(), 4, "no rate at the first sample");
        assert_eq!(r[0], RatePoint { t: 0.1, publish: 300.0, processed: 200.0 });
        // At 400 ms the window reaches back to 100 ms.
        assert_eq!(r[3], RatePoint { t: 0.4, publish: 300.0, processed: 200.0 });
        assert!(rates(&[], 300).is_empty());
    }

    #[test]
    fn a_stall_shows_as_a_zero_rate() {
        let s = vec![
            Sample { t_ms: 0, published: 0, processed: 0 },
            Sample { t_ms: 100, published: 10, processed: 10 },
            Sample { t_ms: 200, published: 10, processed: 10 },
        ];
        assert_eq!(rates(&s, 100)[1].publish, 0.0);
    }

    #[test]
    fn steps_pair_start_and_done_relative_to_the_start() {
        let e = vec![
            ev(1_000, Step::CreateB, EventKind::StepStarted),
            ev(
                1_010,
                Step::CreateB,
                EventKind::StepDone {
                    ms: Some(10.0),
                    result: StepResult::CreateB { created: true },
                },
            ),
            ev(1_010, Step::CatchUp, EventKind::StepStarted),
            ev(
                1_020,
                Step::CatchUp,
                EventKind::Progress(Progress::CatchUp { remaining: 3, reported_lag: None }),
            ),
        ];
        let s = step_spans(&e, 500);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            StepSpan { name: "create_b".into(), start: 0.5, end: Some(0.51), ms: Some(10.0) }
        );
        assert_eq!(s[1].end, None, "an unfinished step stays open");
    }

    #[test]
    fn checkpoints_and_moves_come_from_consumer_progress() {
        let e = vec![
            ev(
                2_000,
                worker(),
                EventKind::Progress(Progress::Draining {
                    ack_pending: 3,
                    delivered: 10,
                    ack_floor: 7,
                }),
            ),
            ev(
                2_100,
                worker(),
                EventKind::Progress(Progress::Settled { checkpoint: 12, drain_ms: 40 }),
            ),
            ev(
                2_200,
                worker(),
                EventKind::Progress(Progress::Moved {
                    checkpoint: 12,
                    b_start: 13,
                    translate_gets: 1,
                    gap_ms: 1.0,
                    longest_pause_ms: None,
                }),
            ),
            ev(
                2_300,
                Step::CatchUp,
                EventKind::Progress(Progress::Settled { checkpoint: 1, drain_ms: 1 }),
            ),
        ];
        let (c, m) = checkpoint_markers(&e, 2_000);
        assert_eq!(c, vec![Marker { t: 0.1, label: "checkpoint worker F=12".into() }]);
        assert_eq!(m, vec![Marker { t: 0.2, label: "worker on new stream from seq 13".into() }]);
    }

    #[test]
    fn embedded_json_cannot_close_its_script_element() {
        let v = json!({"label": "</script><script>alert(1)</script><!--"});
        let s = script_json(&v);
        assert!(!s.contains('<'));
        assert_eq!(serde_json::from_str::<Value>(&s).unwrap(), v);
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }
}
