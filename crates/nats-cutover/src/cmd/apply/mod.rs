//! `nats-cutover apply PATH...`: the desired state of a fleet of streams, KV
//! buckets and object stores (files, see `files.rs`), planned per asset
//! (`cutover_core::desired` judges; the engine plans the live changes) and,
//! with `--yes`, carried out: creates and plain updates at once, live
//! changes in place through `engine::run_in_place` (each its own journaled
//! migration, as `run --in-place`, `kv` and `obj` run them), `--parallel`
//! at a time.
//!
//! The fleet is journaled in the `CUTOVER` bucket, one record per asset
//! (`apply.<STREAM>`: its action and outcome, written before and after its
//! write). What makes a second `apply` safe is the server, not the record:
//! a finished asset reads as unchanged, and an interrupted live change is
//! found by its own journal (`engine::in_place_under_way`, also between
//! the hops, when the stream lives under its temporary name) and resumed.
//!
//! # Layout
//! - `files.rs`: paths to assets.
//! - `show.rs`: the plan and the outcome, as text or JSON.
//! - this file: judging each asset against the server, and carrying it out.

mod across;
mod files;
mod report;
mod show;

use super::progress::{detect, Render};
use crate::cli::{ApplyArgs, ConnArgs};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use cutover_core::desired::{self, Asset, Change, Needs};
use cutover_core::plan::InPlaceOutline;
use cutover_nats::engine::{self, InPlaceRequest, RunOptions};
use cutover_nats::journal::{now_ms, JournalStore};
use cutover_nats::{ErrorKind, Js};
use futures::StreamExt;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What `apply` does with one asset.
#[derive(Debug, Clone)]
pub enum Action {
    Unchanged,
    /// Created with this configuration.
    Create(Value),
    /// The server takes the changes as this update.
    Update {
        changes: Vec<Change>,
        update: Value,
    },
    /// A live change in place; `outline` is hop 1's plan (none when an
    /// interrupted one is resumed: it was judged when it started).
    InPlace {
        changes: Vec<Change>,
        refused_by_server: Vec<(String, String)>,
        outline: Option<Box<InPlaceOutline>>,
        settings: Option<Map<String, Value>>,
    },
    Refused {
        changes: Vec<Change>,
        reason: String,
        fix: String,
    },
    /// Across systems: a move to the target side under the same name, with
    /// `settings` changed on the way (`outline`: hop 1's plan; none when
    /// resumed).
    Move {
        changes: Vec<Change>,
        outline: Option<Box<InPlaceOutline>>,
        settings: Option<Map<String, Value>>,
    },
}

impl Action {
    pub fn name(&self) -> &'static str {
        match self {
            Action::Unchanged => "unchanged",
            Action::Create(_) => "create",
            Action::Update { .. } => "update",
            Action::InPlace { .. } => "change in place",
            Action::Refused { .. } => "refused",
            Action::Move { .. } => "move",
        }
    }

    fn writes(&self) -> bool {
        !matches!(self, Action::Unchanged | Action::Refused { .. })
    }
}

/// One asset, judged.
pub struct Item {
    pub asset: Asset,
    pub action: Action,
    /// An interrupted live change of this asset is under way: resumed.
    pub resume: bool,
    /// The fleet record an earlier apply left, if any.
    pub earlier: Option<Value>,
    /// Filled in by `--yes`: `created`, `updated`, `changed in place`,
    /// `unchanged`, `skipped (refused)`, `failed: ...`, `not started`.
    pub outcome: Option<String>,
    pub ms: Option<u64>,
}

