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

#[test]
fn json_lists_are_read_item_by_item_whatever_the_key_order() {
    let svc = r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "x"}}"#;
    let bad = r#"{"kind": "Service", "metadata": {"name": "b", "namespace": "x"}, "spec": {"ports": 5}}"#;
    let node = r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}"#;
    let items_first = format!(r#"{{"items": [{svc}, {bad}, {node}], "kind": "List", "apiVersion": "v1"}}"#);
    let loaded = load_text("e.json", &items_first).unwrap();
    assert_eq!((loaded.objects.len(), loaded.bad.len()), (2, 1), "a bad item is skipped, not fatal");
    assert_eq!(loaded.bad[0].what, "Service x/b");
    let bare_array = load_text("f.json", &format!("[{svc}, {node}]")).unwrap();
    assert_eq!(bare_array.objects.len(), 2);
    let single = load_text("g.json", svc).unwrap();
    assert!(matches!(single.objects.as_slice(), [ApiObject::Service(_)]));
    let empty = load_text("h.json", r#"{"kind": "List", "items": null}"#).unwrap();
    assert!(empty.objects.is_empty() && empty.bad.is_empty());
}

#[test]
fn a_model_is_loaded_straight_with_a_warning_per_skipped_object() {
    let dir = std::env::temp_dir().join(format!("kube-nftproxy-manifests-{}-model", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svc = |name: &str, ip: &str| {
        format!(
            r#"{{"kind": "Service", "metadata": {{"name": "{name}", "namespace": "x"}}, "spec": {{"clusterIP": "{ip}", "ports": [{{"port": 80}}]}}}}"#
        )
    };
    let list = format!(
        r#"{{"kind": "List", "items": [{}, {}, {{"kind": "Service"}}]}}"#,
        svc("a", "10.0.0.1"),
        svc("b", "300.0.0.1")
    );
    std::fs::write(dir.join("l.json"), list).unwrap();
    let (model, warnings) = kube_nftproxy::manifests::load_model(&dir, "n").unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(model.services.len(), 1, "only the valid Service is in the model");
    assert_eq!(warnings.len(), 2, "one warning each for the bad IP and the unnamed object: {warnings:?}");
}
