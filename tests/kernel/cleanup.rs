//! `--cleanup --cleanup-kube-proxy` against hosts laid out as upstream's components lay
//! them out (`tests/kube-proxy-layouts/`, written with the real `iptables-nft-restore`):
//! exactly kube-proxy's chains, rules and tables go, everything else (kubelet's,
//! kube-router's, a user's) stays as it was, and without `--cleanup-kube-proxy` nothing
//! changes.
//!
//! Each host is loaded twice: whole into one namespace, and without kube-proxy's lines into
//! another; after the cleanup the first must equal the second, rule for rule.
//!
//! The parts of the removal that the daemon's takeover shares are also run in-process here:
//! IPVS's absent family, and a set freed while its destruction is retried.
//!
//! Needs root, `ip netns`, `nft` and `iptables-nft`; outside CI they are skipped with a
//! printed reason, in CI (`CI` set) their absence fails the run.

use crate::common::layouts::{ipsets, iptables_available, ipvs_tools_available, load, state};
use crate::common::net::in_netns;
use crate::common::{Netns, Scratch};
use kube_nftproxy::netlink::ipvs;
use kube_nftproxy::takeover;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `kube-nftproxy --cleanup` (with `extra` flags) in `ns`; returns its log.
fn cleanup(ns: &Netns, extra: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--cleanup"])
        .args(extra)
        .env("RUST_LOG", "info")
        .output()
        .expect("run kube-nftproxy");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "--cleanup {extra:?} failed:\n{log}");
    log
}

/// Loads `files` with and without kube-proxy's lines, removes kube-proxy's objects from the
/// first, and checks it then equals the second; returns the removal's log.
fn removes_exactly_kube_proxy(tag: &str, files: &[&str]) -> String {
    let host = Netns::new(tag);
    let expected = Netns::new(&format!("{tag}-exp"));
    load(&host, files, true);
    load(&expected, files, false);
    let want = state(&expected);
    assert_ne!(state(&host), want, "the layout holds nothing of kube-proxy's");
    let log = cleanup(&host, &["--cleanup-kube-proxy"]);
    assert_eq!(state(&host), want, "after --cleanup-kube-proxy, the host is not as without kube-proxy\n{log}");
    let again = cleanup(&host, &["--cleanup-kube-proxy"]);
    for more in ["removed `", "removed upstream", "destroyed "] {
        assert!(!again.contains(more), "a second run found more to remove:\n{again}");
    }
    assert_eq!(state(&host), want, "a second run changed the host");
    log
}

