//! Step `move_publishers`: the commit window. A releases its subjects, B
//! holds A's tail, B takes the subjects; all or nothing (A takes them back
//! if B cannot), reconciled with the server after a crash, and closed by a
//! guard for a runner that died inside it.

use super::catch_up::until_sourced;
use crate::engine::bridge::Bridge;
use crate::engine::ctx::{Ctx, Exposure};
use crate::engine::events::{EventKind, Info, StepResult, Warning};
use crate::engine::progress::source_progress;
use crate::error::{Error, Result};
use crate::journal::now_ms;
use cutover_core::journal::{Phase, Step};
use cutover_core::plan::{InPlaceHop, Strategy};
use serde_json::json;
use std::time::{Duration, Instant};

/// The commit point: A releases its subjects, B sources A's tail, B takes the
/// subjects. Publishers see "no responders" for this short window and retry
/// with the same Nats-Msg-Id; because B takes the subjects only after it holds
/// every message A accepted, a retry of a message A already stored meets its
/// sourced copy in B's duplicate window, on every server version (2.10-2.12.5
/// stall sourcing on a duplicate arriving by source; here none can).
///
/// All or nothing: the phase `subjects_released` is journaled before A
/// releases anything; if B cannot take the subjects (or does not hold A's tail
/// within the commit timeout), A takes them back before the error is reported.
/// A runner that dies inside the window is reconciled by asking the server who
/// holds the subjects.
pub(in crate::engine) async fn move_publishers(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, final_subjects) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone(), j.plan.b_final_subjects.clone())
    };
    let t = ctx.begin(Step::MovePublishers).await?;
    let (_, b) = ctx.js.stream_info(&to).await?;
    if !final_subjects.is_empty() && b.config.subjects == final_subjects {
        // A runner died after B took the subjects: the commit happened.
        let a_final = match ctx.journal.lock().await.a_final_seq {
            Some(s) => s,
            None => ctx.js.stream_info(&from).await?.1.state.last_seq,
        };
        ctx.journal.lock().await.a_final_seq = Some(a_final);
        return ctx
            .done(
                Step::MovePublishers,
                t,
                Some(Phase::SubjectsMoved),
                StepResult::MovePublishers {
                    a_final_seq: a_final,
                    no_stream_window_ms: None,
                    reconciled: true,
                },
            )
            .await;
    }
    super::recheck::window_holds(ctx, &to).await?;
    super::recheck::settings_carried(ctx, &from, &to).await?;
    b_keeps_up(ctx, &from, &to).await?;
    // Last: the window's check may wait a whole retry horizon, and a
    // durable an application creates meanwhile must stop the run here, not
    // be found on the sealed A after the commit.
    super::recheck::none_appeared(ctx).await?;
    // Intent before effect: from here a crash is reconciled with the server.
    ctx.journal.lock().await.phase = Phase::SubjectsReleased;
    ctx.save().await?;
    ctx.exposed(Exposure::Commit, true);
    let released = Instant::now();
    let (committed, given_back) = commit_or_give_back(ctx, &from, &to, &final_subjects).await?;
    let closed = match committed {
        Ok(a_final) => {
            let window_ms = released.elapsed().as_secs_f64() * 1000.0;
            let repoint = {
                let j = ctx.journal.lock().await;
                j.plan.external.as_ref().is_some_and(|e| e.repoint_publishers && !e.split_publishers)
            };
            if repoint {
                let info = Info::RepointNow { to: to.clone() };
                ctx.emit(Step::MovePublishers, EventKind::Info(info));
            }
            ctx.done(
                Step::MovePublishers,
                t,
                Some(Phase::SubjectsMoved),
                StepResult::MovePublishers {
                    a_final_seq: a_final,
                    no_stream_window_ms: Some(window_ms),
                    reconciled: false,
                },
            )
            .await
        }
        Err(e) => match given_back.expect("given back on error") {
            // B held the subjects after all (its update answered late).
            Ok(true) => reconciled(ctx, &from, t).await,
            Ok(false) => {
                {
                    let mut j = ctx.journal.lock().await;
                    j.phase = Phase::ConsumersMoved;
                    j.a_final_seq = None;
                }
                ctx.save().await?;
                let undone = Warning::CommitUndone { error: e.to_string() };
                ctx.emit(Step::MovePublishers, EventKind::Warning(undone));
                Err(Error::Stuck(format!("the commit did not complete ({e}); {from} holds its subjects again and publishers are served by it; the moved consumers read {from}'s messages through {to}; run again to retry the commit, or roll back")))
            }
            Err(e2) => {
                return Err(Error::Stuck(format!("the commit did not complete ({e}) and giving {from} its subjects back failed too ({e2}): publishers may have no stream; run `nats-cutover run --resume {}` now", ctx.id)))
            }
        },
    };
    // Journaled as closed (or as undone: the error path saved it first).
    ctx.exposed(Exposure::Commit, false);
    closed
}

