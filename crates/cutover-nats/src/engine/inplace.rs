//! In-place migration: a stream keeps its name and sequences but gets settings
//! the server will not update (storage, retention to/from work queue, ...).
//!
//! Two hops of strategy mirror through a temporary stream (`<STREAM>_CUTOVER`
//! unless named): hop 1 moves consumers and publishers from A to the
//! temporary stream (a mirror of A, promoted) and deletes A, which frees the
//! name; hop 2 moves them back to a new A with the new settings (a mirror of the
//! temporary stream, promoted) and deletes the temporary stream. Mirrors keep
//! sequences, so every durable's position and every message's sequence survive
//! both hops. Each hop is an ordinary, journaled migration (`A.A_CUTOVER`, then
//! `A_CUTOVER.A`): running the same request again resumes whichever is under
//! way; `rollback A.A_CUTOVER` undoes hop 1 before its commit point.
//!
//! The temporary stream gets the new settings already (so a work queue can
//! become a limits stream: hop 2 then moves between two limits streams), and
//! hop 2 copies them. Hop 1's plan is judged before anything is written; hop 2
//! is planned when hop 1 is done (a failure there leaves the stream serving
//! under the temporary name, and the same command continues).

use super::ctx::RunOptions;
use super::events::Sink;
use super::prepare::prepare_plan;
use super::run::run;
use crate::api::Js;
use crate::error::{Error, Result};
use crate::journal::{IfMissing, JournalStore};
use cutover_core::journal::{migration_id, Journal, Phase};
use cutover_core::plan::{copy_estimate, InPlaceHop, InPlaceOutline, Plan, PlanRequest, Strategy};
use serde_json::{Map, Value};
use std::time::Duration;
use tokio::sync::watch;

/// Stream settings in the server's stream-config shape.
type Settings = Map<String, Value>;

/// What the operator asks for.
#[derive(Debug, Clone)]
pub struct InPlaceRequest {
    pub stream: String,
    /// The temporary stream (default `<STREAM>_CUTOVER`).
    pub via: Option<String>,
    pub consumers: Vec<String>,
    pub all_consumers: bool,
    /// The new settings, in the server's stream-config shape.
    pub settings: Option<Map<String, Value>>,
    pub retry_horizon: Option<Duration>,
    /// Across systems: the publishers (and a bucket's clients) are repointed
    /// to the target side (`--repoint-publishers`): hop 1 splits them
    /// (docs/cross-system.md). Needed where their subjects do not cross,
    /// as `$KV.>` and `$OBJ.>` never cross a leaf connection between
    /// JetStream domains.
    pub repoint_publishers: bool,
    /// Across systems: how B reaches A (`--from-api`, `--from-deliver`);
    /// `None`: A's JetStream domain (`engine::across::request`).
    pub external: Option<cutover_core::plan::External>,
}

impl InPlaceRequest {
    pub fn via(&self) -> String {
        self.via.clone().unwrap_or_else(|| format!("{}_CUTOVER", self.stream))
    }

    /// The settings of each hop. The temporary stream gets the new ones, and
    /// hop 2 copies them, but for memory storage: the temporary stream is
    /// the only copy from hop 1's end (the old stream deleted) to hop 2's
    /// commit, and a memory stream does not survive a server restart (a
    /// newcomer's restart in hop 1 lost it, and every resume failed), so it
    /// keeps the old stream's storage and hop 2 makes the stream memory.
    fn hop_settings(&self) -> (Option<Settings>, Option<Settings>) {
        let mut first = self.settings.clone();
        let memory =
            first.as_ref().and_then(|s| s.get("storage")).and_then(Value::as_str) == Some("memory");
        if !memory {
            return (first, None);
        }
        let storage = first.as_mut().and_then(|s| s.remove("storage"));
        let first = first.filter(|s| !s.is_empty());
        let mut second = Map::new();
        second.insert("storage".into(), storage.unwrap_or_default());
        (first, Some(second))
    }

    fn hop(
        &self,
        from: &str,
        to: &str,
        settings: Option<Map<String, Value>>,
        hop: InPlaceHop,
    ) -> PlanRequest {
        let mut r = PlanRequest::source(from, to, &[]);
        r.consumers = self.consumers.clone();
        r.all_consumers = self.all_consumers;
        r.strategy = Strategy::Mirror;
        r.to_config = settings;
        r.retry_horizon = self.retry_horizon;
        r.in_place = Some(hop);
        // Hop 2 runs on the target side alone, where the publishers are.
        r.repoint_publishers = self.repoint_publishers && hop == InPlaceHop::Out;
        r.external = self.external.clone().filter(|_| hop == InPlaceHop::Out);
        r
    }
}

