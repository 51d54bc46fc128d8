//! The configuration as kube-proxy reads it, at the library's level: kubeadm's and EKS's
//! files, every field, precedence with `--config`, unknown fields, default addresses. (The
//! binary's side is in tests/offline/config.rs.)

use super::{BindAddress, Config, ConfigError, DetectLocal, Flags, Notes, load_from};
use crate::model::{Scheduler, Unserved};
use crate::test_support::TempFile;
use std::path::PathBuf;
use std::time::Duration;

/// The file kubeadm writes for kube-proxy (every field present, most left at zero), switched
/// to nftables mode with a few values set.
const KUBEADM: &str = r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: nftables
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
"#;

/// A file in a fresh directory named after the test, removed when the test ends.
pub(super) fn file(name: &str, text: &str) -> TempFile {
    let file = if text.trim_start().starts_with('{') { "config.json" } else { "config.yaml" };
    TempFile::new(&format!("config-{name}"), file, text)
}

/// A minimal file with `body` after its kind.
pub(super) fn with(name: &str, body: &str) -> TempFile {
    file(name, &format!("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n{body}\n"))
}

pub(super) fn load(path: &std::path::Path, extra: &[&str]) -> Result<(Flags, Vec<String>), ConfigError> {
    load_notes(path, extra).map(|(f, notes)| (f, notes.unknown_fields))
}

pub(super) fn load_notes(path: &std::path::Path, extra: &[&str]) -> Result<(Flags, Notes), ConfigError> {
    let mut args = vec!["kube-nftproxy".to_string(), format!("--config={}", path.display())];
    args.extend(extra.iter().map(|a| a.to_string()));
    load_from(args)
}

fn defaults() -> Flags {
    load_from(["kube-nftproxy"]).unwrap().0
}

#[test]
fn kubeadms_file_means_kube_proxys_defaults_plus_what_it_sets() {
    let (flags, unknown) = load(&file("kubeadm", KUBEADM), &[]).unwrap();
    assert!(unknown.is_empty(), "kube-proxy's own fields are not unknown: {unknown:?}");
    let d = defaults();
    // Zero and null are kube-proxy's "unset": its defaults stand.
    assert_eq!(flags.sync_period, Duration::from_secs(30));
    assert_eq!(flags.min_sync_period, Duration::from_secs(1));
    assert_eq!(flags.masquerade_bit, 14);
    assert_eq!(flags.healthz_bind_address, d.healthz_bind_address);
    assert_eq!(flags.metrics_bind_address, d.metrics_bind_address);
    assert_eq!(flags.conntrack_max_per_core, 32768);
    assert_eq!(flags.conntrack_tcp_timeout_established, Duration::from_secs(86400));
    assert_eq!(flags.oom_score_adj, -999);
    assert_eq!(flags.nodeport_addresses, d.nodeport_addresses);
    assert_eq!(flags.verbosity, None);
    // What it sets is taken.
    assert_eq!(flags.cluster_cidr, ["10.244.0.0/16", "fd00:10:244::/56"]);
    assert_eq!(flags.kubeconfig, Some(PathBuf::from("/var/lib/kube-proxy/kubeconfig.conf")));
    let cfg = Config::from_flags(&Flags { hostname_override: Some("node-a".into()), ..flags }).unwrap();
    assert_eq!(cfg.cluster_cidrs.len(), 2);
    assert_eq!(cfg.detect_local, DetectLocal::ClusterCidr);
}