/// Right before A releases its subjects: B sources A now. The commit
/// window lasts until B holds A's tail, so a B that stopped sourcing (a
/// newcomer's cluster trial: ~20 s after a leader was killed) would leave
/// publishers without a stream for the whole commit timeout and then undo
/// it. B must hold what A held at this read (its in-flight tail aside),
/// with progress bounded like every wait for sourcing; a stall fails here,
/// before anything is released, with publishers on A.
async fn b_keeps_up(ctx: &Ctx<'_>, from: &str, to: &str) -> Result<()> {
    let target = ctx.js.stream_info(from).await?.1.state.last_seq;
    until_sourced(ctx, from, to, target, |e| {
        Error::Stuck(format!("{e}; nothing was released: {from} still serves the publishers"))
    })
    .await
}

/// The commit happened though this run could not tell at first: B holds the
/// subjects; A's final sequence is its last.
async fn reconciled(ctx: &Ctx<'_>, from: &str, t: Instant) -> Result<()> {
    let a_final = ctx.js.stream_info(from).await?.1.state.last_seq;
    ctx.journal.lock().await.a_final_seq = Some(a_final);
    let result = StepResult::MovePublishers {
        a_final_seq: a_final,
        no_stream_window_ms: None,
        reconciled: true,
    };
    ctx.done(Step::MovePublishers, t, Some(Phase::SubjectsMoved), result).await
}

/// A guard's run: the runner died inside the commit window (A released its
/// subjects, B had not taken them), so publishers have no stream and nothing
/// else would act before its lease lapses and someone resumes. The guard, a
/// process the CLI's `run` starts beside itself that notices its exit, gives
/// A its subjects back, the compensating action a failed commit runs (or
/// finds that B took them: the commit happened), and stops there: `run
/// --resume` retries the commit, `rollback` undoes the move.
pub(in crate::engine) async fn close_window(ctx: &Ctx<'_>) -> Result<()> {
    let (phase, from, to, final_subjects) = {
        let j = ctx.journal.lock().await;
        (j.phase, j.from.clone(), j.to.clone(), j.plan.b_final_subjects.clone())
    };
    if phase != Phase::SubjectsReleased {
        return Ok(());
    }
    let t = Instant::now();
    if super::subjects::give_subjects_back(ctx, &from, &to, &final_subjects).await? {
        reconciled(ctx, &from, t).await?;
        return Err(Error::Stuck("its runner died just after the commit point".into()));
    }
    {
        let mut j = ctx.journal.lock().await;
        j.phase = Phase::ConsumersMoved;
        j.a_final_seq = None;
        j.end_step(now_ms());
    }
    ctx.save().await?;
    Err(Error::Stuck(format!(
        "its runner died inside the commit window; the guard gave {from} its subjects back"
    )))
}

