//! `nats-cutover run`, `status`, `rollback`.

use super::progress::{detect, Render};
use crate::cli::{ConnArgs, RollbackArgs, RunArgs, StatusArgs};
use crate::exit::{self, Coded};
use crate::render::table;
use cutover_core::journal::{Journal, Phase};
use cutover_core::plan::Plan;
use cutover_nats::engine::{self, RunOptions};
use serde_json::json;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

fn read_plan_file(p: &std::path::Path) -> anyhow::Result<Plan> {
    let text = std::fs::read_to_string(p).map_err(|e| Coded(exit::BAD_INPUT, format!("cannot read plan file {}: {e}", p.display())))?;
    let plan: Result<Plan, String> = if p.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        toml::from_str(&text).map_err(|e| e.to_string())
    };
    plan.map_err(|e| Coded(exit::BAD_INPUT, format!("plan file {} is not a plan written by `nats-cutover plan --out`: {e}", p.display())).into())
}

fn confirm(plan: &Plan) -> anyhow::Result<()> {
    super::plan::print_plan(plan);
    if !std::io::stdin().is_terminal() {
        return Err(Coded(exit::BAD_INPUT, "refusing to run without confirmation: stdin is not a terminal; pass --yes".into()).into());
    }
    print!("\nRun this cut-over now? [y/N] ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if matches!(line.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(Coded(exit::BAD_INPUT, "not confirmed; nothing was changed".into()).into())
    }
}

/// Ctrl-C asks the engine to stop at the next safe point.
fn shutdown_on_ctrl_c() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupt: stopping at the next safe point (Ctrl-C again to abort at once)");
            let _ = tx.send(true);
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(exit::INTERRUPTED);
            }
        }
    });
    rx
}

pub async fn run(conn: &ConnArgs, json_out: bool, a: RunArgs) -> anyhow::Result<i32> {
    let js = super::connect(conn).await?;
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
        let reasons: Vec<String> = plan.unsafe_findings().map(|f| format!("{} {}: {}", f.scope, f.setting, f.reason)).collect();
        return Err(Coded(exit::INCOMPATIBLE, format!("the plan is unsafe, nothing was changed: {}", reasons.join("; "))).into());
    }
    if !a.yes && a.resume.is_none() {
        confirm(&plan)?;
    }
    let render = Render::new(detect(json_out));
    let crash_after = std::env::var("NATS_CUTOVER_TEST_CRASH_AFTER").ok();
    let opts = RunOptions {
        delete_old: a.delete_old,
        lease_ttl: a.lease_ttl,
        settle_timeout: a.settle_timeout,
        // Test hook: die like a killed process right after the named step was
        // journaled, so resume can be tested at every step.
        after_step: crash_after.map(|s| {
            Arc::new(move |step: &str| {
                if step == s {
                    std::process::exit(86);
                }
            }) as Arc<dyn Fn(&str) + Send + Sync>
        }),
        ..Default::default()
    };
    let result = engine::run(&js, plan, &opts, &render, shutdown_on_ctrl_c()).await;
    render.finish();
    let j = result?;
    if json_out {
        println!("{}", json!({ "kind": "result", "journal": j }));
    } else {
        print_journal(&j);
    }
    Ok(if j.phase == Phase::Done { exit::OK } else { exit::FAILED })
}

pub fn print_journal(j: &Journal) {
    println!("Migration {}: {} -> {}, phase {}", j.id, j.from, j.to, j.phase.as_str());
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
    println!("{}", table(&["consumer", "phase", "checkpoint F (old)", "start (new)", "gets", "drain", "nudges"], &rows));
    let steps: Vec<Vec<String>> = j
        .steps
        .iter()
        .map(|s| vec![s.step.clone(), s.ended_ms.map(|e| format!("{} ms", e.saturating_sub(s.started_ms))).unwrap_or_else(|| "unfinished".into())])
        .collect();
    println!("{}", table(&["step", "duration"], &steps));
    if let Some(e) = &j.error {
        println!("last error: {e}");
    }
    if j.phase != Phase::Done && j.phase != Phase::RolledBack {
        if j.can_roll_back() {
            println!("resume with `nats-cutover run --resume {}` or undo with `nats-cutover rollback {}`", j.id, j.id);
        } else {
            println!("past the commit point: resume with `nats-cutover run --resume {}` (only rolling forward is safe)", j.id);
        }
    }
}

pub async fn status(conn: &ConnArgs, json_out: bool, a: StatusArgs) -> anyhow::Result<i32> {
    let js = super::connect(conn).await?;
    let list = engine::list(&js).await?;
    let list: Vec<Journal> = match &a.id {
        Some(id) => {
            let one: Vec<Journal> = list.into_iter().filter(|j| &j.id == id).collect();
            if one.is_empty() {
                return Err(Coded(exit::BAD_INPUT, format!("no migration {id:?}; `nats-cutover status` lists them")).into());
            }
            one
        }
        None => list,
    };
    if json_out {
        println!("{}", serde_json::to_string_pretty(&json!({ "migrations": list }))?);
    } else if list.is_empty() {
        println!("no migrations on this server");
    } else if a.id.is_some() {
        print_journal(&list[0]);
    } else {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|j| vec![j.id.clone(), j.phase.as_str().into(), j.consumers.iter().map(|c| c.name.clone()).collect::<Vec<_>>().join(","), j.in_progress.clone().unwrap_or_else(|| "-".into()), j.error.clone().unwrap_or_default()])
            .collect();
        println!("{}", table(&["id", "phase", "consumers", "in progress", "last error"], &rows));
    }
    Ok(exit::OK)
}

pub async fn rollback(conn: &ConnArgs, json_out: bool, a: RollbackArgs) -> anyhow::Result<i32> {
    let js = super::connect(conn).await?;
    let render = Render::new(detect(json_out));
    let j = engine::rollback(&js, &a.id, &render, a.lease_ttl).await;
    render.finish();
    let j = j?;
    if json_out {
        println!("{}", json!({ "kind": "result", "journal": j }));
    } else {
        print_journal(&j);
    }
    Ok(exit::OK)
}
