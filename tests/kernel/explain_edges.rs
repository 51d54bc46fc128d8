//! `explain` at its edges, found by a hostile round: real packets through a real kernel,
//! each probe also checked against explain's prediction (`crate::common::check::send`), plus
//! explicit checks of the node's own source, interface detectors, the loopback leg of the
//! node's traffic to itself, IPv4-mapped addresses, and reasons against outcomes.

use crate::common::check::{LONG, SHORT, reached, send};
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::kernel_available;
use crate::common::net::{Probe, Proto};
use serde_json::{Value, json};
use std::process::Command;

fn run(ns: &crate::common::Netns, cmd: &[&str]) {
    let out = ns.run(cmd, "");
    assert!(out.status.success(), "{cmd:?} in {}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
}

/// explain's JSON, asked in the node's namespace over the manifests the last apply wrote.
fn explain(c: &Cluster, args: &[&str], from: &str, to: &str, proto: &str) -> Value {
    let manifests = c.applied();
    let out = Command::new("ip")
        .args(["netns", "exec", &c.node.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "explain", "--output=json"])
        .arg("--manifests")
        .arg(&manifests)
        .arg("--hostname-override=node-a")
        .arg(format!("--cluster-cidr={}", crate::common::cluster::CLUSTER_CIDRS))
        .args(args)
        .args(["--from", from, "--to", to, "--protocol", proto])
        .env("RUST_LOG", "warn")
        .output()
        .expect("explain");
    assert!(out.status.success(), "explain: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

/// `send`, with a failed explain check caught and returned as text.
fn try_send(ns: &crate::common::Netns, proto: Proto, dst: &str, timeout: std::time::Duration) -> Result<Probe, String> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| send(ns, proto, dst, None, timeout)));
    r.map_err(|e| {
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        msg.lines().next().unwrap_or_default().to_string()
    })
}

fn web(c: &Cluster, ip: &str, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service("web", spec, json!({})), slice("web", false, "TCP", eps)]
}

/// The node's connection to a non-local LoadBalancer IP leaves with the source its route
/// gives (172.16.0.1, the uplink), not the Node object's InternalIP (192.168.1.1).
/// loadBalancerSourceRanges are judged on that source.
#[test]
fn node_source_ranges_judge_the_routes_source() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let lb = |name: &str, cip: &str, np: u16, lbip: &str, range: &str| {
        service(
            name,
            json!({"type": "LoadBalancer", "clusterIP": cip, "loadBalancerSourceRanges": [range],
                "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": np}]}),
            json!({"loadBalancer": {"ingress": [{"ip": lbip}]}}),
        )
    };
    let ep = || vec![endpoint(c.pod_named("pod-1"), false, json!({}))];
    c.apply(
        vec![
            lb("innode", "172.30.0.90", 30090, "192.168.100.90", "192.168.1.0/24"),
            slice("innode", false, "TCP", ep()),
            lb("inuplink", "172.30.0.91", 30091, "192.168.100.91", "172.16.0.0/24"),
            slice("inuplink", false, "TCP", ep()),
        ],
        &[],
    );
    // Raw first, so the report says what each side did even when the check fails.
    let a = explain(&c, &[], "node", "192.168.100.90:80", "tcp");
    let b = explain(&c, &[], "node", "192.168.100.91:80", "tcp");
    eprintln!("explain innode: {} / inuplink: {}", a["result"], b["result"]);
    let p90 = try_send(&c.node, Proto::Tcp, "192.168.100.90:80", SHORT);
    let p91 = try_send(&c.node, Proto::Tcp, "192.168.100.91:80", LONG);
    eprintln!("kernel innode: {p90:?}\nkernel inuplink: {p91:?}");
    assert!(p90.is_ok() && p91.is_ok(), "explain disagreed with the kernel");
}

