//! Re-checks at the moment of effect: what `plan` read once and the world
//! (applications, the server) may have changed since, read again right
//! before the step that relies on it. A change is carried (a durable that
//! appeared is moved too) or stops the run before the step, with everything
//! served; after the commit, it is named (the run's warning, the journal,
//! `verify`).

use crate::engine::ctx::Ctx;
use crate::engine::events::{EventKind, Info, Progress, Warning};
use crate::error::{Error, Result};
use crate::journal::now_ms;
use cutover_core::journal::{ConsumerPhase, ConsumerProgress, Phase, Step};
use cutover_core::plan::{appeared_consumer, ConsumerPlan, Mode};
use serde_json::json;
use serde_json::Value;
use std::time::Duration;

/// The durables on `stream` the journal does not know (ephemeral consumers
/// are their owners' business, as in `plan`), with their infos.
pub(in crate::engine) async fn unplanned_durables(
    ctx: &Ctx<'_>,
    stream: &str,
) -> Result<Vec<(String, Value)>> {
    let known: Vec<String> =
        ctx.journal.lock().await.consumers.iter().map(|c| c.name.clone()).collect();
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    ctx.js.unknown_durables(stream, &known).await
}

/// Before the commit: durables an application created on A while the run
/// moved the others would be left on A, which takes nothing new once it
/// is sealed (a newcomer's app received none of the 3,412 messages
/// published after the commit, and `verify` said it held; in place, A was
/// deleted with it). In drain mode each is planned against the same B and
/// added to the journal as waiting, the phase set back so that the
/// consumer step moves it (in one save: a resumed run moves it too);
/// returns how many. In fence mode (their instances never registered for a
/// fence), or when one cannot move, the run stops here, before anything
/// is released.
pub(in crate::engine) async fn carry_appeared(ctx: &Ctx<'_>) -> Result<usize> {
    let (from, mode, id) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.plan.mode, j.id.clone())
    };
    let appeared = unplanned_durables(ctx, &from).await?;
    if appeared.is_empty() {
        return Ok(0);
    }
    let names: Vec<String> = appeared.iter().map(|(n, _)| n.clone()).collect();
    let stop = |why: String| {
        Error::Unsafe(format!(
            "durable(s) {} appeared on {from} after the plan (created by an application while this run moved the others): {why}; nothing was released: {from} still serves the publishers; delete them if they are not needed and run `nats-cutover run --resume {id}`, or undo with `nats-cutover rollback {id}` and plan again",
            names.join(", ")
        ))
    };
    if mode != Mode::Drain {
        return Err(stop(format!("mode {} hands over only consumers whose instances registered for it, so they would stay on {from} and receive nothing after the commit", mode.as_str())));
    }
    let mut planned = vec![];
    {
        let j = ctx.journal.lock().await;
        for (name, raw) in &appeared {
            let plan = appeared_consumer(&j.plan, raw)
                .map_err(|why| stop(format!("{name} cannot move: {why}")))?;
            let paused = raw["paused"].as_bool() == Some(true);
            let until = raw["config"]["pause_until"].as_str().map(String::from);
            planned
                .push((plan, paused.then(|| until.unwrap_or(crate::engine::ctx::FOREVER.into()))));
        }
    }
    {
        let mut j = ctx.journal.lock().await;
        for ((cp, findings), paused) in planned {
            j.consumers.push(ConsumerProgress::waiting(&cp.name, paused));
            j.plan.findings.extend(findings);
            j.plan.consumers.push(cp);
        }
        if j.phase >= Phase::ConsumersMoved {
            j.phase = Phase::CaughtUp;
        }
    }
    ctx.save().await?;
    ctx.emit(Step::MoveConsumers, EventKind::Info(Info::Appeared { consumers: names.clone() }));
    Ok(names.len())
}

