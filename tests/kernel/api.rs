//! The daemon following an API server (the emulator, on the "remote node" of a test cluster)
//! through a real kernel: changes carry traffic within a second, every fault the emulator can
//! make is recovered from, ending with the kernel equal to a fresh dry run of the emulator's
//! final state, and authentication works or fails clearly.

use crate::common::check::{web_on as web, who};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::daemon::{Daemon, wait_for};
use crate::common::emulator::Emulator;
use crate::common::{Netns, kernel_available, tables};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod answers;
mod credentials;
mod distributions;
mod dry_runs;
mod faults;
mod first_state;
mod reporting;

/// Where the emulator listens: the remote node's address, as a control plane off the node.
const API_ADDR: &str = "192.168.1.2:6443";

/// Service `name` at `ip`:80 with endpoints on `pods`.
fn svc(c: &Cluster, name: &str, ip: &str, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service(name, spec, json!({})), slice(name, false, "TCP", eps)]
}

/// A cluster with `local` and `remote` pods, and its emulator (on the remote node, bookmarks
/// every second) holding this Node and `web` on pod-1.
fn serving_web(local: u8, remote: u8) -> (Cluster, Emulator) {
    let c = Cluster::new(local, remote);
    let emu = Emulator::start(Some(&c.remote.name), API_ADDR, None, &["--bookmark-interval", "1s"]);
    emu.apply(&Value::Array([vec![Cluster::node_object()], web(&c, &["pod-1"])].concat()));
    (c, emu)
}

/// A cluster, its emulator serving `web` on pod-1 and this Node, and a daemon following it.
fn running(extra: &[&str]) -> (Cluster, Emulator, Daemon) {
    let (c, emu) = serving_web(2, 1);
    let d = Daemon::start_api(&c.node, &emu.kubeconfig(), extra, &[]);
    assert!(
        wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some(),
        "the daemon never served what the API server holds:\n{}",
        d.logged()
    );
    (c, emu, d)
}

/// `kube-nftproxy --dry-run` for node-a against the API server of `kubeconfig`, run by `cmd`.
fn dry_run_command(mut cmd: Command, kubeconfig: &Path, log: &str) -> Output {
    cmd.arg("--dry-run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--hostname-override=node-a")
        .env("RUST_LOG", log)
        .env_remove("NODE_NAME")
        .output()
        .expect("run the dry run")
}

/// The dry run inside `ns` (to see its addresses).
fn dry_run(ns: &Netns, kubeconfig: &Path) -> Output {
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        &ns.name,
        env!("CARGO_BIN_EXE_kube-nftproxy"),
        "--cluster-cidr=10.0.0.0/8,fd00:10::/32",
    ]);
    dry_run_command(cmd, kubeconfig, "warn")
}