/// `apply`: read, judge, show; with `--yes`, carry out.
pub async fn run(conn: &ConnArgs, json_out: bool, a: ApplyArgs) -> Result<ExitCode> {
    if !conn.across() && a.repoint_publishers {
        return Err(CliError::Flag("--repoint-publishers is for a move across systems: give the source side too (--from-server or --from-context)".into()));
    }
    for p in &a.report {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(CliError::Flag(format!(
                "--report {}: no such directory; nothing was changed",
                p.display()
            )));
        }
    }
    if a.paths.is_empty() && !conn.across() {
        return Err(CliError::Flag("apply needs the files (or directories) with the desired state; to move every stream of another system here under its name, give that system with --from-server (or --from-context)".into()));
    }
    let sides = match conn.across() {
        true => {
            let (target, source) = super::connect_sides(conn).await?;
            Some(across::Sides { target, source })
        }
        false => None,
    };
    let (all, nfiles) = match (&sides, a.paths.is_empty()) {
        (Some(s), true) => (across::source_assets(&s.source).await?, 0),
        _ => files::assets(&a.paths)?,
    };
    let assets: Vec<Asset> = all
        .iter()
        .filter(|x| desired::selected(&x.name, &x.stream, &a.only, &a.except))
        .cloned()
        .collect();
    if assets.is_empty() && !(a.only.is_empty() && a.except.is_empty()) {
        // A pattern that selects nothing is most likely a typo.
        let names: Vec<String> = all.iter().map(|x| x.stream.clone()).collect();
        return Err(CliError::Flag(format!(
            "--only/--except leave no asset: the {} {}; patterns match an asset's name or its stream's, `*` for any characters (--only 'KV_*')",
            if nfiles == 0 { "source side holds" } else { "files describe" },
            names.join(", ")
        )));
    }
    let js = match &sides {
        Some(s) => s.target.clone(),
        None => super::connect(conn).await?,
    };
    let store = JournalStore::open(&js, cutover_nats::journal::IfMissing::ReturnNone).await?;
    // Judged --parallel at a time (read-only; each plan's probes may wait
    // their timeout: a publish across systems that does not reach), in order.
    let judged: Vec<Result<Item>> = futures::stream::iter(assets)
        .map(|asset| {
            let (store, sides, js, a) = (&store, &sides, &js, &a);
            async move {
                let earlier = match store {
                    Some(s) => record(s, &asset.stream).await?,
                    None => None,
                };
                let (action, resume) = match sides {
                    Some(s) => across::judge(s, &asset, a).await?,
                    None => judge(js, &asset, a.retry_horizon).await?,
                };
                Ok(Item { asset, action, resume, earlier, outcome: None, ms: None })
            }
        })
        .buffered(usize::from(a.parallel))
        .collect()
        .await;
    let items: Vec<Item> = judged.into_iter().collect::<Result<_>>()?;
    let mut items = items;
    // Across systems the files' peers are the source side's streams; with
    // no files every one of them is an asset.
    let others = match (&sides, a.paths.is_empty()) {
        (Some(_), true) => vec![],
        (Some(s), false) => not_in_files(&s.source, &items, &a).await?,
        (None, _) => not_in_files(&js, &items, &a).await?,
    };
    let code = verdict(&items);
    let plan = show::Plan { items: &items, others: &others, nfiles, parallel: a.parallel };
    if !a.yes {
        show::plan(&plan, json_out, true, code);
        return Ok(code);
    }
    show::plan(&plan, json_out, false, code);
    let refused: Vec<&Item> =
        items.iter().filter(|i| matches!(i.action, Action::Refused { .. })).collect();
    if !refused.is_empty() && !a.skip_refused {
        let names: Vec<String> = refused.iter().map(|i| i.asset.label()).collect();
        return Err(CliError::Unsafe(format!(
            "{} refused ({}): nothing was changed; fix them, leave them out (--except), or pass --skip-refused to apply the others",
            names.len(),
            names.join(", ")
        )));
    }
    let result = carry_out(&js, sides.as_ref(), &mut items, &a, json_out).await;
    show::outcome(&items, json_out);
    if !a.report.is_empty() {
        let error = result.as_ref().err().map(|e| e.message());
        let d = report::data(&js, &items, a.parallel, error.as_deref()).await;
        for path in &a.report {
            match report::write(path, &d) {
                Ok(()) => errln!("report: {}", path.display()),
                Err(e) => errln!("could not write the report {}: {e}", path.display()),
            }
        }
    }
    result?;
    Ok(ExitCode::Ok)
}