/// Right before a moved durable's new one is created (the old one held, its
/// checkpoint taken): its configuration on A as it is now, planned again
/// against the same B (`plan::appeared_consumer`, the plan's own rules).
/// An application or operator may have updated it since the plan (its
/// filters, ack_wait, max_ack_pending...): the new durable is made from it
/// as it is (journaled in the plan, named by an event), and one the plan's
/// rules now refuse stops this consumer's move, given back, with the
/// reason. The translation uses the filters as they are now, which are the
/// ones the checkpoint was taken under. A resumed move past its intent to
/// create (`creating`: the new durable may exist, made from the plan as
/// journaled) is not planned again. The changed plan is kept in the
/// journal held in memory and saved with the step's end, not here: a whole
/// save beside the other consumers' concurrent record writes could write
/// their records from a stale copy.
pub(in crate::engine) async fn consumer_as_planned(
    ctx: &Ctx<'_>,
    cp: &ConsumerPlan,
    from: &str,
    prior: &ConsumerProgress,
) -> Result<ConsumerPlan> {
    if prior.phase >= cutover_core::journal::ConsumerPhase::Creating {
        return Ok(cp.clone());
    }
    let Some((raw, _)) = ctx.js.consumer_info_opt(from, &cp.name).await? else {
        return Ok(cp.clone());
    };
    let (replanned, id) = {
        let j = ctx.journal.lock().await;
        (appeared_consumer(&j.plan, &raw), j.id.clone())
    };
    let now = match replanned {
        Ok((now, _)) => now,
        Err(why) => {
            return Err(Error::Unsafe(format!(
                "consumer {from}/{} was changed after the plan and cannot move as it is now: {why}; it was given back as it was, nothing of it moved; change it back, then `nats-cutover run --resume {id}`, or undo with `nats-cutover rollback {id}` and plan again",
                cp.name
            )))
        }
    };
    // The server's own metadata (`_nats.*`: the API level and version it
    // writes on each create or update) is not a change of the operator's.
    let keys = |v: &Value| {
        let mut c = v.as_object().cloned().unwrap_or_default();
        if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
            m.retain(|k, _| !k.starts_with("_nats."));
            if m.is_empty() {
                c.remove("metadata");
            }
        }
        c
    };
    let (was, is) = (keys(&cp.b_config), keys(&now.b_config));
    if was == is && now.b_filters == cp.b_filters {
        return Ok(cp.clone());
    }
    let mut changed: Vec<String> =
        was.keys().chain(is.keys()).filter(|k| was.get(*k) != is.get(*k)).cloned().collect();
    changed.sort();
    changed.dedup();
    {
        let mut j = ctx.journal.lock().await;
        if let Some(p) = j.plan.consumers.iter_mut().find(|p| p.name == cp.name) {
            *p = now.clone();
        }
    }
    let info = Info::ConsumerChanged { consumer: cp.name.clone(), changed };
    ctx.emit(Step::Consumer(cp.name.clone()), EventKind::Info(info));
    Ok(now)
}

/// Right before a durable's move first touches it (its drain's or fence's
/// pause): whether it was paused on A after the plan, by an operator or an
/// application. The run's own pauses would take its place and its new
/// durable would deliver at once: the pause the operator asked for was
/// lost. Kept instead, journaled as the plan's were (`was_paused`,
/// `paused_until`): the new durable is made paused until the same time,
/// and a move given back pauses the old one again (`undo_consumer`). Only
/// on the move's first attempt: a resumed one cannot tell a pause of an
/// earlier runner's (left by a runner killed with its guard) from one of
/// the operator's, and takes none.
pub(in crate::engine) async fn operator_pause(
    ctx: &Ctx<'_>,
    from: &str,
    prior: ConsumerProgress,
) -> Result<ConsumerProgress> {
    let first_attempt = {
        let j = ctx.journal.lock().await;
        j.steps.iter().filter(|s| s.step == Step::MoveConsumers).count() <= 1
    };
    if prior.phase != ConsumerPhase::Waiting || prior.was_paused || !first_attempt {
        return Ok(prior);
    }
    let Some((raw, ci)) = ctx.js.consumer_info_opt(from, &prior.name).await? else {
        return Ok(prior);
    };
    if !ci.paused {
        return Ok(prior);
    }
    let until = raw["config"]["pause_until"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| crate::engine::ctx::FOREVER.into());
    let u = until.clone();
    ctx.journal_consumer(&prior.name, |p| {
        p.was_paused = true;
        p.paused_until = Some(u);
    })
    .await?;
    let info = Info::OperatorPaused { consumer: prior.name.clone(), until: until.clone() };
    ctx.emit(Step::Consumer(prior.name.clone()), EventKind::Info(info));
    Ok(ConsumerProgress { was_paused: true, paused_until: Some(until), ..prior })
}

