//! A hostile round, in memory: odd Services and endpoints through the node-local view
//! (health-check ports, the no-local-endpoints metric) and the sync loop's metrics through a
//! fake kernel. Each test holds the proxy to what upstream kube-proxy does.

use clap::Parser;
use kube_nftproxy::config::Periods;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::conntrack::{ConntrackError, Plan, Report};
use kube_nftproxy::health::local::LocalView;
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::metrics::Metrics;
use kube_nftproxy::model::{ApiObject, Family, Model, ObjectChange};
use kube_nftproxy::nft::{NftError, Resync, SyncKind, SyncReport};
use kube_nftproxy::observe::Observers;
use kube_nftproxy::render::{Ruleset, Update};
use kube_nftproxy::sync::{Kernel, MIN_RETRY, Syncer};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The echo port the endpoints listen on (as the namespaced tests' pods).
const ECHO_PORT: u16 = 8080;
// ---------------------------------------------------------------------------------------
// The node-local view, in memory.
// ---------------------------------------------------------------------------------------

/// A model of `objects` for `node-a`, every object accepted.
fn model(objects: Vec<Value>) -> Model {
    let objects: Vec<ApiObject> = objects.into_iter().map(|v| ApiObject::from_json(v).unwrap().unwrap()).collect();
    let (m, refused) = Model::from_objects(&objects, "node-a");
    assert!(refused.is_empty(), "refused: {refused:?}");
    m
}

fn node_a() -> Value {
    json!({"kind": "Node", "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}})
}

/// A LoadBalancer Service `name` with `externalTrafficPolicy: Local`, health-check node port
/// `hcnp`, of `families` (`["IPv4"]`, `["IPv6"]` or both) and `spec_extra` merged into its spec.
fn lb_svc(name: &str, hcnp: u16, families: &[&str], spec_extra: Value) -> Value {
    let ips: Vec<String> = families
        .iter()
        .map(|f| if *f == "IPv4" { "172.30.0.50".to_string() } else { "fd00:172:30::50".to_string() })
        .collect();
    let mut spec = json!({"type": "LoadBalancer", "clusterIP": ips[0], "clusterIPs": ips, "ipFamilies": families,
        "externalTrafficPolicy": "Local", "healthCheckNodePort": hcnp,
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30050}]});
    for (k, v) in spec_extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"kind": "Service", "metadata": {"name": name, "namespace": "ns"}, "spec": spec})
}

/// An EndpointSlice `slice` of Service `svc` with `endpoints`.
fn eps(svc: &str, slice: &str, family: &str, endpoints: Value) -> Value {
    json!({"kind": "EndpointSlice", "addressType": family,
        "metadata": {"name": slice, "namespace": "ns", "labels": {"kubernetes.io/service-name": svc}},
        "ports": [{"name": "http", "port": ECHO_PORT, "protocol": "TCP"}], "endpoints": endpoints})
}

/// What the node-local view serves: port → (service name, local endpoints per family).
fn served(m: &Model) -> Vec<(u16, String, [usize; 2])> {
    let mut view = LocalView::default();
    view.update(m, "node-a", true, std::iter::empty());
    view.health_check_ports().into_iter().map(|(p, s)| (p, s.name, s.local_endpoints)).collect()
}

#[test]
fn a_dual_stack_pod_is_one_local_endpoint() {
    // One pod on this node with an IPv4 and an IPv6 address, as a dual-stack Service's two
    // EndpointSlices list it. Upstream's proxier of each family counts its own family's
    // endpoints: the health check answers localEndpoints 1 whichever family serves it.
    let m = model(vec![
        node_a(),
        lb_svc("web", 32050, &["IPv4", "IPv6"], json!({"ipFamilyPolicy": "RequireDualStack"})),
        eps("web", "web-v4", "IPv4", json!([{"addresses": ["10.1.1.2"], "nodeName": "node-a"}])),
        eps("web", "web-v6", "IPv6", json!([{"addresses": ["fd00:10:1:1::2"], "nodeName": "node-a"}])),
    ]);
    assert_eq!(served(&m), vec![(32050, "web".into(), [1, 1])], "one pod, one endpoint in each family's answer");
}

