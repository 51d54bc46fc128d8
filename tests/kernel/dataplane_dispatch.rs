//! The dispatch by endpoint count in a real kernel: ClusterIPs of many endpoint counts, each
//! found from its slots in the endpoint map (a search over the counts in use), reach exactly
//! their own endpoints, all of them; a Local internal policy searches the node's own; and a
//! partial sync that adds a Service or resizes one to a count in use changes no chain.

use crate::common::check::spread;
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::kernel_available;
use crate::common::proxy::{Proxy, model_of, node_a_config};
use kube_nftproxy::nft::{Resync, SyncKind, SyncReport};
use serde_json::{Value, json};
use std::collections::BTreeSet;

const LOCAL: [&str; 5] = ["pod-1", "pod-2", "pod-3", "pod-4", "pod-5"];
const REMOTE: [&str; 4] = ["rpod-1", "rpod-2", "rpod-3", "rpod-4"];

/// A Service `name` at `ip` over `pods`, with `extra` in its spec.
fn on(c: &Cluster, name: &str, ip: &str, pods: &[&str], extra: Value) -> Vec<Value> {
    let mut spec = json!({"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    vec![service(name, spec, json!({})), slice(name, false, "TCP", eps)]
}

/// The first `n` pods, local ones first.
fn pods(n: usize) -> Vec<&'static str> {
    LOCAL.iter().chain(&REMOTE).copied().take(n).collect()
}

/// Where `per` connections per endpoint from `ns` to `ip` landed, against where they may.
fn lands_on_all(ns: &crate::common::Netns, ip: &str, want: &[&str], per: usize) {
    let seen = spread(ns, &format!("{ip}:80"), per * want.len());
    let landed: BTreeSet<&str> = seen.keys().map(String::as_str).collect();
    let want: BTreeSet<&str> = want.iter().copied().collect();
    assert_eq!(landed, want, "connections to {ip} landed on {seen:?}");
}

/// Syncs `objects` into the node as the sync loop would (a partial sync after the first).
fn sync(c: &Cluster, proxy: &mut Proxy, objects: &[Value]) -> SyncReport {
    proxy.model.replace(model_of(objects));
    proxy.sync(&c.node.name, Resync::Changes).expect("sync")
}

#[test]
fn clusterips_of_every_count_reach_exactly_their_endpoints() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(5, 4);
    let counts = [1usize, 2, 3, 4, 5, 7, 9];
    let mut objects = Vec::new();
    for (i, n) in counts.iter().enumerate() {
        objects.extend(on(&c, &format!("c{n}"), &format!("172.30.1.{}", i + 1), &pods(*n), json!({})));
    }
    // Node-local endpoints only: two of its three are on this node.
    let itp = json!({"internalTrafficPolicy": "Local"});
    objects.extend(on(&c, "local", "172.30.1.50", &["pod-2", "pod-3", "rpod-1"], itp));
    let mut proxy = Proxy::new(node_a_config());
    assert_eq!(sync(&c, &mut proxy, &objects).kind, SyncKind::Full);
    let listed = c.node.nft(&["list", "chain", "ip", "kube-nftproxy", "dispatch"]);
    assert!(listed.contains("goto dispatch-cluster-tcp-1-9"), "the counts are searched:\n{listed}");
    for (i, n) in counts.iter().enumerate() {
        lands_on_all(&c.client, &format!("172.30.1.{}", i + 1), &pods(*n), 12);
    }
    lands_on_all(&c.pod_named("pod-4").ns, "172.30.1.50", &["pod-2", "pod-3"], 12);

    // A partial sync: another Service of a count in use, and one resized to another count in
    // use, which the running rules reach through the same search.
    objects.extend(on(&c, "new", "172.30.1.60", &pods(3), json!({})));
    objects.splice(4..6, on(&c, "c3", "172.30.1.3", &pods(7), json!({})));
    let report = sync(&c, &mut proxy, &objects);
    assert_eq!(report.kind, SyncKind::Partial);
    assert!(!report.script.contains("chain"), "no chain changes:\n{}", report.script);
    lands_on_all(&c.client, "172.30.1.60", &pods(3), 12);
    lands_on_all(&c.client, "172.30.1.3", &pods(7), 12);
}
