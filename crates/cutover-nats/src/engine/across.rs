//! A move across systems (accounts, JetStream domains, leaf nodes, clusters):
//! how B reaches A, and the plan's probes that the subjects sourcing needs
//! cross the boundary, before any write. docs/cross-system.md.
//!
//! The engine itself is unchanged across the boundary: [`Js::across`] sends
//! each request about A to the source connection and everything else (B,
//! its durables, the `CUTOVER` bucket) to the target side.

use crate::api::Js;
use crate::error::{Error, Result};
use cutover_core::compat::{Finding, Verdict};
use cutover_core::plan::{External, Plan, PlanRequest, Strategy};
use futures::StreamExt;
use std::time::{Duration, Instant};

/// The request with `external` filled in: across systems without
/// `--from-api`, A's JetStream domain (`$JS.<domain>.API`, the prefix a
/// server maps to that domain's API: server jetstream_api.go
/// `generateJSMappingTable`); refused when A's side has none (accounts).
/// Strategy dual-write has no `external` (B does not source A): the request
/// is only marked `across`.
pub async fn request(js: &Js, req: &PlanRequest) -> Result<PlanRequest> {
    let mut req = req.clone();
    let Some(src) = js.source_side() else {
        if req.external.is_some() {
            return Err(Error::Input("--from-api names how B reaches A on another system: give the source side's connection too (--from-server or --from-context)".into()));
        }
        return Ok(req);
    };
    if req.strategy == Strategy::DualWrite {
        // B never reads A: no external block, no domain to find; the
        // publishers write each side themselves.
        if req.external.is_some() {
            return Err(Error::Input("--from-api and --from-deliver say how B sources A, and a dual-write B does not source A (the publishers write it): leave them out; the source side's connection is all dual-write needs across systems".into()));
        }
        req.across = true;
        return Ok(req);
    }
    if req.external.is_none() {
        let info = src.account_info().await?;
        let domain = info["domain"].as_str().filter(|d| !d.is_empty());
        let theirs = js.account_info().await?;
        let Some(d) = domain.filter(|d| theirs["domain"].as_str() != Some(*d)) else {
            return Err(Error::Input(format!("A's side has no JetStream domain of its own, so B cannot address A's JetStream API by domain: name the prefix B's account imports A's `$JS.API.CONSUMER.>` under with --from-api (the import's `to` without `.CONSUMER.>`) and the deliver prefix A's account exports with --from-deliver; docs/cross-system.md shows the exports and imports for {}", req.from)));
        };
        req.external = Some(External {
            api: format!("$JS.{d}.API"),
            deliver: None,
            repoint_publishers: false,
            split_publishers: false,
        });
    }
    if let Some(ext) = &mut req.external {
        ext.repoint_publishers |= req.repoint_publishers;
    }
    Ok(req)
}

/// Adds to the plan what [`check_boundary`] finds missing (each unsafe) and
/// whether the publishers reach B from where they are ([`publishers`]).
pub(super) async fn refuse_missing(js: &Js, plan: &mut Plan) -> Result<()> {
    if let Some(ext) = &plan.external {
        let mut found = check_boundary(js, &plan.from, ext).await?;
        let (publishers, split) = publishers(js, plan, ext.repoint_publishers).await?;
        found.push(publishers);
        plan.safe &= !found.iter().any(|f| f.verdict == Verdict::Unsafe);
        plan.findings.extend(found);
        if split {
            plan.split_publishers();
        }
    }
    Ok(())
}

