//! The manifests source: reads Services, EndpointSlices, Nodes and ServiceCIDRs from YAML or JSON files, as `kubectl get -o yaml` prints them.

mod files;
mod watch;

pub use watch::{SOURCE, Watcher, watch, watch_for};

use crate::model::{ApiObject, Model, ObjectId, ObjectKind};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A manifest file could not be read or parsed; nothing from it is used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file or directory could not be read.
    #[error("{path}: {cause}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Cause (in the message, so not also a `source` that error chains would print again).
        cause: std::io::Error,
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
    /// Everything else passed over: files that are not regular files, duplicate objects.
    pub warnings: Vec<String>,
}

/// Reads a file, or every `.yaml`, `.yml` and `.json` file below a directory (sorted by path).
pub fn load(path: &Path) -> Result<Loaded, ManifestError> {
    let mut loaded = Loaded::default();
    loaded.warnings = read(path, &mut |file, _, doc| match decode(file, doc) {
        Ok(Some(obj)) => loaded.objects.push(obj),
        Ok(None) => {}
        Err(bad) => loaded.bad.push(bad),
    })?;
    Ok(loaded)
}

/// Reads the manifests straight into a model for node `node_name`, each object filed as it is
/// decoded (a 30k-service cluster's objects would take more memory than its model). Returns
/// the model and a warning for each object skipped.
pub fn load_model(path: &Path, node_name: &str) -> Result<(Model, Vec<String>), ManifestError> {
    load_model_for(path, node_name, None)
}

/// As [`load_model`], for the proxy named `proxy_name` (`--service-proxy-name`).
pub fn load_model_for(
    path: &Path,
    node_name: &str,
    proxy_name: Option<&str>,
) -> Result<(Model, Vec<String>), ManifestError> {
    let mut model = Model::default();
    let mut warnings = Vec::new();
    let passed_over = read(path, &mut |file, _, doc| match decode(file, doc) {
        Ok(Some(obj)) => {
            if let Err(e) = model.apply_for(&obj, node_name, proxy_name) {
                warnings.push(e.to_string());
            }
        }
        Ok(None) => {}
        Err(bad) => warnings.push(bad.to_string()),
    })?;
    warnings.splice(0..0, passed_over);
    Ok((model, warnings))
}

impl std::fmt::Display for BadObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "skipping {} in {}: {}", self.what, self.path.display(), self.reason)
    }
}

/// Decodes one object of a kind the proxy follows.
fn decode(path: &Path, doc: Value) -> Result<Option<ApiObject>, BadObject> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let what = describe(&kind, &doc);
    ApiObject::from_json(doc).map_err(|e| BadObject { path: path.to_path_buf(), what, reason: e.to_string() })
}

/// Reads the manifests, handing `each` every object of a kind the proxy follows, once per
/// object: a second copy (same kind, namespace and name) is passed over with a warning
/// naming both files. Returns the warnings about what was passed over.
pub fn read(path: &Path, each: &mut dyn FnMut(&Path, ObjectId, Value)) -> Result<Vec<String>, ManifestError> {
    let found = files::find(path)?;
    let mut first_seen: HashMap<ObjectId, usize> = HashMap::new();
    let mut warnings = found.skipped.iter().map(|s| format!("skipping {s}")).collect::<Vec<_>>();
    for (index, file) in found.files.iter().enumerate() {
        let text = files::read(file)?;
        let mut sink = |doc: Value| {
            let Some(id) = object_id(&doc) else { return };
            if !id.1.1.is_empty()
                && let Some(first) = first_seen.get(&id)
            {
                let (kind, (ns, name)) = &id;
                let at = &found.files[*first];
                warnings.push(format!(
                    "{} {ns}/{name} is defined again in {}; keeping the first, from {}",
                    kind.as_str(),
                    file.display(),
                    at.display()
                ));
                return;
            }
            first_seen.insert(id.clone(), index);
            each(file, id, doc);
        };
        let mut sink = Sink { each: &mut sink };
        if file.extension().and_then(|e| e.to_str()) == Some("json") {
            parse_json(file, &text, &mut sink)?;
            continue;
        }
        for doc in parse_yaml(file, &text)? {
            collect(doc, &mut sink).map_err(|message| ManifestError::Parse { path: file.clone(), line: 0, message })?;
        }
    }
    Ok(warnings)
}

