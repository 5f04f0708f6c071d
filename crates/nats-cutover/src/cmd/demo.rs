//! `nats-cutover demo`: a local server, a live workload, a cut-over while it
//! runs, and the evidence. Everything it starts is stopped and removed on exit,
//! Ctrl-C included. The scenario itself is `cutover_app::scenario`.

use super::progress::{detect, Render};
use crate::cli::DemoArgs;
use crate::exit::{self, Coded};
use crate::render::{self, table};
use cutover_app::load::LoadConfig;
use cutover_app::scenario::{live_cutover, Outcome, ScenarioConfig};
use cutover_core::plan::DEFAULT_RETRY_HORIZON;
use cutover_testkit::{NatsServer, ServerOptions, PINNED_VERSION};
use serde_json::json;
use std::time::Duration;

const STREAM: &str = "ORDERS";
const NEW_STREAM: &str = "ORDERS_V2";
const CONSUMER: &str = "worker";

pub async fn run(json_out: bool, a: DemoArgs) -> anyhow::Result<i32> {
    if a.rate == 0 || a.workers == 0 {
        return Err(Coded(exit::BAD_INPUT, "--rate and --workers must be at least 1".into()).into());
    }
    if a.duration < Duration::from_secs(2) || a.duration > Duration::from_secs(600) {
        return Err(Coded(
            exit::BAD_INPUT,
            "--duration must be between 2s and 10m (the workload is bounded)".into(),
        )
        .into());
    }
    let server =
        NatsServer::start_with(ServerOptions::default()).map_err(|e| Coded(exit::FAILED, e))?;
    if !json_out {
        outln!(
            "nats-server {PINNED_VERSION} on {} (store in {})",
            server.url(),
            server.dir().display()
        );
    }
    let cfg = ScenarioConfig {
        load: LoadConfig {
            stream: STREAM.into(),
            consumer: CONSUMER.into(),
            subject_prefix: "orders".into(),
            rate: a.rate,
            max_messages: (a.rate as u64) * a.duration.as_secs().max(1) * 2,
            duration: a.duration,
            workers: a.workers,
            processing: a.processing,
            batch: 32,
            retry_horizon: DEFAULT_RETRY_HORIZON,
        },
        new_stream: NEW_STREAM.into(),
        // Let the workload settle into a steady state for a third of the run.
        cutover_at: a.duration / 3,
        ack_wait: Duration::from_secs(30),
    };
    let render = Render::new(detect(json_out));
    let outcome = tokio::select! {
        r = async {
            let client = async_nats::connect(server.url()).await?;
            Ok::<_, anyhow::Error>(live_cutover(client, cfg, &render).await?)
        } => r?,
        _ = tokio::signal::ctrl_c() => {
            render.finish();
            errln!("interrupted: stopping the demo server and removing its files");
            drop(server);
            return Ok(exit::INTERRUPTED);
        }
    };
    render.finish();
    // Two independent proofs: the workers' own record (every published id
    // processed once) and `verify`, which reads only the streams and journal.
    let verify = verify_streams(server.url()).await;
    if let Some(path) = &a.report {
        let mut data = crate::report::ReportData::from_outcome(&outcome);
        data.verify = Some(verify.clone());
        crate::report::write(path, &data).map_err(|e| {
            Coded(exit::BAD_INPUT, format!("cannot write report {}: {e}", path.display()))
        })?;
        if !json_out {
            outln!("report: {}", path.display());
        }
    }
    let structural_holds = verify.as_ref().is_ok_and(|r| r.holds);
    if json_out {
        let mut j = summary_json(&outcome);
        j["verify"] = match &verify {
            Ok(r) => json!({ "holds": r.holds, "summary": r.summary }),
            Err(e) => json!({ "holds": false, "error": e }),
        };
        j["verified"] = json!(outcome.verified && structural_holds);
        outln!("{}", serde_json::to_string(&j)?);
    } else {
        print_summary(&outcome);
        match &verify {
            Ok(r) => outln!(
                "verify (streams and journal only): {} ({} checked, {} lost, {} duplicated, {} extra, {} gaps, {} overlaps)",
                if r.holds { "holds" } else { "DOES NOT HOLD" },
                r.summary.checked, r.summary.lost, r.summary.duplicated, r.summary.extra, r.summary.gaps, r.summary.overlaps
            ),
            Err(e) => outln!("verify failed: {e}"),
        }
    }
    Ok(if outcome.verified && structural_holds { exit::OK } else { exit::NOT_VERIFIED })
}

