//! `nats-cutover demo`: a local server, a live workload, a cut-over while it
//! runs, and the evidence. Everything it starts is stopped and removed on exit,
//! Ctrl-C included. The scenario itself is `cutover_demo::scenario`.
//!
//! With `--server` (or `--context`) on the command line it uses that server
//! instead: it refuses one that already has the demo's streams or migration,
//! and leaves what it created there to inspect. `NATS_URL` and `NATS_CONTEXT`
//! are not enough: a demo must not write to a server by accident.
//!
//! The local server's binary is found without any setting: `$NATS_SERVER`,
//! `.nats-server/<version>/nats-server` under the current directory or the
//! program's (and their parents), then `PATH`; if none is found the error says
//! how to install one.

use super::progress::{detect, Render};
use crate::cli::{ConnArgs, DemoArgs};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::render::{self, table};
use cutover_core::plan::{Strategy, DEFAULT_RETRY_HORIZON};
use cutover_demo::load::LoadConfig;
use cutover_demo::scenario::{live_cutover, Outcome, ScenarioConfig};
use cutover_localserver::{installed_server_binary, LocalServer, PINNED_VERSION};
use cutover_nats::connect::redact_urls;
use serde_json::json;
use std::time::Duration;

const STREAM: &str = "ORDERS";
const NEW_STREAM: &str = "ORDERS_V2";
const CONSUMER: &str = "worker";

pub async fn run(
    conn: &ConnArgs,
    use_server: bool,
    json_out: bool,
    a: DemoArgs,
) -> Result<ExitCode> {
    check_args(&a)?;
    // The local server, if one is started, lives until the end of `run`.
    let (client, server, shown) = if use_server {
        connect_given(conn, json_out).await?
    } else {
        start_local(json_out).await?
    };
    let mut cfg = scenario_config(&a);
    cfg.connect = Some(match &server {
        Some(s) => cutover_nats::connect::ConnectOptions {
            server: Some(s.url().to_string()),
            ..Default::default()
        },
        None => super::connect_options(conn),
    });
    let render = Render::new(detect(json_out));
    let outcome = tokio::select! {
        r = live_cutover(client.clone(), cfg, &render) => r?,
        _ = tokio::signal::ctrl_c() => {
            render.finish();
            return Ok(interrupted(server, &shown));
        }
    };
    render.finish();
    // Two independent proofs: the workers' own record (every published id
    // processed once) and `verify`, which reads only the streams and journal.
    let verify = verify_streams(client, a.strategy == crate::cli::StrategyArg::DualWrite).await;
    if let Some(path) = &a.report {
        write_report(path, &outcome, verify.sourced(), json_out)?;
    }
    let structural_holds = verify.holds();
    if json_out {
        print_json(&outcome, &verify, structural_holds, &shown, server.is_some())?;
    } else {
        print_text(&outcome, &verify, &shown, server.is_some());
    }
    Ok(if outcome.verified && structural_holds { ExitCode::Ok } else { ExitCode::NotVerified })
}

/// What `verify` said of the demo's migration, or why it could not say.
type Verified = std::result::Result<cutover_core::verify::Report, String>;

/// The structural proof after the run: `verify` of a sourced (or mirrored)
/// migration, or of a dual-write one (by msg-id).
enum Proof {
    Streams(Box<Verified>),
    Dual(std::result::Result<cutover_core::dual::DualReport, String>),
}

impl Proof {
    fn holds(&self) -> bool {
        match self {
            Proof::Streams(r) => r.as_ref().as_ref().is_ok_and(|r| r.holds),
            Proof::Dual(r) => r.as_ref().is_ok_and(|r| r.holds),
        }
    }

    /// What the HTML report shows (it renders the sourced proof only).
    fn sourced(&self) -> Option<Verified> {
        match self {
            Proof::Streams(r) => Some((**r).clone()),
            Proof::Dual(_) => None,
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Proof::Streams(r) => match r.as_ref() {
                Ok(r) => json!({ "holds": r.holds, "summary": r.summary }),
                Err(e) => json!({ "holds": false, "error": e }),
            },
            Proof::Dual(Ok(r)) => json!({ "holds": r.holds, "dual_write": r }),
            Proof::Dual(Err(e)) => json!({ "holds": false, "error": e }),
        }
    }

