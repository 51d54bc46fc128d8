//! Distributions' kube-proxy command lines taken with kube-proxy's meaning, and the flags that
//! are taken with no effect or deprecated.

use super::*;

/// The command lines distributions run kube-proxy with.
const GKE: &[&str] = &[
    "--v=2",
    "--iptables-sync-period=1m",
    "--iptables-min-sync-period=10s",
    "--ipvs-sync-period=1m",
    "--ipvs-min-sync-period=10s",
    "--feature-gates=InOrderInformers=true, ComponentFlagz=true",
    "--detect-local-mode=NodeCIDR",
    "--oom-score-adj=-998",
    "--cluster-cidr=10.64.0.0/14",
];

const K3S: &[&str] = &[
    "--proxy-mode=iptables",
    "--conntrack-max-per-core=0",
    "--conntrack-tcp-timeout-close-wait=0s",
    "--conntrack-tcp-timeout-established=0s",
    "--healthz-bind-address=127.0.0.1",
    "--cluster-cidr",
    "10.42.0.0/16",
    "--hostname-override",
    "node-a",
    "--kubeconfig",
    "/var/lib/rancher/k3s/agent/kubeproxy.kubeconfig",
];

#[test]
fn distributions_command_lines_are_taken_with_kube_proxys_meaning() {
    let (f, notes) = config::load_from(argv(GKE)).unwrap();
    assert_eq!((f.sync_period, f.min_sync_period), (Duration::from_secs(60), Duration::from_secs(10)));
    assert_eq!((f.verbosity, f.oom_score_adj, f.detect_local_mode.as_str()), (Some(2), -998, "NodeCIDR"));
    assert!(f.feature_gates.enabled("ComponentFlagz") && notes.warnings.is_empty(), "{:?}", notes.warnings);
    // The same in ipvs mode takes the --ipvs-* periods, and only those.
    let ipvs = [GKE, &["--proxy-mode=ipvs", "--ipvs-sync-period=2m"]].concat();
    let (f, _) = config::load_from(argv(&ipvs)).unwrap();
    assert_eq!((f.sync_period, f.min_sync_period), (Duration::from_secs(120), Duration::from_secs(10)));
    let (f, _) = config::load_from(argv(&["--proxy-mode=ipvs", "--iptables-sync-period=5m"])).unwrap();
    assert_eq!(f.sync_period, Duration::from_secs(30), "--iptables-sync-period is ignored in ipvs mode");
    let (f, notes) = config::load_from(argv(K3S)).unwrap();
    assert_eq!((f.conntrack_max_per_core, f.conntrack_tcp_timeout_established), (0, Duration::ZERO));
    assert_eq!(f.healthz_bind_address, BindAddress(Some("127.0.0.1:10256".parse().unwrap())));
    assert_eq!((f.proxy_mode.as_deref(), f.sync_period), (Some("iptables"), Duration::from_secs(30)));
    assert!(notes.warnings.iter().any(|w| w.contains("iptables")), "{:?}", notes.warnings);
    let (f, _) = config::load_from(argv(&["--kube-api-qps=50", "--kube-api-burst", "100"])).unwrap();
    assert_eq!(
        (f.kube_api_qps, f.kube_api_burst, f.kube_api_content_type.as_str()),
        (50.0, 100, "application/vnd.kubernetes.protobuf")
    );
    // Each runs the binary: a dry run that succeeds.
    let cluster = crate::common::root().join("examples/cluster");
    for args in [GKE, K3S] {
        let mut args = args.to_vec();
        args.extend(["--dry-run", "--hostname-override=node-a", "--manifests", cluster.to_str().unwrap()]);
        args.retain(|a| !a.starts_with("/var/lib") && *a != "--kubeconfig");
        let out = binary(&args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn no_effect_flags_are_taken_and_named_once_deprecated_ports_work() {
    let args = [
        "--profiling",
        "--ipvs-strict-arp=true",
        "--bind-address-hard-fail=false",
        "--config-sync-period=1m",
        "--iptables-localhost-nodeports=false",
        "--ipvs-tcp-timeout=5s",
        "--show-hidden-metrics-for-version=1.35",
    ];
    let (_, notes) = config::load_from(argv(&args)).unwrap();
    let line: Vec<&String> = notes.infos.iter().filter(|i| i.contains("no effect")).collect();
    assert_eq!(line.len(), 1, "{:?}", notes.infos);
    for flag in args {
        let name = flag.split('=').next().unwrap();
        assert!(line[0].contains(name), "{name} is not named: {}", line[0]);
    }
    let (f, notes) = config::load_from(argv(&["--healthz-port=0", "--metrics-port", "0"])).unwrap();
    assert_eq!((f.healthz_bind_address, f.metrics_bind_address), (BindAddress(None), BindAddress(None)));
    assert_eq!(notes.warnings.len(), 2, "deprecated: {:?}", notes.warnings);
    let (f, _) = config::load_from(argv(&["--healthz-bind-address=127.0.0.1", "--healthz-port=9999"])).unwrap();
    assert_eq!(f.healthz_bind_address, BindAddress(Some("127.0.0.1:9999".parse().unwrap())));
    // What kube-proxy refuses is refused, naming the flag.
    for (args, named) in [
        (&["--profiling=maybe"][..], "--profiling"),
        (&["--feature-gates=NFTablesProxyMode=false"], "locked"),
        (&["--log-json-split-stream"], "LoggingAlphaOptions"),
        (&["--kube-api-burst=-1"], "--kube-api-burst"),
        (&["--logging-format=xml"], "--logging-format"),
        (&["--config-sync-period=0s"], "--config-sync-period"),
        (&["--frobnicate"], "--frobnicate"),
    ] {
        let out = binary(&[args, &["--dry-run", "--hostname-override=node-a"]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    // Unlike kube-proxy, a gate this binary does not know (a newer release's) is warned about
    // and the proxy starts: a config written for the next release is no crash loop. 1.37's
    // documented opt-out of NFTablesNetlink is taken.
    let cluster = crate::common::root().join("examples/cluster");
    let newer = ["--feature-gates=Frobnicate=true,NFTablesNetlink=false", "--dry-run", "--hostname-override=node-a"];
    let out = binary(&[&newer[..], &["--manifests", cluster.to_str().unwrap()]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warned: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN") && l.contains("feature gate")).collect();
    assert_eq!(warned.len(), 1, "one warning, naming the unknown gate alone: {stderr}");
    assert!(warned[0].contains("Frobnicate") && !warned[0].contains("NFTablesNetlink"), "{stderr}");
    let gated = ["--log-json-split-stream", "--feature-gates=LoggingAlphaOptions=true"];
    assert!(config::load_from(argv(&gated)).is_ok());
    // As pflag: a flag given again takes the later value; --feature-gates adds up.
    let again = [
        "--iptables-sync-period=1m",
        "--iptables-sync-period=2m",
        "--feature-gates=ComponentFlagz=true",
        "--feature-gates=ComponentStatusz=true",
    ];
    let (f, _) = config::load_from(argv(&again)).unwrap();
    assert_eq!(f.sync_period, Duration::from_secs(120));
    assert!(f.feature_gates.enabled("ComponentFlagz") && f.feature_gates.enabled("ComponentStatusz"));
}
