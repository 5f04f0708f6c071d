//! `rollback`: undo a migration that has not passed its commit point.
//!
//! Before B takes the subjects, publishers still write to A (or are retrying
//! while A's subjects are released), so the old consumers can take over again:
//! each new durable on B is paused and settled, and if it processed messages
//! after the checkpoint, the old durable is reset past them (consumer reset,
//! 2.14+) so none is processed twice; then the new durable, its route and (if the
//! run created it) B are deleted, A's subjects restored and the old durables
//! resumed. After the commit point only rolling forward is safe.

use super::events::{Event, EventKind, Sink, StepResult, Warning};
use crate::api::{Js, Lookup, Via};
use crate::error::{Error, Result};
use crate::journal::{now_ms, IfMissing, JournalStore, Lease};
use cutover_core::checkpoint::assess;
use cutover_core::journal::{ConsumerPhase, Journal, Phase, Step};
use serde_json::json;
use std::time::{Duration, Instant};

pub async fn load(js: &Js, id: &str) -> Result<(JournalStore, Journal)> {
    let store = JournalStore::open(js, IfMissing::ReturnNone)
        .await?
        .ok_or_else(|| Error::Journal("no migration journal on this server (KV bucket CUTOVER does not exist): no migration was started here; start one with `nats-cutover run`".into()))?;
    let j = store.load(id).await?.ok_or_else(|| {
        Error::Journal(format!("no migration {id:?}; list them with `nats-cutover status`"))
    })?;
    Ok((store, j))
}