/// Whether the node's tables equal a fresh dry run of what the emulator holds now, loaded
/// into `twin`; the difference when not.
fn converged(c: &Cluster, emu: &Emulator, twin: &Netns) -> Result<(), String> {
    let out = dry_run(&c.node, &emu.kubeconfig());
    if !out.status.success() {
        return Err(format!("the dry run failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let _ = twin.run(&["nft", "flush", "ruleset"], "");
    twin.nft_apply(&String::from_utf8_lossy(&out.stdout))?;
    let (want, have) = (tables::state(twin), tables::state(&c.node));
    if want == have { Ok(()) } else { Err(tables::difference(&want, &have)) }
}

/// Waits up to `limit` for the node to converge; panics with the difference and the log.
fn assert_converges(c: &Cluster, emu: &Emulator, twin: &Netns, d: &Daemon, what: &str, limit: Duration) {
    let start = Instant::now();
    let mut last = Err(String::new());
    while start.elapsed() < limit {
        last = converged(c, emu, twin);
        if last.is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: not converged after {limit:?}: {}\n{}", last.unwrap_err(), d.logged());
}

#[test]
fn the_daemon_follows_the_api_server_through_a_real_kernel() {
    if !kernel_available() {
        return;
    }
    let (c, emu, d) = running(&[]);
    // Past the minimum sync period, a new Service is served within a second of its creation.
    std::thread::sleep(Duration::from_millis(1200));
    let created = Instant::now();
    emu.apply(&Value::Array(svc(&c, "api", "172.30.0.41", &["pod-2"])));
    // In the kernel (its endpoint map dispatches the new ClusterIP) within a second; a probe
    // sent before that would only be retransmitted a second later, so the kernel is polled.
    let endpoints = || c.node.nft(&["list", "map", "ip", "kube-nftproxy", "cluster-endpoints-tcp-0"]);
    let took = wait_for(Duration::from_secs(5), || endpoints().contains("172.30.0.41 . 80"));
    assert!(took.is_some(), "the new Service never reached the kernel:\n{}", d.logged());
    assert!(
        created.elapsed() < Duration::from_secs(1),
        "in the kernel only after {:?}:\n{}",
        created.elapsed(),
        d.logged()
    );
    assert_eq!(who(&c.client, "172.30.0.41:80"), "pod-2", "the new Service does not carry traffic");
    // An endpoint removed receives no new connections.
    emu.apply(&Value::Array(web(&c, &["pod-2"])));
    assert!(wait_for(Duration::from_secs(3), || who(&c.client, "172.30.0.40:80") == "pod-2").is_some());
    for _ in 0..20 {
        assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2", "a removed endpoint still got a connection");
    }
    // A deleted Service is gone from the kernel.
    emu.delete(&Value::Array(svc(&c, "api", "172.30.0.41", &[])));
    let gone = wait_for(Duration::from_secs(3), || {
        !c.node.nft(&["list", "table", "ip", "kube-nftproxy"]).contains("172.30.0.41")
    });
    assert!(gone.is_some(), "the deleted Service is still in the kernel:\n{}", d.logged());
    // An update the rules do not depend on (an annotation) and bookmarks sync nothing.
    let syncs = |log: &str| log.matches(" sync").count();
    let before = syncs(&d.logged());
    let mut annotated = web(&c, &["pod-2"]);
    annotated[0]["metadata"]["annotations"] = json!({"example.com/owner": "team-a"});
    emu.apply(&Value::Array(annotated));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(syncs(&d.logged()), before, "an annotation caused a sync:\n{}", d.logged());
    // One WatchList per resource, its stream followed as the watch since, and no list
    // (before the dry runs below list).
    let stats = emu.stats();
    for resource in ["services", "endpointslices", "nodes", "servicecidrs"] {
        assert_eq!(stats["requests"]["watchlist"][resource], 1, "{resource}: {stats}");
        assert_eq!(stats["requests"]["list"][resource].as_u64(), None, "{resource} listed: {stats}");
    }
    let twin = Netns::new("twin");
    assert_converges(&c, &emu, &twin, &d, "after the changes", Duration::from_secs(5));
    let log = d.stop();
    assert!(!log.contains("panicked"), "{log}");
}

/// Where the daemons of the fault groups serve metrics, in the node's namespace.
const METRICS: &str = "127.0.0.1:10249";

/// The value of the sample `series` (name and labels, as written) in a scrape; 0 when absent.
fn sample(scrape: &str, series: &str) -> f64 {
    scrape.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0)
}

/// A kubeconfig in `dir` for the emulator with `user` as its user entry.
fn kubeconfig(dir: &Path, emu: &Emulator, ca: &Path, user: Value) -> std::path::PathBuf {
    let kc = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "emu", "cluster": {"server": emu.api, "certificate-authority": ca}}],
        "users": [{"name": "proxy", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "emu", "user": "proxy"}}]
    });
    let path = dir.join(format!("kubeconfig-{}", fastrand::u32(..)));
    std::fs::write(&path, serde_json::to_vec(&kc).unwrap()).unwrap();
    path
}
