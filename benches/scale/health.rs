//! What health-check node ports cost: the daemon in a node-like namespace with N
//! `externalTrafficPolicy: Local` LoadBalancer Services, each with its own port, against the
//! same Services with the Cluster policy (no ports) in the same run: memory, threads, how
//! long until every port answers, what a check costs as a load balancer's checker sends it
//! from the gateway, and how soon a change of local endpoints shows in the answers.

use crate::common::daemon::{Daemon, wait_for, write_list};
use crate::common::net::in_netns;
use crate::common::{Netns, Scratch};
use crate::observe::{LogTail, is_sync, median_row, ms_between, percentile, round2, rss_mb, threads};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The node's primary address (the node-like namespace's), where the ports listen.
const NODE_IP: &str = "192.168.1.1";

/// The first health-check port; Service `i` has `FIRST_PORT + i`.
const FIRST_PORT: u16 = 20000;

/// Local-policy Services (each with its own port) in a full run.
pub const SERVICES: u32 = 1000;

/// Checks timed per run.
const CHECKS: usize = 1000;

/// Services whose local endpoint goes not-ready in the update.
const UPDATED: u32 = 100;

/// Idle connections a hostile peer holds on one port while the others are checked (more
/// than systemd's default soft limit of descriptors).
const CROWD: usize = 1300;

/// Service `i`: Local policy with a health-check port when `local`, five endpoints of which
/// the first is on this node and ready unless `drained`.
fn objects(i: u32, local: bool, drained: bool) -> [Value; 2] {
    let (a, b) = (i / 250, i % 250 + 1);
    let mut spec = json!({"type": "LoadBalancer", "clusterIP": format!("172.30.{a}.{b}"),
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30000 + i % 2000}]});
    if local {
        spec["externalTrafficPolicy"] = json!("Local");
        spec["healthCheckNodePort"] = json!(u32::from(FIRST_PORT) + i);
    }
    let endpoints: Vec<Value> = (0..5)
        .map(|e| {
            let node = if e == 0 { "node-a" } else { "node-b" };
            let ready = !(e == 0 && drained);
            json!({"addresses": [format!("10.{}.{a}.{b}", 1 + e)], "nodeName": node, "conditions": {"ready": ready}})
        })
        .collect();
    let name = format!("svc-{i}");
    [
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "bench"},
            "spec": spec, "status": {"loadBalancer": {"ingress": [{"ip": format!("203.0.{a}.{b}")}]}}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": format!("{name}-a"), "namespace": "bench",
                         "labels": {"kubernetes.io/service-name": name}},
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": endpoints}),
    ]
}

/// Writes the manifests of `services` Services into `dir` (see [`objects`]); their path.
fn write(dir: &Path, services: u32, local: bool, drained: u32) -> PathBuf {
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "InternalIP", "address": "fd00:1::1"}]}});
    let mut items = vec![node];
    items.extend((0..services).flat_map(|i| objects(i, local, i < drained)));
    write_list(dir, &json!({"kind": "List", "items": items}))
}

/// One check as a load balancer sends it: the status code and how long it took (ms).
fn check(port: u16) -> Option<(u16, f64)> {
    let start = Instant::now();
    let addr = SocketAddr::new(NODE_IP.parse().ok()?, port);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, start.elapsed().as_secs_f64() * 1e3))
}

/// Starts the daemon over `services` Services and waits for its first sync (and, with
/// ports, for the last port to answer); returns it with the seconds that took.
fn start(ns: &Netns, dir: &Path, services: u32, local: bool) -> (Daemon, f64) {
    let path = write(dir, services, local, 0);
    let spawned = Instant::now();
    let d = Daemon::start(ns, &path, &["--healthz-bind-address=", "--metrics-bind-address="], &[]);
    let last = FIRST_PORT + u16::try_from(services - 1).expect("ports");
    let gw = ns.gateway().name.clone();
    let ready = if local {
        wait_for(Duration::from_secs(120), || in_netns(&gw, || check(last)).is_some_and(|r| r.0 == 200))
    } else {
        wait_for(Duration::from_secs(120), || d.logged().contains(" sync"))
    };
    assert!(ready.is_some(), "the daemon did not come up:\n{}", d.logged());
    // Let the process settle (thread pools, allocator) before it is measured.
    std::thread::sleep(Duration::from_secs(2));
    (d, round2(spawned.elapsed().as_secs_f64() - 2.0))
}