/// Right before A releases its subjects: the last look for durables that
/// appeared (the consumer step moved every one it found). One found here
/// stops the run before anything is released; `run --resume` moves it.
pub(in crate::engine) async fn none_appeared(ctx: &Ctx<'_>) -> Result<()> {
    let (from, id) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.id.clone())
    };
    let appeared = unplanned_durables(ctx, &from).await?;
    if appeared.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = appeared.iter().map(|(n, _)| n.as_str()).collect();
    Err(Error::Stuck(format!(
        "durable(s) {} appeared on {from} just before the commit (created by an application meanwhile); nothing was released: {from} still serves the publishers; `nats-cutover run --resume {id}` moves them too",
        names.join(", ")
    )))
}

/// B gone before the commit while A is there: a memory copy (an in-place
/// hop's new stream with storage memory, or any memory B) lost in a server
/// restart, which the resume met as "stream does not exist ... (or create
/// it)" (a newcomer's trial). B held copies only: it is made again and
/// copies again, and each durable moved to it (its new durable went with
/// B) moves again from its journaled checkpoint (its old durable, paused
/// for good at F, is kept until the retire; `checkpoint_holds` checks it
/// delivered nothing since). Journaled first. Fence mode past a durable's
/// handoff is refused: its route sends instances to the lost durable.
pub(in crate::engine) async fn b_lost(ctx: &Ctx<'_>) -> Result<()> {
    let (to, id, handed_off) = {
        let j = ctx.journal.lock().await;
        let handed_off = j.plan.mode != Mode::Drain
            && j.consumers.iter().any(|c| c.phase >= ConsumerPhase::Creating);
        (j.to.clone(), j.id.clone(), handed_off)
    };
    if handed_off {
        return Err(Error::Unsafe(format!(
            "{to} is gone (a memory stream does not survive a server restart) with the new durables of a fence handoff, whose route sends their instances there; the old durables are kept, paused: `nats-cutover rollback {id}` gives them back, then plan again"
        )));
    }
    {
        let mut j = ctx.journal.lock().await;
        j.phase = Phase::Planned;
        j.handover = None;
        j.window_since_ms = None;
        j.a_final_seq = None;
        for c in j.consumers.iter_mut().filter(|c| c.phase >= ConsumerPhase::Creating) {
            c.phase = match c.checkpoint {
                Some(_) => ConsumerPhase::Settled,
                None => ConsumerPhase::Waiting,
            };
            c.b_start = None;
        }
    }
    ctx.save().await?;
    let what = format!("{to} was gone before the commit (a memory stream lost in a server restart): it held copies only, so it is made again and copies again, and the durables moved to it move again from their checkpoints");
    ctx.emit(Step::CreateB, EventKind::Warning(Warning::Skipped { what }));
    Ok(())
}

/// Right before A releases its subjects: settings of A the server updates
/// in place that B took as A had them at the plan (`plan::CARRIED`), and A
/// has changed since (an operator's update: a newcomer's `deny_purge` set
/// on the temporary stream mid-run was lost with it), are carried to B: one
/// B gets at its promotion is changed there (the journal's plan), the
/// others by an update of B now. One B refuses stops the run here, nothing
/// released, naming it.
pub(in crate::engine) async fn settings_carried(ctx: &Ctx<'_>, from: &str, to: &str) -> Result<()> {
    let (carried, id) = {
        let j = ctx.journal.lock().await;
        (j.plan.carried.clone(), j.id.clone())
    };
    if carried.is_empty() {
        return Ok(());
    }
    let (a_raw, _) = ctx.js.stream_info(from).await?;
    let changes = cutover_core::plan::carried_changes(&carried, &a_raw["config"]);
    if changes.is_empty() {
        return Ok(());
    }
    let (b_raw, _) = ctx.js.stream_info(to).await?;
    let mut cfg = b_raw["config"].clone();
    let mut update = false;
    {
        let mut j = ctx.journal.lock().await;
        for (k, _, now) in &changes {
            if j.plan.promote_with.contains_key(k) {
                j.plan.promote_with.insert(k.clone(), now.clone());
            } else if cfg.get(k) != Some(now) {
                if let Some(c) = cfg.as_object_mut() {
                    match now {
                        Value::Null => c.remove(k),
                        v => c.insert(k.clone(), v.clone()),
                    };
                }
                update = true;
            }
        }
    }
    if update {
        if let Err(e) = ctx.js.stream_update(&cfg).await {
            let names: Vec<String> =
                changes.iter().map(|(k, then, now)| format!("{k} ({then} -> {now})")).collect();
            return Err(Error::Unsafe(format!(
                "{from}'s settings changed after the plan ({}) and {to} cannot take them ({e}); nothing was released: {from} still serves the publishers; set them back on {from} and run `nats-cutover run --resume {id}`, or undo with `nats-cutover rollback {id}` and plan again",
                names.join(", ")
            )));
        }
    }
    {
        let mut j = ctx.journal.lock().await;
        for (k, _, now) in &changes {
            j.plan.carried.insert(k.clone(), now.clone());
        }
    }
    ctx.save().await?;
    let info = Info::SettingsCarried { settings: changes };
    ctx.emit(Step::MovePublishers, EventKind::Info(info));
    Ok(())
}

