//! The daemon against a real kernel: it follows manifest changes, repairs tampering within
//! two seconds, keeps traffic flowing across a restart, and cleans up completely, also
//! upstream kube-proxy's leftovers.

mod common;

use common::check::{web_on as web, who};
use common::cluster::{Cluster, ECHO_PORT, service};
use common::net::{Probe, Proto, in_netns, probe};
use common::{Netns, kernel_available};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running daemon, killed if the test fails before stopping it.
struct Daemon(Option<Child>);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts the daemon in `ns` over `manifests`, logging to `<manifests>.log`.
fn daemon(ns: &Netns, manifests: &std::path::Path) -> Daemon {
    daemon_with(ns, manifests, &[])
}

/// Starts the daemon with extra flags.
fn daemon_with(ns: &Netns, manifests: &std::path::Path, extra: &[&str]) -> Daemon {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(manifests.with_extension("log")).unwrap();
    Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--hostname-override=node-a"])
        .arg("--cluster-cidr=10.0.0.0/8,fd00:10::/32")
        .arg("--manifests")
        .arg(manifests)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map(|c| Daemon(Some(c)))
        .expect("start daemon")
}

fn stop(mut daemon: Daemon) {
    let mut child = daemon.0.take().expect("running daemon");
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "the daemon must exit cleanly on SIGTERM: {status}");
}

fn write_manifests(c: &Cluster, objects: Vec<Value>) -> std::path::PathBuf {
    let mut items = vec![Cluster::node_object()];
    items.extend(objects);
    let path = std::env::temp_dir().join(format!("{}-manifests.json", c.node.name));
    std::fs::write(&path, serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": items})).unwrap())
        .unwrap();
    path
}

/// Polls `cond` every 20 ms for up to `limit`; returns how long it took.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A one-node cluster whose daemon (started with `extra` flags) serves the `web` service on
/// `pod-1`; returns the cluster, the manifests file and the daemon.
fn serving_web(extra: &[&str]) -> (Cluster, std::path::PathBuf, Daemon) {
    let c = Cluster::new(1, 0);
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    let child = daemon_with(&c.node, &manifests, extra);
    assert!(
        wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some(),
        "daemon never served"
    );
    (c, manifests, child)
}

#[test]
fn tampering_is_repaired_within_two_seconds() {
    if !kernel_available() {
        return;
    }
    let (c, manifests, child) = serving_web(&[]);
    c.node.nft(&["flush", "ruleset"]);
    let took = wait_for(Duration::from_secs(2), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(took.is_some(), "`nft flush ruleset` was not repaired within 2 s");
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "service-ips", "{ 172.30.0.40 . tcp . 80 }"]);
    let took = wait_for(Duration::from_secs(2), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(took.is_some(), "a deleted element was not restored within 2 s");
    stop(child);
    let log = std::fs::read_to_string(manifests.with_extension("log")).unwrap();
    // A change that lands while notifications are paused for the repair's own full sync is
    // caught by the generation check instead ("syncing fully again").
    let repairs = log.matches("restoring the tables").count() + log.matches("syncing fully again").count();
    assert!(repairs >= 2, "both repairs must come from detected tampering:\n{log}");
    std::fs::remove_file(manifests.with_extension("log")).unwrap();
    std::fs::remove_file(manifests).unwrap();
}

#[test]
fn the_periodic_full_sync_refreshes_in_place_unnoticed_by_the_guard() {
    if !kernel_available() {
        return;
    }
    let (c, manifests, child) = serving_web(&["--full-sync-period=1s"]);
    let log_path = manifests.with_extension("log");
    let refreshes = || std::fs::read_to_string(&log_path).unwrap_or_default().matches("Refresh sync").count();
    assert!(wait_for(Duration::from_secs(5), || refreshes() >= 2).is_some(), "no periodic refreshes within 5 s");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    stop(child);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains("restoring the tables"), "the guard took our own refresh for tampering:\n{log}");
    assert!(!log.contains("syncing fully again"), "the refresh's commits were not all counted:\n{log}");
    std::fs::remove_file(log_path).unwrap();
    std::fs::remove_file(manifests).unwrap();
}

