//! The manifests source: reads Services, EndpointSlices and Nodes from YAML or JSON files, as `kubectl get -o yaml` prints them.

use crate::model::{ApiObject, Model};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
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
    let mut objects = Vec::new();
    let bad = load_each(path, &mut |obj| objects.push(obj))?;
    Ok(Loaded { objects, bad })
}

/// Reads the manifests straight into a model for node `node_name`, each object filed as it is
/// decoded (a 30k-service cluster's objects would take more memory than its model). Returns
/// the model and a warning for each object skipped.
pub fn load_model(path: &Path, node_name: &str) -> Result<(Model, Vec<String>), ManifestError> {
    let mut model = Model::default();
    let mut warnings = Vec::new();
    let bad = load_each(path, &mut |obj| {
        if let Err(e) = model.apply(&obj, node_name) {
            warnings.push(e.to_string());
        }
    })?;
    let skipped = bad.iter().map(|b| format!("skipping {} in {}: {}", b.what, b.path.display(), b.reason));
    warnings.splice(0..0, skipped);
    Ok((model, warnings))
}

/// Reads the manifests, handing each decoded object to `each`; returns the objects that could
/// not be decoded.
fn load_each(path: &Path, each: &mut dyn FnMut(ApiObject)) -> Result<Vec<BadObject>, ManifestError> {
    let mut sink = Sink { each, bad: Vec::new() };
    for file in manifest_files(path)? {
        let text = std::fs::read_to_string(&file).map_err(|source| ManifestError::Io { path: file.clone(), source })?;
        if file.extension().and_then(|e| e.to_str()) == Some("json") {
            parse_json(&file, &text, &mut sink)?;
            continue;
        }
        for doc in parse_yaml(&file, &text)? {
            collect(&file, doc, &mut sink);
        }
    }
    Ok(sink.bad)
}

/// Where decoded objects go.
struct Sink<'a> {
    each: &'a mut dyn FnMut(ApiObject),
    bad: Vec<BadObject>,
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

/// Parses a JSON file into `out`. A list's items are decoded one at a time, never as one tree:
/// a 30k-service list is 22 MB of JSON and would take ten times that as a tree.
fn parse_json(path: &Path, text: &str, out: &mut Sink) -> Result<(), ManifestError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let result = Document { path, out }.deserialize(&mut de).and_then(|()| de.end());
    result.map_err(|e| ManifestError::Parse { path: path.to_path_buf(), line: e.line() as u64, message: e.to_string() })
}

/// Parses multi-document YAML.
fn parse_yaml(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
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

/// A top-level JSON document: its `items` array (a list's) is filed item by item as it is
/// read; any other document is filed whole.
struct Document<'a, 's> {
    path: &'a Path,
    out: &'a mut Sink<'s>,
}

impl<'de> DeserializeSeed<'de> for Document<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Document<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object or list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut fields = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value_seed(Items { path: self.path, out: &mut *self.out })?;
            } else {
                fields.insert(key, map.next_value()?);
            }
        }
        if !fields.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List")) {
            collect(self.path, Value::Object(fields), self.out);
        }
        Ok(())
    }

    /// A bare array of objects is taken as a list's items.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Items { path: self.path, out: self.out }.visit_seq(seq)
    }
}

/// A list's `items`, filed one by one.
struct Items<'a, 's> {
    path: &'a Path,
    out: &'a mut Sink<'s>,
}

impl<'de> DeserializeSeed<'de> for Items<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of Kubernetes objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<Value>()? {
            collect(self.path, item, self.out);
        }
        Ok(())
    }

    /// `"items": null`: an empty list.
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Files one document: a known kind, a `List` of them, or something the proxy ignores.
/// Documents are consumed, not copied: a 30k-service list is large.
fn collect(path: &Path, mut doc: Value, out: &mut Sink) {
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
        Ok(Some(obj)) => (out.each)(obj),
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
    node_name: String,
    interval: std::time::Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    send: impl Fn(Model) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("manifests".into()).spawn(move || {
        let mut seen = None;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let now = fingerprint(&path);
            if seen.as_ref() != Some(&now) {
                seen = Some(now);
                match load_model(&path, &node_name) {
                    Ok((model, warnings)) => {
                        for w in warnings {
                            log::warn!("{w}");
                        }
                        send(model);
                    }
                    Err(e) => log::error!("keeping the previous manifests: {e}"),
                }
            }
            std::thread::sleep(interval);
        }
    })
}
