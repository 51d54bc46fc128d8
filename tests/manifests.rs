//! The manifests source: documents, lists, wrong shapes and unparsable files.

use kube_nftproxy::manifests::{Loaded, ManifestError, load};
use kube_nftproxy::model::ApiObject;
use std::path::Path;

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
    let text =
        "kind: Service\nmetadata: {name: a, namespace: x}\nspec: {ports: 5}\n---\nkind: Node\nmetadata: {name: n}\n";
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