    fn line(&self) -> String {
        let verdict = |h: bool| if h { "holds" } else { "DOES NOT HOLD" };
        match self {
            Proof::Streams(r) => match r.as_ref() {
                Ok(r) => format!(
                    "verify (streams and journal only): {} ({} checked, {} lost, {} duplicated, {} extra, {} gaps, {} overlaps)",
                    verdict(r.holds), r.summary.checked, r.summary.lost, r.summary.duplicated, r.summary.extra, r.summary.gaps, r.summary.overlaps
                ),
                Err(e) => format!("verify failed: {e}"),
            },
            Proof::Dual(Ok(r)) => {
                let sum = |f: fn(&cutover_core::dual::HandoffReport) -> u64| r.consumers.iter().map(f).sum::<u64>();
                format!(
                    "verify (streams and journal only, by msg-id): {} ({} of {} after the dual point, {} without a copy in {}; old side {}, new side {}, guarded {}, lost {})",
                    verdict(r.holds), r.a_after_point, r.from, r.missing_in_b, r.to, sum(|c| c.old), sum(|c| c.new), sum(|c| c.guarded), sum(|c| c.lost)
                )
            }
            Proof::Dual(Err(e)) => format!("verify failed: {e}"),
        }
    }
}

/// Refuses an empty or unbounded workload.
fn check_args(a: &DemoArgs) -> Result<()> {
    if a.rate == 0 || a.workers == 0 {
        return Err(CliError::Flag("--rate and --workers must be at least 1".into()));
    }
    if a.duration < Duration::from_secs(2) || a.duration > Duration::from_secs(600) {
        return Err(CliError::Flag(
            "--duration must be between 2s and 10m (the workload is bounded)".into(),
        ));
    }
    Ok(())
}

/// The server given with --server (or --context), refused if it holds a
/// previous demo's streams or migration: its client and its URL as shown.
async fn connect_given(
    conn: &ConnArgs,
    json_out: bool,
) -> Result<(async_nats::Client, Option<LocalServer>, String)> {
    let client = super::connect_options(conn).connect().await?;
    let timeout = conn.timeout.unwrap_or(Duration::from_secs(5));
    refuse_leftovers(&cutover_nats::Js::new(client.clone(), timeout)).await?;
    let shown = redact_urls(&super::connect_options(conn).resolve()?.server_url());
    if !json_out {
        outln!("using the nats-server at {shown}");
    }
    Ok((client, None, shown))
}

/// A local server, started for the demo and removed with it; a client to it
/// and its URL.
async fn start_local(json_out: bool) -> Result<(async_nats::Client, Option<LocalServer>, String)> {
    let binary = installed_server_binary(PINNED_VERSION).map_err(CliError::LocalServer)?;
    let server = LocalServer::start(binary, Default::default()).map_err(CliError::LocalServer)?;
    if !json_out {
        outln!(
            "nats-server {} on {} (store in {}, removed on exit)",
            server.binary().display(),
            server.url(),
            server.dir().display()
        );
    }
    let client = async_nats::connect(server.url()).await?;
    let shown = server.url().to_string();
    Ok((client, Some(server), shown))
}

/// The scenario the flags ask for: the workload, and when the cut-over starts.
fn scenario_config(a: &DemoArgs) -> ScenarioConfig {
    ScenarioConfig {
        connect: None,
        load: LoadConfig {
            stream: STREAM.into(),
            consumer: CONSUMER.into(),
            subject_prefix: "orders".into(),
            rate: a.rate,
            max_messages: (a.rate as u64) * a.duration.as_secs().max(1) * 2,
            duration: a.duration,
            workers: a.workers,
            processing: a.processing,
            batch: 32,
            retry_horizon: DEFAULT_RETRY_HORIZON,
            protocol: false,
            push: false,
        },
        new_stream: NEW_STREAM.into(),
        strategy: match a.strategy {
            crate::cli::StrategyArg::DualWrite => cutover_core::plan::Strategy::DualWrite,
            _ => cutover_core::plan::Strategy::Source,
        },
        mode: match a.mode {
            crate::cli::ModeArg::Drain => cutover_core::plan::Mode::Drain,
            // (Refused before: a rolling upgrade replaces instances.)
            crate::cli::ModeArg::Fence => cutover_core::plan::Mode::Fence,
            crate::cli::ModeArg::Rolling => cutover_core::plan::Mode::Rolling,
        },
        // Let the workload settle into a steady state for a third of the run.
        cutover_at: a.duration / 3,
        ack_wait: Duration::from_secs(30),
        preload: 0,
        in_place: None,
        replicas: 1,
    }
}

