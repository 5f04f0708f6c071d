//! `nats-cutover plan`: read-only; prints the plan, refuses unsafe ones.

use crate::cli::{ConnArgs, ModeArg, PlanArgs, PlanCmdArgs, PlanMoreArgs, StrategyArg};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::render::{self, table};
use cutover_core::plan::{Mode, Plan, PlanRequest, Strategy};
use serde_json::{Map, Value};

/// The server's disk sync setting judged into the plan: read from
/// `--monitor` (varz) when given, else said to be unread.
pub async fn judge_sync(a: &PlanMoreArgs, plan: &mut Plan) -> Result<()> {
    let sync = match &a.monitor {
        Some(url) => {
            Some(cutover_nats::monitor::sync_setting(url, std::time::Duration::from_secs(5)).await?)
        }
        None => None,
    };
    cutover_core::durability::judge(plan, sync);
    Ok(())
}

pub fn request(a: &PlanArgs, more: &PlanMoreArgs) -> Result<PlanRequest> {
    let to_config = request_to_config(a)?;
    build_request(a, more, to_config)
}

/// The `--to-config` file's settings, if given.
pub fn request_to_config(a: &PlanArgs) -> Result<Option<serde_json::Map<String, Value>>> {
    Ok(match &a.to_config {
        None => None,
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| {
                CliError::File(format!("cannot read --to-config file {}: {e}", p.display()))
            })?;
            let v: Value = serde_json::from_str(&text).map_err(|e| CliError::File(format!("--to-config file {} is not valid JSON: {e}; it holds stream settings such as {{\"storage\": \"memory\"}}", p.display())))?;
            match v {
                Value::Object(m) => Some(m),
                _ => {
                    return Err(CliError::File(format!(
                        "--to-config file {} must hold a JSON object of stream settings",
                        p.display()
                    )))
                }
            }
        }
    })
}

fn build_request(
    a: &PlanArgs,
    more: &PlanMoreArgs,
    to_config: Option<serde_json::Map<String, Value>>,
) -> Result<PlanRequest> {
    let need = |v: &Option<String>, flag: &str| {
        v.clone().ok_or_else(|| CliError::Flag(format!("{flag} is required: name the stream")))
    };
    if a.consumer.is_empty() && !a.all_consumers {
        return Err(CliError::Flag(
            "no consumer to move: name one with --consumer NAME or pass --all-consumers".into(),
        ));
    }
    Ok(PlanRequest {
        from: need(&a.from, "--from")?,
        to: need(&a.to, "--to")?,
        consumers: a.consumer.clone(),
        all_consumers: a.all_consumers,
        strategy: match a.strategy {
            StrategyArg::Source => Strategy::Source,
            StrategyArg::Mirror => Strategy::Mirror,
            StrategyArg::DualWrite => Strategy::DualWrite,
        },
        mode: match a.mode {
            ModeArg::Drain => Mode::Drain,
            ModeArg::Fence => Mode::Fence,
            ModeArg::Rolling => Mode::Rolling,
        },
        new_version: a.new_version.clone(),
        to_config: to_config.map(|m: Map<String, Value>| m),
        publishers_stopped: a.publishers_stopped,
        retry_horizon: a.retry_horizon,
        in_place: None,
        external: more.from_api.clone().map(|api| cutover_core::plan::External {
            api,
            deliver: more.from_deliver.clone(),
            repoint_publishers: more.repoint_publishers,
            split_publishers: false,
        }),
        repoint_publishers: more.repoint_publishers,
        // Set by the engine from the connections (`across::request`).
        across: false,
    })
}

pub fn print_plan(plan: &Plan) {
    let names: Vec<&str> = plan.consumers.iter().map(|c| c.name.as_str()).collect();
    outln!(
        "Plan: move {} from {} to {} (strategy {}, mode {})",
        if names.is_empty() { "the publishers (no durable)".to_string() } else { names.join(", ") },
        plan.from,
        plan.to,
        plan.strategy.as_str(),
        plan.mode.as_str()
    );
    match plan.a_ingest {
        Some(r) if r.over_ms > 0 => outln!(
            "{}'s ingest: {:.0} msg/s (sampled over {} ms; plan warns above {:.0} msg/s, and run stops before the commit if {} falls behind)",
            plan.from,
            r.per_s,
            r.over_ms,
            cutover_core::catchup::INGEST_WARN_PER_S,
            plan.to
        ),
        Some(_) => outln!("{}'s ingest: idle (nothing stored in the last 10 s)", plan.from),
        None => {}
    }
    outln!("Server {}; relies on:", plan.server_version);
    for r in &plan.relies_on {
        outln!("  - {r}");
    }
    outln!();
    outln!("Compatibility:");
    outln!("{}", table(&render::FINDING_HEADERS, &render::finding_rows(&plan.findings)));
    outln!();
    outln!("Checkpoint rule: {}", plan.checkpoint_rule);
    outln!();
    outln!("Timers: {}", plan.timer_note);
    outln!();
    outln!("Steps:");
    for s in &plan.steps {
        outln!("  {:>2}. {}: {}", s.n, s.title, s.detail);
    }
    for (c, q) in &plan.quiescence {
        outln!();
        outln!("Quiescent interval for {c} (no pause on this server; publishers stopped):");
        match q.interval {
            Some(d) => outln!("  deadline {}", crate::render::duration(d)),
            None => outln!("  no bound"),
        }
        for l in &q.derivation {
            outln!("  - {l}");
        }
    }
    outln!();
    if plan.safe {
        if plan.in_place.is_some() {
            outln!("Verdict: SAFE. The same command (run --in-place, kv or obj) with --yes carries out both hops.");
        } else {
            outln!("Verdict: SAFE. `nats-cutover run` with the same options carries it out.");
        }
    } else {
        outln!("Verdict: UNSAFE, refused:");
        for f in plan.unsafe_findings() {
            outln!("  - {} {}: {}", f.scope, f.setting, f.reason);
        }
    }
}

pub async fn run(conn: &ConnArgs, json_out: bool, a: PlanCmdArgs) -> Result<ExitCode> {
    let req = request(&a.plan, &a.more)?;
    // Names and the obvious refusals are checked before connecting.
    cutover_core::names::stream(&req.from)?;
    cutover_core::names::stream(&req.to)?;
    let js = super::connect_across(conn, Some(&req.from)).await?;
    let mut plan = cutover_nats::engine::prepare_plan(&js, &req).await?;
    judge_sync(&a.more, &mut plan).await?;
    if let Some(out) = &a.more.out {
        super::plan_file::write_plan_file(&plan, out)?;
    }
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print_plan(&plan);
    }
    Ok(if plan.safe { ExitCode::Ok } else { ExitCode::Incompatible })
}
