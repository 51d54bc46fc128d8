//! `kube-nftproxy trace` against a hostile round (a tester's findings, each fixed): a full
//! sync that makes the rules anew under a running tracer, an address that serves no node
//! ports, a packet no route takes, the reasons of the outcome that happened, and an API
//! server that never answers.

use crate::common::check::LONG;
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::kernel_available;
use crate::common::net::{Proto, in_netns, probe};
use serde_json::{Value, json};
use std::process::{Child, Command};
use std::time::Duration;
use std::time::Instant;

/// The services every hostile test loads: `web` dual-stack ClusterIP + NodePort 30080
/// (TCP 80 and UDP 53) on pod-1 and rpod-1, `empty` with no endpoints, `other` a second UDP
/// service.
fn objects(c: &Cluster) -> Vec<Value> {
    let spec = json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
        "clusterIPs": ["172.30.0.40", "fd00:172:30::40"],
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": 30080},
                  {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": ECHO_PORT, "nodePort": 30053}]});
    let eps =
        |v6: bool| ["pod-1", "rpod-1"].iter().map(|p| endpoint(c.pod_named(p), v6, json!({}))).collect::<Vec<_>>();
    let mut out = vec![service("web", spec, json!({}))];
    for v6 in [false, true] {
        let mut tcp = slice("web", v6, "TCP", eps(v6));
        tcp["metadata"]["name"] = json!(format!("web-tcp-{v6}"));
        let mut udp = slice("web", v6, "UDP", eps(v6));
        udp["metadata"]["name"] = json!(format!("web-udp-{v6}"));
        udp["ports"][0]["name"] = json!("dns");
        out.push(tcp);
        out.push(udp);
    }
    let empty = json!({"clusterIP": "172.30.0.41", "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
    out.push(service("empty", empty, json!({})));
    let other = json!({"clusterIP": "172.30.0.42", "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": ECHO_PORT}]});
    out.push(service("other", other, json!({})));
    let mut oudp = slice("other", false, "UDP", eps(false));
    oudp["metadata"]["name"] = json!("other-udp");
    oudp["ports"][0]["name"] = json!("dns");
    out.push(oudp);
    out
}

/// `kube-nftproxy trace ARGS` in the node's namespace over the objects last applied, once it
/// said `tracing`.
fn tracer(c: &Cluster, args: &[&str]) -> Child {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &c.node.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "trace"])
        .args(["--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/32", "--manifests"])
        .arg(c.applied());
    started(cmd.args(args))
}

fn started(cmd: &mut Command) -> Child {
    crate::common::traced::started(cmd.env("RUST_LOG", "info"))
}

