//! A proxy's reflectors run in the test against the emulator, asking for one content type, and
//! a cluster state that sets every field the proxy reads: what a JSON client and a protobuf
//! client deliver from the same server can be compared object by object.

use super::emulator::Emulator;
use kube_nftproxy::config::ContentType;
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::kube::{self, Settings, Shared};
use kube_nftproxy::model::{ObjectChange, ObjectId};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Reflectors of node `node-a` on the emulator and the last change of each object they
/// delivered; stopped on drop.
pub struct Follower {
    /// What they share (the client, the inbox, the stop flag).
    pub shared: Arc<Shared>,
    /// The last change of every object delivered.
    pub state: BTreeMap<ObjectId, ObjectChange>,
}

impl Follower {
    /// Starts the reflectors with the emulator's client-certificate kubeconfig.
    pub fn start(emu: &Emulator, content_type: ContentType) -> Follower {
        let cfg = kube::from_kubeconfig(&emu.kubeconfig(), None).expect("kubeconfig");
        let client = kube::Client::new(&cfg).expect("client");
        let settings = Settings { content_type, watch_timeout: Duration::from_secs(2), ..Settings::default() };
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::new(client, settings, "node-a", Arc::new(Inbox::default()), stop));
        kube::start(&shared).expect("reflector threads");
        Follower { shared, state: BTreeMap::new() }
    }

    /// Files what arrived within `wait`.
    pub fn take(&mut self, wait: Duration) {
        for c in self.shared.inbox.wait(Instant::now() + wait).changes {
            self.state.insert(c.id(), c);
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

/// Waits up to `limit` until both followers hold the same `want` objects and `done` holds of
/// what they hold (written as its debug text).
pub fn converge(a: &mut Follower, b: &mut Follower, want: usize, done: impl Fn(&str) -> bool, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        a.take(Duration::from_millis(100));
        b.take(Duration::from_millis(100));
        if a.state.len() == want && a.state == b.state && done(&format!("{:?}", a.state)) {
            return true;
        }
    }
    false
}

/// Services, EndpointSlices, Nodes and ServiceCIDRs setting every field the proxy reads, with
/// objects the selectors leave out and objects the model refuses.
pub fn cluster() -> Value {
    let svc = |name: &str, labels: Value, spec: Value, status: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "shop",
            "labels": labels, "uid": format!("uid-{name}"), "generation": 2}, "spec": spec, "status": status})
    };
    let slice = |name: &str, service: &str, family: &str, endpoints: Value, ports: Value| {
        let labels = if service.is_empty() { json!({}) } else { json!({"kubernetes.io/service-name": service}) };
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "shop", "labels": labels,
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2024-01-02T03:04:05Z"}},
            "addressType": family, "endpoints": endpoints, "ports": ports})
    };
    let node = |name: &str, ip: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "z1"}},
            "spec": {"podCIDRs": ["10.244.1.0/24", "fd00:244:1::/64"],
                "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name},
                {"type": "ExternalIP", "address": "203.0.113.9"}]}})
    };
    json!([
        svc("web", json!({"app": "web"}), json!({"type": "LoadBalancer", "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"], "externalIPs": ["192.0.2.1", "bad"], "loadBalancerSourceRanges": ["203.0.113.0/24"],
            "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
            "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": "web", "nodePort": 30080},
                      {"name": "q", "protocol": "SCTP", "port": 9, "targetPort": 9}]}),
            json!({"loadBalancer": {"ingress": [{"ip": "198.51.100.1", "ipMode": "Proxy"}, {"ip": "198.51.100.2"}]}})),
        svc("dns", json!({}), json!({"clusterIP": "10.96.0.53", "clusterIPs": ["10.96.0.53", "fd00::53"],
            "ports": [{"name": "dns", "protocol": "UDP", "port": 53}]}), json!({})),
        svc("ext", json!({}), json!({"type": "ExternalName", "externalName": "example.org", "ports": [{"port": 80}]}), json!({})),
        svc("headless", json!({}), json!({"clusterIP": "None", "ports": [{"port": 80}]}), json!({})),
        svc("theirs", json!({"service.kubernetes.io/service-proxy-name": "other"}),
            json!({"clusterIP": "10.96.0.77", "ports": [{"port": 80}]}), json!({})),
        svc("wrong", json!({}), json!({"clusterIP": "10.96.0.88", "ports": [{"port": 70000}]}), json!({})),
        slice("web-a", "web", "IPv4", json!([
            {"addresses": ["10.0.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false},
             "nodeName": "node-a", "zone": "z1", "hints": {"forZones": [{"name": "z1"}], "forNodes": [{"name": "node-a"}]}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}, "nodeName": "node-b"},
            {"addresses": ["10.0.0.3"], "conditions": {}},
            {"addresses": ["fd00::9"]}]),
            json!([{"name": "http", "protocol": "TCP", "port": 8080}, {"name": "q", "protocol": "SCTP", "port": 9},
                   {"name": "none", "protocol": "TCP"}])),
        slice("dns-6", "dns", "IPv6", json!([{"addresses": ["fd00::1"], "conditions": {"ready": true}}]),
            json!([{"name": "dns", "protocol": "UDP", "port": 53}])),
        slice("ext-f", "ext", "FQDN", json!([{"addresses": ["example.org"]}]), json!([{"port": 80}])),
        slice("orphan", "", "IPv4", json!([{"addresses": ["10.0.0.5"]}]), json!([{"port": 80}])),
        node("node-a", "192.168.1.1"),
        node("node-b", "192.168.1.2"),
        {"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": "kubernetes"},
         "spec": {"cidrs": ["10.96.0.0/16", "fd00::/108"]}},
    ])
}
