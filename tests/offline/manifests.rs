//! The manifests source: documents, lists, wrong shapes and unparsable files.

use crate::common::Scratch;
use kube_nftproxy::manifests::{Loaded, ManifestError, load};
use kube_nftproxy::model::ApiObject;
use std::path::Path;

fn load_text(name: &str, text: &str) -> Result<Loaded, ManifestError> {
    let dir = Scratch::new("manifests");
    dir.write(name, text);
    load(&dir.path(name))
}

#[test]
fn yaml_documents_and_lists_are_read_in_order() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: x}\n---\n\
                apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n\
                apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n}}\n\
                - {apiVersion: discovery.k8s.io/v1, kind: EndpointSlice, addressType: IPv4, endpoints: [], metadata: {name: s}}\n\
                - {apiVersion: networking.k8s.io/v1, kind: ServiceCIDR, metadata: {name: k}, spec: {cidrs: [10.96.0.0/16]}}\n";
    let loaded = load_text("a.yaml", text).unwrap();
    let kinds: Vec<&str> = loaded
        .objects
        .iter()
        .map(|o| match o {
            ApiObject::Service(_) => "Service",
            ApiObject::Node(_) => "Node",
            ApiObject::EndpointSlice(_) => "EndpointSlice",
            ApiObject::ServiceCidr(_) => "ServiceCIDR",
        })
        .collect();
    assert_eq!(kinds, ["Service", "Node", "EndpointSlice", "ServiceCIDR"]);
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
    let dir = Scratch::new("manifests-model");
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
    dir.write("l.json", &list);
    let (model, warnings) = kube_nftproxy::manifests::load_model(&dir.0, "n").unwrap();
    assert_eq!(model.services.len(), 1, "only the valid Service is in the model");
    assert_eq!(warnings.len(), 2, "one warning each for the bad IP and the unnamed object: {warnings:?}");
}

fn yaml_service(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: ns\n  labels: {{app: a, tier: b}}\n\
         spec:\n  clusterIP: 10.96.{}.{}\n  ports:\n  - {{name: http, port: 80, targetPort: 8080, protocol: TCP}}\n  \
         - {{name: https, port: 443, targetPort: 8443, protocol: TCP}}\n",
        i / 250,
        i % 250 + 1
    )
}

#[test]
fn yaml_of_a_big_cluster_is_read_whole() {
    let docs: Vec<String> = (0..3000).map(yaml_service).collect();
    let loaded = load_text("docs.yaml", &docs.join("---\n")).unwrap();
    assert_eq!(loaded.objects.len(), 3000, "more than 1,024 documents");
    let items: Vec<String> = (0..12_000).map(|i| format!("- {}", yaml_service(i).replace('\n', "\n  "))).collect();
    let list = format!("apiVersion: v1\nkind: List\nitems:\n{}", items.join("\n"));
    let loaded = load_text("list.yaml", &list).unwrap();
    assert_eq!(loaded.objects.len(), 12_000, "a List of more than 250,000 nodes");
}

#[test]
fn yaml_that_amplifies_itself_is_still_refused() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(", ")));
    }
    let err = load_text("laughs.yaml", &text).unwrap_err();
    assert!(matches!(err, ManifestError::Parse { .. }), "{err}");
}

#[test]
fn list_items_that_are_not_a_list_are_an_error_in_yaml_as_in_json() {
    let err = load_text("items.yaml", "apiVersion: v1\nkind: List\nitems: {kind: Service}\n").unwrap_err();
    assert!(err.to_string().contains("items of a List must be a list"), "{err}");
    let err = load_text("items.json", r#"{"kind": "List", "items": {"kind": "Service"}}"#).unwrap_err();
    assert!(matches!(err, ManifestError::Parse { .. }), "{err}");
}

#[test]
fn duplicate_objects_are_reported_naming_both_files_and_the_first_kept() {
    let dir = Scratch::new("dup");
    let svc = |ip: &str| {
        format!(
            "kind: Service\nmetadata: {{name: web, namespace: shop}}\nspec: {{clusterIP: {ip}, ports: [{{port: 80}}]}}\n"
        )
    };
    std::fs::write(dir.0.join("a.yaml"), svc("10.96.0.1")).unwrap();
    std::fs::write(dir.0.join("b.yaml"), svc("10.96.0.2")).unwrap();
    let (model, warnings) = kube_nftproxy::manifests::load_model(&dir.0, "n").unwrap();
    let ports = &model.services[&("shop".to_string(), "web".to_string())];
    assert_eq!(ports[0].cluster_ips, ["10.96.0.1".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("Service shop/web") && warnings[0].contains("b.yaml") && warnings[0].contains("a.yaml")
    );
}

#[test]
fn service_cidrs_are_cluster_scoped_whatever_namespace_a_manifest_gives_them() {
    let dir = Scratch::new("cidrs");
    let cidr = |ns: &str, cidr: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: kubernetes{ns}}}\nspec: {{cidrs: [{cidr}]}}\n"
        )
    };
    std::fs::write(dir.0.join("a.yaml"), cidr("", "10.96.0.0/16")).unwrap();
    std::fs::write(dir.0.join("b.yaml"), cidr(", namespace: x", "10.97.0.0/16")).unwrap();
    let (model, warnings) = kube_nftproxy::manifests::load_model(&dir.0, "n").unwrap();
    assert_eq!(model.service_cidr("kubernetes"), Some(&vec!["10.96.0.0/16".parse().unwrap()]));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("ServiceCIDR /kubernetes is defined again"), "{warnings:?}");
}

