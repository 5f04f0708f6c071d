//! `nats-cutover verify`: parse, call `cutover_nats::verify`, render. Exit 0
//! only when everything holds, 6 (NOT_VERIFIED) when something does not.

use super::progress::{detect, Mode};
use crate::cli::{ConnArgs, VerifyArgs};
use crate::error::{CliError, Result};
use crate::exit::ExitCode;
use crate::render::{self, table};
use cutover_core::dual::DualReport;
use cutover_core::journal::migration_id;
use cutover_core::names;
use cutover_core::plan::Strategy;
use cutover_core::verify::{AuditReport, Counts, Report};
use cutover_nats::engine;
use cutover_nats::verify::{verify, VerifyOptions, VerifyProgress};
use cutover_nats::verify_dual::verify_dual;
use indicatif::{ProgressBar, ProgressStyle};

pub async fn run(conn: &ConnArgs, json_out: bool, a: VerifyArgs) -> Result<ExitCode> {
    let id = match (&a.migration, &a.from, &a.to) {
        (Some(id), _, _) => id.clone(),
        (None, Some(from), Some(to)) => {
            names::stream(from)?;
            names::stream(to)?;
            match conn.across() && from == to {
                // A same-name move across systems: its hop 1's id.
                true => migration_id(from, &format!("{from}_CUTOVER")),
                false => migration_id(from, to),
            }
        }
        _ => {
            return Err(CliError::Flag(
                "name the migration: --migration FROM.TO, or --from A --to B".into(),
            ))
        }
    };
    for c in &a.consumer {
        names::consumer(c)?;
    }
    let js = super::connect_across(conn, super::from_of(&id)).await?;
    let Some(j) = engine::list(&js).await?.into_iter().find(|j| j.id == id) else {
        return Err(CliError::NoMigration(format!(
            "no migration {id:?} on this server; `nats-cutover status` lists them"
        )));
    };
    if let Some(code) = same_name(&js, &j, json_out).await? {
        return Ok(code);
    }
    if j.plan.strategy == Strategy::DualWrite {
        if a.audit.is_some() {
            return Err(CliError::Flag("--audit is not supported for dual-write migrations yet: they are verified by msg-id across both streams (docs/verify.md)".into()));
        }
        let report = verify_dual(&js, &id, &a.consumer, a.first).await?;
        if json_out {
            outln!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print_dual(&report);
        }
        return Ok(if report.holds { ExitCode::Ok } else { ExitCode::NotVerified });
    }
    let opts = VerifyOptions {
        consumers: a.consumer.clone(),
        audit: a.audit.clone(),
        first_n: a.first,
        ..Default::default()
    };
    let bar = (detect(json_out) == Mode::Spinner).then(|| {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template("{msg:>14} {bar:30} {pos}/{len} {per_sec} eta {eta}")
                .unwrap(),
        );
        b
    });
    let on_progress = |p: VerifyProgress| {
        if let Some(b) = &bar {
            b.set_message(p.phase);
            b.set_length(p.total.max(p.done));
            b.set_position(p.done);
        }
    };
    let report = verify(&js, &id, &opts, &on_progress).await;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let report = report?;
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if report.holds { ExitCode::Ok } else { ExitCode::NotVerified })
}

