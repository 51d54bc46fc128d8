//! Data-plane tests: the rendered ruleset in a real kernel, real TCP/UDP connections through it.
//!
//! Each test builds its own cluster of network namespaces (see `common::cluster`), loads the
//! dry run's ruleset into the node and checks where connections land and what source the
//! endpoint saw. Failures name the packet, where it went and where it should have gone.

mod common;

use common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use common::kernel_available;
use common::net::{Probe, Proto, in_netns, probe};
use serde_json::json;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const SHORT: Duration = Duration::from_millis(800);
const LONG: Duration = Duration::from_secs(3);

/// Sends one probe from namespace `ns` (optionally from source `src`).
fn send(ns: &common::Netns, proto: Proto, dst: &str, src: Option<&str>, timeout: Duration) -> Probe {
    let dst: SocketAddr = dst.parse().unwrap_or_else(|_| panic!("bad address {dst}"));
    let src: Option<IpAddr> = src.map(|s| s.parse().unwrap());
    in_netns(&ns.name, move || probe(proto, dst, src, timeout))
}

/// Asserts a probe reached one of `names` and returns the reply.
fn reached(p: Probe, what: &str, names: &[&str]) -> common::net::Reply {
    match p {
        Probe::Reply(r) if names.contains(&r.name.as_str()) => r,
        other => panic!("{what}: went to {}, expected one of {names:?}", other.who()),
    }
}

/// `n` TCP connections from `ns` to `dst`, counted by answering server.
fn spread(ns: &common::Netns, dst: &str, n: usize) -> BTreeMap<String, usize> {
    let dst: SocketAddr = dst.parse().unwrap();
    in_netns(&ns.name, move || {
        let mut seen = BTreeMap::new();
        for _ in 0..n {
            *seen.entry(probe(Proto::Tcp, dst, None, LONG).who()).or_insert(0) += 1;
        }
        seen
    })
}

fn web(c: &Cluster, spec: serde_json::Value, pods: &[&str]) -> Vec<serde_json::Value> {
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service("web", spec, json!({})), slice("web", false, "TCP", eps)]
}

#[test]
fn clusterip_from_pod_node_and_outside() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    let spec = json!({"clusterIP": "172.30.0.10", "ports": [
        {"name": "http", "port": 80, "targetPort": ECHO_PORT},
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": ECHO_PORT}]});
    let eps: Vec<_> = ["pod-1", "rpod-1"].iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    let mut udp = slice("web", false, "UDP", eps.clone());
    udp["metadata"]["name"] = json!("web-udp");
    udp["ports"][0]["name"] = json!("dns");
    c.apply(vec![service("web", spec, json!({})), slice("web", false, "TCP", eps), udp], &[]);
    let any = ["pod-1", "rpod-1"];
    for (from, ns) in [("pod-2", &c.pod_named("pod-2").ns), ("the node", &c.node), ("outside", &c.client)] {
        reached(send(ns, Proto::Tcp, "172.30.0.10:80", None, LONG), &format!("TCP from {from} to the ClusterIP"), &any);
        reached(send(ns, Proto::Udp, "172.30.0.10:53", None, LONG), &format!("UDP from {from} to the ClusterIP"), &any);
    }
}

#[test]
fn sctp_clusterip() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    if let Err(why) = common::net::sctp_supported(&c.node.name) {
        eprintln!("SKIPPING sctp_clusterip: this kernel cannot open SCTP sockets ({why})");
        return;
    }
    let spec = json!({"clusterIP": "172.30.0.11", "ports": [{"name": "http", "port": 80, "protocol": "SCTP", "targetPort": ECHO_PORT}]});
    let eps = vec![endpoint(c.pod_named("pod-1"), false, json!({}))];
    c.apply(vec![service("web", spec, json!({})), slice("web", false, "SCTP", eps)], &[]);
    reached(
        send(&c.client, Proto::Sctp, "172.30.0.11:80", None, LONG),
        "SCTP from outside to the ClusterIP",
        &["pod-1"],
    );
}

#[test]
fn every_endpoint_gets_a_fair_share() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    c.apply(
        web(
            &c,
            json!({"clusterIP": "172.30.0.12", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]}),
            &["pod-1", "pod-2", "rpod-1"],
        ),
        &[],
    );
    let seen = spread(&c.client, "172.30.0.12:80", 300);
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        ["pod-1", "pod-2", "rpod-1"],
        "300 connections landed on {seen:?}"
    );
    for (pod, n) in &seen {
        assert!(*n <= 200, "{pod} got {n} of 300 connections, more than twice its fair share: {seen:?}");
    }
}

