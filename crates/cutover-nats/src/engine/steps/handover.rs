//! Step `handover` (strategy mirror, and so in place, where the server drops
//! a mirror's duplicate window: a clustered JetStream; `Plan::handover`).
//!
//! A clustered server builds every stream from its decoded assignment and
//! clears the window of any mirror there (nats-server jetstream_cluster.go
//! `decodeStreamAssignmentConfig` → jetstream.go
//! `fixCfgMirrorWithDedupWindow`), and a mirror checks no msg-ids anyway
//! (stream.go `processJetStreamMsg`: `canConsistencyCheck && !isMirror`): a
//! publish retried across the commit whose first try A stored would be
//! stored twice. A sourcing stream keeps an explicit window on a cluster,
//! through leader changes (every replica records the ids it applies) and
//! restarts (`rebuildDedupe` from storage). So once B mirrored A up to date
//! and the consumers moved (at A's sequences), B becomes a stream sourcing A
//! with the window, and the commit waits one retry horizon after that.
//!
//! The change is made frozen, A's subjects released: a source stores each
//! message at B's next sequence and does not fill gaps as a mirror does
//! (`skipMsgs`), so a message A stored or removed between the mirror's stop
//! and the source's first read would shift every later sequence of B. In
//! the freeze: B holds exactly A's last message (X - 1), one update turns B
//! into a stream sourcing A from X with the window (2.12+: stream.go
//! `configUpdateCheck` allows removing the mirror, `updateWithAdvisory`
//! stops the mirror consumer and sets up the source), the source is set up
//! (`sources[].active` is -1 until `trySetupSourceConsumer` made its
//! consumer), and A takes its subjects back. Measured beforehand: a freeze of
//! 157-262 ms, 12 of 12 runs exact on 2.12.8, 2.14.6 and 2.15.1, R1 and R3.
//!
//! What the freeze cannot prevent: a source consumer recreated later (a B
//! leader change, a restart) starts after the last message B sourced, and a
//! message A removed meanwhile (a per-subject limit, a work queue before
//! 2.14) shifts B. A shift only ever moves sequences down, so the commit
//! checks the first and the last message B sourced: each must carry its own
//! sequence as origin ([`tail_exact`]); if not, the commit is refused.
//!
//! **Live, without a freeze**, where A removes no message that new
//! (`plan::handover_freeze_reason`: a limits stream without a per-subject
//! limit, roll-ups or per-message TTLs, and no limit that turns it over in
//! seconds): the freeze held every publisher for as long as B's update
//! took, and the server scans all of B's messages when a source is added
//! to it (stream.go `setStartingSequenceForSources` → `LoadPrevMsgMulti`,
//! looking for a `Nats-Stream-Source` header a promoted mirror has none
//! of): 2.45-2.75 s with 140,000-220,000 messages on R3. Live, one update
//! removes B's mirror (A serves on), B's last X - 1 is read once it holds
//! still (a mirror message proposed before the update may still be
//! applied: `processInboundMirrorMsg` proposes after releasing its lock),
//! and a second update makes B source A from X: every message A stores
//! from X on is still there when B's source reads it, so B's sequences
//! stay A's. B's consumers get nothing new meanwhile; publishers never
//! wait ([`hand_over_live`]).

use super::subjects::{give_subjects_back, released_subjects, same_last};
use crate::api::{Lookup, Via};
use crate::engine::ctx::{Ctx, Exposure};
use crate::engine::events::StepResult;
use crate::error::{Error, Result};
use crate::journal::now_ms;
use cutover_core::journal::{Handover, Phase, Step};
use cutover_core::model::StreamInfo;
use cutover_core::plan::HANDOVER_KEY;
use serde_json::json;
use std::time::{Duration, Instant};

