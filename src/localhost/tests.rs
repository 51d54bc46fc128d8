//! What the view asks each Service for, endpoint picking under affinity, and a connection
//! carried over real loopback sockets.

use super::conn::{self, Carry};
use super::proxy::Pick;
use super::{LocalhostView, Spec};
use crate::model::{ApiObject, Family, Model, ObjectKey};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

fn object(v: Value) -> ApiObject {
    ApiObject::from_json(v).expect("json").expect("an object")
}

/// A dual-stack NodePort Service `name` (TCP 30080, UDP 30081) with `spec` merged in, and its
/// IPv4 slice: one endpoint here (10.1.0.1), one on node-b (10.2.0.1).
fn objects(name: &str, spec: Value) -> Vec<ApiObject> {
    let mut s = json!({"type": "NodePort", "clusterIPs": ["172.30.0.1", "fd00::1"], "ports": [
        {"name": "tcp", "port": 80, "protocol": "TCP", "nodePort": 30080},
        {"name": "udp", "port": 53, "protocol": "UDP", "nodePort": 30081}]});
    s.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    let ep = |ip: &str, node: &str| json!({"addresses": [ip], "nodeName": node});
    vec![
        object(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "ns"}, "spec": s}),
        ),
        object(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": format!("{name}-1"), "namespace": "ns", "labels": {"kubernetes.io/service-name": name}},
            "ports": [{"name": "tcp", "port": 8080, "protocol": "TCP"}, {"name": "udp", "port": 53, "protocol": "UDP"}],
            "endpoints": [ep("10.1.0.1", "node-a"), ep("10.2.0.1", "node-b")]})),
    ]
}

fn key(name: &str) -> ObjectKey {
    ("ns".to_string(), name.to_string())
}

#[test]
fn each_tcp_node_port_with_a_usable_endpoint_is_wanted_in_each_family_served() {
    let mut all = objects("web", json!({"sessionAffinity": "ClientIP"}));
    all.extend(objects("local", json!({"externalTrafficPolicy": "Local"})));
    let (model, refused) = Model::from_objects(&all, "node-a");
    assert!(refused.is_empty(), "{refused:?}");
    let mut view = LocalhostView::new(vec![Family::V4, Family::V6]);
    assert!(view.update(&model, "node-a", true, std::iter::empty()));
    let wanted = view.wanted();
    // UDP is not served; IPv6 has no endpoints; `local` shares the port and comes first.
    assert_eq!(wanted.keys().copied().collect::<Vec<_>>(), [(Family::V4, 30080)]);
    let spec = &wanted[&(Family::V4, 30080)];
    assert_eq!(spec.service, "ns/local:tcp");
    assert_eq!(spec.endpoints, ["10.1.0.1:8080".parse::<SocketAddr>().unwrap()], "Local: this node's alone");

    let (model, _) = Model::from_objects(&objects("web", json!({"sessionAffinity": "ClientIP"})), "node-a");
    assert!(view.update(&model, "node-a", true, std::iter::empty()), "local went");
    let spec = &view.wanted()[&(Family::V4, 30080)];
    assert_eq!(spec.endpoints.len(), 2, "Cluster: every endpoint: {spec:?}");
    assert_eq!(spec.affinity, Some(Duration::from_secs(10800)), "upstream's default timeout");
    assert!(!view.update(&model, "node-a", false, [key("web")].iter()), "nothing changed");

    // A family not served wants nothing; neither does a Service without endpoints.
    let mut v6 = LocalhostView::new(vec![Family::V6]);
    assert!(!v6.update(&model, "node-a", true, std::iter::empty()));
    assert!(v6.wanted().is_empty());
}

fn spec(endpoints: &[&str], affinity: Option<u64>) -> Spec {
    Spec {
        service: "ns/web".into(),
        endpoints: endpoints.iter().map(|e| e.parse().unwrap()).collect(),
        affinity: affinity.map(Duration::from_secs),
    }
}

