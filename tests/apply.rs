//! Applying to a real kernel: partial syncs are small and take effect, a failed transaction
//! changes nothing, tampering is repaired, restarts keep traffic flowing, cleanup is complete.

mod common;

use clap::Parser;
use common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use common::net::{Probe, Proto, in_netns, probe};
use common::{Netns, kernel_available};
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::model::{ApiObject, Model};
use kube_nftproxy::nft::{Applier, OwnPids, SyncKind};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config() -> Config {
    let flags =
        Flags::parse_from(["kube-nftproxy", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/32"]);
    Config::from_flags(&flags).unwrap()
}

/// The desired ruleset for `objects` (plus the Node object), rendered as the daemon would.
fn ruleset(objects: &[Value]) -> kube_nftproxy::render::Ruleset {
    let mut model = Model::default();
    for v in std::iter::once(Cluster::node_object()).chain(objects.iter().cloned()) {
        let obj = match v["kind"].as_str() {
            Some("Service") => ApiObject::Service(Box::new(serde_json::from_value(v).unwrap())),
            Some("EndpointSlice") => ApiObject::EndpointSlice(Box::new(serde_json::from_value(v).unwrap())),
            _ => ApiObject::Node(Box::new(serde_json::from_value(v).unwrap())),
        };
        model.apply(&obj, "node-a").unwrap();
    }
    kube_nftproxy::render::render(&model, &config()).unwrap()
}

fn web(c: &Cluster, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"clusterIP": "172.30.0.40", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service("web", spec, json!({})), slice("web", false, "TCP", eps)]
}

/// Runs a sync of `objects` with the applier inside the node's namespace.
fn sync(
    ns: &Netns,
    applier: Applier,
    objects: &[Value],
    full: bool,
) -> (Applier, Result<kube_nftproxy::nft::SyncReport, String>) {
    sync_ruleset(ns, applier, ruleset(objects), full)
}

fn who(ns: &Netns, dst: &str) -> String {
    let dst = dst.parse().unwrap();
    in_netns(&ns.name, move || probe(Proto::Tcp, dst, None, Duration::from_secs(2))).who()
}

#[test]
fn a_partial_sync_is_a_few_lines_and_traffic_follows() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let applier = Applier::new("node-a", Arc::new(OwnPids::default()));
    let (applier, first) = sync(&c.node, applier, &web(&c, &["pod-1"]), false);
    assert_eq!(first.unwrap().kind, SyncKind::Full, "the first sync must be full");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");

    let (applier, second) = sync(&c.node, applier, &web(&c, &["pod-2"]), false);
    let report = second.unwrap();
    let lines: Vec<&str> = report.script.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    assert_eq!(report.kind, SyncKind::Partial);
    assert!(lines.len() <= 4, "one endpoint swapped took {} lines:\n{}", lines.len(), report.script);
    for _ in 0..10 {
        assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2", "traffic did not follow the endpoint change");
    }

    // Growing to two endpoints moves the service to another lb chain; the old one is flushed
    // now and deleted by a sync at least a second later.
    let (applier, third) = sync(&c.node, applier, &web(&c, &["pod-1", "pod-2"]), false);
    assert_eq!(third.unwrap().kind, SyncKind::Partial);
    assert!(c.node.nft(&["list", "chain", "ip", "kube-nftproxy", "lb-cluster-tcp-1"]).contains("chain"));
    std::thread::sleep(Duration::from_millis(1100));
    let (_, fourth) = sync(&c.node, applier, &web(&c, &["pod-1", "pod-2"]), false);
    let report = fourth.unwrap();
    assert_eq!((report.kind, report.deleted_chains), (SyncKind::Unchanged, 1));
    let listed = c.node.nft(&["list", "table", "ip", "kube-nftproxy"]);
    assert!(!listed.contains("lb-cluster-tcp-1 {"), "the stale chain was not deleted");
}

