//! The deployment files in `packaging/`, checked without a cluster: the Kubernetes manifests
//! are objects of their kinds with no field those kinds lack, the ClusterRole grants exactly
//! what the daemon's watches and its one write (the Starting Event) need, the DaemonSet's
//! containers start the binary with arguments and a configuration it accepts (against the
//! API-server emulator, through the ConfigMap's kubeconfig), its init container sets the
//! conntrack sysctls, and the systemd unit passes `systemd-analyze verify` and starts the
//! binary with its configuration (`packaging/config.conf`, the ConfigMap's but for the
//! kubeconfig's path).

use crate::common::emulator::Emulator;
use crate::common::packaging::{
    config_mount, container_args, daemonset_containers, documents, documents_in, manifests_dir, object, unit,
    unit_exec_start, unit_values, write_config_files,
};
use crate::common::{Netns, Scratch, kernel_available, root};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_kube-nftproxy");

/// `value` as `T`, then back: a field `T` does not have (a misspelt key) is lost on the way.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(value: &Value) -> Value {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{e}: {value:#}"));
    serde_json::to_value(typed).expect("serialize")
}

#[test]
fn every_manifest_is_an_object_of_its_kind_with_no_field_it_lacks() {
    let mut kinds = BTreeSet::new();
    let rollback = documents_in(&manifests_dir().join("rollback"));
    assert!(!rollback.is_empty());
    for (file, doc) in documents().into_iter().chain(rollback) {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let back = match kind.as_str() {
            "ServiceAccount" => round_trip::<ServiceAccount>(&doc),
            "ClusterRole" => round_trip::<ClusterRole>(&doc),
            "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(&doc),
            "ConfigMap" => round_trip::<ConfigMap>(&doc),
            "DaemonSet" => round_trip::<DaemonSet>(&doc),
            other => panic!("{}: unexpected kind {other:?}", file.display()),
        };
        assert_eq!(back, doc, "{}: the {kind} has fields its type lacks (compare)", file.display());
        if !file.starts_with(manifests_dir().join("rollback")) {
            kinds.insert(kind);
        }
    }
    let want = ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount"];
    assert_eq!(kinds, want.into_iter().map(String::from).collect());
}

/// `(API group, resource)` of a collection path: `/api/v1/services` → `("", "services")`,
/// `/apis/discovery.k8s.io/v1/endpointslices` → `("discovery.k8s.io", "endpointslices")`,
/// `/apis/events.k8s.io/v1/namespaces/default/events` → `("events.k8s.io", "events")` (a
/// ClusterRole's rule covers every namespace).
fn group_resource(path: &str) -> (String, String) {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", _version, resource] | ["api", _version, "namespaces", _, resource] => {
            (String::new(), resource.to_string())
        }
        ["apis", group, _version, resource] | ["apis", group, _version, "namespaces", _, resource] => {
            (group.to_string(), resource.to_string())
        }
        _ => panic!("{path} is not a collection path"),
    }
}

#[test]
fn the_cluster_role_grants_exactly_what_the_watches_need() {
    // The API client lists and watches (src/kube: reflector.rs and watch.rs), and writes
    // only what kube::WRITES names (the Starting Event, src/kube/events.rs).
    let mut need = BTreeSet::new();
    for r in kube_nftproxy::kube::resources("node-a", None) {
        let (group, resource) = group_resource(r.path);
        for verb in ["list", "watch"] {
            need.insert((group.clone(), resource.clone(), verb.to_string()));
        }
    }
    assert_eq!(need.len(), 8, "services, endpointslices, nodes, servicecidrs: {need:?}");
    for (path, verb) in kube_nftproxy::kube::WRITES {
        let (group, resource) = group_resource(path);
        need.insert((group, resource, verb.to_string()));
    }
    assert!(need.contains(&("events.k8s.io".into(), "events".into(), "create".into())), "{need:?}");
    let role: ClusterRole = object("ClusterRole");
    let mut granted = BTreeSet::new();
    for rule in role.rules.unwrap_or_default() {
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none(), "{rule:?}");
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    assert_eq!(granted, need, "the ClusterRole must grant exactly what the daemon asks for");

    let sa: ServiceAccount = object("ServiceAccount");
    let binding: ClusterRoleBinding = object("ClusterRoleBinding");
    assert_eq!((binding.role_ref.kind.as_str(), binding.role_ref.name.as_str()), ("ClusterRole", "kube-nftproxy"));
    assert_eq!(role.metadata.name.as_deref(), Some("kube-nftproxy"));
    let subject = &binding.subjects.expect("subjects")[0];
    assert_eq!(
        (subject.kind.as_str(), Some(subject.name.as_str()), subject.namespace.as_deref()),
        ("ServiceAccount", sa.metadata.name.as_deref(), sa.metadata.namespace.as_deref())
    );
    let ds: DaemonSet = object("DaemonSet");
    let pod = ds.spec.and_then(|s| s.template.spec).expect("pod spec");
    assert_eq!(pod.service_account_name, sa.metadata.name);
    assert_eq!(ds.metadata.namespace, sa.metadata.namespace);
}

