//! Data-plane tests of upstream's edge cases (issue 12): `--masquerade-all` with
//! `externalTrafficPolicy: Local`, NodePorts in a family without a NodePort address, the
//! `loadBalancerSourceRanges` allowance for the node itself, an endpoint listed in two
//! EndpointSlices, and objects as the API server stores them (legacy forms, one unreadable
//! entry). Real packets through the rendered ruleset (see `dataplane.rs`).

use crate::common::check::{LONG, SHORT, reached, send, spread};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::kernel_available;
use crate::common::net::{Probe, Proto};
use serde_json::{Value, json};

fn run(ns: &crate::common::Netns, cmd: &[&str]) {
    let out = ns.run(cmd, "");
    assert!(out.status.success(), "{cmd:?} in {}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
}

/// A LoadBalancer Service on port 80 with `extra` merged into its spec.
fn lb_service(name: &str, cluster_ip: &str, node_port: u16, lb_ip: &str, extra: Value) -> Value {
    let mut spec = json!({"type": "LoadBalancer", "clusterIP": cluster_ip,
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": node_port}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    service(name, spec, json!({"loadBalancer": {"ingress": [{"ip": lb_ip}]}}))
}

#[test]
fn masquerade_all_keeps_the_client_address_of_local_external_traffic() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    let ep = |p: &str| endpoint(c.pod_named(p), false, json!({}));
    let local = json!({"externalTrafficPolicy": "Local"});
    let port = json!([{"name": "http", "port": 80, "targetPort": ECHO_PORT}]);
    c.apply(
        vec![
            lb_service("local", "172.30.0.70", 30070, "192.168.100.70", local),
            slice("local", false, "TCP", vec![ep("pod-1"), ep("rpod-1")]),
            service("solo", json!({"clusterIP": "172.30.0.71", "ports": port}), json!({})),
            slice("solo", false, "TCP", vec![ep("pod-1")]),
        ],
        &["--masquerade-all"],
    );
    for dst in ["192.168.100.70:80", "192.168.1.1:30070"] {
        for _ in 0..5 {
            let r = reached(send(&c.client, Proto::Tcp, dst, None, LONG), &format!("outside to {dst}"), &["pod-1"]);
            assert_eq!(
                r.seen.to_string(),
                "172.16.0.2",
                "eTP=Local {dst} under --masquerade-all lost the client address"
            );
        }
        // The node's own packets carry a node address the endpoint could not answer
        // (an LB IP may be local): they are still masqueraded, as upstream does.
        let r =
            reached(send(&c.node, Proto::Tcp, dst, None, LONG), &format!("the node to {dst}"), &["pod-1", "rpod-1"]);
        assert!(["10.1.1.1", "192.168.1.1"].contains(&r.seen.to_string().as_str()), "node to {dst} seen as {}", r.seen);
    }
    // ClusterIP traffic is masqueraded, even a pod's, which otherwise keeps its source.
    let r = reached(
        send(&c.pod_named("pod-2").ns, Proto::Tcp, "172.30.0.71:80", None, LONG),
        "pod-2 to a ClusterIP",
        &["pod-1"],
    );
    assert_eq!(r.seen.to_string(), "10.1.1.1", "--masquerade-all must masquerade ClusterIP traffic");
    let r = reached(send(&c.client, Proto::Tcp, "172.30.0.71:80", None, LONG), "outside to a ClusterIP", &["pod-1"]);
    assert_eq!(r.seen.to_string(), "10.1.1.1");
}

/// This node's Node object reporting IPv4 addresses only (192.168.1.1, then 172.16.0.1).
fn ipv4_only_node() -> Value {
    let mut node = Cluster::node_object();
    node["status"]["addresses"] = json!([
        {"type": "InternalIP", "address": "192.168.1.1"},
        {"type": "InternalIP", "address": "172.16.0.1"}]);
    node
}

/// A dual-stack NodePort Service on 30071 with pod-1 behind it in both families.
fn dual_stack_nodeport(c: &Cluster) -> Vec<Value> {
    let spec = json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
        "clusterIPs": ["172.30.0.72", "fd00:172:30::72"],
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30071}]});
    let pod = c.pod_named("pod-1");
    vec![
        service("web", spec, json!({})),
        slice("web", false, "TCP", vec![endpoint(pod, false, json!({}))]),
        slice("web", true, "TCP", vec![endpoint(pod, true, json!({}))]),
    ]
}

