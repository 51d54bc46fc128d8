//! The daemon taking a node over from upstream kube-proxy at start: a node whose traffic to
//! a real service flows through kube-proxy's rules (iptables mode next to kubelet's,
//! kube-router's and a user's rules, or nftables mode) keeps every connection while the
//! daemon starts; afterwards exactly kube-proxy's objects are gone, removed only after the
//! daemon's own rules were in. With `--cleanup-kube-proxy-at-start=false` nothing of
//! kube-proxy's changes. IPVS mode's `kube-ipvs0` goes when it is the dummy kube-proxy makes;
//! its legacy chains go once a held xtables lock is freed. Beside kube-proxy
//! (`--service-proxy-name`), its whole nftables table and ours serve their own Services.
//!
//! Needs root, `ip netns`, `nft` and `iptables-nft` (see `tests/kernel/cleanup.rs`).

use crate::common::check::{bulk, probe_during, web_on, who};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::daemon::{Daemon, wait_for, write_manifests};
use crate::common::layouts::{ipsets, iptables_available, ipvs_tools_available, load, state};
use crate::common::monitor::Monitor;
use crate::common::net::{Probe, Proto, in_netns, probe};
use crate::common::owner::TableOwner;
use crate::common::{Netns, Scratch};
use kube_nftproxy::netlink::conntrack::{IPPROTO_UDP, NewFlow, create};
use kube_nftproxy::netlink::{NfFamily, Socket, link};
use kube_nftproxy::takeover::{Interface, remove_ipvs_interface};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod beside;
mod ipvs;
mod legacy;

/// The service every test sends to: `test/web`, served by `pod-1`.
const WEB: &str = "172.30.0.40:80";

/// A node of kube-proxy's iptables mode serving `test/web`, with kubelet's, kube-router's
/// and a user's rules, and tables kube-proxy's nftables mode left.
const IPTABLES_NODE: &[&str] = &["iptables.rules", "iptables6.rules", "iptables.nft", "iptables-web.rules"];

/// The line number of the first event starting with `prefix`.
fn first(events: &str, prefix: &str) -> Option<usize> {
    events.lines().position(|l| l.starts_with(prefix))
}

/// Starts the daemon (with `extra` flags) on `c`'s node, serving `test/web` on pod-1, while a
/// client connects to it every 10 ms; waits until the log holds `done`, then until the
/// prober's window ends. Returns the daemon's log and the prober's failures.
fn start_under_traffic(c: &Cluster, extra: &[&str], done: &str) -> (String, Vec<String>) {
    start_with_under_traffic(c, web_on(c, &["pod-1"]), extra, Duration::from_secs(6), done)
}

/// As [`start_under_traffic`], the daemon serving `objects`, probes running for `window`.
fn start_with_under_traffic(
    c: &Cluster,
    objects: Vec<Value>,
    extra: &[&str],
    window: Duration,
    done: &str,
) -> (String, Vec<String>) {
    assert_eq!(who(&c.client, WEB), "pod-1", "kube-proxy's rules do not serve the service before the daemon starts");
    let manifests = write_manifests(c, objects);
    let started = Instant::now();
    let prober = probe_during(&c.client, WEB, window);
    std::thread::sleep(Duration::from_millis(300));
    let daemon = Daemon::start(&c.node, &manifests, extra, &[]);
    let seen = wait_for(Duration::from_secs(15), || daemon.logged().contains(done));
    assert!(seen.is_some(), "the daemon never logged {done:?}:\n{}", daemon.logged());
    assert!(started.elapsed() < window, "the takeover ended after the probes did; nothing was proven");
    let failures = prober.join().expect("prober");
    let log = daemon.stop();
    (log, failures)
}

#[test]
fn iptables_mode_is_taken_over_without_a_failed_connection() {
    if !iptables_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    load(&c.node, IPTABLES_NODE, true);
    let expected = Netns::new("tko-exp");
    load(&expected, IPTABLES_NODE, false);
    let monitor = Monitor::start(&c.node);

    let (log, failures) = start_under_traffic(&c, &[], "left `inet user KUBE-SERVICES`");
    assert!(failures.is_empty(), "connections failed while the daemon took over: {failures:?}\n{log}");
    let events = monitor.events();
    let ours = first(&events, "add chain ip kube-nftproxy nat-prerouting").expect("our hooked chain was never added");
    let theirs = first(&events, "delete chain ip nat KUBE-SERVICES").expect("kube-proxy's chain was never deleted");
    assert!(ours < theirs, "kube-proxy's rules went before ours were in (events {theirs} < {ours})");

    assert_eq!(state(&c.node), state(&expected), "after the takeover the node is not as without kube-proxy\n{log}");
    assert_eq!(who(&c.client, WEB), "pod-1", "the service is not served after the takeover");
    for line in [
        "removed nftables table `ip kube-proxy`",
        "removed `ip nat` KUBE-MARK-MASQ, KUBE-NODEPORTS, KUBE-POSTROUTING, KUBE-PROXY-CANARY, KUBE-SERVICES and 11 per-service chains",
        "left `ip filter` KUBE-FIREWALL, KUBE-KUBELET-CANARY: kubelet's",
        "left `ip filter` KUBE-NWPLCY-DEFAULT, KUBE-NWPLCY-4RZBQJ7WSU2CDVEC, KUBE-POD-FW-QXNUWJC7XMBNJTXB, KUBE-ROUTER-FORWARD, KUBE-ROUTER-INPUT, KUBE-ROUTER-OUTPUT: kube-router's",
    ] {
        assert!(log.contains(line), "the log lacks {line:?}:\n{log}");
    }
    let ours_first = log.find("Full sync").expect("no full sync logged");
    assert!(ours_first < log.find("removed ").expect("nothing removed"), "{log}");
}

