//! A small test cluster made of network namespaces: the proxy's node, local pods, a remote
//! node with its own pods, and an outside client, wired with veth pairs and routes.
//!
//! Addresses (private test ranges only):
//! - node `node-a`: 192.168.1.1 / fd00:192:168:1::1 towards the remote node (its primary IP),
//!   172.16.0.1 / fd00:172:16::1 towards the client (a second node IP);
//! - local pod `pod-N`: 10.1.N.2 / fd00:10:1:N::2, behind 10.1.N.1 on the node (on the host
//!   side of its own veth `podN`, or, in a bridged cluster, on the bridge `podN` is a port of);
//! - remote node `node-b`: 192.168.1.2; remote pod `rpod-N`: 10.2.N.2 / fd00:10:2:N::2;
//! - client: 172.16.0.2 and 172.16.0.20 / fd00:172:16::2.

use super::net::EchoServer;
use super::{Netns, Scratch};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;

/// The port every echo server listens on (endpoints' target port).
pub const ECHO_PORT: u16 = 8080;
/// The cluster CIDRs passed to `--cluster-cidr`.
pub const CLUSTER_CIDRS: &str = "10.0.0.0/8,fd00:10::/32";

/// A pod: its namespace, name, node and addresses, and its running echo server.
pub struct Pod {
    /// Pod name, which its echo server answers with.
    pub name: String,
    /// Node it runs on (`node-a` is the proxy's node).
    pub node: &'static str,
    /// IPv4 address.
    pub ip4: IpAddr,
    /// IPv6 address.
    pub ip6: IpAddr,
    /// Its echo server; stopped before the namespace goes.
    _server: EchoServer,
    /// The pod's namespace.
    pub ns: Netns,
}

/// The whole test cluster; everything is torn down on drop.
pub struct Cluster {
    /// The proxy's node, where the ruleset is loaded.
    pub node: Netns,
    /// The remote node, which only routes to its pods.
    pub remote: Netns,
    /// A client outside the cluster.
    pub client: Netns,
    /// Local pods (`pod-1`..) then remote pods (`rpod-1`..).
    pub pods: Vec<Pod>,
    /// The bridge local pods are attached to, in a bridged cluster.
    pub bridge: Option<String>,
    /// Its manifests and other files, removed with it (after whatever read them).
    pub scratch: Scratch,
}

