//! Data-plane tests of `--detect-local-mode`: in each mode, real packets show that a local
//! pod's traffic to a ClusterIP keeps its source while other traffic (from outside, from a
//! pod on another node routed through this one, from the node itself) is masqueraded, and
//! that a local pod reaches an `externalTrafficPolicy: Local` LB IP through a remote
//! endpoint (the short-circuit), while outside traffic there is dropped.
//!
//! A pod on node-b reaching a ClusterIP through this node tells the modes apart: its source
//! is within `--cluster-cidr` but not this node's pod CIDR, and it arrives on the uplink.

use crate::common::check::{LONG, SHORT, reached, send};
use crate::common::cluster::{CLUSTER_CIDRS, Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::kernel_available;
use crate::common::net::{Probe, Proto};
use crate::common::proxy::Proxy;
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::model::{ApiObject, Model};
use kube_nftproxy::nft::Resync;
use serde_json::{Value, json};

/// The ClusterIP whose only endpoint is pod-1.
const CLUSTER_IP: &str = "172.30.0.80:80";
/// The LB IP of an eTP=Local Service whose only endpoint is rpod-1.
const LB_IP: &str = "192.168.100.81:80";

/// This node's Node object with `pod_cidrs` in `spec.podCIDRs`.
fn node_with_pod_cidrs(pod_cidrs: &[&str]) -> Value {
    let mut node = Cluster::node_object();
    node["spec"] = json!({"podCIDRs": pod_cidrs});
    node
}

/// The two Services; pods on node-b are routed to service IPs through this node.
fn services(c: &Cluster) -> Vec<Value> {
    let out = c.remote.run(&["ip", "route", "add", "172.30.0.0/16", "via", "192.168.1.1"], "");
    assert!(out.status.success() || String::from_utf8_lossy(&out.stderr).contains("File exists"));
    let port = json!([{"name": "http", "port": 80, "targetPort": ECHO_PORT}]);
    let lb = json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": "172.30.0.81",
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30081}]});
    vec![
        service("web", json!({"clusterIP": "172.30.0.80", "ports": port}), json!({})),
        slice("web", false, "TCP", vec![endpoint(c.pod_named("pod-1"), false, json!({}))]),
        service("far", lb, json!({"loadBalancer": {"ingress": [{"ip": "192.168.100.81"}]}})),
        slice("far", false, "TCP", vec![endpoint(c.pod_named("rpod-1"), false, json!({}))]),
    ]
}

/// Which source the endpoint saw for a connection from `ns` to the ClusterIP.
fn seen(ns: &crate::common::Netns, what: &str) -> String {
    reached(send(ns, Proto::Tcp, CLUSTER_IP, None, LONG), what, &["pod-1"]).seen.to_string()
}

/// Asserts the effects of a working detector that counts local pods only. `gateway` is the
/// node's address towards pod-1, which masqueraded traffic arrives from.
fn assert_detects_local_pods(c: &Cluster, mode: &str, gateway: &str) {
    let pod2 = &c.pod_named("pod-2").ns;
    assert_eq!(seen(pod2, "pod-2 to the ClusterIP"), "10.1.2.2", "{mode}: a local pod's source must be kept");
    for (who, ns) in
        [("outside", &c.client), ("rpod-1 (through node-b)", &c.pod_named("rpod-1").ns), ("the node", &c.node)]
    {
        let got = seen(ns, &format!("{who} to the ClusterIP"));
        assert_eq!(got, gateway, "{mode}: traffic from {who} to a ClusterIP must be masqueraded");
    }
    reached(send(pod2, Proto::Tcp, LB_IP, None, LONG), &format!("{mode}: pod-2 to an eTP=Local LB IP"), &["rpod-1"]);
    let p = send(&c.client, Proto::Tcp, LB_IP, None, SHORT);
    assert_eq!(p, Probe::Timeout, "{mode}: outside to an eTP=Local LB IP without local endpoints: {}", p.who());
}