pub async fn rollback(js: &Js, id: &str, sink: &dyn Sink, lease_ttl: Duration) -> Result<Journal> {
    let (store, mut j) = load(js, id).await?;
    if j.phase == Phase::RolledBack {
        return Ok(j);
    }
    if !j.can_roll_back() {
        return Err(Error::Unsafe(format!(
            "migration {id} passed its commit point ({}): publishers write to {} now, so only rolling forward is safe: `nats-cutover run --resume {id}`",
            j.phase.as_str(),
            j.to
        )));
    }
    let lease = Lease::acquire(&store, &j.from, id, lease_ttl).await?;
    let emit = |step: Step, result: StepResult| {
        sink.emit(Event::new(id, step, EventKind::StepDone { ms: None, result }))
    };
    let version = js.server_version();
    let can_pause = version.is_some_and(|v| v.features().consumer_pause);
    // The journal may trail the server by one write (it is written before each
    // effect): ask the server whether B took the subjects already.
    let b_now = js.stream_info_opt(&j.to).await?;
    if let Some((_, b)) = &b_now {
        let finals = &j.plan.b_final_subjects;
        if !finals.is_empty() && &b.config.subjects == finals {
            lease.release(&store).await?;
            return Err(Error::Unsafe(format!(
                "migration {id} passed its commit point: {} holds the subjects and publishers write to it, so only rolling forward is safe: `nats-cutover run --resume {id}`",
                j.to
            )));
        }
    }
    // A stream that is gone or sealed moved on since (another migration, or by
    // hand): it cannot take publishes back, and nothing of it is restored; the
    // rollback only removes what this migration left elsewhere.
    let a_now = js.stream_info_opt(&j.from).await?.filter(|(_, a)| !a.config.sealed);
    if a_now.is_none() {
        let what = format!(
            "{} is gone or sealed: its subjects and consumers are left as they are",
            j.from
        );
        sink.emit(Event::new(
            id,
            Step::RestoreSubjects,
            EventKind::Warning(Warning::Skipped { what }),
        ));
    }
    // Publishers first: A takes its subjects back if it released them.
    if let Some((a_raw, _)) = a_now.as_ref().filter(|(_, a)| a.config.subjects != j.a_subjects) {
        if let Some((b_raw, b)) = &b_now {
            if !b.config.subjects.is_empty() {
                let mut cfg = b_raw["config"].clone();
                cfg["subjects"] = json!([]);
                js.stream_update(&cfg).await?;
            }
        }
        let mut cfg = a_raw["config"].clone();
        cfg["subjects"] = json!(j.a_subjects);
        js.stream_update(&cfg).await?;
        emit(
            Step::RestoreSubjects,
            StepResult::SubjectsRestored { subjects: j.a_subjects.clone() },
        );
    }
    for i in 0..j.consumers.len() {
        let c = j.consumers[i].clone();
        // From `creating` on, the new durable may exist (its create request was
        // journaled first): the server says whether it does.
        if c.phase >= ConsumerPhase::Creating {
            let on_b = match &b_now {
                Some(_) => js.consumer_info_opt(&j.to, &c.name).await?,
                None => None,
            };
            if let Some((_, bc)) = on_b {
                // Hold the new durable still and learn what it settled.
                js.consumer_pause(&j.to, &c.name, Some("9999-01-01T00:00:00Z")).await?;
                let deadline = Instant::now()
                    + Duration::from_secs(60)
                        .max(cutover_core::model::nanos(bc.config.ack_wait) * 3);
                let f_b = loop {
                    let (_, ci) = js.consumer_info(&j.to, &c.name).await?;
                    if let Some(f) = assess(&ci).stable.then_some(ci.delivered.stream_seq) {
                        break f;
                    }
                    if Instant::now() > deadline {
                        let _ = js.consumer_pause(&j.to, &c.name, None).await;
                        return Err(Error::Stuck(format!("consumer {}/{} did not settle for the rollback; its workers hold messages; try again", j.to, c.name)));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                let start = c.b_start.unwrap_or(u64::MAX);
                if f_b >= start && a_now.is_some() {
                    // The new durable processed B messages up to f_b: the old one
                    // must resume after their origin sequence.
                    let (_, b) = js.stream_info(&j.to).await?;
                    let m = js
                        .get_msg(&j.to, f_b, Lookup::Exact, Via::direct_if(b.config.allow_direct))
                        .await?;
                    let origin = match m {
                        Some(m) => m.origin_seq(&j.from)?,
                        None => None,
                    };
                    if let Some(o) = origin.filter(|o| Some(*o) > c.checkpoint) {
                        if !version.is_some_and(|v| v.features().consumer_reset) {
                            return Err(Error::Unsafe(format!("consumer {} processed messages on {} up to origin {o}; moving the old durable past them needs consumer reset (2.14+); roll forward instead", c.name, j.to)));
                        }
                        js.api(
                            &format!("reset consumer {}/{}", j.from, c.name),
                            &format!("CONSUMER.RESET.{}.{}", j.from, c.name),
                            &json!({ "seq": o + 1 }),
                        )
                        .await?;
                        emit(
                            Step::Consumer(c.name.clone()),
                            StepResult::ConsumerReset { reset_to: o + 1 },
                        );
                    }
                }
                js.consumer_delete(&j.to, &c.name).await?;
            }
            store.delete_route(&j.from, &c.name).await?;
        }
        // As the operator left it: running, or paused until the same time (a
        // durable deleted since, with its stream moved on, stays gone).
        if a_now.is_some() && (c.was_paused || can_pause) {
            match js.consumer_pause(&j.from, &c.name, c.paused_until.as_deref()).await {
                Ok(_) | Err(Error::ConsumerNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        j.consumers[i].phase = ConsumerPhase::Waiting;
        j.consumers[i].checkpoint = None;
        j.consumers[i].b_start = None;
        emit(Step::Consumer(c.name.clone()), StepResult::ConsumerRestored);
    }
    if j.created_b && js.stream_info_opt(&j.to).await?.is_some() {
        js.stream_delete(&j.to).await?;
        emit(Step::DeleteB, StepResult::BDeleted { stream: j.to.clone() });
    }
    j.phase = Phase::RolledBack;
    j.in_progress = None;
    j.updated_ms = now_ms();
    store.save(&j).await?;
    lease.release(&store).await?;
    Ok(j)
}

pub async fn list(js: &Js) -> Result<Vec<Journal>> {
    match JournalStore::open(js, IfMissing::ReturnNone).await? {
        Some(s) => s.list().await,
        None => Ok(vec![]),
    }
}

/// What `forget` removed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Forgotten {
    pub id: String,
    /// The journal's phase, if there was one.
    pub phase: Option<Phase>,
    /// An expired lease of this migration was removed too.
    pub lease_removed: bool,
}

/// Removes the record of a migration that is over (done, rolled back) or never
/// changed anything, and its expired lease; refuses a live one. The routes of a
/// finished migration stay: applications follow them.
pub async fn forget(js: &Js, id: &str) -> Result<Forgotten> {
    let store = JournalStore::open(js, IfMissing::ReturnNone).await?.ok_or_else(|| {
        Error::Journal(
            "no migration journal on this server (KV bucket CUTOVER does not exist)".into(),
        )
    })?;
    let journal = store.load(id).await?;
    if let Some(j) = &journal {
        let untouched = j.phase == Phase::Planned
            && !j.created_b
            && j.consumers.iter().all(|c| c.phase == ConsumerPhase::Waiting);
        if !(j.phase == Phase::Done || j.phase == Phase::RolledBack || untouched) {
            return Err(Error::Unsafe(format!(
                "migration {id} is under way ({}): forgetting it would lose what it changed; finish it with `nats-cutover run --resume {id}` or undo it with `nats-cutover rollback {id}` first",
                j.phase.as_str()
            )));
        }
    }
    let lease = store.leases().await?.into_iter().find(|l| l.migration == id);
    if let Some(l) = &lease {
        if l.live {
            return Err(Error::Leased {
                id: id.into(),
                holder: l.holder.clone(),
                until: format!("{} ms from now", l.expires_ms.saturating_sub(now_ms())),
            });
        }
    }
    if journal.is_none() && lease.is_none() {
        return Err(Error::Journal(format!(
            "no migration {id:?} and no lease of it; `nats-cutover status` lists them"
        )));
    }
    if journal.is_some() {
        store.delete_journal(id).await?;
    }
    if let Some(l) = &lease {
        store.delete_lease(&l.stream).await?;
    }
    Ok(Forgotten { id: id.into(), phase: journal.map(|j| j.phase), lease_removed: lease.is_some() })
}

/// Every lease, for `status` (orphans included: a lease whose migration has
/// no journal, left by a runner that died before writing one).
pub async fn leases(js: &Js) -> Result<Vec<crate::journal::LeaseInfo>> {
    match JournalStore::open(js, IfMissing::ReturnNone).await? {
        Some(s) => s.leases().await,
        None => Ok(vec![]),
    }
}
