//! The daemon against a real kernel: it follows manifest changes, repairs tampering within
//! two seconds, keeps traffic flowing across a restart, and cleans up completely, also
//! upstream kube-proxy's leftovers.

use crate::common::check::{probe_during, web_on as web, who};
use crate::common::cluster::{Cluster, ECHO_PORT, service};
use crate::common::daemon::{Daemon, fake_nft_reporting, wait_for, write_manifests};
use crate::common::emulator::Emulator;
use crate::common::owner::TableOwner;
use crate::common::{Netns, Scratch, kernel_available};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

mod beside_kube_proxy;
mod cleanup;
mod config_file;

/// A one-node cluster whose daemon (started with `extra` flags) serves the `web` service on
/// `pod-1`; returns the cluster, the manifests file and the daemon.
fn serving_web(extra: &[&str]) -> (Cluster, std::path::PathBuf, Daemon) {
    let c = Cluster::new(1, 0);
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    let child = Daemon::start(&c.node, &manifests, extra, &[]);
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
    let (c, _, child) = serving_web(&[]);
    c.node.nft(&["flush", "ruleset"]);
    let took = wait_for(Duration::from_secs(2), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(took.is_some(), "`nft flush ruleset` was not repaired within 2 s");
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "cluster-endpoints-tcp-0", "{ 172.30.0.40 . 80 . 0 }"]);
    let took = wait_for(Duration::from_secs(2), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(took.is_some(), "a deleted element was not restored within 2 s");
    let log = child.stop();
    // A change that lands while notifications are paused for the repair's own full sync is
    // caught by the generation check instead ("comparing our tables with the kernel's").
    let repairs = log.matches("restoring the tables").count() + log.matches("comparing our tables").count();
    assert!(repairs >= 2, "both repairs must come from detected tampering:\n{log}");
}

#[test]
fn the_periodic_full_sync_over_intact_tables_compares_and_sends_nothing() {
    if !kernel_available() {
        return;
    }
    let (c, _, child) = serving_web(&["--full-sync-period=1s"]);
    // Over tables that hold what they should, a refresh compares and sends nothing.
    let refreshes = || child.logged().matches("the tables held what they should, nothing sent").count();
    assert!(wait_for(Duration::from_secs(5), || refreshes() >= 2).is_some(), "no periodic refreshes within 5 s");
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    let log = child.stop();
    let sent = log.lines().filter(|l| l.contains("Refresh sync") && !l.contains("nothing sent")).count();
    assert_eq!(sent, 0, "a refresh sent something to tables that held what they should:\n{log}");
    assert!(!log.contains("restoring the tables"), "the guard took our own refresh for tampering:\n{log}");
    assert!(!log.contains("comparing our tables"), "the refresh's commits were not all counted:\n{log}");
}

#[test]
fn after_scheduler_flips_a_refresh_deletes_our_own_leftovers_without_calling_them_foreign() {
    if !kernel_available() {
        return;
    }
    let (c, manifests, child) = serving_web(&["--full-sync-period=1s"]);
    let refreshes = || child.logged().matches("Refresh sync").count();
    for scheduler in ["rr", "sh", "mh", "rr", "random"] {
        let mut objects = web(&c, &["pod-1"]);
        objects[0]["metadata"]["annotations"] = json!({"kube-nftproxy.io/scheduler": scheduler});
        assert_eq!(write_manifests(&c, objects), manifests);
        let seen = refreshes();
        assert!(
            wait_for(Duration::from_secs(5), || refreshes() >= seen + 2).is_some(),
            "no refreshes after {scheduler}"
        );
    }
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    let log = child.stop();
    assert!(!log.contains("not ours"), "our own chains were called foreign:\n{log}");
    assert!(!log.contains("restoring the tables"), "{log}");
}

