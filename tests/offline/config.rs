//! kube-proxy's command line and configuration file as the binary takes them: bad values
//! refused by field or flag name, modes, periods, distributions' command lines, no-effect
//! and deprecated flags, feature gates, `--write-config-to` read back, `--help`, `--version`
//! (`-v` is in tests/kernel/daemon.rs, where a sync logs; the library's side in src/config/tests.rs).

use crate::common::Scratch;
use kube_nftproxy::config::{self, BindAddress, ConfigError, Flags};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A configuration file alone in a scratch directory; it stands for its path, and takes the
/// directory with it when dropped.
struct ConfigFile {
    path: PathBuf,
    _dir: Scratch,
}

impl std::fmt::Debug for ConfigFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.path.fmt(f)
    }
}

impl std::ops::Deref for ConfigFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

/// A file in a fresh directory, named after the test.
fn file(name: &str, text: &str) -> ConfigFile {
    let dir = Scratch::new(&format!("config-{name}"));
    let path = dir.path(if text.trim_start().starts_with('{') { "config.json" } else { "config.yaml" });
    std::fs::write(&path, text).unwrap();
    ConfigFile { path, _dir: dir }
}

fn load(path: &std::path::Path, extra: &[&str]) -> Result<(Flags, Vec<String>), ConfigError> {
    load_notes(path, extra).map(|(f, notes)| (f, notes.unknown_fields))
}

fn load_notes(path: &std::path::Path, extra: &[&str]) -> Result<(Flags, config::Notes), ConfigError> {
    let mut args = vec!["kube-nftproxy".to_string(), format!("--config={}", path.display())];
    args.extend(extra.iter().map(|a| a.to_string()));
    config::load_from(args)
}

#[test]
fn a_bad_value_is_refused_by_its_field_name() {
    let head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
    for (i, (body, field)) in [
        ("iptables: {masqueradeBit: 40}", "iptables.masqueradeBit"),
        ("mode: nftables\nnftables: {masqueradeBit: -1}", "nftables.masqueradeBit"),
        ("clientConnection: {burst: -1}", "clientConnection.burst"),
        ("featureGates: {Frobnicate: true}", "featureGates"),
        ("mode: ipvs\nipvs: {scheduler: fastest}", "ipvs.scheduler"),
        ("logging: {format: xml}", "logging.format"),
        ("nftables: {syncPeriod: 5 parsecs}", "nftables.syncPeriod"),
        ("nftables: {masqueradeAll: sometimes}", "nftables.masqueradeAll"),
        ("clusterCIDR: 10.0.0.0/33", "clusterCIDR"),
        ("nodePortAddresses: [nowhere]", "nodePortAddresses"),
        ("healthzBindAddress: localhost:1", "healthzBindAddress"),
        ("bindAddress: somewhere", "bindAddress"),
        ("hostnameOverride: Not_A_Node", "hostnameOverride"),
        ("detectLocalMode: BridgeInterface", "detectLocalMode"),
        ("detectLocalMode: Guess", "detectLocalMode"),
        ("conntrack: {maxPerCore: -1}", "conntrack.maxPerCore"),
        ("oomScoreAdj: 5000", "oomScoreAdj"),
        ("mode: kernelspace", "mode"),
    ]
    .into_iter()
    .enumerate()
    {
        let err = load(&file(&format!("bad{i}"), &format!("{head}{body}\n")), &[]).unwrap_err().to_string();
        assert!(err.contains(field), "{body}: the error does not name {field}: {err}");
    }
    for (i, text) in ["kind: KubeProxyConfiguration\n", "apiVersion: v1\nkind: ConfigMap\n", "[not, a, map]", ": :"]
        .into_iter()
        .enumerate()
    {
        let err = load(&file(&format!("kind{i}"), text), &[]).unwrap_err();
        assert!(matches!(err, ConfigError::File { .. }), "{text:?}: {err}");
    }
    let missing = load(&PathBuf::from("/nonexistent/config.yaml"), &[]).unwrap_err();
    assert!(missing.to_string().contains("/nonexistent/config.yaml"), "{missing}");
}