/// Ctrl-C: stops and removes a local server, or says what is left on a given one.
fn interrupted(server: Option<LocalServer>, shown: &str) -> ExitCode {
    if server.is_some() {
        errln!("interrupted: stopping the demo server and removing its files");
    } else {
        errln!("interrupted: the demo's streams and migration are left on {shown}");
    }
    drop(server);
    ExitCode::Interrupted
}

/// Writes the --report, the verification included.
fn write_report(
    path: &std::path::Path,
    outcome: &Outcome,
    verify: Option<Verified>,
    json_out: bool,
) -> Result<()> {
    let mut data = crate::report::ReportData::from_outcome(outcome);
    data.run.verify = verify;
    crate::report::write(path, &data)
        .map_err(|e| CliError::File(format!("cannot write report {}: {e}", path.display())))?;
    if !json_out {
        outln!("report: {}", path.display());
    }
    Ok(())
}

/// The summary, the verification and the server as one JSON line (--json).
fn print_json(
    outcome: &Outcome,
    verify: &Proof,
    structural_holds: bool,
    shown: &str,
    server_started: bool,
) -> Result<()> {
    let mut j = summary_json(outcome);
    j["verify"] = verify.json();
    j["verified"] = json!(outcome.verified && structural_holds);
    j["server"] = json!(shown);
    j["server_started"] = json!(server_started);
    outln!("{}", serde_json::to_string(&j)?);
    Ok(())
}

/// The summary, the verification, and on a given server what is left there.
fn print_text(outcome: &Outcome, verify: &Proof, shown: &str, server_started: bool) {
    print_summary(outcome);
    outln!("{}", verify.line());
    if !server_started {
        let id = cutover_core::journal::migration_id(STREAM, NEW_STREAM);
        outln!("left on {shown} to inspect: streams {STREAM} (sealed) and {NEW_STREAM}, migration {id} (`nats-cutover status {id}`, `nats-cutover verify --migration {id}`)");
    }
}

/// A server given with --server must not hold what the demo creates: it
/// would mix with (or overwrite the state of) something real.
async fn refuse_leftovers(js: &cutover_nats::Js) -> Result<()> {
    // The demo's publishers run throughout: it needs consumer pause (2.11+),
    // checked before it creates anything (a newcomer's trial on 2.10 was left
    // with the demo's stream and a retry refused).
    let version = js.server_version();
    if !version.is_some_and(|v| v.features().consumer_pause) {
        return Err(CliError::DemoServerTooOld(format!(
            "the demo moves a consumer while its publisher runs, which needs consumer pause (nats-server 2.11 or newer); this server is {}; run the demo without --server (it starts its own), or on a newer server; nothing was changed",
            version.map(|v| v.to_string()).unwrap_or_else(|| "of unknown version".into())
        )));
    }
    for s in [STREAM, NEW_STREAM] {
        if js.stream_info_opt(s).await?.is_some() {
            return Err(CliError::DemoLeftovers(format!(
                    "stream {s} already exists on this server, and the demo creates {STREAM} and {NEW_STREAM}: remove them (`nats stream rm {s}`) if they are a previous demo's, or use another server; nothing was changed"
                ),
            ));
        }
    }
    let id = cutover_core::journal::migration_id(STREAM, NEW_STREAM);
    if cutover_nats::engine::list(js).await?.iter().any(|j| j.id == id) {
        return Err(CliError::DemoLeftovers(format!(
                "migration {id} already exists on this server (a previous demo's): remove it with `nats kv del {} {}`, or use another server; nothing was changed",
                cutover_core::journal::BUCKET,
                cutover_core::journal::journal_key(&id)
            ),
        ));
    }
    Ok(())
}