/// Whether a publish on A's side to B's subjects reaches the target side, as
/// the publishers' will after the commit point. The probe, one per subject B
/// takes (wildcards replaced by `_cutover_probe`), is published on A's side
/// with `Nats-Expected-Stream: <B>`, so A, which captures it, refuses it
/// before storing anything (server stream.go `processJetStreamMsg`, and
/// `checkMsgHeadersPreClusteredProposal` before a replicated proposal); a
/// core subscriber of that subject on A's side sees it (header
/// `Nats-Cutover-Probe`).
///
/// Where it does not reach and the publishers are repointed, the run splits
/// them (`Plan::split_publishers`: B takes the subjects on its side while A
/// keeps its own), which is exact only if a publish on the target side does
/// not reach A's side either (A would store it too, and B would get it
/// twice: directly and through the source): probed the same way in reverse,
/// and refused if it does. Returns the finding and whether to split.
async fn publishers(js: &Js, plan: &Plan, repoint: bool) -> Result<(Finding, bool)> {
    let src = js.source_side().expect("across systems");
    let mut stranded = vec![];
    let mut back = vec![];
    for s in &plan.b_final_subjects {
        let subject = probe_subject(s);
        if !reaches(src, js, &subject, &plan.to).await? {
            stranded.push(s.clone());
            if repoint && reaches(js, src, &subject, &plan.to).await? {
                back.push(s.clone());
            }
        }
    }
    // A bucket's clients find it by its stream's name, and a same-name
    // move's hop 1 copies it into `KV_<B>_CUTOVER`: repointed before hop 2
    // they would find no bucket, so they are not split. A stream's
    // publishers are, its mirror handed over to sourcing A first
    // (`Plan::split_publishers`).
    let bucket = plan.strategy == Strategy::Mirror
        && plan.b_final_subjects.iter().any(|s| s.starts_with("$KV.") || s.starts_with("$OBJ."));
    let (verdict, reason) = match (stranded.is_empty(), repoint, back.is_empty()) {
        // The publishers cannot be split: they are repointed at the commit
        // point (hop 2's creates the bucket under its name). Until
        // then A stores what they publish (a publish from the target side
        // that reaches A too is mirrored to B once); from the commit point
        // a publish still sent on A's side finds no stream there ("no
        // responders": nothing stored) until its client reconnects to the
        // target side, where B answers.
        (false, true, _) if bucket => (Verdict::ChangedOnPurpose, format!("publishes on A's side to {0} do not reach the target side: repoint the publishers (and a bucket's clients) to the target side at the commit point (the run says `commit point passed`); until then {1} stores what they write, and from then on a write still sent on A's side is answered \"no responders\" (nothing is stored) until its client reconnects to the target side, where {2} answers it; nothing is lost or stored twice", stranded.join(", "), plan.from, plan.to)),
        (true, _, _) => (Verdict::Ok, "a publish on A's side to B's subjects reaches the target side (probed; A refused the probe unstored): publishers keep their connection and move with the subjects at the commit point".to_string()),
        (false, true, true) => (Verdict::ChangedOnPurpose, format!("publishes on A's side to {0} do not reach the target side, nor the reverse: repoint the publishers (--repoint-publishers). After the consumers moved, {1} takes the subjects on the target side while it still sources {2}{3}, and {2} keeps them: repoint the publishers to the target side any time from then (those not yet repointed publish into {2}, whose messages reach {1} through the source; a retry sent once into each lands once); then confirm with `nats-cutover run --resume {2}.{1} --proceed` (or pass --seal-when-idle): the run waits for it before it seals {2}", stranded.join(", "), plan.to, plan.from, if plan.strategy == Strategy::Mirror { " (a mirror until then: it is handed over to sourcing A first, and takes the subjects one retry horizon later)" } else { "" })),
        (false, true, false) => (Verdict::Unsafe, format!("publishes on A's side to {} do not reach the target side, but publishes on the target side to {} reach A's: with the publishers repointed there, {} would store each of their messages too and {} would get it twice (directly and through the source); let the publishes cross both ways (across accounts, B's account exports service `{}` and A's account imports it), or stop the target side's subjects from crossing to A's side", stranded.join(", "), back.join(", "), plan.from, plan.to, stranded.join(", "))),
        (false, false, _) if stranded.iter().any(|s| s.starts_with("$KV.") || s.starts_with("$OBJ.")) => (Verdict::Unsafe, format!("publishes on A's side to {0} do not reach the target side: a bucket's writes cannot follow it there on their own (between JetStream domains a leaf connection never lets `$KV.>` and `$OBJ.>` cross: server jetstream_api.go `denyAllClientJs`; across accounts B's account would export service `{0}` and A's import it): repoint the bucket's clients to the target side and pass --repoint-publishers at the commit point)", stranded.join(", "))),
        (false, false, _) => (Verdict::Unsafe, format!("publishes on A's side to {0} do not reach the target side, so after the commit point publishers there would find no stream: across accounts, B's account exports service `{0}` and A's account imports it; across a leaf node, the connection must allow it; or repoint the publishers to the target side and pass --repoint-publishers", stranded.join(", "))),
    };
    let split = !stranded.is_empty() && repoint && back.is_empty() && !bucket;
    let finding = Finding {
        scope: "plan".into(),
        setting: "publishers".into(),
        from: plan.from.clone(),
        to: plan.to.clone(),
        verdict,
        reason,
    };
    Ok((finding, split))
}

/// A concrete subject `pattern` matches: each wildcard token made
/// `_cutover_probe`.
fn probe_subject(pattern: &str) -> String {
    pattern
        .split('.')
        .map(|t| if t == "*" || t == ">" { "_cutover_probe" } else { t })
        .collect::<Vec<_>>()
        .join(".")
}