/// Its JSON lines, once it ended (killed after `within`).
fn lines(child: Child, within: Duration) -> Vec<Value> {
    let pid = child.id();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        while t0.elapsed() < within {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let out = child.wait_with_output().expect("wait");
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

/// A TCP connection from the client; its client port.
fn connect(c: &Cluster, to: &str) -> Option<u16> {
    let to: std::net::SocketAddr = to.parse().unwrap();
    in_netns(&c.client.name, || {
        probe(Proto::Tcp, to, None, LONG);
        crate::common::net::last_client_port()
    })
}

fn of_port(traced: &[Value], port: Option<u16>) -> Value {
    let p = port.expect("a client port");
    traced
        .iter()
        .find(|c| c["source"].as_str().is_some_and(|s| s.ends_with(&format!(":{p}"))))
        .unwrap_or_else(|| panic!("no connection from port {p}: {traced:#?}"))
        .clone()
}

fn rules(c: &Value) -> Vec<(String, String, String)> {
    let hops = c["chains"].as_array().cloned().unwrap_or_default();
    hops.iter()
        .map(|h| {
            let s = |k: &str| h[k].as_str().unwrap_or_default().to_string();
            (s("chain"), s("rule"), s("verdict"))
        })
        .collect()
}

/// A full sync replaces the proxy's tables (`delete table`, then the table anew): the kernel
/// numbers the new table's rules from 1 again, so a handle the running tracer already read
/// names another rule now. A connection after the sync is named by the rules it passed, as
/// a fresh tracer over the same kernel names them.
#[test]
fn a_tracer_running_across_a_full_sync_names_the_rules_the_packet_passed() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 1);
    c.apply(objects(&c), &[]);
    let running = tracer(&c, &["--output=json", "--timeout=15s", "--from=172.16.0.2", "--protocol=tcp"]);
    let first = connect(&c, "172.30.0.40:80");
    // Three more services before the others: what a daemon restart or a repair after
    // tampering does, with the cluster having moved on.
    let mut more = Vec::new();
    for i in 0..3u8 {
        let name = format!("aaa{i}");
        let spec = json!({"clusterIP": format!("172.30.0.{}", 50 + i), "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT}]});
        more.push(service(&name, spec, json!({})));
        more.push(slice(&name, false, "TCP", vec![endpoint(c.pod_named("pod-2"), false, json!({}))]));
    }
    more.extend(objects(&c));
    c.apply(more, &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let second = connect(&c, "172.30.0.40:80");
    std::thread::sleep(Duration::from_millis(500));
    // The `lb-*` chain takes a random endpoint with a rule per slot: the fresh tracer's truth
    // is a connection that reached the same endpoint as the second did.
    let fresh = tracer(&c, &["--output=json", "--count=20", "--timeout=15s", "--from=172.16.0.2", "--protocol=tcp"]);
    let thirds: Vec<Option<u16>> = (0..20).map(|_| connect(&c, "172.30.0.40:80")).collect();
    let fresh = lines(fresh, Duration::from_secs(20));
    let traced = lines(running, Duration::from_secs(20));
    let _ = of_port(&traced, first);
    let after = of_port(&traced, second);
    let truth = (thirds.into_iter().map(|p| of_port(&fresh, p)))
        .find(|t| t["endpoint"] == after["endpoint"])
        .expect("none of twenty connections reached the second's endpoint");
    assert_eq!(
        rules(&after),
        rules(&truth),
        "the running tracer names other rules than the kernel's for the same connection after a full sync:\n\
         running tracer: {after:#}\nfresh tracer: {truth:#}"
    );
}

/// The node's second address (172.16.0.1) is not a node-port address (only the primary IP
/// is, by default): a connection to 172.16.0.1:30080 is left alone by the proxy, and the
/// trace names no service for it.
#[test]
fn a_node_port_on_an_address_that_serves_none_names_no_service() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    c.apply(objects(&c), &[]);
    let t = tracer(&c, &["--output=json", "--count=1", "--timeout=8s", "--to=172.16.0.1:30080"]);
    let port = connect(&c, "172.16.0.1:30080");
    let traced = of_port(&lines(t, Duration::from_secs(10)), port);
    assert_eq!(traced["verdict"], "accept", "{traced:#}");
    assert_eq!(traced["service"], Value::Null, "no Service took it, yet the trace names one: {traced:#}");
}

/// A packet the node cannot route (an `unreachable` route: the kernel drops it and answers
/// ICMP) or sends to a blackhole is dropped past the rules: the trace says `drop`, not
/// `accept`, and that its trace is not whole.
#[test]
fn a_packet_dropped_for_want_of_a_route_is_not_reported_accepted() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    c.apply(objects(&c), &[]);
    c.node.run(&["ip", "route", "add", "blackhole", "198.51.100.0/24"], "");
    let t = tracer(&c, &["--output=json", "--count=1", "--timeout=8s", "--to=198.51.100.5", "--protocol=udp"]);
    in_netns(&c.client.name, || {
        let u = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
        u.send_to(b"x", "198.51.100.5:53").expect("send");
    });
    let traced = lines(t, Duration::from_secs(10));
    let c0 = traced.first().expect("the datagram traced");
    assert_eq!(c0["verdict"], "drop", "the kernel dropped it (blackhole route), the trace says: {c0:#}");
    assert_eq!(c0["whole"], false, "{c0:#}");
    assert!(c0["why"][0].as_str().is_some_and(|w| w.contains("dropped past the rules")), "{c0:#}");
}

/// A pod-to-itself (hairpin) service has two outcomes: itself (masqueraded) or another
/// endpoint (not masqueraded). When the kernel sent it to the other endpoint unmasqueraded,
/// `why` does not say it was masqueraded.
#[test]
fn why_is_the_reason_of_what_happened_not_of_every_outcome() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    c.apply(objects(&c), &[]);
    let pod = c.pod_named("pod-1");
    for _ in 0..20 {
        let t = tracer(&c, &["--output=json", "--count=1", "--timeout=8s", "--from=10.1.1.2", "--protocol=tcp"]);
        in_netns(&pod.ns.name, || probe(Proto::Tcp, "172.30.0.40:80".parse().unwrap(), None, LONG));
        let traced = lines(t, Duration::from_secs(10));
        let c0 = traced.first().expect("traced").clone();
        if c0["masquerade"] == false {
            let why = c0["why"].to_string();
            assert!(!why.contains("masqueraded"), "not masqueraded, but why says it was: {c0:#}");
            return;
        }
    }
    panic!("never sent elsewhere than itself in 20 tries");
}

/// An API server that accepts and never answers: the tracer reports the connection it saw
/// within seconds all the same, `explain` not asked, rather than when listing the objects
/// times out (a minute and more).
#[test]
fn a_stalled_api_server_does_not_hold_back_the_reports() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    c.apply(objects(&c), &[]);
    let listener = in_netns(&c.node.name, || std::net::TcpListener::bind("127.0.0.1:6443").expect("bind"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    listener.set_nonblocking(true).unwrap();
    let held = std::thread::spawn(move || {
        let mut held = Vec::new();
        while !s2.load(std::sync::atomic::Ordering::SeqCst) {
            if let Ok((s, _)) = listener.accept() {
                held.push(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &c.node.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "trace"])
        .args(["--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8,fd00:10::/32"])
        .args(["--master=http://127.0.0.1:6443", "--output=json", "--timeout=8s", "--to=172.30.0.40:80"]);
    let t = started(&mut cmd);
    let port = connect(&c, "172.30.0.40:80");
    let traced = lines(t, Duration::from_secs(12));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = held.join();
    let c0 = of_port(&traced, port);
    assert_eq!(c0["verdict"], "dnat", "{c0:#}");
    assert!(c0["explain"].as_str().is_some_and(|e| e.starts_with("not asked")), "{c0:#}");
}