#[test]
fn with_the_flag_off_kube_proxys_rules_stay_and_are_reported() {
    if !iptables_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    load(&c.node, IPTABLES_NODE, true);
    let before = state(&c.node);
    let flag = ["--cleanup-kube-proxy-at-start=false"];
    let (log, failures) = start_under_traffic(&c, &flag, "upstream kube-proxy left `ip nat`");
    assert!(failures.is_empty(), "connections failed while the daemon started: {failures:?}\n{log}");
    assert_eq!(state(&c.node), before, "--cleanup-kube-proxy-at-start=false changed kube-proxy's rules\n{log}");
    assert!(log.contains("--cleanup-kube-proxy-at-start=false leaves it"), "{log}");
    assert!(!log.contains("removed "), "{log}");
}

#[test]
fn nftables_mode_table_is_taken_over_without_a_failed_connection() {
    if !crate::common::kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    load(&c.node, &["nftables-web.nft"], true);
    let (log, failures) = start_under_traffic(&c, &[], "removed nftables table `ip kube-proxy`");
    assert!(failures.is_empty(), "connections failed while the daemon took over: {failures:?}\n{log}");
    let tables = c.node.nft(&["list", "tables"]);
    assert!(!tables.contains("kube-proxy\n"), "kube-proxy's table stayed:\n{tables}");
    assert_eq!(who(&c.client, WEB), "pod-1");
}

#[test]
fn a_big_first_sync_staged_over_kube_proxys_rules_fails_no_connection() {
    if !crate::common::kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    load(&c.node, &["nftables-web.nft"], true);
    // 25,000 elements and more: the elements take two transactions of their own.
    let objects = [web_on(&c, &["pod-1"]), bulk(0..3500)].concat();
    // Its manifests take a while to read on a loaded machine: the probes run long enough.
    let window = Duration::from_secs(20);
    let (log, failures) = start_with_under_traffic(&c, objects, &[], window, "removed nftables table `ip kube-proxy`");
    assert!(failures.is_empty(), "connections failed while the daemon built its tables: {failures:?}\n{log}");
    let staged = log.lines().find(|l| l.contains("Full sync:")).unwrap_or_default();
    let transactions = staged.split(" transactions)").next().and_then(|s| s.rsplit('(').next());
    let transactions: u32 = transactions.and_then(|n| n.parse().ok()).unwrap_or(0);
    // The body, two of elements, the hooks' rules (and any map declared with a size alone).
    assert!(transactions >= 4, "the first sync was not staged as expected: {staged}");
    assert_eq!(who(&c.client, WEB), "pod-1");
}

#[test]
fn a_failed_takeover_is_retried_while_the_proxy_serves() {
    if !crate::common::kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    load(&c.node, &["nftables-web.nft"], true);
    // A real refusal: an `ip6 kube-proxy` table another process owns cannot be deleted, and the
    // takeover's one transaction (with `ip kube-proxy`, which serves the traffic) fails whole.
    let owner = TableOwner::take_table(&c.node, "ip6", "kube-proxy");
    let manifests = write_manifests(&c, web_on(&c, &["pod-1"]));
    let d = Daemon::start(&c.node, &manifests, &[], &[]);
    let retrying = "retrying the takeover from upstream kube-proxy in 2s";
    assert!(wait_for(Duration::from_secs(10), || d.logged().contains(retrying)).is_some(), "{}", d.logged());
    let log = d.logged();
    let cause = ["Operation not permitted", "failing line: delete table ip6 kube-proxy"];
    assert!(cause.iter().all(|c| log.contains(c)), "the refusal and its step are not logged:\n{log}");
    assert!(c.node.nft(&["list", "tables"]).contains("table ip kube-proxy\n"), "a failed transaction removed part");
    assert_eq!(who(&c.client, WEB), "pod-1", "the proxy must serve while the takeover waits");
    // The owner's exit drops its table; the retry finds the rest and removes it.
    owner.release();
    let done = wait_for(Duration::from_secs(5), || d.logged().contains("removed nftables table `ip kube-proxy`"));
    assert!(done.is_some(), "the takeover was not retried:\n{}", d.logged());
    assert!(!c.node.nft(&["list", "tables"]).contains("kube-proxy\n"));
    d.stop();
}