/// After the commit (A sealed, before its durables are retired): durables
/// that appeared on A since are named (the run's warning, the journal's
/// `stranded`, `verify`). A that is to be deleted (in place, or
/// `--delete-old`) is kept while any is there: deleting it would delete
/// them with their positions.
pub(in crate::engine) async fn stranded(ctx: &Ctx<'_>, from: &str) -> Result<()> {
    let found: Vec<String> =
        unplanned_durables(ctx, from).await?.into_iter().map(|(n, _)| n).collect();
    let (delete_old, id) = {
        let mut j = ctx.journal.lock().await;
        j.stranded = found.clone();
        (j.delete_old, j.id.clone())
    };
    if found.is_empty() {
        return Ok(());
    }
    let w = Warning::Stranded { stream: from.into(), durables: found.clone() };
    ctx.emit(Step::Retire, EventKind::Warning(w));
    if delete_old {
        ctx.save().await?;
        return Err(Error::Stuck(format!(
            "durable(s) {} appeared on {from} after the commit (created by an application meanwhile) and {from} is to be deleted, which would delete them with their positions: {from} is kept, sealed; bind their applications to the new stream and delete them, then run `nats-cutover run --resume {id}`",
            found.join(", ")
        )));
    }
    Ok(())
}

/// Right before A releases its subjects: B's duplicate window still covers
/// the publishers' retry horizon. Catch-up checked it, but a server that
/// restarts clears a mirror's window when it recovers its streams
/// (jetstream.go `fixCfgMirrorWithDedupWindow`, standalone too) and does
/// not rebuild the msg-id map: a newcomer's restart after catch-up stored
/// 26 to 38 retried publishes twice, and the run ended 0. The window is set
/// again where the server keeps it; B records msg-ids only from then on, so
/// the commit waits until a whole retry horizon has passed since (the time
/// journaled, a resumed run waits what is left). Where the server does not
/// keep it (a clustered server never keeps a mirror's), the run stops here,
/// before anything is released.
pub(in crate::engine) async fn window_holds(ctx: &Ctx<'_>, to: &str) -> Result<()> {
    let (wanted, planned, id) = {
        let j = ctx.journal.lock().await;
        let wanted = j.plan.retry_horizon_ms as i64 * 1_000_000;
        let planned = j.plan.b_config["duplicate_window"].as_i64().filter(|w| *w >= wanted);
        (wanted, planned.unwrap_or(wanted), j.id.clone())
    };
    loop {
        let (raw, b) = ctx.js.stream_info(to).await?;
        if b.config.duplicate_window < wanted {
            // Intent first: a runner killed after the update but before
            // this write would find the window there and commit at once.
            ctx.journal.lock().await.window_since_ms = Some(now_ms());
            ctx.save().await?;
            let mut cfg = raw["config"].clone();
            cfg["duplicate_window"] = json!(planned);
            ctx.js.stream_update(&cfg).await?;
            let kept = ctx.js.stream_info(to).await?.1.config.duplicate_window >= wanted;
            if !kept {
                return Err(Error::Unsafe(format!(
                    "{to}'s duplicate window is {} ns, less than the publishers' retry horizon {wanted} ns, and the server does not keep one set on it (a mirror on a clustered server, or after a restart): publishes retried across the commit could be stored twice; nothing was released: the publishers are served as before; undo with `nats-cutover rollback {id}`",
                    b.config.duplicate_window
                )));
            }
            // From the update on: ids are recorded once the window is set.
            ctx.journal.lock().await.window_since_ms = Some(now_ms());
            ctx.save().await?;
        }
        let Some(since) = ctx.journal.lock().await.window_since_ms else { return Ok(()) };
        // A second more than the horizon: a runner killed between the
        // update and its second write left the intent's time, taken before
        // the update took effect.
        let horizon = wanted as u64 / 1_000_000 + 1_000;
        let waited = now_ms().saturating_sub(since);
        if waited >= horizon {
            return Ok(());
        }
        let remaining_ms = horizon - waited;
        let p = Progress::WindowRestored { duplicate_window_ns: wanted, remaining_ms };
        ctx.emit(Step::MovePublishers, EventKind::Progress(p));
        // Ctrl-C is honoured (nothing is released yet); the window is read
        // again after the wait, in case the server cleared it meanwhile.
        let until = std::time::Instant::now() + Duration::from_millis(remaining_ms.min(1_000));
        while std::time::Instant::now() < until {
            ctx.tick(true).await?;
            tokio::time::sleep(ctx.opts.poll.max(Duration::from_millis(10))).await;
        }
    }
}