/// Asserts which node addresses serve NodePort 30071 to the outside client.
fn assert_nodeport_on(c: &Cluster, served: &[&str], refused: &[&str], how: &str) {
    for addr in served {
        let dst = format!("{addr}:30071");
        reached(send(&c.client, Proto::Tcp, &dst, None, LONG), &format!("{how}: outside to {dst}"), &["pod-1"]);
    }
    for addr in refused {
        let dst = format!("{addr}:30071");
        let p = send(&c.client, Proto::Tcp, &dst, None, SHORT);
        assert_eq!(p, Probe::Refused, "{how}: {dst} is no NodePort address, yet: {}", p.who());
    }
}

#[test]
fn nodeports_in_a_family_without_a_nodeport_address_are_served_on_every_local_address() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    // `primary` with a Node that reports no IPv6 address: IPv4 on the primary IP alone,
    // IPv6 on every local address.
    c.apply_with_node(ipv4_only_node(), dual_stack_nodeport(&c), &[]);
    let how = "primary, no IPv6 node IP";
    assert_nodeport_on(&c, &["192.168.1.1", "[fd00:172:16::1]", "[fd00:192:168:1::1]"], &["172.16.0.1"], how);
    // CIDRs of IPv4 alone: the same for IPv6, whatever the Node reports.
    c.apply(dual_stack_nodeport(&c), &["--nodeport-addresses=172.16.0.0/24"]);
    let how = "--nodeport-addresses of IPv4 alone";
    assert_nodeport_on(&c, &["172.16.0.1", "[fd00:172:16::1]", "[fd00:192:168:1::1]"], &["192.168.1.1"], how);
    // --bind-address is the node IP of its family, in place of the Node's address.
    c.apply(dual_stack_nodeport(&c), &["--bind-address=172.16.0.1"]);
    let how = "primary with --bind-address";
    assert_nodeport_on(&c, &["172.16.0.1", "[fd00:192:168:1::1]"], &["192.168.1.1", "[fd00:172:16::1]"], how);
}

#[test]
fn source_ranges_let_the_node_reach_its_lb_ip_only_when_they_hold_its_node_ip() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    // A VIP-style load balancer: the LB IPs are local, so the node's packets to them carry
    // the LB IP as source.
    for vip in ["192.168.100.73", "192.168.100.74"] {
        run(&c.node, &["ip", "addr", "add", &format!("{vip}/32"), "dev", "lo"]);
    }
    let ep = || vec![endpoint(c.pod_named("pod-1"), false, json!({}))];
    let ranges = |r: &[&str]| json!({"loadBalancerSourceRanges": r});
    // The Node lists 192.168.1.1 first (upstream's node IP) and 172.16.0.1 after it.
    let mut node = Cluster::node_object();
    node["status"]["addresses"] = json!([
        {"type": "InternalIP", "address": "192.168.1.1"},
        {"type": "InternalIP", "address": "172.16.0.1"},
        {"type": "InternalIP", "address": "fd00:192:168:1::1"}]);
    c.apply_with_node(
        node,
        vec![
            lb_service("primary", "172.30.0.73", 30073, "192.168.100.73", ranges(&["172.16.0.0/24", "192.168.1.0/24"])),
            slice("primary", false, "TCP", ep()),
            lb_service("secondary", "172.30.0.74", 30074, "192.168.100.74", ranges(&["172.16.0.0/24"])),
            slice("secondary", false, "TCP", ep()),
        ],
        &[],
    );
    for dst in ["192.168.100.73:80", "192.168.100.74:80"] {
        reached(
            send(&c.client, Proto::Tcp, dst, None, LONG),
            &format!("a client within the range to {dst}"),
            &["pod-1"],
        );
    }
    reached(send(&c.node, Proto::Tcp, "192.168.100.73:80", None, LONG), "the node to its LB IP", &["pod-1"]);
    let p = send(&c.node, Proto::Tcp, "192.168.100.74:80", None, SHORT);
    assert!(
        matches!(p, Probe::SendDenied | Probe::Timeout),
        "a range holding only a secondary node address let the node in: {}",
        p.who()
    );
}

