//! Real distributions' kube-proxy invocations (`tests/distros/`: kubeadm, GKE, EKS, k3s,
//! RKE2, kops, kubeadm in IPVS mode), each run with exactly its arguments against the emulator.

use super::check::{web_on, who};
use super::cluster::Cluster;
use super::daemon::{Daemon, wait_for};
use super::emulator::Emulator;
use super::net::http_get;
use super::{Scratch, root};
use serde_json::Value;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

/// Where the emulator listens: the remote node's address, as a control plane off the node.
const API_ADDR: &str = "192.168.1.2:6443";

/// The distribution's node: a cluster whose API server (the emulator) holds this Node and
/// `web` on pod-1, and the daemon started with the invocation's arguments.
pub struct Run {
    /// The test cluster.
    pub cluster: Cluster,
    /// Its API server.
    pub emu: Emulator,
    /// The daemon.
    pub daemon: Daemon,
    _files: Scratch,
}

/// `text` with the fixtures' placeholders filled: `{dir}` (where the invocation's files are),
/// `{kubeconfig}` and `{server}` (the emulator's).
fn fill(text: &str, dir: &Path, emu: &Emulator) -> String {
    let kubeconfig = emu.kubeconfig();
    text.replace("{dir}", &dir.display().to_string())
        .replace("{kubeconfig}", &kubeconfig.display().to_string())
        .replace("{server}", &emu.api)
}

/// The arguments of invocation `name` (`tests/distros/NAME.args`: one a line, `#` comments),
/// filled in.
pub fn arguments(name: &str, dir: &Path, emu: &Emulator) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("tests/distros").join(format!("{name}.args"))).expect("args");
    let text = fill(&text, dir, emu);
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect()
}

/// Starts invocation `name`: its configuration files (`tests/distros/*.conf`) filled in and
/// written to a directory of their own, then the binary with exactly its arguments, in the
/// node's network namespace and a UTS namespace whose host name is the node's (the
/// invocations without `--hostname-override` take the host name, as kube-proxy does).
pub fn start(name: &str) -> Run {
    let cluster = Cluster::new(2, 1);
    let emu = Emulator::start(Some(&cluster.remote.name), API_ADDR, None, &["--bookmark-interval", "1s"]);
    emu.apply(&Value::Array([vec![Cluster::node_object()], web_on(&cluster, &["pod-1"])].concat()));
    let files = Scratch::new(&format!("distro-{name}"));
    for entry in std::fs::read_dir(root().join("tests/distros")).expect("tests/distros") {
        let path = entry.expect("fixture").path();
        if path.extension().is_some_and(|e| e == "conf") {
            let text = std::fs::read_to_string(&path).expect("fixture");
            files.write(&path.file_name().expect("name").to_string_lossy(), &fill(&text, &files.0, &emu));
        }
    }
    let mut argv: Vec<OsString> = ["unshare", "--uts", "sh", "-c", "hostname node-a && exec \"$0\" \"$@\""]
        .into_iter()
        .chain([env!("CARGO_BIN_EXE_kube-nftproxy")])
        .map(Into::into)
        .collect();
    argv.extend(arguments(name, &files.0, &emu).into_iter().map(Into::into));
    let daemon = Daemon::start_argv(&cluster.node, &argv, &files.0.join("daemon"), &[]);
    Run { cluster, emu, daemon, _files: files }
}

impl Run {
    /// Asserts the node serves what the API server holds (a real connection through the
    /// kernel), answers `/healthz` with 200 at `healthz` (inside the node), and logged each of
    /// `logged`; returns the log.
    pub fn assert_serves(&self, healthz: &str, logged: &[&str]) -> String {
        let c = &self.cluster;
        let served = wait_for(Duration::from_secs(15), || who(&c.client, "172.30.0.40:80") == "pod-1");
        assert!(served.is_some(), "never served what the API server holds:\n{}", self.daemon.logged());
        let healthy = wait_for(Duration::from_secs(5), || {
            http_get(&c.node.name, healthz, "/healthz").is_some_and(|(code, _, _)| code == 200)
        });
        assert!(healthy.is_some(), "/healthz at {healthz} never answered 200:\n{}", self.daemon.logged());
        let log = self.daemon.logged();
        for line in logged {
            assert!(log.contains(line), "the log lacks {line:?}:\n{log}");
        }
        assert!(!log.contains("ERROR"), "an error was logged:\n{log}");
        log
    }
}