#[test]
fn a_load_balancer_without_node_ports_or_ingress_still_has_its_health_check_port() {
    // The cloud controller programs the load balancer (and its health check) before it writes
    // the ingress IP into the status; with allocateLoadBalancerNodePorts=false there is no
    // NodePort either. Upstream serves the port for every LoadBalancer Service with
    // externalTrafficPolicy Local and a healthCheckNodePort, whatever its ports and status.
    let mut svc = lb_svc("web", 32051, &["IPv4"], json!({"allocateLoadBalancerNodePorts": false}));
    svc["spec"]["ports"][0].as_object_mut().unwrap().remove("nodePort");
    let m = model(vec![
        node_a(),
        svc,
        eps("web", "web-a", "IPv4", json!([{"addresses": ["10.1.1.2"], "nodeName": "node-a"}])),
    ]);
    assert_eq!(served(&m), vec![(32051, "web".into(), [1, 0])]);
}

#[test]
fn only_ready_endpoints_named_for_this_node_count_and_each_ip_once() {
    let m = model(vec![
        node_a(),
        lb_svc("web", 32052, &["IPv4"], json!({})),
        eps(
            "web",
            "web-a",
            "IPv4",
            json!([
                // No conditions at all: ready, as upstream reads a missing condition.
                {"addresses": ["10.1.1.2"], "nodeName": "node-a"},
                // Terminating but still serving: not ready, does not count.
                {"addresses": ["10.1.1.3"], "nodeName": "node-a",
                 "conditions": {"ready": false, "serving": true, "terminating": true}},
                // Ready but on no node, or another node.
                {"addresses": ["10.1.1.4"]},
                {"addresses": ["10.1.1.5"], "nodeName": "node-b"},
                // Ready here.
                {"addresses": ["10.1.1.6"], "nodeName": "node-a", "conditions": {"ready": true}},
            ]),
        ),
        // The same pod again in a second slice (slices being rebalanced): one IP, one count.
        eps("web", "web-b", "IPv4", json!([{"addresses": ["10.1.1.2"], "nodeName": "node-a"}])),
        // An IPv6-only Service counts its IPv6 endpoints.
        lb_svc("v6", 32053, &["IPv6"], json!({})),
        eps("v6", "v6-a", "IPv6", json!([{"addresses": ["fd00:10:1:1::2"], "nodeName": "node-a"}])),
    ]);
    assert_eq!(served(&m), vec![(32052, "web".into(), [2, 0]), (32053, "v6".into(), [0, 1])]);
}

#[test]
fn policy_and_port_changes_move_the_health_check_port_incrementally() {
    let web = |hcnp: u16, policy: &str| {
        let mut s = lb_svc("web", hcnp, &["IPv4"], json!({"externalTrafficPolicy": policy}));
        if policy == "Cluster" {
            s["spec"].as_object_mut().unwrap().remove("healthCheckNodePort");
        }
        s
    };
    let slice = eps("web", "web-a", "IPv4", json!([{"addresses": ["10.1.1.2"], "nodeName": "node-a"}]));
    let mut view = LocalView::default();
    let mut m = model(vec![node_a(), web(32054, "Local"), slice.clone()]);
    assert!(view.update(&m, "node-a", true, std::iter::empty()));
    assert_eq!(view.health_check_ports().keys().copied().collect::<Vec<_>>(), vec![32054]);
    let key = ("ns".to_string(), "web".to_string());
    for (svc, want) in
        [(web(32055, "Local"), vec![32055]), (web(0, "Cluster"), vec![]), (web(32056, "Local"), vec![32056])]
    {
        let change = ObjectChange::from_api(&ApiObject::from_json(svc).unwrap().unwrap(), "node-a").unwrap().unwrap();
        m.file(change);
        assert!(view.update(&m, "node-a", false, std::iter::once(&key)), "a changed port is a change");
        assert_eq!(view.health_check_ports().keys().copied().collect::<Vec<_>>(), want);
    }
}