/// The id of a document of a kind the proxy follows; `None` for any other kind. An object
/// that cannot be identified (no name, or a name or namespace that is not a string) gets an
/// empty name: it cannot be told apart from others, nor matched with what it was before.
fn object_id(doc: &Value) -> Option<ObjectId> {
    let kind = match doc.get("kind").and_then(Value::as_str)? {
        "Service" => ObjectKind::Service,
        "EndpointSlice" => ObjectKind::EndpointSlice,
        "Node" => ObjectKind::Node,
        "ServiceCIDR" => ObjectKind::ServiceCidr,
        _ => return None,
    };
    let unnamed = Some((kind, (String::new(), String::new())));
    let meta = doc.get("metadata");
    let namespace = match (kind, meta.and_then(|m| m.get("namespace"))) {
        (ObjectKind::Node | ObjectKind::ServiceCidr, _) => String::new(),
        (_, None | Some(Value::Null)) => "default".into(),
        (_, Some(Value::String(ns))) => ns.clone(),
        (_, Some(_)) => return unnamed,
    };
    match meta.and_then(|m| m.get("name")) {
        Some(Value::String(name)) if !name.is_empty() => Some((kind, (namespace, name.clone()))),
        _ => unnamed,
    }
}

/// Where a file's documents go.
struct Sink<'a> {
    each: &'a mut dyn FnMut(Value),
}

/// Parses a JSON file into `out`. A list's items are decoded one at a time, never as one tree:
/// a 30k-service list is 22 MB of JSON and would take ten times that as a tree.
fn parse_json(path: &Path, text: &str, out: &mut Sink) -> Result<(), ManifestError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let result = Document { out }.deserialize(&mut de).and_then(|()| de.end());
    result.map_err(|e| ManifestError::Parse { path: path.to_path_buf(), line: e.line() as u64, message: e.to_string() })
}

/// Parses multi-document YAML. The parser's budgets grow with the input, so a 100k-service
/// cluster fits, while what guards against amplification (aliases, anchors, nesting) keeps
/// its defaults: without aliases, a YAML stream has no more nodes, events or scalar bytes
/// than it has bytes.
fn parse_yaml(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    // YAML 1.1 spellings such as `n` or `on` must stay strings (a node may be named `n`), and
    // `0755` is not an octal number: Kubernetes manifests are YAML 1.2 in practice.
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    let mut budget = serde_saphyr::Budget::default();
    let size = text.len();
    budget.max_documents = budget.max_documents.max(size / 4);
    budget.max_nodes = budget.max_nodes.max(size);
    budget.max_events = budget.max_events.max(size.saturating_mul(2));
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(size);
    options.budget = Some(budget);
    serde_saphyr::from_multiple_with_options::<Value>(text, options).map_err(|e| ManifestError::Parse {
        path: path.to_path_buf(),
        line: e.location().map(|l| l.line()).unwrap_or(0),
        message: e.to_string(),
    })
}

/// A top-level JSON document: its `items` array (a list's) is filed item by item as it is
/// read; any other document is filed whole.
struct Document<'a, 's> {
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
                map.next_value_seed(Items { out: &mut *self.out })?;
            } else {
                fields.insert(key, map.next_value()?);
            }
        }
        if !fields.get("kind").and_then(Value::as_str).is_some_and(is_list) {
            collect(Value::Object(fields), self.out).map_err(serde::de::Error::custom)?;
        }
        Ok(())
    }

    /// A bare array of objects is taken as a list's items.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Items { out: self.out }.visit_seq(seq)
    }
}

/// A list's `items`, filed one by one.
struct Items<'a, 's> {
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
            collect(item, self.out).map_err(serde::de::Error::custom)?;
        }
        Ok(())
    }

    /// `"items": null`: an empty list.
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

fn is_list(kind: &str) -> bool {
    kind.ends_with("List")
}

/// Files one document: an object, or a `List` of them. Documents are consumed, not copied:
/// a 30k-service list is large. A list whose `items` is not a list is an error, as it is for
/// JSON.
fn collect(mut doc: Value, out: &mut Sink) -> Result<(), String> {
    if !doc.get("kind").and_then(Value::as_str).is_some_and(is_list) {
        (out.each)(doc);
        return Ok(());
    }
    match doc.get_mut("items").map(Value::take) {
        Some(Value::Array(items)) => items.into_iter().try_for_each(|item| collect(item, out)),
        None | Some(Value::Null) => Ok(()),
        Some(other) => Err(format!("the items of a List must be a list, not {other}")),
    }
}

fn describe(kind: &str, doc: &Value) -> String {
    let meta = doc.get("metadata");
    let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or("?").to_string();
    format!("{kind} {}/{}", field("namespace"), field("name"))
}