#[test]
fn nodeports_only_on_allowed_addresses() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let objects = web(
        &c,
        json!({"type": "NodePort", "clusterIP": "172.30.0.13",
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30080}]}),
        &["pod-1"],
    );
    c.apply(objects.clone(), &[]);
    reached(
        send(&c.client, Proto::Tcp, "192.168.1.1:30080", None, LONG),
        "NodePort on the primary IP from outside",
        &["pod-1"],
    );
    reached(
        send(&c.node, Proto::Tcp, "192.168.1.1:30080", None, LONG),
        "NodePort on the primary IP from the node",
        &["pod-1"],
    );
    let other = send(&c.client, Proto::Tcp, "172.16.0.1:30080", None, SHORT);
    assert_eq!(
        other,
        Probe::Refused,
        "NodePort on the second node IP (not in --nodeport-addresses) went to {}",
        other.who()
    );
    let lo = send(&c.node, Proto::Tcp, "127.0.0.1:30080", None, SHORT);
    assert_eq!(lo, Probe::Refused, "NodePort on 127.0.0.1 went to {}", lo.who());

    c.apply(objects, &["--nodeport-addresses=172.16.0.0/24"]);
    reached(
        send(&c.client, Proto::Tcp, "172.16.0.1:30080", None, LONG),
        "NodePort on an allowed CIDR's address",
        &["pod-1"],
    );
    let primary = send(&c.client, Proto::Tcp, "192.168.1.1:30080", None, SHORT);
    assert_eq!(primary, Probe::Refused, "NodePort on an address outside the CIDRs went to {}", primary.who());
}

#[test]
fn load_balancer_and_external_ips_with_source_ranges() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let spec = json!({"type": "LoadBalancer", "clusterIP": "172.30.0.14", "externalIPs": ["192.168.101.14"],
        "loadBalancerSourceRanges": ["172.16.0.0/28"],
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30081}]});
    let status =
        json!({"loadBalancer": {"ingress": [{"ip": "192.168.100.14"}, {"ip": "192.168.100.15", "ipMode": "Proxy"}]}});
    let eps = vec![endpoint(c.pod_named("pod-1"), false, json!({}))];
    c.apply(vec![service("web", spec, status), slice("web", false, "TCP", eps)], &[]);
    reached(
        send(&c.client, Proto::Tcp, "192.168.100.14:80", Some("172.16.0.2"), LONG),
        "LB IP from an allowed source",
        &["pod-1"],
    );
    let denied = send(&c.client, Proto::Tcp, "192.168.100.14:80", Some("172.16.0.20"), SHORT);
    assert_eq!(denied, Probe::Timeout, "LB IP from 172.16.0.20 (outside the source ranges) went to {}", denied.who());
    reached(
        send(&c.client, Proto::Tcp, "192.168.101.14:80", Some("172.16.0.20"), LONG),
        "externalIP (no source ranges)",
        &["pod-1"],
    );
    let proxy_mode = send(&c.client, Proto::Tcp, "192.168.100.15:80", None, SHORT);
    assert!(!matches!(proxy_mode, Probe::Reply(_)), "an ipMode: Proxy LB IP was served: {}", proxy_mode.who());
}

#[test]
fn session_affinity_sticks_then_may_move() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(3, 0);
    c.apply(
        web(
            &c,
            json!({"clusterIP": "172.30.0.15", "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 1}},
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]}),
            &["pod-1", "pod-2", "pod-3"],
        ),
        &[],
    );
    let sticky = spread(&c.client, "172.30.0.15:80", 20);
    assert_eq!(sticky.len(), 1, "20 quick connections from one client spread over {sticky:?}");
    let mut chosen = std::collections::BTreeSet::new();
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(1300));
        chosen.insert(send(&c.client, Proto::Tcp, "172.30.0.15:80", None, LONG).who());
    }
    assert!(chosen.len() > 1, "after each 1 s timeout the client always returned to {chosen:?}");
}

