//! Taking over from kube-proxy's IPVS mode: `kube-ipvs0` removed only when it is a dummy, no
//! failed connection, and the NodePort warning silenced by chosen addresses.

use super::*;

/// Creates `kube-ipvs0` in `ns` holding two service IPs: a dummy as kube-proxy makes it
/// where the kernel has dummy interfaces, else a veth (which must then stay). Returns
/// whether it is a dummy.
fn ipvs_interface(ns: &Netns) -> bool {
    let dummy = ns.run(&["ip", "link", "add", "kube-ipvs0", "type", "dummy"], "").status.success();
    if !dummy {
        eprintln!("SKIPPING the removal of a dummy kube-ipvs0: this kernel has no dummy interfaces; a veth stands in");
        let out = ns.run(&["ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "ipvs-peer"], "");
        assert!(out.status.success(), "ip link add veth: {}", String::from_utf8_lossy(&out.stderr));
    }
    for ip in ["10.96.0.1/32", "10.96.0.10/32"] {
        let out = ns.run(&["ip", "addr", "add", ip, "dev", "kube-ipvs0"], "");
        assert!(out.status.success(), "ip addr add: {}", String::from_utf8_lossy(&out.stderr));
    }
    dummy
}

#[test]
fn kube_ipvs0_goes_only_when_it_is_a_dummy_and_link_deletion_works() {
    if !crate::common::kernel_available() {
        return;
    }
    let ns = Netns::new("ipvs0");
    let dummy = ipvs_interface(&ns);
    let name = ns.name.clone();
    in_netns(&name, move || {
        let got = remove_ipvs_interface().expect("remove kube-ipvs0");
        if dummy {
            assert_eq!(got, Interface::Removed { addresses: 2 });
        } else {
            assert_eq!(got, Interface::Kept { kind: Some("veth".into()) });
            // The deletion itself, on the veth standing in.
            let l = link::find("kube-ipvs0").expect("RTM_GETLINK").expect("the veth stays");
            link::delete(l.index).expect("RTM_DELLINK");
        }
        assert_eq!(link::find("kube-ipvs0").expect("RTM_GETLINK"), None, "kube-ipvs0 is still there");
        assert_eq!(remove_ipvs_interface().expect("again"), Interface::Absent);
    });
}

/// A node of kube-proxy's IPVS mode serving `test/web`: its ipsets, its iptables-nft and
/// iptables-legacy chains matching on them, and a DNAT standing in for IPVS.
const IPVS_NODE: &[&str] = &["ipvs.ipset", "ipvs.rules", "ipvs-legacy.rules", "ipvs-web-legacy.rules"];

#[test]
fn ipvs_mode_is_taken_over_without_a_failed_connection() {
    if !ipvs_tools_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    load(&c.node, IPVS_NODE, true);
    let dummy = ipvs_interface(&c.node);
    let expected = Netns::new("ipvs-exp");
    load(&expected, IPVS_NODE, false);
    let (log, failures) = start_under_traffic(&c, &[], "ipsets of kube-proxy's IPVS mode");
    assert!(failures.is_empty(), "connections failed while the daemon took over: {failures:?}\n{log}");
    assert_eq!(state(&c.node), state(&expected), "kube-proxy's IPVS-mode leftovers stayed\n{log}");
    assert_eq!(ipsets(&c.node), ["KUBE-CUSTOM", "my-set"], "{log}");
    assert_eq!(who(&c.client, WEB), "pod-1", "the service is not served after the takeover");
    let links = String::from_utf8_lossy(&c.node.run(&["ip", "link"], "").stdout).into_owned();
    assert_eq!(links.contains("kube-ipvs0"), !dummy, "{links}\n{log}");
    let interface = if dummy { "and the 2 service addresses it held" } else { "left interface kube-ipvs0: a veth" };
    for line in [
        interface,
        "removed upstream kube-proxy's chains from `ip` iptables-legacy tables: nat/KUBE-LOAD-BALANCER,",
        "destroyed 20 ipsets of kube-proxy's IPVS mode",
        "no IPVS in this kernel: no virtual servers to flush",
        "this node ran kube-proxy's IPVS mode, which served NodePorts on every local IP",
    ] {
        assert!(log.contains(line), "the log lacks {line:?}:\n{log}");
    }
    let ours_first = log.find("Full sync").expect("no full sync logged");
    assert!(ours_first < log.find("removed upstream").expect("nothing removed"), "{log}");
}

#[test]
fn nodeport_addresses_chosen_silence_the_ipvs_nodeport_warning() {
    if !ipvs_tools_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    load(&c.node, &["ipvs.ipset"], true);
    let manifests = write_manifests(&c, web_on(&c, &["pod-1"]));
    let daemon = Daemon::start(&c.node, &manifests, &["--nodeport-addresses=all"], &[]);
    let done = wait_for(Duration::from_secs(15), || daemon.logged().contains("destroyed 20 ipsets"));
    let log = daemon.stop();
    assert!(done.is_some(), "{log}");
    assert!(!log.contains("served NodePorts on every local IP"), "{log}");
}
