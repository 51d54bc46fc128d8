//! Data-plane tests of ServiceCIDRs: real packets through a real kernel. Inside a ServiceCIDR,
//! an allocated ClusterIP on a served port reaches its endpoints, on any other port it is
//! refused, and an address no Service holds is dropped; without the ServiceCIDR (none known,
//! or deleted by a partial sync) such an address is left alone.
//!
//! The "unallocated" address 10.96.0.99 is given to pod-2 (routed from the node), so that
//! when the proxy leaves it alone something visibly answers: its echo server on the echo
//! port, its kernel's reset on port 80.

use crate::common::check::{LONG, SHORT, reached, send};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::net::{Probe, Proto};
use crate::common::proxy::{Proxy, model_of};
use crate::common::{Netns, kernel_available};
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::nft::{Resync, SyncKind};
use serde_json::{Value, json};

/// The address inside the ServiceCIDR that no Service holds.
const UNALLOCATED: &str = "10.96.0.99";

/// A ServiceCIDR named `kubernetes` holding `cidr`.
fn service_cidr(cidr: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes"}, "spec": {"cidrs": [cidr]}})
}

/// A cluster with pod-1 behind Service `web` at 10.96.0.10:80, and pod-2 also holding the
/// unallocated address; returns it with the Service's objects.
fn cluster() -> (Cluster, Vec<Value>) {
    let c = Cluster::new(2, 0);
    let pod2 = &c.pod_named("pod-2").ns;
    run(pod2, &["ip", "addr", "add", &format!("{UNALLOCATED}/32"), "dev", "eth0"]);
    run(&c.node, &["ip", "route", "add", &format!("{UNALLOCATED}/32"), "via", "10.1.2.2"]);
    let spec = json!({"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = vec![endpoint(c.pod_named("pod-1"), false, json!({}))];
    let objects = vec![service("web", spec, json!({})), slice("web", false, "TCP", eps)];
    (c, objects)
}

fn run(ns: &Netns, cmd: &[&str]) {
    let out = ns.run(cmd, "");
    assert!(out.status.success(), "{cmd:?} in {}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
}

/// Asserts the unallocated address is dropped: no answer from any port, from outside or a pod.
fn assert_dropped(c: &Cluster, when: &str) {
    for (from, ns) in [("outside", &c.client), ("pod-1", &c.pod_named("pod-1").ns)] {
        for port in [80, ECHO_PORT] {
            let p = send(ns, Proto::Tcp, &format!("{UNALLOCATED}:{port}"), None, SHORT);
            assert_eq!(p, Probe::Timeout, "{when}: TCP from {from} to unallocated {UNALLOCATED}:{port}: {}", p.who());
        }
    }
}

/// Asserts the proxy leaves the unallocated address alone: pod-2 answers there.
fn assert_left_alone(c: &Cluster, when: &str) {
    let what = format!("{when}: TCP from outside to {UNALLOCATED}:{ECHO_PORT}");
    reached(send(&c.client, Proto::Tcp, &format!("{UNALLOCATED}:{ECHO_PORT}"), None, LONG), &what, &["pod-2"]);
    let p = send(&c.client, Proto::Tcp, &format!("{UNALLOCATED}:80"), None, LONG);
    assert_eq!(p, Probe::Refused, "{when}: pod-2's kernel should reset {UNALLOCATED}:80, got {}", p.who());
}

#[test]
fn unallocated_service_ips_are_dropped_and_unused_ports_refused() {
    if !kernel_available() {
        return;
    }
    let (c, objects) = cluster();
    let mut with_cidr = objects.clone();
    with_cidr.push(service_cidr("10.96.0.0/16"));
    let script = c.apply(with_cidr, &[]);
    assert!(script.contains("ip daddr @service-cidrs drop"), "{script}");
    reached(send(&c.client, Proto::Tcp, "10.96.0.10:80", None, LONG), "TCP to the ClusterIP", &["pod-1"]);
    let p = send(&c.client, Proto::Tcp, "10.96.0.10:81", None, LONG);
    assert_eq!(p, Probe::Refused, "TCP to the ClusterIP on a port no service uses: {}", p.who());
    let p = send(&c.node, Proto::Tcp, &format!("{UNALLOCATED}:{ECHO_PORT}"), None, SHORT);
    assert!(matches!(p, Probe::SendDenied | Probe::Timeout), "TCP from the node to {UNALLOCATED}: {}", p.who());
    assert_dropped(&c, "with a ServiceCIDR");

    c.apply(objects, &[]);
    assert_left_alone(&c, "without any ServiceCIDR");
    reached(send(&c.client, Proto::Tcp, "10.96.0.10:80", None, LONG), "TCP to the ClusterIP", &["pod-1"]);
}

fn config() -> Config {
    let flags = Flags::parse_from([
        "kube-nftproxy",
        "--hostname-override=node-a",
        &format!("--cluster-cidr={}", crate::common::cluster::CLUSTER_CIDRS),
    ]);
    Config::from_flags(&flags).unwrap()
}

/// The script's lines without comments and blanks.
fn lines(script: &str) -> Vec<&str> {
    script.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

#[test]
fn service_cidr_changes_are_partial_syncs_of_the_set_alone() {
    if !kernel_available() {
        return;
    }
    let (c, objects) = cluster();
    let with = |cidr: &str| -> Vec<Value> { objects.iter().cloned().chain([service_cidr(cidr)]).collect() };
    let mut proxy = Proxy::new(config());
    let mut sync = |objects: &[Value], resync| {
        proxy.model.replace(model_of(objects));
        proxy.sync(&c.node.name, resync).unwrap()
    };
    assert_eq!(sync(&with("10.96.0.0/16"), Resync::Changes).kind, SyncKind::Full);
    assert_dropped(&c, "after the first sync");

    let report = sync(&objects, Resync::Changes);
    assert_eq!(report.kind, SyncKind::Partial);
    let delete = "delete element ip kube-nftproxy service-cidrs { 10.96.0.0/16 }";
    assert_eq!(lines(&report.script), [delete], "deleting the ServiceCIDR:\n{}", report.script);
    assert_left_alone(&c, "after the ServiceCIDR was deleted");

    let report = sync(&with("10.96.0.0/12"), Resync::Changes);
    assert_eq!(report.kind, SyncKind::Partial);
    assert_eq!(lines(&report.script), ["add element ip kube-nftproxy service-cidrs { 10.96.0.0/12 }"]);
    assert_dropped(&c, "after a wider ServiceCIDR came");
    reached(send(&c.client, Proto::Tcp, "10.96.0.10:80", None, LONG), "TCP to the ClusterIP", &["pod-1"]);

    // A refresh empties the interval sets and fills them again: a range gone meanwhile goes.
    let report = sync(&objects, Resync::Refresh);
    assert_eq!(report.kind, SyncKind::Refresh);
    let listed = c.node.nft(&["list", "set", "ip", "kube-nftproxy", "service-cidrs"]);
    assert!(!listed.contains("elements"), "the refresh left a range behind:\n{listed}");
    assert_left_alone(&c, "after a refresh without the ServiceCIDR");
}
