//! Reads everything a plan depends on and builds it. Nothing here writes.

use crate::api::Js;
use crate::error::{Error, Result};
use cutover_core::names;
use cutover_core::plan::{self, Plan, PlanRequest, ServerFacts};
use cutover_core::version::MINIMUM;

/// The plan request plus nothing else: kept as a type of its own so `run` can
/// grow options without touching `plan`.
pub type PlanInputs = PlanRequest;

/// Validates names first (nothing sent for a bad name), then reads A, B and the
/// consumers, then builds the plan. Errors here never leave a trace on the server.
pub async fn prepare_plan(js: &Js, req: &PlanRequest) -> Result<Plan> {
    names::stream(&req.from)?;
    names::stream(&req.to)?;
    for c in &req.consumers {
        names::consumer(c)?;
    }
    if req.from == req.to {
        return Err(plan::PlanError::SameStream(req.from.clone()).into());
    }
    if req.consumers.is_empty() && !req.all_consumers {
        return Err(plan::PlanError::NoConsumer.into());
    }
    let version = js.server_version().ok_or_else(|| Error::Config("the server reported no version it could parse".into()))?;
    if version < MINIMUM {
        return Err(plan::PlanError::ServerTooOld { found: version }.into());
    }
    let (a_raw, _) = js.stream_info(&req.from).await?;
    let b_raw = js.stream_info_opt(&req.to).await?.map(|(raw, _)| raw);
    let names = if req.all_consumers { js.consumer_names(&req.from).await? } else { req.consumers.clone() };
    let mut consumers_raw = vec![];
    for n in &names {
        consumers_raw.push(js.consumer_info_raw(&req.from, n).await?);
    }
    if req.all_consumers {
        // Ephemeral consumers are their owners' business; only durables move.
        consumers_raw.retain(|c| c["config"]["durable_name"].as_str().is_some_and(|s| !s.is_empty()));
    }
    let facts = ServerFacts { version, a_raw, b_raw, consumers_raw };
    Ok(plan::build(req, &facts)?)
}