#[test]
fn the_daemonset_runs_on_every_node_in_the_host_network_with_two_capabilities() {
    let ds: DaemonSet = object("DaemonSet");
    assert_eq!(ds.metadata.namespace.as_deref(), Some("kube-system"));
    let pod = ds.spec.and_then(|s| s.template.spec).expect("pod spec");
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(pod.priority_class_name.as_deref(), Some("system-node-critical"));
    let tolerates_all = pod
        .tolerations
        .iter()
        .flatten()
        .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none() && t.effect.is_none());
    assert!(tolerates_all, "a toleration with operator Exists and no key or effect tolerates every taint");
    // The node lock is an abstract socket in the host's network namespace; the one host path
    // is the xtables lock the takeover's iptables-legacy-restore shares with the host.
    let host_paths: Vec<_> =
        pod.volumes.iter().flatten().filter_map(|v| Some((&v.name, v.host_path.as_ref()?))).collect();
    assert_eq!(host_paths.len(), 1, "{host_paths:?}");
    let (lock, path) = host_paths[0];
    assert_eq!((path.path.as_str(), path.type_.as_deref()), ("/run/xtables.lock", Some("FileOrCreate")));

    let lock = lock.clone();
    let (init, proxy) = daemonset_containers();
    let mounted = proxy.volume_mounts.iter().flatten().find(|m| m.name == lock).map(|m| m.mount_path.as_str());
    assert_eq!(mounted, Some("/run/xtables.lock"), "the proxy container takes over, so it holds the host's lock");
    assert_eq!(init.image, proxy.image);
    let tag = proxy.image.as_deref().and_then(|i| i.rsplit_once(':')).map(|(_, t)| t.to_string());
    assert_eq!(tag.as_deref(), Some(env!("CARGO_PKG_VERSION")), "the image tag follows the crate's version");
    for c in [&init, &proxy] {
        let env = c.env.iter().flatten().find(|e| e.name == "NODE_NAME").expect("NODE_NAME");
        let field = env.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).map(|f| f.field_path.as_str());
        assert_eq!(field, Some("spec.nodeName"));
        assert!(c.command.iter().flatten().any(|a| a == "--hostname-override=$(NODE_NAME)"), "{:?}", c.command);
    }
    assert!(init.command.iter().flatten().any(|a| a == "--init-only"));
    assert_eq!(init.security_context.as_ref().and_then(|s| s.privileged), Some(true), "sysctls need it");

    let sc = proxy.security_context.expect("securityContext");
    assert_ne!(sc.privileged, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let caps = sc.capabilities.expect("capabilities");
    assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
    assert_eq!(caps.add, Some(vec!["NET_ADMIN".to_string(), "SYS_RESOURCE".to_string()]));

    let probe = proxy.liveness_probe.and_then(|p| p.http_get).expect("an HTTP liveness probe");
    assert!(matches!(probe.path.as_deref(), Some("/livez" | "/healthz")), "{probe:?}");
    assert_eq!(probe.port, k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(10256));
    let cm: ConfigMap = object("ConfigMap");
    let conf = cm.data.expect("data").remove("config.conf").expect("config.conf");
    assert!(conf.contains("healthzBindAddress: 0.0.0.0:10256"), "the probe's port is where /livez is served");
}

/// Runs the binary with `args` and the environment the pod would give it.
fn run(args: &[String], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env("RUST_LOG", "warn").env_remove("NODE_NAME").envs(env.iter().copied());
    cmd.output().expect("run")
}