#[test]
fn two_services_claiming_one_port_give_it_to_one_and_then_the_other() {
    // The API server never allocates one port twice, but manifests and races can: the port
    // answers for one of them, and for the other once the first is gone.
    let a = lb_svc("a", 32057, &["IPv4"], json!({}));
    let b = lb_svc("b", 32057, &["IPv4"], json!({}));
    let slice_b = eps("b", "b-a", "IPv4", json!([{"addresses": ["10.1.1.2"], "nodeName": "node-a"}]));
    let m = model(vec![node_a(), a, b.clone(), slice_b.clone()]);
    let got = served(&m);
    assert_eq!(got.len(), 1, "{got:?}");
    let m = model(vec![node_a(), b, slice_b]);
    assert_eq!(served(&m), vec![(32057, "b".into(), [1, 0])]);
}

/// `no_local_endpoints` of `m` as `[v4 internal, v4 external, v6 internal, v6 external]`.
fn no_local(m: &Model) -> Vec<u32> {
    let mut view = LocalView::default();
    view.update(m, "node-a", true, std::iter::empty());
    view.no_local_endpoints().iter().map(|(_, _, n)| *n).collect()
}

#[test]
fn a_local_service_with_endpoints_only_elsewhere_counts_as_without_local_endpoints() {
    let remote = eps("web", "web-a", "IPv4", json!([{"addresses": ["10.2.1.2"], "nodeName": "node-b"}]));
    let m = model(vec![node_a(), lb_svc("web", 32059, &["IPv4"], json!({"internalTrafficPolicy": "Local"})), remote]);
    assert_eq!(no_local(&m), vec![1, 1, 0, 0]);
}

#[test]
fn a_local_service_without_any_endpoint_is_not_counted_as_without_local_endpoints() {
    // Upstream: a port with no endpoints at all is rejected ("has no endpoints") and not
    // counted; the gauge counts ports whose endpoints are all on other nodes.
    let m = model(vec![node_a(), lb_svc("web", 32059, &["IPv4"], json!({"internalTrafficPolicy": "Local"}))]);
    assert_eq!(no_local(&m), vec![0, 0, 0, 0]);
}

// ---------------------------------------------------------------------------------------
// The sync loop's metrics, in memory (the fake kernel of tests/offline/sync_loop.rs, cut down).
// ---------------------------------------------------------------------------------------

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<(usize, usize)>>);

impl Kernel for Fake {
    fn sync(&mut self, _: &Ruleset, _: &Update, resync: Resync, _: &[Family]) -> Result<SyncReport, NftError> {
        let mut s = self.0.lock().unwrap();
        s.0 += 1;
        if s.1 > 0 {
            s.1 -= 1;
            return Err(NftError::Rejected { message: "fake failure".into(), line: None });
        }
        let kind = if resync == Resync::Changes { SyncKind::Partial } else { SyncKind::Full };
        Ok(SyncReport {
            kind,
            bytes: 0,
            transactions: 1,
            elements: None,
            script: String::new(),
            deleted_chains: 0,
            unsure: false,
            refused: vec![],
        })
    }
    fn held_slots(&mut self) -> Option<Ruleset> {
        None
    }

    fn cleanup_due(&self) -> Option<Instant> {
        None
    }
    fn cleanup(&mut self) -> Result<usize, NftError> {
        Ok(0)
    }
    fn tables_look_intact(&mut self) -> bool {
        true
    }
    fn host_addresses(&mut self) -> std::io::Result<Vec<IpAddr>> {
        Ok(vec!["192.168.1.1".parse().unwrap()])
    }
    fn clear_udp_flows(&mut self, _: &Plan) -> Result<Report, ConntrackError> {
        Ok(Report::default())
    }
}

fn change(v: Value) -> ObjectChange {
    ObjectChange::from_api(&ApiObject::from_json(v).unwrap().unwrap(), "node-a").unwrap().unwrap()
}

