//! `/healthz` and `/livez` as a load balancer's checker and a kubelet probe query them: real
//! HTTP to the daemon inside a network namespace, answers per upstream's rules.

mod common;

use common::cluster::Cluster;
use common::daemon::{Daemon, wait_for};
use common::net::http_get;
use common::owner::TableOwner;
use common::{Netns, Scratch, kernel_available};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the daemon serves health in the test's namespace.
const HEALTHZ: &str = "127.0.0.1:10256";

/// One HTTP GET from inside `ns` to the health address: status, head, body as JSON.
fn get(ns: &Netns, path: &str) -> Option<(u16, String, Value)> {
    let (code, head, body) = http_get(&ns.name, HEALTHZ, path)?;
    Some((code, head, serde_json::from_str(&body).unwrap_or(Value::Null)))
}

/// This node (optionally with extra Node fields) and one service, as a JSON list in `dir`.
fn manifests(dir: &Path, node_extra: Value) -> PathBuf {
    let mut node = Cluster::node_object();
    if let (Some(n), Some(extra)) = (node.as_object_mut(), node_extra.as_object()) {
        for (k, v) in extra {
            n.insert(k.clone(), v.clone());
        }
    }
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"clusterIP": "172.30.0.40", "ports": [{"port": 80}]}});
    write_list(dir, &json!({"kind": "List", "items": [node, svc]}))
}

