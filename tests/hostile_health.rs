//! A hostile round against the health-check node ports, `/healthz` and `/metrics`: odd
//! Services and endpoints through the node-local view and the in-memory sync loop, and odd
//! clients and node changes through the real daemon in network namespaces. Each test holds
//! the proxy to what upstream kube-proxy does; the ones still failing are marked
//! `#[ignore = "finding: ..."]`.

mod common;

use clap::Parser;
use common::cluster::{Cluster, ECHO_PORT, endpoint, service};
use common::daemon::{Daemon, fake_nft, wait_for, write_manifests};
use common::kernel_available;
use common::net::{http_get, in_netns};
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::health::local::LocalView;
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::metrics::Metrics;
use kube_nftproxy::model::{ApiObject, Model, ObjectChange};
use kube_nftproxy::nft::{NftError, Resync, SyncKind, SyncReport};
use kube_nftproxy::observe::Observers;
use kube_nftproxy::render::{Ruleset, Update};
use kube_nftproxy::sync::{Kernel, MIN_RETRY, Periods, Syncer};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// What the node-local view serves: port → (service name, local endpoints).
fn served(m: &Model) -> Vec<(u16, String, usize)> {
    let mut view = LocalView::default();
    view.update(m, "node-a", true, std::iter::empty());
    view.health_check_ports().into_iter().map(|(p, s)| (p, s.name, s.local_endpoints)).collect()
}

#[test]
#[ignore = "finding: a dual-stack pod counts twice in localEndpoints (one per address family); upstream counts it once"]
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
    assert_eq!(served(&m), vec![(32050, "web".into(), 1)], "one pod, one endpoint");
}

#[test]
#[ignore = "finding: an eTP=Local LoadBalancer with allocateLoadBalancerNodePorts=false and no ingress IP yet gets no health-check port"]
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
    assert_eq!(served(&m), vec![(32051, "web".into(), 1)]);
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
    assert_eq!(served(&m), vec![(32052, "web".into(), 2), (32053, "v6".into(), 1)]);
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
    assert_eq!(served(&m), vec![(32057, "b".into(), 1)]);
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
#[ignore = "finding: no_local_endpoints_total counts Local Services with no endpoints at all; upstream counts only those with endpoints, none here"]
fn a_local_service_without_any_endpoint_is_not_counted_as_without_local_endpoints() {
    // Upstream: a port with no endpoints at all is rejected ("has no endpoints") and not
    // counted; the gauge counts ports whose endpoints are all on other nodes.
    let m = model(vec![node_a(), lb_svc("web", 32059, &["IPv4"], json!({"internalTrafficPolicy": "Local"}))]);
    assert_eq!(no_local(&m), vec![0, 0, 0, 0]);
}

// ---------------------------------------------------------------------------------------
// The sync loop's metrics, in memory (the fake kernel of tests/sync_loop.rs, cut down).
// ---------------------------------------------------------------------------------------

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<(usize, usize)>>);

impl Kernel for Fake {
    fn sync(&mut self, _: &Ruleset, _: &Update, resync: Resync) -> Result<SyncReport, NftError> {
        let mut s = self.0.lock().unwrap();
        s.0 += 1;
        if s.1 > 0 {
            s.1 -= 1;
            return Err(NftError::Rejected { message: "fake failure".into(), line: None });
        }
        let kind = if resync == Resync::Changes { SyncKind::Partial } else { SyncKind::Full };
        Ok(SyncReport { kind, netlink: false, script: String::new(), deleted_chains: 0, unsure: false })
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
}

fn change(v: Value) -> ObjectChange {
    ObjectChange::from_api(&ApiObject::from_json(v).unwrap().unwrap(), "node-a").unwrap().unwrap()
}

/// A loop over `fake` with metrics, past its first (good) sync of one Local Service.
fn synced_loop(fake: &Fake) -> (Syncer<Fake>, Inbox, Arc<Metrics>) {
    let cfg = Config::from_flags(&Flags::parse_from(["kube-nftproxy", "--hostname-override=node-a"])).unwrap();
    let periods =
        Periods { min_sync: Duration::ZERO, sync: Duration::from_secs(30), full_sync: Duration::from_secs(3600) };
    let m = Arc::new(Metrics::new().unwrap());
    let mut syncer = Syncer::new(cfg, periods, fake.clone(), &["manifests"])
        .with_observers(Observers::default().with_metrics(m.clone()));
    let inbox = Inbox::default();
    inbox.send_all(vec![change(node_a()), change(lb_svc("web", 32058, &["IPv4"], json!({})))]);
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
#[ignore = "finding: kubeproxy_sync_proxy_rules_duration_seconds observes only successful syncs; upstream observes every attempt"]
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

// ---------------------------------------------------------------------------------------
// The real daemon in network namespaces.
// ---------------------------------------------------------------------------------------

/// The node's primary address, where NodePorts (and so health-check ports) are served.
const NODE_IP: &str = "192.168.1.1";

/// A LoadBalancer Service `name` (`n` picks its addresses) with `externalTrafficPolicy: Local`,
/// health-check node port `hcnp` and one ready endpoint per pod of `pods`.
fn local_lb(c: &Cluster, name: &str, n: u8, hcnp: u16, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"type": "LoadBalancer", "clusterIP": format!("172.30.0.{n}"),
        "externalTrafficPolicy": "Local", "healthCheckNodePort": hcnp,
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30000 + u16::from(n)}]});
    let status = json!({"loadBalancer": {"ingress": [{"ip": format!("203.0.113.{n}")}]}});
    let eps = pods.iter().map(|p| endpoint(c.pod_named(p), false, json!({}))).collect();
    let mut s = common::cluster::slice(name, false, "TCP", eps);
    s["metadata"]["name"] = json!(format!("{name}-abc"));
    vec![service(name, spec, status), s]
}