#[test]
fn every_field_reaches_its_flag() {
    let text = r#"
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: Node-B
bindAddress: 192.0.2.7
clusterCIDR: 10.0.0.0/8
nodePortAddresses: [192.0.2.0/24, "2001:db8::/64"]
healthzBindAddress: 0.0.0.0
metricsBindAddress: "[::1]:9999"
nftables: {masqueradeAll: true, masqueradeBit: 5, syncPeriod: 1m0s, minSyncPeriod: 250ms}
detectLocalMode: BridgeInterface
detectLocal: {bridgeInterface: cbr0}
conntrack: {maxPerCore: 0, min: 7, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 30m, tcpBeLiberal: true,
            udpTimeout: 30s, udpStreamTimeout: 2m}
clientConnection: {kubeconfig: /etc/kube-nftproxy/kubeconfig}
oomScoreAdj: -500
logging: {verbosity: 4}
kubeNftproxy: {manifests: /etc/m, fullSyncPeriod: 2h, syncShare: 0.2, nftTimeout: 10s, cleanupKubeProxyAtStart: false}
"#;
    let (f, unknown) = load(&file("every", text), &[]).unwrap();
    assert!(unknown.is_empty(), "{unknown:?}");
    assert_eq!(f.hostname_override.as_deref(), Some("node-b"));
    assert_eq!(f.bind_address, "192.0.2.7");
    assert_eq!(f.cluster_cidr, ["10.0.0.0/8"]);
    assert_eq!(f.nodeport_addresses, ["192.0.2.0/24", "2001:db8::/64"]);
    assert_eq!(f.healthz_bind_address, BindAddress(Some("0.0.0.0:10256".parse().unwrap())));
    assert_eq!(f.metrics_bind_address, BindAddress(Some("[::1]:9999".parse().unwrap())));
    assert!(f.masquerade_all);
    assert_eq!(
        (f.masquerade_bit, f.sync_period, f.min_sync_period),
        (5, Duration::from_secs(60), Duration::from_millis(250))
    );
    assert_eq!(f.conntrack_max_per_core, 0, "an explicit 0 (leave the table alone) is kept");
    assert_eq!(f.conntrack_min, 7);
    assert_eq!(f.conntrack_tcp_timeout_established, Duration::ZERO, "an explicit 0s is kept");
    assert_eq!(f.conntrack_tcp_timeout_close_wait, Duration::from_secs(1800));
    assert!(f.conntrack_tcp_be_liberal);
    assert_eq!(
        (f.conntrack_udp_timeout, f.conntrack_udp_timeout_stream),
        (Duration::from_secs(30), Duration::from_secs(120))
    );
    assert_eq!(f.kubeconfig, Some(PathBuf::from("/etc/kube-nftproxy/kubeconfig")));
    assert_eq!((f.oom_score_adj, f.verbosity), (-500, Some(4)));
    assert_eq!(f.manifests, Some(PathBuf::from("/etc/m")));
    assert_eq!((f.full_sync_period, f.nft_timeout), (Duration::from_secs(7200), Duration::from_secs(10)));
    assert!(!f.cleanup_kube_proxy_at_start);
    assert_eq!(f.sync_share, 0.2);
    let cfg = Config::from_flags(&f).unwrap();
    assert_eq!(cfg.detect_local, DetectLocal::BridgeInterface("cbr0".into()));
    assert_eq!(cfg.masquerade_mark, 1 << 5);
    assert!(!cfg.nodeport_addresses.primary && cfg.nodeport_addresses.cidrs.len() == 2);
}

#[test]
fn with_config_kube_proxys_flags_are_ignored_but_the_hostname_logging_and_own_flags_win() {
    let text = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n\
                nftables: {masqueradeBit: 5, masqueradeAll: true}\nhostnameOverride: from-file\n\
                kubeNftproxy: {fullSyncPeriod: 2h}\n";
    let path = file("override", text);
    let args = ["--iptables-masquerade-bit=3", "--hostname-override= From-Flag ", "--conntrack-min=7", "-v=3"];
    let (f, notes) =
        load_notes(&path, &[&args[..], &["--full-sync-period=1m", "--masquerade-all=false"]].concat()).unwrap();
    assert_eq!(f.masquerade_bit, 5, "the file's bit, not the ignored flag's");
    assert!(f.masquerade_all, "the file's, not --masquerade-all=false");
    assert_eq!(f.conntrack_min, 131072, "an ignored flag the file leaves out takes kube-proxy's default");
    let cfg = Config::from_flags(&f).unwrap();
    assert_eq!(cfg.node_name, "from-flag", "--hostname-override wins, trimmed and lower-cased");
    assert_eq!((f.verbosity, f.full_sync_period), (Some(3), Duration::from_secs(60)), "logging and own flags win");
    for flag in ["--iptables-masquerade-bit", "--conntrack-min", "--masquerade-all"] {
        let want = format!("{flag} is ignored: --config is given (as kube-proxy)");
        assert_eq!(notes.warnings.iter().filter(|w| **w == want).count(), 1, "{want}: {:?}", notes.warnings);
    }
    assert_eq!(notes.warnings.len(), 3, "hostname, -v and own flags are not ignored: {:?}", notes.warnings);
    let (f, _) = load_notes(&path, &["--hostname-override="]).unwrap();
    assert_eq!(Config::from_flags(&f).unwrap().node_name, "from-file", "an empty override is none");
    // Without --config the same flags are taken.
    let (f, notes) = load_from(["kube-nftproxy", "--iptables-masquerade-bit=3", "--masquerade-all"]).unwrap();
    assert_eq!((f.masquerade_bit, f.masquerade_all), (3, true));
    assert!(notes.warnings.is_empty(), "{:?}", notes.warnings);
}