/// With an interface-based detector, the node's own traffic to a ClusterIP is not from a
/// pod interface (a locally generated packet's iifname is "" in the kernel), so it is
/// masqueraded, as `dataplane_detect.rs` shows with real packets; explain must say so.
#[test]
fn interface_detectors_masquerade_the_nodes_traffic() {
    if !kernel_available() {
        return;
    }
    for (bridged, args) in [
        (true, ["--detect-local-mode=BridgeInterface", "--pod-bridge-interface=cbr0"]),
        (false, ["--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=pod"]),
    ] {
        let c = if bridged { Cluster::bridged(1, 0, "cbr0") } else { Cluster::new(1, 0) };
        c.apply(web(&c, "172.30.0.92", &["pod-1"]), &args);
        let r = reached(send(&c.node, Proto::Tcp, "172.30.0.92:80", None, LONG), "node to ClusterIP", &["pod-1"]);
        let e = explain(&c, &args, "node", "172.30.0.92:80", "tcp");
        let said = e["outcomes"][0]["masquerade"].as_bool();
        let kernel = r.seen.to_string() == "10.1.1.1";
        eprintln!("{args:?}: pod-1 saw {} (masqueraded: {kernel}); explain said masquerade {said:?}", r.seen);
        assert_eq!(said, Some(kernel), "{args:?}: explain's masquerade flag for the node: {e:#}");
    }
}

/// A client bound to 127.0.0.1 cannot reach a ClusterIP: the kernel refuses a loopback
/// source on a non-loopback route (no route_localnet). explain refuses the question.
#[test]
fn loopback_source_is_refused() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    c.apply(web(&c, "172.30.0.93", &["pod-1", "rpod-1"]), &[]);
    let p = crate::common::net::in_netns(&c.node.name, || {
        crate::common::net::probe(
            Proto::Tcp,
            "172.30.0.93:80".parse().unwrap(),
            Some("127.0.0.1".parse().unwrap()),
            LONG,
        )
    });
    assert!(!matches!(p, Probe::Reply(_)), "the kernel let a loopback source through: {p:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_kube-nftproxy"))
        .args(["explain", "--hostname-override=node-a", "--from", "127.0.0.1", "--to", "172.30.0.93:80"])
        .output()
        .expect("explain");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use `node`"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// An IPv4-mapped IPv6 destination is an IPv4 packet on the wire: the IPv4 rules DNAT it.
#[test]
fn v4_mapped_destination() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    c.apply(web(&c, "172.30.0.94", &["pod-1"]), &[]);
    // send() checks it; "unchanged" lets any reply through when the address is no pod's.
    let p = send(&c.node, Proto::Tcp, "[::ffff:172.30.0.94]:80", None, LONG);
    let e = explain(&c, &[], "node", "[::ffff:172.30.0.94]:80", "tcp");
    assert_eq!((e["result"].as_str(), p.who()), (Some("dnat"), "pod-1".to_string()), "{e:#}");
}

/// eTP=Local with local and remote endpoints, from a local pod, a remote pod, the node and
/// outside; iTP=Local from a local pod and from the node; UDP too.
#[test]
fn traffic_policies_from_everywhere() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 2);
    run(&c.remote, &["ip", "route", "add", "172.30.0.0/16", "via", "192.168.1.1"]);
    run(&c.remote, &["ip", "route", "add", "192.168.100.0/24", "via", "192.168.1.1"]);
    let ep = |p: &str| endpoint(c.pod_named(p), false, json!({}));
    let etp = json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": "172.30.0.96",
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30096, "protocol": "UDP"}]});
    let itp = json!({"internalTrafficPolicy": "Local", "clusterIP": "172.30.0.97",
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let etp_tcp = json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": "172.30.0.98",
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30098}]});
    c.apply(
        vec![
            service("etp", etp, json!({"loadBalancer": {"ingress": [{"ip": "192.168.100.96"}]}})),
            slice("etp", false, "UDP", vec![ep("pod-1"), ep("rpod-1")]),
            service("itp", itp, json!({})),
            slice("itp", false, "TCP", vec![ep("pod-1"), ep("rpod-1")]),
            service("etptcp", etp_tcp, json!({"loadBalancer": {"ingress": [{"ip": "192.168.100.98"}]}})),
            slice("etptcp", false, "TCP", vec![ep("pod-1"), ep("rpod-2")]),
        ],
        &[],
    );
    let who = [
        ("pod-2", &c.pod_named("pod-2").ns),
        ("rpod-2", &c.pod_named("rpod-2").ns),
        ("node", &c.node),
        ("client", &c.client),
    ];
    let mut bad = Vec::new();
    for (name, ns) in who {
        for dst in ["192.168.100.96:80", "192.168.1.1:30096", "172.30.0.96:80"] {
            for _ in 0..4 {
                // A remote pod's reply from a remote endpoint skips this node (asymmetric).
                if name == "rpod-2" {
                    continue;
                }
                let p = try_send(ns, Proto::Udp, dst, SHORT);
                eprintln!("udp {name} -> {dst}: {p:?}");
                if p.is_err() {
                    bad.push(format!("udp {name} -> {dst}: {p:?}"));
                }
            }
        }
        for dst in ["172.30.0.97:80", "192.168.100.98:80", "192.168.1.1:30098", "172.16.0.1:30098"] {
            for _ in 0..4 {
                if name == "rpod-2" {
                    continue;
                }
                let p = try_send(ns, Proto::Tcp, dst, LONG);
                eprintln!("tcp {name} -> {dst}: {p:?}");
                if p.is_err() {
                    bad.push(format!("tcp {name} -> {dst}: {p:?}"));
                }
            }
        }
    }
    eprintln!("checked {}", crate::common::explained::checked());
    assert!(bad.is_empty(), "explain disagreed with the kernel:\n{}", bad.join("\n"));
}