/// What a load balancer's checker sees on `addr`: status, weight header, body; `None` when
/// nothing answers.
fn check_at(c: &Cluster, addr: &str) -> Option<(u16, String, String)> {
    let (code, head, body) = http_get(&c.client.name, addr, "/healthz")?;
    let weight = head.lines().find_map(|l| l.strip_prefix("x-load-balancing-endpoint-weight: ")).unwrap_or_default();
    Some((code, weight.to_string(), body))
}

/// Waits up to 5 s for `addr` to answer `want` (status, weight), or to be closed (`None`).
fn expect_at(c: &Cluster, d: &Daemon, addr: &str, want: Option<(u16, &str)>, why: &str) {
    let got = || check_at(c, addr).map(|(code, w, _)| (code, w));
    let want = want.map(|(code, w)| (code, w.to_string()));
    let ok = wait_for(Duration::from_secs(5), || got() == want);
    assert!(ok.is_some(), "{why}: {addr} answers {:?}, wanted {want:?}\n{}", got(), d.logged());
}

fn expect(c: &Cluster, d: &Daemon, port: u16, want: Option<(u16, &str)>, why: &str) {
    expect_at(c, d, &format!("{NODE_IP}:{port}"), want, why);
}

/// One local pod, one Local Service with health-check port `hcnp`, and the daemon with
/// `flags`, the port answering 200.
fn one_port(hcnp: u16, flags: &[&str]) -> (Cluster, Daemon) {
    let c = Cluster::new(1, 0);
    let path = write_manifests(&c, local_lb(&c, "web", 60, hcnp, &["pod-1"]));
    let d = Daemon::start(&c.node, &path, flags, &[]);
    expect(&c, &d, hcnp, Some((200, "1")), "served");
    (c, d)
}

/// Connects from the client to `addr`, sends `chunks` `gap` apart, half-closes when
/// `half_close`, and returns all it reads within 3 s.
fn exchange(c: &Cluster, addr: &str, chunks: Vec<Vec<u8>>, gap: Duration, half_close: bool) -> String {
    let addr: SocketAddr = addr.parse().unwrap();
    in_netns(&c.client.name, move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        for chunk in chunks {
            if s.write_all(&chunk).is_err() {
                break;
            }
            std::thread::sleep(gap);
        }
        if half_close {
            s.shutdown(Shutdown::Write).unwrap();
        }
        read_all(s)
    })
}