/// Whether a publish on `from` to `subject`, which the stream there refuses
/// (`Nats-Expected-Stream: to`), reaches a subscriber on `to_side`.
async fn reaches(from: &Js, to_side: &Js, subject: &str, to: &str) -> Result<bool> {
    let err = |e: &dyn std::fmt::Display| Error::Request {
        what: format!("probe {subject}"),
        reason: e.to_string(),
    };
    let mut sub = to_side.client.subscribe(subject.to_string()).await.map_err(|e| err(&e))?;
    to_side.client.flush().await.map_err(|e| err(&e))?;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Expected-Stream", to);
    headers.insert("Nats-Cutover-Probe", "1");
    let deadline = Instant::now() + from.timeout();
    while Instant::now() < deadline {
        let (s, h) = (subject.to_string(), headers.clone());
        from.client.publish_with_headers(s, h, "probe".into()).await.map_err(|e| err(&e))?;
        from.client.flush().await.map_err(|e| err(&e))?;
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(100), sub.next()).await {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Probes, without writing to either stream, that the three paths sourcing
/// uses cross the boundary (server stream.go `setupSourceConsumer`): B's
/// server asks `<api>.CONSUMER.CREATE.<A>…` and gets an answer; A's messages
/// come back on `<deliver>.…` (`$JS.S.…` without a deliver prefix); B's
/// flow-control replies go to `$JS.FC.…`. A missing one rarely makes an
/// error at run time: sourcing just never starts, so the plan refuses it,
/// naming what to add.
pub async fn check_boundary(js: &Js, from: &str, ext: &External) -> Result<Vec<Finding>> {
    let src = js.source_side().expect("across systems");
    let mut missing = vec![];
    if !api_answers(js, from, ext).await? {
        missing.push(finding("external api", &ext.api, format!("B's side gets no answer from A's JetStream API at `{api}.CONSUMER.CREATE.{from}`: across accounts, A's account exports service `$JS.API.CONSUMER.>` and B's account imports it with `to: \"{api}.CONSUMER.>\"`; across a leaf node, --from-api is `$JS.<A's domain>.API` and the leaf connection lets `{api}.>` through", api = ext.api)));
    }
    let deliver = ext.deliver.clone().unwrap_or_else(|| "$JS.S".into());
    if !crosses(src, js, &deliver).await? {
        let accounts = match &ext.deliver {
            Some(d) => format!("across accounts, A's account exports stream `{d}.>` and B's account imports it"),
            None => "across accounts, name a deliver prefix with --from-deliver that A's account exports as a stream and B's account imports".into(),
        };
        missing.push(finding("external deliver", &deliver, format!("A's messages would not reach B: subject `{deliver}.>` does not cross from A's side to B's: {accounts}; across a leaf node, the connection must allow `{deliver}.>`")));
    }
    if !crosses(js, src, "$JS.FC").await? {
        missing.push(finding("flow control", "$JS.FC.>", "B's flow-control replies would not reach A: `$JS.FC.>` does not cross from B's side to A's: A's account exports service `$JS.FC.>` and B's account imports it; across a leaf node, the connection must allow `$JS.FC.>`".into()));
    }
    Ok(missing)
}

fn finding(setting: &str, from: &str, reason: String) -> Finding {
    Finding {
        scope: "plan".into(),
        setting: setting.into(),
        from: from.into(),
        to: "missing".into(),
        verdict: Verdict::Unsafe,
        reason,
    }
}

/// Whether a consumer-create request for A through `api` gets an answer. The
/// body names no stream, so the server refuses it (jetstream_api.go
/// `jsConsumerCreateRequest`: "stream name in subject does not match
/// request") and creates nothing: any answer proves the path and its reply.
async fn api_answers(js: &Js, from: &str, ext: &External) -> Result<bool> {
    let subject = format!("{}.CONSUMER.CREATE.{from}", ext.api);
    let deadline = Instant::now() + js.timeout();
    // Interest across a leaf connection or an import may take a moment to be
    // known after connecting: no responders is asked again until the deadline.
    loop {
        match js.client.request(subject.clone(), "{}".into()).await {
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {}
            Err(e) if e.kind() == async_nats::RequestErrorKind::TimedOut => return Ok(false),
            Err(e) => {
                return Err(Error::Request {
                    what: format!("probe {subject}"),
                    reason: e.to_string(),
                })
            }
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a message published on `from` under `prefix` reaches a subscriber
/// on `to` (core NATS, no stream captures `_cutover_probe` subjects under these
/// prefixes). Published again until it arrives or the request timeout
/// passes: subscription interest crosses a leaf node or an import
/// asynchronously.
async fn crosses(from: &Js, to: &Js, prefix: &str) -> Result<bool> {
    let subject = format!("{prefix}._cutover_probe.{}", crate::read::nuid());
    let err = |e: &dyn std::fmt::Display| Error::Request {
        what: format!("probe {subject}"),
        reason: e.to_string(),
    };
    let mut sub = to.client.subscribe(subject.clone()).await.map_err(|e| err(&e))?;
    to.client.flush().await.map_err(|e| err(&e))?;
    let deadline = Instant::now() + from.timeout();
    while Instant::now() < deadline {
        from.client.publish(subject.clone(), "probe".into()).await.map_err(|e| err(&e))?;
        from.client.flush().await.map_err(|e| err(&e))?;
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(100), sub.next()).await {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_probe_subject_is_one_each_pattern_matches() {
        assert_eq!(super::probe_subject("orders.>"), "orders._cutover_probe");
        assert_eq!(super::probe_subject("orders.*.eu"), "orders._cutover_probe.eu");
        assert_eq!(super::probe_subject("orders.eu"), "orders.eu");
    }
}
