//! `apply --report FILE`: the fleet's report, HTML (`FILE`, self-contained)
//! or JSON (`FILE.json`): every asset's action, outcome and time and, for a
//! live change or a move, each hop's journal figures (its phase, its time,
//! and the time of its copy, of its consumers' move and of its publishers'
//! move, which holds the commit window). Written also when the apply failed.

use super::{Action, Item};
use crate::render;
use crate::report::{esc, table, CSS};
use cutover_core::journal::{migration_id, Journal, Step};
use cutover_nats::journal::{IfMissing, JournalStore};
use cutover_nats::Js;
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::Path;

/// One hop's figures from its journal.
fn hop(j: &Journal) -> Value {
    let ms = |step: &Step| {
        j.steps
            .iter()
            .filter(|s| &s.step == step)
            .filter_map(|s| s.ended_ms.map(|e| e.saturating_sub(s.started_ms)))
            .sum::<u64>()
    };
    json!({
        "migration": j.id,
        "phase": j.phase.as_str(),
        "ms": j.updated_ms.saturating_sub(j.started_ms),
        "copy_ms": ms(&Step::CatchUp),
        "consumers_ms": ms(&Step::MoveConsumers),
        "publishers_ms": ms(&Step::MovePublishers) + ms(&Step::Handover),
        "consumers": j.consumers.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        "error": j.error,
    })
}

/// The report as data: the assets (as `--json` shows them) with their hops.
pub async fn data(js: &Js, items: &[Item], parallel: u16, error: Option<&str>) -> Value {
    let store = JournalStore::open(js, IfMissing::ReturnNone).await.ok().flatten();
    let mut assets = vec![];
    for i in items {
        let mut v = super::show::item_json(i);
        let live = matches!(i.action, Action::InPlace { .. } | Action::Move { .. });
        if let (true, Some(store)) = (live, &store) {
            let (s, via) = (&i.asset.stream, format!("{}_CUTOVER", i.asset.stream));
            let mut hops = vec![];
            for id in [migration_id(s, &via), migration_id(&via, s)] {
                if let Ok(Some(j)) = store.load(&id).await {
                    hops.push(hop(&j));
                }
            }
            v["hops"] = json!(hops);
        }
        assets.push(v);
    }
    json!({
        "kind": "apply_report",
        "generated": now(),
        "server": js.target_version().map(|v| v.to_string()).unwrap_or_default(),
        "parallel": parallel,
        "error": error,
        "assets": assets,
    })
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Writes `d` to `path`: JSON when it ends in `.json`, else HTML.
pub fn write(path: &Path, d: &Value) -> std::io::Result<()> {
    if path.extension().is_some_and(|e| e == "json") {
        return std::fs::write(path, serde_json::to_string_pretty(d).unwrap_or_default());
    }
    std::fs::write(path, html(d))
}

fn html(d: &Value) -> String {
    let assets = d["assets"].as_array().cloned().unwrap_or_default();
    let count = |f: &dyn Fn(&Value) -> bool| assets.iter().filter(|a| f(a)).count();
    let failed = count(&|a| a["outcome"].as_str().is_some_and(|o| o.starts_with("failed")));
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width,initial-scale=1\"><title>nats-cutover apply report</title><style>{CSS}</style></head><body><header><h1>nats-cutover apply: {} assets</h1><p class=meta>server {} &middot; --parallel {} &middot; generated {}</p>",
        assets.len(),
        esc(d["server"].as_str().unwrap_or("")),
        d["parallel"],
        esc(d["generated"].as_str().unwrap_or(""))
    );
    let (class, verdict) = match (d["error"].as_str(), failed) {
        (None, 0) => ("good", "every asset as desired".to_string()),
        (Some(e), _) => ("bad", format!("stopped: {e}")),
        (None, n) => ("bad", format!("{n} failed")),
    };
    let _ = write!(h, "<p class=\"verdict {class}\">{}</p></header>", esc(&verdict));
    let mut by_action: std::collections::BTreeMap<String, usize> = Default::default();
    for a in &assets {
        *by_action.entry(a["action"].as_str().unwrap_or("").replace('_', " ")).or_default() += 1;
    }
    let summary: Vec<String> = by_action.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let _ = write!(h, "<section><h2>Assets</h2><p>{}</p>", esc(&summary.join(", ")));
    let ms = |v: &Value| v.as_u64().map(|m| render::ms(m as f64)).unwrap_or_default();
    let hop_ms =
        |a: &Value, k: usize, f: &str| a["hops"].get(k).map(|x| ms(&x[f])).unwrap_or_default();
    let rows: Vec<Vec<String>> = assets
        .iter()
        .map(|a| {
            vec![
                format!(
                    "{} {}",
                    a["kind"].as_str().unwrap_or(""),
                    a["name"].as_str().unwrap_or("")
                ),
                a["action"].as_str().unwrap_or("").replace('_', " "),
                a["outcome"].as_str().unwrap_or("not started").to_string(),
                ms(&a["ms"]),
                hop_ms(a, 0, "ms"),
                hop_ms(a, 1, "ms"),
                hop_ms(a, 0, "copy_ms"),
                hop_ms(a, 0, "publishers_ms"),
                hop_ms(a, 1, "publishers_ms"),
            ]
        })
        .collect();
    table(
        &mut h,
        &[
            "asset",
            "action",
            "outcome",
            "took",
            "hop 1",
            "hop 2",
            "hop 1 copy",
            "hop 1 publishers' move",
            "hop 2 publishers' move",
        ],
        &rows,
    );
    h.push_str("<p class=note>A hop's publishers' move holds its commit window (and, on a cluster, the wait of one retry horizon before it); its events are in its journal (<code>nats-cutover status ID</code>).</p></section><section><h2>Changes</h2>");
    for a in assets.iter().filter(|a| {
        a["changes"].as_array().is_some_and(|c| !c.is_empty()) || a.get("reason").is_some()
    }) {
        let _ = write!(
            h,
            "<h3>{} {}</h3>",
            esc(a["kind"].as_str().unwrap_or("")),
            esc(a["name"].as_str().unwrap_or(""))
        );
        let rows: Vec<Vec<String>> = a["changes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                vec![
                    c["field"].as_str().unwrap_or("").into(),
                    c["current"].to_string(),
                    c["desired"].to_string(),
                ]
            })
            .collect();
        if !rows.is_empty() {
            table(&mut h, &["field", "current", "desired"], &rows);
        }
        if let Some(r) = a["reason"].as_str() {
            let _ = write!(
                h,
                "<p class=bad>refused: {}</p><p>to make it possible: {}</p>",
                esc(r),
                esc(a["fix"].as_str().unwrap_or(""))
            );
        }
    }
    h.push_str("</section><footer>The same data: <code>apply --report FILE.json</code>.</footer></body></html>");
    h
}
