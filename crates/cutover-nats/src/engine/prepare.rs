//! Reads everything a plan depends on and builds it. Nothing here writes.

use crate::api::Js;
use crate::error::{Error, Result};
use cutover_core::catchup::IngestRate;
use cutover_core::journal::{split, Journal};
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
    check_names(req)?;
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
    let req = &super::across::request(js, req).await?;
    let (a_raw, _) = js.stream_info(&req.from).await?;
    refuse_other_migrations(js, req).await?;
    let b_raw = js.stream_info_opt(&req.to).await?.map(|(raw, _)| raw);
    // A paced copy's durable (steps::create) is ours, not A's.
    let mut all = js.consumer_names(&req.from).await?;
    all.retain(|n| !n.starts_with(crate::api::MIRROR_CONSUMER_PREFIX));
    let names = if req.all_consumers { all.clone() } else { req.consumers.clone() };
    let mut consumers_raw = vec![];
    for n in &names {
        match js.consumer_info_opt(&req.from, n).await? {
            Some((raw, _)) => consumers_raw.push(raw),
            // Listed, then gone: an application's ephemeral consumer (nats.go
            // makes one per object-store read; a client matrix saw `obj`
            // refused, "consumer does not exist", 3 runs in 10). A durable
            // asked for by name must exist.
            None if req.all_consumers => {}
            None => consumers_raw.push(js.consumer_info_raw(&req.from, n).await?),
        }
    }
    if req.all_consumers {
        // Ephemeral consumers are their owners' business; only durables move.
        consumers_raw.retain(crate::api::is_application_durable);
    }
    let mut other_consumers = vec![];
    for n in all.iter().filter(|n| !names.contains(n)) {
        if let Some((raw, _)) = js.consumer_info_opt(&req.from, n).await? {
            other_consumers.push((n.clone(), crate::api::is_application_durable(&raw)));
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
    let (downstream, other_streams) = streams_around(js, req).await?;
    let a_ingest = Some(a_ingest(js, &req.from, &a_raw).await?);
    let account = Some(js.account_info().await?);
    let mut facts = ServerFacts {
        version,
        a_raw,
        b_raw,
        consumers_raw,
        other_consumers,
        downstream,
        account,
        checks: ServerChecks { other_streams, a_ingest, ..Default::default() },
    };
    // A first plan tells B's configuration; the server is then asked about it.
    let draft = plan::build(req, &facts)?;
    facts.checks.a_max_per_subject = a_max_per_subject(js, &facts.a_raw, &draft).await?;
    if !draft.b_exists {
        facts.checks.b_config_check = Some(check_b_config(js, &draft).await?);
    }
    instance_checks(js, req, &draft, &mut facts.checks).await?;
    let mut plan = plan::build(req, &facts)?;
    refuse_oversized_journal(js, &mut plan);
    super::across::refuse_missing(js, &mut plan).await?;
    Ok(plan)
}

/// What the registered application instances tell the plan: how many are
/// live (fence and rolling modes), of the new version (rolling), which
/// followed an earlier migration into A, and A's live publishers (dual-write).
async fn instance_checks(
    js: &Js,
    req: &PlanRequest,
    draft: &Plan,
    checks: &mut ServerChecks,
) -> Result<()> {
    // Every live registration, read once (none without the bucket); an
    // instance's key is its home binding (`inst.<STREAM>.<CONSUMER>.<ID>`).
    let store =
        crate::journal::JournalStore::open(js, crate::journal::IfMissing::ReturnNone).await?;
    let live = match &store {
        Some(s) => s.instances(None).await?.into_iter().filter(|i| i.live).collect(),
        None => vec![],
    };
    let (mut all, mut new) = (vec![], vec![]);
    for c in &draft.consumers {
        let home = |i: &&crate::journal::Instance| {
            i.record.stream == req.from && i.record.consumer == c.name
        };
        let of_new = |i: &&crate::journal::Instance| {
            req.new_version.as_deref() == Some(&*i.record.app_version)
        };
        all.push((c.name.clone(), live.iter().filter(home).count()));
        new.push((c.name.clone(), live.iter().filter(home).filter(of_new).count()));
        // Bound to A's consumer under another home binding: they followed an
        // earlier migration into A.
        let bound = format!("{}/{}", req.from, c.name);
        for i in
            live.iter().filter(|i| i.record.bound.contains(&bound) && i.record.stream != req.from)
        {
            let r = &i.record;
            let home = format!("{}/{}", r.stream, r.consumer);
            checks.chained_instances.push((c.name.clone(), r.instance.clone(), home));
        }
    }
    if req.mode.is_fenced() {
        checks.live_instances = Some(all);
    }
    if req.mode == cutover_core::plan::Mode::Rolling {
        checks.live_new_version = Some(new);
    }
    if req.strategy == plan::Strategy::DualWrite {
        checks.live_publishers = Some(match &store {
            Some(s) => {
                super::dual::publishers(js, s, &req.from).await?.iter().filter(|p| p.live).count()
            }
            None => 0,
        });
    }
    Ok(())
}

/// Names first (nothing is sent for a bad one): each valid, none of them
/// nats-cutover's own, no consumer named twice.
fn check_names(req: &PlanRequest) -> Result<()> {
    names::stream(&req.from)?;
    names::stream(&req.to)?;
    for c in &req.consumers {
        names::consumer(c)?;
    }
    let journal = format!("KV_{}", cutover_core::journal::BUCKET);
    for (flag, s) in [("--from", &req.from), ("--to", &req.to)] {
        if *s == journal {
            return Err(Error::Reserved(format!("{flag} {s} names nats-cutover's own journal bucket (KV bucket {}), which a migration reads and writes while it runs: it cannot be migrated by nats-cutover; nothing was changed", cutover_core::journal::BUCKET)));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(c) = req.consumers.iter().find(|c| !seen.insert(c.as_str())) {
        return Err(Error::Input(format!(
            "--consumer {c} is given twice: name each consumer once"
        )));
    }
    Ok(())
}

/// A migration touching A or B that is not finished (any but `done` and
/// `rolled_back`, this same one excepted: `run` resumes it) would be undone
/// or overtaken by a second one: refused, naming it. Read without creating
/// the bucket.
async fn refuse_other_migrations(js: &Js, req: &PlanRequest) -> Result<()> {
    use crate::journal::{IfMissing, JournalStore};
    use cutover_core::journal::Phase;
    let Some(store) = JournalStore::open(js, IfMissing::ReturnNone).await? else { return Ok(()) };
    let this = cutover_core::journal::migration_id(&req.from, &req.to);
    let ours = [req.from.as_str(), req.to.as_str()];
    for id in store.ids().await? {
        let touches = id.split('.').any(|s| ours.contains(&s));
        if id == this || !touches {
            continue;
        }
        let Some(j) = store.load(&id).await? else { continue };
        if !matches!(j.phase, Phase::Done | Phase::RolledBack) {
            let stream = if ours.contains(&j.from.as_str()) { &j.from } else { &j.to };
            return Err(Error::UnderWay {
                stream: stream.clone(),
                id,
                from: j.from.clone(),
                to: j.to.clone(),
                phase: j.phase.as_str().into(),
            });
        }
    }
    Ok(())
}

/// The streams that source or mirror A (on A's side, across systems) and
/// every other stream's subjects on B's side (B's must not overlap them).
async fn streams_around(
    js: &Js,
    req: &PlanRequest,
) -> Result<(Vec<String>, Vec<(String, Vec<String>)>)> {
    let (downstream, subjects) = other_streams(js, &req.from, &req.to).await?;
    Ok(match js.source_side() {
        Some(src) => (other_streams(src, &req.from, &req.to).await?.0, subjects),
        None => (downstream, subjects),
    })
}

/// The journal is stored as a head record (the plan without its consumers,
/// and their names) and one record per consumer (its plan entry, findings and
/// progress), each one KV value. A record over the server's max_payload
/// could not be written: refused here. The margins are what the records grow
/// by during a run (steps, an error, A's subjects; checkpoints, evidence).
fn refuse_oversized_journal(js: &Js, plan: &mut Plan) {
    const RECORD_MARGIN: usize = 1024;
    let subjects = serde_json::to_vec(&plan.b_final_subjects).map(|v| v.len()).unwrap_or(0);
    let head_margin = 2048 + subjects;
    let max = js.max_payload();
    if max == 0 {
        return;
    }
    let names: Vec<(String, Option<String>)> =
        plan.consumers.iter().map(|c| (c.name.clone(), None)).collect();
    let j = Journal::new(plan.clone(), vec![], &names, false, 0);
    let (head, records) = split(&j);
    let head_len = serde_json::to_vec(&head).map(|v| v.len()).unwrap_or(0) + head_margin;
    let largest = records
        .iter()
        .map(|r| {
            let filters =
                r.plan.as_ref().map_or(0, |p| p.b_filters.iter().map(|f| f.len() + 3).sum());
            (serde_json::to_vec(r).map(|v| v.len()).unwrap_or(0) + RECORD_MARGIN + filters, &r.name)
        })
        .max();
    let n = plan.consumers.len();
    let mut refuse = |setting: &str, reason: String| {
        plan.findings.push(cutover_core::compat::Finding {
            scope: "plan".into(),
            setting: setting.into(),
            from: n.to_string(),
            to: String::new(),
            verdict: cutover_core::compat::Verdict::Unsafe,
            reason,
        });
        plan.safe = false;
    };
    if head_len > max {
        let per_run = n * max / head_len;
        refuse("consumers", format!(
            "the migration's journal head record (the plan and {n} consumer names) would be about {head_len} bytes, over the server's max_payload of {max}: move the consumers in several runs of at most about {per_run} (--consumer ...), or raise max_payload"
        ));
    }
    if let Some((len, name)) = largest.filter(|(len, _)| *len > max) {
        let name = name.clone();
        refuse("consumers", format!(
            "consumer {name}'s journal record (its new configuration and findings) would be about {len} bytes, over the server's max_payload of {max}: raise max_payload"
        ));
    }
}

/// How long `plan` watches A's last sequence to know its ingest rate.
const INGEST_SAMPLE: std::time::Duration = std::time::Duration::from_millis(250);

/// A's ingest rate: its last sequence read twice [`INGEST_SAMPLE`] apart
/// (a measurement window, not a wait for a condition). A stream that stored
/// nothing in the last 10 s (by its `last_ts`) is not sampled: rate 0.
async fn a_ingest(js: &Js, from: &str, a_raw: &Value) -> Result<IngestRate> {
    let rfc = time::format_description::well_known::Rfc3339;
    let recent = a_raw["state"]["last_ts"]
        .as_str()
        .and_then(|t| time::OffsetDateTime::parse(t, &rfc).ok())
        .is_some_and(|t| time::OffsetDateTime::now_utc() - t < time::Duration::seconds(10));
    if !recent {
        return Ok(IngestRate { per_s: 0.0, over_ms: 0 });
    }
    let (_, a0) = js.stream_info(from).await?;
    let t0 = std::time::Instant::now();
    tokio::time::sleep(INGEST_SAMPLE).await;
    let (_, a1) = js.stream_info(from).await?;
    let secs = t0.elapsed().as_secs_f64();
    let stored = a1.state.last_seq.saturating_sub(a0.state.last_seq);
    Ok(IngestRate { per_s: stored as f64 / secs, over_ms: (secs * 1000.0) as u64 })
}

/// Fence mode: each consumer's live registered instances (none without the
/// bucket).
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
    let mut nothing =
        json!({ "name": draft.from, "filter_subject": format!("_cutover.check.{}", draft.from) });
    if let Some(ext) = &draft.external {
        nothing["external"] = ext.json();
    }
    if cfg.get("mirror").is_some() {
        cfg["mirror"] = nothing;
    } else if draft.strategy != cutover_core::plan::Strategy::DualWrite {
        // A dual-write B reads nothing of A (across systems A is not even
        // in its account): its scratch has no source either.
        cfg["sources"] = json!([nothing]);
    }
    cfg["metadata"] = json!({ "nats-cutover.check": draft.to });
    // A stream of that name that is not a scratch of ours is someone's data:
    // never deleted. Ours (a plan that died) is replaced; none there, the
    // delete is still sent first, so a user who may not delete the scratch is
    // refused before it exists ("not found" is the allowed answer, which
    // stream_delete takes as deleted).
    if let Some((raw, _)) = js.stream_info_opt(&scratch).await? {
        if raw["config"]["metadata"]["nats-cutover.check"].as_str() != Some(&draft.to) {
            return Err(Error::Reserved(format!("stream {scratch} exists and is not a scratch stream of nats-cutover (no metadata nats-cutover.check = {to}): plan creates and deletes a stream of that name to try B's configuration, so it refuses to touch it; nothing was changed: rename that stream or choose another name for the new stream", to = draft.to)));
        }
    }
    js.stream_delete(&scratch).await?;
    let (result, mut dropped_duplicate_window) = match js.stream_create(&cfg).await {
        Ok(_) => (Ok(()), false),
        Err(e @ Error::Api { .. }) => (Err(e.to_string()), false),
        Err(e) => return Err(e),
    };
    if result.is_ok() {
        // Accepted is not kept: read back what the server holds.
        let held = js.stream_info(&scratch).await;
        js.stream_delete(&scratch).await?;
        let window = |c: &serde_json::Value| c["duplicate_window"].as_i64().unwrap_or(0);
        dropped_duplicate_window = window(&cfg) > 0 && window(&held?.0["config"]) != window(&cfg)
            || (crate::test_hooks::force_handover()
                && cfg.get("mirror").is_some_and(|m| !m.is_null()));
    }
    Ok(ConfigCheck { scratch, result, dropped_duplicate_window })
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