/// Whether `to` lacks messages `from` holds, where it should hold them all:
/// planned (`planned`: the plan's configuration of it) a limits stream with
/// no limit that drops messages (then a drop is no
/// part of the change asked for; with one, B and a sealed A drop on their
/// own schedules). A copy with A's sequences (a mirror, an in-place hop:
/// `same_seqs`) lacks them when it starts past A's first; once it holds
/// A's tail (`caught_up`: after the commit), any copy when it holds fewer
/// (before, fewer is only a copy still copying). Says how, or `None`.
async fn lacks(
    js: &crate::api::Js,
    from: &str,
    to: &str,
    (same_seqs, caught_up): (bool, bool),
    planned: &Value,
) -> Result<Option<String>> {
    let (Some((_, a)), Some((_, b))) =
        (js.stream_info_opt(from).await?, js.stream_info_opt(to).await?)
    else {
        return Ok(None);
    };
    let bc = planned;
    if bc["retention"].as_str().unwrap_or("limits") != "limits" || a.state.messages == 0 {
        return Ok(None);
    }
    let unlimited = |k: &str, none: i64| bc[k].as_i64().unwrap_or(none) == none;
    let keeps = unlimited("max_msgs", -1)
        && unlimited("max_bytes", -1)
        && unlimited("max_msgs_per_subject", -1)
        && unlimited("max_age", 0);
    if !keeps {
        return Ok(None);
    }
    let same_seqs = same_seqs || b.config.mirror.as_ref().is_some_and(|m| m.name == from);
    let (mirror_short, fewer) = (
        same_seqs && b.state.messages > 0 && b.state.first_seq > a.state.first_seq,
        caught_up && b.state.messages < a.state.messages,
    );
    Ok((mirror_short || fewer).then(|| {
        format!(
            "{to} holds {} message(s) from sequence {}, {from} {} from {}",
            b.state.messages, b.state.first_seq, a.state.messages, a.state.first_seq
        )
    }))
}

/// Right before the old stream is deleted (in place, `--delete-old`): the
/// new one holds every message it holds, where its limits should keep them
/// all. A copy that dropped some while a limit was lowered during the run
/// (set back since: a newcomer's resume deleted the old stream with 79,205
/// of its 80,205 messages the only copy) stops the run here, the old
/// stream kept, sealed.
pub(in crate::engine) async fn b_holds_all_of_a(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    same_seqs: bool,
) -> Result<()> {
    let planned = ctx.journal.lock().await.plan.b_config.clone();
    let Some(d) = lacks(ctx.js, from, to, (same_seqs, true), &planned).await? else {
        return Ok(());
    };
    let id = ctx.id.clone();
    Err(Error::Stuck(format!(
        "{d}: the copy lacks messages its limits would keep (it dropped them while a limit was lowered during the run), so {from} is not deleted: it is kept, sealed, and still holds them; to keep the copy as it is, delete {from} yourself (nats stream rm {from}) and run `nats-cutover run --resume {id}`"
    )))
}

