//! `nats-cutover run`, `status`, `rollback`.

use super::plan_file::{read_plan_file, run_from};
use super::progress::{detect, Render};
use crate::cli::{ConnArgs, ForgetArgs, RollbackArgs, RunArgs, StatusArgs};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::metrics::{self, Registry};
use crate::render::{self, table};
use crate::report::ReportData;
use cutover_core::journal::{ConsumerPhase, Journal, Phase};
use cutover_core::plan::Plan;
use cutover_nats::engine::{self, RunOptions, Sink};
use cutover_nats::journal::{now_ms, Instance, LeaseInfo};
use cutover_nats::observe::{self, ConsumerSample, Observe, OnSample, RunRecord};
use cutover_nats::Js;
use serde_json::json;
use std::sync::Arc;

pub(super) fn confirm(plan: &Plan) -> Result<()> {
    super::plan::print_plan(plan);
    super::prompt::ask()
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
        (p.new_version.is_some(), "--new-version"),
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

pub async fn run(conn: &ConnArgs, json_out: bool, a: RunArgs) -> Result<ExitCode> {
    check_report_path(&a)?;
    if a.plan_file.is_some() {
        refuse_plan_contradictions(&a)?;
    }
    let js = super::connect_across(conn, run_from(&a)?.as_deref()).await?;
    if let Some(id) = &a.resume {
        if let Ok((_, j)) = cutover_nats::journal::load_migration(&js, id).await {
            if let Some(code) = super::inplace::resume_hop1(&js, json_out, &a, &j).await? {
                return Ok(code);
            }
        }
    }
    if already_complete(&js, &a, json_out).await {
        return Ok(ExitCode::Ok);
    }
    let plan = load_plan(&js, &a).await?;
    refuse_unsafe(&plan, json_out)?;
    let told = split_flags(&js, &a, &plan).await?;
    if !a.yes && a.resume.is_none() {
        confirm(&plan)?;
    }
    let render = Render::new(detect(json_out));
    let opts = run_options(&a, &plan);
    let reg = a.metrics_addr.map(|_| Registry::new(metrics::RUN));
    let _metrics_server = super::serve_metrics(a.metrics_addr, reg.as_ref()).await?;
    let feed =
        reg.clone().map(|reg| metrics::Feed { inner: &render, reg, from: plan.from.clone() });
    let sink: &dyn Sink = match &feed {
        Some(f) => f,
        None => &render,
    };
    let observe = observe_options(&a, &reg, &plan);
    let (result, record) =
        observe::run(&js, plan.clone(), &opts, sink, super::prompt::shutdown_on_ctrl_c(), observe)
            .await;
    render.finish();
    if let Some(reg) = &reg {
        record_outcome(reg, &result);
    }
    if let (Some(path), Some(record)) = (&a.report, record) {
        write_report(&js, path, record, json_out).await;
    }
    let j = match result {
        Err(cutover_nats::Error::Leased { holder, until, .. }) if told => {
            let id = a.resume.as_deref().unwrap_or_default();
            let message = format!("the go-ahead for migration {id} is recorded: the runner holding it ({holder}) seals {} as soon as it sees it; if that runner is gone without its guard (its host down; a killed runner's guard frees the lease at once), run this command again once its lease lapses ({until}): it then finishes the migration itself", plan.from);
            match json_out {
                true => outln!(
                    "{}",
                    json!({ "kind": "proceed", "migration": id, "recorded": true, "message": message })
                ),
                false => outln!("{message}"),
            }
            return Ok(ExitCode::Ok);
        }
        r => r?,
    };
    print_result(&j, json_out);
    Ok(if j.phase == Phase::Done { ExitCode::Ok } else { ExitCode::Failed })
}

/// Refuses an unwritable --report path before anything changes on the server.
fn check_report_path(a: &RunArgs) -> Result<()> {
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
    Ok(())
}

/// A migration of these streams (--from/--to, not --resume or --plan) that
/// already finished: says so and returns true; nothing is changed.
async fn already_complete(js: &Js, a: &RunArgs, json_out: bool) -> bool {
    let (None, None, Some(from), Some(to)) = (&a.resume, &a.plan_file, &a.plan.from, &a.plan.to)
    else {
        return false;
    };
    let id = cutover_core::journal::migration_id(from, to);
    let Ok((_, j)) = cutover_nats::journal::load_migration(js, &id).await else {
        return false;
    };
    if j.phase != Phase::Done {
        return false;
    }
    let msg = format!("migration {id} is already complete: {to} took {from}'s subjects; nothing to do (see `nats-cutover status {id}`)");
    if json_out {
        outln!("{}", json!({ "message": msg, "journal": j }));
    } else {
        outln!("{msg}");
    }
    true
}

/// The plan to run: the journal's (--resume), the file's (--plan), or one
/// prepared now from the flags.
async fn load_plan(js: &Js, a: &RunArgs) -> Result<Plan> {
    Ok(if let Some(id) = &a.resume {
        let (_, j) = cutover_nats::journal::load_migration(js, id).await?;
        if j.phase == Phase::RolledBack {
            // Resuming would start it all over, unasked and unconfirmed.
            return Err(CliError::NoMigration(format!(
                "migration {id} was rolled back: there is nothing to resume; to migrate again, plan and run it anew: `nats-cutover run --from {} --to {} ...`",
                j.from, j.to
            )));
        }
        j.plan
    } else if let Some(p) = &a.plan_file {
        read_plan_file(p)?
    } else {
        let req = super::plan::request(&a.plan, &a.more)?;
        // A migration of these streams under way is resumed whatever a new
        // plan would say (engine::run goes on with its journal): its plan,
        // not one judged against streams it already changed (past the commit
        // point B holds the subjects, which a new plan refuses).
        let id = cutover_core::journal::migration_id(&req.from, &req.to);
        match cutover_nats::journal::load_migration(js, &id).await {
            Ok((_, j)) if !matches!(j.phase, Phase::Done | Phase::RolledBack) => j.plan,
            Err(e @ cutover_nats::Error::NewerJournal { .. }) => return Err(e.into()),
            _ => {
                let mut plan = engine::prepare_plan(js, &req).await?;
                super::plan::judge_sync(&a.more, &mut plan).await?;
                plan
            }
        }
    })
}

/// Across systems with the publishers split (`External::split_publishers`):
/// `--resume ID --proceed` on a migration that waits for them records the
/// go-ahead where the waiting runner (this one, or another that holds the
/// lease) sees it; returns whether it did. `--seal-when-idle` is refused
/// for any other migration, `--answer-publishes` for this one (each would
/// be ignored).
async fn split_flags(js: &Js, a: &RunArgs, plan: &Plan) -> Result<bool> {
    let split = plan.external.as_ref().is_some_and(|e| e.split_publishers);
    if a.seal_when_idle.is_some() && !split {
        return Err(CliError::Flag(format!("--seal-when-idle is for a move across systems whose publishers are repointed (the plan of {} -> {} does not split them): drop it", plan.from, plan.to)));
    }
    if a.answer_publishes && split {
        return Err(CliError::Flag(format!("--answer-publishes bridges a commit window, and with the publishers split between {} and {} there is none (A keeps its subjects until the go-ahead): drop it", plan.from, plan.to)));
    }
    let (Some(id), true) = (&a.resume, a.proceed) else { return Ok(false) };
    let (store, j) = cutover_nats::journal::load_migration(js, id).await?;
    if !j.publishers_split() {
        return Ok(false);
    }
    store.put_proceed(id).await?;
    Ok(true)
}

/// Refuses an unsafe plan (shown first, without --json), with its reasons.
pub(super) fn refuse_unsafe(plan: &Plan, json_out: bool) -> Result<()> {
    if plan.safe {
        return Ok(());
    }
    if !json_out {
        super::plan::print_plan(plan);
    }
    Err(CliError::Unsafe(format!(
        "the plan is unsafe, nothing was changed: {}",
        plan.unsafe_reasons()
    )))
}

/// The engine's options from the flags.
fn run_options(a: &RunArgs, plan: &Plan) -> RunOptions {
    RunOptions {
        delete_old: a.delete_old,
        keep_old_consumers: a.keep_old_consumers,
        lease_ttl: a.lease_ttl,
        settle_timeout: a.settle_timeout,
        max_pause: a.max_pause,
        fence_ack_timeout: a.fence_ack_timeout,
        nak_delay: a.nak_delay,
        proceed: a.proceed,
        side_by_side: a.side_by_side,
        // On by default; a split has no commit window (split_flags refuses
        // the explicit flag there).
        answer_publishes: !a.no_answer_publishes
            && !plan.external.as_ref().is_some_and(|e| e.split_publishers),
        seal_when_idle: a.seal_when_idle,
        copy_window: a.copy_window,
        // Only in the binary the tests run: die after a named step.
        after_step: cutover_nats::test_hooks::crash_after_step(),
        on_exposed: crate::guard::exposure_hook(),
        ..Default::default()
    }
}

/// What to observe of the run: a record for --report, and the consumers'
/// samples into the metrics with --metrics-addr.
fn observe_options(a: &RunArgs, reg: &Option<Arc<Registry>>, plan: &Plan) -> Observe {
    let on_sample = reg.clone().map(|reg| {
        let (from, to) = (plan.from.clone(), plan.to.clone());
        Arc::new(move |s: &ConsumerSample| metrics::record_sample(&reg, &from, &to, s)) as OnSample
    });
    Observe { record: a.report.is_some(), on_sample }
}

/// The run's outcome in the metrics: consumers moved, or one more error.
fn record_outcome(reg: &Registry, result: &cutover_nats::Result<Journal>) {
    match result {
        Ok(j) => reg.set(
            &metrics::CONSUMERS_MOVED,
            &[("migration", &j.id)],
            j.consumers.iter().filter(|c| c.phase >= ConsumerPhase::Created).count() as f64,
        ),
        Err(_) => reg.add(&metrics::ERRORS, &[], 1.0),
    }
}

/// Writes the --report: a finished migration's record carries the proof, as
/// `verify` gives it. A report that cannot be written is only warned about:
/// the migration's outcome decides the exit code.
async fn write_report(js: &Js, path: &std::path::Path, mut record: RunRecord, json_out: bool) {
    if let Some(id) = record.done().map(str::to_owned) {
        // Both streams are read once, headers only.
        if !json_out {
            outln!("verifying {id} for the report (reads both streams' headers once)");
        }
        record.verify = Some(observe::verify_migration(js, &id).await);
    }
    // The directory was checked up front.
    match crate::report::write(path, &ReportData::from_run(record)) {
        Ok(()) if !json_out => outln!("report: {}", path.display()),
        Ok(()) => {}
        Err(e) => errln!("warning: cannot write report {}: {e}", path.display()),
    }
}

/// The journal a run or rollback ended with: a JSON result line, or the table.
fn print_result(j: &Journal, json_out: bool) {
    if json_out {
        outln!("{}", json!({ "kind": "result", "journal": j }));
    } else {
        print_journal(j);
    }
}

pub fn print_journal(j: &Journal) {
    outln!("Migration {}: {} -> {}, phase {}", j.id, j.from, j.to, j.phase.as_str());
    let rows: Vec<Vec<String>> = j.consumers.iter().map(render::progress_cells).collect();
    outln!(
        "{}",
        table(
            &["consumer", "phase", "checkpoint F (old)", "start (new)", "gets", "drain", "nudges"],
            &rows
        )
    );
    // A step that did not end and was started again later was interrupted
    // (its runner stopped or died) and resumed, not left unfinished.
    let steps: Vec<Vec<String>> = j
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let again = j.steps[i + 1..].iter().any(|later| later.step == s.step);
            let open = if again { "interrupted, resumed below" } else { "unfinished" };
            vec![
                s.step.to_string(),
                s.ended_ms
                    .map(|e| format!("{} ms", e.saturating_sub(s.started_ms)))
                    .unwrap_or_else(|| open.into()),
            ]
        })
        .collect();
    outln!("{}", table(&["step", "duration"], &steps));
    let finished = j.phase == Phase::Done || j.phase == Phase::RolledBack;
    if let (Some(e), false) = (&j.error, finished) {
        outln!("last error: {e}");
    }
    if !finished {
        outln!("{}", j.way_on());
    }
}

