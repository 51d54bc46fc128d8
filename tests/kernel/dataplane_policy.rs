//! Data-plane tests of traffic policies, masquerading and endpoint states: the rendered
//! ruleset in a real kernel, real connections through it (see `dataplane.rs`).

use crate::common::check::{LONG, SHORT, reached, send, spread};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::kernel_available;
use crate::common::net::{Probe, Proto};
use serde_json::json;
use std::time::Duration;

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
    let remote_slice = slice("remote", false, "TCP", vec![ep("rpod-1")]);
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
    let none_slice = slice("none", false, "TCP", vec![ep("rpod-1"), ep("rpod-2")]);
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
    let solo = slice("solo", false, "TCP", vec![endpoint(c.pod_named("pod-1"), false, json!({}))]);
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
    let zone = |z: &str| json!({"hints": {"forZones": [{"name": z}]}});
    let gone = json!({"conditions": {"ready": false, "serving": false, "terminating": true}});
    c.apply(
        vec![
            service("mixed", json!({"clusterIP": "172.30.0.23", "ports": port}), json!({})),
            slice("mixed", false, "TCP", vec![ep("pod-1", json!({})), ep("pod-2", term.clone())]),
            service("draining", json!({"clusterIP": "172.30.0.24", "ports": port}), json!({})),
            slice("draining", false, "TCP", vec![ep("pod-2", term.clone()), ep("rpod-1", gone)]),
            service("zoned", json!({"clusterIP": "172.30.0.25", "ports": port}), json!({})),
            slice(
                "zoned",
                false,
                "TCP",
                vec![ep("pod-1", zone("zone-a")), ep("rpod-1", zone("zone-a")), ep("rpod-2", zone("zone-b"))],
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
