//! The manifests source: reads Services, EndpointSlices and Nodes from YAML or JSON files, as `kubectl get -o yaml` prints them.

use crate::model::ApiObject;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A manifest file could not be read or parsed; nothing from it is used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid YAML or JSON.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// Path.
        path: PathBuf,
        /// 1-based line of the error (0 if unknown).
        line: u64,
        /// Parser message.
        message: String,
    },
}

/// An object in a manifest that has the right `kind` but not the right shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadObject {
    /// File it came from.
    pub path: PathBuf,
    /// `kind namespace/name` as far as it could be read.
    pub what: String,
    /// Why it could not be decoded.
    pub reason: String,
}

/// What a manifest path holds.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Decoded objects, in file order.
    pub objects: Vec<ApiObject>,
    /// Objects that could not be decoded; the caller warns and skips them.
    pub bad: Vec<BadObject>,
}

/// Reads a file, or every `.yaml`, `.yml` and `.json` file below a directory (sorted by path).
pub fn load(path: &Path) -> Result<Loaded, ManifestError> {
    let mut loaded = Loaded::default();
    for file in manifest_files(path)? {
        let text = std::fs::read_to_string(&file).map_err(|source| ManifestError::Io { path: file.clone(), source })?;
        let docs = parse_documents(&file, &text)?;
        drop(text);
        for doc in docs {
            collect(&file, doc, &mut loaded);
        }
    }
    Ok(loaded)
}

fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let io = |source| ManifestError::Io { path: path.to_path_buf(), source };
    if !path.is_dir() {
        std::fs::metadata(path).map_err(io)?;
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let p = entry.map_err(io)?.path();
        if p.is_dir() {
            files.extend(manifest_files(&p)?);
        } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json")) {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Parses JSON (`.json`) or multi-document YAML (anything else).
pub fn parse_documents(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    if path.extension().and_then(|e| e.to_str()) == Some("json") {
        let doc: Value = serde_json::from_str(text).map_err(|e| ManifestError::Parse {
            path: path.to_path_buf(),
            line: e.line() as u64,
            message: e.to_string(),
        })?;
        return Ok(vec![doc]);
    }
    // YAML 1.1 spellings such as `n` or `on` must stay strings (a node may be named `n`), and
    // `0755` is not an octal number: Kubernetes manifests are YAML 1.2 in practice.
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    serde_saphyr::from_multiple_with_options::<Value>(text, options).map_err(|e| ManifestError::Parse {
        path: path.to_path_buf(),
        line: e.location().map(|l| l.line()).unwrap_or(0),
        message: e.to_string(),
    })
}

/// Files one document: a known kind, a `List` of them, or something the proxy ignores.
/// Documents are consumed, not copied: a 30k-service list is large.
fn collect(path: &Path, mut doc: Value, out: &mut Loaded) {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    if kind == "List" || kind.ends_with("List") {
        if let Some(Value::Array(items)) = doc.get_mut("items").map(Value::take) {
            for item in items {
                collect(path, item, out);
            }
        }
        return;
    }
    let what = describe(&kind, &doc);
    match ApiObject::from_json(doc) {
        Ok(Some(obj)) => out.objects.push(obj),
        Ok(None) => log::debug!("{}: ignoring object of kind {kind:?}", path.display()),
        Err(e) => out.bad.push(BadObject { path: path.to_path_buf(), what, reason: e.to_string() }),
    }
}

fn describe(kind: &str, doc: &Value) -> String {
    let meta = doc.get("metadata");
    let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or("?").to_string();
    format!("{kind} {}/{}", field("namespace"), field("name"))
}

/// A cheap fingerprint of the manifest files: paths, sizes and modification times.
fn fingerprint(path: &Path) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
    manifest_files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p).ok();
            let (len, modified) = meta.map(|m| (m.len(), m.modified().ok())).unwrap_or((0, None));
            (p, len, modified)
        })
        .collect()
}

/// Starts the `manifests` thread: loads `path` now and again whenever its files change
/// (checked every `interval`), handing each complete load to `send`. A load that fails is
/// reported and skipped, so the last good manifests stay in force.
pub fn watch(
    path: PathBuf,
    interval: std::time::Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    send: impl Fn(Vec<ApiObject>) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("manifests".into()).spawn(move || {
        let mut seen = None;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let now = fingerprint(&path);
            if seen.as_ref() != Some(&now) {
                seen = Some(now);
                match load(&path) {
                    Ok(loaded) => {
                        for bad in &loaded.bad {
                            log::warn!("skipping {} in {}: {}", bad.what, bad.path.display(), bad.reason);
                        }
                        send(loaded.objects);
                    }
                    Err(e) => log::error!("keeping the previous manifests: {e}"),
                }
            }
            std::thread::sleep(interval);
        }
    })
}