/// The hand-over, or what is left of it (a resumed run, or one after the
/// guard gave A its subjects back).
pub(in crate::engine) async fn hand_over(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, final_subjects, id) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone(), j.plan.b_final_subjects.clone(), j.id.clone())
    };
    let t = ctx.begin(Step::Handover).await?;
    if live(ctx, &from, &to).await? {
        // Nothing of A's changes here: it serves the publishers whatever fails.
        let x = hand_over_live(ctx, &from, &to).await.map_err(|e| match e {
            Error::Unsafe(m) => Error::Unsafe(format!("{m}; {from} kept its subjects and serves the publishers: undo with `nats-cutover rollback {id}`")),
            Error::Stuck(m) => Error::Stuck(format!(
                "the hand-over of {to} from mirroring to sourcing {from} did not complete ({m}); {from} kept its subjects and serves the publishers; run again to retry it (`nats-cutover run --resume {id}`), or undo with `nats-cutover rollback {id}`"
            )),
            e => e,
        })?;
        return ctx
            .done(Step::Handover, t, None, StepResult::HandedOver { x, freeze_ms: 0.0 })
            .await;
    }
    // Intent before effect: a runner that dies in the freeze leaves the
    // phase a guard and a resume reconcile (A gets its subjects back).
    {
        let mut j = ctx.journal.lock().await;
        j.handover.get_or_insert_with(Default::default);
        j.phase = Phase::SubjectsReleased;
    }
    ctx.save().await?;
    ctx.exposed(Exposure::Commit, true);
    let released = Instant::now();
    // The freeze is a commit window too (A's subjects released): its
    // publishes are answered as the commit's (`crate::engine::bridge`).
    let bridge = crate::engine::bridge::open_for(ctx).await?;
    let frozen = freeze(ctx, &from, &to, &final_subjects, bridge.as_ref()).await;
    if let Some(b) = &bridge {
        b.taking();
    }
    let back = give_subjects_back(ctx, &from, &to, &final_subjects).await;
    if let Some(b) = bridge {
        crate::engine::bridge::close(ctx, b).await;
    }
    let freeze_ms = released.elapsed().as_secs_f64() * 1000.0;
    let now = now_ms();
    {
        let mut j = ctx.journal.lock().await;
        if back.is_ok() {
            j.phase = Phase::ConsumersMoved;
        }
        if let (Ok(_), Ok(_), Some(h)) = (&frozen, &back, j.handover.as_mut()) {
            h.done_ms = Some(now);
            // The retry horizon counts from here (recheck::window_holds).
            j.window_since_ms = Some(now);
        }
    }
    ctx.save().await?;
    ctx.exposed(Exposure::Commit, false);
    let x = match (frozen, back) {
        (Ok(x), Ok(_)) => x,
        (Err(e), Ok(_)) => return Err(Error::Stuck(format!(
            "the hand-over of {to} from mirroring to sourcing {from} did not complete ({e}); {from} holds its subjects again and serves the publishers; run again to retry it (`nats-cutover run --resume {id}`), or undo with `nats-cutover rollback {id}`"
        ))),
        (_, Err(e2)) => return Err(Error::Stuck(format!(
            "giving {from} its subjects back after the hand-over of {to} failed ({e2}): publishers may have no stream; run `nats-cutover run --resume {id}` now"
        ))),
    };
    ctx.done(Step::Handover, t, None, StepResult::HandedOver { x, freeze_ms }).await
}

/// Whether this hand-over is made live: as journaled once begun (a live
/// one past B's mirror cannot go back to a freeze, nor a freeze begun to
/// live), else as A is now (its settings may have changed since the plan:
/// `recheck::settings_carried`). Journaled here, before any write.
async fn live(ctx: &Ctx<'_>, from: &str, to: &str) -> Result<bool> {
    {
        let j = ctx.journal.lock().await;
        if let Some(h) = j.handover {
            return Ok(h.live);
        }
        if j.plan.external.is_some() {
            return Ok(false); // across systems: not tried live yet
        }
    }
    let (a_raw, _) = ctx.js.stream_info(from).await?;
    let live = cutover_core::plan::handover_freeze_reason(&a_raw["config"]).is_none()
        && !crate::test_hooks::force_handover_freeze();
    if live {
        let (_, b) = ctx.js.stream_info(to).await?;
        if b.config.mirror.as_ref().map(|m| m.name.as_str()) != Some(from) {
            return Ok(false); // the freeze's path names what B is
        }
    }
    ctx.journal.lock().await.handover = Some(Handover { live, ..Default::default() });
    ctx.save().await?;
    Ok(live)
}

