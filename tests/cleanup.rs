//! `--cleanup --cleanup-kube-proxy` against hosts laid out as upstream's components lay
//! them out (`tests/kube-proxy-layouts/`, written with the real `iptables-nft-restore`):
//! exactly kube-proxy's chains, rules and tables go, everything else (kubelet's,
//! kube-router's, a user's) stays as it was, and without `--cleanup-kube-proxy` nothing
//! changes.
//!
//! Each host is loaded twice: whole into one namespace, and without kube-proxy's lines into
//! another; after the cleanup the first must equal the second, rule for rule.
//!
//! Needs root, `ip netns`, `nft` and `iptables-nft`; outside CI they are skipped with a
//! printed reason, in CI (`CI` set) their absence fails the run.

mod common;

use common::Netns;
use common::layouts::{iptables_available, load, state};
use std::process::Command;

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
    assert!(!again.contains("removed `"), "a second run found more to remove:\n{again}");
    assert_eq!(state(&host), want, "a second run changed the host");
    log
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

#[test]
fn ipvs_mode_goes_and_kubelets_chains_stay() {
    if !iptables_available() {
        return;
    }
    let log = removes_exactly_kube_proxy("ipvs", &["ipvs.rules"]);
    assert!(log.contains("left `ip filter` KUBE-FIREWALL, KUBE-KUBELET-CANARY: kubelet's"), "{log}");
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
