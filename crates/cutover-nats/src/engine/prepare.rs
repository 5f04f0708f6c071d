//! Reads everything a plan depends on and builds it. Nothing here writes.

use crate::api::Js;
use crate::error::{Error, Result};
use cutover_core::names;
use cutover_core::plan::{self, ConfigCheck, Plan, PlanRequest, ServerChecks, ServerFacts};
use cutover_core::version::MINIMUM;
use serde_json::{json, Value};

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
    let version = js.server_version().ok_or(Error::UnknownServerVersion)?;
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
    let (downstream, other_streams) = other_streams(js, &req.from, &req.to).await?;
    let account = Some(js.account_info().await?);
    let mut facts = ServerFacts {
        version,
        a_raw,
        b_raw,
        consumers_raw,
        other_consumers,
        downstream,
        account,
        checks: ServerChecks { other_streams, ..Default::default() },
    };
    // A first plan tells B's configuration; the server is then asked about it.
    let draft = plan::build(req, &facts)?;
    facts.checks.a_max_per_subject = a_max_per_subject(js, &facts.a_raw, &draft).await?;
    if !draft.b_exists {
        facts.checks.b_config_check = Some(check_b_config(js, &draft).await?);
    }
    if req.mode.is_fenced() {
        facts.checks.live_instances = Some(live_instances(js, &req.from, &draft).await?);
    }
    if req.strategy == plan::Strategy::DualWrite {
        facts.checks.live_publishers = Some(live_publishers(js, &req.from).await?);
    }
    let mut plan = plan::build(req, &facts)?;
    refuse_oversized_journal(js, &mut plan);
    Ok(plan)
}

/// The journal is one KV value: the plan plus each consumer's progress (about
/// 2.1 KB per consumer measured with 1,000 durables). Over the server's
/// max_payload the run could not write it: refused here, with how to split.
fn refuse_oversized_journal(js: &Js, plan: &mut Plan) {
    let max = js.max_payload();
    let per_consumer = 600;
    let estimate = serde_json::to_vec(&*plan).map(|v| v.len()).unwrap_or(0)
        + per_consumer * plan.consumers.len();
    if max == 0 || estimate <= max {
        return;
    }
    let per_run = plan.consumers.len() * max / estimate.max(1);
    plan.findings.push(cutover_core::compat::Finding {
        scope: "plan".into(),
        setting: "consumers".into(),
        from: plan.consumers.len().to_string(),
        to: String::new(),
        verdict: cutover_core::compat::Verdict::Unsafe,
        reason: format!(
            "the migration's journal (one KV value) would be about {estimate} bytes, over the server's max_payload of {max}: move the consumers in several runs of at most about {per_run} (--consumer ...), or raise max_payload"
        ),
    });
    plan.safe = false;
}

/// Fence mode: each consumer's live registered instances (none without the
/// bucket).
async fn live_instances(js: &Js, from: &str, draft: &Plan) -> Result<Vec<(String, usize)>> {
    let store =
        crate::journal::JournalStore::open(js, crate::journal::IfMissing::ReturnNone).await?;
    let mut out = vec![];
    for c in &draft.consumers {
        let live = match &store {
            Some(s) => s.instances(Some((from, &c.name))).await?.iter().filter(|i| i.live).count(),
            None => 0,
        };
        out.push((c.name.clone(), live));
    }
    Ok(out)
}

/// Strategy dual-write: the live registered publishers of `from` (none
/// without the bucket).
async fn live_publishers(js: &Js, from: &str) -> Result<usize> {
    let store =
        crate::journal::JournalStore::open(js, crate::journal::IfMissing::ReturnNone).await?;
    Ok(match &store {
        Some(s) => super::dual::publishers(js, s, from).await?.iter().filter(|p| p.live).count(),
        None => 0,
    })
}

