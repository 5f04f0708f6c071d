//! `nats-cutover run --in-place STREAM --set KEY=VALUE ...`: new settings under
//! the stream's own name (see `cutover_nats::engine::inplace`).

use super::progress::{detect, Render};
use crate::cli::{BucketArgs, ConnArgs, PlanArgs, PlanCmdArgs, PlanMoreArgs, RunArgs};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use cutover_core::bucket::Kind;
use cutover_core::plan::InPlaceOutline;
use cutover_nats::engine::{self, InPlaceRequest, RunOptions};
use cutover_nats::Js;
use serde_json::{json, Map, Value};

/// `--set KEY=VALUE` pairs over the `--to-config` file's settings: a value is
/// JSON when it reads as JSON (numbers, booleans, objects), else a string.
fn settings(a: &PlanArgs, across: bool) -> Result<Option<Map<String, Value>>> {
    let mut m = match super::plan::request_to_config(a)? {
        Some(m) => m,
        None => Map::new(),
    };
    let bucket = a.in_place.as_deref().and_then(bucket_kind);
    for kv in &a.set {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(CliError::Flag(format!(
                "--set {kv:?} is not KEY=VALUE: write e.g. --set storage=memory"
            )));
        };
        let k = k.trim();
        // A bucket's stream takes its bucket's option names too (`nats kv
        // add`'s: history, ttl, ...), as `kv`/`obj` do: a newcomer's
        // `plan --in-place KV_cfg --set history=10` was refused as "not a
        // stream setting".
        if let Some(kind) = bucket.filter(|_| !cutover_core::plan::is_stream_setting(k)) {
            let option = k.replace('_', "-");
            if kind.options().contains(&option.as_str()) {
                let mapped = cutover_core::bucket::settings(kind, std::slice::from_ref(kv))
                    .map_err(|e| CliError::Flag(e.to_string()))?;
                m.extend(mapped);
                continue;
            }
        }
        let v = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        m.insert(k.to_string(), v);
    }
    if m.is_empty() && across {
        // A move to the target system under the same name: nothing to change.
        return Ok(None);
    }
    if m.is_empty() {
        return Err(CliError::Flag(
            "--in-place needs the new settings: --set KEY=VALUE (e.g. --set storage=memory) or --to-config FILE".into(),
        ));
    }
    Ok(Some(m))
}

/// What to do with a change the server takes as a plain update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Update {
    /// `plan`: show it, change nothing.
    Show,
    /// `run`/`kv`/`obj` without `--yes`: show it and ask first.
    Ask,
    /// With `--yes`: apply it.
    Apply,
}