/// Issue 34: a held xtables lock is the node's failure, not the input's: `--cleanup
/// --cleanup-kube-proxy` says so and exits 1, not 2 (bad input).
#[test]
fn a_held_xtables_lock_fails_the_cleanup_as_the_node_not_as_bad_input() {
    if !ipvs_tools_available() {
        return;
    }
    let host = Netns::new("xtheld");
    load(&host, &["ipvs.ipset", "ipvs-legacy.rules"], true);
    // iptables takes its lock's path from XTABLES_LOCKFILE: one of this test's own, held.
    let dir = Scratch::new("xtheld");
    let path = dir.0.join("xtables.lock");
    let lock = std::fs::File::create(&path).expect("lock file");
    lock.lock().expect("flock");
    let out = Command::new("ip")
        .args(["netns", "exec", &host.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--cleanup", "--cleanup-kube-proxy"])
        .env("RUST_LOG", "info")
        .env("XTABLES_LOCKFILE", &path)
        .output()
        .expect("run kube-nftproxy");
    drop(lock);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("Another app is currently holding the xtables lock"), "{log}");
    assert!(log.contains("removing what kube-proxy left failed in part"), "{log}");
    assert_eq!(out.status.code(), Some(1), "the node's failure, not bad input (2):\n{log}");
}

#[test]
fn iptables_mode_goes_and_kubelet_kube_router_and_user_rules_stay() {
    if !iptables_available() {
        return;
    }
    let log = removes_exactly_kube_proxy("ipt", &["iptables.rules", "iptables6.rules", "iptables.nft"]);
    for line in [
        "removed nftables table `ip kube-proxy`",
        "removed nftables table `ip6 kube-proxy`",
        "removed `ip nat` KUBE-MARK-MASQ, KUBE-NODEPORTS, KUBE-POSTROUTING, KUBE-PROXY-CANARY, KUBE-SERVICES and 9 per-service chains",
        "removed 9 rules of `ip filter` that led to them (INPUT 3, FORWARD 4, OUTPUT 2)",
        "left `ip filter` KUBE-FIREWALL, KUBE-KUBELET-CANARY: kubelet's",
        "left `ip filter` KUBE-NWPLCY-DEFAULT, KUBE-NWPLCY-4RZBQJ7WSU2CDVEC, KUBE-POD-FW-QXNUWJC7XMBNJTXB, KUBE-ROUTER-FORWARD, KUBE-ROUTER-INPUT, KUBE-ROUTER-OUTPUT: kube-router's",
        "left `ip nat KUBE-MY-REDIRECT`: not a chain kube-proxy creates in this table",
        "left `inet user KUBE-SERVICES`: not a table kube-proxy uses",
        "left table `inet kube-proxy`: not a table kube-proxy uses",
    ] {
        assert!(log.contains(line), "the log lacks {line:?}:\n{log}");
    }
}

/// An IPVS node: kube-proxy's sets, its iptables-nft chains and its iptables-legacy chains,
/// each matching on the sets.
const IPVS_NODE: &[&str] = &["ipvs.ipset", "ipvs.rules", "ipvs-legacy.rules"];

#[test]
fn ipvs_mode_goes_with_its_ipsets_and_legacy_chains_and_the_rest_stays() {
    if !ipvs_tools_available() {
        return;
    }
    let log = removes_exactly_kube_proxy("ipvs", IPVS_NODE);
    for line in [
        "left `ip filter` KUBE-FIREWALL, KUBE-KUBELET-CANARY: kubelet's",
        "removed upstream kube-proxy's chains from `ip` iptables-legacy tables: nat/KUBE-LOAD-BALANCER, nat/KUBE-MARK-MASQ, nat/KUBE-NODE-PORT, nat/KUBE-POSTROUTING, nat/KUBE-SERVICES, filter/KUBE-FORWARD, filter/KUBE-IPVS-FILTER, filter/KUBE-NODE-PORT, with 6 rules that led to them",
        "destroyed 20 ipsets of kube-proxy's IPVS mode: KUBE-LOOP-BACK, KUBE-CLUSTER-IP,",
        "KUBE-6-CLUSTER-IP, KUBE-6-LOAD-BALANCER-SOURCE-CID, KUBE-6-NODE-PORT-LOCAL-SCTP-HAS",
        "no IPVS in this kernel: no virtual servers to flush",
    ] {
        assert!(log.contains(line), "the log lacks {line:?}:\n{log}");
    }
}

#[test]
fn an_iptables_nft_ipvs_node_loses_every_set_of_kube_proxys() {
    if !ipvs_tools_available() {
        return;
    }
    // No legacy tables: the sets are destroyed right after the nftables transaction that
    // removed the rules matching on them, while the kernel may still hold their references.
    let log = removes_exactly_kube_proxy("ipvsnft", &["ipvs.ipset", "ipvs.rules"]);
    assert!(log.contains("destroyed 20 ipsets of kube-proxy's IPVS mode"), "{log}");
    assert!(!log.contains("left ipsets"), "{log}");
}

#[test]
fn ipvs_leftovers_are_only_reported_without_cleanup_kube_proxy() {
    if !ipvs_tools_available() {
        return;
    }
    let host = Netns::new("ipvsrep");
    load(&host, IPVS_NODE, true);
    let before = state(&host);
    let log = cleanup(&host, &[]);
    assert_eq!(state(&host), before, "--cleanup alone changed kube-proxy's sets or legacy chains\n{log}");
    for line in [
        "upstream kube-proxy left chains in `ip` iptables-legacy tables, whose rules may still catch service traffic: nat/KUBE-LOAD-BALANCER,",
        "upstream kube-proxy left ipsets KUBE-LOOP-BACK, KUBE-CLUSTER-IP,",
    ] {
        assert!(log.contains(line), "the report lacks {line:?}:\n{log}");
    }
}

#[test]
fn a_set_another_rule_still_matches_on_stays_with_a_warning() {
    if !ipvs_tools_available() {
        return;
    }
    let host = Netns::new("ipvsbusy");
    load(&host, IPVS_NODE, true);
    // A user's own rule, in a chain of its own, matching on kube-proxy's set: the set is
    // busy until the user removes the rule, and that is theirs to do.
    let user =
        "*filter\n:USER-LB - [0:0]\n-A USER-LB -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j ACCEPT\nCOMMIT\n";
    let out = host.run(&["iptables-nft-restore", "--noflush"], user);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = cleanup(&host, &["--cleanup-kube-proxy"]);
    assert_eq!(ipsets(&host), ["KUBE-CUSTOM", "KUBE-LOAD-BALANCER-FW", "my-set"], "{log}");
    let warning = "left ipsets of kube-proxy's IPVS mode that something still references (an iptables rule, a list:set): KUBE-LOAD-BALANCER-FW;";
    assert!(log.contains(warning), "{log}");
    assert!(log.contains("destroyed 19 ipsets"), "{log}");
}

#[test]
fn an_old_kubelets_nat_chains_stay_with_its_jump() {
    if !iptables_available() {
        return;
    }
    let log = removes_exactly_kube_proxy("oldkl", &["old-kubelet-ipvs.rules"]);
    for line in [
        "left `ip nat KUBE-MARK-DROP`: kubelets before 1.28 create it too",
        "left `ip nat` KUBE-MARK-MASQ, KUBE-POSTROUTING: kubelets before 1.28 create it too, and KUBE-MARK-DROP",
        "removed `ip nat` KUBE-FIREWALL, KUBE-LOAD-BALANCER, KUBE-NODE-PORT, KUBE-SERVICES",
    ] {
        assert!(log.contains(line), "the log lacks {line:?}:\n{log}");
    }
}

#[test]
fn without_cleanup_kube_proxy_nothing_of_it_changes() {
    if !iptables_available() {
        return;
    }
    let host = Netns::new("report");
    load(&host, &["iptables.rules", "iptables6.rules", "iptables.nft"], true);
    let before = state(&host);
    let log = cleanup(&host, &[]);
    assert_eq!(state(&host), before, "--cleanup alone changed kube-proxy's or others' rules\n{log}");
    for line in [
        "upstream kube-proxy left `ip filter` KUBE-EXTERNAL-SERVICES, KUBE-FORWARD, KUBE-NODEPORTS, KUBE-PROXY-CANARY, KUBE-PROXY-FIREWALL, KUBE-SERVICES (kube-proxy iptables/IPVS mode); --cleanup --cleanup-kube-proxy removes it",
        "upstream kube-proxy left nftables table `ip kube-proxy`",
        "left `ip filter` KUBE-FIREWALL, KUBE-KUBELET-CANARY: kubelet's",
    ] {
        assert!(log.contains(line), "the report lacks {line:?}:\n{log}");
    }
}

#[test]
fn without_ipvs_in_the_kernel_there_is_nothing_to_flush() {
    if !crate::common::kernel_available() {
        return;
    }
    if std::path::Path::new("/proc/net/ip_vs").exists() {
        eprintln!("SKIPPING the absent-IPVS path: this kernel has IPVS");
        return;
    }
    let ns = Netns::new("noipvs");
    in_netns(&ns.name.clone(), || {
        assert_eq!(ipvs::family().expect("CTRL_CMD_GETFAMILY"), None);
        assert_eq!(ipvs::flush().expect("IPVS flush"), ipvs::Flush::NoIpvs);
    });
}

#[test]
fn a_set_freed_a_moment_after_the_first_try_is_destroyed_on_a_retry() {
    if !ipvs_tools_available() {
        return;
    }
    let ns = Netns::new("busyset");
    load(&ns, &["ipvs.ipset"], true);
    let rule = "*filter\n:USER-LB - [0:0]\n-A USER-LB -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n";
    let out = ns.run(&["iptables-nft-restore", "--noflush"], rule);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The last reference goes 30 ms after the first try, as nf_tables drops a removed rule's
    // reference in work deferred past its commit: the set is busy at first, then free.
    let mut remover = Command::new("ip")
        .args(["netns", "exec", &ns.name, "iptables-nft-restore", "--noflush"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("iptables-nft-restore");
    let mut stdin = remover.stdin.take().expect("stdin");
    std::thread::sleep(Duration::from_millis(200));
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        std::io::Write::write_all(&mut stdin, b"*filter\n-F USER-LB\n-X USER-LB\nCOMMIT\n").expect("write");
    });
    let sets = in_netns(&ns.name.clone(), || takeover::ipvs::ipsets(true)).expect("destroy the sets");
    writer.join().expect("writer");
    assert!(remover.wait().expect("iptables-nft-restore").success());
    assert_eq!(sets.busy, Vec::<String>::new(), "a set freed within the retries was left");
    assert!(sets.destroyed.iter().any(|s| s == "KUBE-CLUSTER-IP"), "{sets:?}");
    assert_eq!(ipsets(&ns), ["KUBE-CUSTOM", "my-set"]);
}