/// Hop 1's plan: A to the temporary stream, which gets the new settings.
pub async fn plan_in_place(js: &Js, req: &InPlaceRequest) -> Result<Plan> {
    let (first, then) = req.hop_settings();
    let mut p = prepare_plan(js, &req.hop(&req.stream, &req.via(), first, InPlaceHop::Out)).await?;
    p.in_place_then = then.unwrap_or_default();
    if js.source_side().is_some() {
        name_free_on_target(js, &mut p).await?;
    }
    Ok(p)
}

/// Across systems under the same name, hop 2 creates the stream under A's
/// name on the target side: a stream there with that name already (another
/// stream, or an earlier copy) is refused before hop 1 starts, which would
/// otherwise leave the stream living as the temporary one.
async fn name_free_on_target(js: &Js, p: &mut Plan) -> Result<()> {
    let target = js.target_only();
    if target.stream_info_opt(&p.from).await?.is_some() {
        p.findings.push(cutover_core::compat::Finding {
            scope: "plan".into(),
            setting: "name".into(),
            from: p.from.clone(),
            to: p.from.clone(),
            verdict: cutover_core::compat::Verdict::Unsafe,
            reason: format!(
                "the target side has a stream {} already, and no move of it by nats-cutover is journaled there, so it is another stream: a move that keeps the name creates {} on the target side; check what that stream holds, then rename or delete it there, or move to another name (run --from {} --to NEW)",
                p.from, p.from, p.from
            ),
        });
        p.safe = false;
    }
    Ok(())
}

/// What `plan` shows: hop 1's plan, hop 2 in outline, the copy and its
/// estimated time.
pub async fn outline_in_place(js: &Js, req: &InPlaceRequest) -> Result<InPlaceOutline> {
    if js.stream_info_opt(&req.stream).await?.is_none() {
        if let Some(why) = missing_mid_change(js, &req.stream).await? {
            return Err(Error::Journal(why));
        }
    }
    let hop1 = plan_in_place(js, req).await?;
    let horizons = if hop1.handover { 2 * hop1.retry_horizon_ms } else { 0 };
    let (_, a) = js.stream_info(&req.stream).await?;
    let (messages, bytes) = (a.state.messages, a.state.bytes);
    // The copy's kind, as steps/create.rs makes it: replicated (the larger
    // of A's and the new setting's), and paced from 2.14 on a limits stream
    // when not replicated.
    let replicas = a.config.num_replicas.max(hop1.b_config["num_replicas"].as_i64().unwrap_or(1));
    let paced = hop1.features.mirror_durable_consumer
        && a.config.retention == cutover_core::model::RetentionPolicy::Limits
        && hop1.b_config["num_replicas"].as_i64().unwrap_or(1) <= 1;
    Ok(InPlaceOutline {
        stream: req.stream.clone(),
        via: req.via(),
        hop1,
        copies_messages: messages,
        copies_bytes: bytes,
        // On a cluster each hop's commit waits one retry horizon
        // (steps/handover.rs): a newcomer's estimate said 6 ms for a
        // change that took 4 minutes of 120 s windows.
        estimate_ms: 2 * copy_estimate(messages, bytes, replicas, paced).as_millis() as u64
            + horizons,
        paced_copy: paced,
        replicated_copy: replicas > 1,
    })
}

/// Whether a hop of this in-place migration is under way (journaled, neither
/// done nor rolled back): then the request resumes it, whatever the streams
/// look like meanwhile.
pub async fn in_place_under_way(js: &Js, req: &InPlaceRequest) -> Result<bool> {
    let Some(store) = JournalStore::open(js, IfMissing::ReturnNone).await? else {
        return Ok(false);
    };
    let (j1, j2) = load_hops(&store, req).await?;
    Ok(hop_under_way(j1.as_ref(), j2.as_ref()).is_some())
}