#[test]
fn the_daemonset_starts_the_binary_with_arguments_and_configuration_it_accepts() {
    let cluster = root().join("examples/cluster");
    let emu = Emulator::start(None, "127.0.0.1:0", Some(&cluster), &[]);
    let conf = Scratch::new("pkg-config");
    // The emulator's TLS directory holds `ca.crt` and `token`, as a service account's does.
    write_config_files(&conf.0, &emu.tls_dir, &emu.api);
    let (_, proxy) = daemonset_containers();
    let mut args = container_args(&proxy, &[("NODE_NAME", "node-a")], &conf.0);
    args.push("--dry-run".into());
    let out = run(&args, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the DaemonSet's arguments are refused: {args:?}\n{stderr}");
    assert!(stderr.trim().is_empty(), "warnings: {stderr}");
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("full sync for node node-a"), "{script}");
    // The example cluster came through the API (its kubernetes Service) and the cluster CIDR
    // from the DaemonSet's configuration went into the rules.
    assert!(script.contains("default/kubernetes:https"), "{script}");
    assert!(script.contains("10.244.0.0/16"), "{script}");
    assert!(!config_mount().is_empty());
}

#[test]
fn the_init_container_sets_the_conntrack_sysctls_and_fails_when_it_cannot() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("pkg-init");
    let conf = Scratch::new("pkg-init");
    write_config_files(&conf.0, &conf.0, "https://127.0.0.1:1");
    let (init, _) = daemonset_containers();
    let args = container_args(&init, &[("NODE_NAME", "node-a")], &conf.0);
    let sysctl = |name: &str| ns.run(&["cat", &format!("/proc/sys/net/netfilter/{name}")], "");
    // With --config, kube-proxy's --conntrack-* flags are ignored (as kube-proxy): each run
    // sets the fields of the file's conntrack section it names.
    let config = conf.0.join("config.conf");
    let original = std::fs::read_to_string(&config).expect("config.conf");
    let run_init = |conntrack: &[(&str, &str)], extra: &[&str]| {
        let text: String = original
            .lines()
            .map(|l| {
                let indent = &l[..l.len() - l.trim_start().len()];
                match conntrack.iter().find(|(field, _)| l.trim_start().starts_with(&format!("{field}:"))) {
                    Some((field, value)) => format!("{indent}{field}: {value}\n"),
                    None => format!("{l}\n"),
                }
            })
            .collect();
        std::fs::write(&config, text).expect("write config.conf");
        let argv: Vec<&str> =
            [BIN].into_iter().chain(args.iter().map(String::as_str)).chain(extra.iter().copied()).collect();
        ns.run(&argv, "")
    };

    let read = |name: &str| String::from_utf8_lossy(&sysctl(name).stdout).trim().to_string();
    // A new namespace starts at the kernel's 5 days and 60 s; the configuration says 24h and
    // 1h. The table's size (nf_conntrack_max) is the host namespace's alone: the override
    // leaves it to the host's init container, as here it cannot be set.
    // (A run that sets nothing loads conntrack, so the namespace's sysctls exist.)
    let nothing = [("maxPerCore", "0"), ("tcpEstablishedTimeout", "0s"), ("tcpCloseWaitTimeout", "0s")];
    assert!(run_init(&nothing, &[]).status.success());
    assert_eq!(read("nf_conntrack_tcp_timeout_established"), "432000");
    assert_eq!(read("nf_conntrack_tcp_timeout_close_wait"), "60");
    let out = run_init(&[("maxPerCore", "0")], &[]);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(read("nf_conntrack_tcp_timeout_established"), "86400");
    assert_eq!(read("nf_conntrack_tcp_timeout_close_wait"), "3600");
    // Beside kube-proxy (--service-proxy-name) the settings are kube-proxy's: none is set.
    let beside = run_init(&[("tcpEstablishedTimeout", "2h")], &["--service-proxy-name=canary"]);
    assert!(beside.status.success(), "{}", String::from_utf8_lossy(&beside.stderr));
    assert_eq!(read("nf_conntrack_tcp_timeout_established"), "86400");

    // Asked for a bigger table than the namespace has, --init-only, whose task it is, says it
    // cannot and fails.
    let max: u64 = read("nf_conntrack_max").parse().expect("nf_conntrack_max");
    let out = run_init(&[("min", &(max * 2).to_string())], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("conntrack settings not set") && stderr.contains("nf_conntrack_max"), "{stderr}");
}