/// When the server takes every new setting as a plain update, no migration
/// is needed: says so with the update and, for `run`, `kv` and `obj`,
/// applies it (after asking, without `--yes`).
async fn update_is_enough(
    js: &Js,
    req: &InPlaceRequest,
    json_out: bool,
    how: Update,
) -> Result<Option<ExitCode>> {
    // Missing: a runner killed between the hops (the stream lives as the
    // temporary one); run_in_place resumes from the journal, or says so.
    let Some((raw, _)) = js.stream_info_opt(&req.stream).await? else {
        return Ok(None);
    };
    let settings = req.settings.clone().unwrap_or_default();
    cutover_core::plan::check_setting_names(&settings).map_err(cutover_nats::Error::from)?;
    cutover_core::plan::check_setting_values(&settings).map_err(cutover_nats::Error::from)?;
    if settings.iter().all(|(k, v)| raw["config"].get(k) == Some(v)) {
        let text = format!(
            "{} already has these settings ({}); nothing was changed",
            req.stream,
            settings.keys().cloned().collect::<Vec<_>>().join(", ")
        );
        if json_out {
            outln!("{}", json!({ "kind": "already_applied", "message": text }));
        } else {
            outln!("{text}");
        }
        return Ok(Some(ExitCode::Ok));
    }
    if !cutover_core::plan::needs_migration(&raw["config"], &settings).is_empty() {
        return Ok(None);
    }
    let mut update = raw["config"].clone();
    for (k, v) in &settings {
        update[k] = v.clone();
    }
    // The update must read as the server's stream configuration (a list of
    // subjects, durations in ns): say which value does not, before printing it.
    if let Err(e) = serde_json::from_value::<cutover_core::model::StreamConfig>(update.clone()) {
        return Err(CliError::Flag(format!(
            "a --set value does not have the server's type ({e}): give lists and objects as JSON (--set 'subjects=[\"orders.>\"]') and durations in nanoseconds (--set max_age=3600000000000)"
        )));
    }
    let names = settings.keys().cloned().collect::<Vec<_>>().join(", ");
    let stream = &req.stream;
    let say = |text: String, applied: bool| -> Result<()> {
        if json_out {
            let kind = "no_migration_needed";
            outln!(
                "{}",
                json!({ "kind": kind, "message": text, "update": update, "applied": applied })
            );
        } else {
            outln!("{text}\n{}", serde_json::to_string_pretty(&update)?);
        }
        Ok(())
    };
    if how == Update::Show {
        say(format!("no migration needed: the server updates these settings of {stream} in place ({names}); `run` (or `kv`/`obj`) applies them as this update; nothing was changed"), false)?;
        return Ok(Some(ExitCode::Ok));
    }
    if how == Update::Ask {
        if !json_out {
            outln!("No migration needed: the server updates these settings of {stream} in place ({names}):\n{}", serde_json::to_string_pretty(&update)?);
        }
        super::prompt::ask_to("Apply this update now?")?;
    }
    js.stream_update(&update).await?;
    say(
        format!(
            "no migration needed: the server updated these settings of {stream} in place ({names})"
        ),
        true,
    )?;
    Ok(Some(ExitCode::Ok))
}

/// How B reaches A across systems when given (`--from-api`, `--from-deliver`).
fn external_of(more: &PlanMoreArgs) -> Option<cutover_core::plan::External> {
    more.from_api.clone().map(|api| cutover_core::plan::External {
        api,
        deliver: more.from_deliver.clone(),
        repoint_publishers: more.repoint_publishers,
        split_publishers: false,
    })
}

/// The kind of bucket whose stream `stream` is (`KV_x`, `OBJ_x`).
fn bucket_kind(stream: &str) -> Option<Kind> {
    match stream.split_once('_') {
        Some(("KV", b)) if !b.is_empty() => Some(Kind::Kv),
        Some(("OBJ", b)) if !b.is_empty() => Some(Kind::Obj),
        _ => None,
    }
}

/// The request of `run --in-place` / `plan --in-place`. Every durable of the
/// stream moves unless `--consumer` names some: the stream and whatever it
/// holds is deleted at the end of hop 1, so the plan refuses a list that
/// leaves a durable behind (naming it).
pub fn request(a: &PlanArgs, more: &PlanMoreArgs, across: bool) -> Result<InPlaceRequest> {
    Ok(InPlaceRequest {
        stream: a.in_place.clone().expect("--in-place"),
        via: a.via.clone(),
        consumers: a.consumer.clone(),
        all_consumers: a.all_consumers || a.consumer.is_empty(),
        settings: settings(a, across)?,
        retry_horizon: a.retry_horizon,
        repoint_publishers: more.repoint_publishers,
        external: external_of(more),
    })
}