/// The commit window and, if it failed, A's subjects given back; the
/// publishes of the window are answered beside it (`crate::engine::bridge`,
/// unless `--no-answer-publishes`), once a stream holds the subjects again.
async fn commit_or_give_back(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    final_subjects: &[String],
) -> Result<(Result<u64>, Option<Result<bool>>)> {
    let bridge = crate::engine::bridge::open_for(ctx).await?;
    let committed = commit_window(ctx, from, to, final_subjects, bridge.as_ref()).await;
    let given_back = match &committed {
        Ok(_) => None,
        Err(_) => {
            if let Some(b) = &bridge {
                b.taking();
            }
            Some(super::subjects::give_subjects_back(ctx, from, to, final_subjects).await)
        }
    };
    if let Some(b) = bridge {
        // A stream holds the subjects again (unless giving them back failed).
        crate::engine::bridge::close(ctx, b).await;
    }
    Ok((committed, given_back))
}

/// The window itself; returns A's final sequence. Bounded by the commit
/// timeout and deaf to Ctrl-C (stopping halfway would leave publishers with no
/// stream; the caller undoes a failure at once).
async fn commit_window(
    ctx: &Ctx<'_>,
    from: &str,
    to: &str,
    final_subjects: &[String],
    bridge: Option<&Bridge>,
) -> Result<u64> {
    let (a_raw, a) = ctx.js.stream_info(from).await?;
    let release = super::subjects::released_subjects(from, final_subjects);
    // Hop 1 of an in-place migration: from here B answers A's direct gets
    // (its mirror direct get, inherited from A's allow_direct, outlives the
    // promotion: stream.go update unsubscribes it only when mirror_direct
    // changes), so A, frozen now, stops answering them.
    let out = ctx.journal.lock().await.plan.in_place == Some(InPlaceHop::Out);
    if a.config.subjects != release || (out && a.config.allow_direct) {
        let mut cfg = a_raw["config"].clone();
        cfg["subjects"] = json!(release);
        if out {
            cfg["allow_direct"] = json!(false);
        }
        ctx.js.stream_update(&cfg).await?;
    }
    if let Some(b) = bridge {
        b.released();
    }
    let (_, a) = ctx.js.stream_info(from).await?;
    ctx.journal.lock().await.a_final_seq = Some(a.state.last_seq);
    if let Some(h) = &ctx.opts.after_step {
        // The worst moment to die: publishers have no stream until a resume.
        h("subjects_released");
    }
    let deadline = Instant::now() + ctx.opts.commit_timeout;
    // Caught up, and A's last sequence the same in two reads: removing its
    // subjects only unsubscribes them, and a publish the server already
    // queued for A is stored after that (stream.go processInboundJetStreamMsg
    // → queueInbound, stored by internalLoop). A message stored after B's
    // last check would never reach a promoted mirror, nor a source removed
    // later. (A reviewer found this; the window is the inbound queue's.)
    let mut seen: Option<u64> = None;
    let a_final = loop {
        let p = source_progress(ctx.js, to, from).await?;
        if p.caught_up && seen == Some(p.origin_last_seq) {
            break p.origin_last_seq;
        }
        seen = p.caught_up.then_some(p.origin_last_seq);
        if Instant::now() > deadline {
            return Err(Error::Stuck(format!(
                "{to} did not source {from}'s last messages (up to {}) within the commit timeout of {:?}",
                a.state.last_seq, ctx.opts.commit_timeout
            )));
        }
        ctx.tick(false).await?;
        tokio::time::sleep(Duration::from_micros(500)).await;
    };
    if let Some(b) = bridge {
        b.holder_settled();
    }
    ctx.journal.lock().await.a_final_seq = Some(a_final);
    let mirror = ctx.journal.lock().await.plan.strategy == Strategy::Mirror;
    if mirror {
        // A's sequences, exactly: B's next message must be A's next.
        super::subjects::same_last(ctx, from, to).await?;
    }
    let handed_over = ctx.journal.lock().await.handover.and_then(|h| h.x);
    if let Some(x) = handed_over {
        // B keeps A's sequences since its hand-over, or the commit is refused.
        super::handover::tail_exact(ctx, from, to, x).await?;
    }
    let (b_raw, b) = ctx.js.stream_info(to).await?;
    if b.config.subjects != final_subjects {
        // A mirror is promoted in the same update.
        let promote_with = ctx.journal.lock().await.plan.promote_with.clone();
        let cfg = super::subjects::taking_subjects(&b_raw, final_subjects, &promote_with);
        if crate::test_hooks::refuse_subjects() {
            return Err(Error::Stuck(format!("{to} refused the subjects (test hook)")));
        }
        if let Some(b) = bridge {
            b.taking();
        }
        ctx.js.stream_update(&cfg).await?;
    }
    Ok(a_final)
}