/// Everything `s` reads within its timeout, as text.
fn read_all(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `bytes` and the end of the stream in one segment (corked, so the FIN rides with
/// the data, as a quick client's often does) and returns what it reads within 3 s.
fn send_and_close(c: &Cluster, addr: &str, bytes: Vec<u8>) -> String {
    let addr: SocketAddr = addr.parse().unwrap();
    in_netns(&c.client.name, move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let on: libc::c_int = 1;
        // SAFETY: setting an int option on a socket this thread owns.
        let rc =
            unsafe { libc::setsockopt(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_CORK, (&raw const on).cast(), 4) };
        assert_eq!(rc, 0, "TCP_CORK");
        s.write_all(&bytes).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        read_all(s)
    })
}

fn request(method: &str, extra: &str) -> Vec<u8> {
    format!("{method} /healthz HTTP/1.1\r\nHost: lb\r\nUser-Agent: checker\r\n{extra}\r\n").into_bytes()
}

#[test]
fn hostile_clients_each_get_their_answer_and_hold_up_no_one() {
    if !kernel_available() {
        return;
    }
    let (c, d) = one_port(32060, &["--healthz-bind-address="]);
    let addr = format!("{NODE_IP}:32060");
    // Three hundred checkers at once: every one is answered.
    let target: SocketAddr = addr.parse().unwrap();
    let answered = in_netns(&c.client.name, move || {
        let mut conns: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(target).expect("connect")).collect();
        for s in &mut conns {
            s.write_all(&request("GET", "")).unwrap();
        }
        conns
            .into_iter()
            .filter(|s| {
                let mut s = s;
                s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                let mut text = String::new();
                let _ = s.read_to_string(&mut text);
                text.starts_with("HTTP/1.1 200 ")
            })
            .count()
    });
    assert_eq!(answered, 300, "{}", d.logged());
    // A client sending its request a byte at a time (within the 10 s allowed) is answered,
    // and holds up no other check meanwhile.
    let slow = std::thread::scope(|s| {
        let slow = s.spawn(|| {
            let bytes = request("GET", "").into_iter().map(|b| vec![b]).collect();
            exchange(&c, &addr, bytes, Duration::from_millis(40), false)
        });
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        assert_eq!(check_at(&c, &addr).map(|r| r.0), Some(200));
        assert!(started.elapsed() < Duration::from_secs(1), "a check waited {:?}", started.elapsed());
        slow.join().unwrap()
    });
    assert!(slow.starts_with("HTTP/1.1 200 "), "{slow:?}");
    // Pipelined requests: the first is answered (then the connection closes, as it says).
    let two = [request("GET", ""), request("GET", "")].concat();
    let got = exchange(&c, &addr, vec![two], Duration::ZERO, false);
    assert!(got.starts_with("HTTP/1.1 200 ") && got.contains("Connection: close\r\n"), "{got:?}");
    // A POST with a body, and an HTTP/1.0 request without Host: any method and path.
    let post = request("POST", "Content-Length: 5\r\n").into_iter().chain(*b"hello").collect();
    assert!(exchange(&c, &addr, vec![post], Duration::ZERO, false).starts_with("HTTP/1.1 200 "));
    let old = b"GET / HTTP/1.0\r\n\r\n".to_vec();
    assert!(exchange(&c, &addr, vec![old], Duration::ZERO, false).starts_with("HTTP/1.1 200 "));
    // More silent connections than the loop keeps: once they go, checks are answered at once.
    let silent =
        in_netns(&c.client.name, move || (0..1100).filter_map(|_| TcpStream::connect(target).ok()).collect::<Vec<_>>());
    assert!(silent.len() > 1024, "only {} connections opened", silent.len());
    drop(silent);
    let back = wait_for(Duration::from_secs(2), || check_at(&c, &addr).is_some_and(|r| r.0 == 200));
    assert!(back.is_some(), "checks not answered after a flood:\n{}", d.logged());
    d.stop();
}

#[test]
#[ignore = "finding: a client that half-closes (shutdown(SHUT_WR)) right after its request gets no answer"]
fn a_client_that_half_closes_after_its_request_is_answered() {
    if !kernel_available() {
        return;
    }
    // `printf 'GET / HTTP/1.0\r\n\r\n' | nc -N node 32061`, and checkers that shut down their
    // sending side once the request is out: Go's server (upstream) answers them.
    let (c, d) = one_port(32061, &["--healthz-bind-address="]);
    let addr = format!("{NODE_IP}:32061");
    // Request, then FIN apart: answered.
    let got = exchange(&c, &addr, vec![request("GET", "")], Duration::from_millis(100), true);
    assert!(got.starts_with("HTTP/1.1 200 "), "answered {got:?}\n{}", d.logged());
    // Request and FIN in one segment.
    let got = send_and_close(&c, &addr, request("GET", ""));
    assert!(got.starts_with("HTTP/1.1 200 "), "answered {got:?}\n{}", d.logged());
    d.stop();
}

