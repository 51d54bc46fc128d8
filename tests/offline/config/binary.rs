//! What the binary itself says and writes: the file's faults as printed, `--help` and
//! `--version`, `--write-config-to` read back, JSON logs, a content type refused at start.

use super::*;

#[test]
fn the_binary_takes_the_file_and_says_what_is_wrong_with_it() {
    let cluster = crate::common::root().join("examples/cluster");
    let text = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nhostnameOverride: node-a\n\
                mode: nftables\nnftables: {masqueradeBit: 3}\nfrobnicate: 1\n";
    let good = file("binary", text);
    let out = binary(&["--config", good.to_str().unwrap(), "--dry-run", "--manifests", cluster.to_str().unwrap()]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("meta mark set meta mark or 0x8"),
        "the file's masquerade bit is not in the ruleset:\n{stdout}"
    );
    assert!(
        stderr.contains("WARN") && stderr.contains("\"frobnicate\""),
        "the unknown field is not warned about: {stderr}"
    );
    let bad = file(
        "binary-bad",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nnftables: {masqueradeBit: 99}\n",
    );
    let out = binary(&["--config", bad.to_str().unwrap(), "--dry-run", "--manifests", cluster.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "an invalid file is bad input");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nftables.masqueradeBit"));
}

#[test]
fn help_is_grouped_and_version_says_how_it_was_built() {
    let help = String::from_utf8(binary(&["--help"]).stdout).unwrap();
    for heading in [
        "Where Services and Endpoints come from:",
        "This node:",
        "Rules and syncing:",
        "Health and metrics:",
        "Conntrack:",
        "Start, stop and clean up:",
        "Logging:",
    ] {
        assert!(help.contains(heading), "--help lacks {heading:?}:\n{help}");
    }
    for flag in [
        "--config",
        "--hostname-override",
        "--detect-local-mode",
        "--masquerade-all",
        "--conntrack-min",
        "--oom-score-adj",
        "--proxy-mode",
        "--v <N>",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
    let version = String::from_utf8(binary(&["--version"]).stdout).unwrap();
    let want = format!("kube-nftproxy {}\ncommit: ", env!("CARGO_PKG_VERSION"));
    assert!(
        version.starts_with(&want) && version.contains("built by: rustc ") && version.contains("target: x86_64"),
        "{version}"
    );
}

#[test]
fn write_config_to_writes_what_reads_back_the_same() {
    let dir = Scratch::new("config-write");
    let written = dir.path("written.yaml");
    let cluster = crate::common::root().join("examples/cluster");
    let mut args = vec![
        "--proxy-mode=nftables",
        "--iptables-masquerade-bit=5",
        "--masquerade-all",
        "--iptables-sync-period=45s",
        "--cluster-cidr=10.0.0.0/8,fd00:10::/48",
        "--feature-gates=ComponentFlagz=true",
        "--kube-api-qps=7.5",
        "--hostname-override=node-a",
        "--conntrack-min=7",
        "--full-sync-period=2h",
        "-v=4",
        "--ipvs-scheduler=sh",
    ];
    let mut first = args.clone();
    first.push(format!("--write-config-to={}", written.display()).leak());
    let out = binary(&first);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&written).unwrap();
    assert!(text.contains("kind: KubeProxyConfiguration") && text.contains("kubeNftproxy:"), "{text}");
    let (direct, _) = config::load_from(argv(&args)).unwrap();
    let (read_back, notes) = load_notes(&written, &[]).unwrap();
    assert!(notes.unknown_fields.is_empty() && notes.warnings.is_empty(), "{notes:?}");
    assert_eq!(config::effective(&read_back), config::effective(&direct));
    // And the same dry run.
    args.extend(["--dry-run", "--manifests", cluster.to_str().unwrap()]);
    let config = format!("--config={}", written.display());
    let from_file = ["--dry-run", "--manifests", cluster.to_str().unwrap(), config.as_str()];
    let (a, b) = (binary(&args), binary(&from_file));
    assert!(a.status.success() && b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert!(String::from_utf8_lossy(&a.stdout).contains("0x20"), "the masquerade bit 5 is in the ruleset");
    assert_eq!(String::from_utf8_lossy(&a.stdout), String::from_utf8_lossy(&b.stdout));
}

#[test]
fn logging_format_json_writes_one_object_a_line_fatal_errors_too() {
    let cluster = crate::common::root().join("examples/cluster");
    let parsed = |out: &std::process::Output| -> Vec<serde_json::Value> {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> =
            stderr.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
        assert!(!lines.is_empty(), "nothing logged");
        lines
    };
    // --profiling: a flag that logs (it has no effect here).
    let args = ["--dry-run", "--hostname-override=node-a", "--logging-format=json", "--v=4", "--profiling"];
    let run = binary(&[&args[..], &["--manifests", cluster.to_str().unwrap()]].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    for line in parsed(&run) {
        assert!(line["ts"].is_f64() && line["msg"].is_string() && line["v"].is_u64(), "klog's keys: {line}");
    }
    // In the file too, and the error the binary ends with is a line of its own.
    let file = with("json-logs", "logging: {format: json}\nclusterCIDR: 10.0.0.0/8");
    let config = format!("--config={}", file.display());
    let failed = binary(&["--dry-run", "--hostname-override=node-a", &config, "--manifests", "/nonexistent/manifests"]);
    assert_eq!(failed.status.code(), Some(2), "{}", String::from_utf8_lossy(&failed.stderr));
    let last = parsed(&failed).pop().expect("a line");
    assert!(
        last["msg"].as_str().is_some_and(|m| m.contains("/nonexistent/manifests")) && last.get("v").is_none(),
        "{last}"
    );
}

#[test]
fn an_unknown_api_content_type_is_refused_at_start_with_no_api_server_to_ask() {
    let cluster = crate::common::root().join("examples/cluster");
    let base = ["--dry-run", "--hostname-override=node-a", "--manifests", cluster.to_str().unwrap()];
    let file = with("content-type", "clientConnection: {contentType: application/yaml}");
    let config = format!("--config={}", file.display());
    for extra in [&["--kube-api-content-type=application/yaml"][..], &[&config]] {
        let out = binary(&[&base[..], extra].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("--kube-api-content-type: content type \"application/yaml\" is not supported"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "{extra:?}: a script was printed before the refusal");
    }
    let json = binary(&[&base[..], &["--kube-api-content-type=application/json; charset=utf-8"]].concat());
    assert!(json.status.success(), "{}", String::from_utf8_lossy(&json.stderr));
}