/// A same-name move across systems, once its temporary stream is gone (a
/// newcomer found no `verify` that would run after one): the mirror hops
/// kept every sequence (up to the split, where hop 1 split the publishers),
/// so the proof is the source side's sealed stream against the target
/// side's under the same name, message by message at each sequence
/// (subject and payload; after a split, by origin), and every moved durable on the
/// target side. A message the target no longer has counts as removed by
/// its own limits only when a later message on its subject is there (a KV
/// key written again after the move); otherwise it is missing. `None`:
/// not such a migration (or its temporary stream still exists: verify it
/// as a move).
async fn same_name(
    js: &cutover_nats::Js,
    j: &cutover_core::journal::Journal,
    json_out: bool,
) -> Result<Option<ExitCode>> {
    use cutover_nats::api::{Lookup, Via};
    let (Some(src), Some(cutover_core::plan::InPlaceHop::Out), true) =
        (js.source_side(), j.plan.in_place, j.plan.external.is_some())
    else {
        return Ok(None);
    };
    let target = js.target_only();
    if target.stream_info_opt(&j.to).await?.is_some() {
        return Ok(None);
    }
    let name = &j.from;
    let Some((_, b)) = target.stream_info_opt(name).await? else {
        return Err(CliError::NoMigration(format!(
            "{name} is not on the target side yet (hop 2 of its move not done): run the move's command again, then verify"
        )));
    };
    let (_, a) = src.stream_info(name).await?;
    // Publishers split in hop 1 (`Journal::shared`): up to the split the
    // target holds A's messages at their sequences; after it, what it
    // sourced from A is interleaved with what was published into it
    // directly, so A's later messages are found by their origin (the
    // `Nats-Stream-Source` header hop 1's source wrote, which hop 2's
    // mirror kept).
    let mut by_origin = std::collections::HashMap::new();
    if let Some(at) = j.shared {
        for seq in at.b_seq + 1..=b.state.last_seq {
            if let Some(n) = target.get_msg(name, seq, Lookup::Exact, Via::Leader).await? {
                if let Some(o) = n.origin_seq(name)? {
                    by_origin.insert(o, n);
                }
            }
        }
    }
    let split_at = j.shared.map(|at| at.origin_seq);
    let (mut checked, mut removed_later, mut by_origin_checked) = (0u64, 0u64, 0u64);
    let (mut differ, mut missing) = (vec![], vec![]);
    for seq in a.state.first_seq..=a.state.last_seq.min(j.a_final_seq.unwrap_or(u64::MAX)) {
        let Some(m) = src.get_msg(name, seq, Lookup::Exact, Via::Leader).await? else { continue };
        // The target's copy (after the split: found by origin), and from
        // where a later message on its subject says its limits removed it.
        let after_split = j.shared.filter(|at| seq > at.origin_seq);
        let (copy, later_from) = match after_split {
            Some(at) => (by_origin.remove(&seq), at.b_seq + 1),
            None => (target.get_msg(name, seq, Lookup::Exact, Via::Leader).await?, seq + 1),
        };
        match copy {
            Some(n) if n.subject == m.subject && n.payload == m.payload => {
                checked += 1;
                by_origin_checked += u64::from(after_split.is_some());
            }
            Some(_) => differ.push(seq),
            None => match target.next_matching(name, later_from, &m.subject, false).await? {
                Some(_) => removed_later += 1,
                None => missing.push(seq),
            },
        }
    }
    let mut durables_missing = vec![];
    for c in &j.consumers {
        if target.consumer_info_opt(name, &c.name).await?.is_none() {
            durables_missing.push(c.name.clone());
        }
    }
    let holds = differ.is_empty() && missing.is_empty() && durables_missing.is_empty();
    let report = serde_json::json!({
        "kind": "verify_same_name", "migration": j.id, "stream": name, "holds": holds,
        "source": {"first_seq": a.state.first_seq, "last_seq": a.state.last_seq, "messages": a.state.messages},
        "target": {"first_seq": b.state.first_seq, "last_seq": b.state.last_seq, "messages": b.state.messages},
        "checked": checked, "removed_by_target_limits": removed_later,
        "split_at_origin_seq": split_at, "matched_by_origin": by_origin_checked,
        "differ": differ, "missing": missing,
        "durables": j.consumers.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        "durables_missing": durables_missing,
    });
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "Verification of the move of {name} to the target side under its name ({}): {}\n{} message(s) of the source side's {name} (sequences {}..{}) read: {checked} on the target side with the same subject and payload ({}), {removed_later} since removed there by its limits (a later message on the subject), {} different, {} missing; durables on the target side: {} of {}",
            j.id,
            if holds { "HOLDS" } else { "DOES NOT HOLD" },
            checked + removed_later + (differ.len() + missing.len()) as u64,
            a.state.first_seq,
            a.state.last_seq,
            match split_at {
                Some(at) => format!("at the same sequence up to {at}, where the publishers split; the {by_origin_checked} after it by their origin, the target numbering its own"),
                None => "each at the same sequence".to_string(),
            },
            differ.len(),
            missing.len(),
            j.consumers.len() - report["durables_missing"].as_array().map_or(0, |v| v.len()),
            j.consumers.len()
        );
    }
    Ok(Some(if holds { ExitCode::Ok } else { ExitCode::NotVerified }))
}

pub fn print_report(r: &Report) {
    print_heading(r);
    print_consumers(r);
    print_slip(r);
    if let Some(au) = &r.audit {
        print_audit(r, au);
    }
    if !r.offenders.is_empty() {
        print_offenders(r);
    }
}

/// The verdict, how much was read how fast, and where B's messages came from.
fn print_heading(r: &Report) {
    let verdict = if r.holds { "HOLDS" } else { "DOES NOT HOLD" };
    outln!("Verification of {} ({} -> {}): {verdict}", r.migration, r.from, r.to);
    if let Some(rs) = &r.read {
        outln!(
            "read {} messages of {} and {} in {} ({})",
            render::thousands(rs.messages),
            r.from,
            r.to,
            render::ms(rs.ms),
            render::rate(rs.per_sec)
        );
    }
    let b = &r.streams.b;
    outln!(
        "{}: {} sourced from {}, {} published directly, {} from elsewhere",
        r.to,
        b.sourced,
        r.from,
        b.direct,
        b.other
    );
    if !r.stranded.is_empty() {
        outln!(
            "stranded on {}: durable(s) {} were not moved (created by an application after the plan): they receive nothing new there; bind their applications to {} and delete them",
            r.from,
            r.stranded.join(", "),
            r.to
        );
    }
}