pub async fn status(conn: &ConnArgs, json_out: bool, a: StatusArgs) -> Result<ExitCode> {
    // Without an id, the migrations the target side's bucket lists.
    let js = match a.id.as_deref().and_then(super::from_of) {
        Some(from) => super::connect_across(conn, Some(from)).await?,
        None => super::connect(conn).await?,
    };
    let (list, leases) = read_status(&js, a.id.as_deref()).await?;
    let mut instances = engine::instances(&js).await?;
    if a.id.is_some() {
        // Those of the migration's old stream (their home binding).
        instances.retain(|i| list.iter().any(|j| j.from == i.record.stream));
    }
    if json_out {
        print_status_json(&list, &leases, &instances)?;
        return Ok(ExitCode::Ok);
    }
    if list.is_empty() && leases.is_empty() {
        outln!("no migrations on this server (a move across systems keeps its journal on the target side: ask the server that holds the new stream)");
    } else if a.id.is_some() && !list.is_empty() {
        print_journal(&list[0]);
    } else if !list.is_empty() {
        print_migrations(&list);
    }
    if !leases.is_empty() {
        print_leases(&leases, &list);
    }
    if !instances.is_empty() {
        print_instances(&instances);
    }
    Ok(ExitCode::Ok)
}

/// The registered application instances: version, binding, fence (docs/protocol.md).
fn print_instances(instances: &[Instance]) {
    let rows: Vec<Vec<String>> = instances
        .iter()
        .map(|i| {
            let r = &i.record;
            let state = if i.live {
                "live".to_string()
            } else {
                format!("gone ({} s ago)", i.age_ms / 1000)
            };
            let fence = r.fence_ack.as_ref().map(|f| format!("{} @ {}", f.migration, f.fence));
            vec![
                r.instance.clone(),
                format!("{} ({})", r.app_version, r.lang),
                format!("{}/{}", r.stream, r.consumer),
                r.bound.join(", "),
                fence.unwrap_or_else(|| "-".into()),
                state,
            ]
        })
        .collect();
    let head = ["instance", "version", "home", "fetching from", "fence acknowledged", "state"];
    outln!("\ninstances:\n{}", table(&head, &rows));
}