#[test]
#[ignore = "finding: a request head with more than 32 header lines (under 8 KiB) is answered 400; upstream answers 200"]
fn a_request_with_many_headers_is_answered() {
    if !kernel_available() {
        return;
    }
    // A checker behind proxies that add headers: 40 short headers, 1 KiB in all. Go's server
    // takes up to 1 MiB of head, however many lines.
    let (c, d) = one_port(32062, &["--healthz-bind-address="]);
    let extra: String = (0..40).map(|i| format!("X-Probe-{i}: {i}\r\n")).collect();
    let got = exchange(&c, &format!("{NODE_IP}:32062"), vec![request("GET", &extra)], Duration::ZERO, false);
    assert!(got.starts_with("HTTP/1.1 200 "), "answered {got:?}");
    d.stop();
}

#[test]
#[ignore = "finding: an answer to HEAD carries the body; HTTP (and upstream's Go server) sends none"]
fn a_head_request_gets_the_status_and_no_body() {
    if !kernel_available() {
        return;
    }
    let (c, d) = one_port(32063, &["--healthz-bind-address="]);
    let got = exchange(&c, &format!("{NODE_IP}:32063"), vec![request("HEAD", "")], Duration::ZERO, false);
    assert!(got.starts_with("HTTP/1.1 200 "), "answered {got:?}");
    let body = got.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    assert_eq!(body, "", "a HEAD answer has no body: {got:?}");
    d.stop();
}

#[test]
#[ignore = "finding: with net.ipv6.bindv6only=1 the `[::]` listener (--nodeport-addresses=all) refuses IPv4 checks"]
fn with_bindv6only_set_a_port_on_every_address_still_takes_ipv4() {
    if !kernel_available() {
        return;
    }
    // Go's listener on 0.0.0.0 (upstream's for "all") clears IPV6_V6ONLY itself; a socket
    // that leaves it to the sysctl takes no IPv4 on hosts that set it.
    let c = Cluster::new(1, 0);
    let out = c.node.run(&["sysctl", "-qw", "net.ipv6.bindv6only=1"], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = write_manifests(&c, local_lb(&c, "web", 64, 32064, &["pod-1"]));
    let d = Daemon::start(&c.node, &path, &["--healthz-bind-address=", "--nodeport-addresses=all"], &[]);
    expect_at(&c, &d, "[fd00:172:16::1]:32064", Some((200, "1")), "IPv6 is served");
    expect(&c, &d, 32064, Some((200, "1")), "IPv4 on the same port");
    d.stop();
}

/// Writes `objects` with `node` as this node's Node object where [`write_manifests`] does.
fn write_with_node(c: &Cluster, node: Value, objects: Vec<Value>) {
    let path = write_manifests(c, Vec::new());
    let mut items = vec![node];
    items.extend(objects);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(&path, serde_json::to_vec(&list).unwrap()).unwrap();
}

/// A ClusterIP Service with no endpoints, to make a sync happen.
fn bystander(n: u8) -> Value {
    service(
        &format!("bystander-{n}"),
        json!({"clusterIP": format!("172.30.1.{n}"), "ports": [{"port": 80}]}),
        json!({}),
    )
}

#[test]
fn ports_follow_services_across_policy_and_port_changes_and_a_draining_node_keeps_them() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    let a = |hcnp| local_lb(&c, "a", 70, hcnp, &["pod-1"]);
    let mut objects = a(32070);
    objects.extend(local_lb(&c, "b", 71, 32071, &["pod-1", "pod-2"]));
    let path = write_manifests(&c, objects);
    let d = Daemon::start(&c.node, &path, &[], &[]);
    expect(&c, &d, 32070, Some((200, "1")), "a served");
    expect(&c, &d, 32071, Some((200, "2")), "b served");
    // a's port changes; b turns to the Cluster policy (the API server drops its port).
    let mut objects = a(32072);
    let mut b = local_lb(&c, "b", 71, 32071, &["pod-1", "pod-2"]);
    b[0]["spec"]["externalTrafficPolicy"] = json!("Cluster");
    b[0]["spec"].as_object_mut().unwrap().remove("healthCheckNodePort");
    objects.extend(b);
    write_manifests(&c, objects);
    expect(&c, &d, 32072, Some((200, "1")), "a's new port");
    expect(&c, &d, 32070, None, "a's old port closes");
    expect(&c, &d, 32071, None, "b has no health check under the Cluster policy");
    // Two Services claim one port: it answers for one, then for the other once that goes.
    let one = local_lb(&c, "one", 73, 32073, &["pod-1"]);
    let two = local_lb(&c, "two", 74, 32073, &["pod-1", "pod-2"]);
    write_manifests(&c, [one.clone(), two.clone()].concat());
    let first = wait_for(Duration::from_secs(5), || check_at(&c, &format!("{NODE_IP}:32073")).is_some());
    assert!(first.is_some(), "the shared port is not served:\n{}", d.logged());
    let (_, weight, body) = check_at(&c, &format!("{NODE_IP}:32073")).unwrap();
    let (left, want) = if weight == "1" { (two, "2") } else { (one, "1") };
    assert!(body.contains(if weight == "1" { "\"one\"" } else { "\"two\"" }), "{weight} {body}");
    write_manifests(&c, left.clone());
    expect(&c, &d, 32073, Some((200, want)), "the other claimant takes the port");
    // The cluster autoscaler marks the node for deletion: /healthz drains it, but upstream's
    // health-check ports do not look at the node's eligibility.
    let mut node = Cluster::node_object();
    node["spec"] = json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]});
    write_with_node(&c, node, left);
    let drained = wait_for(Duration::from_secs(5), || {
        http_get(&c.client.name, &format!("{NODE_IP}:10256"), "/healthz").is_some_and(|r| r.0 == 503)
    });
    assert!(drained.is_some(), "/healthz does not drain:\n{}", d.logged());
    expect(&c, &d, 32073, Some((200, want)), "the health-check port still answers 200");
    metrics_are_strict_and_count_health_answers(&c, &d);
    d.stop();
}