/// `run --in-place`: both hops, planned and run (or resumed) one by one.
pub async fn run(conn: &ConnArgs, json_out: bool, a: RunArgs) -> Result<ExitCode> {
    if a.keep_old || a.keep_old_consumers {
        return Err(CliError::Flag(
            "--keep-old and --keep-old-consumers do not apply to --in-place: each hop deletes the stream it leaves (that frees the name)".into(),
        ));
    }
    if a.plan_file.is_some() || a.resume.is_some() {
        return Err(CliError::Flag(
            "--in-place plans anew and resumes by itself: run the same --in-place command again, without --plan or --resume".into(),
        ));
    }
    let req = request(&a.plan, &a.more, conn.across())?;
    let opts = options(&a);
    let js = super::connect_across(conn, Some(&req.stream)).await?;
    if a.seal_when_idle.is_some() && !engine::in_place_under_way(&js, &req).await? {
        // It would be ignored where hop 1 does not split the publishers.
        let hop1 = engine::plan_in_place(&js, &req).await?;
        if !hop1.external.as_ref().is_some_and(|e| e.split_publishers) {
            return Err(CliError::Flag(format!("--seal-when-idle is for a move across systems whose publishers are split, and hop 1 of {} does not split them (its publishers reach the target side, or are repointed at the commit point): drop it; nothing was changed", req.stream)));
        }
    }
    execute(&js, &req, a.yes, &opts, json_out).await
}

/// `run --resume ID` of an in-place change's hop 1 (every message of hop 1
/// names that id): both hops, as the `--in-place` command would go on. A
/// resume of hop 1 alone finished it and ended 0 with the stream under
/// the temporary name and its apps bound by name getting "consumer not
/// found" (a newcomer's trial, 5 of 5). `None` when hop 1 is not an
/// in-place hop under way on one system (then it is resumed as any).
pub async fn resume_hop1(
    js: &Js,
    json_out: bool,
    a: &RunArgs,
    j: &cutover_core::journal::Journal,
) -> Result<Option<ExitCode>> {
    if j.plan.in_place != Some(cutover_core::plan::InPlaceHop::Out) || js.source_side().is_some() {
        return Ok(None);
    }
    let req = InPlaceRequest {
        stream: j.from.clone(),
        via: Some(j.to.clone()),
        consumers: vec![],
        all_consumers: true,
        // Hop 1's journal holds them (run_in_place resumes from it).
        settings: None,
        retry_horizon: Some(std::time::Duration::from_millis(j.plan.retry_horizon_ms)),
        repoint_publishers: false,
        external: None,
    };
    if !engine::in_place_under_way(js, &req).await? {
        return Ok(None);
    }
    execute(js, &req, true, &options(a), json_out).await.map(Some)
}

/// The run options of both hops from `run`'s flags.
fn options(a: &RunArgs) -> RunOptions {
    RunOptions {
        lease_ttl: a.lease_ttl,
        settle_timeout: a.settle_timeout,
        max_pause: a.max_pause,
        // Both hops' commit windows (it was left out: a client matrix found
        // non-retrying publishers' errors unchanged with the flag).
        answer_publishes: !a.no_answer_publishes,
        copy_window: a.copy_window,
        // Across systems with the publishers split in hop 1.
        seal_when_idle: a.seal_when_idle,
        after_step: cutover_nats::test_hooks::crash_after_step(),
        on_exposed: crate::guard::exposure_hook(),
        ..Default::default()
    }
}

/// `run`/`plan --from S --to S` with a source side (--from-server or
/// --from-context): the stream moves to the target system under its own
/// name, which is the in-place flow across systems (hop 1 from the source
/// side to the temporary stream on the target side, hop 2 back to the name
/// there): the command is taken as `--in-place S`, with --to-config's
/// settings if any. Other commands pass unchanged.
pub fn same_name_across(conn: &ConnArgs, mut command: crate::cli::Command) -> crate::cli::Command {
    use crate::cli::Command;
    let plan = match &mut command {
        Command::Run(a) if a.plan_file.is_none() && a.resume.is_none() => &mut a.plan,
        Command::Plan(a) => &mut a.plan,
        _ => return command,
    };
    if conn.across() && plan.in_place.is_none() && plan.from.is_some() && plan.from == plan.to {
        plan.in_place = plan.from.take();
        plan.to = None;
    }
    command
}