/// Two slices of Service `name` at `cluster_ip`, both listing pod-1 (terminating in the first
/// or the second by slice name, as `terminating_first` says), and pod-2 ready in the first.
fn duplicated(c: &Cluster, name: &str, cluster_ip: &str, terminating_first: bool) -> Vec<Value> {
    let term = json!({"conditions": {"ready": false, "serving": true, "terminating": true}});
    let ready = json!({"conditions": {"ready": true}});
    let (a, b) = if terminating_first { (term, ready) } else { (ready, term) };
    let mut first = slice(name, false, "TCP", vec![endpoint(c.pod_named("pod-1"), false, a)]);
    first["endpoints"].as_array_mut().unwrap().push(endpoint(c.pod_named("pod-2"), false, json!({})));
    first["metadata"]["name"] = json!(format!("{name}-a"));
    let mut second = slice(name, false, "TCP", vec![endpoint(c.pod_named("pod-1"), false, b)]);
    second["metadata"]["name"] = json!(format!("{name}-b"));
    let port = json!([{"name": "http", "port": 80, "targetPort": ECHO_PORT}]);
    vec![service(name, json!({"clusterIP": cluster_ip, "ports": port}), json!({})), first, second]
}

#[test]
fn an_endpoint_in_two_slices_is_used_once_as_its_ready_copy() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let mut objects = duplicated(&c, "dup-a", "172.30.0.75", true);
    objects.extend(duplicated(&c, "dup-b", "172.30.0.76", false));
    c.apply(objects, &[]);
    let map = c.node.endpoint_map("ip", "cluster-endpoints-tcp");
    for ip in ["172.30.0.75", "172.30.0.76"] {
        let slots = map.matches(&format!("{ip} . 80 . ")).count();
        assert_eq!(slots, 2, "{ip} must have one slot per distinct endpoint:\n{map}");
    }
    for dst in ["172.30.0.75:80", "172.30.0.76:80"] {
        // Were the terminating copy taken, pod-1 would be left out while pod-2 is ready;
        // were both copies taken, pod-1 would get two thirds of the connections.
        let seen = spread(&c.client, dst, 300);
        assert_eq!(seen.keys().cloned().collect::<Vec<_>>(), ["pod-1", "pod-2"], "{dst}: {seen:?}");
        assert!(seen["pod-1"] < 190, "{dst}: pod-1 got more than its half: {seen:?}");
    }
}

/// The Services of `objects_as_the_api_server_stores_them_are_served_as_upstream_serves_them`:
/// an endpoint with leading zeros (`zeros`), a slice with unusable ports beside a good one
/// (`ports`), a Service labelled headless though it has a ClusterIP (`labelled`), and one
/// with a bogus externalIPs entry (`external`).
fn stored_forms(c: &Cluster) -> Vec<Value> {
    let port = |n: u16| json!({"name": "http", "port": n, "targetPort": ECHO_PORT});
    let plain = |name: &str, ip: &str| service(name, json!({"clusterIP": ip, "ports": [port(80)]}), json!({}));
    let ep = |p: &str| endpoint(c.pod_named(p), false, json!({}));
    // pod-1 is 10.1.1.2, which older API servers may hold as 010.001.001.002.
    let zeros = endpoint(c.pod_named("pod-1"), false, json!({"addresses": ["010.001.001.002"]}));
    let mut ports = slice("ports", false, "TCP", vec![ep("pod-2")]);
    ports["ports"] = json!([{"name": "admin"}, {"name": "zero", "port": 0}, {"name": "http", "port": ECHO_PORT}]);
    let admin = json!({"name": "admin", "port": 81, "targetPort": 9090});
    let mut labelled = plain("labelled", "172.30.0.82");
    labelled["metadata"]["labels"] = json!({"service.kubernetes.io/headless": ""});
    let external = json!({"type": "NodePort", "clusterIP": "172.30.0.83", "externalIPs": ["192.168.101.83", "192.168.101.300"],
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30083}]});
    vec![
        plain("zeros", "172.30.0.80"),
        slice("zeros", false, "TCP", vec![zeros]),
        service("ports", json!({"clusterIP": "172.30.0.81", "ports": [port(80), admin]}), json!({})),
        ports,
        labelled,
        slice("labelled", false, "TCP", vec![ep("pod-1")]),
        service("external", external, json!({})),
        slice("external", false, "TCP", vec![ep("pod-2")]),
    ]
}

