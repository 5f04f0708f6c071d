//! What `apply` prints: per asset its diff (`-current` / `+desired` lines of
//! the changed fields, as `nats stream edit --dry-run` shows them) and its
//! action, the streams no file describes, the counts; then, with `--yes`,
//! every asset's outcome. With `--json` the same as one JSON object per
//! line (docs/apply.md documents the shapes).

use super::{Action, Item};
use crate::exit::ExitCode;
use crate::render;
use cutover_core::desired::Change;
use serde_json::{json, Value};

pub struct Plan<'a> {
    pub items: &'a [Item],
    pub others: &'a [String],
    pub nfiles: usize,
    pub parallel: u16,
}

/// The counts by action, in the order of the summary line (moves only
/// across systems, where they are the rule).
fn counts(items: &[Item]) -> Vec<(&'static str, usize)> {
    ["unchanged", "create", "update", "change in place", "move", "refused"]
        .into_iter()
        .map(|k| (k, items.iter().filter(|i| i.action.name() == k).count()))
        .filter(|(k, n)| *k != "move" || *n > 0)
        .collect()
}

fn key(action: &str) -> String {
    action.replace(' ', "_")
}

/// One asset as data.
pub(super) fn item_json(i: &Item) -> Value {
    let mut v = json!({
        "kind": i.asset.kind.as_str(),
        "name": i.asset.name,
        "stream": i.asset.stream,
        "origin": i.asset.origin,
        "action": key(i.action.name()),
    });
    match &i.action {
        Action::Unchanged => {}
        Action::Create(config) => v["config"] = config.clone(),
        Action::Update { changes, .. } => v["changes"] = json!(changes),
        Action::InPlace { changes, refused_by_server, outline, .. } => {
            v["changes"] = json!(changes);
            v["resume"] = json!(i.resume);
            v["server_refuses"] = json!(refused_by_server
                .iter()
                .map(|(f, why)| json!({"field": f, "reason": why}))
                .collect::<Vec<_>>());
            if let Some(o) = outline {
                v["in_place"] = outline_json(o);
            }
        }
        Action::Refused { changes, reason, fix } => {
            v["changes"] = json!(changes);
            v["reason"] = json!(reason);
            v["fix"] = json!(fix);
        }
        Action::Move { changes, outline, .. } => {
            v["changes"] = json!(changes);
            v["resume"] = json!(i.resume);
            if let Some(o) = outline {
                v["move"] = outline_json(o);
            }
        }
    }
    if let Some(e) = &i.earlier {
        v["earlier"] = e.clone();
    }
    if let Some(o) = &i.outcome {
        v["outcome"] = json!(o);
        v["ms"] = json!(i.ms);
    }
    v
}

/// A live change's (or move's) two hops as data: the copies, the estimate,
/// the durables.
fn outline_json(o: &cutover_core::plan::InPlaceOutline) -> Value {
    json!({
        "via": o.via,
        "copies_messages": o.copies_messages,
        "copies_bytes": o.copies_bytes,
        "estimate_ms": o.estimate_ms,
        "consumers": o.hop1.consumers.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
    })
}

fn summary_line(items: &[Item], others: usize) -> String {
    let parts: Vec<String> = counts(items).iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!("Summary: {}; {others} not in files (left alone)", parts.join(", "))
}