/// `plan --in-place`: both hops, the copy and its estimate; read-only.
pub async fn plan(conn: &ConnArgs, json_out: bool, a: &PlanCmdArgs) -> Result<ExitCode> {
    if a.more.out.is_some() {
        return Err(CliError::Flag(
            "--out writes a plan for `run --plan`, which an in-place change does not take (it plans each hop when it gets there): print it with --json instead".into(),
        ));
    }
    let req = request(&a.plan, &a.more, conn.across())?;
    let js = super::connect_across(conn, Some(&req.stream)).await?;
    if js.source_side().is_none() {
        if let Some(code) = update_is_enough(&js, &req, json_out, Update::Show).await? {
            return Ok(code);
        }
    }
    let outline = engine::outline_in_place(&js, &req).await?;
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&outline)?);
    } else {
        print_outline(&outline, &req, js.source_side().is_some());
    }
    Ok(if outline.hop1.safe { ExitCode::Ok } else { ExitCode::Incompatible })
}

/// On a cluster each hop waits one retry horizon before its commit.
fn horizons(o: &InPlaceOutline) -> String {
    match o.hop1.handover {
        true => format!(
            ", of which {} are the two retry horizons each hop waits before its commit on this cluster (--retry-horizon shortens them where the publishers retry for less)",
            crate::render::duration(std::time::Duration::from_millis(2 * o.hop1.retry_horizon_ms))
        ),
        false => String::new(),
    }
}

fn print_outline(o: &InPlaceOutline, req: &InPlaceRequest, across: bool) {
    if across {
        outln!(
            "Across systems under its own name: {s} moves from the source side to the target side, in two hops of strategy mirror:\n  hop 1: {s} on the source side → {via} on the target side (the temporary stream{set}; {s} on the source side is sealed and kept, as after any move across systems)\n  hop 2: {via} → {s} on the target side (a new {s} mirrors {via}; {via} is deleted), planned when hop 1 is done\nEach hop copies {} messages ({}) now; both hops take about {} on a 2-core machine with R1 streams{} (more arriving meanwhile, replicas and the link between the systems add to it). Sequences, and with them KV revisions, are kept; every durable moves with its position.\n\nHop 1:",
            crate::render::thousands(o.copies_messages),
            crate::render::bytes(o.copies_bytes),
            crate::render::duration(std::time::Duration::from_millis(o.estimate_ms)),
            horizons(o),
            s = o.stream,
            via = o.via,
            set = if req.settings.is_some() { ", with the new settings" } else { "" },
        );
        super::plan::print_plan(&o.hop1);
        return;
    }
    outln!(
        "In place: {s} gets its new settings under its own name, in two hops of strategy mirror:\n  hop 1: {s} → {via} (the temporary stream, with the new settings but memory storage, which only hop 2 gives, so that the copy between the hops survives a restart; {s} is deleted at the end of it)\n  hop 2: {via} → {s} (a new {s} mirrors {via} and takes its settings; {via} is deleted), planned when hop 1 is done\nEach hop copies {} messages ({}) now; both hops take about {} on a 2-core machine with R1 streams{} (more arriving meanwhile adds to it; replicas and busy servers take longer). {}; nothing is lost.\n\nHop 1:",
        crate::render::thousands(o.copies_messages),
        crate::render::bytes(o.copies_bytes),
        crate::render::duration(std::time::Duration::from_millis(o.estimate_ms)),
        horizons(o),
        copy_load(o),
        s = o.stream,
        via = o.via
    );
    super::plan::print_plan(&o.hop1);
}

/// What publishers meet while a copy runs, as measured (docs/benchmarks.md,
/// 1M messages at 5,000 msg/s on 2 cores) for this copy's kind: the plan
/// said 1.2 s of the server's own mirror consumer also where the copy is
/// paced (a newcomer's trial).
fn copy_load(o: &InPlaceOutline) -> &'static str {
    match (o.replicated_copy, o.paced_copy) {
        (true, _) => "while a replicated copy runs the servers are busy: on a 3-node R3 cluster on 2 cores publishes waited up to 0.9 s with 1M messages and 0.22-0.28 s with an empty stream (docs/benchmarks.md)",
        (false, true) => "while a copy runs it reads the stream through a paced durable (--copy-window): with 1M messages on one server on 2 cores publishes waited up to 28 ms and pull workers 33 ms (docs/benchmarks.md)",
        (false, false) => "while a copy runs the server's own mirror consumer keeps it busy (a paced copy needs a limits stream on 2.14+): with 1M messages on 2 cores publishes waited up to 0.5 s and pull workers 0.14 s (docs/benchmarks.md)",
    }
}

