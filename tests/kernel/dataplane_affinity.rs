//! Session affinity and the schedulers with real packets, through the daemon's own sync
//! path: a client keeps its endpoint whichever frontend it uses (ClusterIP, external IP,
//! NodePort) and through partial and periodic syncs, and is spread anew when its endpoint
//! stops serving, in both families; the schedulers are in `dataplane_affinity/schedulers.rs`.

use crate::common::check::who;
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::proxy::{Proxy, model_of, node_a_config};
use crate::common::{Netns, kernel_available};
use kube_nftproxy::nft::{Resync, SyncKind, SyncReport};
use serde_json::{Value, json};

mod schedulers;

fn sync(ns: &Netns, proxy: &mut Proxy, objects: &[Value]) -> SyncReport {
    proxy.model.replace(model_of(objects));
    proxy.sync(&ns.name, Resync::Changes).expect("sync")
}

/// The frontends of the `web` service below, per family.
const V4: [&str; 3] = ["172.30.0.50:80", "192.168.101.50:80", "192.168.1.1:30050"];
const V6: [&str; 2] = ["[fd00:172:30::50]:80", "[fd00:192:168:1::1]:30050"];

/// A dual-stack NodePort service with an external IP and ClientIP affinity (10 minutes),
/// its endpoints on `pods`; plus `other`, a plain service with one endpoint.
fn objects(c: &Cluster, pods: &[&str], other: bool) -> Vec<Value> {
    let spec = json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
        "clusterIPs": ["172.30.0.50", "fd00:172:30::50"], "externalIPs": ["192.168.101.50"],
        "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30050}]});
    let eps = |v6: bool| pods.iter().map(|p| endpoint(c.pod_named(p), v6, json!({}))).collect();
    let mut all = vec![
        service("web", spec, json!({})),
        slice("web", false, "TCP", eps(false)),
        slice("web", true, "TCP", eps(true)),
    ];
    if other {
        let spec =
            json!({"clusterIP": "172.30.0.51", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
        let eps = vec![endpoint(c.pod_named("pod-1"), false, json!({}))];
        all.extend([service("other", spec, json!({})), slice("other", false, "TCP", eps)]);
    }
    all
}

/// How many affinity entries (the only elements with a timeout) `family`'s table holds.
fn entries(c: &Cluster, family: &str) -> usize {
    c.node.nft(&["list", "table", family, "kube-nftproxy"]).matches(" expires ").count()
}

/// Asserts every frontend in `frontends` sends the client to `expected`, a few times over.
fn sticks(c: &Cluster, frontends: &[&str], expected: &str, when: &str) {
    for round in 0..3 {
        for f in frontends {
            assert_eq!(who(&c.client, f), expected, "{when}: round {round}, {f} sent the client elsewhere");
        }
    }
}

#[test]
fn a_client_keeps_its_endpoint_across_frontends_partial_and_periodic_syncs() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(3, 0);
    let mut proxy = Proxy::new(node_a_config());
    let pods = ["pod-1", "pod-2", "pod-3"];
    assert_eq!(sync(&c.node, &mut proxy, &objects(&c, &pods, false)).kind, SyncKind::Full);
    for frontends in [&V4[..], &V6[..]] {
        let first = who(&c.client, frontends[0]);
        assert!(pods.contains(&first.as_str()), "{} went to {first}", frontends[0]);
        sticks(&c, frontends, &first, "after the first sync");
        assert_eq!(sync(&c.node, &mut proxy, &objects(&c, &pods, true)).kind, SyncKind::Partial);
        sticks(&c, frontends, &first, "after a partial sync");
        assert_eq!(proxy.sync(&c.node.name, Resync::Refresh).expect("refresh").kind, SyncKind::Refresh);
        sticks(&c, frontends, &first, "after a periodic full sync");
        assert_eq!(sync(&c.node, &mut proxy, &objects(&c, &pods, false)).kind, SyncKind::Partial);
    }
    // One entry per client and family, naming the endpoint.
    for family in ["ip", "ip6"] {
        assert_eq!(entries(&c, family), 1, "{family}: one entry per client");
    }
    // Every connection was also checked against explain over what the proxy synced.
    assert!(crate::common::explained::checked() >= 24, "{} connections checked", crate::common::explained::checked());
}

#[test]
fn a_client_whose_endpoint_went_is_spread_anew_and_stays_there() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(3, 0);
    let mut proxy = Proxy::new(node_a_config());
    let pods = ["pod-1", "pod-2", "pod-3"];
    sync(&c.node, &mut proxy, &objects(&c, &pods, false));
    for frontends in [&V4[..], &V6[..]] {
        let first = who(&c.client, frontends[0]);
        sticks(&c, frontends, &first, "before the change");
        // The endpoint goes (its pod still answers, so a stale entry would show).
        let rest: Vec<&str> = pods.iter().copied().filter(|p| *p != first).collect();
        assert_eq!(sync(&c.node, &mut proxy, &objects(&c, &rest, false)).kind, SyncKind::Partial);
        let second = who(&c.client, frontends[0]);
        assert!(rest.contains(&second.as_str()), "{} still sent the client to {second}", frontends[0]);
        sticks(&c, frontends, &second, "after its endpoint went");
        // Back again: the client stays where it was spread to, and its entry for the endpoint
        // that went is gone (left, it would lead the client back whenever its endpoint's rule
        // comes first).
        sync(&c.node, &mut proxy, &objects(&c, &pods, false));
        sticks(&c, frontends, &second, "after the endpoint came back");
        let family = if frontends[0].starts_with('[') { "ip6" } else { "ip" };
        assert_eq!(entries(&c, family), 1, "{family}: one entry per client");
    }
}

#[test]
fn both_traffic_policy_scopes_share_a_clients_endpoint() {
    if !kernel_available() {
        return;
    }
    // externalTrafficPolicy Local: the NodePort reaches only this node's pods, the ClusterIP
    // every pod. A client sent to a local pod through the NodePort is known to the ClusterIP's
    // chain too (upstream's cluster and local chains share each endpoint's set).
    let c = Cluster::new(2, 2);
    let mut proxy = Proxy::new(node_a_config());
    let spec = json!({"type": "NodePort", "clusterIP": "172.30.0.52", "externalTrafficPolicy": "Local",
        "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30052}]});
    let pods = ["pod-1", "pod-2", "rpod-1", "rpod-2"];
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    sync(&c.node, &mut proxy, &[service("web", spec, json!({})), slice("web", false, "TCP", eps)]);
    let local = who(&c.client, "192.168.1.1:30052");
    assert!(local == "pod-1" || local == "pod-2", "the NodePort (Local) sent the client to {local}");
    sticks(&c, &["192.168.1.1:30052", "172.30.0.52:80"], &local, "through either scope");
}
