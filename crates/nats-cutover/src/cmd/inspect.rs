//! `nats-cutover inspect STREAM [--consumer C]`.

use crate::cli::{ConnArgs, InspectArgs};
use crate::error::Result;
use crate::exit::ExitCode;
use crate::render::{nanos, table};
use cutover_core::checkpoint::{assess, Assessment};
use cutover_core::model::{ConsumerInfo, StreamInfo};
use cutover_core::names;
use cutover_nats::engine::{source_progress, SourceProgress};
use cutover_nats::Js;
use serde_json::json;

/// A consumer as read: the server's raw info, its view, and its assessment.
type Inspected = (serde_json::Value, ConsumerInfo, Assessment);

pub async fn run(conn: &ConnArgs, json_out: bool, a: InspectArgs) -> Result<ExitCode> {
    check_names(&a)?;
    super::one_system(conn, "inspect")?;
    let js = super::connect(conn).await?;
    let Some((raw, info)) = js.stream_info_opt(&a.stream).await? else {
        return Err(match cutover_nats::engine::missing_mid_change(&js, &a.stream).await? {
            Some(why) => cutover_nats::Error::Journal(why).into(),
            None => cutover_nats::Error::StreamNotFound(a.stream.clone()).into(),
        });
    };
    let sources = read_sources(&js, &a.stream, &info).await?;
    let consumers = read_consumers(&js, &a).await?;
    if json_out {
        print_json(&js, raw, &sources, &consumers)?;
        return Ok(ExitCode::Ok);
    }
    print_stream(&js, &info);
    for s in &sources {
        print_source(s);
    }
    for (_, c, a) in &consumers {
        print_consumer(c, a);
    }
    Ok(ExitCode::Ok)
}

/// Refuses a stream or consumer name the server would not accept.
fn check_names(a: &InspectArgs) -> Result<()> {
    names::stream(&a.stream)?;
    for c in &a.consumer {
        names::consumer(c)?;
    }
    Ok(())
}

/// How far the stream has sourced each of its (local) sources.
async fn read_sources(js: &Js, stream: &str, info: &StreamInfo) -> Result<Vec<SourceProgress>> {
    let mut sources = vec![];
    for s in &info.config.sources {
        if s.external.is_some() {
            continue;
        }
        sources.push(source_progress(js, stream, &s.name).await?);
    }
    Ok(sources)
}

/// The consumers named with --consumer (all of the stream's if none), each
/// read and assessed.
async fn read_consumers(js: &Js, a: &InspectArgs) -> Result<Vec<Inspected>> {
    let names = if a.consumer.is_empty() {
        js.consumer_names(&a.stream).await?
    } else {
        a.consumer.clone()
    };
    let mut consumers = vec![];
    for n in &names {
        let (craw, c) = js.consumer_info(&a.stream, n).await?;
        consumers.push((craw, c.clone(), assess(&c)));
    }
    Ok(consumers)
}

/// The whole inspection as one JSON document (--json).
fn print_json(
    js: &Js,
    raw: serde_json::Value,
    sources: &[SourceProgress],
    consumers: &[Inspected],
) -> Result<()> {
    let doc = json!({
        "server_version": js.server_version().map(|v| v.to_string()),
        "stream": raw,
        "sources": sources,
        "consumers": consumers.iter().map(|(raw, _, a)| json!({ "info": raw, "assessment": a })).collect::<Vec<_>>(),
    });
    outln!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

/// The stream's heading and its settings table.
fn print_stream(js: &Js, info: &StreamInfo) {
    let c = &info.config;
    outln!(
        "Stream {} (server {})",
        c.name,
        js.server_version().map(|v| v.to_string()).unwrap_or_default()
    );
    outln!("{}", table(&["setting", "value"], &stream_rows(info)));
}

/// The rows of the stream's settings table.
fn stream_rows(info: &StreamInfo) -> Vec<Vec<String>> {
    let c = &info.config;
    vec![
        vec![
            "subjects".into(),
            if c.subjects.is_empty() { "-".into() } else { c.subjects.join(", ") },
        ],
        vec![
            "retention / storage / replicas".into(),
            format!("{} / {} / {}", c.retention, c.storage, c.num_replicas.max(1)),
        ],
        vec![
            "discard / max_msgs / max_bytes / max_age".into(),
            format!("{} / {} / {} / {}", c.discard, c.max_msgs, c.max_bytes, nanos(c.max_age)),
        ],
        vec!["duplicate_window".into(), nanos(c.duplicate_window)],
        vec![
            "sealed / deny_delete / allow_direct".into(),
            format!("{} / {} / {}", c.sealed, c.deny_delete, c.allow_direct),
        ],
        vec![
            "messages (first..last)".into(),
            format!(
                "{} ({}..{}), {} deleted",
                info.state.messages,
                info.state.first_seq,
                info.state.last_seq,
                info.state.num_deleted
            ),
        ],
        vec![
            "mirror".into(),
            c.mirror.as_ref().map(|m| m.name.clone()).unwrap_or_else(|| "-".into()),
        ],
    ]
}

/// One source's catch-up, by sequences.
fn print_source(s: &SourceProgress) {
    outln!();
    outln!(
        "Source {}: origin last seq {}, newest sourced origin seq {}, {} (the lag field says {}; sequences are compared because lag freezes when nothing flows)",
        s.origin,
        s.origin_last_seq,
        s.sourced_origin_seq.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
        if s.caught_up { "caught up" } else { "NOT caught up" },
        s.reported_lag.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
    );
}

/// One consumer: heading, state table, verdict and its reasoning.
fn print_consumer(c: &ConsumerInfo, a: &Assessment) {
    outln!();
    let kind = if c.config.is_push() { "push" } else { "pull" };
    outln!(
        "Consumer {} ({kind}, ack {}, filter {})",
        c.name,
        c.config.ack_policy,
        if c.config.filters().is_empty() { "-".into() } else { c.config.filters().join(",") }
    );
    outln!(
        "{}",
        table(
            &[
                "delivered (stream/consumer)",
                "ack floor",
                "pending",
                "ack pending",
                "redelivered",
                "waiting",
                "paused"
            ],
            &[vec![
                format!("{}/{}", c.delivered.stream_seq, c.delivered.consumer_seq),
                format!("{}/{}", c.ack_floor.stream_seq, c.ack_floor.consumer_seq),
                c.num_pending.to_string(),
                c.num_ack_pending.to_string(),
                c.num_redelivered.to_string(),
                c.num_waiting.to_string(),
                c.paused.to_string(),
            ]]
        )
    );
    outln!("  {}", verdict(a));
    for line in &a.reasoning {
        outln!("  - {line}");
    }
}

/// What the assessment says of the checkpoint, in a line.
fn verdict(a: &Assessment) -> String {
    match (a.settled, a.stable) {
        (true, true) => {
            format!("settled and paused: checkpoint F = {} is exact", a.checkpoint.unwrap_or(0))
        }
        (true, false) => {
            format!(
                "settled right now at {} (not paused, so it can move)",
                a.checkpoint.unwrap_or(0)
            )
        }
        _ => "not settled".into(),
    }
}