/// Which hop of an in-place change is under way, from its two journals:
/// one journaled neither done nor rolled back, or hop 1 done with no hop 2
/// yet (between the hops); with where it is.
fn hop_under_way<'a>(
    hop1: Option<&'a Journal>,
    hop2: Option<&'a Journal>,
) -> Option<(&'a Journal, &'static str)> {
    let open = |j: &Journal| j.phase != Phase::Done && j.phase != Phase::RolledBack;
    match (hop1, hop2) {
        (_, Some(j2)) if open(j2) => Some((j2, "in hop 2")),
        (Some(j1), _) if open(j1) => Some((j1, "in hop 1")),
        (Some(j1), None) if j1.phase == Phase::Done => Some((j1, "between its hops (hop 1 done)")),
        _ => None,
    }
}

/// Why `stream` is missing when an in-place change of it is under way (a
/// runner stopped inside or between its hops: its messages, durables and
/// subjects live on the temporary stream), with the way on; `None` when no
/// change of it is open. `plan` and `inspect` said "does not exist ... (or
/// create it)" there, and a stream created by hand would take the name hop 2
/// needs (a newcomer's trial).
pub async fn missing_mid_change(js: &Js, stream: &str) -> Result<Option<String>> {
    let Some(store) = JournalStore::open(js, IfMissing::ReturnNone).await? else {
        return Ok(None);
    };
    let mut hops = vec![];
    for id in store.ids().await? {
        if !id.split('.').any(|s| s == stream) {
            continue;
        }
        if let Some(j) = store.load(&id).await? {
            let of_stream = match j.plan.in_place {
                Some(InPlaceHop::Out) => j.from == stream,
                Some(InPlaceHop::Back) => j.to == stream,
                None => false,
            };
            if of_stream {
                hops.push(j);
            }
        }
    }
    let hop2 = hops.iter().find(|j| j.plan.in_place == Some(InPlaceHop::Back));
    let hop1 = hops.iter().find(|j| j.plan.in_place == Some(InPlaceHop::Out));
    let Some((j, at)) = hop_under_way(hop1, hop2) else { return Ok(None) };
    let via = if j.plan.in_place == Some(InPlaceHop::Out) { &j.to } else { &j.from };
    Ok(Some(format!(
        "stream {stream:?} does not exist now because its in-place change is under way, {at} (migration {}, phase {}): its messages and durables are on {via} until hop 2 makes {stream} again, so do not create {stream} by hand; {}",
        j.id,
        j.phase.as_str(),
        j.way_on()
    )))
}

/// Whether both hops of this in-place migration (or same-name move) are
/// journaled done.
pub async fn in_place_done(js: &Js, req: &InPlaceRequest) -> Result<bool> {
    let Some(store) = JournalStore::open(js, IfMissing::ReturnNone).await? else {
        return Ok(false);
    };
    let done = |j: &Option<Journal>| j.as_ref().is_some_and(|j| j.phase == Phase::Done);
    let (j1, j2) = load_hops(&store, req).await?;
    Ok(done(&j1) && done(&j2))
}

/// The journals of both hops (`A.VIA`, then `VIA.A`), where they exist.
async fn load_hops(
    store: &JournalStore,
    req: &InPlaceRequest,
) -> Result<(Option<Journal>, Option<Journal>)> {
    let (a, via) = (req.stream.as_str(), req.via());
    Ok((store.load(&migration_id(a, &via)).await?, store.load(&migration_id(&via, a)).await?))
}

