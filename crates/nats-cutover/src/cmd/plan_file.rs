//! Plan files: `plan --out FILE` writes one (TOML, or JSON by its
//! extension), `run --plan FILE` reads it back, refusing a newer format.

use crate::cli::RunArgs;
use crate::error::{CliError, Result};
use cutover_core::plan::Plan;
use serde_json::Value;

/// The plan `plan --out` wrote to `p`.
pub fn read_plan_file(p: &std::path::Path) -> Result<Plan> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| CliError::File(format!("cannot read plan file {}: {e}", p.display())))?;
    let json = p.extension().is_some_and(|e| e == "json");
    // The format first: a newer plan may not parse as this version's at all.
    let format = if json {
        serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["format"].as_u64())
    } else {
        toml::from_str::<toml::Table>(&text)
            .ok()
            .and_then(|t| t.get("format").and_then(|f| f.as_integer()))
            .map(|f| f.max(0) as u64)
    };
    if let Some(f) = format.filter(|f| *f > u64::from(cutover_core::plan::PLAN_FORMAT)) {
        return Err(CliError::File(format!(
            "plan file {} was written by a newer nats-cutover (plan format {f}; this one reads up to {}); nothing was changed: run it with that version, or make a new plan with this one",
            p.display(),
            cutover_core::plan::PLAN_FORMAT
        )));
    }
    let plan: Result<Plan, String> = if json {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        toml::from_str(&text).map_err(|e| e.to_string())
    };
    plan.map_err(|e| {
        CliError::File(format!(
            "plan file {} is not a plan written by `nats-cutover plan --out`: {e}",
            p.display()
        ))
    })
}

/// TOML has no null: drop them before writing a plan file.
fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect(),
        ),
        Value::Array(a) => {
            Value::Array(a.into_iter().filter(|v| !v.is_null()).map(strip_nulls).collect())
        }
        x => x,
    }
}

pub fn write_plan_file(plan: &Plan, path: &std::path::Path) -> Result<()> {
    let v = serde_json::to_value(plan)?;
    let text = if path.extension().is_some_and(|e| e == "json") {
        serde_json::to_string_pretty(&v)?
    } else {
        toml::to_string_pretty(&strip_nulls(v)).map_err(CliError::PlanToml)?
    };
    std::fs::write(path, text)
        .map_err(|e| CliError::File(format!("cannot write plan file {}: {e}", path.display())))?;
    Ok(())
}

/// The old stream this run is about (--resume's id, --plan's file, --from).
pub fn run_from(a: &RunArgs) -> Result<Option<String>> {
    Ok(if let Some(id) = &a.resume {
        super::from_of(id).map(String::from)
    } else if let Some(p) = &a.plan_file {
        Some(read_plan_file(p)?.from)
    } else {
        a.plan.from.clone()
    })
}