#[test]
fn link_loops_fifos_and_hidden_entries_are_passed_over_quickly() {
    let dir = Scratch::new("loops");
    std::fs::create_dir_all(dir.0.join("sub")).unwrap();
    std::fs::write(dir.0.join("sub/svc.yaml"), yaml_service(1)).unwrap();
    std::os::unix::fs::symlink("..", dir.0.join("sub/up")).unwrap();
    std::os::unix::fs::symlink(".", dir.0.join("sub/here")).unwrap();
    std::os::unix::fs::symlink("sub", dir.0.join("again")).unwrap();
    std::os::unix::fs::symlink("sub/svc.yaml", dir.0.join("link.yaml")).unwrap();
    // A ConfigMap volume's hidden copies hold the same objects again.
    std::fs::create_dir_all(dir.0.join("..data")).unwrap();
    std::fs::write(dir.0.join("..data/svc.yaml"), yaml_service(1)).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(dir.0.join("pipe.yaml")).status().unwrap().success());
    let start = std::time::Instant::now();
    let loaded = load(&dir.0).unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(2), "took {:?}", start.elapsed());
    assert_eq!(loaded.objects.len(), 1, "each file once, whatever links lead to it");
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("pipe.yaml: not a regular file"), "{:?}", loaded.warnings);
}

/// A log line names what it read as it is named: a file name (or an object's field) with
/// control characters is logged escaped, one line a message, so it can neither drive the
/// terminal nor forge a log line of its own.
#[test]
fn log_lines_escape_control_characters() {
    let dir = Scratch::new("escape");
    let name = "bad\u{1b}[2J\n[2026-01-01T00:00:00Z INFO  kube_nftproxy] forged.yaml";
    std::fs::write(dir.0.join(name), "kind: Service\nfoo: [").unwrap();
    let out = dry_run_over(&dir.0, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad\\x1b[2J\\n[2026-01-01"), "the file is named, escaped: {err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert!(err.lines().all(|l| l.starts_with("[20") && !l.starts_with("[2026-01-01")), "one line a message: {err}");
}

/// Issue 34: a namespace and a name with a line separator and a right-to-left override reach
/// the log escaped, in both formats: the `namespace/name` of a warning forges no line, and in
/// JSON the line holds them as `\uXXXX` escapes while its strings decode whole.
#[test]
fn names_with_line_separators_and_bidi_controls_are_escaped_in_both_log_formats() {
    let dir = Scratch::new("forge");
    let (ns, name) = ("shop\u{2028}[2026-01-01T00:00:00Z INFO  kube_nftproxy] forged", "web\u{202e}lmth");
    let svc = serde_json::json!({"kind": "Service", "metadata": {"namespace": ns, "name": name},
        "spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}});
    // A second copy: the warning that passes it over names it by `namespace/name`.
    for file in ["a.json", "b.json"] {
        dir.write(file, &svc.to_string());
    }
    let run = |format: &str| {
        let out = dry_run_over(&dir.0, &["--logging-format", format]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains(['\u{2028}', '\u{202e}']), "raw in the {format} log: {err:?}");
        err
    };
    let text = run("text");
    assert!(text.contains("shop\\u{2028}[2026-01-01") && text.contains("web\\u{202e}lmth"), "named, escaped: {text}");
    assert!(text.lines().all(|l| l.starts_with("[20") && !l.starts_with("[2026-01-01")), "{text}");
    let json = run("json");
    let msgs: Vec<String> = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .filter_map(|l| l["msg"].as_str().map(String::from))
        .collect();
    assert!(msgs.iter().any(|m| m.contains(&format!("{ns}/{name}"))), "decoded whole: {msgs:?}");
    assert!(json.contains(r"shop\u2028[2026") && json.contains(r"web\u202elmth"), "{json}");
}

/// A manifests file of many bad objects, and objects that each lose a part, makes a bounded
/// log in the dry run: the first ten named, then a count.
#[test]
fn the_dry_runs_warnings_about_bad_manifests_are_bounded() {
    let dir = Scratch::new("many-bad");
    let bad: Vec<serde_json::Value> = (0..500)
        .map(|i| {
            serde_json::json!({"kind": "Service", "metadata": {"namespace": "shop", "name": format!("bad-{i}")},
                "spec": {"clusterIP": "10.96.0.1", "externalIPs": ["not-an-ip"], "ports": [{"port": "x"}]}})
        })
        .collect();
    dir.write("bad.json", &serde_json::json!({"kind": "List", "items": bad}).to_string());
    let out = dry_run_over(&dir.0, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let warnings = err.lines().filter(|l| l.contains("WARN")).count();
    assert!(warnings <= 12, "{warnings} warning lines:\n{err}");
    assert!(err.contains("490 more skipped"), "{err}");
}

/// The binary's dry run for node-a over the manifests in `dir`, with `extra` flags, logging
/// at info.
fn dry_run_over(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"))
        .args(["--dry-run", "--hostname-override=node-a"])
        .args(extra)
        .arg("--manifests")
        .arg(dir)
        .env("RUST_LOG", "info")
        .output()
        .expect("run the dry run")
}
