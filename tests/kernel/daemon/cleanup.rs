//! `--cleanup` and what the daemon needs of the node: kube-proxy's leftovers reported and
//! removed, no `nft` binary needed and an old one only warned about.

use super::*;

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

#[test]
fn no_nft_is_needed_and_an_old_one_is_only_warned_about() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let dir = Scratch::new("oldnft");
    let old = fake_nft_reporting(&dir.0, "nftables v0.9.8 (E.D.S.)", "exit 1");
    let old = old.to_str().expect("utf-8 path");
    let manifests = write_manifests(&c, web(&c, &["pod-1"]));
    // Upstream's switch skips the kernel check (this kernel passes it anyway).
    let skip = (kube_nftproxy::requirements::SKIP_KERNEL_CHECK, "1");
    let d = Daemon::start(&c.node, &manifests, &[], &[("NFT", old), skip]);
    let serves = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(serves.is_some(), "the daemon must serve beside an old nft:\n{}", d.logged());
    let want = "nft 0.9.8 on this node may not list these rules: nft 1.0.1 or later has";
    assert!(wait_for(Duration::from_secs(5), || d.logged().contains(want)).is_some(), "{}", d.logged());
    assert!(d.logged().contains("is set: not checking the kernel version"), "{}", d.logged());
    d.stop();

    // No nft at all: said once, at info.
    let d = Daemon::start(&c.node, &manifests, &[], &[("NFT", "/nonexistent/nft")]);
    assert!(
        wait_for(Duration::from_secs(5), || d.logged().contains("no nft on this node")).is_some(),
        "{}",
        d.logged()
    );
    assert_eq!(who(&c.client, "172.30.0.40:80"), "pod-1");
    d.stop();

    // --cleanup runs no nft, old or missing.
    for nft in [old, "/nonexistent/nft"] {
        let out = Command::new("ip")
            .args(["netns", "exec", &c.node.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "--cleanup"])
            .env("NFT", nft)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!c.node.nft(&["list", "tables"]).contains("kube-nftproxy"), "--cleanup left our tables");
    }
}
