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
    let version = js
        .server_version()
        .ok_or_else(|| Error::Config("the server reported no version it could parse".into()))?;
    if version < MINIMUM {
        return Err(plan::PlanError::ServerTooOld { found: version }.into());
    }
    let (a_raw, _) = js.stream_info(&req.from).await?;
    let b_raw = js.stream_info_opt(&req.to).await?.map(|(raw, _)| raw);
    let all = js.consumer_names(&req.from).await?;
    let names = if req.all_consumers { all.clone() } else { req.consumers.clone() };
    let mut consumers_raw = vec![];
    for n in &names {
        consumers_raw.push(js.consumer_info_raw(&req.from, n).await?);
    }
    if req.all_consumers {
        // Ephemeral consumers are their owners' business; only durables move.
        consumers_raw
            .retain(|c| c["config"]["durable_name"].as_str().is_some_and(|s| !s.is_empty()));
    }
    let mut other_consumers = vec![];
    for n in all.iter().filter(|n| !names.contains(n)) {
        if let Some((raw, _)) = js.consumer_info_opt(&req.from, n).await? {
            other_consumers.push((
                n.clone(),
                raw["config"]["durable_name"].as_str().is_some_and(|s| !s.is_empty()),
            ));
        }
    }
    if req.all_consumers {
        // Ephemeral consumers were not "asked for": report them like the others.
        let asked: Vec<String> =
            consumers_raw.iter().filter_map(|c| c["name"].as_str().map(String::from)).collect();
        for n in names.iter().filter(|n| !asked.contains(n)) {
            other_consumers.push((n.clone(), false));
        }
    }
    let downstream = downstream_of(js, &req.from, &req.to).await?;
    let account = Some(js.account_info().await?);
    let facts =
        ServerFacts { version, a_raw, b_raw, consumers_raw, other_consumers, downstream, account };
    Ok(plan::build(req, &facts)?)
}

/// Streams (other than `to`) that source or mirror `from`: they would stop
/// receiving at the cut-over.
async fn downstream_of(js: &Js, from: &str, to: &str) -> Result<Vec<String>> {
    let mut out = vec![];
    let mut offset = 0usize;
    loop {
        let page =
            js.api("list streams", "STREAM.LIST", &serde_json::json!({ "offset": offset })).await?;
        let streams = page["streams"].as_array().cloned().unwrap_or_default();
        let total = page["total"].as_u64().unwrap_or(0) as usize;
        for st in &streams {
            let cfg = &st["config"];
            let name = cfg["name"].as_str().unwrap_or_default();
            if name == to || name == from {
                continue;
            }
            let mirrors = cfg["mirror"]["name"].as_str() == Some(from);
            let sources = cfg["sources"].as_array().is_some_and(|a| {
                a.iter().any(|s| {
                    s["name"].as_str() == Some(from)
                        && s.get("external").is_none_or(|x| x.is_null())
                })
            });
            if mirrors || sources {
                out.push(name.to_string());
            }
        }
        offset += streams.len();
        if streams.is_empty() || offset >= total {
            break;
        }
    }
    out.sort();
    Ok(out)
}