/// The exit code of a plan: refused (3) over pending (7) over nothing to do.
fn verdict(items: &[Item]) -> ExitCode {
    if items.iter().any(|i| matches!(i.action, Action::Refused { .. })) {
        ExitCode::Incompatible
    } else if items.iter().any(|i| i.action.writes()) {
        ExitCode::ChangesPending
    } else {
        ExitCode::Ok
    }
}

/// The in-place request of `asset` (every durable moves; the temporary
/// stream is `<STREAM>_CUTOVER`).
fn request(
    asset: &Asset,
    settings: Option<Map<String, Value>>,
    retry_horizon: Option<std::time::Duration>,
) -> InPlaceRequest {
    InPlaceRequest {
        stream: asset.stream.clone(),
        via: None,
        consumers: vec![],
        all_consumers: true,
        settings,
        retry_horizon,
        repoint_publishers: false,
        external: None,
    }
}

/// What `asset` needs, read from the server (read-only but for the
/// in-place plan's scratch stream, as `plan` makes).
async fn judge(
    js: &Js,
    asset: &Asset,
    horizon: Option<std::time::Duration>,
) -> Result<(Action, bool)> {
    let req = request(asset, None, horizon);
    if engine::in_place_under_way(js, &req).await? {
        // Between the hops the stream lives as the temporary one, with the
        // new settings: the changes still to make are read against it.
        let current = match js.stream_info_opt(&asset.stream).await? {
            Some((raw, _)) => Some(raw),
            None => js.stream_info_opt(&req.via()).await?.map(|(raw, _)| raw),
        };
        let changes =
            current.map(|c| desired::diff(&c["config"], &asset.settings)).unwrap_or_default();
        let settings = (!changes.is_empty()).then(|| desired::settings_of(&changes));
        let action =
            Action::InPlace { changes, refused_by_server: vec![], outline: None, settings };
        return Ok((action, true));
    }
    let current = js.stream_info_opt(&asset.stream).await?.map(|(raw, _)| raw["config"].clone());
    let action = match desired::judge(asset, current.as_ref()) {
        Needs::Unchanged => Action::Unchanged,
        Needs::Create => Action::Create(asset.create_config()),
        Needs::Update(changes) => {
            let mut update = current.unwrap_or_default();
            for c in &changes {
                update[&c.field] = c.desired.clone();
            }
            Action::Update { changes, update }
        }
        Needs::Refused { changes, reason, fix } => Action::Refused { changes, reason, fix },
        Needs::InPlace { changes, refused_by_server } => {
            let settings = desired::settings_of(&changes);
            let req = request(asset, Some(settings.clone()), horizon);
            let sets: Vec<String> = settings
                .iter()
                .map(|(k, v)| match v.as_str() {
                    Some(s) => format!("--set {k}={s}"),
                    None => format!("--set '{k}={v}'"),
                })
                .collect();
            let fix = format!("`nats-cutover plan --in-place {} {}` shows the whole plan: fix what it names, or leave these settings as the server has them", asset.stream, sets.join(" "));
            match engine::outline_in_place(js, &req).await {
                Ok(o) if o.hop1.safe => Action::InPlace {
                    changes,
                    refused_by_server,
                    outline: Some(Box::new(o)),
                    settings: Some(settings),
                },
                Ok(o) => Action::Refused {
                    changes,
                    reason: format!(
                        "a live change in place is unsafe: {}",
                        o.hop1.unsafe_reasons()
                    ),
                    fix,
                },
                Err(e) if e.kind() == ErrorKind::Incompatible => Action::Refused {
                    changes,
                    reason: format!("a live change in place is not possible here: {e}"),
                    fix,
                },
                Err(e) => return Err(e.into()),
            }
        }
    };
    Ok((action, false))
}

