//! What localhost NodePorts cost (`-- --localhost-only`; once per full run): the daemon in a
//! node-like namespace with N NodePort Services, served on `primary,localhost` with the gate,
//! against the same Services on `primary` alone (the default) in the same run: memory and
//! threads, how long until the last localhost port answers, and per connection and per byte
//! what the userspace hop costs against the kernel's DNAT of the primary address, in
//! alternating rounds over the same endpoint (the gateway, off the node, as a pod elsewhere).

use crate::common::daemon::{Daemon, wait_for, write_list};
use crate::common::net::{in_netns, spawn_in_netns};
use crate::common::{Netns, Scratch};
use crate::observe::{median_row, round2, rss_mb, threads};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// NodePort Services in a full run.
pub const SERVICES: u32 = 1000;
/// The first NodePort; Service `i` has `FIRST_PORT + i`.
const FIRST_PORT: u16 = 30000;
/// The endpoint every Service has: the gateway, where the server runs.
const ENDPOINT: &str = "192.168.1.254:8080";
/// Rounds alternating the two paths, and connections per round and path.
const ROUNDS: usize = 6;
const PER_ROUND: usize = 250;
/// Bytes one long connection carries.
const BULK: usize = 1 << 30;

fn objects(i: u32) -> [Value; 2] {
    let (a, b) = (i / 250, i % 250 + 1);
    let name = format!("svc-{i}");
    let spec = json!({"type": "NodePort", "clusterIP": format!("172.30.{a}.{b}"),
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": u32::from(FIRST_PORT) + i}]});
    [
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "bench"}, "spec": spec}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": format!("{name}-a"), "namespace": "bench", "labels": {"kubernetes.io/service-name": name}},
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["192.168.1.254"], "nodeName": "node-b"}]}),
    ]
}

fn write(dir: &std::path::Path, services: u32) -> std::path::PathBuf {
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}});
    let mut items = vec![node];
    items.extend((0..services).flat_map(objects));
    write_list(dir, &json!({"kind": "List", "items": items}))
}

/// The endpoint's server: a connection starting with `e` gets one byte back; one starting
/// with `s` is read to its end, then answered with the count.
fn serve(listener: TcpListener) {
    for conn in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let mut s = conn;
            let mut first = [0u8; 1];
            if s.read_exact(&mut first).is_err() {
                return;
            }
            if first[0] == b's' {
                let n = std::io::copy(&mut s, &mut std::io::sink()).unwrap_or(0);
                let _ = s.write_all(&(n + 1).to_le_bytes());
            } else {
                let _ = s.write_all(b"!");
            }
        });
    }
}

/// One short connection: connect, one byte each way, close; milliseconds.
fn exchange(addr: SocketAddr) -> f64 {
    let started = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s.write_all(b"e").expect("write");
    let mut b = [0u8; 1];
    s.read_exact(&mut b).expect("answer");
    started.elapsed().as_secs_f64() * 1e3
}

/// One long connection carrying [`BULK`] bytes; megabytes per second.
fn bulk(addr: SocketAddr) -> f64 {
    let mut s = TcpStream::connect(addr).expect("connect");
    let chunk = vec![7u8; 1 << 20];
    let started = Instant::now();
    s.write_all(b"s").expect("write");
    for _ in 0..BULK / chunk.len() {
        s.write_all(&chunk).expect("write");
    }
    s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut n = [0u8; 8];
    s.read_exact(&mut n).expect("count");
    assert_eq!(u64::from_le_bytes(n), BULK as u64 + 1, "bytes lost");
    round2(BULK as f64 / 1e6 / started.elapsed().as_secs_f64())
}

/// Starts the daemon with `extra`; waits until `ready` holds; the seconds that took.
fn start(ns: &Netns, path: &std::path::Path, extra: &[&str], ready: impl Fn() -> bool) -> (Daemon, f64) {
    let spawned = Instant::now();
    let d = Daemon::start(ns, path, extra, &[]);
    let came = wait_for(Duration::from_secs(120), ready);
    assert!(came.is_some(), "the daemon did not come up:\n{}", d.logged());
    let took = round2(spawned.elapsed().as_secs_f64());
    std::thread::sleep(Duration::from_secs(2));
    (d, took)
}

