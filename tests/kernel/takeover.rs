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

use crate::common::check::{probe_during, web_on, who};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::daemon::{Daemon, wait_for, write_manifests};
use crate::common::layouts::{ipsets, iptables_available, ipvs_tools_available, load, state};
use crate::common::net::{Probe, Proto, in_netns, probe};
use crate::common::owner::TableOwner;
use crate::common::{Netns, Scratch};
use kube_nftproxy::netlink::conntrack::{IPPROTO_UDP, NewFlow, create};
use kube_nftproxy::netlink::{NfFamily, Socket, link};
use kube_nftproxy::takeover::{Interface, remove_ipvs_interface};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The service every test sends to: `test/web`, served by `pod-1`.
const WEB: &str = "172.30.0.40:80";

/// A node of kube-proxy's iptables mode serving `test/web`, with kubelet's, kube-router's
/// and a user's rules, and tables kube-proxy's nftables mode left.
const IPTABLES_NODE: &[&str] = &["iptables.rules", "iptables6.rules", "iptables.nft", "iptables-web.rules"];

/// `nft monitor` in a namespace, writing to a file; ended when dropped.
struct Monitor {
    child: Child,
    out: Scratch,
}

impl Monitor {
    /// Starts it in `ns` and waits until it reports a change, so nothing after is missed.
    fn start(ns: &Netns) -> Monitor {
        let out = Scratch::new("monitor");
        let file = std::fs::File::create(out.0.join("events")).expect("monitor file");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft", "monitor"])
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("nft monitor");
        let monitor = Monitor { child, out };
        let ready = wait_for(Duration::from_secs(5), || {
            ns.nft(&["add", "table", "ip", "monitor-ready"]);
            ns.nft(&["delete", "table", "ip", "monitor-ready"]);
            monitor.events().contains("monitor-ready")
        });
        assert!(ready.is_some(), "nft monitor reported nothing in {}", ns.name);
        monitor
    }

