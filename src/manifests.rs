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
        for doc in parse_documents(&file, &text)? {
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
fn collect(path: &Path, doc: Value, out: &mut Loaded) {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    if kind == "List" || kind.ends_with("List") {
        if let Some(Value::Array(items)) = doc.get("items") {
            for item in items {
                collect(path, item.clone(), out);
            }
        }
        return;
    }
    let decoded = match kind.as_str() {
        "Service" => serde_json::from_value(doc.clone()).map(|s| ApiObject::Service(Box::new(s))),
        "EndpointSlice" => serde_json::from_value(doc.clone()).map(|s| ApiObject::EndpointSlice(Box::new(s))),
        "Node" => serde_json::from_value(doc.clone()).map(|s| ApiObject::Node(Box::new(s))),
        _ => {
            log::debug!("{}: ignoring object of kind {kind:?}", path.display());
            return;
        }
    };
    match decoded {
        Ok(obj) => out.objects.push(obj),
        Err(e) => {
            out.bad.push(BadObject { path: path.to_path_buf(), what: describe(&kind, &doc), reason: e.to_string() })
        }
    }
}

fn describe(kind: &str, doc: &Value) -> String {
    let meta = doc.get("metadata");
    let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str).unwrap_or("?").to_string();
    format!("{kind} {}/{}", field("namespace"), field("name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(name: &str, text: &str) -> Result<Loaded, ManifestError> {
        let dir = std::env::temp_dir().join(format!("kube-nftproxy-manifests-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let loaded = load(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        loaded
    }

    #[test]
    fn yaml_documents_and_lists_are_read_in_order() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: x}\n---\n\
                    apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n\
                    apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n}}\n\
                    - {apiVersion: discovery.k8s.io/v1, kind: EndpointSlice, addressType: IPv4, endpoints: [], metadata: {name: s}}\n";
        let loaded = load_text("a.yaml", text).unwrap();
        let kinds: Vec<&str> = loaded
            .objects
            .iter()
            .map(|o| match o {
                ApiObject::Service(_) => "Service",
                ApiObject::Node(_) => "Node",
                ApiObject::EndpointSlice(_) => "EndpointSlice",
            })
            .collect();
        assert_eq!(kinds, ["Service", "Node", "EndpointSlice"]);
        assert!(loaded.bad.is_empty());
    }

    #[test]
    fn objects_of_the_wrong_shape_are_reported_not_fatal() {
        let text = "kind: Service\nmetadata: {name: a, namespace: x}\nspec: {ports: 5}\n---\nkind: Node\nmetadata: {name: n}\n";
        let loaded = load_text("b.yaml", text).unwrap();
        assert_eq!(loaded.objects.len(), 1);
        assert_eq!(loaded.bad.len(), 1);
        assert_eq!(loaded.bad[0].what, "Service x/a");
    }

    #[test]
    fn unparsable_files_name_file_and_line() {
        let err = load_text("c.yaml", "kind: Service\nmetadata:\n  name: [unclosed\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("c.yaml:") && matches!(err, ManifestError::Parse { line: 3.., .. }), "{msg}");
        let err = load_text("d.json", "{\n \"kind\": \"Service\",\n oops\n}").unwrap_err();
        assert!(matches!(err, ManifestError::Parse { line: 3, .. }), "{err}");
    }

    #[test]
    fn a_missing_path_is_an_io_error() {
        assert!(matches!(load(Path::new("/nonexistent/kube-nftproxy")), Err(ManifestError::Io { .. })));
    }
}
