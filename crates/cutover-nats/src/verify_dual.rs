//! `verify` of a dual-write migration: A and B read whole (headers only,
//! ordered consumers, deleted at the end) and judged by msg-id
//! (`cutover_core::dual::judge`).

use crate::api::Js;
use crate::error::{Error, Result};
use crate::journal::load_migration as load;
use cutover_core::dual::{judge, DualReport, Handoff, Msg};
use cutover_core::journal::ConsumerPhase;
use cutover_core::plan::Strategy;
use std::time::Duration;

/// Verifies dual-write migration `id`: every message A stored after the
/// dual point has its copy in B, and each moved consumer's two sides
/// together deliver every message it selects (`only`: these consumers).
pub async fn verify_dual(js: &Js, id: &str, only: &[String], first_n: usize) -> Result<DualReport> {
    let (_, j) = load(js, id).await?;
    js.both_sides(&j.plan)?;
    if j.plan.strategy != Strategy::DualWrite {
        return Err(Error::NotVerifiable(format!(
            "migration {id} used strategy {}: not dual-write",
            j.plan.strategy.as_str()
        )));
    }
    let point = j.dual.as_ref().and_then(|d| d.point);
    let Some(point) = point.filter(|_| j.phase.committed()) else {
        return Err(Error::NotVerifiable(format!(
            "migration {id} is at phase {}: verify checks a migration past its commit point (publishers on {}); finish it with `nats-cutover run --resume {id}`",
            j.phase.as_str(),
            j.to
        )));
    };
    let mut handoffs = vec![];
    for c in j.consumers.iter().filter(|c| only.is_empty() || only.contains(&c.name)) {
        let (Some(f), Some(s)) = (c.checkpoint, c.b_start) else { continue };
        if c.phase < ConsumerPhase::Created {
            continue;
        }
        let plan = j.plan.consumers.iter().find(|p| p.name == c.name);
        handoffs.push(Handoff {
            name: c.name.clone(),
            checkpoint: f,
            b_start: s,
            a_filters: plan.and_then(|p| p.a_filters.clone()).unwrap_or_default(),
            b_filters: c.b_filters.clone(),
        });
    }
    let a = read_all(js, &j.from).await?;
    let b = read_all(js, &j.to).await?;
    Ok(judge((&j.id, &j.from, &j.to), point, &a, &b, &handoffs, first_n.max(1)))
}

/// Every message `stream` holds now: sequence, subject, msg-id.
async fn read_all(js: &Js, stream: &str) -> Result<Vec<Msg>> {
    let (_, info) = js.stream_info(stream).await?;
    let mut out = Vec::with_capacity(info.state.messages as usize);
    let (first, last) = (info.state.first_seq, info.state.last_seq);
    let stall = Duration::from_secs(10);
    crate::read::read(js, stream, first, last, &[], true, stall, |m, seq, _| {
        let id = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).map(|v| v.to_string());
        out.push(Msg { seq, subject: m.subject.to_string(), id });
        true
    })
    .await?;
    Ok(out)
}