/// The migrations' journals and the streams' leases: all of them, or those of
/// migration `id` (an error if it has neither).
async fn read_status(js: &Js, id: Option<&str>) -> Result<(Vec<Journal>, Vec<LeaseInfo>)> {
    let list = engine::list(js).await?;
    let mut leases = engine::leases(js).await?;
    if let Some(id) = id {
        leases.retain(|l| l.migration == id);
    }
    let list: Vec<Journal> = match id {
        Some(id) => {
            let one: Vec<Journal> = list.into_iter().filter(|j| j.id == id).collect();
            if one.is_empty() && leases.is_empty() {
                return Err(CliError::NoMigration(format!(
                    "no migration {id:?}; `nats-cutover status` lists them"
                )));
            }
            one
        }
        None => list,
    };
    Ok((list, leases))
}

/// A lease whose migration has no journal: a runner died before writing one.
fn orphan(list: &[Journal], migration: &str) -> bool {
    !list.iter().any(|j| j.id == migration)
}

/// The journals and leases as one JSON document, each lease marked orphan or not.
fn print_status_json(list: &[Journal], leases: &[LeaseInfo], instances: &[Instance]) -> Result<()> {
    let leases: Vec<serde_json::Value> = leases
        .iter()
        .map(|l| {
            let mut v = serde_json::to_value(l).unwrap_or_default();
            v["orphan"] = json!(orphan(list, &l.migration));
            v
        })
        .collect();
    let doc = json!({ "migrations": list, "leases": leases, "instances": instances });
    outln!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

/// One line a migration: id, phase, consumers, step in progress, last error.
fn print_migrations(list: &[Journal]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.phase.as_str().into(),
                j.consumers.iter().map(|c| c.name.clone()).collect::<Vec<_>>().join(","),
                j.in_progress.as_ref().map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
                // A finished migration's error is history (journals written
                // before it was cleared on finishing still carry it).
                match j.phase {
                    Phase::Done | Phase::RolledBack => String::new(),
                    _ => j.error.clone().unwrap_or_default(),
                },
            ]
        })
        .collect();
    outln!("{}", table(&["id", "phase", "consumers", "in progress", "last error"], &rows));
}

