//! `nats-cutover run`, `status`, `rollback`.

use super::progress::{detect, Render};
use crate::cli::{ConnArgs, ForgetArgs, RollbackArgs, RunArgs, StatusArgs};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::metrics::{self, Registry};
use crate::render::table;
use crate::report::ReportData;
use cutover_core::journal::{ConsumerPhase, Journal, Phase};
use cutover_core::plan::Plan;
use cutover_nats::engine::{self, RunOptions, Sink};
use cutover_nats::journal::now_ms;
use cutover_nats::observe::{self, ConsumerSample, Observe, OnSample};
use serde_json::json;
use std::io::{BufRead, IsTerminal};
use std::sync::Arc;

fn read_plan_file(p: &std::path::Path) -> Result<Plan> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| CliError::File(format!("cannot read plan file {}: {e}", p.display())))?;
    let plan: Result<Plan, String> = if p.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        toml::from_str(&text).map_err(|e| e.to_string())
    };
    plan.map_err(|e| {
        CliError::File(format!(
            "plan file {} is not a plan written by `nats-cutover plan --out`: {e}",
            p.display()
        ))
    })
}

pub(super) fn confirm(plan: &Plan) -> Result<()> {
    super::plan::print_plan(plan);
    if !std::io::stdin().is_terminal() {
        return Err(CliError::NotConfirmed(
            "refusing to run without confirmation: stdin is not a terminal; pass --yes".into(),
        ));
    }
    out!("\nRun this cut-over now? [y/N] ");
    crate::out::flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if matches!(line.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(CliError::NotConfirmed("not confirmed; nothing was changed".into()))
    }
}

/// `run --plan FILE` executes the file as it is: a flag that would change what
/// it says is refused rather than silently ignored.
fn refuse_plan_contradictions(a: &RunArgs) -> Result<()> {
    let p = &a.plan;
    let set: Vec<&str> = [
        (p.from.is_some(), "--from"),
        (p.to.is_some(), "--to"),
        (!p.consumer.is_empty(), "--consumer"),
        (p.all_consumers, "--all-consumers"),
        (p.to_config.is_some(), "--to-config"),
        (p.publishers_stopped, "--publishers-stopped"),
        (p.retry_horizon.is_some(), "--retry-horizon"),
        (a.resume.is_some(), "--resume"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    if set.is_empty() {
        return Ok(());
    }
    Err(CliError::Flag(format!("--plan FILE fixes the streams, consumers and settings; {} would contradict it: remove {}, or plan anew without --plan", set.join(", "), if set.len() == 1 { "it" } else { "them" })))
}

/// Ctrl-C asks the engine to stop at the next safe point.
pub(super) fn shutdown_on_ctrl_c() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            errln!("interrupt: stopping at the next safe point (Ctrl-C again to abort at once)");
            let _ = tx.send(true);
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(ExitCode::Interrupted.code());
            }
        }
    });
    rx
}