/// The live hand-over (see the module's text), or what is left of it.
/// Returns X. A keeps its subjects throughout.
async fn hand_over_live(ctx: &Ctx<'_>, from: &str, to: &str) -> Result<u64> {
    let (b_raw, b) = ctx.js.stream_info(to).await?;
    let x = match sourcing_from(&b, from) {
        Some(x) => until_active(ctx, from, to, x).await?, // a resumed hand-over
        None => promote_then_source(ctx, from, to, (b_raw, b)).await?,
    };
    if let Some(h) = ctx.journal.lock().await.handover.as_mut() {
        h.done_ms = Some(now_ms());
    }
    ctx.save().await?;
    Ok(x)
}

/// The live hand-over's two updates of B: its mirror removed, then its
/// source of A from its next sequence.
async fn promote_then_source(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    (b_raw, b): (serde_json::Value, StreamInfo),
) -> Result<u64> {
    let (_, window) = windows(ctx).await;
    let mirrors = b.config.mirror.as_ref().map(|m| m.name.as_str());
    let external = match mirrors {
        Some(m) if m == from => {
            let mut cfg = b_raw["config"].clone();
            let mirror = cfg.as_object_mut().and_then(|c| c.remove("mirror")).unwrap_or_default();
            cfg["duplicate_window"] = json!(window);
            ctx.js.stream_update(&cfg).await?;
            if let Some(h) = &ctx.opts.after_step {
                h("handover_promoted");
            }
            mirror.get("external").filter(|e| !e.is_null()).cloned()
        }
        None if b.config.sources.is_empty() => None, // resumed: its mirror removed
        _ => return Err(Error::Unsafe(format!("{to} neither mirrors nor sources {from}"))),
    };
    let last = settled_last(ctx, to).await?;
    // From here B's window records the id of every message A stores (all
    // sourced from X): the commit waits one retry horizon after it. Again
    // on a resumed pass: later is only more careful. (Not `done_ms`: that
    // says the step is done, `run::drive`.)
    ctx.journal.lock().await.window_since_ms = Some(now_ms());
    ctx.save().await?;
    let x = next_of_a(ctx, from, to, last).await?;
    if let Some(h) = ctx.journal.lock().await.handover.as_mut() {
        h.x = Some(x);
    }
    ctx.save().await?;
    let (b_raw, _) = ctx.js.stream_info(to).await?;
    source_from(ctx, (from, to), b_raw["config"].clone(), external, x).await
}

/// B's update `cfg` made a stream sourcing A from `x` with the window (and
/// the key that says so, `external`: across systems, the same way to A),
/// checked as taken, and its source set up. Returns X.
async fn source_from(
    ctx: &Ctx<'_>,
    (from, to): (&str, &str),
    mut cfg: serde_json::Value,
    external: Option<serde_json::Value>,
    x: u64,
) -> Result<u64> {
    let (wanted, window) = windows(ctx).await;
    let mut source = json!({ "name": from, "opt_start_seq": x });
    if let Some(ext) = external {
        source["external"] = ext;
    }
    cfg["sources"] = json!([source]);
    cfg["duplicate_window"] = json!(window);
    cfg["metadata"][HANDOVER_KEY] = json!(x.to_string());
    ctx.js.stream_update(&cfg).await?;
    let (_, b) = ctx.js.stream_info(to).await?;
    if sourcing_from(&b, from) != Some(x) || b.config.duplicate_window < wanted {
        return Err(Error::Unsafe(format!(
            "{to} did not take the hand-over as sent (now: mirror {:?}, sources {:?}, duplicate_window {} ns)",
            b.config.mirror.map(|m| m.name),
            b.config.sources.iter().map(|s| (&s.name, s.opt_start_seq)).collect::<Vec<_>>(),
            b.config.duplicate_window
        )));
    }
    until_active(ctx, from, to, x).await
}

/// The retry horizon in ns, and the window B gets: the plan's, if at least
/// that.
async fn windows(ctx: &Ctx<'_>) -> (i64, i64) {
    let j = ctx.journal.lock().await;
    let wanted = j.plan.retry_horizon_ms as i64 * 1_000_000;
    let window = j.plan.b_config["duplicate_window"].as_i64().filter(|w| *w >= wanted);
    (wanted, window.unwrap_or(wanted))
}