/// B's limits that differ from the plan's (`B_LIMITS`), if any, and the way
/// on: set them back and resume, or, where B already dropped messages A
/// holds, the rollback (what it dropped stays dropped once the limits are
/// set back: a newcomer who did so and resumed lost 80,205 messages to
/// 1,000 with the old stream deleted at the end of the hop).
pub(in crate::engine) async fn limits_changed(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
) -> Result<Option<(String, String)>> {
    let (planned, id) = {
        let j = ctx.journal.lock().await;
        (j.plan.b_config.clone(), j.id.clone())
    };
    let (raw, _) = ctx.js.stream_info(to).await?;
    let changed: Vec<String> = B_LIMITS
        .iter()
        .filter_map(|k| {
            let (want, now) = (planned.get(*k)?, &raw["config"][*k]);
            (!want.is_null() && want != now).then(|| format!("{k} {now} (planned {want})"))
        })
        .collect();
    if changed.is_empty() {
        return Ok(None);
    }
    let way = match lacks(ctx.js, from, to, (false, false), &planned).await? {
        Some(d) => format!("and it already dropped messages {from} holds ({d}), which setting them back cannot bring back: undo with `nats-cutover rollback {id}` (it deletes {to}; {from} keeps every message) and run again"),
        None => format!("set them back (nats stream edit {to}) and run `nats-cutover run --resume {id}`, or undo with `nats-cutover rollback {id}`"),
    };
    Ok(Some((changed.join(", "), way)))
}

/// The limits of B that decide which messages it keeps: compared with the
/// plan's right before a durable is made on B.
const B_LIMITS: [&str; 7] = [
    "max_msgs",
    "max_bytes",
    "max_age",
    "max_msgs_per_subject",
    "max_msg_size",
    "discard",
    "discard_new_per_subject",
];

/// Right before a new durable is made on `to` at `start`: B still has the
/// limits the plan gave it, and still holds every message from `start` on.
/// `plan` checked B's limits against what A held then; A keeps growing (a
/// B whose `max_msgs` fit A's 10 messages dropped the oldest of the 20 A
/// held by the move, and the durable would have started past messages it
/// never delivered), and someone may update B meanwhile. Either stops the
/// move of this consumer (the caller gives it back) with the reason.
pub(in crate::engine) async fn b_holds_from(
    ctx: &Ctx<'_>,
    (from, to): (&str, &str),
    start: u64,
) -> Result<()> {
    let id = ctx.id.clone();
    let (raw, b) = ctx.js.stream_info(to).await?;
    if let Some((changed, way)) = limits_changed(ctx, from, to).await? {
        return Err(Error::Unsafe(format!(
            "{to}'s limits were changed after the plan ({changed}): they decide which messages it keeps, so the durables do not move onto it; the consumer was given back; {way}"
        )));
    }
    // Dropping the oldest: at its message or byte limit, or with an age
    // limit (a first past the start is then a message B no longer has; else
    // it comes from this run's own purge, or nothing was there).
    let (c, st) = (&raw["config"], &raw["state"]);
    let limit = |k: &str| c[k].as_i64().filter(|v| *v > 0);
    let full = limit("max_msgs").is_some_and(|m| st["messages"].as_i64().unwrap_or(0) >= m)
        || limit("max_bytes").is_some_and(|m| st["bytes"].as_i64().unwrap_or(0) >= m / 10 * 9)
        || limit("max_age").is_some();
    // A mirror, with A's sequences (a source's drops are found by the
    // translation, from the origins); what A no longer holds either
    // (expired there by the same max_age) is not the move's to lose.
    let mirror = b.config.mirror.as_ref().is_some_and(|m| m.name == from);
    let a_first = match ctx.js.stream_info_opt(from).await {
        Ok(Some((_, a))) if mirror => a.state.first_seq,
        _ => u64::MAX,
    };
    if full && b.state.messages > 0 && b.state.first_seq > start.max(a_first) {
        return Err(Error::Unsafe(format!(
            "{to} no longer holds the messages from {start} on that the durable must deliver (its first is {}: its limits dropped the oldest while the stream grew since the plan); moved, the durable would skip them; the consumer was given back, nothing of it moved; undo with `nats-cutover rollback {id}` and plan again with limits that hold the stream",
            b.state.first_seq
        )));
    }
    Ok(())
}
