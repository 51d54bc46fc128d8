//! The metrics' names, types and buckets against upstream's, and the endpoints they are
//! served on.

use super::*;

#[test]
fn upstream_names_types_and_buckets_are_exported() {
    let m = Metrics::new().expect("metrics");
    Metrics::observe_families(&m.sync_duration, &Family::ALL, Duration::from_millis(3));
    m.count_health("/healthz", 503);
    let text = m.text();
    for line in [
        "# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram",
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.004\"} 1",
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv6\",le=\"16.384\"} 1",
        "# TYPE kubeproxy_sync_proxy_rules_no_local_endpoints_total gauge",
        "# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_total counter",
        "kubeproxy_proxy_healthz_total{code=\"503\"} 1",
        "kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0\"} 0",
        "kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"300\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
    }
    assert_eq!(programming_buckets().len(), 3 + 59 + 12 + 7);
    assert_eq!(answer(&m, "/proxyMode", None).body, "nftables");
    assert_eq!(answer(&m, "/nothing", None).code, 404);
    let info = text.lines().find(|l| l.starts_with("kubernetes_build_info{")).expect("kubernetes_build_info");
    for label in ["major=", "minor=", "git_version=\"v", "git_commit=", "git_tree_state=", "build_date="] {
        assert!(info.contains(label), "{label} in {info}");
    }
    assert!(info.contains("compiler=\"rustc\"") && info.contains("go_version=\"") && info.ends_with("} 1"), "{info}");
}

#[test]
fn healthz_runs_the_ping_check_and_slis_count_it() {
    let m = Metrics::new().expect("metrics");
    assert_eq!(answer(&m, "/healthz", None).body, "ok");
    assert_eq!(answer(&m, "/healthz", Some("verbose")).body, "[+]ping ok\nhealthz check passed\n");
    assert_eq!(answer(&m, "/healthz/ping", None).body, "ok", "the check's own path, not counted");
    let text = answer(&m, "/metrics/slis", None).body;
    let total = "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"} 2";
    assert!(text.lines().any(|l| l == total), "{text}");
    assert!(!m.text().contains("kubernetes_healthcheck"), "not in /metrics: a registry of their own");
}
