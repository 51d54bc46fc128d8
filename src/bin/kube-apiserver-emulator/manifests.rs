//! Initial objects from manifest files: YAML (multi-document) or JSON, `kind: List` flattened,
//! directories walked recursively in sorted order.

use crate::resources::Catalog;
use crate::store::{Mode, Store};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Why manifests could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Reading a file or directory.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// A file that does not parse.
    #[error("{0}: {1}")]
    Parse(PathBuf, String),
}

/// Loads every object under `path` into `store`; returns how many were stored.
pub fn load(path: &Path, catalog: &Catalog, store: &Store) -> Result<usize, ManifestError> {
    let mut count = 0;
    for file in files(path)? {
        let text = std::fs::read_to_string(&file).map_err(|e| ManifestError::Io(file.clone(), e))?;
        let docs = parse(&text).map_err(|e| ManifestError::Parse(file.clone(), e))?;
        for obj in docs.into_iter().flat_map(flatten) {
            let (api_version, kind) = (obj["apiVersion"].as_str().unwrap_or(""), obj["kind"].as_str().unwrap_or(""));
            let Some(res) = catalog.by_kind(api_version, kind) else {
                log::warn!("{}: skipping {api_version} {kind}: not a served kind", file.display());
                continue;
            };
            match store.write(res, obj, Mode::Upsert) {
                Ok(_) => count += 1,
                Err(e) => log::warn!("{}: skipping an object: {e}", file.display()),
            }
        }
    }
    Ok(count)
}

fn files(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| ManifestError::Io(path.to_path_buf(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let mut out = Vec::new();
    for p in entries {
        if p.is_dir() {
            out.extend(files(&p)?);
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml" || x == "json") {
            out.push(p);
        }
    }
    Ok(out)
}

/// JSON when it looks like JSON, else multi-document YAML.
fn parse(text: &str) -> Result<Vec<Value>, String> {
    if text.trim_start().starts_with(['{', '[']) {
        return match serde_json::from_str::<Value>(text).map_err(|e| e.to_string())? {
            Value::Array(items) => Ok(items),
            v => Ok(vec![v]),
        };
    }
    let mut options = serde_saphyr::Options::default();
    // Kubernetes manifests are YAML 1.2 in practice: `on`/`n` stay strings.
    options.strict_booleans = true;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = budget.max_documents.max(text.len() / 4);
    budget.max_nodes = budget.max_nodes.max(text.len());
    budget.max_events = budget.max_events.max(text.len().saturating_mul(2));
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(text.len());
    options.budget = Some(budget);
    let docs = serde_saphyr::from_multiple_with_options::<Value>(text, options).map_err(|e| e.to_string())?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// A `List`'s items (recursively), or the object itself.
fn flatten(doc: Value) -> Vec<Value> {
    match doc {
        Value::Object(mut m) if m.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List")) => {
            match m.remove("items") {
                Some(Value::Array(items)) => items.into_iter().flat_map(flatten).collect(),
                _ => Vec::new(),
            }
        }
        v => vec![v],
    }
}