/// Each consumer's counts, settled state, F and start (with the journal's
/// start where the new durable's differs).
fn print_consumers(r: &Report) {
    let rows: Vec<Vec<String>> = r
        .consumers
        .iter()
        .map(|c| {
            let mut row = render::counts_cells(c);
            row.push(if c.b_start == c.journal_b_start {
                c.b_start.to_string()
            } else {
                format!("{} (journal {})", c.b_start, c.journal_b_start)
            });
            row
        })
        .collect();
    outln!();
    let headers = [&render::COUNTS_HEADERS[..], &["settled", "F (old)", "start (new)"]].concat();
    outln!("{}", table(&headers, &rows));
}

/// Direct publishes that duplicated a sourced message, and what was compared.
fn print_slip(r: &Report) {
    match &r.streams.slip {
        Some(s) => outln!(
            "\nslipped duplicates: {} (direct publishes {}..{} within {} ms of the first: {} ids compared with {} sourced messages)",
            r.streams.slipped_duplicates, s.first_direct_seq, s.last_direct_seq, s.window_ms, s.direct_ids, s.sourced_compared
        ),
        None => outln!("\nslipped duplicates: 0 (no direct publish with a Nats-Msg-Id)"),
    }
}

/// The applications' audit records against what was delivered, summed over
/// the consumers.
fn print_audit(r: &Report, au: &AuditReport) {
    let sum = |f: fn(&Counts) -> u64| r.consumers.iter().map(|c| f(&c.counts)).sum::<u64>();
    let pending: u64 = r.consumers.iter().filter_map(|c| c.audit_pending).sum();
    outln!(
        "audit {}: {} records; lost {}, processed more than once {}, unknown {}; {} still in processing not judged; {} of other consumers, {} unreadable",
        au.source,
        au.records,
        sum(|c| c.audit_lost),
        sum(|c| c.audit_duplicated),
        sum(|c| c.audit_unknown),
        pending,
        au.other_consumers,
        au.unreadable
    );
}

/// A dual-write migration's verdict: the dual point's proof and each
/// consumer's two sides.
fn print_dual(r: &DualReport) {
    let verdict = if r.holds { "HOLDS" } else { "DOES NOT HOLD" };
    outln!(
        "Verification of {} ({} -> {}, dual-write, by msg-id): {verdict}",
        r.migration,
        r.from,
        r.to
    );
    outln!("read {} messages of {} and {} of {}", r.read.0, r.from, r.read.1, r.to);
    outln!(
        "{} messages of {} after the dual point {}: {} without a copy in {}{}",
        r.a_after_point,
        r.from,
        r.point,
        r.missing_in_b,
        r.to,
        if r.first_missing.is_empty() {
            String::new()
        } else {
            format!(" (first: {:?})", r.first_missing)
        }
    );
    let rows: Vec<Vec<String>> = r
        .consumers
        .iter()
        .map(|c| {
            [
                c.name.clone(),
                c.checkpoint.to_string(),
                c.b_start.to_string(),
                c.old.to_string(),
                c.new.to_string(),
                c.guarded.to_string(),
                c.lost.to_string(),
            ]
            .to_vec()
        })
        .collect();
    outln!();
    outln!(
        "{}",
        table(
            &["consumer", "F (old)", "start (new)", "old side", "new side", "guarded", "lost"],
            &rows
        )
    );
    outln!("guarded: messages the new durable delivers again whose id was processed from {} up to F; the idempotency guard skips them. A lower bound: the old durable ran on beside the new one, and what its instances processed after F was skipped on the new side too (counted here as new side; the guard bucket records each)", r.from);
    for c in r.consumers.iter().filter(|c| !c.first_lost.is_empty()) {
        outln!("{} lost (first): {:?}", c.name, c.first_lost);
    }
}

/// The first offending message of each kind.
fn print_offenders(r: &Report) {
    outln!("\noffending messages (the first of each kind; all are counted above):");
    let rows: Vec<Vec<String>> = r
        .offenders
        .iter()
        .map(|o| {
            let tail = vec![render::opt(o.subject.as_deref()), o.detail.clone()];
            [render::offender_cells(o), tail].concat()
        })
        .collect();
    outln!(
        "{}",
        table(&["kind", "consumer", "A seq", "B seq", "msg id", "subject", "what"], &rows)
    );
}
