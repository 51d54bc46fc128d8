//! `/healthz` and `/livez` as a load balancer's checker and a kubelet probe query them: real
//! HTTP to the daemon inside a network namespace, answers per upstream's rules.

use crate::common::checker::{NODE_IP, check_at, expect, local_lb};
use crate::common::cluster::Cluster;
use crate::common::daemon::{Daemon, systemd_nofile, wait_for, write_list, write_manifests};
use crate::common::net::{connect_nonblocking, http_get, in_netns};
use crate::common::owner::TableOwner;
use crate::common::{Netns, Scratch, kernel_available};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
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

/// The daemon in `ns` over this node and one service (in a scratch directory named after
/// `tag`), with health served and a sync period of 1 s, so a proxy is judged after 2 s.
fn start(ns: &Netns, tag: &str) -> (Scratch, PathBuf, Daemon) {
    let dir = Scratch::new(tag);
    let path = manifests(&dir.0, json!({}));
    let d = Daemon::start(ns, &path, &[&format!("--healthz-bind-address={HEALTHZ}"), "--sync-period=1s"], &[]);
    (dir, path, d)
}

#[test]
fn healthz_and_livez_answer_as_upstream_and_drain_a_node_going_away() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::with_loopback("healthz");
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
    // while the proxy stays live (that it syncs nothing for it: tests/offline/sync_loop.rs).
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
    let ns = Netns::with_loopback("unhealthy");
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
    // proxy is unhealthy on both endpoints. (One family's table taken: tests/kernel/daemon.rs.)
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
    let ns = Netns::with_loopback("starting");
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
    let ns = Netns::with_loopback("dualstack");
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

/// `n` idle connections from the client to `addr`, held until dropped: non-blocking
/// connects, 64 every 10 ms (as fast as a backlog of 128 takes them without SYNs dropped and
/// sent again a second later), so `n` are there within a second when the daemon keeps up.
fn flood(c: &Cluster, addr: &str, n: usize) -> Vec<OwnedFd> {
    let addr: SocketAddr = addr.parse().unwrap();
    in_netns(&c.client.name, move || {
        let mut held = Vec::new();
        while held.len() < n {
            held.extend((0..64.min(n - held.len())).map(|_| connect_nonblocking(addr)));
            std::thread::sleep(Duration::from_millis(10));
        }
        held
    })
}

/// The status `path` answers on `addr`, asked from the client.
fn code(c: &Cluster, addr: &str, path: &str) -> Option<u16> {
    http_get(&c.client.name, addr, path).map(|r| r.0)
}

/// The daemon under the open-files limits `nofile` (`soft:hard`), one Local Service's
/// health-check port, `/healthz` on every address and `/metrics` on 127.0.0.1: a flood of
/// 1,300 idle connections (more than a limit of 1,024 allows) on one endpoint must not keep
/// the others from answering, and once it ends that endpoint answers again by itself.
/// With `squeeze`, the soft limit is lowered to that once the daemon runs (`prlimit --pid`),
/// so that it runs out of descriptors where it planned to have them. The cluster comes back
/// with the daemon: its scratch directory holds the daemon's manifests and log.
fn a_flood_wedges_nothing(nofile: &str, squeeze: Option<&str>) -> (Cluster, Daemon) {
    let c = Cluster::new(1, 0);
    let path = write_manifests(&c, local_lb(&c, "web", 90, 32090, &["pod-1"]));
    let d = Daemon::start_limited(&c.node, &path, nofile, &[]);
    expect(&c, &d, 32090, Some((200, "1")), "served");
    if let Some(lower) = squeeze {
        let pid = d.pid().to_string();
        let out = std::process::Command::new("prlimit").args(["--pid", &pid, &format!("--nofile={lower}")]).output();
        assert!(out.is_ok_and(|o| o.status.success()), "prlimit --pid {pid} --nofile={lower}");
    }
    let (healthz, port) = (format!("{NODE_IP}:10256"), format!("{NODE_IP}:32090"));
    let metrics = || http_get(&c.node.name, "127.0.0.1:10249", "/metrics").map(|r| r.0);
    // A peer floods /healthz: the others answer meanwhile, and /healthz once it is over.
    let crowd = flood(&c, &healthz, 1300);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(metrics(), Some(200), "/metrics during a flood on :10256\n{}", d.logged());
    assert_eq!(check_at(&c, &port).map(|r| r.0), Some(200), "a health-check port during it\n{}", d.logged());
    std::thread::sleep(Duration::from_secs(1));
    drop(crowd);
    let back = wait_for(Duration::from_secs(5), || {
        code(&c, &healthz, "/healthz") == Some(200) && code(&c, &healthz, "/livez") == Some(200)
    });
    assert!(back.is_some(), "/healthz and /livez do not come back after a flood ({nofile})\n{}", d.logged());
    // And a flood on a health-check port leaves /healthz, /livez and /metrics answering.
    let crowd = flood(&c, &port, 1300);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(code(&c, &healthz, "/healthz"), Some(200), "/healthz during a flood on a port\n{}", d.logged());
    assert_eq!(code(&c, &healthz, "/livez"), Some(200), "/livez during it\n{}", d.logged());
    assert_eq!(metrics(), Some(200), "/metrics during it\n{}", d.logged());
    drop(crowd);
    let back = wait_for(Duration::from_secs(5), || check_at(&c, &port).is_some_and(|r| r.0 == 200));
    assert!(back.is_some(), "the health-check port does not come back after a flood\n{}", d.logged());
    (c, d)
}