#[test]
fn json_is_read_too_and_unknown_fields_are_named() {
    let text = r#"{"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "nftables", "nftables": {"masqueradeBit": 9, "frobnicate": true}, "clusterCidr": "10.0.0.0/8", "kubeNftproxy": {"x": 1}}"#;
    let (f, unknown) = load(&file("json", text), &[]).unwrap();
    assert_eq!(f.masquerade_bit, 9);
    let mut unknown = unknown;
    unknown.sort();
    assert_eq!(unknown, ["clusterCidr", "kubeNftproxy.x", "nftables.frobnicate"]);
    assert!(f.cluster_cidr.is_empty(), "a misspelt field sets nothing");
}

#[test]
fn an_eks_file_with_removed_fields_is_read_leniently_naming_them() {
    let text = "mode: iptables\nclientConnection: {contentType: application/vnd.kubernetes.protobuf, qps: 5, burst: 10, \
                kubeconfig: /var/lib/kube-proxy/kubeconfig}\nudpIdleTimeout: 250ms\nresourceContainer: \"\"\n\
                iptables: {masqueradeBit: 14, syncPeriod: 30s, minSyncPeriod: 0s}\nclusterCIDR: 10.0.0.0/16";
    let (f, notes) =
        load_notes(&with("eks", text), &["--hostname-override=ip-10-0-1-2.ec2.internal", "--v=2"]).unwrap();
    let mut unknown = notes.unknown_fields.clone();
    unknown.sort();
    assert_eq!(unknown, ["resourceContainer", "udpIdleTimeout"]);
    assert_eq!((f.kube_api_qps, f.kube_api_burst, f.verbosity), (5.0, 10, Some(2)));
    assert_eq!((f.proxy_mode.as_deref(), f.min_sync_period), (Some("iptables"), Duration::from_secs(1)));
    assert!(notes.warnings.iter().any(|w| w.contains("iptables mode's configuration")), "{:?}", notes.warnings);
}

#[test]
fn default_health_and_metrics_addresses_follow_the_bind_address_family() {
    let v4 =
        (BindAddress(Some("0.0.0.0:10256".parse().unwrap())), BindAddress(Some("127.0.0.1:10249".parse().unwrap())));
    let v6 = (BindAddress(Some("[::]:10256".parse().unwrap())), BindAddress(Some("[::1]:10249".parse().unwrap())));
    let serving = |f: Flags| (f.healthz_bind_address, f.metrics_bind_address);
    let flags = |args: &[&str]| serving(load_from(["kube-nftproxy"].iter().chain(args)).unwrap().0);
    assert_eq!(flags(&[]), v4);
    assert_eq!(flags(&["--bind-address=192.0.2.7"]), v4);
    assert_eq!(flags(&["--bind-address=::"]), v6);
    assert_eq!(flags(&["--bind-address=2001:db8::7"]), v6);
    // Explicit values win, on the command line or in the file.
    let explicit = flags(&["--bind-address=::", "--healthz-bind-address=0.0.0.0", "--metrics-bind-address="]);
    assert_eq!(explicit, (v4.0, BindAddress(None)));
    // kubeadm's file with an IPv6 bindAddress: its empty addresses are unset, so defaulted.
    let kubeadm6 = file("kubeadm6", &KUBEADM.replace("bindAddress: 0.0.0.0", "bindAddress: \"::\""));
    assert_eq!(serving(load(&kubeadm6, &[]).unwrap().0), v6);
    assert_eq!(serving(load(&kubeadm6, &["--bind-address=10.0.0.1"]).unwrap().0), v6, "the flag is ignored");
    let set = with("serving6", "bindAddress: 2001:db8::7\nmetricsBindAddress: 127.0.0.1:9999");
    let (f, _) = load(&set, &[]).unwrap();
    assert_eq!(serving(f), (v6.0, BindAddress(Some("127.0.0.1:9999".parse().unwrap()))));
}