/// When B keeps fewer messages per subject than A, the most A holds on one
/// subject (STREAM.INFO `subjects_filter`, paged by 100,000 subjects).
async fn a_max_per_subject(js: &Js, a_raw: &Value, draft: &Plan) -> Result<Option<(String, u64)>> {
    let b_lim = draft.b_config["max_msgs_per_subject"].as_i64().unwrap_or(0);
    let a_lim = a_raw["config"]["max_msgs_per_subject"].as_i64().unwrap_or(0);
    if b_lim <= 0 || (a_lim > 0 && a_lim <= b_lim) {
        return Ok(None);
    }
    let mut best: Option<(String, u64)> = None;
    let mut offset = 0u64;
    loop {
        let info = js
            .api(
                &format!("read {}'s per-subject counts", draft.from),
                &format!("STREAM.INFO.{}", draft.from),
                &json!({ "subjects_filter": ">", "offset": offset }),
            )
            .await?;
        let subjects = info["state"]["subjects"].as_object().cloned().unwrap_or_default();
        for (subj, n) in &subjects {
            let n = n.as_u64().unwrap_or(0);
            if best.as_ref().is_none_or(|(_, m)| n > *m) {
                best = Some((subj.clone(), n));
            }
        }
        offset += subjects.len() as u64;
        let total = info["total"].as_u64().unwrap_or(0);
        if subjects.is_empty() || offset >= total {
            break;
        }
    }
    Ok(best)
}

/// Asks the server whether it accepts B's configuration (JetStream has no dry
/// run): a scratch stream with it is created and deleted at once. It sources A
/// through a filter no message matches, so it copies nothing but meets the
/// same rules (sourcing a work queue, replicas, storage, limits, features).
async fn check_b_config(js: &Js, draft: &Plan) -> Result<ConfigCheck> {
    let scratch = format!("CUTOVER_CHECK_{}", draft.to);
    let mut cfg = draft.b_config.clone();
    cfg["name"] = json!(scratch);
    cfg["subjects"] = json!([]);
    let nothing =
        json!({ "name": draft.from, "filter_subject": format!("_cutover.check.{}", draft.from) });
    if cfg.get("mirror").is_some() {
        cfg["mirror"] = nothing;
    } else {
        cfg["sources"] = json!([nothing]);
    }
    cfg["metadata"] = json!({ "nats-cutover.check": draft.to });
    // A scratch left by a plan that died is replaced.
    if js.stream_info_opt(&scratch).await?.is_some() {
        js.stream_delete(&scratch).await?;
    }
    let result = match js.stream_create(&cfg).await {
        Ok(_) => {
            js.stream_delete(&scratch).await?;
            Ok(())
        }
        Err(e @ Error::Api { .. }) => Err(e.to_string()),
        Err(e) => return Err(e),
    };
    Ok(ConfigCheck { scratch, result })
}

/// Every stream but `from` and `to`: those that source or mirror `from` (they
/// would stop receiving at the cut-over), and each one's subjects.
async fn other_streams(
    js: &Js,
    from: &str,
    to: &str,
) -> Result<(Vec<String>, Vec<(String, Vec<String>)>)> {
    let mut downstream = vec![];
    let mut subjects = vec![];
    let mut offset = 0usize;
    loop {
        let page = js.api("list streams", "STREAM.LIST", &json!({ "offset": offset })).await?;
        let streams = page["streams"].as_array().cloned().unwrap_or_default();
        let total = page["total"].as_u64().unwrap_or(0) as usize;
        for st in &streams {
            let cfg = &st["config"];
            let name = cfg["name"].as_str().unwrap_or_default();
            // A scratch stream of ours left by a plan that died during its
            // check: the next check replaces it; it is no one's downstream.
            let scratch = !cfg["metadata"]["nats-cutover.check"].is_null();
            if name == to || name == from || scratch {
                continue;
            }
            let own: Vec<String> = cfg["subjects"]
                .as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
                .unwrap_or_default();
            subjects.push((name.to_string(), own));
            let mirrors = cfg["mirror"]["name"].as_str() == Some(from);
            let sources = cfg["sources"].as_array().is_some_and(|a| {
                a.iter().any(|s| {
                    s["name"].as_str() == Some(from)
                        && s.get("external").is_none_or(|x| x.is_null())
                })
            });
            if mirrors || sources {
                downstream.push(name.to_string());
            }
        }
        offset += streams.len();
        if streams.is_empty() || offset >= total {
            break;
        }
    }
    downstream.sort();
    Ok((downstream, subjects))
}