/// Per-connection milliseconds and connections per second of each path, alternating.
fn connections(ns: &str, port: u16) -> Value {
    let local: SocketAddr = SocketAddr::from(([127, 0, 0, 1], port));
    let primary: SocketAddr = SocketAddr::from(([192, 168, 1, 1], port));
    let (mut l, mut p) = (Vec::new(), Vec::new());
    in_netns(ns, || {
        for _ in 0..ROUNDS {
            for (addr, out) in [(local, &mut l), (primary, &mut p)] {
                out.extend((0..PER_ROUND).map(|_| exchange(addr)));
            }
        }
    });
    let per_s = |v: &[f64]| round2(v.len() as f64 / (v.iter().sum::<f64>() / 1e3));
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        round2(v[v.len() / 2] * 1e3) / 1e3
    };
    json!({"localhost": {"per_s": per_s(&l), "ms": median(&mut l)}, "primary": {"per_s": per_s(&p), "ms": median(&mut p)}})
}

/// One run with `services` Services; figures as JSON.
pub fn run(services: u32) -> Value {
    let ns = Netns::node_like("lnbench");
    let dir = Scratch::new("lnbench");
    let server = in_netns(&ns.gateway().name, || TcpListener::bind("0.0.0.0:8080").expect("bind 8080"));
    let _server = spawn_in_netns(&ns.gateway().name, move || serve(server));
    let path = write(&dir.0, services);
    let last = FIRST_PORT + u16::try_from(services - 1).expect("ports");
    let answers = |addr: SocketAddr| {
        let node = ns.name.clone();
        move || in_netns(&node, || TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok())
    };
    let (base, _) = start(&ns, &path, &[], answers(SocketAddr::from(([192, 168, 1, 1], last))));
    let baseline = json!({"rss_mb": rss_mb(base.pid()), "threads": threads(base.pid())});
    base.stop();
    let flags = ["--nodeport-addresses=primary,localhost", "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true"];
    let (d, ready_s) = start(&ns, &path, &flags, answers(SocketAddr::from(([127, 0, 0, 1], last))));
    let listening = json!({"rss_mb": rss_mb(d.pid()), "threads": threads(d.pid()), "ready_s": ready_s});
    let conns = connections(&ns.name, FIRST_PORT);
    let mbps = in_netns(&ns.name, || {
        let local = bulk(SocketAddr::from(([127, 0, 0, 1], FIRST_PORT + 1)));
        let primary = bulk(SocketAddr::from(([192, 168, 1, 1], FIRST_PORT + 1)));
        json!({"localhost": local, "primary": primary})
    });
    d.stop();
    json!({"services": services, "baseline": baseline, "localhost": listening, "connections": conns, "bulk_mb_s": mbps,
           "endpoint": ENDPOINT})
}

/// Prints the combined runs as a table.
pub fn print(r: &Value) {
    let row = |name: &str, path: &[&str]| median_row(r, name, path);
    let services = r["median"]["services"].as_f64().unwrap_or_default();
    println!("\nlocalhost NodePorts: {services:.0} NodePort services, {} runs, median (lowest–highest)\n", r["runs"]);
    println!("| measure | value |\n|---|---|");
    row("RSS, primary alone, MB", &["baseline", "rss_mb"]);
    row("RSS with localhost NodePorts, MB", &["localhost", "rss_mb"]);
    row("threads, primary alone", &["baseline", "threads"]);
    row("threads with localhost NodePorts", &["localhost", "threads"]);
    row("start until the last localhost port answers, s", &["localhost", "ready_s"]);
    row("connections per second, 127.0.0.1", &["connections", "localhost", "per_s"]);
    row("connections per second, primary address", &["connections", "primary", "per_s"]);
    row("one connection (connect, 1 byte each way), 127.0.0.1, ms", &["connections", "localhost", "ms"]);
    row("one connection, primary address, ms", &["connections", "primary", "ms"]);
    row("one long connection, 127.0.0.1, MB/s", &["bulk_mb_s", "localhost"]);
    row("one long connection, primary address, MB/s", &["bulk_mb_s", "primary"]);
}