#[test]
fn objects_as_the_api_server_stores_them_are_served_as_upstream_serves_them() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    // The Node lists an address no one can read before its primary IP: only that entry goes.
    let mut node = Cluster::node_object();
    node["status"]["addresses"] = json!([
        {"type": "InternalIP", "address": "192.168.1.300"},
        {"type": "InternalIP", "address": "192.168.1.1"},
        {"type": "InternalIP", "address": "fd00:192:168:1::1"}]);
    c.apply_with_node(node, stored_forms(&c), &[]);
    let tcp = |dst: &str, timeout| send(&c.client, Proto::Tcp, dst, None, timeout);
    reached(tcp("172.30.0.80:80", LONG), "an endpoint written with leading zeros", &["pod-1"]);
    reached(tcp("172.30.0.81:80", LONG), "the good port of a slice with unusable ones", &["pod-2"]);
    let p = tcp("172.30.0.81:81", SHORT);
    assert_eq!(
        p,
        Probe::Refused,
        "a port the slice lists numbered 0 or without a number has no endpoints: {}",
        p.who()
    );
    let table = c.node.nft(&["list", "table", "ip", "kube-nftproxy"]);
    assert!(!table.contains("172.30.0.82"), "a Service labelled headless was proxied:\n{table}");
    let p = tcp("172.30.0.82:80", SHORT);
    assert!(!matches!(p, Probe::Reply(_)), "a Service labelled headless was DNATed to {}", p.who());
    for dst in ["172.30.0.83:80", "192.168.101.83:80", "192.168.1.1:30083"] {
        reached(tcp(dst, LONG), &format!("{dst} of a Service with a bogus externalIP"), &["pod-2"]);
    }
    // Had the Node been refused for its bad address, NodePorts would be served on every
    // local address; kept, they are on its primary IP alone.
    let p = tcp("172.16.0.1:30083", SHORT);
    assert_eq!(p, Probe::Refused, "NodePort on a secondary address: the Node was not kept: {}", p.who());
}

#[test]
fn allow_service_external_ips_off_stops_external_ips_and_keeps_load_balancer_ips() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let ep = endpoint(c.pod_named("pod-1"), false, json!({}));
    let objects = || {
        vec![
            lb_service("ext", "172.30.0.80", 30080, "192.168.100.80", json!({"externalIPs": ["192.168.100.81"]})),
            slice("ext", false, "TCP", vec![ep.clone()]),
        ]
    };
    c.apply(objects(), &[]);
    for dst in ["192.168.100.80:80", "192.168.100.81:80"] {
        reached(send(&c.client, Proto::Tcp, dst, None, LONG), &format!("{dst} with the gate on"), &["pod-1"]);
    }
    c.apply(objects(), &["--feature-gates=AllowServiceExternalIPs=false"]);
    reached(send(&c.client, Proto::Tcp, "192.168.100.80:80", None, LONG), "the LB IP with the gate off", &["pod-1"]);
    let p = send(&c.client, Proto::Tcp, "192.168.100.81:80", None, SHORT);
    assert!(!matches!(p, Probe::Reply(_)), "the external IP is still served with the gate off: {}", p.who());
}