pub async fn run(conn: &ConnArgs, json_out: bool, a: RunArgs) -> Result<ExitCode> {
    if a.in_place.is_some() {
        return super::inplace::run(conn, json_out, a).await;
    }
    // Refuse an unwritable report path before anything changes on the server.
    if let Some(p) = &a.report {
        let dir =
            p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() || p.is_dir() {
            return Err(CliError::File(format!(
                "cannot write --report {}: {} is not a directory; create it or pick another path",
                p.display(),
                dir.display()
            )));
        }
    }
    if a.plan_file.is_some() {
        refuse_plan_contradictions(&a)?;
    }
    let js = super::connect(conn).await?;
    // A migration of these streams that already finished: say so, change nothing.
    if let (None, None, Some(from), Some(to)) = (&a.resume, &a.plan_file, &a.plan.from, &a.plan.to)
    {
        let id = cutover_core::journal::migration_id(from, to);
        if let Ok((_, j)) = engine::rollback::load(&js, &id).await {
            if j.phase == Phase::Done {
                let msg = format!("migration {id} is already complete: {to} took {from}'s subjects; nothing to do (see `nats-cutover status {id}`)");
                if json_out {
                    outln!("{}", json!({ "message": msg, "journal": j }));
                } else {
                    outln!("{msg}");
                }
                return Ok(ExitCode::Ok);
            }
        }
    }
    let plan = if let Some(id) = &a.resume {
        let (_, j) = engine::rollback::load(&js, id).await?;
        j.plan
    } else if let Some(p) = &a.plan_file {
        read_plan_file(p)?
    } else {
        let req = super::plan::request(&a.plan)?;
        engine::prepare_plan(&js, &req).await?
    };
    if !plan.safe {
        if !json_out {
            super::plan::print_plan(&plan);
        }
        let reasons: Vec<String> = plan
            .unsafe_findings()
            .map(|f| format!("{} {}: {}", f.scope, f.setting, f.reason))
            .collect();
        return Err(CliError::Unsafe(format!(
            "the plan is unsafe, nothing was changed: {}",
            reasons.join("; ")
        )));
    }
    if !a.yes && a.resume.is_none() {
        confirm(&plan)?;
    }
    let render = Render::new(detect(json_out));
    let opts = RunOptions {
        delete_old: a.delete_old,
        keep_old_consumers: a.keep_old_consumers,
        lease_ttl: a.lease_ttl,
        settle_timeout: a.settle_timeout,
        max_pause: a.max_pause,
        // Only in the binary the tests run: die after a named step.
        after_step: cutover_nats::test_hooks::crash_after_step(),
        ..Default::default()
    };
    let reg = a.metrics_addr.map(|_| Registry::new(metrics::RUN));
    let _metrics_server = match (a.metrics_addr, &reg) {
        (Some(addr), Some(reg)) => {
            let s = metrics::serve(addr, reg.clone()).await?;
            errln!("metrics: http://{}/metrics", s.addr);
            Some(s)
        }
        _ => None,
    };
    let feed =
        reg.clone().map(|reg| metrics::Feed { inner: &render, reg, from: plan.from.clone() });
    let sink: &dyn Sink = match &feed {
        Some(f) => f,
        None => &render,
    };
    let on_sample = reg.clone().map(|reg| {
        let (from, to) = (plan.from.clone(), plan.to.clone());
        Arc::new(move |s: &ConsumerSample| metrics::record_sample(&reg, &from, &to, s)) as OnSample
    });
    let observe = Observe { record: a.report.is_some(), on_sample };
    let (result, record) =
        observe::run(&js, plan.clone(), &opts, sink, shutdown_on_ctrl_c(), observe).await;
    render.finish();
    if let Some(reg) = &reg {
        match &result {
            Ok(j) => reg.set(
                &metrics::CONSUMERS_MOVED,
                &[("migration", &j.id)],
                j.consumers.iter().filter(|c| c.phase >= ConsumerPhase::Created).count() as f64,
            ),
            Err(_) => reg.add(&metrics::ERRORS, &[], 1.0),
        }
    }
    if let (Some(path), Some(mut record)) = (&a.report, record) {
        if let Some(id) = record.done().map(str::to_owned) {
            // The report carries the proof, as `verify` gives it: both
            // streams are read once, headers only.
            if !json_out {
                outln!("verifying {id} for the report (reads both streams' headers once)");
            }
            record.verify = Some(observe::verify_migration(&js, &id).await);
        }
        // The migration's outcome decides the exit code; a report that cannot
        // be written (the directory was checked up front) is only warned about.
        match crate::report::write(path, &ReportData::from_run(record)) {
            Ok(()) if !json_out => outln!("report: {}", path.display()),
            Ok(()) => {}
            Err(e) => errln!("warning: cannot write report {}: {e}", path.display()),
        }
    }
    let j = result?;
    if json_out {
        outln!("{}", json!({ "kind": "result", "journal": j }));
    } else {
        print_journal(&j);
    }
    Ok(if j.phase == Phase::Done { ExitCode::Ok } else { ExitCode::Failed })
}

pub fn print_journal(j: &Journal) {
    outln!("Migration {}: {} -> {}, phase {}", j.id, j.from, j.to, j.phase.as_str());
    let rows: Vec<Vec<String>> = j
        .consumers
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                format!("{:?}", c.phase).to_lowercase(),
                c.checkpoint.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                c.b_start.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                c.translate_gets.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                c.drain_ms.map(|x| format!("{x} ms")).unwrap_or_else(|| "-".into()),
                c.nudges.to_string(),
            ]
        })
        .collect();
    outln!(
        "{}",
        table(
            &["consumer", "phase", "checkpoint F (old)", "start (new)", "gets", "drain", "nudges"],
            &rows
        )
    );
    let steps: Vec<Vec<String>> = j
        .steps
        .iter()
        .map(|s| {
            vec![
                s.step.to_string(),
                s.ended_ms
                    .map(|e| format!("{} ms", e.saturating_sub(s.started_ms)))
                    .unwrap_or_else(|| "unfinished".into()),
            ]
        })
        .collect();
    outln!("{}", table(&["step", "duration"], &steps));
    if let Some(e) = &j.error {
        outln!("last error: {e}");
    }
    if j.phase != Phase::Done && j.phase != Phase::RolledBack {
        if j.can_roll_back() {
            outln!("resume with `nats-cutover run --resume {}` or undo with `nats-cutover rollback {}`", j.id, j.id);
        } else {
            outln!("past the commit point: resume with `nats-cutover run --resume {}` (only rolling forward is safe)", j.id);
        }
    }
}

