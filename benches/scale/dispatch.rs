//! What the dispatch by endpoint count costs a connection (`-- --dispatch-only`): new TCP
//! connections through a ClusterIP of five endpoints on a node of 1,000 Services whose
//! endpoint counts are all five (the search has one count: the entry's rule leads straight to
//! its `lb-*` chain), against the same node with 64 counts in use (1 to 64: six more
//! lookups), and against the shape before it: the one-count node with a `service-ips`
//! element added for that ClusterIP (`goto lb-cluster-tcp-5`, found by the verdict map as
//! before), in alternating rounds on three nodes built alike.

use super::common::proxy::Proxy;
use super::config;
use super::measure::LatencyRig;
use super::synth::{self, Case};
use kube_nftproxy::model::{ApiObject, Model};
use kube_nftproxy::nft::{Resync, SyncKind};
use serde_json::{Value, json};

/// The counts in use on the searched node: every count from 1 to this.
const COUNTS: u32 = 64;

/// A node of `services` Services: service 0 has five endpoints (the rig's pod's addresses),
/// service `i` has five too, or with `spread` `1 + i % COUNTS`.
fn model(services: u32, spread: bool) -> Model {
    let mut m = Model::default();
    let node = serde_json::from_value(synth::node_json()).expect("node");
    m.apply(&ApiObject::Node(Box::new(node)), "node-a").expect("node");
    for i in 0..services {
        let endpoints = if spread && i > 0 { 1 + i % COUNTS } else { 5 };
        let case = Case { name: String::new(), services, endpoints, mix: false };
        let svc = serde_json::from_value(synth::service_json(&case, i)).expect("service");
        m.apply(&ApiObject::Service(Box::new(svc)), "node-a").expect("service");
        m.apply(&synth::slice(&case, i, 0), "node-a").expect("slice");
    }
    m
}

/// A node with service 0's endpoints on its pod, its rules synced.
fn node(services: u32, spread: bool) -> (LatencyRig, Proxy) {
    let rig = LatencyRig::new();
    for e in 1..5 {
        rig.add_pod_address(&synth::endpoint_ip(0, e, 5, 0));
    }
    let mut proxy = Proxy::with_model(config(), model(services, spread));
    let report = proxy.sync(&rig.node.name, Resync::Changes).expect("sync");
    assert_eq!(report.kind, SyncKind::Full);
    (rig, proxy)
}

/// `--dispatch`: the two nodes' first-packet latencies, medians and p99s in µs, and the
/// searched node's median as a ratio to the other's.
pub fn run(smoke: bool) -> Value {
    let services = if smoke { 100 } else { 1000 };
    let nodes = [node(services, false), node(services, true), node(services, false)];
    let steps = nodes[1].1.ruleset().tables[0].chains.keys().filter(|c| c.starts_with("dispatch-")).count();
    assert_eq!(steps, COUNTS as usize - 1, "the searched node's dispatch is not over {COUNTS} counts");
    // The shape before: the ClusterIP in `service-ips`, looked up before `dispatch` is.
    let old = format!("{{ {} . tcp . 80 : goto lb-cluster-tcp-5 }}", synth::cluster_ip(0));
    let added = nodes[2].0.node.run(&["nft", "add", "element", "ip", "kube-nftproxy", "service-ips", &old], "");
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let dst = format!("{}:80", synth::cluster_ip(0));
    // The first connections wait for the neighbour's address; not timed.
    for (rig, _) in &nodes {
        rig.connect_latencies(&dst, 20);
    }
    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..40 {
        for k in (0..3).map(|j| (j + round) % 3) {
            samples[k].extend(nodes[k].0.connect_latencies(&dst, 25));
        }
    }
    let round1 = |x: f64| (x * 10.0).round() / 10.0;
    let mut out = Vec::new();
    for v in &mut samples {
        v.sort_by(f64::total_cmp);
        out.push((v[v.len() / 2], v[v.len() * 99 / 100]));
    }
    let ratio = |k: usize| (out[k].0 / out[2].0 * 1000.0).round() / 1000.0;
    json!({
        "service_ips": {"median_us": round1(out[2].0), "p99_us": round1(out[2].1)},
        "one_count": {"median_us": round1(out[0].0), "p99_us": round1(out[0].1), "vs_service_ips": ratio(0)},
        "counts_64": {"median_us": round1(out[1].0), "p99_us": round1(out[1].1), "vs_service_ips": ratio(1)},
    })
}

/// Prints the combined runs and writes them to `target/bench/dispatch.json`.
pub fn print(runs: &[Value]) {
    let all = super::runs::combine(runs);
    println!("\nthe dispatch by endpoint count ({} runs, median (lowest–highest)):\n", all["runs"]);
    println!("| first-packet connect latency through a ClusterIP of 5 endpoints, 1,000 Services | value |\n|---|---|");
    let rows: [(&str, &[&str]); 8] = [
        ("the shape before (service-ips): median µs", &["service_ips", "median_us"]),
        ("the shape before (service-ips): p99 µs", &["service_ips", "p99_us"]),
        ("one count in use: median µs", &["one_count", "median_us"]),
        ("one count in use: p99 µs", &["one_count", "p99_us"]),
        ("one count in use: median / the shape before's (each run's own)", &["one_count", "vs_service_ips"]),
        ("64 counts in use: median µs", &["counts_64", "median_us"]),
        ("64 counts in use: p99 µs", &["counts_64", "p99_us"]),
        ("64 counts in use: median / the shape before's (each run's own)", &["counts_64", "vs_service_ips"]),
    ];
    for (name, path) in rows {
        super::observe::median_row(&all, name, path);
    }
    super::runs::write("dispatch.json", &json!({"combined": all, "runs": runs}));
}