    fn events(&self) -> String {
        std::fs::read_to_string(self.out.0.join("events")).unwrap_or_default()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The line number of the first event starting with `prefix`.
fn first(events: &str, prefix: &str) -> Option<usize> {
    events.lines().position(|l| l.starts_with(prefix))
}

/// Starts the daemon (with `extra` flags) on `c`'s node, serving `test/web` on pod-1, while a
/// client connects to it every 10 ms; waits until the log holds `done`, then until the
/// prober's window ends. Returns the daemon's log and the prober's failures.
fn start_under_traffic(c: &Cluster, extra: &[&str], done: &str) -> (String, Vec<String>) {
    assert_eq!(who(&c.client, WEB), "pod-1", "kube-proxy's rules do not serve the service before the daemon starts");
    let manifests = write_manifests(c, web_on(c, &["pod-1"]));
    let window = Duration::from_secs(6);
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

/// Service `test/api` at 172.30.0.41 (TCP 80 and UDP 53, to the echo port) on `pods`,
/// labelled for the proxy named `canary`; kube-proxy leaves it alone.
fn canary_api(c: &Cluster, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"clusterIP": "172.30.0.41", "ports": [
        {"name": "http", "port": 80, "targetPort": ECHO_PORT}, {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": ECHO_PORT}]});
    let mut svc = service("api", spec, json!({}));
    svc["metadata"]["labels"] = json!({"service.kubernetes.io/service-proxy-name": "canary"});
    let mut s = slice("api", false, "TCP", pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect());
    s["ports"] = json!([{"name": "http", "port": ECHO_PORT, "protocol": "TCP"}, {"name": "dns", "port": ECHO_PORT, "protocol": "UDP"}]);
    // As the EndpointSlice controller copies them from the Service.
    s["metadata"]["labels"]["service.kubernetes.io/service-proxy-name"] = json!("canary");
    vec![svc, s]
}

/// A UDP flow from a client to `orig_dst` answered from `reply_src`, as conntrack holds one.
fn udp_flow(port: u16, orig_dst: &str, reply_src: &str) -> NewFlow {
    let client: SocketAddr = format!("10.9.0.2:{port}").parse().unwrap();
    let (orig_dst, reply_src) = (orig_dst.parse().unwrap(), reply_src.parse().unwrap());
    NewFlow { proto: IPPROTO_UDP, orig_src: client, orig_dst, reply_src, reply_dst: client, timeout: 600 }
}

/// The UDP entries of `ns` as (original destination, reply source).
fn udp_entries(ns: &Netns) -> Vec<(SocketAddr, SocketAddr)> {
    in_netns(&ns.name, || {
        let mut all = Vec::new();
        let mut sock = Socket::open().expect("netlink socket");
        let dump = sock.dump_conntrack(NfFamily::Ip, |e| {
            all.extend((e.proto == IPPROTO_UDP).then_some((e.orig_dst, e.reply_src)));
            Ok(())
        });
        dump.expect("conntrack dump");
        all
    })
}

#[test]
fn beside_kube_proxy_only_the_labelled_services_are_served_and_nothing_of_kube_proxys_changes() {
    if !iptables_available() {
        return;
    }
    let c = Cluster::new(3, 0);
    load(&c.node, &["nftables-web.nft"], true);
    load(&c.node, IPTABLES_NODE, true);
    // kube-proxy's flow to an endpoint it no longer has (its own to sweep), and ours to one.
    let (theirs, ours) =
        (udp_flow(40001, "172.30.0.40:80", "10.9.9.9:8080"), udp_flow(40002, "172.30.0.41:53", "10.9.9.9:8080"));
    assert_eq!(in_netns(&c.node.name, || create([theirs, ours])).expect("conntrack entries"), 2);
    let established = "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established";
    let timeout = || String::from_utf8_lossy(&c.node.run(&["cat", established], "").stdout).into_owned();
    let (before, timeout_before) = (state(&c.node), timeout());
    let cidr = json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["172.30.0.0/16"]}});
    let objects = |pod: &str| [web_on(&c, &["pod-1"]), canary_api(&c, &[pod]), vec![cidr.clone()]].concat();
    let manifests = write_manifests(&c, objects("pod-2"));
    let d = Daemon::start(&c.node, &manifests, &["--service-proxy-name=canary"], &[]);
    let cleanups = || d.logged().matches("conntrack cleanup:").count();
    assert!(wait_for(Duration::from_secs(15), || cleanups() > 0).is_some(), "no first cleanup:\n{}", d.logged());
    assert_eq!(who(&c.client, "172.30.0.41:80"), "pod-2", "the labelled Service is not served");
    assert_eq!(who(&c.client, WEB), "pod-1", "kube-proxy's Service is not served through its rules");
    // kube-proxy drops what goes to its service CIDR but to none of its ClusterIPs, B's
    // address among them; its check runs after DNAT (the forward hook, and output at
    // dstnat+10), where B's packets already carry a pod's address: the client's above went
    // through it, and so does the node's own.
    assert_eq!(who(&c.node, "172.30.0.41:80"), "pod-2", "the node's connection to B, past filter-output-post-dnat");
    let from = |ns: &Netns, proto: Proto, dst: &str| {
        let dst: SocketAddr = dst.parse().unwrap();
        in_netns(&ns.name, move || probe(proto, dst, None, Duration::from_secs(1)))
    };
    // That drop is there: the node's datagram to an unallocated address of the CIDR is
    // refused by its own kernel (a drop in the output hook), not sent to the default route.
    assert_eq!(from(&c.node, Proto::Udp, "172.30.0.99:80"), Probe::SendDenied, "kube-proxy's drop is not in force");
    // A port B does not define: from outside, our reject before routing answers; from the
    // node, kube-proxy's drop at dstnat+10 comes before our reject at `filter`, so the
    // connection times out where kube-proxy's own Services would refuse it.
    assert_eq!(from(&c.client, Proto::Tcp, "172.30.0.41:81"), Probe::Refused);
    assert_eq!(from(&c.node, Proto::Tcp, "172.30.0.41:81"), Probe::Timeout);
    let table = c.node.nft(&["list", "table", "ip", "kube-nftproxy"]);
    assert!(!table.contains("172.30.0.40"), "kube-proxy's Service is in our table:\n{table}");
    assert!(!table.contains("@service-cidrs drop"), "beside kube-proxy, unallocated addresses are its:\n{table}");
    write_manifests(&c, objects("pod-3"));
    assert!(
        wait_for(Duration::from_secs(10), || cleanups() > 1).is_some(),
        "no sweep after B changed:\n{}",
        d.logged()
    );
    assert_eq!(who(&c.client, "172.30.0.41:80"), "pod-3", "a change of the labelled Service is not applied");
    std::thread::sleep(Duration::from_secs(1));
    let log = d.stop();
    assert_eq!(state(&c.node), before, "kube-proxy's tables and chains changed:\n{log}");
    assert_eq!(timeout(), timeout_before, "beside kube-proxy the conntrack sysctls are its own");
    let left: Vec<_> = udp_entries(&c.node).into_iter().map(|(dst, _)| dst.to_string()).collect();
    assert_eq!(left, ["172.30.0.40:80"], "our sweep must take our stale flow and leave kube-proxy's\n{log}");
    assert!(log.contains("--service-proxy-name=canary: serving only Services labelled"), "{log}");
    for never in ["removed ", "upstream kube-proxy left", "/proc/sys/net/netfilter"] {
        assert!(!log.contains(never), "beside kube-proxy the log has {never:?}:\n{log}");
    }
}