pub async fn status(conn: &ConnArgs, json_out: bool, a: StatusArgs) -> Result<ExitCode> {
    let js = super::connect(conn).await?;
    let list = engine::list(&js).await?;
    let mut leases = engine::leases(&js).await?;
    if let Some(id) = &a.id {
        leases.retain(|l| &l.migration == id);
    }
    let list: Vec<Journal> = match &a.id {
        Some(id) => {
            let one: Vec<Journal> = list.into_iter().filter(|j| &j.id == id).collect();
            if one.is_empty() && leases.is_empty() {
                return Err(CliError::NoMigration(format!(
                    "no migration {id:?}; `nats-cutover status` lists them"
                )));
            }
            one
        }
        None => list,
    };
    // A lease whose migration has no journal: a runner died before writing one.
    let orphan = |migration: &str| !list.iter().any(|j| j.id == migration);
    if json_out {
        let leases: Vec<serde_json::Value> = leases
            .iter()
            .map(|l| {
                let mut v = serde_json::to_value(l).unwrap_or_default();
                v["orphan"] = json!(orphan(&l.migration));
                v
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({ "migrations": list, "leases": leases }))?
        );
        return Ok(ExitCode::Ok);
    }
    if list.is_empty() && leases.is_empty() {
        outln!("no migrations on this server");
    } else if a.id.is_some() && !list.is_empty() {
        print_journal(&list[0]);
    } else if !list.is_empty() {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|j| {
                vec![
                    j.id.clone(),
                    j.phase.as_str().into(),
                    j.consumers.iter().map(|c| c.name.clone()).collect::<Vec<_>>().join(","),
                    j.in_progress.as_ref().map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
                    j.error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        outln!("{}", table(&["id", "phase", "consumers", "in progress", "last error"], &rows));
    }
    if !leases.is_empty() {
        let now = now_ms();
        let rows: Vec<Vec<String>> = leases
            .iter()
            .map(|l| {
                let state = if l.live {
                    format!("held, {} s left", l.expires_ms.saturating_sub(now).div_ceil(1000))
                } else {
                    "expired".into()
                };
                let note = if orphan(&l.migration) {
                    format!(
                        "orphan: no journal; `nats-cutover forget {}` removes it once expired",
                        l.migration
                    )
                } else {
                    String::new()
                };
                vec![l.stream.clone(), l.migration.clone(), l.holder.clone(), state, note]
            })
            .collect();
        outln!("\nleases:\n{}", table(&["stream", "migration", "holder", "state", ""], &rows));
    }
    Ok(ExitCode::Ok)
}

pub async fn forget(conn: &ConnArgs, json_out: bool, a: ForgetArgs) -> Result<ExitCode> {
    let js = super::connect(conn).await?;
    let f = engine::forget(&js, &a.id).await?;
    if json_out {
        outln!("{}", json!({ "forgotten": f }));
    } else {
        outln!(
            "forgot migration {}{}{}; its routes, if any, stay for the applications that follow them",
            f.id,
            f.phase.map(|p| format!(" ({})", p.as_str())).unwrap_or_default(),
            if f.lease_removed { " and its expired lease" } else { "" }
        );
    }
    Ok(ExitCode::Ok)
}

pub async fn rollback(conn: &ConnArgs, json_out: bool, a: RollbackArgs) -> Result<ExitCode> {
    let js = super::connect(conn).await?;
    let render = Render::new(detect(json_out));
    let j = engine::rollback(&js, &a.id, &render, a.lease_ttl).await;
    render.finish();
    let j = j?;
    if json_out {
        outln!("{}", json!({ "kind": "result", "journal": j }));
    } else {
        print_journal(&j);
    }
    Ok(ExitCode::Ok)
}