/// Runs (or resumes) both hops. Returns the two journals.
pub async fn run_in_place(
    js: &Js,
    req: &InPlaceRequest,
    opts: &RunOptions,
    sink: &dyn Sink,
    shutdown: watch::Receiver<bool>,
) -> Result<(Journal, Journal)> {
    let (a, via) = (req.stream.clone(), req.via());
    // Read-only until hop 1's plan is judged: bad input changes nothing.
    let (hop1, hop2) = match JournalStore::open(js, IfMissing::ReturnNone).await? {
        Some(store) => match load_hops(&store, req).await? {
            // Across systems the finished move is the answer: the stream
            // lives on the target side under its name (a newcomer's second
            // run was told to delete it there).
            (Some(j1), Some(j2))
                if js.source_side().is_some()
                    && j1.phase == Phase::Done
                    && j2.phase == Phase::Done =>
            {
                return Ok((j1, j2));
            }
            // An earlier in-place migration of this stream, finished: this
            // request is a new one (its records would make it a no-op).
            (Some(j1), Some(j2)) if j1.phase == Phase::Done && j2.phase == Phase::Done => {
                if plan_in_place(js, req).await?.safe {
                    store.delete_journal(&j1.id).await?;
                    store.delete_journal(&j2.id).await?;
                    // And their released leases: without their journals
                    // `status` listed them as orphans (a newcomer's trial).
                    for l in store.leases().await? {
                        if !l.live && (l.migration == j1.id || l.migration == j2.id) {
                            store.delete_lease(&l.stream).await?;
                        }
                    }
                }
                (None, None)
            }
            other => other,
        },
        None => (None, None),
    };
    if let Some(j) = hop1.as_ref().filter(|j| j.phase != Phase::RolledBack) {
        same_settings(req, &j.plan)?;
    }
    // Each hop deletes the stream it leaves: that frees A's name for hop 2.
    // Across systems (a source side given) the name is free on the target
    // side already: hop 1 moves A from the source side to the temporary
    // stream on the target side and leaves A sealed there (as any move
    // across systems does: a rollback never deletes the only copy, and the
    // old system may be retired after), and hop 2 runs on the target side
    // alone, where A's name then names the new stream.
    let across = js.source_side().is_some();
    let target = js.target_only();
    let opts = RunOptions { delete_old: true, keep_old_consumers: false, ..opts.clone() };
    let opts1 = RunOptions { delete_old: !across, ..opts.clone() };
    let j1 = match hop1 {
        Some(j) if j.phase == Phase::Done => j,
        Some(j) if j.phase != Phase::RolledBack => {
            run(js, j.plan, &opts1, sink, shutdown.clone()).await?
        }
        _ if hop2.is_some() => {
            return Err(Error::Journal(format!(
                "hop 2 of the in-place migration of {a} exists without hop 1 ({}): forget it first",
                migration_id(&via, &a)
            )))
        }
        _ => {
            let p1 = plan_in_place(js, req).await?;
            refuse_unsafe(&p1, 1)?;
            run(js, p1, &opts1, sink, shutdown.clone()).await?
        }
    };
    let j2 = match hop2 {
        Some(j) if j.phase == Phase::Done => j,
        Some(j) if j.phase != Phase::RolledBack => {
            run(&target, j.plan, &opts, sink, shutdown).await?
        }
        _ => {
            // The temporary stream holds the new settings: hop 2 copies them.
            let then = j1.plan.in_place_then.clone();
            let second = (!then.is_empty()).then_some(then);
            let mut p2 =
                prepare_plan(&target, &req.hop(&via, &a, second, InPlaceHop::Back)).await?;
            p2.keeps_name_across = across;
            refuse_unsafe(&p2, 2).map_err(|e| {
                Error::Stuck(format!(
                    "{e}; hop 1 is done: {a} now lives as {via}, serving publishers and consumers; fix the cause and run the same command again"
                ))
            })?;
            run(&target, p2, &opts, sink, shutdown).await?
        }
    };
    Ok((j1, j2))
}

/// A change under way is resumed with the settings it was started with: a
/// request for other settings is refused, not silently given the old ones.
fn same_settings(req: &InPlaceRequest, hop1: &Plan) -> Result<()> {
    let planned = |k: &str| {
        hop1.in_place_then
            .get(k)
            .or_else(|| hop1.b_config.get(k))
            .or_else(|| hop1.promote_with.get(k))
    };
    let differ: Vec<String> = req
        .settings
        .iter()
        .flatten()
        .filter(|(k, v)| planned(k) != Some(*v))
        .map(|(k, v)| format!("{k}={v} (under way: {})", planned(k).unwrap_or(&Value::Null)))
        .collect();
    if differ.is_empty() {
        return Ok(());
    }
    Err(Error::Unsafe(format!(
        "an in-place change of {} with other settings is under way ({}): finish it by running its own command again, or undo it with `nats-cutover rollback {}` before its commit point, then ask for the new settings",
        req.stream,
        differ.join(", "),
        hop1.from.clone() + "." + &hop1.to
    )))
}

fn refuse_unsafe(p: &Plan, hop: u8) -> Result<()> {
    if p.safe {
        return Ok(());
    }
    Err(Error::Unsafe(format!("the plan of hop {hop} is unsafe: {}", p.unsafe_reasons())))
}
