//! Reading the deployment files in `packaging/` as the tests need them: the Kubernetes
//! manifests as typed objects, the DaemonSet's containers, the ConfigMap's files written
//! where the pod would see them, and the systemd unit's command line.

use super::root;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Where the manifests are.
pub fn manifests_dir() -> PathBuf {
    root().join("packaging/kubernetes")
}

/// Every YAML document of every manifest file `kubectl apply -f packaging/kubernetes/`
/// applies, with the file it came from.
pub fn documents() -> Vec<(PathBuf, Value)> {
    documents_in(&manifests_dir())
}

/// Every YAML document of the `.yaml` files directly in `dir`, with the file it came from.
pub fn documents_in(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("manifests directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read manifest");
        // As the crate reads manifests: YAML 1.2 booleans, so `on` or `n` stay strings.
        let mut options = serde_saphyr::Options::default();
        options.strict_booleans = true;
        options.leading_zero_numbers_as_strings = true;
        let parsed: Vec<Value> = serde_saphyr::from_multiple_with_options(&text, options)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        docs.extend(parsed.into_iter().filter(|d| !d.is_null()).map(|d| (file.clone(), d)));
    }
    docs
}

/// The one object of `kind`, as its Kubernetes type.
pub fn object<T: DeserializeOwned>(kind: &str) -> T {
    let mut found: Vec<Value> = documents().into_iter().map(|(_, d)| d).filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind} is expected in packaging/kubernetes");
    serde_json::from_value(found.remove(0)).unwrap_or_else(|e| panic!("the {kind} is not a {kind}: {e}"))
}

/// The DaemonSet's init container and proxy container, in that order.
pub fn daemonset_containers() -> (Container, Container) {
    let ds: DaemonSet = object("DaemonSet");
    let pod = ds.spec.and_then(|s| s.template.spec).expect("a pod spec");
    let init = pod.init_containers.unwrap_or_default();
    assert_eq!(init.len(), 1, "one init container (the conntrack sysctls)");
    assert_eq!(pod.containers.len(), 1, "one container");
    (init.into_iter().next().expect("init"), pod.containers.into_iter().next().expect("container"))
}

/// The pod's directory the ConfigMap is mounted at (by the proxy container).
pub fn config_mount() -> String {
    let (_, proxy) = daemonset_containers();
    let mounts = proxy.volume_mounts.unwrap_or_default();
    mounts.iter().find(|m| m.name == "config").map(|m| m.mount_path.clone()).expect("the config volume's mount")
}

/// Where a pod finds its service account's token and CA.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Writes the ConfigMap's files into `dir`, as the pod would see them at [`config_mount`],
/// with every path of the pod's rewritten to this machine's: the mount to `dir`, the
/// service-account directory to `service_account`, and the kubeconfig's server to `server`.
pub fn write_config_files(dir: &Path, service_account: &Path, server: &str) {
    let cm: ConfigMap = object("ConfigMap");
    let mount = config_mount();
    for (name, text) in cm.data.expect("ConfigMap data") {
        let text = text
            .replace(&mount, &dir.display().to_string())
            .replace(SERVICE_ACCOUNT_DIR, &service_account.display().to_string());
        let text: String = text
            .lines()
            .map(|l| match l.trim_start().strip_prefix("server: ") {
                Some(_) => format!("{}server: {server}\n", &l[..l.len() - l.trim_start().len()]),
                None => format!("{l}\n"),
            })
            .collect();
        std::fs::write(dir.join(name), text).expect("write ConfigMap file");
    }
}

/// A container's command line as the kubelet runs it: `$(NAME)` references expanded from
/// `env`, paths under the config mount moved to `dir`; without the program (its first word).
pub fn container_args(c: &Container, env: &[(&str, &str)], dir: &Path) -> Vec<String> {
    let command = c.command.clone().unwrap_or_default();
    assert_eq!(command.first().map(String::as_str), Some("/kube-nftproxy"), "{command:?}");
    let mount = config_mount();
    command[1..]
        .iter()
        .chain(c.args.iter().flatten())
        .map(|a| {
            let a = env.iter().fold(a.clone(), |a, (k, v)| a.replace(&format!("$({k})"), v));
            assert!(!a.contains("$("), "{a:?} refers to a variable the test does not set");
            a.replace(&mount, &dir.display().to_string())
        })
        .collect()
}

/// The systemd unit's text.
pub fn unit() -> String {
    std::fs::read_to_string(root().join("packaging/kube-nftproxy.service")).expect("read the unit")
}

/// The unit's `KEY=` values (all of them, in order).
pub fn unit_values(unit: &str, key: &str) -> Vec<String> {
    let joined = unit.replace("\\\n", " ");
    joined.lines().filter_map(|l| l.strip_prefix(&format!("{key}="))).map(|v| v.trim().to_string()).collect()
}

/// The unit's ExecStart as words (program first).
pub fn unit_exec_start(unit: &str) -> Vec<String> {
    let exec = unit_values(unit, "ExecStart");
    assert_eq!(exec.len(), 1, "one ExecStart");
    exec[0].split_whitespace().map(str::to_string).collect()
}

/// The capabilities a capability list names, as `setpriv` spells them (`net_admin`).
pub fn setpriv_caps(names: &[String]) -> Vec<String> {
    names.iter().map(|n| n.trim_start_matches("CAP_").to_lowercase()).collect()
}

/// Held while a test builds the static binary (`packaging/build-static.sh`, itself or through
/// a package's script) or reads what that build wrote: the packaging tests run at once and
/// build into one target directory, where one build rewrites the dep-info another test reads.
pub fn static_build_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
