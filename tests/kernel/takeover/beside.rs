//! Running beside kube-proxy (`--service-proxy-name`): only the labelled Services served, and
//! nothing of kube-proxy's changed, its UDP flows included.

use super::*;

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