/// Masquerade-all and hairpin from a pod to its own service via ClusterIP, NodePort and LB IP;
/// terminating-only endpoints; a pod to a NodePort on the node's other address.
#[test]
fn hairpin_and_terminating() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    let ep = |p: &str, extra: Value| endpoint(c.pod_named(p), false, extra);
    let term = json!({"conditions": {"ready": false, "serving": true, "terminating": true}});
    let lb = json!({"type": "LoadBalancer", "clusterIP": "172.30.0.99",
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30099}]});
    let gone = json!({"clusterIP": "172.30.0.100", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let objects = vec![
        service("self", lb, json!({"loadBalancer": {"ingress": [{"ip": "192.168.100.99"}]}})),
        slice("self", false, "TCP", vec![ep("pod-1", json!({}))]),
        service("gone", gone, json!({})),
        slice("gone", false, "TCP", vec![ep("pod-2", term.clone()), ep("rpod-1", term)]),
    ];
    for flags in [&[][..], &["--masquerade-all"][..]] {
        c.apply(objects.clone(), flags);
        let pod1 = &c.pod_named("pod-1").ns;
        for dst in ["172.30.0.99:80", "192.168.100.99:80", "192.168.1.1:30099", "172.16.0.1:30099", "10.1.1.1:30099"] {
            let p = send(pod1, Proto::Tcp, dst, None, LONG);
            eprintln!("{flags:?} pod-1 -> {dst}: {} {:?}", p.who(), p);
        }
        for _ in 0..6 {
            let p = send(&c.client, Proto::Tcp, "172.30.0.100:80", None, LONG);
            eprintln!("{flags:?} client -> terminating svc: {}", p.who());
        }
    }
}

/// A packet the node sends to one of its own addresses goes output, postrouting, then over
/// loopback through prerouting (its conntrack entry still new, so the `ct state new` filter
/// chains run again, on the DNATed address) and input. explain skips that prerouting pass:
/// a ClusterIP whose endpoint is a node-local address that is also a LoadBalancer IP with
/// source ranges is dropped there.
#[test]
fn node_to_a_local_endpoint_passes_prerouting_again() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    run(&c.node, &["ip", "addr", "add", "192.168.100.50/32", "dev", "lo"]);
    let _server = crate::common::net::EchoServer::start(&c.node.name, "node-a", 8080);
    let a = json!({"clusterIP": "172.30.0.110", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let b = json!({"type": "LoadBalancer", "clusterIP": "172.30.0.111", "loadBalancerSourceRanges": ["203.0.113.0/24"],
        "ports": [{"name": "http", "port": ECHO_PORT, "targetPort": ECHO_PORT, "nodePort": 30111}]});
    let ep = json!({"addresses": ["192.168.100.50"], "nodeName": "node-a"});
    c.apply(
        vec![
            service("hostnet", a.clone(), json!({})),
            slice("hostnet", false, "TCP", vec![ep.clone()]),
            service("guarded", b.clone(), json!({"loadBalancer": {"ingress": [{"ip": "192.168.100.50"}]}})),
            slice("guarded", false, "TCP", vec![endpoint(c.pod_named("pod-1"), false, json!({}))]),
        ],
        &[],
    );
    crate::common::explained::rules(None);
    let e = explain(&c, &[], "node", "172.30.0.110:80", "tcp");
    let p = crate::common::net::in_netns(&c.node.name, || {
        crate::common::net::probe(Proto::Tcp, "172.30.0.110:80".parse().unwrap(), None, SHORT)
    });
    let from_pod = crate::common::net::in_netns(&c.pod_named("pod-1").ns.name, || {
        crate::common::net::probe(Proto::Tcp, "172.30.0.110:80".parse().unwrap(), None, LONG)
    });
    eprintln!(
        "explain: {} {:?}; kernel from node: {p:?}; from pod-1: {from_pod:?}",
        e["result"], e["outcomes"][0]["endpoint"]
    );
    // Control: the same without the source ranges reaches the node's server.
    let mut b2 = b.clone();
    b2.as_object_mut().unwrap().remove("loadBalancerSourceRanges");
    c.apply(
        vec![
            service("hostnet", a.clone(), json!({})),
            slice("hostnet", false, "TCP", vec![ep.clone()]),
            service("guarded", b2, json!({"loadBalancer": {"ingress": [{"ip": "192.168.100.50"}]}})),
            slice("guarded", false, "TCP", vec![endpoint(c.pod_named("pod-1"), false, json!({}))]),
        ],
        &[],
    );
    crate::common::explained::rules(None);
    let control = crate::common::net::in_netns(&c.node.name, || {
        crate::common::net::probe(Proto::Tcp, "172.30.0.110:80".parse().unwrap(), None, LONG)
    });
    eprintln!("control without source ranges, from node: {control:?}");
    assert!(matches!(p, Probe::Timeout | Probe::SendDenied), "the node's connection was not dropped: {p:?}");
    assert_eq!(e["result"], "drop", "explain, where the kernel drops on the loopback leg: {e:#}");
    assert!(matches!(from_pod, Probe::Reply(_)) && matches!(control, Probe::Reply(_)), "{from_pod:?} {control:?}");
}

/// The "why" and "unused" follow the source's kind, not the chain the packet took: a remote
/// pod under ClusterCIDR detection is short-circuited to every endpoint (the outcomes say so),
/// yet the answer says "only endpoints on node-a" and lists node-b's endpoint as unused; a
/// pod of this node without a detector is held to local endpoints, yet the answer says the
/// policy does not bind it.
#[test]
fn traffic_policy_reasons_match_the_outcomes() {
    let bin = env!("CARGO_BIN_EXE_kube-nftproxy");
    let ask = |from: &str, extra: &[&str]| -> Value {
        let out = Command::new(bin)
            .args(["explain", "--output=json", "--manifests", "examples/cluster", "--hostname-override=node-a"])
            .args(extra)
            .args(["--from", from, "--to", "198.51.100.22:80"])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let mut bad = Vec::new();
    for (from, extra) in [("10.2.0.99", &["--cluster-cidr=10.0.0.0/8"][..]), ("10.1.0.20", &[][..])] {
        let e = ask(from, extra);
        let reached: Vec<&str> =
            e["outcomes"].as_array().unwrap().iter().filter_map(|o| o["endpoint"]["address"].as_str()).collect();
        let unused: Vec<&str> =
            e["unusedEndpoints"].as_array().unwrap().iter().filter_map(|u| u["address"].as_str()).collect();
        let says_local_only = e["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["text"].as_str().unwrap_or("").contains("only endpoints on"));
        let says_unbound =
            e["reasons"].as_array().unwrap().iter().any(|r| r["text"].as_str().unwrap_or("").contains("does not bind"));
        let remote_reached = reached.iter().any(|a| a.starts_with("10.2."));
        if reached.iter().any(|a| unused.contains(a))
            || (says_local_only && remote_reached)
            || (says_unbound && !remote_reached)
        {
            bad.push(format!(
                "--from {from} {extra:?}: reached {reached:?}, unused {unused:?}, reasons {}",
                e["reasons"]
            ));
        }
    }
    assert!(bad.is_empty(), "reasons contradict outcomes:\n{}", bad.join("\n"));
}