/// B's last sequence once its mirror is removed and it holds still: the
/// same in reads over 200 ms, its leader reporting no mirror.
async fn settled_last(ctx: &Ctx<'_>, to: &str) -> Result<u64> {
    let deadline = Instant::now() + ctx.opts.commit_timeout;
    let mut since: Option<(u64, Instant)> = None;
    loop {
        let (_, b) = ctx.js.stream_info(to).await?;
        let last = b.state.last_seq;
        match since {
            _ if b.config.mirror.is_some() => since = None,
            Some((l, t)) if l == last && t.elapsed() >= Duration::from_millis(200) => {
                return Ok(last)
            }
            Some((l, _)) if l == last => {}
            _ => since = Some((last, Instant::now())),
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!(
                "{to}'s last sequence did not hold still within the commit timeout of {:?} after its mirror was removed",
                ctx.opts.commit_timeout
            )));
        }
        ctx.tick(false).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first sequence B sources: the one after its last, where A still
/// holds it. A stream whose messages are all gone (purged, expired) has a
/// last sequence past them: an empty B is moved on to it as
/// `subjects::same_last` does (a mirror would have skipped the gap); a B
/// holding messages A removed since is not moved (that would delete them).
async fn next_of_a(ctx: &Ctx<'_>, from: &str, to: &str, last: u64) -> Result<u64> {
    let (_, a) = ctx.js.stream_info(from).await?;
    let first = match a.state.messages {
        0 => a.state.last_seq + 1,
        _ => a.state.first_seq,
    };
    if first <= last + 1 {
        return Ok(last + 1);
    }
    let (_, b) = ctx.js.stream_info(to).await?;
    if b.state.messages == 0 {
        ctx.js.stream_purge_below(to, None, first).await?;
        let (_, b) = ctx.js.stream_info(to).await?;
        if b.state.last_seq + 1 == first {
            return Ok(first);
        }
    }
    Err(Error::Unsafe(format!(
        "{to} ends at sequence {last} and {from} now starts at {first}: {from} removed the messages between after {to} copied it, and {to} cannot go on from {first} with the sequences kept"
    )))
}

/// In the freeze (A's subjects released): B holds exactly A's last message,
/// then sources A from the next one with the window. Returns X.
async fn freeze(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    final_subjects: &[String],
    bridge: Option<&crate::engine::bridge::Bridge>,
) -> Result<u64> {
    let (b_raw, b) = ctx.js.stream_info(to).await?;
    if let Some(x) = sourcing_from(&b, from) {
        return until_active(ctx, from, to, x).await; // a resumed hand-over
    }
    if b.config.mirror.as_ref().map(|m| m.name.as_str()) != Some(from) {
        return Err(Error::Unsafe(format!("{to} neither mirrors nor sources {from}")));
    }
    let (a_raw, a) = ctx.js.stream_info(from).await?;
    let release = released_subjects(from, final_subjects);
    if a.config.subjects != release {
        let mut cfg = a_raw["config"].clone();
        cfg["subjects"] = json!(release);
        ctx.js.stream_update(&cfg).await?;
    }
    if let Some(b) = bridge {
        b.released();
    }
    if let Some(h) = &ctx.opts.after_step {
        h("handover_released");
    }
    // A's last the same in two reads (a publish the server queued before
    // the release is stored after it: see commit.rs) and B's equal to it.
    let deadline = Instant::now() + ctx.opts.commit_timeout;
    let mut seen = None;
    let last = loop {
        // B first: a mirror never holds more than A, so B read before A
        // can only be behind or equal. Read the other way round, a publish
        // the server stored in A between the two reads, already mirrored,
        // made B look ahead (the apply benchmark, 200 assets on R3 at
        // --parallel 16: "holds sequence 1497, past S001's last 1496").
        let b_last = ctx.js.stream_info(to).await?.1.state.last_seq;
        let a_last = ctx.js.stream_info(from).await?.1.state.last_seq;
        if b_last > a_last {
            return Err(Error::Unsafe(format!(
                "{to} holds sequence {b_last}, past {from}'s last {a_last}: it is not {from}'s mirror"
            )));
        }
        if b_last == a_last && seen == Some(a_last) {
            break a_last;
        }
        if b_last < a_last && seen.is_none() {
            // An empty A with last N: B is moved on to N (subjects::same_last).
            let _ = same_last(ctx, from, to).await;
        }
        seen = (b_last == a_last).then_some(a_last);
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!(
                "{to} did not mirror {from} up to its last message {a_last} (it holds {b_last}) within the commit timeout of {:?}",
                ctx.opts.commit_timeout
            )));
        }
        ctx.tick(false).await?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    if let Some(b) = bridge {
        b.holder_settled();
    }
    let x = last + 1;
    if let Some(h) = ctx.journal.lock().await.handover.as_mut() {
        h.x = Some(x);
    }
    ctx.save().await?;
    let mut cfg = b_raw["config"].clone();
    let mirror = cfg.as_object_mut().and_then(|c| c.remove("mirror")).unwrap_or_default();
    let external = mirror.get("external").filter(|e| !e.is_null()).cloned();
    // (The paced copy's durable on A, steps::create, goes at retire or with
    // a rollback: not here, inside the freeze.)
    source_from(ctx, (from, to), cfg, external, x).await
}