#[test]
fn affinity_pins_the_one_loopback_client_until_it_is_idle_for_the_timeout() {
    let eps = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"];
    let mut pick = Pick::new(spec(&eps, Some(10)));
    let t0 = Instant::now();
    let first = pick.next(t0).unwrap();
    for s in 1..=30 {
        assert_eq!(pick.next(t0 + Duration::from_secs(s)), Some(first), "each connection renews the pin");
    }
    let later: Vec<_> = (0..40).map(|i| pick.next(t0 + Duration::from_secs(100 + 11 * i)).unwrap()).collect();
    assert!(later.iter().any(|e| *e != first), "an idle pin never let go: {later:?}");
    // Its endpoint gone, the pin goes too.
    let kept = pick.next(t0 + Duration::from_secs(1000)).unwrap();
    let rest: Vec<&str> = eps.iter().copied().filter(|e| e.parse::<SocketAddr>().unwrap() != kept).collect();
    pick.update(&spec(&rest, Some(10)));
    assert_ne!(pick.next(t0 + Duration::from_secs(1001)), Some(kept));

    let mut random = Pick::new(spec(&eps, None));
    let seen: std::collections::BTreeSet<_> = (0..200).map(|_| random.next(t0).unwrap()).collect();
    assert_eq!(seen.len(), 4, "without affinity every endpoint is picked");
    assert_eq!(Pick::new(spec(&[], None)).next(t0), None);
}

/// A proxy of one connection on loopback to `endpoint`: its listening address.
fn carried(endpoint: SocketAddr, closed: Arc<AtomicBool>) -> SocketAddr {
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = front.local_addr().unwrap();
    std::thread::spawn(move || {
        let (client, _) = front.accept().unwrap();
        conn::spawn(client, Carry { endpoint, service: "ns/web".into(), closed });
    });
    addr
}

#[test]
fn a_connection_is_carried_whole_both_ways_and_its_half_close_passed_on() {
    // The endpoint reads everything, then answers with what it read, reversed, and closes.
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = backend.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = backend.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got.reverse();
        s.write_all(&got).unwrap();
    });
    let mut client = TcpStream::connect(carried(endpoint, Arc::new(AtomicBool::new(false)))).unwrap();
    let sent: Vec<u8> = (0..6_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    client.write_all(&sent).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    client.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    client.read_to_end(&mut back).unwrap();
    server.join().unwrap();
    let mut want = sent;
    want.reverse();
    assert!(back == want, "{} bytes back of {}", back.len(), want.len());
}

#[test]
fn a_closed_listener_ends_its_connections_and_a_dead_endpoint_closes_the_client() {
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = backend.local_addr().unwrap();
    let closed = Arc::new(AtomicBool::new(false));
    let mut client = TcpStream::connect(carried(endpoint, closed.clone())).unwrap();
    let (_held, _) = backend.accept().unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    closed.store(true, std::sync::atomic::Ordering::SeqCst);
    let started = Instant::now();
    let mut buf = [0u8; 16];
    assert!(matches!(client.read(&mut buf), Ok(0) | Err(_)), "the connection outlived its listener");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());

    drop(backend);
    let mut client = TcpStream::connect(carried(endpoint, Arc::new(AtomicBool::new(false)))).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    assert!(matches!(client.read(&mut buf), Ok(0) | Err(_)), "a refused dial left the client open");
}

#[test]
fn an_idle_thread_takes_the_next_job_instead_of_a_new_one() {
    use std::sync::mpsc;
    let (tx, rx) = mpsc::channel();
    let ran = |tx: mpsc::Sender<std::thread::ThreadId>| Box::new(move || tx.send(std::thread::current().id()).unwrap());
    // One job at a time: each finds the thread of the one before (or another test's) idle.
    let ids: std::collections::HashSet<_> = (0..8)
        .map(|_| {
            super::workers::run(ran(tx.clone())).unwrap();
            let id = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            id
        })
        .collect();
    assert!(ids.len() <= 3, "eight jobs one after another took {} threads: {ids:?}", ids.len());
}
