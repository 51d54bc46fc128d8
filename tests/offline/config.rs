//! kube-proxy's command line and configuration file as the binary takes them: bad values
//! refused by field or flag name, modes, periods, distributions' command lines, no-effect
//! and deprecated flags, feature gates, `--write-config-to` read back, `--help`, `--version`
//! (`-v` is in tests/kernel/daemon.rs, where a sync logs; the library's side in src/config/tests.rs).

use crate::common::Scratch;
use kube_nftproxy::config::{self, BindAddress, ConfigError, Flags};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod binary;
mod command_lines;
mod generated;

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
        ("featureGates: {NFTablesProxyMode: false}", "featureGates"),
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

fn argv(args: &[&str]) -> Vec<String> {
    ["kube-nftproxy"].iter().chain(args).map(|a| a.to_string()).collect()
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