/// Replaces the manifests in `dir` with `list`, at once (the daemon never reads half a file).
fn write_list(dir: &Path, list: &Value) -> PathBuf {
    let path = dir.join("cluster.json");
    let tmp = dir.join("cluster.tmp");
    std::fs::write(&tmp, list.to_string()).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// The daemon in `ns` over this node and one service (in a scratch directory named after
/// `tag`), with health served and a sync period of 1 s, so a proxy is judged after 2 s.
fn start(ns: &Netns, tag: &str) -> (Scratch, PathBuf, Daemon) {
    let dir = Scratch::new(tag);
    let path = manifests(&dir.0, json!({}));
    let d = Daemon::start(ns, &path, &[&format!("--healthz-bind-address={HEALTHZ}"), "--sync-period=1s"], &[]);
    (dir, path, d)
}

fn namespace(tag: &str) -> Netns {
    let ns = Netns::new(tag);
    assert!(ns.run(&["ip", "link", "set", "lo", "up"], "").status.success());
    ns
}

#[test]
fn healthz_and_livez_answer_as_upstream_and_drain_a_node_going_away() {
    if !kernel_available() {
        return;
    }
    let ns = namespace("healthz");
    let dir = Scratch::new("healthz");
    let path = manifests(&dir.0, json!({}));
    let d = Daemon::start(&ns, &path, &[&format!("--healthz-bind-address={HEALTHZ}")], &[]);
    let ok = |p: &str| get(&ns, p).is_some_and(|(code, _, _)| code == 200);
    // Healthy from the start, as upstream; a family is reported once it has synced.
    let synced = || get(&ns, "/healthz").is_some_and(|(code, _, b)| code == 200 && b["status"]["IPv4"].is_object());
    assert!(wait_for(Duration::from_secs(10), synced).is_some(), "never healthy:\n{}", d.logged());
    let (_, head, body) = get(&ns, "/healthz").unwrap();
    assert!(head.contains("content-type: application/json"), "{head}");
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    assert_eq!(body["healthy"], true, "{body}");
    assert_eq!(body["nodeEligible"], true, "{body}");
    for field in ["lastUpdated", "currentTime"] {
        let t = body[field].as_str().unwrap_or_default();
        assert!(t.ends_with('Z') && t.contains('T') && t.len() >= 20, "{field}: {t:?}");
    }
    assert_eq!(body["status"]["IPv4"]["healthy"], true, "{body}");
    assert_eq!(body["status"]["IPv6"]["healthy"], true, "{body}");
    let (code, _, live) = get(&ns, "/livez").unwrap();
    assert_eq!(code, 200);
    assert!(live.get("nodeEligible").is_none(), "/livez does not judge the node: {live}");
    assert_eq!(get(&ns, "/metrics-not-here").map(|r| r.0), Some(404));
    // The cluster autoscaler taints the node for deletion: load balancers must drain it,
    // while the proxy stays live (that it syncs nothing for it: tests/sync_loop.rs).
    let taint = json!({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}});
    manifests(&dir.0, taint);
    let drained = wait_for(Duration::from_secs(5), || get(&ns, "/healthz").is_some_and(|(c, _, _)| c == 503));
    assert!(drained.is_some(), "a node tainted for deletion still takes traffic:\n{}", d.logged());
    let (_, _, body) = get(&ns, "/healthz").unwrap();
    assert_eq!((body["healthy"].clone(), body["nodeEligible"].clone()), (json!(true), json!(false)), "{body}");
    assert!(ok("/livez"), "the proxy itself is still live");
    // Being deleted counts alike; the Node gone entirely too.
    manifests(&dir.0, json!({"metadata": {"name": "node-a", "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(get(&ns, "/healthz").map(|r| r.0), Some(503));
    manifests(&dir.0, json!({}));
    assert!(wait_for(Duration::from_secs(5), || ok("/healthz")).is_some(), "the node came back");
    // The Node object gone: unknown, so not eligible.
    let with_node: Value = serde_json::from_str(&std::fs::read_to_string(dir.0.join("cluster.json")).unwrap()).unwrap();
    write_list(&dir.0, &json!({"kind": "List", "items": [with_node["items"][1].clone()]}));
    let gone = wait_for(Duration::from_secs(5), || get(&ns, "/healthz").is_some_and(|(c, _, _)| c == 503));
    assert!(gone.is_some(), "a node whose Node object is unknown still takes traffic:\n{}", d.logged());
    assert_eq!(get(&ns, "/healthz").map(|r| r.2["nodeEligible"].clone()), Some(json!(false)));
    manifests(&dir.0, json!({}));
    assert!(wait_for(Duration::from_secs(5), || ok("/healthz")).is_some(), "the node came back");
    d.stop();
}

#[test]
fn a_change_that_cannot_be_applied_makes_the_proxy_unhealthy_after_twice_the_sync_period() {
    if !kernel_available() {
        return;
    }
    let ns = namespace("unhealthy");
    let (dir, path, d) = start(&ns, "unhealthy");
    let code = |p: &str| get(&ns, p).map(|r| r.0);
    assert!(
        wait_for(Duration::from_secs(5), || d.logged().contains("Full sync")).is_some(),
        "no sync:\n{}",
        d.logged()
    );
    let (c, _, body) = get(&ns, "/livez").expect("a health server");
    assert_eq!(c, 200, "{body}");
    let synced = body["status"]["IPv4"]["lastUpdated"].as_str().unwrap_or_default().to_string();
    assert!(synced.starts_with("20"), "a family that synced reports when: {body}");
    // Another process takes both tables: the daemon's repair and every sync after it fail
    // with EPERM, and a change queued meanwhile waits: past 2 s (twice --sync-period) the
    // proxy is unhealthy on both endpoints. (One family's table taken: tests/daemon.rs.)
    let owner = [TableOwner::take(&ns, "ip"), TableOwner::take(&ns, "ip6")];
    let failing = wait_for(Duration::from_secs(5), || d.logged().contains("sync failed"));
    assert!(failing.is_some(), "a sync into a table another process owns went through:\n{}", d.logged());
    let mut list: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    list["items"][1]["spec"]["ports"][0]["port"] = json!(81);
    write_list(&dir.0, &list);
    let sick = wait_for(Duration::from_secs(8), || code("/livez") == Some(503));
    assert!(sick.is_some(), "a stuck proxy still says it is live:\n{}", d.logged());
    let (_, _, body) = get(&ns, "/healthz").unwrap();
    assert_eq!(body["healthy"], false, "{body}");
    // IPv4's last sync that went through; IPv6's may have gone through once more, between
    // the two tables taken. The body's is the later of them, as upstream's.
    assert_eq!(body["status"]["IPv4"]["lastUpdated"], synced.as_str(), "the last sync that went through: {body}");
    let families = ["IPv4", "IPv6"].map(|f| body["status"][f]["lastUpdated"].clone());
    assert!(families.contains(&body["lastUpdated"]), "{body}");
    assert_eq!(body["status"]["IPv6"]["healthy"], false, "{body}");
    // The table freed, the next retry applies the change and the proxy is healthy again.
    for o in owner {
        o.release();
    }
    let healed = wait_for(Duration::from_secs(10), || code("/livez") == Some(200));
    assert!(healed.is_some(), "the proxy stayed unhealthy once its syncs could go through:\n{}", d.logged());
    d.stop();
}

#[test]
fn a_proxy_that_has_not_synced_yet_is_healthy_as_upstreams() {
    if !kernel_available() {
        return;
    }
    // Another process owns both tables before the daemon starts, so its first sync (and
    // every retry) fails with EPERM far past twice the sync period.
    let ns = namespace("starting");
    let _owner = [TableOwner::take(&ns, "ip"), TableOwner::take(&ns, "ip6")];
    let (_dir, _, d) = start(&ns, "starting");
    assert!(wait_for(Duration::from_secs(5), || get(&ns, "/livez").is_some()).is_some(), "no health server");
    let failing = wait_for(Duration::from_secs(5), || d.logged().contains("sync failed"));
    assert!(failing.is_some(), "the first sync must fail here:\n{}", d.logged());
    // Upstream judges only a family that has synced, so a proxy still starting is not
    // restarted by its liveness probe.
    std::thread::sleep(Duration::from_secs(3));
    // Every sync that goes through logs what it sent.
    assert!(!d.logged().contains("endpoints; sent"), "a sync went through:\n{}", d.logged());
    let (c, _, body) = get(&ns, "/livez").unwrap();
    assert_eq!((c, body["healthy"].clone(), body["status"].clone()), (200, json!(true), json!({})), "{body}");
    assert_eq!(body["lastUpdated"], body["currentTime"], "a healthy answer says updated now: {body}");
    d.stop();
}

#[test]
fn the_default_health_address_answers_over_ipv4_and_ipv6_as_gos_wildcard() {
    if !kernel_available() {
        return;
    }
    let ns = namespace("dualstack");
    let dir = Scratch::new("dualstack");
    let path = manifests(&dir.0, json!({}));
    // No --healthz-bind-address: upstream's 0.0.0.0:10256, which Go listens on as [::].
    let d = Daemon::start(&ns, &path, &[], &[]);
    let code = |addr: &str| http_get(&ns.name, addr, "/healthz").map(|r| r.0);
    for addr in ["127.0.0.1:10256", "[::1]:10256"] {
        let up = wait_for(Duration::from_secs(10), || code(addr) == Some(200));
        assert!(up.is_some(), "/healthz on the default address does not answer on {addr}:\n{}", d.logged());
    }
    // An address that is not a wildcard keeps to its family: metrics on 127.0.0.1 only.
    assert_eq!(code("127.0.0.1:10249"), Some(200), "{}", d.logged());
    assert_eq!(code("[::1]:10249"), None, "{}", d.logged());
    d.stop();
    // With IPv6 off in the namespace the default address still serves IPv4.
    let off = ns.run(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.lo.disable_ipv6=1"], "");
    assert!(off.status.success(), "{}", String::from_utf8_lossy(&off.stderr));
    let d = Daemon::start(&ns, &path, &[], &[]);
    let up = wait_for(Duration::from_secs(10), || code("127.0.0.1:10256") == Some(200));
    assert!(up.is_some(), "no /healthz on 127.0.0.1 without IPv6:\n{}", d.logged());
    assert_eq!(code("[::1]:10256"), None);
    d.stop();
}