#[test]
fn the_effective_configuration_has_every_v1alpha1_field() {
    let value = super::effective(&defaults());
    let keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = vec![
        "apiVersion",
        "kind",
        "bindAddress",
        "bindAddressHardFail",
        "clientConnection",
        "clusterCIDR",
        "configSyncPeriod",
        "conntrack",
        "detectLocal",
        "detectLocalMode",
        "enableProfiling",
        "featureGates",
        "healthzBindAddress",
        "hostnameOverride",
        "iptables",
        "ipvs",
        "kubeNftproxy",
        "logging",
        "metricsBindAddress",
        "mode",
        "nftables",
        "nodePortAddresses",
        "oomScoreAdj",
        "portRange",
        "showHiddenMetricsForVersion",
        "windowsRunAsService",
        "winkernel",
    ];
    want.sort_unstable();
    assert_eq!(keys, want);
    // An empty mode is iptables' to upstream: the periods go in that section.
    assert_eq!(
        (value["iptables"]["syncPeriod"].as_str(), value["nftables"]["syncPeriod"].as_str()),
        (Some("30s"), Some("0s"))
    );
    let nft = load_from(["kube-nftproxy", "--proxy-mode=nftables", "--iptables-min-sync-period=250ms"]).unwrap().0;
    let value = super::effective(&nft);
    assert_eq!(value["nftables"]["minSyncPeriod"], "250ms");
    assert_eq!(value["clientConnection"]["contentType"], "application/vnd.kubernetes.protobuf");
}

#[test]
fn ipvs_mode_with_kube_proxy_ipvs_off_is_refused_naming_the_gate_as_upstream() {
    let err = load_from(["kube-nftproxy", "--proxy-mode=ipvs", "--feature-gates=KubeProxyIPVS=false"]).unwrap_err();
    assert!(err.to_string().starts_with("--proxy-mode: ") && err.to_string().contains("KubeProxyIPVS"), "{err}");
    let file = with("ipvs-gate", "mode: ipvs\nfeatureGates: {KubeProxyIPVS: false}");
    let err = load(&file, &[]).unwrap_err().to_string();
    assert!(err.starts_with("mode: ") && err.contains("KubeProxyIPVS"), "{err}");
    assert!(load_from(["kube-nftproxy", "--proxy-mode=nftables", "--feature-gates=KubeProxyIPVS=false"]).is_ok());
}

#[test]
fn the_ipvs_scheduler_reaches_the_config_in_ipvs_mode_only() {
    let cfg = |args: &[&str]| {
        let argv = ["kube-nftproxy", "--hostname-override=n"].iter().chain(args);
        Config::from_flags(&load_from(argv).unwrap().0).unwrap().scheduler
    };
    assert_eq!(cfg(&["--proxy-mode=ipvs", "--ipvs-scheduler=sh"]), Scheduler::SourceHash { port: false });
    assert_eq!(cfg(&["--proxy-mode=ipvs", "--ipvs-scheduler=wrr"]), Scheduler::RoundRobin, "equal weights");
    assert_eq!(cfg(&["--proxy-mode=ipvs"]), Scheduler::Random, "the empty name is the default");
    assert_eq!(cfg(&["--ipvs-scheduler=sh"]), Scheduler::Random, "upstream reads it in ipvs mode only");
    let f = load(&with("sched", "mode: ipvs\nipvs: {scheduler: sed}"), &["--hostname-override=n"]).unwrap().0;
    assert_eq!(Config::from_flags(&f).unwrap().scheduler, Scheduler::Unserved(Unserved::Sed));
}