#[test]
fn external_traffic_policy_local() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    let local = json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": "172.30.0.16",
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30082}]});
    let remote = json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": "172.30.0.17",
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30083}]});
    let lb = |ip: &str| json!({"loadBalancer": {"ingress": [{"ip": ip}]}});
    let ep = |p: &str| endpoint(c.pod_named(p), false, json!({}));
    let mut remote_slice = slice("remote", false, "TCP", vec![ep("rpod-1")]);
    remote_slice["metadata"]["name"] = json!("remote-v4");
    c.apply(
        vec![
            service("local", local, lb("192.168.100.16")),
            slice("local", false, "TCP", vec![ep("pod-1"), ep("rpod-1")]),
            service("remote", remote, lb("192.168.100.17")),
            remote_slice,
        ],
        &[],
    );
    for dst in ["192.168.100.16:80", "192.168.1.1:30082"] {
        for _ in 0..10 {
            let r = reached(
                send(&c.client, Proto::Tcp, dst, None, LONG),
                &format!("outside to eTP=Local {dst}"),
                &["pod-1"],
            );
            assert_eq!(r.seen.to_string(), "172.16.0.2", "the endpoint saw {} instead of the client's address", r.seen);
        }
    }
    for dst in ["192.168.100.17:80", "192.168.1.1:30083"] {
        let p = send(&c.client, Proto::Tcp, dst, None, SHORT);
        assert_eq!(p, Probe::Timeout, "outside to {dst} (no local endpoint) went to {}, expected a drop", p.who());
        let from_pod = send(&c.pod_named("pod-2").ns, Proto::Tcp, dst, None, LONG);
        reached(from_pod, &format!("a pod on the node to {dst} (short-circuited)"), &["rpod-1"]);
        reached(send(&c.node, Proto::Tcp, dst, None, LONG), &format!("the node itself to {dst}"), &["rpod-1"]);
    }
}

#[test]
fn internal_traffic_policy_local() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 2);
    let spec = |ip: &str| json!({"internalTrafficPolicy": "Local", "clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let ep = |p: &str| endpoint(c.pod_named(p), false, json!({}));
    let mut none_slice = slice("none", false, "TCP", vec![ep("rpod-1"), ep("rpod-2")]);
    none_slice["metadata"]["name"] = json!("none-v4");
    c.apply(
        vec![
            service("mixed", spec("172.30.0.18"), json!({})),
            slice("mixed", false, "TCP", vec![ep("pod-1"), ep("rpod-1"), ep("rpod-2")]),
            service("none", spec("172.30.0.19"), json!({})),
            none_slice,
        ],
        &[],
    );
    let seen = spread(&c.node, "172.30.0.18:80", 30);
    assert_eq!(seen.keys().cloned().collect::<Vec<_>>(), ["pod-1"], "iTP=Local used non-local endpoints: {seen:?}");
    let p = send(&c.node, Proto::Tcp, "172.30.0.19:80", None, SHORT);
    assert!(!matches!(p, Probe::Reply(_)), "iTP=Local with no local endpoint reached {}", p.who());
}

#[test]
fn masquerade_off_cluster_but_not_pod_to_pod_and_hairpin() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    let port = json!([{"name": "http", "port": 80, "targetPort": ECHO_PORT}]);
    let mut solo = slice("solo", false, "TCP", vec![endpoint(c.pod_named("pod-1"), false, json!({}))]);
    solo["metadata"]["name"] = json!("solo-v4");
    c.apply(
        vec![
            service("remote", json!({"clusterIP": "172.30.0.20", "ports": port}), json!({})),
            slice("remote", false, "TCP", vec![endpoint(c.pod_named("rpod-1"), false, json!({}))]),
            service("solo", json!({"clusterIP": "172.30.0.21", "ports": port}), json!({})),
            solo,
        ],
        &[],
    );
    let r = reached(send(&c.client, Proto::Tcp, "172.30.0.20:80", None, LONG), "outside to a ClusterIP", &["rpod-1"]);
    assert_eq!(
        r.seen.to_string(),
        "192.168.1.1",
        "traffic from outside the cluster CIDR must be masqueraded to the node"
    );
    let r = reached(
        send(&c.pod_named("pod-2").ns, Proto::Tcp, "172.30.0.20:80", None, LONG),
        "pod to ClusterIP",
        &["rpod-1"],
    );
    assert_eq!(r.seen.to_string(), "10.1.2.2", "pod-to-pod through a ClusterIP must keep the pod's source");
    let r = reached(send(&c.pod_named("pod-1").ns, Proto::Tcp, "172.30.0.21:80", None, LONG), "hairpin", &["pod-1"]);
    assert_eq!(r.seen.to_string(), "10.1.1.1", "a pod reaching itself must be masqueraded to the node");
}