/// `nats-cutover kv|obj BUCKET --set OPTION=VALUE ...`: the bucket's stream
/// in place, with every durable it has (usually none: watchers and readers
/// use ephemeral consumers, which find the stream by name again).
pub async fn bucket(
    conn: &ConnArgs,
    json_out: bool,
    kind: Kind,
    a: BucketArgs,
) -> Result<ExitCode> {
    // Across systems (a source side given) the bucket may move as it is.
    let settings = match cutover_core::bucket::settings(kind, &a.set) {
        Err(cutover_core::bucket::BucketError::Nothing) if conn.across() => None,
        r => Some(r.map_err(|e| CliError::Flag(e.to_string()))?),
    };
    cutover_core::names::stream(&kind.stream(&a.bucket))
        .map_err(|e| CliError::Flag(format!("bucket name {:?}: {e}", a.bucket)))?;
    let req = InPlaceRequest {
        stream: kind.stream(&a.bucket),
        via: a.via.clone(),
        consumers: vec![],
        all_consumers: true,
        settings,
        retry_horizon: a.retry_horizon,
        repoint_publishers: a.repoint_publishers,
        external: None,
    };
    let opts = RunOptions {
        lease_ttl: a.lease_ttl,
        max_pause: a.max_pause,
        answer_publishes: !a.no_answer_publishes,
        copy_window: a.copy_window,
        after_step: cutover_nats::test_hooks::crash_after_step(),
        on_exposed: crate::guard::exposure_hook(),
        ..Default::default()
    };
    let js = super::connect_across(conn, Some(&req.stream)).await?;
    execute(&js, &req, a.yes, &opts, json_out).await
}

async fn execute(
    js: &Js,
    req: &InPlaceRequest,
    yes: bool,
    opts: &RunOptions,
    json_out: bool,
) -> Result<ExitCode> {
    // A hop under way is resumed as it was confirmed, whatever the streams
    // look like meanwhile (the new stream may have its settings already).
    let resuming = engine::in_place_under_way(js, req).await?;
    let across = js.source_side().is_some();
    if !resuming && !across {
        let how = if yes { Update::Apply } else { Update::Ask };
        if let Some(code) = update_is_enough(js, req, json_out, how).await? {
            return Ok(code);
        }
    }
    if !yes && !resuming {
        let outline = engine::outline_in_place(js, req).await?;
        if !json_out {
            print_outline(&outline, req, js.source_side().is_some());
        }
        if !outline.hop1.safe {
            return Err(CliError::Unsafe(format!(
                "hop 1 is unsafe, nothing was changed: {}",
                outline.hop1.unsafe_reasons()
            )));
        }
        super::prompt::ask()?;
    }
    let render = Render::new(detect(json_out));
    let result =
        engine::run_in_place(js, req, opts, &render, super::prompt::shutdown_on_ctrl_c()).await;
    render.finish();
    let (j1, j2) = result?;
    if json_out {
        outln!("{}", json!({ "kind": "result", "hops": [j1, j2] }));
    } else if across {
        outln!(
            "{} lives on the target side under its own name{}: moved through {} ({}, {}), sequences and durables kept; the old {} on the source side is sealed and kept (delete it there once nothing reads it)",
            req.stream,
            if req.settings.is_some() { ", with its new settings" } else { "" },
            req.via(),
            j1.id,
            j2.id,
            req.stream
        );
    } else {
        outln!(
            "{} has its new settings under its own name: moved through {} and back ({}, {}), sequences and durables kept",
            req.stream,
            req.via(),
            j1.id,
            j2.id
        );
    }
    Ok(ExitCode::Ok)
}
