//! kube-proxy's chains in iptables-legacy tables: removed and no one else's, with a bounded
//! wait for the xtables lock.

use super::*;

#[test]
fn kube_proxys_chains_in_iptables_legacy_tables_are_removed_and_no_one_elses() {
    if !iptables_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    // A node whose iptables was the legacy one: kube-proxy's chains, kubelet's canary,
    // kube-router's chain and a user's chain and rule in x_tables, where nftables cannot
    // see them.
    for args in [
        &["-t", "nat", "-N", "KUBE-SERVICES"][..],
        &["-t", "nat", "-A", "PREROUTING", "-j", "KUBE-SERVICES"],
        &["-t", "nat", "-N", "KUBE-SVC-LEGACY1"],
        &["-t", "nat", "-A", "KUBE-SERVICES", "-j", "KUBE-SVC-LEGACY1"],
        &["-t", "nat", "-N", "KUBE-KUBELET-CANARY"],
        &["-t", "nat", "-N", "USER-NAT"],
        &["-t", "nat", "-A", "PREROUTING", "-p", "udp", "-j", "USER-NAT"],
        &["-t", "filter", "-N", "KUBE-NWPLCY-ABC"],
    ] {
        let out = c.node.run(&[&["iptables-legacy"][..], args].concat(), "");
        assert!(out.status.success(), "iptables-legacy {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // And IPv6: IPVS mode's filter chain with the jump to it, next to a user's chain.
    for args in [
        &["-t", "filter", "-N", "KUBE-FORWARD"][..],
        &["-t", "filter", "-A", "FORWARD", "-j", "KUBE-FORWARD"],
        &["-t", "filter", "-N", "USER-FWD"],
        &["-t", "filter", "-A", "FORWARD", "-j", "USER-FWD"],
    ] {
        let out = c.node.run(&[&["ip6tables-legacy"][..], args].concat(), "");
        assert!(out.status.success(), "ip6tables-legacy {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let manifests = write_manifests(&c, web_on(&c, &["pod-1"]));
    let daemon = Daemon::start(&c.node, &manifests, &[], &[]);
    let removed = "removed upstream kube-proxy's chains from `ip` iptables-legacy tables: nat/KUBE-SERVICES, nat/KUBE-SVC-LEGACY1, with 1 rules that led to them";
    let removed6 =
        "removed upstream kube-proxy's chains from `ip6` iptables-legacy tables: filter/KUBE-FORWARD, with 1 rules";
    let done = wait_for(Duration::from_secs(15), || daemon.logged().contains(removed));
    let log = daemon.stop();
    assert!(done.is_some() && log.contains(removed6), "legacy chains not removed:\n{log}");
    let saved6 = String::from_utf8_lossy(&c.node.run(&["ip6tables-legacy-save"], "").stdout).into_owned();
    assert!(!saved6.contains("KUBE-FORWARD") && saved6.contains("-A FORWARD -j USER-FWD"), "{saved6}");
    let saved = String::from_utf8_lossy(&c.node.run(&["iptables-legacy-save"], "").stdout).into_owned();
    assert!(!saved.contains("KUBE-SERVICES") && !saved.contains("KUBE-SVC-LEGACY1"), "{saved}");
    for kept in [":KUBE-KUBELET-CANARY", ":USER-NAT", "-A PREROUTING -p udp -j USER-NAT", ":KUBE-NWPLCY-ABC"] {
        assert!(saved.contains(kept), "{kept} did not stay:\n{saved}");
    }
}

#[test]
fn the_legacy_restore_waits_a_bounded_while_for_the_xtables_lock() {
    if !ipvs_tools_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    load(&c.node, &["ipvs.ipset", "ipvs-legacy.rules"], true);
    // iptables takes its lock's path from XTABLES_LOCKFILE: a lock of this test's own, held
    // as kubelet or another agent may hold the host's.
    let dir = Scratch::new("xtlock");
    let path = dir.0.join("xtables.lock");
    let lock = std::fs::File::create(&path).expect("lock file");
    // flock(2), as iptables takes it; released when `lock` is dropped.
    lock.lock().expect("flock");
    let manifests = write_manifests(&c, web_on(&c, &["pod-1"]));
    let env = [("XTABLES_LOCKFILE", path.to_str().expect("path"))];
    let d = Daemon::start(&c.node, &manifests, &["--nft-timeout=6s"], &env);
    let retrying = "retrying the takeover from upstream kube-proxy in 2s";
    let failed = wait_for(Duration::from_secs(20), || d.logged().contains(retrying));
    assert!(failed.is_some(), "a held lock did not fail the takeover:\n{}", d.logged());
    // Half the helper's 6 s bound, then iptables' own word for it; not the helper's kill.
    let log = d.logged();
    assert!(log.contains("Another app is currently holding the xtables lock"), "{log}");
    assert!(!log.contains("did not finish within"), "the restore waited until it was killed:\n{log}");
    drop(lock);
    let removed = "removed upstream kube-proxy's chains from `ip` iptables-legacy tables: nat/KUBE-LOAD-BALANCER,";
    let done = wait_for(Duration::from_secs(15), || d.logged().contains(removed));
    let log = d.stop();
    assert!(done.is_some(), "the retry after the lock was freed did not remove the chains:\n{log}");
}