fn binary(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"))
        .args(args)
        .env_remove("NODE_NAME")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

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

/// A minimal file with `body` after its kind.
fn with(name: &str, body: &str) -> ConfigFile {
    file(name, &format!("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n{body}\n"))
}

#[test]
fn every_linux_proxy_mode_runs_this_proxy_and_others_are_refused() {
    for mode in ["nftables", "iptables", "ipvs", ""] {
        let (f, notes) = config::load_from(["kube-nftproxy", &format!("--proxy-mode={mode}")]).unwrap();
        assert_eq!(f.proxy_mode.as_deref(), Some(mode));
        let warned = notes.warnings.iter().filter(|w| w.contains("kube-nftproxy serves the")).count();
        assert_eq!(warned, usize::from(matches!(mode, "iptables" | "ipvs")), "{mode}: {:?}", notes.warnings);
    }
    let (f, notes) = load_notes(&with("mode-ipvs", "mode: ipvs\nipvs: {scheduler: lc}"), &[]).unwrap();
    assert_eq!((f.proxy_mode.as_deref(), f.ipvs_scheduler.as_str()), (Some("ipvs"), "lc"));
    assert!(notes.warnings.iter().any(|w| w.contains("\"lc\"") && w.contains("random")), "{:?}", notes.warnings);
    let err = config::load_from(["kube-nftproxy", "--proxy-mode=ipvs", "--ipvs-scheduler=fastest"]).unwrap_err();
    assert!(err.to_string().contains("--ipvs-scheduler"), "{err}");
    assert!(config::load_from(["kube-nftproxy", "--ipvs-scheduler=fastest"]).is_ok(), "checked in ipvs mode only");
    // The binary: a usage error naming the flag, status 2, as the file's mode.
    let kernelspace = with("mode-kernelspace", "mode: kernelspace");
    for (args, named) in [
        (vec!["--proxy-mode=userspace".to_string()], "--proxy-mode"),
        (vec![format!("--config={}", kernelspace.display())], "mode"),
    ] {
        let out = binary(&[&args[0], "--dry-run", "--hostname-override=node-a"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named) && stderr.contains("space"), "{args:?}: {stderr}");
    }
}

#[test]
fn kube_proxys_logging_block_is_read_and_its_verbosity_is_v() {
    let text = "logging:\n  format: text\n  flushFrequency: 5s\n  verbosity: 4\n  \
                vmodule: [{filePattern: \"proxier*\", verbosity: 6}]\n  options: {json: {infoBufferSize: \"0\"}}";
    let path = with("logging", text);
    let (f, unknown) = load(&path, &[]).unwrap();
    assert!(unknown.is_empty(), "every field of kube-proxy's logging block is known: {unknown:?}");
    assert_eq!((f.verbosity, f.log_level()), (Some(4), Some(log::LevelFilter::Debug)));
    let (f, _) = load(&path, &["-v=1"]).unwrap();
    assert_eq!((f.verbosity, f.log_level()), (Some(1), Some(log::LevelFilter::Info)), "-v wins over the file");
    let (f, _) = load(&with("loud", "logging: {verbosity: 100000}"), &[]).unwrap();
    assert_eq!(f.log_level(), Some(log::LevelFilter::Trace), "klog takes any 32-bit level");
    let (f, _) = load(&with("quiet", "logging: {verbosity: 0, vmodule: []}"), &[]).unwrap();
    assert_eq!(f.verbosity, None, "0 is kube-proxy's default: RUST_LOG applies");
    let cluster = crate::common::root().join("examples/cluster");
    let config = format!("--config={}", path.display());
    let out = binary(&[&config, "--dry-run", "--hostname-override=node-a", "--manifests", cluster.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains("WARN"), "{stderr}");
}

#[test]
fn a_min_sync_period_longer_than_the_sync_period_is_refused_naming_what_set_it() {
    let slow = with("min-above", "mode: nftables\nnftables: {syncPeriod: 5s, minSyncPeriod: 10s}");
    let err = load(&slow, &[]).unwrap_err().to_string();
    assert!(err.contains("nftables.minSyncPeriod") && err.contains("nftables.syncPeriod"), "{err}");
    let err = load(&with("min-above-ipt", "iptables: {syncPeriod: 5s, minSyncPeriod: 10s}"), &[]).unwrap_err();
    assert!(err.to_string().contains("iptables.minSyncPeriod"), "an empty mode reads iptables': {err}");
    let (f, _) = load(&with("ipvs-periods", "mode: ipvs\nipvs: {syncPeriod: 2m, minSyncPeriod: 3s}"), &[]).unwrap();
    assert_eq!((f.sync_period, f.min_sync_period), (Duration::from_secs(120), Duration::from_secs(3)));
    let err = config::load_from(["kube-nftproxy", "--iptables-min-sync-period=31s"]).unwrap_err().to_string();
    assert!(err.contains("--iptables-min-sync-period"), "kube-proxy's 30s sync period is the bound: {err}");
    let err = config::load_from(["kube-nftproxy", "--proxy-mode=ipvs", "--ipvs-min-sync-period=31s"]).unwrap_err();
    assert!(err.to_string().contains("--ipvs-min-sync-period"), "{err}");
    // Negative periods are not durations at all.
    let err = load(&with("negative", "mode: nftables\nnftables: {minSyncPeriod: -1s}"), &[]).unwrap_err().to_string();
    assert!(err.contains("nftables.minSyncPeriod"), "{err}");
    for (args, named) in [
        (format!("--config={}", slow.display()), "nftables.minSyncPeriod"),
        ("--min-sync-period=1m".to_string(), "--iptables-min-sync-period"),
    ] {
        let out = binary(&[&args, "--dry-run", "--hostname-override=node-a"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args}: {stderr}");
        assert!(stderr.contains(named), "{args}: {stderr}");
    }
}

#[test]
fn a_file_that_does_not_parse_is_told_by_place_never_by_its_text() {
    const S: &str = "SECRET-0123456789";
    let mut complaints = Vec::new();
    for (i, (body, place)) in [
        (format!("clientConnection: {{kubeconfig: [{S}]}}"), "clientConnection.kubeconfig: a sequence where"),
        (format!("nftables: {{masqueradeBit: \"{S}\"}}"), "nftables.masqueradeBit: a string where"),
        (format!("nftables: {{syncPeriod: {S}}}"), "nftables.syncPeriod: not a duration"),
        (format!("clientConnection: \"{S}"), "not YAML or JSON: line 3, column "),
        (format!("mode: {S}: x"), "not YAML or JSON: line 3, column "),
    ]
    .into_iter()
    .enumerate()
    {
        let path = with(&format!("leaky{i}"), &body);
        let out = binary(&["--config", path.to_str().unwrap(), "--dry-run", "--hostname-override", "node-a"]);
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let want = format!("--config {:?}: {place}", path);
        if out.status.code() != Some(2) || said.contains("SECRET") || said.contains("0123456789") {
            complaints.push(format!("{body}: {said}"));
        } else if !said.contains(&want) {
            complaints.push(format!("{body}: not {want:?}: {said}"));
        }
    }
    crate::common::inputs::assert_none(&complaints);
}

#[test]
fn service_proxy_name_is_a_label_value_from_the_flag_or_the_file() {
    let load_args = |args: &[&str]| config::load_from(["kube-nftproxy"].iter().chain(args));
    assert_eq!(load_args(&[]).unwrap().0.service_proxy_name, None, "upstream's behaviour unless asked");
    let long = "a".repeat(63);
    for good in ["canary", "kube-nftproxy", "a", "v1.2_b-3", &long] {
        let flags = load_args(&[&format!("--service-proxy-name={good}")]).expect(good).0;
        assert_eq!(flags.service_proxy_name.as_deref(), Some(good));
    }
    let too_long = "a".repeat(64);
    for bad in ["", "-canary", "canary.", "_x", "two words", "kube/nftproxy", "ünï", &too_long] {
        let err = load_args(&[&format!("--service-proxy-name={bad}")]).unwrap_err();
        assert!(
            matches!(err, ConfigError::Usage(_)) && err.to_string().contains("--service-proxy-name"),
            "{bad:?}: {err}"
        );
    }
    let filed = with("proxy-name", "kubeNftproxy: {serviceProxyName: canary}");
    assert_eq!(load(&filed, &[]).unwrap().0.service_proxy_name.as_deref(), Some("canary"));
    let over = load(&filed, &["--service-proxy-name=other"]).unwrap().0;
    assert_eq!(over.service_proxy_name.as_deref(), Some("other"), "the command line wins over the file");
    let err = load(&with("proxy-name-bad", "kubeNftproxy: {serviceProxyName: -x-}"), &[]).unwrap_err();
    assert!(err.to_string().contains("kubeNftproxy.serviceProxyName"), "{err}");
    let cfg =
        config::Config::from_flags(&load_args(&["--service-proxy-name=canary", "--hostname-override=n"]).unwrap().0);
    assert_eq!(cfg.expect("config").service_proxy_name.as_deref(), Some("canary"));
}

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

fn argv(args: &[&str]) -> Vec<String> {
    ["kube-nftproxy"].iter().chain(args).map(|a| a.to_string()).collect()
}

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
        (&["--feature-gates=Frobnicate=true"], "Frobnicate"),
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
fn allow_service_external_ips_off_stops_serving_external_ips_as_upstream() {
    let cluster = crate::common::root().join("examples/cluster");
    let dry_run = |extra: &[&str]| {
        let base = ["--dry-run", "--hostname-override=node-a", "--manifests", cluster.to_str().unwrap()];
        let out = binary(&[&base[..], extra].concat());
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let (on, off) = (dry_run(&[]), dry_run(&["--feature-gates=AllowServiceExternalIPs=false"]));
    assert!(on.contains("198.51.100.20"), "the external IP is served by default:\n{on}");
    assert!(!off.contains("198.51.100.20"), "the external IP is still served with the gate off:\n{off}");
    assert!(off.contains("198.51.100.10"), "load-balancer IPs stay served:\n{off}");
    assert_eq!(dry_run(&["--feature-gates=AllowServiceExternalIPs=true"]), on);
    let file = with("no-external-ips", "featureGates: {AllowServiceExternalIPs: false}");
    assert_eq!(dry_run(&[&format!("--config={}", file.display())]), off, "the file's featureGates too");
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