/// `verify` of the demo's migration, over a client of its own.
async fn verify_streams(client: async_nats::Client, dual: bool) -> Proof {
    let js = cutover_nats::Js::new(client, Duration::from_secs(5));
    let id = cutover_core::journal::migration_id(STREAM, NEW_STREAM);
    if dual {
        let r = cutover_nats::verify_dual::verify_dual(&js, &id, &[], 20).await;
        return Proof::Dual(r.map_err(|e| e.to_string()));
    }
    Proof::Streams(Box::new(cutover_nats::observe::verify_migration(&js, &id).await))
}

pub fn summary_json(o: &Outcome) -> serde_json::Value {
    let l = &o.load;
    json!({
        "kind": "demo",
        "server_version": o.server_version,
        "published": l.published,
        "processed": l.processed_total,
        "processed_unique": l.processed_unique,
        "lost": l.lost_count(),
        "pending_on_b": l.pending_on_b,
        "duplicated": l.duplicated.len(),
        "extra": l.extra.len(),
        "publish_failures": l.publish_failures,
        "publish_retries": l.publish_retries,
        "max_publish_stall_ms": l.max_publish_stall_ms,
        "max_retried_publish_ms": l.max_retried_publish_ms,
        "max_consumer_gap_ms": l.max_consumer_gap_ms,
        "handoff_gap_ms": o.handoff_gap_ms,
        "steady_gap_ms": o.steady_gap_ms,
        "handoff_window_ms": o.handoff_window_ms,
        "steady_window_gap_ms": o.steady_window_gap_ms.map(|(median, max)| json!({"median": median, "max": max})),
        "mode": o.plan.mode.as_str(),
        "strategy": o.plan.strategy.as_str(),
        "cutover_ms": o.cutover_ms,
        "steps": o.step_durations().into_iter().map(|(s, ms)| json!({"step": s, "ms": ms})).collect::<Vec<_>>(),
        "consumers": o.journal.consumers,
        "verified": o.verified,
    })
}

fn print_summary(o: &Outcome) {
    let l = &o.load;
    outln!();
    outln!(
        "{}",
        table(
            &["measure", "value"],
            &[
                vec!["published (acked by JetStream)".into(), l.published.to_string()],
                vec![
                    "processed".into(),
                    format!("{} ({} unique)", l.processed_total, l.processed_unique)
                ],
                vec!["lost".into(), l.lost_count().to_string()],
                vec![
                    "pending on B when the workers stopped (late, not lost)".into(),
                    l.pending_on_b.to_string()
                ],
                vec!["duplicated".into(), l.duplicated.len().to_string()],
                vec!["publish retries (same msg-id)".into(), l.publish_retries.to_string()],
                vec![
                    "max publisher stall (any publish)".into(),
                    render::ms(l.max_publish_stall_ms)
                ],
                vec!["max stall of a retried publish".into(), render::ms(l.max_retried_publish_ms)],
                vec!["max consumer gap".into(), render::ms(l.max_consumer_gap_ms)],
                vec![
                    match o.plan.strategy {
                        Strategy::DualWrite => "consumer gap of the handoff (dual-write)".into(),
                        _ => format!("consumer gap of the handoff (mode {})", o.plan.mode.as_str()),
                    },
                    render::ms(o.handoff_gap_ms)
                ],
                vec!["cut-over duration".into(), render::ms(o.cutover_ms)],
            ]
        )
    );
    outln!();
    let rows: Vec<Vec<String>> =
        o.step_durations().into_iter().map(|(s, ms)| vec![s, render::ms(ms)]).collect();
    outln!("{}", table(&["step", "duration"], &rows));
    for c in &o.journal.consumers {
        outln!("consumer {}: checkpoint F = {} on {}, new durable starts at {} on {} ({} gets), drained in {} ms", c.name, c.checkpoint.unwrap_or(0), o.journal.from, c.b_start.unwrap_or(0), o.journal.to, c.translate_gets.unwrap_or(0), c.drain_ms.unwrap_or(0));
    }
    outln!();
    if o.verified {
        outln!("VERIFIED: every published message was processed exactly once.");
    } else {
        outln!(
            "NOT VERIFIED: not processed {:?} ({} of them still pending on {}: late, not lost), duplicated {:?}",
            &l.lost[..l.lost.len().min(10)],
            l.pending_on_b,
            o.journal.to,
            &l.duplicated[..l.duplicated.len().min(10)]
        );
    }
}