#[test]
fn no_endpoints_refuses_at_once() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let spec = json!({"type": "NodePort", "clusterIP": "172.30.0.22", "ports": [
        {"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30084},
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": ECHO_PORT, "nodePort": 30085}]});
    c.apply(vec![service("empty", spec, json!({}))], &[]);
    for (who, ns) in [("pod", &c.pod_named("pod-1").ns), ("node", &c.node), ("outside", &c.client)] {
        for (proto, dst) in [
            (Proto::Tcp, "172.30.0.22:80"),
            (Proto::Udp, "172.30.0.22:53"),
            (Proto::Tcp, "192.168.1.1:30084"),
            (Proto::Udp, "192.168.1.1:30085"),
        ] {
            let started = std::time::Instant::now();
            let p = send(ns, proto, dst, None, LONG);
            // The node's own UDP to a ClusterIP is rejected in the output hook, which fails the
            // send itself; to its own NodePort it is rejected on input and answered by ICMP.
            let output_hook = who == "node" && proto == Proto::Udp && dst.starts_with("172.30.");
            let expected = if output_hook { Probe::SendDenied } else { Probe::Refused };
            assert_eq!(p, expected, "{proto:?} from {who} to {dst} with no endpoints: {}", p.who());
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{proto:?} from {who} to {dst} was refused only after {:?}",
                started.elapsed()
            );
        }
    }
}

#[test]
fn terminating_fallback_and_topology_hints() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 2);
    let port = json!([{"name": "http", "port": 80, "targetPort": ECHO_PORT}]);
    let term = json!({"conditions": {"ready": false, "serving": true, "terminating": true}});
    let ep = |p: &str, extra: serde_json::Value| endpoint(c.pod_named(p), false, extra);
    let named = |mut s: serde_json::Value, n: &str| {
        s["metadata"]["name"] = json!(n);
        s
    };
    let zone = |z: &str| json!({"hints": {"forZones": [{"name": z}]}});
    c.apply(
        vec![
            service("mixed", json!({"clusterIP": "172.30.0.23", "ports": port}), json!({})),
            named(slice("mixed", false, "TCP", vec![ep("pod-1", json!({})), ep("pod-2", term.clone())]), "mixed-1"),
            service("draining", json!({"clusterIP": "172.30.0.24", "ports": port}), json!({})),
            named(
                slice(
                    "draining",
                    false,
                    "TCP",
                    vec![
                        ep("pod-2", term.clone()),
                        ep("rpod-1", json!({"conditions": {"ready": false, "serving": false, "terminating": true}})),
                    ],
                ),
                "draining-1",
            ),
            service("zoned", json!({"clusterIP": "172.30.0.25", "ports": port}), json!({})),
            named(
                slice(
                    "zoned",
                    false,
                    "TCP",
                    vec![ep("pod-1", zone("zone-a")), ep("rpod-1", zone("zone-a")), ep("rpod-2", zone("zone-b"))],
                ),
                "zoned-1",
            ),
        ],
        &[],
    );
    let seen = spread(&c.client, "172.30.0.23:80", 30);
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        ["pod-1"],
        "a terminating endpoint was used while a ready one exists: {seen:?}"
    );
    let seen = spread(&c.client, "172.30.0.24:80", 20);
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        ["pod-2"],
        "only the serving terminating endpoint may be used: {seen:?}"
    );
    let seen = spread(&c.client, "172.30.0.25:80", 60);
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        ["pod-1", "rpod-1"],
        "zone hints must keep traffic in zone-a: {seen:?}"
    );
}

#[test]
fn ipv6_clusterip_and_nodeport() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    let spec = json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack", "clusterIPs": ["172.30.0.26", "fd00:172:30::26"],
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30086}]});
    let eps =
        |v6: bool| ["pod-1", "rpod-1"].iter().map(|p| endpoint(c.pod_named(p), v6, json!({}))).collect::<Vec<_>>();
    c.apply(
        vec![
            service("web", spec, json!({})),
            slice("web", false, "TCP", eps(false)),
            slice("web", true, "TCP", eps(true)),
        ],
        &[],
    );
    let any = ["pod-1", "rpod-1"];
    for (what, dst) in [("IPv6 ClusterIP", "[fd00:172:30::26]:80"), ("IPv6 NodePort", "[fd00:192:168:1::1]:30086")] {
        let r = reached(send(&c.client, Proto::Tcp, dst, None, LONG), &format!("{what} from outside"), &any);
        assert!(r.seen.is_ipv6(), "{what}: the endpoint saw {}", r.seen);
        reached(send(&c.pod_named("pod-1").ns, Proto::Tcp, dst, None, LONG), &format!("{what} from a pod"), &any);
    }
}