#[test]
fn manifest_changes_restart_and_cleanup() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    // A second service claiming web's ClusterIP and port is warned about, once per daemon
    // run rather than on every sync.
    let copycat = || {
        let spec =
            json!({"clusterIP": "172.30.0.40", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
        service("zz-copycat", spec, json!({}))
    };
    let manifests = write_manifests(&c, [web(&c, &["pod-1"]), vec![copycat()]].concat());
    let first = daemon(&c.node, &manifests);
    assert!(wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some());

    // The daemon follows the manifests on disk.
    write_manifests(&c, [web(&c, &["pod-2"]), vec![copycat()]].concat());
    let took = wait_for(Duration::from_secs(5), || who(&c.client, "172.30.0.40:80") == "pod-2");
    assert!(took.is_some(), "the daemon did not apply the changed manifests");

    // Connections keep working while the daemon stops (rules stay) and a new one adopts them.
    let client = c.client.name.clone();
    let prober = std::thread::spawn(move || {
        let dst = "172.30.0.40:80".parse().unwrap();
        in_netns(&client, move || {
            let mut failures = Vec::new();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(4) {
                let p = probe(Proto::Tcp, dst, None, Duration::from_secs(1));
                if !matches!(p, Probe::Reply(_)) {
                    failures.push(format!("{:?}: {}", start.elapsed(), p.who()));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            failures
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    stop(first);
    assert!(c.node.nft(&["list", "tables"]).contains("kube-nftproxy"), "SIGTERM must leave the rules in place");
    std::thread::sleep(Duration::from_millis(500));
    let second = daemon(&c.node, &manifests);
    let failures = prober.join().unwrap();
    assert!(failures.is_empty(), "connections failed across the restart: {failures:?}");
    stop(second);

    for _ in 0..2 {
        let out = Command::new("ip")
            .args(["netns", "exec", &c.node.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--cleanup"])
            .output()
            .unwrap();
        assert!(out.status.success(), "--cleanup failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(c.node.nft(&["list", "ruleset"]).trim(), "", "--cleanup left rules behind");
    let log = std::fs::read_to_string(manifests.with_extension("log")).unwrap_or_default();
    assert_eq!(log.matches("already used by").count(), 2, "one conflict warning per daemon run:\n{log}");
    let _ = std::fs::remove_file(manifests.with_extension("log"));
    std::fs::remove_file(manifests).unwrap();
}

const KUBE_PROXY_LEFTOVERS: &str = "
table ip kube-proxy {
	chain services { counter; }
}
table ip nat {
	chain PREROUTING { type nat hook prerouting priority -100; policy accept;
		counter jump KUBE-SERVICES
		tcp dport 2222 counter accept
	}
	chain KUBE-SERVICES { ip daddr 10.96.0.1 jump KUBE-SVC-ABC
	}
	chain KUBE-SVC-ABC { counter; }
	chain OTHER { counter; }
}
";

fn cleanup(ns: &Netns, extra: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--cleanup"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "--cleanup {extra:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn cleanup_reports_and_removes_kube_proxy_leftovers() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("migrate");
    ns.nft_apply(KUBE_PROXY_LEFTOVERS).unwrap();
    let report = cleanup(&ns, &[]);
    assert!(
        report.contains("`ip kube-proxy`") && report.contains("`ip nat` KUBE-SERVICES and 1 per-service chain ("),
        "{report}"
    );
    assert_eq!(ns.nft(&["list", "tables"]).lines().count(), 2, "--cleanup alone must not touch kube-proxy's rules");

    cleanup(&ns, &["--cleanup-kube-proxy"]);
    let left = ns.nft(&["list", "ruleset"]);
    assert!(!left.contains("kube-proxy") && !left.contains("KUBE-"), "kube-proxy leftovers remain:\n{left}");
    assert!(left.contains("chain OTHER") && left.contains("tcp dport 2222"), "unrelated rules were removed:\n{left}");
    let again = cleanup(&ns, &["--cleanup-kube-proxy"]);
    assert!(!again.contains("kube-proxy left"), "{again}");
}