/// A loop over `fake` with metrics, past its first (good) sync of one Local Service.
fn synced_loop(fake: &Fake) -> (Syncer<Fake>, Inbox, Arc<Metrics>) {
    let cfg = Config::from_flags(&Flags::parse_from(["kube-nftproxy", "--hostname-override=node-a"])).unwrap();
    let periods = Periods {
        min_sync: Duration::ZERO,
        sync: Duration::from_secs(30),
        full_sync: Duration::from_secs(3600),
        share: 1.0,
    };
    let m = Arc::new(Metrics::new().unwrap());
    let mut syncer = Syncer::new(cfg, periods, fake.clone(), &["manifests"])
        .with_observers(Observers::default().with_metrics(m.clone()));
    let inbox = Inbox::default();
    // web's one endpoint runs elsewhere: the Service has no endpoint on this node.
    let elsewhere = eps("web", "web-a", "IPv4", json!([{"addresses": ["10.2.1.2"], "nodeName": "node-b"}]));
    inbox.send_all(vec![change(node_a()), change(lb_svc("web", 32058, &["IPv4"], json!({}))), change(elsewhere)]);
    inbox.listed("manifests");
    turn(&mut syncer, &inbox);
    (syncer, inbox, m)
}

fn turn(syncer: &mut Syncer<Fake>, inbox: &Inbox) {
    assert!(syncer.take(inbox.wait(Instant::now())));
    syncer.sync_if_due();
}

/// Turns the loop (retries come after a backoff) until the fake has taken `calls` syncs.
fn turn_until(fake: &Fake, syncer: &mut Syncer<Fake>, inbox: &Inbox, calls: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.0.lock().unwrap().0 < calls && Instant::now() < deadline {
        std::thread::sleep(MIN_RETRY.min(Duration::from_millis(100)));
        turn(syncer, inbox);
    }
    assert_eq!(fake.0.lock().unwrap().0, calls);
}

/// An endpoint of `web` on this node, which the next sync is to apply.
fn web_endpoint_here() -> ObjectChange {
    change(eps("web", "web-a", "IPv4", json!([{"addresses": ["10.1.1.2"], "nodeName": "node-a"}])))
}

#[test]
fn failed_syncs_count_per_family_and_move_no_success_timestamp() {
    let fake = Fake::default();
    let (mut syncer, inbox, m) = synced_loop(&fake);
    let last = |f: &str| m.last_sync.with_label_values(&[f]).get();
    let before = last("IPv4");
    fake.0.lock().unwrap().1 = 2;
    inbox.send(web_endpoint_here());
    turn(&mut syncer, &inbox);
    assert_eq!(last("IPv4"), before, "a failed sync is no success");
    assert_eq!(m.endpoint_changes_pending.get(), 1);
    assert_eq!(m.no_local_endpoints.with_label_values(&["IPv4", "external"]).get(), 1, "as last applied");
    turn_until(&fake, &mut syncer, &inbox, 4);
    for f in ["IPv4", "IPv6"] {
        assert_eq!(m.sync_failures.with_label_values(&[f]).get(), 2, "{f}");
    }
    assert_eq!(m.endpoint_changes_pending.get(), 0);
    assert_eq!(m.no_local_endpoints.with_label_values(&["IPv4", "external"]).get(), 0, "applied: one endpoint here");
    assert!(last("IPv4") > before);
}

#[test]
fn every_sync_attempt_is_observed_in_the_sync_duration_histogram() {
    // Upstream observes the latency in a deferred function: failed attempts count too, so
    // `rate(nftables_sync_failures_total) / rate(duration_seconds_count)` is a failure ratio.
    let fake = Fake::default();
    let (mut syncer, inbox, m) = synced_loop(&fake);
    fake.0.lock().unwrap().1 = 3;
    inbox.send(web_endpoint_here());
    turn_until(&fake, &mut syncer, &inbox, 5);
    let count = m.sync_duration.with_label_values(&["IPv4"]).get_sample_count();
    assert_eq!(count, 5, "five attempts (two good, three failed)");
}
