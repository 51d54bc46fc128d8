//! A cloud load balancer's view of a test node: Local-policy LoadBalancer Services with
//! health-check node ports, and checks sent as its checker sends them, from the client
//! namespace to the node's primary address.

use super::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use super::daemon::{Daemon, wait_for};
use super::net::http_get;
use serde_json::{Value, json};
use std::time::Duration;

/// The node's primary address, where NodePorts (and so health-check ports) are served.
pub const NODE_IP: &str = "192.168.1.1";

/// A LoadBalancer Service `name` (`n` picks its addresses) with `externalTrafficPolicy: Local`,
/// health-check node port `hcnp` and one ready endpoint per pod of `pods`.
pub fn local_lb(c: &Cluster, name: &str, n: u8, hcnp: u16, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"type": "LoadBalancer", "clusterIP": format!("172.30.0.{n}"),
        "externalTrafficPolicy": "Local", "healthCheckNodePort": hcnp,
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30000 + u16::from(n)}]});
    let status = json!({"loadBalancer": {"ingress": [{"ip": format!("203.0.113.{n}")}]}});
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    let mut s = slice(name, false, "TCP", eps);
    s["metadata"]["name"] = json!(format!("{name}-abc"));
    vec![service(name, spec, status), s]
}

/// What a load balancer's checker sees on `addr`: status, weight header, body; `None` when
/// nothing answers.
pub fn check_at(c: &Cluster, addr: &str) -> Option<(u16, String, String)> {
    let (code, head, body) = http_get(&c.client.name, addr, "/healthz")?;
    let weight = head.lines().find_map(|l| l.strip_prefix("x-load-balancing-endpoint-weight: ")).unwrap_or_default();
    Some((code, weight.to_string(), body))
}

/// Waits up to 5 s for `addr` to answer `want` (status, weight), or to be closed (`None`).
pub fn expect_at(c: &Cluster, d: &Daemon, addr: &str, want: Option<(u16, &str)>, why: &str) {
    let got = || check_at(c, addr).map(|(code, w, _)| (code, w));
    let want = want.map(|(code, w)| (code, w.to_string()));
    let ok = wait_for(Duration::from_secs(5), || got() == want);
    assert!(ok.is_some(), "{why}: {addr} answers {:?}, wanted {want:?}\n{}", got(), d.logged());
}

pub fn expect(c: &Cluster, d: &Daemon, port: u16, want: Option<(u16, &str)>, why: &str) {
    expect_at(c, d, &format!("{NODE_IP}:{port}"), want, why);
}
