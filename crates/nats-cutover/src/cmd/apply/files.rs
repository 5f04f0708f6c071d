//! The files `apply` reads: paths given, directories walked for `*.json`,
//! `*.yaml` and `*.yml`; each file's documents (one JSON value, or YAML's
//! `---`-separated documents) as assets. Every file is read and checked
//! before anything connects: one bad file stops the apply, naming it.

use crate::error::{CliError, Result};
use cutover_core::desired::{self, Asset};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const EXTENSIONS: &[&str] = &["json", "yaml", "yml"];

/// Every asset of `paths`, in file order; a stream described twice is
/// refused, naming both places.
pub fn assets(paths: &[PathBuf]) -> Result<(Vec<Asset>, usize)> {
    let mut files = vec![];
    for p in paths {
        collect(p, true, &mut files)?;
    }
    if files.is_empty() {
        return Err(CliError::File(format!(
            "no *.json, *.yaml or *.yml file under {}: give the files (or directories) that hold the desired state",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        )));
    }
    let mut out: Vec<Asset> = vec![];
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for f in &files {
        for (i, doc) in documents(f)?.into_iter().enumerate() {
            let origin = match &doc.1 {
                true => format!("{}, document {}", f.display(), i + 1),
                false => f.display().to_string(),
            };
            if doc.0.is_null() {
                continue; // an empty YAML document (a trailing `---`)
            }
            let a = desired::from_document(&doc.0, &origin)
                .map_err(|e| CliError::File(format!("{e}; nothing was changed")))?;
            if let Some(first) = seen.insert(a.stream.clone(), origin.clone()) {
                return Err(CliError::File(format!(
                    "{origin}: {} is described twice (first in {first}): keep one description per asset; nothing was changed",
                    a.label()
                )));
            }
            out.push(a);
        }
    }
    Ok((out, files.len()))
}

/// `p` itself (given on the command line: any name) or, in a directory,
/// every file with one of [`EXTENSIONS`], sorted.
fn collect(p: &Path, given: bool, out: &mut Vec<PathBuf>) -> Result<()> {
    let meta = std::fs::metadata(p)
        .map_err(|e| CliError::File(format!("cannot read {}: {e}", p.display())))?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|e| CliError::File(format!("cannot list {}: {e}", p.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            collect(&e, false, out)?;
        }
    } else if given || has_extension(p) {
        out.push(p.to_path_buf());
    }
    Ok(())
}

fn has_extension(p: &Path) -> bool {
    p.extension().and_then(|e| e.to_str()).is_some_and(|e| EXTENSIONS.contains(&e))
}

/// The documents of file `f`, and whether it is a YAML file (whose
/// documents are numbered in messages).
fn documents(f: &Path) -> Result<Vec<(Value, bool)>> {
    let text = std::fs::read_to_string(f)
        .map_err(|e| CliError::File(format!("cannot read {}: {e}", f.display())))?;
    let yaml = f.extension().and_then(|e| e.to_str()).is_some_and(|e| e == "yaml" || e == "yml");
    if !yaml {
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            CliError::File(format!("{} is not valid JSON: {e}; it holds one stream configuration (`nats stream info --json`'s output, or its `config`); nothing was changed", f.display()))
        })?;
        return Ok(vec![(v, false)]);
    }
    let mut docs = vec![];
    for (i, d) in serde_norway::Deserializer::from_str(&text).enumerate() {
        let v = Value::deserialize(d).map_err(|e| {
            CliError::File(format!(
                "{}, document {}: not valid YAML: {e}; nothing was changed",
                f.display(),
                i + 1
            ))
        })?;
        docs.push((v, true));
    }
    Ok(docs)
}