fn ip(ns: &Netns, args: &str) {
    let argv: Vec<&str> = args.split_whitespace().collect();
    let out = Command::new("ip").arg("-n").arg(&ns.name).args(&argv).output().expect("ip");
    assert!(out.status.success(), "ip -n {} {args}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
}

fn sysctl(ns: &Netns, key: &str, value: &str) {
    let out = ns.run(&["sysctl", "-qw", &format!("{key}={value}")], "");
    assert!(out.status.success(), "sysctl {key} in {}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
}

fn new_host(tag: &str, router: bool) -> Netns {
    let ns = Netns::new(tag);
    ip(&ns, "link set lo up");
    // Without DAD, IPv6 addresses are usable at once.
    sysctl(&ns, "net.ipv6.conf.all.accept_dad", "0");
    sysctl(&ns, "net.ipv6.conf.default.accept_dad", "0");
    if router {
        sysctl(&ns, "net.ipv4.ip_forward", "1");
        sysctl(&ns, "net.ipv6.conf.all.forwarding", "1");
    }
    ns
}

/// Links `a` and `b` with a veth pair named `a_if`/`b_if`, addressed `a_addrs`/`b_addrs`.
fn link(a: &Netns, a_if: &str, a_addrs: &[&str], b: &Netns, b_if: &str, b_addrs: &[&str]) {
    ip(a, &format!("link add {a_if} type veth peer name {b_if} netns {}", b.name));
    for (ns, ifname, addrs) in [(a, a_if, a_addrs), (b, b_if, b_addrs)] {
        for addr in addrs {
            ip(ns, &format!("addr add {addr} dev {ifname}"));
        }
        ip(ns, &format!("link set {ifname} up"));
    }
}

impl Cluster {
    /// Builds the cluster with `local` pods on the proxy's node and `remote` pods on node-b.
    pub fn new(local: u8, remote: u8) -> Cluster {
        Cluster::build(local, remote, None)
    }

    /// As `new`, with the local pods' veths ports of bridge `bridge` on the node, which holds
    /// their gateways' addresses (each pod keeps its own subnet, so pods reach one another
    /// through the node, as a bridge CNI with routed pods does).
    pub fn bridged(local: u8, remote: u8, bridge: &str) -> Cluster {
        Cluster::build(local, remote, Some(bridge))
    }

    fn build(local: u8, remote: u8, bridge: Option<&str>) -> Cluster {
        let node = new_host("node", true);
        let remote_ns = new_host("rnode", true);
        let client = new_host("client", false);
        link(
            &node,
            "to-b",
            &["192.168.1.1/24", "fd00:192:168:1::1/64"],
            &remote_ns,
            "to-a",
            &["192.168.1.2/24", "fd00:192:168:1::2/64"],
        );
        link(
            &node,
            "to-client",
            &["172.16.0.1/24", "fd00:172:16::1/64"],
            &client,
            "eth0",
            &["172.16.0.2/24", "172.16.0.20/24", "fd00:172:16::2/64"],
        );
        ip(&client, "route add default via 172.16.0.1");
        ip(&client, "-6 route add default via fd00:172:16::1");
        // The client sits on the node's uplink (its default route), as outside clients do.
        // A packet for a service IP is then routed back out the link it came in on, so a
        // reject must happen before routing: the ICMP redirect the kernel sends when it
        // forwards such a packet uses up the rate limit that the ICMP unreachable needs.
        ip(&node, "route add default via 172.16.0.2");
        ip(&node, "-6 route add default via fd00:172:16::2");
        ip(&node, "route add 10.2.0.0/16 via 192.168.1.2");
        ip(&node, "-6 route add fd00:10:2::/48 via fd00:192:168:1::2");
        ip(&remote_ns, "route add 172.16.0.0/24 via 192.168.1.1");
        ip(&remote_ns, "-6 route add fd00:172:16::/64 via fd00:192:168:1::1");
        ip(&remote_ns, "route add 10.1.0.0/16 via 192.168.1.1");
        ip(&remote_ns, "-6 route add fd00:10:1::/48 via fd00:192:168:1::1");
        if let Some(bridge) = bridge {
            ip(&node, &format!("link add {bridge} type bridge"));
            ip(&node, &format!("link set {bridge} up"));
        }
        let mut pods = Vec::new();
        for i in 1..=local {
            pods.push(Self::pod(&node, "pod", "node-a", 1, i, bridge));
        }
        for i in 1..=remote {
            pods.push(Self::pod(&remote_ns, "rpod", "node-b", 2, i, None));
        }
        let scratch = Scratch::new("cluster");
        let c = Cluster { node, remote: remote_ns, client, pods, bridge: bridge.map(str::to_string), scratch };
        super::explained::know(Some(c.who()));
        c
    }

    fn pod(host: &Netns, prefix: &str, node: &'static str, net: u8, i: u8, bridge: Option<&str>) -> Pod {
        let ns = new_host(prefix, false);
        let (v4, v6) = (format!("10.{net}.{i}"), format!("fd00:10:{net}:{i}"));
        let gateway = [format!("{v4}.1/24"), format!("{v6}::1/64")];
        let host_if = format!("{prefix}{i}");
        let on_veth: Vec<&str> = if bridge.is_some() { vec![] } else { gateway.iter().map(String::as_str).collect() };
        link(host, &host_if, &on_veth, &ns, "eth0", &[&format!("{v4}.2/24"), &format!("{v6}::2/64")]);
        if let Some(bridge) = bridge {
            ip(host, &format!("link set {host_if} master {bridge}"));
            for addr in &gateway {
                ip(host, &format!("addr add {addr} dev {bridge}"));
            }
        }
        ip(&ns, &format!("route add default via {v4}.1"));
        ip(&ns, &format!("-6 route add default via {v6}::1"));
        let name = format!("{prefix}-{i}");
        let server = EchoServer::start(&ns.name, &name, ECHO_PORT);
        Pod {
            ip4: format!("{v4}.2").parse().unwrap(),
            ip6: format!("{v6}::2").parse().unwrap(),
            name,
            node,
            ns,
            _server: server,
        }
    }

    /// The pod called `name`.
    pub fn pod_named(&self, name: &str) -> &Pod {
        self.pods.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// The Node object of the proxy's node (`node-a`, zone `zone-a`).
    pub fn node_object() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "zone-a"}},
            "status": {"addresses": [
                {"type": "InternalIP", "address": "192.168.1.1"},
                {"type": "InternalIP", "address": "fd00:192:168:1::1"}]}
        })
    }
}