#[test]
fn the_files_no_effect_fields_are_named_once_when_they_hold_a_value() {
    let (_, notes) = load_notes(&file("kubeadm-quiet", KUBEADM), &[]).unwrap();
    assert!(notes.infos.is_empty(), "kubeadm's empty fields are not named: {:?}", notes.infos);
    let body =
        "enableProfiling: true\nipvs: {strictARP: true, tcpTimeout: 0s}\nwinkernel: {enableDSR: true}\nportRange: \"\"";
    let (_, notes) = load_notes(&with("no-effect", &format!("mode: nftables\n{body}")), &[]).unwrap();
    assert_eq!(notes.infos.len(), 1, "{:?}", notes.infos);
    for field in ["enableProfiling", "ipvs.strictARP", "winkernel"] {
        assert!(notes.infos[0].contains(field), "{field}: {}", notes.infos[0]);
    }
    for field in ["portRange", "ipvs.tcpTimeout"] {
        assert!(!notes.infos[0].contains(field), "{field} is unset: {}", notes.infos[0]);
    }
}

#[test]
fn nodeport_addresses_take_upstreams_keywords_and_localhost_asks_for_both_loopbacks() {
    use crate::model::Family;
    let of = |v: &[&str]| {
        let text = format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nnodePortAddresses: {v:?}\nfeatureGates: {{KubeProxyNFTablesLocalhostNodePorts: true}}\n"
        );
        let path = file("nodeports", &text);
        let (f, _) = load_notes(&path, &["--hostname-override=node-a"]).map_err(|e| e.to_string())?;
        Config::from_flags(&f).map_err(|e| e.to_string())
    };
    let cfg = of(&["primary", "localhost"]).unwrap();
    assert!(cfg.localhost_nodeports && cfg.nodeport_addresses.primary && !cfg.nodeport_addresses.is_primary());
    assert!(Family::ALL.iter().all(|f| cfg.nodeport_addresses.names_loopback(*f)), "{cfg:?}");
    let v4 = of(&["primary", "127.0.0.1/32"]).unwrap().nodeport_addresses;
    assert!(v4.names_loopback(Family::V4) && !v4.names_loopback(Family::V6), "an explicit CIDR is one family's");
    let all = of(&["all"]).unwrap().nodeport_addresses;
    assert!(!all.primary && !Family::ALL.iter().any(|f| all.names_loopback(*f)), "all contains loopback, names none");
    assert!(of(&["primary"]).unwrap().nodeport_addresses.is_primary());
    let bad = of(&["primary", "localhost", "nowhere"]).unwrap_err();
    assert!(bad.contains("nodePortAddresses") && bad.contains("localhost"), "{bad}");
    let (f, _) = load_from(["kube-nftproxy", "--hostname-override=n", "--nodeport-addresses=localhost"]).unwrap();
    let cfg = Config::from_flags(&f).unwrap();
    assert!(!cfg.nodeport_addresses.primary && !cfg.localhost_nodeports, "the gate is off by default: {cfg:?}");
}

#[test]
fn the_sync_share_is_a_share_of_one_core() {
    assert_eq!(defaults().sync_share, 0.08);
    for (given, share) in [("0.5", 0.5), ("1", 1.0), ("8%", 0.08), (" 25 % ", 0.25)] {
        let (f, _) = load_from(["kube-nftproxy", &format!("--sync-share={given}")]).unwrap();
        assert!((f.sync_share - share).abs() < 1e-12, "{given}: {}", f.sync_share);
    }
    for bad in ["0", "-0.1", "1.5", "150%", "much"] {
        let e = load_from(["kube-nftproxy", &format!("--sync-share={bad}")]).unwrap_err().to_string();
        assert!(e.contains("share of one core"), "{bad}: {e}");
    }
    let text =
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nkubeNftproxy: {syncShare: 2}\n";
    let e = load(&file("share", text), &[]).unwrap_err().to_string();
    assert!(e.contains("kubeNftproxy.syncShare"), "{e}");
}