/// The scrape passes a strict parser (Python's prometheus_client, when installed), no label
/// carries a Service's name, and `/healthz` and `/livez` answers are counted by code.
fn metrics_are_strict_and_count_health_answers(c: &Cluster, d: &Daemon) {
    let scrape = || http_get(&c.node.name, "127.0.0.1:10249", "/metrics").map(|r| r.2).unwrap_or_default();
    let count = |text: &str, line: &str| {
        text.lines().find_map(|l| l.strip_prefix(line)).map_or(0.0, |v| v.trim().parse::<f64>().unwrap())
    };
    let before = scrape();
    for _ in 0..3 {
        assert_eq!(http_get(&c.node.name, "127.0.0.1:10256", "/healthz").map(|r| r.0), Some(503));
        assert_eq!(http_get(&c.node.name, "127.0.0.1:10256", "/livez").map(|r| r.0), Some(200));
    }
    let text = scrape();
    for (line, n) in
        [("kubeproxy_proxy_healthz_total{code=\"503\"}", 3.0), ("kubeproxy_proxy_livez_total{code=\"200\"}", 3.0)]
    {
        assert_eq!(count(&text, line) - count(&before, line), n, "{line}\n{text}");
    }
    for name in ["\"one\"", "\"two\"", "\"a\"", "\"test\""] {
        assert!(!text.contains(name), "a label carries a Service's name {name}:\n{text}");
    }
    let python = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as p\n\
                  print(sum(1 for _ in p(sys.stdin.read())))";
    let probe = std::process::Command::new("python3").args(["-c", "import prometheus_client"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPING the strict parse of /metrics: python3 with prometheus_client is not installed");
        return;
    }
    let mut child = std::process::Command::new("python3")
        .args(["-c", python])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refuses /metrics: {}\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.logged()
    );
}

#[test]
fn listeners_move_with_the_node_addresses_nodeport_addresses_selects() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let path = write_manifests(&c, local_lb(&c, "web", 75, 32075, &["pod-1"]));
    let d = Daemon::start(&c.node, &path, &["--healthz-bind-address=", "--nodeport-addresses=172.16.0.0/24"], &[]);
    expect_at(&c, &d, "172.16.0.1:32075", Some((200, "1")), "served on the address in the CIDR");
    expect(&c, &d, 32075, None, "not on the primary address, outside the CIDR");
    // A second address in the CIDR arrives; the next sync (any change) listens there too.
    let ip = |args: &str| {
        let argv: Vec<&str> = args.split_whitespace().collect();
        assert!(c.node.run(&argv, "").status.success(), "{args}");
    };
    ip("ip addr add 172.16.0.9/24 dev to-client");
    let mut objects = local_lb(&c, "web", 75, 32075, &["pod-1"]);
    objects.push(bystander(1));
    write_manifests(&c, objects.clone());
    expect_at(&c, &d, "172.16.0.9:32075", Some((200, "1")), "the new address is served");
    ip("ip addr del 172.16.0.9/24 dev to-client");
    ip("ip addr add 172.16.0.9/24 dev to-b");
    objects.push(bystander(2));
    write_manifests(&c, objects);
    // Still on the node (another interface) and in the CIDR: still served.
    expect_at(&c, &d, "172.16.0.9:32075", Some((200, "1")), "moved to another interface");
    expect_at(&c, &d, "172.16.0.1:32075", Some((200, "1")), "the first address stays");
    d.stop();
}

