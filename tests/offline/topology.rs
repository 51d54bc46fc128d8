//! Table-driven tests of endpoint selection, one row per rule of `topology`'s module doc, and
//! of the reasons it gives for the endpoints it passes over.

use kube_nftproxy::model::{Endpoint, Protocol, ServicePort, ServicePortName};
use kube_nftproxy::topology::{Choice, Hints, Unused, categorize_endpoints, endpoint_uses};
use std::net::{IpAddr, Ipv4Addr};

mod reasons;

/// An endpoint 10.0.0.`n` with state `flags`: `R` ready, `ST` serving+terminating,
/// `T` terminating and not serving, `-` not ready.
fn e(n: u8, flags: &str, node: &str, zones: &[&str], nodes: &[&str]) -> Endpoint {
    let (ready, serving, terminating) = match flags {
        "R" => (true, true, false),
        "ST" => (false, true, true),
        "T" => (false, false, true),
        _ => (false, false, false),
    };
    Endpoint {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
        port: 80,
        ready,
        serving,
        terminating,
        node_name: (!node.is_empty()).then(|| node.into()),
        zone_hints: zones.iter().map(|z| z.to_string()).collect(),
        node_hints: nodes.iter().map(|z| z.to_string()).collect(),
    }
}

/// A service port; `policy` is `""`, `"itp"` (internal Local), `"etp"` (external Local, with a
/// NodePort) or `"both"`.
fn sp(policy: &str) -> ServicePort {
    ServicePort {
        name: ServicePortName { namespace: "ns".into(), name: "svc".into(), port: "".into(), protocol: Protocol::Tcp },
        port: 80,
        node_port: matches!(policy, "etp" | "both").then_some(30080),
        cluster_ips: vec!["172.30.0.1".parse().unwrap()],
        external_ips: vec![],
        load_balancer_ips: vec![],
        source_ranges: vec![],
        affinity_timeout: None,
        external_policy_local: matches!(policy, "etp" | "both"),
        internal_policy_local: matches!(policy, "itp" | "both"),
        health_check_node_port: None,
        scheduler: None,
    }
}

struct Case {
    name: &'static str,
    policy: &'static str,
    zone: Option<&'static str>,
    endpoints: Vec<Endpoint>,
    cluster: Vec<u8>,
    local: Vec<u8>,
    has_any: bool,
}

fn octets(eps: &[&Endpoint]) -> Vec<u8> {
    eps.iter()
        .map(|e| match e.ip {
            IpAddr::V4(v4) => v4.octets()[3],
            IpAddr::V6(_) => 0,
        })
        .collect()
}