/// X if B is the hand-over's stream sourcing `from` (its source from X, and
/// the key that says so).
fn sourcing_from(b: &StreamInfo, from: &str) -> Option<u64> {
    let key = b.config.metadata.as_ref()?.get(HANDOVER_KEY)?.as_str()?.parse().ok()?;
    let s = b.config.sources.iter().find(|s| s.name == from)?;
    (b.config.mirror.is_none() && s.opt_start_seq == Some(key)).then_some(key)
}

/// The source's consumer is set up (`active` is -1 until then).
async fn until_active(ctx: &Ctx<'_>, from: &str, to: &str, x: u64) -> Result<u64> {
    let deadline = Instant::now() + ctx.opts.commit_timeout;
    loop {
        let (_, b) = ctx.js.stream_info(to).await?;
        if b.sources.iter().any(|s| s.name == from && s.active >= 0) {
            return Ok(x);
        }
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!(
                "{to}'s source of {from} was not set up within the commit timeout of {:?}",
                ctx.opts.commit_timeout
            )));
        }
        ctx.tick(false).await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// At the commit, B caught up: every message B sourced from X carries its
/// own sequence as origin. Checked on the first one at or after X and on
/// the last (a shift only moves later sequences down, so it shows there).
pub(in crate::engine) async fn tail_exact(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    x: u64,
) -> Result<()> {
    let (_, b) = ctx.js.stream_info(to).await?;
    let (_, a) = ctx.js.stream_info(from).await?;
    if b.state.last_seq < x {
        // Nothing stored in A since the hand-over.
        return match a.state.last_seq < x {
            true => Ok(()),
            false => Err(shifted(from, to, x, b.state.last_seq, None)),
        };
    }
    sourced_aligned(ctx, from, to, x, b.state.last_seq).await?;
    if b.state.last_seq != a.state.last_seq {
        return Err(shifted(from, to, x, b.state.last_seq, Some(a.state.last_seq)));
    }
    Ok(())
}

/// Every message B sourced from X carries its own sequence as origin,
/// checked on the first one at or after X and on B's last, `last` (a
/// shift only moves later sequences down). Before the commit, or before B
/// of a split takes the subjects (then it holds only what it sourced).
pub(in crate::engine) async fn sourced_aligned(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    x: u64,
    last: u64,
) -> Result<()> {
    if last < x {
        return Ok(());
    }
    for seq in [x, last] {
        let lookup = if seq == x { Lookup::AtOrAfter } else { Lookup::Exact };
        let m = ctx.js.get_msg(to, seq, lookup, Via::Leader).await?;
        if let Some(m) = m {
            let origin = m.origin_seq(from)?;
            if origin != Some(m.seq) {
                return Err(shifted(from, to, x, m.seq, origin));
            }
        }
    }
    Ok(())
}

fn shifted(from: &str, to: &str, x: u64, seq: u64, origin: Option<u64>) -> Error {
    Error::Unsafe(format!(
        "{to} is not an exact copy of {from} after its hand-over at {x}: its message {seq} has origin {} (a message {from} removed while {to}'s source was set up again, after a leader change or restart, shifted every later sequence); the moved consumers' positions would be wrong: roll back and run again",
        origin.map_or("none".into(), |o| o.to_string())
    ))
}