/// A is gone before the commit: a memory stream is lost when its server
/// restarts (on a cluster, when all its replicas do), with its durables. B
/// holds A's messages up to where it had copied them, and is then the only
/// copy: once every durable moved, B takes A's subjects (the commit without
/// A, so publishers are served again), and the run goes on; before that,
/// the durables' positions are gone with A and nothing can be exact, so the
/// run stops, saying so (and `rollback` refuses to delete B).
pub(in crate::engine) async fn a_lost(ctx: &Ctx<'_>) -> Result<()> {
    let (from, to, final_subjects, phase, id) = {
        let j = ctx.journal.lock().await;
        (j.from.clone(), j.to.clone(), j.plan.b_final_subjects.clone(), j.phase, j.id.clone())
    };
    let (b_raw, b) = ctx.js.stream_info(&to).await?;
    if phase < Phase::ConsumersMoved {
        // Publishers had no stream at all (a newcomer's trial): B, the
        // only copy, takes A's subjects so they are served and what they
        // publish is kept; nothing is journaled as committed (no durable
        // moved), so `forget` ends it. Said first, then done.
        let served = !final_subjects.is_empty() && b.config.subjects == final_subjects;
        let why = format!(
            "{from} is gone (a memory stream does not survive a server restart), and its durables with it before they moved: their positions are lost; {to} holds {from}'s messages up to sequence {} ({} messages) and is their only copy, so it is kept (rollback refuses to delete it); {to} took {from}'s subjects, so publishers are served and what they publish is kept there; nothing can finish this exactly: recreate {from}'s durables on {to} where their applications left off, then `nats-cutover forget {id}`",
            b.state.last_seq, b.state.messages
        );
        if !served && !final_subjects.is_empty() {
            ctx.journal.lock().await.error = Some(why.clone());
            ctx.save().await?;
            let promote_with = ctx.journal.lock().await.plan.promote_with.clone();
            let cfg = super::subjects::taking_subjects(&b_raw, &final_subjects, &promote_with);
            ctx.js.stream_update(&cfg).await?;
        }
        return Err(Error::Unsafe(why));
    }
    let t = ctx.begin(Step::MovePublishers).await?;
    ctx.journal.lock().await.phase = Phase::SubjectsReleased;
    ctx.save().await?;
    let promote_with = ctx.journal.lock().await.plan.promote_with.clone();
    let cfg = super::subjects::taking_subjects(&b_raw, &final_subjects, &promote_with);
    ctx.js.stream_update(&cfg).await?;
    let a_final = b.state.last_seq;
    ctx.journal.lock().await.a_final_seq = Some(a_final);
    let what = format!("{from} was gone (a memory stream lost in a server restart): {to}, which held its messages up to sequence {a_final}, took its subjects; messages {from} accepted after {to} copied them, if any, were lost with it");
    ctx.emit(Step::MovePublishers, EventKind::Warning(Warning::Skipped { what }));
    let result = StepResult::MovePublishers {
        a_final_seq: a_final,
        no_stream_window_ms: None,
        reconciled: true,
    };
    ctx.done(Step::MovePublishers, t, Some(Phase::SubjectsMoved), result).await
}