async fn verify_streams(url: &str) -> Result<cutover_core::verify::Report, String> {
    let client = async_nats::connect(url).await.map_err(|e| e.to_string())?;
    let js = cutover_nats::Js::new(client, Duration::from_secs(5));
    let id = cutover_core::journal::migration_id(STREAM, NEW_STREAM);
    cutover_nats::verify::verify(&js, &id, &cutover_nats::verify::VerifyOptions::default(), &|_| {})
        .await
        .map_err(|e| e.to_string())
}

pub fn summary_json(o: &Outcome) -> serde_json::Value {
    let l = &o.load;
    json!({
        "kind": "demo",
        "server_version": o.server_version,
        "published": l.published,
        "processed": l.processed_total,
        "processed_unique": l.processed_unique,
        "lost": l.lost.len(),
        "duplicated": l.duplicated.len(),
        "extra": l.extra.len(),
        "publish_failures": l.publish_failures,
        "publish_retries": l.publish_retries,
        "max_publish_stall_ms": l.max_publish_stall_ms,
        "max_retried_publish_ms": l.max_retried_publish_ms,
        "max_consumer_gap_ms": l.max_consumer_gap_ms,
        "cutover_ms": o.cutover_ms,
        "steps": o.step_durations().into_iter().map(|(s, ms)| json!({"step": s, "ms": ms})).collect::<Vec<_>>(),
        "consumers": o.journal.consumers,
        "verified": o.verified,
    })
}

fn print_summary(o: &Outcome) {
    let l = &o.load;
    outln!();
    outln!(
        "{}",
        table(
            &["measure", "value"],
            &[
                vec!["published (acked by JetStream)".into(), l.published.to_string()],
                vec![
                    "processed".into(),
                    format!("{} ({} unique)", l.processed_total, l.processed_unique)
                ],
                vec!["lost".into(), l.lost.len().to_string()],
                vec!["duplicated".into(), l.duplicated.len().to_string()],
                vec!["publish retries (same msg-id)".into(), l.publish_retries.to_string()],
                vec![
                    "max publisher stall (any publish)".into(),
                    render::ms(l.max_publish_stall_ms)
                ],
                vec!["max stall of a retried publish".into(), render::ms(l.max_retried_publish_ms)],
                vec!["max consumer gap".into(), render::ms(l.max_consumer_gap_ms)],
                vec!["cut-over duration".into(), render::ms(o.cutover_ms)],
            ]
        )
    );
    outln!();
    let rows: Vec<Vec<String>> =
        o.step_durations().into_iter().map(|(s, ms)| vec![s, render::ms(ms)]).collect();
    outln!("{}", table(&["step", "duration"], &rows));
    for c in &o.journal.consumers {
        outln!("consumer {}: checkpoint F = {} on {}, new durable starts at {} on {} ({} gets), drained in {} ms", c.name, c.checkpoint.unwrap_or(0), o.journal.from, c.b_start.unwrap_or(0), o.journal.to, c.translate_gets.unwrap_or(0), c.drain_ms.unwrap_or(0));
    }
    outln!();
    if o.verified {
        outln!("VERIFIED: every published message was processed exactly once.");
    } else {
        outln!(
            "NOT VERIFIED: lost {:?} duplicated {:?}",
            &l.lost[..l.lost.len().min(10)],
            &l.duplicated[..l.duplicated.len().min(10)]
        );
    }
}