/// One run with `services` Services; figures as JSON.
pub fn run(services: u32) -> Value {
    let ns = Netns::node_like("hcbench");
    let dir = Scratch::new("hcbench");
    let (base, _) = start(&ns, &dir.0, services, false);
    let baseline = json!({"rss_mb": rss_mb(base.pid()), "threads": threads(base.pid())});
    base.stop();
    let (d, ready_s) = start(&ns, &dir.0, services, true);
    let with_ports = json!({"rss_mb": rss_mb(d.pid()), "threads": threads(d.pid()), "ready_s": ready_s});
    let gw = ns.gateway().name.clone();
    let mut took: Vec<f64> = in_netns(&gw, || {
        (0..CHECKS)
            .map(|k| FIRST_PORT + u16::try_from((k * 7919) % services as usize).unwrap_or(0))
            .map(|port| check(port).map_or(f64::NAN, |(_, ms)| ms))
            .collect()
    });
    let failed = took.iter().filter(|t| t.is_nan()).count();
    took.retain(|t| !t.is_nan());
    let (mut crowded, crowd) = in_netns(&gw, || under_a_crowd(services));
    let crowded_failed = crowded.iter().filter(|t| t.is_nan()).count();
    crowded.retain(|t| !t.is_nan());
    // The first UPDATED Services' local endpoints go not-ready: how soon do their checks say so?
    // Timed from the log line of the sync that applied it (the manifests are polled each
    // second, which is no part of what is measured).
    let tail = LogTail::start(&d.log);
    std::thread::sleep(Duration::from_millis(100));
    let from = tail.lines().len();
    let updated = UPDATED.min(services);
    write(&dir.0, services, true, updated);
    let last_drained = FIRST_PORT + u16::try_from(updated - 1).expect("ports");
    let drained =
        wait_for(Duration::from_secs(30), || in_netns(&gw, || check(last_drained)).is_some_and(|r| r.0 == 503));
    let seen = Instant::now();
    let synced = tail.wait(from, Duration::from_secs(1), is_sync);
    let update_ms = drained.and(synced).map(|(at, _)| ms_between(at, seen));
    d.stop();
    json!({
        "services": services,
        "baseline": baseline,
        "ports": with_ports,
        "check_ms": {"p50": percentile(&mut took, 50.0), "p99": percentile(&mut took, 99.0)},
        "failed_checks": failed,
        "crowd": {"connected": crowd, "p50": percentile(&mut crowded, 50.0), "p99": percentile(&mut crowded, 99.0),
                  "failed": crowded_failed},
        "update_ms": update_ms,
    })
}

/// The other ports' checks (timed as at rest) while [`CROWD`] idle connections are held on
/// the first port, and how many of those the kernel let connect; the checks come first, so
/// what the crowd costs the loop is timed, not the daemon's catching up after it.
fn under_a_crowd(services: u32) -> (Vec<f64>, usize) {
    let addr = SocketAddr::new(NODE_IP.parse().expect("address"), FIRST_PORT);
    let crowd: Vec<TcpStream> =
        (0..CROWD).filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()).collect();
    let others = services.saturating_sub(1).max(1) as usize;
    let took = (0..CHECKS)
        .map(|k| FIRST_PORT + 1 + u16::try_from((k * 7919) % others).unwrap_or(0))
        .map(|port| check(port).map_or(f64::NAN, |(_, ms)| ms))
        .collect();
    (took, crowd.len())
}

/// Prints the combined runs as a table.
pub fn print(r: &Value) {
    let row = |name: &str, path: &[&str]| median_row(r, name, path);
    let services = r["median"]["services"].as_f64().unwrap_or_default();
    println!("\nhealth-check node ports: {services:.0} Local services, {} runs, median (lowest–highest)\n", r["runs"]);
    println!("| measure | value |\n|---|---|");
    row("RSS, Cluster policy (no ports), MB", &["baseline", "rss_mb"]);
    row("RSS with a port per service, MB", &["ports", "rss_mb"]);
    row("threads, Cluster policy", &["baseline", "threads"]);
    row("threads with ports", &["ports", "threads"]);
    row("start until the last port answers, s", &["ports", "ready_s"]);
    row("check p50, ms", &["check_ms", "p50"]);
    row("check p99, ms", &["check_ms", "p99"]);
    row("failed checks", &["failed_checks"]);
    row("idle connections held on one port (of 1,300 tried)", &["crowd", "connected"]);
    row("check of another port meanwhile p50, ms", &["crowd", "p50"]);
    row("check of another port meanwhile p99, ms", &["crowd", "p99"]);
    row("failed checks meanwhile", &["crowd", "failed"]);
    row("sync to answers changed (100 services), ms", &["update_ms"]);
}