#[test]
fn cluster_cidr_counts_every_pod_of_the_cluster() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    c.apply(services(&c), &["--detect-local-mode=ClusterCIDR"]);
    let rpod = &c.pod_named("rpod-1").ns;
    assert_eq!(seen(rpod, "rpod-1 to the ClusterIP"), "10.2.1.2", "ClusterCIDR: any pod keeps its source");
    assert_eq!(seen(&c.pod_named("pod-2").ns, "pod-2 to the ClusterIP"), "10.1.2.2");
    assert_eq!(seen(&c.client, "outside to the ClusterIP"), "10.1.1.1");
    reached(send(&c.pod_named("pod-2").ns, Proto::Tcp, LB_IP, None, LONG), "pod-2 to the LB IP", &["rpod-1"]);
}

#[test]
fn node_cidr_counts_the_pods_of_the_node_pod_cidrs() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    c.apply_with_node(
        node_with_pod_cidrs(&["10.1.0.0/16", "fd00:10:1::/48"]),
        services(&c),
        &["--detect-local-mode=NodeCIDR"],
    );
    assert_detects_local_pods(&c, "NodeCIDR", "10.1.1.1");
}

#[test]
fn node_cidr_without_pod_cidrs_detects_nothing() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    c.apply(services(&c), &["--detect-local-mode=NodeCIDR"]);
    // No detector: nothing is masqueraded for being off-cluster, and no pod is short-circuited.
    assert_eq!(seen(&c.client, "outside to the ClusterIP"), "172.16.0.2");
    assert_eq!(seen(&c.pod_named("pod-2").ns, "pod-2 to the ClusterIP"), "10.1.2.2");
    let p = send(&c.pod_named("pod-2").ns, Proto::Tcp, LB_IP, None, SHORT);
    assert!(!matches!(p, Probe::Reply(_)), "without a detector pod-2 was short-circuited to {}", p.who());
}

#[test]
fn bridge_interface_counts_what_arrives_on_the_bridge() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::bridged(2, 1, "cbr0");
    c.apply(services(&c), &["--detect-local-mode=BridgeInterface", "--pod-bridge-interface=cbr0"]);
    assert_detects_local_pods(&c, "BridgeInterface", "10.1.1.1");
}

#[test]
fn interface_name_prefix_counts_what_arrives_on_matching_interfaces() {
    if !kernel_available() {
        return;
    }
    // Local pods' host-side veths are pod1, pod2; the uplinks are to-b and to-client.
    let c = Cluster::new(2, 1);
    c.apply(services(&c), &["--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=pod"]);
    assert_detects_local_pods(&c, "InterfaceNamePrefix", "10.1.1.1");
}

/// The model of `objects` with `node` as this node's Node object.
fn model(node: Value, objects: &[Value]) -> Model {
    let all: Vec<ApiObject> = std::iter::once(node)
        .chain(objects.iter().cloned())
        .map(|v| ApiObject::from_json(v).unwrap().expect("a kind the proxy uses"))
        .collect();
    Model::from_objects(&all, "node-a").0
}

#[test]
fn a_pod_cidr_change_on_the_node_is_applied() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    let objects = services(&c);
    let flags = ["kube-nftproxy", "--hostname-override=node-a", "--detect-local-mode=NodeCIDR"];
    let cidr_flag = format!("--cluster-cidr={CLUSTER_CIDRS}");
    let cfg = Config::from_flags(&Flags::parse_from(flags.iter().copied().chain([cidr_flag.as_str()]))).unwrap();
    let mut proxy = Proxy::new(cfg);
    proxy.model.replace(model(node_with_pod_cidrs(&["10.9.0.0/16"]), &objects));
    proxy.sync(&c.node.name, Resync::Changes).unwrap();
    let pod2 = &c.pod_named("pod-2").ns;
    assert_eq!(seen(pod2, "pod-2 to the ClusterIP"), "10.1.1.1", "pod-2 is outside the Node's pod CIDR");
    proxy.model.replace(model(node_with_pod_cidrs(&["10.1.0.0/16"]), &objects));
    proxy.sync(&c.node.name, Resync::Changes).unwrap();
    assert_eq!(seen(pod2, "pod-2 to the ClusterIP"), "10.1.2.2", "the Node's new pod CIDR holds pod-2");
    assert_eq!(seen(&c.client, "outside to the ClusterIP"), "10.1.1.1");
}