#[test]
fn in_a_pid_namespace_its_own_commits_are_not_tampering_and_others_are() {
    if !kernel_available() {
        return;
    }
    // As in a pod without hostPID: the kernel's notifications name the committing thread by
    // the initial namespace's numbers, which the daemon cannot see; the socket's port it can.
    let c = Cluster::new(2, 0);
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    let mut argv: Vec<std::ffi::OsString> = ["unshare", "--pid", "--fork", "--kill-child"].map(Into::into).to_vec();
    argv.extend(
        [env!("CARGO_BIN_EXE_kube-nftproxy"), "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8"]
            .map(Into::into),
    );
    argv.extend(["--manifests".into(), manifests.clone().into_os_string()]);
    let d = Daemon::start_argv(&c.node, &argv, &manifests, &[]);
    assert!(wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some());
    // Partial syncs of its own: the endpoint moves twice.
    for pods in [&["pod-2"][..], &["pod-1"]] {
        write_manifests(&c, web(&c, pods));
        let served = wait_for(Duration::from_secs(5), || who(&c.client, "172.30.0.40:80") == pods[0]);
        assert!(served.is_some(), "{}", d.logged());
    }
    std::thread::sleep(Duration::from_millis(500));
    let log = d.logged();
    assert!(log.matches("Partial sync").count() >= 2, "{log}");
    assert!(!log.contains("restoring the tables"), "its own partial syncs were taken for tampering:\n{log}");
    // Someone else's change still is.
    c.node.nft(&["delete", "element", "ip", "kube-nftproxy", "cluster-endpoints-tcp-0", "{ 172.30.0.40 . 80 . 0 }"]);
    let repaired = wait_for(Duration::from_secs(3), || d.logged().contains("restoring the tables"));
    assert!(repaired.is_some(), "tampering went unnoticed:\n{}", d.logged());
    assert!(wait_for(Duration::from_secs(3), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some());
    drop(d);
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
    // -v 4 is kube-proxy's debug level (RUST_LOG says info). The OOM score is one this
    // sandbox may set (lowering it takes CAP_SYS_RESOURCE, which it lacks).
    let first = Daemon::start(&c.node, &manifests, &["-v=4", "--oom-score-adj=500"], &[]);
    assert!(wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1").is_some());

    // The daemon follows the manifests on disk.
    write_manifests(&c, [web(&c, &["pod-2"]), vec![copycat()]].concat());
    let took = wait_for(Duration::from_secs(5), || who(&c.client, "172.30.0.40:80") == "pod-2");
    assert!(took.is_some(), "the daemon did not apply the changed manifests");
    let oom = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", first.pid())).unwrap();
    assert_eq!(oom.trim(), "500", "{}", first.logged());
    // One info line per sync says what it covered and sent; the objects are at debug. (The
    // line follows the kernel's commit, which traffic may have seen first.)
    wait_for(Duration::from_secs(5), || first.logged().contains("Partial sync"));
    let logged = first.logged();
    let synced = logged.lines().filter(|l| l.contains(" INFO ") && l.contains(" sync")).collect::<Vec<_>>();
    let partial = synced.iter().find(|l| l.contains("Partial sync"));
    let partial = partial.unwrap_or_else(|| panic!("no partial sync logged:\n{logged}"));
    assert!(partial.contains(": 2 services, 1 endpoints; sent ") && partial.contains(" bytes in "), "{partial}");
    assert!(
        logged.contains(" DEBUG ") && logged.contains("EndpointSlice test/web-v4 of web: 1 endpoints"),
        "no per-object detail:\n{logged}"
    );

    // Connections keep working while the daemon stops (rules stay) and a new one adopts them.
    let prober = probe_during(&c.client, "172.30.0.40:80", Duration::from_secs(4));
    std::thread::sleep(Duration::from_millis(500));
    let mut log = first.stop();
    assert!(c.node.nft(&["list", "tables"]).contains("kube-nftproxy"), "SIGTERM must leave the rules in place");
    std::thread::sleep(Duration::from_millis(500));
    let second = Daemon::start(&c.node, &manifests, &[], &[]);
    let failures = prober.join().unwrap();
    assert!(failures.is_empty(), "connections failed across the restart: {failures:?}");
    log += &second.stop();

    for _ in 0..2 {
        let out = Command::new("ip")
            .args(["netns", "exec", &c.node.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--cleanup"])
            .output()
            .unwrap();
        assert!(out.status.success(), "--cleanup failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(c.node.nft(&["list", "ruleset"]).trim(), "", "--cleanup left rules behind");
    assert_eq!(log.matches("already used by").count(), 2, "one conflict warning per daemon run:\n{log}");
}

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
fn a_squatted_ipv6_table_stops_neither_ipv4_nor_its_health_and_ipv6_heals_once_freed() {
    if !kernel_available() {
        return;
    }
    use crate::common::net::http_get;
    let (c, _, d) = serving_web(&["--healthz-bind-address=127.0.0.1:10256", "--sync-period=1s"]);
    let healthz = || {
        let (code, _, body) = http_get(&c.node.name, "127.0.0.1:10256", "/healthz")?;
        Some((code, serde_json::from_str::<serde_json::Value>(&body).ok()?["status"].clone()))
    };
    let both =
        wait_for(Duration::from_secs(5), || healthz().is_some_and(|(code, s)| code == 200 && s["IPv6"].is_object()));
    assert!(both.is_some(), "both families never synced: {:?}\n{}", healthz(), d.logged());
    // Another process takes IPv6's table (nftables `flags owner`): every change of the proxy's
    // to it is refused from now on. A Service created meanwhile must still reach IPv4.
    let owner = TableOwner::take(&c.node, "ip6");
    let held = c.node.nft(&["list", "table", "ip6", "kube-nftproxy"]);
    write_manifests(&c, [web(&c, &["pod-1"]), c.dual("api", 41, &["pod-1"])].concat());
    let served = wait_for(Duration::from_secs(5), || who(&c.client, "172.30.0.41:80") == "pod-1");
    assert!(served.is_some(), "a new Service never reached IPv4 while IPv6's table was taken:\n{}", d.logged());
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1", "{}", d.logged());
    // Past the health timeout (twice --sync-period), IPv6 is unhealthy, IPv4 is not.
    let sick = wait_for(Duration::from_secs(8), || healthz().is_some_and(|(code, _)| code == 503));
    assert!(sick.is_some(), "/healthz stayed {:?}:\n{}", healthz(), d.logged());
    let (_, status) = healthz().unwrap();
    assert_eq!((status["IPv4"]["healthy"].clone(), status["IPv6"]["healthy"].clone()), (json!(true), json!(false)));
    // Retried on the backoff (1 s here), each refusal counted, the trouble logged once.
    let metric = |family: &str| {
        let (_, _, text) = http_get(&c.node.name, "127.0.0.1:10249", "/metrics").unwrap_or_default();
        let name = format!("kubeproxy_sync_proxy_rules_nftables_sync_failures_total{{ip_family=\"{family}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&name)?.parse::<u64>().ok()).unwrap_or(0)
    };
    assert!(wait_for(Duration::from_secs(5), || metric("IPv6") >= 3).is_some(), "IPv6: {}", metric("IPv6"));
    assert_eq!(metric("IPv4"), 0);
    let log = d.logged();
    assert_eq!(log.matches("refused the IPv6 rules").count(), 1, "logged once, not per retry:\n{log}");
    assert!(!log.contains("sync failed"), "IPv4's syncs went through:\n{log}");
    assert_eq!(c.node.nft(&["list", "table", "ip6", "kube-nftproxy"]), held, "the refused table was touched");
    // Freed: the next retry applies IPv6, and health recovers.
    owner.release();
    let healed = wait_for(Duration::from_secs(5), || who(&c.client, "[fd00:172:30::41]:80") == "pod-1");
    assert!(healed.is_some(), "IPv6 never applied once its table was free:\n{}", d.logged());
    let healthy = wait_for(Duration::from_secs(5), || healthz().is_some_and(|(code, _)| code == 200));
    assert!(healthy.is_some(), "/healthz stayed {:?}:\n{}", healthz(), d.logged());
    assert!(d.logged().contains("the IPv6 rules went through again"), "{}", d.logged());
    d.stop();
}