/// A `v1.Service` named `name` in namespace `test`.
pub fn service(name: &str, spec: serde_json::Value, status: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "test"}, "spec": spec, "status": status})
}

/// An EndpointSlice of service `svc` whose port `http` (TCP unless `proto` says) is the echo port.
pub fn slice(svc: &str, v6: bool, proto: &str, endpoints: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{svc}-{}", if v6 { "v6" } else { "v4" }), "namespace": "test",
                     "labels": {"kubernetes.io/service-name": svc}},
        "addressType": if v6 { "IPv6" } else { "IPv4" },
        "ports": [{"name": "http", "port": ECHO_PORT, "protocol": proto}],
        "endpoints": endpoints})
}

/// An endpoint for `pod`, merged with `extra` (conditions, hints).
pub fn endpoint(pod: &Pod, v6: bool, extra: serde_json::Value) -> serde_json::Value {
    let mut e =
        serde_json::json!({"addresses": [if v6 { pod.ip6 } else { pod.ip4 }.to_string()], "nodeName": pod.node});
    if let (Some(e), Some(extra)) = (e.as_object_mut(), extra.as_object()) {
        e.extend(extra.clone());
    }
    e
}

impl Cluster {
    /// A dual-stack Service `name` at 172.30.0.`n` and fd00:172:30::`n`, port 80 to the echo
    /// port, with endpoints on `pods` in both families.
    pub fn dual(&self, name: &str, n: u8, pods: &[&str]) -> Vec<serde_json::Value> {
        let spec = serde_json::json!({"ipFamilyPolicy": "RequireDualStack",
            "clusterIPs": [format!("172.30.0.{n}"), format!("fd00:172:30::{n}")],
            "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
        let eps = |v6: bool| pods.iter().map(|p| endpoint(self.pod_named(p), v6, serde_json::json!({}))).collect();
        let status = serde_json::json!({});
        vec![service(name, spec, status), slice(name, false, "TCP", eps(false)), slice(name, true, "TCP", eps(true))]
    }

    /// Renders `objects` (plus this node's Node object) with the dry run and loads the result
    /// into the node's namespace, as a full sync would.
    pub fn apply(&self, objects: Vec<serde_json::Value>, args: &[&str]) -> String {
        self.apply_with_node(Self::node_object(), objects, args)
    }

    /// As `apply`, with `node` as this node's Node object.
    pub fn apply_with_node(&self, node: serde_json::Value, objects: Vec<serde_json::Value>, args: &[&str]) -> String {
        let mut items = vec![node];
        items.extend(objects);
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        let file = self.applied();
        std::fs::write(&file, serde_json::to_vec_pretty(&list).unwrap()).unwrap();
        let mut all: Vec<String> = vec![format!("--cluster-cidr={CLUSTER_CIDRS}")];
        all.extend(args.iter().map(|a| a.to_string()));
        let script = super::dry_run_in(&self.node, &file, &all);
        self.node.nft_apply(&script).unwrap_or_else(|e| panic!("ruleset does not load: {e}"));
        super::explained::rules(Some(super::explained::Rules::Binary { manifests: file, args: all }));
        script
    }

    /// The manifests the last `apply` rendered.
    pub fn applied(&self) -> PathBuf {
        self.scratch.path("applied.json")
    }

    /// Who is who, for `explained` to ask explain about this cluster's probes.
    fn who(&self) -> super::explained::Cluster {
        let mut sources = std::collections::BTreeMap::new();
        sources.insert(self.node.name.clone(), None);
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        sources.insert(self.client.name.clone(), Some((ip("172.16.0.2"), ip("fd00:172:16::2"))));
        sources.insert(self.remote.name.clone(), Some((ip("192.168.1.2"), ip("fd00:192:168:1::2"))));
        let mut pods = std::collections::BTreeMap::new();
        for p in &self.pods {
            sources.insert(p.ns.name.clone(), Some((p.ip4, p.ip6)));
            pods.insert(p.name.clone(), p.ns.name.clone());
        }
        super::explained::Cluster { node: self.node.name.clone(), sources, pods }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        super::explained::know(None);
    }
}
