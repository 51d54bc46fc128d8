//! Data-plane tests: the rendered ruleset in a real kernel, real TCP/UDP connections through it.
//!
//! Each test builds its own cluster of network namespaces (see `crate::common::cluster`), loads the
//! dry run's ruleset into the node and checks where connections land and what source the
//! endpoint saw. Failures name the packet, where it went and where it should have gone. The
//! schedulers' picks (a hash of the client, a round robin) are checked in
//! `dataplane_affinity/schedulers.rs`.

use crate::common::check::{LONG, SHORT, reached, send, spread, web};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::kernel_available;
use crate::common::net::{Probe, Proto};
use serde_json::json;
use std::time::Duration;

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
    if let Err(why) = crate::common::net::sctp_supported(&c.node.name) {
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