/// The plan; `dry` says nothing will be done.
pub fn plan(p: &Plan, json_out: bool, dry: bool, code: ExitCode) {
    if json_out {
        let summary: serde_json::Map<String, Value> =
            counts(p.items).iter().map(|(k, n)| (key(k), json!(n))).collect();
        let mut summary = Value::Object(summary);
        summary["not_in_files"] = json!(p.others.len());
        outln!(
            "{}",
            json!({
                "kind": "apply_plan",
                "dry_run": dry,
                "files": p.nfiles,
                "parallel": p.parallel,
                "assets": p.items.iter().map(item_json).collect::<Vec<_>>(),
                "not_in_files": p.others,
                "summary": summary,
                // The dry run's verdict; with --yes the outcome decides.
                "exit_code": if dry { json!(code.code()) } else { Value::Null },
            })
        );
        return;
    }
    let from = match p.nfiles {
        0 => "the source side (every stream, as it is)".to_string(),
        n => format!("{n} files"),
    };
    outln!(
        "Apply: {} assets from {from}; live changes run {} at a time (--parallel), each its own journaled migration",
        p.items.len(),
        p.parallel
    );
    for i in p.items {
        outln!();
        let head = format!("{} ({})", i.asset.label(), i.asset.origin);
        match &i.action {
            Action::Unchanged => outln!("{head}: unchanged"),
            Action::Create(config) => {
                outln!("{head}: create");
                for (k, v) in config.as_object().into_iter().flatten() {
                    outln!("  + {k}: {v}");
                }
            }
            Action::Update { changes, .. } => {
                outln!("{head}: update (the server takes it)");
                diff_lines(changes);
            }
            Action::InPlace { changes, refused_by_server, outline, .. } => {
                let why: Vec<String> =
                    refused_by_server.iter().map(|(f, w)| format!("{f}: {w}")).collect();
                if i.resume {
                    outln!("{head}: change in place, resumed (an earlier apply or run left it under way; its journal continues it)");
                } else {
                    outln!("{head}: change in place ({})", why.join("; "));
                }
                diff_lines(changes);
                if let Some(o) = outline {
                    outln!("  {}", in_place_line(o));
                }
            }
            Action::Refused { changes, reason, fix } => {
                outln!("{head}: refused: {reason}");
                diff_lines(changes);
                outln!("  to make it possible: {fix}");
            }
            Action::Move { changes, outline, .. } => {
                if i.resume {
                    outln!("{head}: move to the target side, resumed (an earlier apply or run left it under way; its journal continues it)");
                } else {
                    outln!("{head}: move to the target side under its name");
                }
                diff_lines(changes);
                if let Some(o) = outline {
                    outln!("  {}", move_line(o));
                }
            }
        }
        if let Some(e) = i.earlier.as_ref().filter(|e| e["state"] != "done") {
            outln!(
                "  an earlier apply left it {} ({})",
                e["state"].as_str().unwrap_or("?"),
                e["action"].as_str().unwrap_or("?")
            );
        }
    }
    if !p.others.is_empty() {
        outln!("\nNot in files, left alone: {}", p.others.join(", "));
    }
    outln!("\n{}", summary_line(p.items, p.others.len()));
    if dry {
        let next = match code {
            ExitCode::Ok => "nothing to do",
            ExitCode::Incompatible => "some assets are refused: `apply --yes` would change nothing (add --skip-refused to apply the others)",
            _ => "`apply --yes` carries it out",
        };
        outln!("Dry run: nothing was changed; {next}.");
    }
}

/// `-current` / `+desired` lines of the changed fields.
fn diff_lines(changes: &[Change]) {
    for c in changes {
        outln!("  - {}: {}{}", c.field, c.current, human(&c.field, &c.current));
        outln!("  + {}: {}{}", c.field, c.desired, human(&c.field, &c.desired));
    }
}

/// A duration field's value readable too (`max_age: 3600000000000 (1h)`).
fn human(field: &str, v: &Value) -> String {
    let durations = ["max_age", "duplicate_window", "subject_delete_marker_ttl"];
    match v.as_i64() {
        Some(ns) if durations.contains(&field) && ns > 0 => format!(" ({})", render::nanos(ns)),
        _ => String::new(),
    }
}

/// The in-place plan's summary: the copies, the estimate, what
/// applications see.
fn in_place_line(o: &cutover_core::plan::InPlaceOutline) -> String {
    let consumers: Vec<&str> = o.hop1.consumers.iter().map(|c| c.name.as_str()).collect();
    format!(
        "two mirror hops through {via}: copies {} messages ({}) twice, about {}; durables moved and back under their names at their positions: {}; publishers meet two commit windows (no responders for a few ms, a retry with the same msg-id is stored once); consumers bound by name see their durable gone for a moment and resume where they were (docs/in-place.md)",
        render::thousands(o.copies_messages),
        render::bytes(o.copies_bytes),
        render::duration(std::time::Duration::from_millis(o.estimate_ms)),
        if consumers.is_empty() { "none".to_string() } else { consumers.join(", ") },
        via = o.via,
    )
}

/// The move's plan in one line: the hops, the copies, what applications see.
fn move_line(o: &cutover_core::plan::InPlaceOutline) -> String {
    let consumers: Vec<&str> = o.hop1.consumers.iter().map(|c| c.name.as_str()).collect();
    format!(
        "two mirror hops: to {via} on the target side, then back to the name there; copies {} messages ({}) twice, about {}; durables moved under their names at their positions: {}; the source side's stream is sealed and kept; applications reconnect to the target side once it is done (docs/cross-system.md)",
        render::thousands(o.copies_messages),
        render::bytes(o.copies_bytes),
        render::duration(std::time::Duration::from_millis(o.estimate_ms)),
        if consumers.is_empty() { "none".to_string() } else { consumers.join(", ") },
        via = o.via,
    )
}

/// Every asset's outcome after `--yes`.
pub fn outcome(items: &[Item], json_out: bool) {
    if json_out {
        outln!(
            "{}",
            json!({ "kind": "apply_result", "assets": items.iter().map(item_json).collect::<Vec<_>>() })
        );
        return;
    }
    outln!("\nOutcome:");
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            vec![
                i.asset.label(),
                i.action.name().to_string(),
                i.outcome.clone().unwrap_or_else(|| "not started".into()),
                i.ms.map(|ms| render::ms(ms as f64)).unwrap_or_default(),
            ]
        })
        .collect();
    outln!("{}", render::table(&["asset", "action", "outcome", "took"], &rows));
}