#[test]
fn categorize_endpoints_table() {
    let me = "node-a";
    let cases = vec![
        Case {
            name: "all ready",
            policy: "",
            zone: None,
            endpoints: vec![e(1, "R", me, &[], &[]), e(2, "R", "node-b", &[], &[])],
            cluster: vec![1, 2],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "not ready left out",
            policy: "",
            zone: None,
            endpoints: vec![e(1, "R", me, &[], &[]), e(2, "-", me, &[], &[])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "terminating used only without ready",
            policy: "",
            zone: None,
            endpoints: vec![e(1, "R", me, &[], &[]), e(2, "ST", me, &[], &[])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "fall back to serving terminating",
            policy: "",
            zone: None,
            endpoints: vec![e(1, "ST", me, &[], &[]), e(2, "T", me, &[], &[]), e(3, "-", me, &[], &[])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "nothing usable",
            policy: "",
            zone: None,
            endpoints: vec![e(2, "T", me, &[], &[]), e(3, "-", me, &[], &[])],
            cluster: vec![],
            local: vec![],
            has_any: false,
        },
        Case {
            name: "no endpoints",
            policy: "",
            zone: None,
            endpoints: vec![],
            cluster: vec![],
            local: vec![],
            has_any: false,
        },
        Case {
            name: "itp local: local ready only",
            policy: "itp",
            zone: None,
            endpoints: vec![e(1, "R", me, &[], &[]), e(2, "R", "node-b", &[], &[])],
            cluster: vec![],
            local: vec![1],
            has_any: true,
        },
        Case {
            name: "itp local: none local, some remote",
            policy: "itp",
            zone: None,
            endpoints: vec![e(2, "R", "node-b", &[], &[])],
            cluster: vec![],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "itp local: local terminating fallback",
            policy: "itp",
            zone: None,
            endpoints: vec![e(1, "ST", me, &[], &[]), e(2, "R", "node-b", &[], &[])],
            cluster: vec![],
            local: vec![1],
            has_any: true,
        },
        Case {
            name: "itp local: remote terminating counts as any",
            policy: "itp",
            zone: None,
            endpoints: vec![e(2, "ST", "node-b", &[], &[])],
            cluster: vec![],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "itp local: nothing",
            policy: "itp",
            zone: None,
            endpoints: vec![e(2, "T", "node-b", &[], &[])],
            cluster: vec![],
            local: vec![],
            has_any: false,
        },
        Case {
            name: "etp local: cluster and local",
            policy: "etp",
            zone: None,
            endpoints: vec![e(1, "R", me, &[], &[]), e(2, "R", "node-b", &[], &[])],
            cluster: vec![1, 2],
            local: vec![1],
            has_any: true,
        },
        Case {
            name: "etp local: no local endpoint",
            policy: "etp",
            zone: None,
            endpoints: vec![e(2, "R", "node-b", &[], &[])],
            cluster: vec![2],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "endpoint without node name is not local",
            policy: "etp",
            zone: None,
            endpoints: vec![e(1, "R", "", &[], &[])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "zone hints keep same zone",
            policy: "",
            zone: Some("z1"),
            endpoints: vec![e(1, "R", me, &["z1"], &[]), e(2, "R", "node-b", &["z2"], &[])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "zone hints: one endpoint unhinted disables",
            policy: "",
            zone: Some("z1"),
            endpoints: vec![e(1, "R", me, &["z1"], &[]), e(2, "R", "node-b", &[], &[])],
            cluster: vec![1, 2],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "zone hints: none for this zone",
            policy: "",
            zone: Some("z3"),
            endpoints: vec![e(1, "R", me, &["z1"], &[]), e(2, "R", "node-b", &["z2"], &[])],
            cluster: vec![1, 2],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "zone hints: node has no zone label",
            policy: "",
            zone: None,
            endpoints: vec![e(1, "R", me, &["z1"], &[]), e(2, "R", "node-b", &["z2"], &[])],
            cluster: vec![1, 2],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "zone hints: multi-zone hint",
            policy: "",
            zone: Some("z2"),
            endpoints: vec![e(1, "R", me, &["z1", "z2"], &[]), e(2, "R", "node-b", &["z1"], &[])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "zone hints: not-ready endpoints do not count",
            policy: "",
            zone: Some("z1"),
            endpoints: vec![e(1, "R", me, &["z1"], &[]), e(2, "R", "node-b", &["z2"], &[]), e(3, "-", me, &[], &[])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "node hints win over zone hints",
            policy: "",
            zone: Some("z1"),
            endpoints: vec![e(1, "R", "node-b", &["z1"], &[me]), e(2, "R", me, &["z1"], &["node-b"])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "node hints for other nodes fall to zone hints",
            policy: "",
            zone: Some("z1"),
            endpoints: vec![e(1, "R", "node-b", &["z1"], &["node-b"]), e(2, "R", "node-c", &["z2"], &["node-c"])],
            cluster: vec![1],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "terminating fallback ignores topology",
            policy: "",
            zone: Some("z1"),
            endpoints: vec![e(1, "ST", "node-b", &["z2"], &[]), e(2, "ST", me, &["z1"], &[])],
            cluster: vec![1, 2],
            local: vec![],
            has_any: true,
        },
        Case {
            name: "topology does not filter local endpoints",
            policy: "etp",
            zone: Some("z1"),
            endpoints: vec![e(1, "R", me, &["z2"], &[]), e(2, "R", "node-b", &["z1"], &[])],
            cluster: vec![2],
            local: vec![1],
            has_any: true,
        },
    ];
    for c in cases {
        let got = categorize_endpoints(&c.endpoints, &sp(c.policy), me, c.zone);
        assert_eq!(octets(&got.cluster), c.cluster, "{}: cluster endpoints", c.name);
        assert_eq!(octets(&got.local), c.local, "{}: local endpoints", c.name);
        assert_eq!(got.has_any, c.has_any, "{}: has_any", c.name);
    }
}

#[test]
fn all_reachable_is_the_sorted_union() {
    let eps = vec![e(2, "R", "node-a", &[], &[]), e(1, "R", "node-b", &[], &[])];
    let got = categorize_endpoints(&eps, &sp("etp"), "node-a", None);
    let ips: Vec<u8> = octets(&got.all_reachable());
    assert_eq!(ips, vec![1, 2]);
}
