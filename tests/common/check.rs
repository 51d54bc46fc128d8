//! Probing helpers for data-plane tests: send from a namespace, assert where it landed.

use super::Netns;
use super::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use super::net::{Probe, Proto, Reply, in_netns, probe, probe_from};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub const SHORT: Duration = Duration::from_millis(800);
pub const LONG: Duration = Duration::from_secs(3);

/// Sends one probe from namespace `ns` (optionally from source `src`); what it did is checked
/// against `explain` (`explained`).
pub fn send(ns: &Netns, proto: Proto, dst: &str, src: Option<&str>, timeout: Duration) -> Probe {
    let src: Option<IpAddr> = src.map(|s| s.parse().unwrap());
    send_from(ns, proto, dst, src.map(|ip| SocketAddr::new(ip, 0)), timeout)
}

/// As [`send`], from source address and port `src` (port 0: any), the port asked of
/// `explain` too when given.
pub fn send_from(ns: &Netns, proto: Proto, dst: &str, src: Option<SocketAddr>, timeout: Duration) -> Probe {
    let dst: SocketAddr = dst.parse().unwrap_or_else(|_| panic!("bad address {dst}"));
    let tracing = super::traced::start(ns, proto, dst, src);
    let (seen, port) =
        in_netns(&ns.name, move || (probe_from(proto, dst, src, timeout), super::net::last_client_port()));
    let answer = super::explained::check(ns, proto, dst, src, &seen);
    if let Some(t) = tracing {
        super::traced::check(t, &seen, port, answer.as_ref());
    }
    seen
}

/// Asserts a probe reached one of `names` and returns the reply.
pub fn reached(p: Probe, what: &str, names: &[&str]) -> Reply {
    match p {
        Probe::Reply(r) if names.contains(&r.name.as_str()) => r,
        other => panic!("{what}: went to {}, expected one of {names:?}", other.who()),
    }
}

/// `n` TCP connections from `ns` to `dst`, counted by answering server.
pub fn spread(ns: &Netns, dst: &str, n: usize) -> BTreeMap<String, usize> {
    let dst: SocketAddr = dst.parse().unwrap();
    in_netns(&ns.name, move || {
        let mut seen = BTreeMap::new();
        for _ in 0..n {
            *seen.entry(probe(Proto::Tcp, dst, None, LONG).who()).or_insert(0) += 1;
        }
        seen
    })
}

/// The `web` service with `spec` and endpoints on `pods`.
pub fn web(c: &Cluster, spec: serde_json::Value, pods: &[&str]) -> Vec<serde_json::Value> {
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service("web", spec, json!({})), slice("web", false, "TCP", eps)]
}

/// Which server answers one TCP connection from `ns` to `dst` (or how it failed), checked
/// against `explain` as `send` is.
pub fn who(ns: &Netns, dst: &str) -> String {
    send(ns, Proto::Tcp, dst, None, Duration::from_secs(2)).who()
}

/// The `web` service at 172.30.0.40:80 with endpoints on `pods`.
/// Services `bulk-N` for `range`, each with five endpoints on node-b (addresses nothing
/// answers on): bulk for a big table.
pub fn bulk(range: std::ops::Range<u32>) -> Vec<Value> {
    bulk_wide(range, 5)
}

/// As [`bulk`], with `endpoints` endpoints each.
pub fn bulk_wide(range: std::ops::Range<u32>, endpoints: u32) -> Vec<Value> {
    let mut objects = Vec::new();
    for i in range {
        let ip = format!("172.31.{}.{}", i / 250, i % 250 + 1);
        let spec = json!({"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
        let name = format!("bulk-{i}");
        let eps: Vec<Value> = (1..=endpoints)
            .map(|e| json!({"addresses": [format!("10.5.{}.{e}", i % 250)], "nodeName": "node-b"}))
            .collect();
        objects.push(service(&name, spec, json!({})));
        objects.push(slice(&name, false, "TCP", eps));
    }
    objects
}

pub fn web_on(c: &Cluster, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"clusterIP": "172.30.0.40", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service("web", spec, json!({})), slice("web", false, "TCP", eps)]
}

/// Connects from `ns` to `dst` every 10 ms for `how_long` on a thread of its own; the thread
/// returns every failure (when, and what happened instead of a reply).
pub fn probe_during(ns: &Netns, dst: &str, how_long: Duration) -> std::thread::JoinHandle<Vec<String>> {
    let start = std::time::Instant::now();
    probe_while(ns, dst, move || start.elapsed() < how_long)
}

/// As [`probe_during`], for as long as `going` says (asked before each connection).
pub fn probe_while(
    ns: &Netns,
    dst: &str,
    going: impl Fn() -> bool + Send + 'static,
) -> std::thread::JoinHandle<Vec<String>> {
    let client = ns.name.clone();
    let dst: SocketAddr = dst.parse().unwrap();
    std::thread::spawn(move || {
        in_netns(&client, move || {
            let mut failures = Vec::new();
            let start = std::time::Instant::now();
            while going() {
                let p = probe(Proto::Tcp, dst, None, Duration::from_secs(1));
                if !matches!(p, Probe::Reply(_)) {
                    failures.push(format!("{:?}: {}", start.elapsed(), p.who()));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            failures
        })
    })
}