/// A copy of the unit whose ExecStart runs this build's binary (verify needs it to exist).
fn unit_running_this_build(dir: &std::path::Path) -> std::path::PathBuf {
    let text = unit();
    let program = unit_exec_start(&text)[0].clone();
    assert_eq!(program, "/usr/local/bin/kube-nftproxy");
    let path = dir.join("kube-nftproxy.service");
    std::fs::write(&path, text.replace(&program, BIN)).expect("write unit");
    path
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let dir = Scratch::new("pkg-unit");
    let path = unit_running_this_build(&dir.0);
    let out = match Command::new("systemd-analyze").arg("verify").arg(&path).output() {
        Ok(out) => out,
        Err(e) if std::env::var_os("CI").is_none() => return eprintln!("SKIPPING: systemd-analyze: {e}"),
        Err(e) => panic!("systemd-analyze cannot run in CI: {e} (tests/run installs systemd)"),
    };
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // verify exits 0 over unknown keys and bad values, only warning: a warning fails here.
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");

    // A unit it must refuse, so this test can fail.
    std::fs::write(&path, unit().replace("OOMScoreAdjust=-999", "OOMScoreAdjust=-5000")).expect("write");
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().expect("systemd-analyze");
    assert!(!out.stderr.is_empty(), "a bad value was not reported");
}

#[test]
fn the_unit_starts_the_binary_with_a_configuration_it_accepts() {
    let text = unit();
    assert_eq!(unit_values(&text, "KillSignal"), ["SIGTERM"], "restarts must keep the rules in place");
    assert_eq!(unit_values(&text, "OOMScoreAdjust"), ["-999"], "as the configuration's oomScoreAdj");
    assert_eq!(unit_values(&text, "CapabilityBoundingSet"), ["CAP_NET_ADMIN"]);
    assert_eq!(unit_values(&text, "NoNewPrivileges"), ["yes"]);
    // A listener per Local Service and a connection per checker: not systemd's soft 1,024.
    assert_eq!(unit_values(&text, "LimitNOFILE"), ["1048576"], "as containerd's and kubelet's units");
    let conf_text = std::fs::read_to_string(root().join("packaging/config.conf")).expect("packaging/config.conf");
    assert!(conf_text.contains("oomScoreAdj: -999\n"));

    let cluster = root().join("examples/cluster");
    let emu = Emulator::start(None, "127.0.0.1:0", Some(&cluster), &[]);
    let dir = Scratch::new("pkg-unit-conf");
    let kubeconfig = emu.kubeconfig().display().to_string();
    std::fs::write(dir.0.join("config.conf"), conf_text.replace("/etc/kube-nftproxy/kubeconfig", &kubeconfig))
        .expect("write config.conf");
    let conf = dir.0.join("config.conf").display().to_string();
    let mut args: Vec<String> =
        unit_exec_start(&text)[1..].iter().map(|a| a.replace("/etc/kube-nftproxy/config.conf", &conf)).collect();
    assert!(args.iter().all(|a| !a.contains("${") && !a.contains("/etc/")), "{args:?}");
    args.push("--dry-run".into());
    // NODE_NAME as /etc/default/kube-nftproxy may set it (else the host name is used).
    let out = run(&args, &[("NODE_NAME", "node-a")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the unit's command is refused: {stderr}");
    assert!(stderr.trim().is_empty(), "warnings: {stderr}");
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("full sync for node node-a") && script.contains("10.244.0.0/16"), "{script}");
    assert!(!text.contains("--cleanup"), "restarts must keep the rules in place");
}

#[test]
fn the_bare_metal_configuration_is_the_daemonsets_but_for_the_kubeconfig() {
    let cm: ConfigMap = object("ConfigMap");
    let pod_conf = cm.data.expect("data").remove("config.conf").expect("config.conf");
    let node_conf = std::fs::read_to_string(root().join("packaging/config.conf")).expect("packaging/config.conf");
    let settings = |text: &str| -> Vec<String> {
        text.lines().filter(|l| !l.trim_start().starts_with('#')).map(|l| l.trim_end().to_string()).collect()
    };
    let pod = settings(&pod_conf.replace("/var/lib/kube-nftproxy/kubeconfig.conf", "/etc/kube-nftproxy/kubeconfig"));
    assert_eq!(settings(&node_conf), pod);
}