/// The leases table: who holds which stream, for how long, and the orphans.
/// A released lease of a finished migration (every run leaves its lease
/// record, expired) says nothing: counted, not listed (a newcomer read them
/// as orphans left behind); `--json` lists every lease.
fn print_leases(leases: &[LeaseInfo], list: &[Journal]) {
    let now = now_ms();
    let finished = |l: &&LeaseInfo| {
        !l.live
            && list
                .iter()
                .any(|j| j.id == l.migration && matches!(j.phase, Phase::Done | Phase::RolledBack))
    };
    let hidden = leases.iter().filter(finished).count();
    let shown: Vec<&LeaseInfo> = leases.iter().filter(|l| !finished(l)).collect();
    let note = format!(
        "({hidden} released lease(s) of finished migrations not listed; --json lists them)"
    );
    if shown.is_empty() {
        outln!("\n{note}");
        return;
    }
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|l| {
            let state = if l.live {
                format!("held, {} s left", l.expires_ms.saturating_sub(now).div_ceil(1000))
            } else {
                "expired".into()
            };
            let note = if orphan(list, &l.migration) {
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
    if hidden > 0 {
        outln!("{note}");
    }
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
    let js = super::connect_across(conn, super::from_of(&a.id)).await?;
    let render = Render::new(detect(json_out));
    let j = engine::rollback(&js, &a.id, &render, a.lease_ttl).await;
    render.finish();
    print_result(&j?, json_out);
    Ok(ExitCode::Ok)
}