#[test]
fn a_health_check_port_on_the_healthz_port_leaves_healthz_alone() {
    if !kernel_available() {
        return;
    }
    // A Service whose health-check port is kube-proxy's own 10256 (a manifest mistake; the
    // API server allocates from the NodePort range): /healthz keeps answering as /healthz,
    // the clash is logged, and the other ports are served.
    let c = Cluster::new(1, 0);
    let mut objects = local_lb(&c, "clash", 76, 10256, &["pod-1"]);
    objects.extend(local_lb(&c, "fine", 77, 32077, &["pod-1"]));
    let path = write_manifests(&c, objects);
    let d = Daemon::start(&c.node, &path, &[], &[]);
    expect(&c, &d, 32077, Some((200, "1")), "the other port");
    let logged = wait_for(Duration::from_secs(5), || d.logged().contains("cannot serve the health-check node port"));
    assert!(logged.is_some(), "the clash is not logged:\n{}", d.logged());
    let healthz = http_get(&c.client.name, &format!("{NODE_IP}:10256"), "/healthz").expect("healthz answers");
    assert!(healthz.2.contains("nodeEligible"), "/healthz was taken over: {healthz:?}");
    d.stop();
}

#[test]
fn an_unhealthy_proxy_makes_every_health_check_port_say_so() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let dir = common::Scratch::new("hostile-sick");
    let real =
        String::from_utf8(std::process::Command::new("sh").args(["-c", "command -v nft"]).output().unwrap().stdout)
            .unwrap();
    let flag = dir.0.join("hang");
    let body = format!("if [ -e {} ]; then exec sleep 1000; fi\nexec {} \"$@\"", flag.display(), real.trim());
    let nft = fake_nft(&dir.0, &body);
    let mut objects = local_lb(&c, "web", 78, 32078, &["pod-1"]);
    objects.extend(local_lb(&c, "api", 79, 32079, &["pod-1"]));
    let path = write_manifests(&c, objects.clone());
    let flags = ["--healthz-bind-address=", "--sync-period=1s", "--nft-timeout=30s"];
    let mut d = Daemon::start(&c.node, &path, &flags, &[("NFT", nft.to_str().unwrap())]);
    expect(&c, &d, 32078, Some((200, "1")), "healthy first");
    expect(&c, &d, 32079, Some((200, "1")), "healthy first");
    // From now on `nft` hangs; a new Service (new chains: through nft) cannot be applied.
    std::fs::write(&flag, "").unwrap();
    let mut more = objects;
    more.extend(local_lb(&c, "new", 80, 32080, &["pod-1"]));
    write_manifests(&c, more);
    for port in [32078, 32079] {
        expect(&c, &d, port, Some((503, "1")), "an unhealthy proxy fails every check");
        let (_, _, body) = check_at(&c, &format!("{NODE_IP}:{port}")).unwrap();
        assert!(body.contains("\"serviceProxyHealthy\": false"), "{body}");
    }
    // SIGTERM still ends it promptly, nft hanging.
    let stopped = d.stop_within(Duration::from_secs(5));
    assert!(stopped.is_some_and(|(s, _)| s.success()), "{stopped:?}\n{}", d.logged());
}

#[test]
fn sigterm_with_many_connections_open_exits_within_five_seconds() {
    if !kernel_available() {
        return;
    }
    let (c, mut d) = one_port(32081, &["--healthz-bind-address="]);
    let target: SocketAddr = format!("{NODE_IP}:32081").parse().unwrap();
    let _held = in_netns(&c.client.name, move || {
        let mut conns: Vec<TcpStream> = (0..500).filter_map(|_| TcpStream::connect(target).ok()).collect();
        // Some half-sent requests among the silent ones.
        for s in conns.iter_mut().take(50) {
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
        }
        conns
    });
    std::thread::sleep(Duration::from_millis(200));
    let stopped = d.stop_within(Duration::from_secs(5));
    assert!(stopped.is_some_and(|(s, _)| s.success()), "{stopped:?}\n{}", d.logged());
}