#[test]
fn a_failed_sync_changes_nothing_and_the_next_one_is_full() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let applier = Applier::new("node-a", Arc::new(OwnPids::default()));
    let (applier, first) = sync(&c.node, applier, &web(&c, &["pod-1"]), false);
    first.unwrap();
    // Someone deletes the service's chain behind our back; the next partial sync rewrites
    // that chain, so its transaction fails halfway (after other commands were accepted).
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "service-ips", "{ 172.30.0.40 . tcp . 80 }"]);
    c.node.nft(&["delete", "chain", "ip", "kube-nftproxy", "service-test/web/tcp/http"]);
    let before = c.node.nft(&["list", "ruleset"]);
    let spec = json!({"clusterIP": "172.30.0.40", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let mut changed = web(&c, &["pod-2"]);
    changed.push(service("extra", json!({"clusterIP": "172.30.0.41", "ports": spec["ports"]}), json!({})));
    changed[0]["spec"]["sessionAffinity"] = json!("ClientIP");
    let (applier, failed) = sync(&c.node, applier, &changed, false);
    let err = failed.expect_err("the partial sync must fail");
    assert!(err.contains("failing line:"), "the error must show the failing line: {err}");
    assert_eq!(c.node.nft(&["list", "ruleset"]), before, "a failed transaction must leave the rules byte for byte");

    let (_, retry) = sync(&c.node, applier, &changed, false);
    assert_eq!(retry.unwrap().kind, SyncKind::Full, "after a failure the next sync is full");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-2");
}

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
    let log = std::fs::OpenOptions::new().create(true).append(true).open(manifests.with_extension("log")).unwrap();
    Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--hostname-override=node-a"])
        .arg("--cluster-cidr=10.0.0.0/8,fd00:10::/32")
        .arg("--manifests")
        .arg(manifests)
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

#[test]
fn tampering_is_repaired_within_two_seconds() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    let child = daemon(&c.node, &manifests);
    assert!(
        wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some(),
        "daemon never served"
    );
    c.node.nft(&["flush", "ruleset"]);
    let took = wait_for(Duration::from_secs(2), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(took.is_some(), "`nft flush ruleset` was not repaired within 2 s");
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "service-ips", "{ 172.30.0.40 . tcp . 80 }"]);
    let took = wait_for(Duration::from_secs(2), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(took.is_some(), "a deleted element was not restored within 2 s");
    stop(child);
    let log = std::fs::read_to_string(manifests.with_extension("log")).unwrap();
    assert_eq!(
        log.matches("restoring the tables").count(),
        2,
        "both repairs must come from detected tampering:\n{log}"
    );
    std::fs::remove_file(manifests.with_extension("log")).unwrap();
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
    assert!(report.contains("`ip kube-proxy`") && report.contains("2 iptables KUBE-* chains in `ip nat`"), "{report}");
    assert_eq!(ns.nft(&["list", "tables"]).lines().count(), 2, "--cleanup alone must not touch kube-proxy's rules");

    cleanup(&ns, &["--cleanup-kube-proxy"]);
    let left = ns.nft(&["list", "ruleset"]);
    assert!(!left.contains("kube-proxy") && !left.contains("KUBE-"), "kube-proxy leftovers remain:\n{left}");
    assert!(left.contains("chain OTHER") && left.contains("tcp dport 2222"), "unrelated rules were removed:\n{left}");
    let again = cleanup(&ns, &["--cleanup-kube-proxy"]);
    assert!(!again.contains("kube-proxy left"), "{again}");
}

#[test]
fn a_big_first_sync_builds_the_tables_before_attaching_hooks() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let mut objects = web(&c, &["pod-1"]);
    for i in 0..2100u32 {
        let ip = format!("172.31.{}.{}", i / 250, i % 250 + 1);
        let spec = json!({"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
        let name = format!("bulk-{i}");
        let eps: Vec<Value> =
            (1..=5).map(|e| json!({"addresses": [format!("10.5.{}.{e}", i % 250)], "nodeName": "node-b"})).collect();
        objects.push(service(&name, spec, json!({})));
        objects.push(slice(&name, false, "TCP", eps));
    }
    let applier = Applier::new("node-a", Arc::new(OwnPids::default()));
    let (applier, first) = sync(&c.node, applier, &objects, false);
    let report = first.unwrap();
    assert_eq!(report.kind, SyncKind::Staged, "a first sync of >10k elements must be staged");
    let build_end = report.script.find("attach the base chains").expect("two scripts");
    assert!(!report.script[..build_end].contains("hook"), "the first transaction must not attach hooks");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    // Once the tables exist, a full sync replaces them in one transaction.
    let (_, again) = sync(&c.node, applier, &objects, true);
    assert_eq!(again.unwrap().kind, SyncKind::Full);
}

/// The desired ruleset of a golden case, rendered from its manifests and flags.
fn golden_ruleset(case: &common::Case) -> kube_nftproxy::render::Ruleset {
    let mut argv = vec!["kube-nftproxy".to_string(), "--hostname-override=node-a".to_string()];
    argv.extend(case.args.iter().cloned());
    let cfg = Config::from_flags(&Flags::parse_from(argv)).unwrap();
    let loaded = kube_nftproxy::manifests::load(&case.dir.join("manifests.yaml")).unwrap();
    let mut model = Model::default();
    for obj in &loaded.objects {
        let _ = model.apply(obj, "node-a");
    }
    kube_nftproxy::render::render(&model, &cfg).unwrap()
}

#[test]
fn elements_sent_over_netlink_list_like_elements_sent_by_nft() {
    if !kernel_available() {
        return;
    }
    for case in common::golden_cases() {
        let desired = golden_ruleset(&case);
        let mut bare = desired.clone();
        for t in &mut bare.tables {
            t.elements.retain(|map, _| !kube_nftproxy::nft::wire::encodable(map));
        }
        let by_text = Netns::new("text");
        by_text.nft_apply(&kube_nftproxy::render::full_sync_script(&desired, "node-a").unwrap()).unwrap();
        let by_netlink = Netns::new("netlink");
        let applier = Applier::new("node-a", Arc::new(OwnPids::default()));
        let (applier, first) = sync_ruleset(&by_netlink, applier, bare, false);
        first.unwrap();
        let (_, second) = sync_ruleset(&by_netlink, applier, desired, false);
        let report = second.unwrap();
        assert!(report.netlink, "{}: elements did not go over netlink", case.name);
        assert_eq!(
            by_netlink.nft(&["list", "ruleset"]),
            by_text.nft(&["list", "ruleset"]),
            "{}: the kernel holds different elements after the netlink path",
            case.name
        );
    }
}

/// Runs a sync of `desired` with the applier inside `ns`.
fn sync_ruleset(
    ns: &Netns,
    applier: Applier,
    desired: kube_nftproxy::render::Ruleset,
    full: bool,
) -> (Applier, Result<kube_nftproxy::nft::SyncReport, String>) {
    in_netns(&ns.name, move || {
        let mut applier = applier;
        let r = applier.sync(desired, full).map_err(|e| e.to_string());
        (applier, r)
    })
}