/// The server's streams no file describes, selected by the same patterns:
/// listed, never changed. The tool's own (its bucket, scratch and
/// temporary streams of the changes under way) are not listed.
async fn not_in_files(js: &Js, items: &[Item], a: &ApplyArgs) -> Result<Vec<String>> {
    let names = stream_names(js).await?;
    let ours = |n: &str| {
        tools_own(n)
            || items
                .iter()
                .any(|i| i.asset.stream == n || format!("{}_CUTOVER", i.asset.stream) == n)
    };
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| !ours(n))
        .filter(|n| {
            let (_, bucket) = desired::AssetKind::of_stream(n);
            desired::selected(&bucket, n, &a.only, &a.except)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Every stream's name on the server `js` reaches.
async fn stream_names(js: &Js) -> Result<Vec<String>> {
    let mut names = vec![];
    let mut offset = 0usize;
    loop {
        let page = js.api("stream names", "STREAM.NAMES", &json!({ "offset": offset })).await?;
        let got: Vec<String> = page["streams"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
            .unwrap_or_default();
        offset += got.len();
        names.extend(got);
        if got_all(&page, offset) {
            break;
        }
    }
    Ok(names)
}

/// The tool's own streams: its bucket and plan's scratch streams.
fn tools_own(n: &str) -> bool {
    n == "KV_CUTOVER" || n.starts_with("CUTOVER_CHECK_")
}

fn got_all(page: &Value, seen: usize) -> bool {
    let total = page["total"].as_u64().unwrap_or(0) as usize;
    seen >= total || page["streams"].as_array().is_none_or(|a| a.is_empty())
}

/// The fleet record of `stream`.
fn key(stream: &str) -> String {
    format!("apply.{stream}")
}

async fn record(store: &JournalStore, stream: &str) -> Result<Option<Value>> {
    let entry = store.kv().get(key(stream)).await.map_err(|e| {
        CliError::Nats(cutover_nats::Error::Journal(format!("read fleet record of {stream}: {e}")))
    })?;
    Ok(entry.and_then(|b| serde_json::from_slice(&b).ok()))
}

async fn put_record(
    store: &JournalStore,
    item: &Item,
    state: &str,
    error: Option<&str>,
) -> Result<()> {
    let v = json!({
        "stream": item.asset.stream,
        "kind": item.asset.kind.as_str(),
        "origin": item.asset.origin,
        "action": item.action.name(),
        "state": state,
        "error": error,
        "at_ms": now_ms(),
    });
    store.kv().put(key(&item.asset.stream), v.to_string().into()).await.map_err(|e| {
        CliError::Nats(cutover_nats::Error::Journal(format!(
            "write fleet record of {}: {e}",
            item.asset.stream
        )))
    })?;
    Ok(())
}

/// `--yes`: creates and updates first, one by one (each a request); then
/// the live changes, `--parallel` at a time. The first failure starts no
/// further asset (those under way finish or stop at a safe point).
async fn carry_out(
    js: &Js,
    sides: Option<&across::Sides>,
    items: &mut [Item],
    a: &ApplyArgs,
    json_out: bool,
) -> Result<()> {
    if !items.iter().any(|i| i.action.writes() || i.earlier.is_some()) {
        for i in items.iter_mut() {
            i.outcome = Some(match i.action {
                Action::Refused { .. } => "skipped (refused)".into(),
                _ => "unchanged".into(),
            });
        }
        return Ok(());
    }
    let replicas = items
        .iter()
        .filter_map(|i| i.asset.settings.get("num_replicas").and_then(Value::as_i64))
        .max()
        .unwrap_or(1);
    let store = JournalStore::open_replicated(js, replicas).await?;
    let mut first_error: Option<CliError> = None;
    for item in items.iter_mut() {
        let t0 = now_ms();
        let done = match &item.action {
            Action::Unchanged => {
                // A write an earlier apply made before it was stopped.
                if item.earlier.as_ref().is_some_and(|r| r["state"] != "done") {
                    put_record(&store, item, "done", None).await?;
                }
                item.outcome = Some("unchanged".into());
                continue;
            }
            Action::Refused { .. } => {
                item.outcome = Some("skipped (refused)".into());
                continue;
            }
            Action::InPlace { .. } | Action::Move { .. } => continue,
            _ if first_error.is_some() => {
                item.outcome = Some("not started".into());
                continue;
            }
            Action::Create(config) => {
                put_record(&store, item, "started", None).await?;
                js.stream_create(config).await.map(|_| "created")
            }
            Action::Update { update, .. } => {
                put_record(&store, item, "started", None).await?;
                js.stream_update(update).await.map(|_| "updated")
            }
        };
        item.ms = Some(now_ms().saturating_sub(t0));
        match done {
            Ok(what) => {
                put_record(&store, item, "done", None).await?;
                item.outcome = Some(what.into());
            }
            Err(e) => {
                let e = CliError::from(e);
                put_record(&store, item, "failed", Some(&e.message())).await?;
                item.outcome = Some(format!("failed: {}", e.message()));
                first_error = Some(e);
            }
        }
    }
    let live: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i.action, Action::InPlace { .. } | Action::Move { .. }))
        .map(|(n, _)| n)
        .collect();
    let stop = AtomicBool::new(first_error.is_some());
    let first_error = Mutex::new(first_error);
    let opts = RunOptions {
        lease_ttl: a.lease_ttl,
        max_pause: a.max_pause,
        after_step: cutover_nats::test_hooks::crash_after_step(),
        on_exposed: crate::guard::fleet_exposure_hook(),
        ..Default::default()
    };
    let render = Render::fleet(detect(json_out));
    let shutdown = super::prompt::shutdown_on_ctrl_c();
    let outcomes: Vec<(usize, Option<String>, u64)> = {
        let items_ref: &[Item] = items;
        futures::stream::iter(live)
            .map(|n| {
                let (store, opts, render, shutdown) = (&store, &opts, &render, shutdown.clone());
                let (stop, first_error) = (&stop, &first_error);
                async move {
                    let item = &items_ref[n];
                    if stop.load(Ordering::SeqCst) {
                        return (n, Some("not started".to_string()), 0);
                    }
                    let t0 = now_ms();
                    let r = async {
                        put_record(store, item, "started", None).await?;
                        match (&item.action, sides) {
                            (Action::Move { .. }, Some(sides)) => {
                                across::carry(sides, item, a, opts, render, shutdown).await?
                            }
                            (Action::InPlace { settings, .. }, _) => {
                                let req = request(&item.asset, settings.clone(), a.retry_horizon);
                                engine::run_in_place(js, &req, opts, render, shutdown).await?;
                            }
                            _ => unreachable!("live changes are moves or changes in place"),
                        }
                        put_record(store, item, "done", None).await
                    }
                    .await;
                    let ms = now_ms().saturating_sub(t0);
                    let done = match item.action {
                        Action::Move { .. } => "moved",
                        _ => "changed in place",
                    };
                    match r {
                        Ok(()) => (n, Some(done.into()), ms),
                        Err(e) => {
                            stop.store(true, Ordering::SeqCst);
                            // The engine names `run --resume`; for a fleet
                            // the same apply is the one command (across
                            // systems it also brings the source side).
                            let msg = format!(
                                "{}; the same `nats-cutover apply` command continues it",
                                e.message()
                            );
                            let _ = put_record(store, item, "failed", Some(&msg)).await;
                            let mut f = first_error.lock().unwrap_or_else(|p| p.into_inner());
                            f.get_or_insert(e);
                            (n, Some(format!("failed: {msg}")), ms)
                        }
                    }
                }
            })
            .buffer_unordered(usize::from(a.parallel))
            .collect()
            .await
    };
    render.finish();
    for (n, outcome, ms) in outcomes {
        items[n].outcome = outcome;
        items[n].ms = Some(ms);
    }
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