#[test]
fn a_flood_under_systemds_default_limits_wedges_nothing() {
    if !kernel_available() {
        return;
    }
    // systemd's soft 1,024 and hard 524,288: the daemon raises the soft limit, as Go's
    // runtime raises kube-proxy's, and says so.
    let nofile = systemd_nofile();
    let (_cluster, d) = a_flood_wedges_nothing(&nofile, None);
    let (soft, hard) = d.nofile();
    assert_eq!(soft, hard, "the soft limit is not raised to the hard one ({nofile})\n{}", d.logged());
    let logged = d.stop();
    assert!(logged.contains(&format!("raised from 1024 to its hard limit {hard}")), "{logged}");
}

#[test]
fn a_flood_under_a_hard_limit_of_1024_wedges_nothing_for_good() {
    if !kernel_available() {
        return;
    }
    // A runtime's hard 1,024 cannot be raised: floods are outlasted, not outgrown.
    let (_cluster, d) = a_flood_wedges_nothing("1024:1024", None);
    assert_eq!(d.nofile(), ("1024".into(), "1024".into()));
    d.stop();
}

#[test]
fn a_flood_past_the_descriptors_left_is_outlasted_and_logged() {
    if !kernel_available() {
        return;
    }
    // Fewer descriptors than the daemon planned for (the limit lowered under it to 300):
    // accepting fails with EMFILE, which is logged, now and then, and outlasted.
    let (_cluster, d) = a_flood_wedges_nothing("1024:1024", Some("300:1024"));
    let logged = d.stop();
    let refused = logged.matches("cannot accept a connection to /healthz and /livez").count();
    assert!(refused >= 1, "a refused accept is not logged:\n{logged}");
    assert!(refused <= 2, "a refused accept is logged {refused} times in a few seconds:\n{logged}");
}

#[test]
fn a_checker_waiting_while_no_descriptor_is_left_is_answered_once_they_are_back() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let path = write_manifests(&c, local_lb(&c, "web", 91, 32091, &["pod-1"]));
    let d = Daemon::start_limited(&c.node, &path, "1024:1024", &[]);
    expect(&c, &d, 32091, Some((200, "1")), "served");
    // The soft limit lowered under the daemon to its lowest free descriptor, and its reserve
    // (a `/dev/null` past its standard ones) left above it: none is left to accept with.
    let fds = format!("/proc/{}/fd", d.pid());
    let table = || -> std::collections::BTreeSet<usize> {
        std::fs::read_dir(&fds).unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
    };
    // Read while no descriptor comes and goes (a child being started): twice alike.
    let mut open = table();
    let still = wait_for(Duration::from_secs(5), || {
        std::thread::sleep(Duration::from_millis(100));
        std::mem::replace(&mut open, table()) == open
    });
    assert!(still.is_some(), "the daemon's descriptors do not settle");
    let null = |n: &usize| std::fs::read_link(format!("{fds}/{n}")).is_ok_and(|p| p == Path::new("/dev/null"));
    let reserve = open.iter().copied().filter(|n| *n > 2 && null(n)).min().unwrap_or(usize::MAX);
    let limit = (0..).find(|n| !open.contains(n)).unwrap().min(reserve);
    let prlimit = |nofile: String| {
        let out = std::process::Command::new("prlimit").args(["--pid", &d.pid().to_string(), &nofile]).output();
        assert!(out.is_ok_and(|o| o.status.success()), "prlimit {nofile}");
    };
    prlimit(format!("--nofile={limit}:1024"));
    // A checker comes meanwhile and waits; once descriptors are back it is answered, with
    // no other connection coming to wake the listener.
    let healthz = format!("{NODE_IP}:10256");
    let answered = std::thread::scope(|s| {
        let checker = s.spawn(|| code(&c, &healthz, "/healthz"));
        let logged = wait_for(Duration::from_secs(2), || d.logged().contains("cannot accept a connection to /healthz"));
        assert!(logged.is_some(), "the refused accept is not logged:\n{}", d.logged());
        prlimit("--nofile=1024:1024".into());
        checker.join().unwrap()
    });
    assert_eq!(answered, Some(200), "the waiting checker is not answered:\n{}", d.logged());
    d.stop();
}
