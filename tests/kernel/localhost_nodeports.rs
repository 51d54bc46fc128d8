//! Localhost NodePorts (`--nodeport-addresses=primary,localhost` with the
//! KubeProxyNFTablesLocalhostNodePorts gate): real TCP from the node to `127.0.0.1` and `::1`
//! reaches the Service's endpoints; nothing of it is reachable from another host, even with a
//! packet forged to `127.0.0.1` (CVE-2020-8558's attack); a port another process holds is
//! counted, logged and taken once free; without the gate nothing listens.

use crate::common::Netns;
use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::daemon::{Daemon, wait_for, write_manifests};
use crate::common::kernel_available;
use crate::common::net::{Probe, Proto, http_get, in_netns, probe};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

const GATE: &str = "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true";
const LOCALHOST: &str = "--nodeport-addresses=primary,localhost";
const SHORT: Duration = Duration::from_millis(800);

/// A dual-stack NodePort Service `name` on `node_port` with endpoints on `pods`, and `extra`
/// merged into its spec.
fn nodeport(c: &Cluster, name: &str, ips: [&str; 2], node_port: u16, pods: &[&str], extra: Value) -> Vec<Value> {
    let mut spec = json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack", "clusterIPs": ips,
        "ports": [{"name": "http", "port": 80, "targetPort": ECHO_PORT, "nodePort": node_port}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let eps = |v6: bool| pods.iter().map(|p| endpoint(c.pod_named(p), v6, json!({}))).collect();
    vec![service(name, spec, json!({})), slice(name, false, "TCP", eps(false)), slice(name, true, "TCP", eps(true))]
}

/// The usual pair: `web` (30071, endpoints here and on node-b) and `local`
/// (`externalTrafficPolicy: Local`, 30072, its one endpoint on node-b).
fn objects(c: &Cluster) -> Vec<Value> {
    let mut o = nodeport(c, "web", ["172.30.0.71", "fd00:172:30::71"], 30071, &["pod-1", "rpod-1"], json!({}));
    let local = json!({"externalTrafficPolicy": "Local"});
    o.extend(nodeport(c, "local", ["172.30.0.72", "fd00:172:30::72"], 30072, &["rpod-1"], local));
    o
}

/// One TCP exchange from `ns` to `dst`, as a process on that host makes it.
fn tcp(ns: &Netns, dst: &str, timeout: Duration) -> Probe {
    let dst: SocketAddr = dst.parse().unwrap();
    in_netns(&ns.name, move || probe(Proto::Tcp, dst, None, timeout))
}

/// Waits up to 10 s for `dst` to answer from `ns`.
fn answers(ns: &Netns, dst: &str) -> bool {
    wait_for(Duration::from_secs(10), || matches!(tcp(ns, dst, SHORT), Probe::Reply(_))).is_some()
}

/// The node's metric samples named `name`, by their labels.
fn metric(c: &Cluster, name: &str) -> BTreeMap<String, f64> {
    let (_, _, text) = http_get(&c.node.name, "127.0.0.1:10249", "/metrics").expect("metrics");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("metrics parse");
    let value = |v: prometheus_parse::Value| match v {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
        _ => f64::NAN,
    };
    let label = |s: &prometheus_parse::Sample| s.labels.get("ip_family").unwrap_or_default().to_string();
    scrape.samples.into_iter().filter(|s| s.metric == name).map(|s| (label(&s), value(s.value))).collect()
}

/// `route_localnet` of every interface of the node: never turned on.
fn route_localnet_off(c: &Cluster) {
    let out = c.node.run(&["sh", "-c", "cat /proc/sys/net/ipv4/conf/*/route_localnet"], "");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().all(|l| l.trim() == "0"), "route_localnet turned on: {text}");
}

#[test]
fn localhost_nodeports_reach_the_endpoints_over_both_families() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    let path = write_manifests(&c, objects(&c));
    let d = Daemon::start(&c.node, &path, &[LOCALHOST, GATE], &[]);
    for dst in ["127.0.0.1:30071", "[::1]:30071"] {
        assert!(answers(&c.node, dst), "{dst} never answered: {}", d.logged());
        // Either endpoint, picked per connection, as the kernel picks for the node's address.
        let mut seen = BTreeMap::new();
        for _ in 0..24 {
            *seen.entry(tcp(&c.node, dst, Duration::from_secs(3)).who()).or_insert(0) += 1;
        }
        assert_eq!(seen.keys().collect::<Vec<_>>(), ["pod-1", "rpod-1"], "{dst}: {seen:?}");
    }
    // The primary address serves it as before.
    assert!(answers(&c.client, "192.168.1.1:30071"), "the primary address lost its NodePort");
    // externalTrafficPolicy: Local without an endpoint here: no listener, refused (upstream).
    for dst in ["127.0.0.1:30072", "[::1]:30072"] {
        assert_eq!(tcp(&c.node, dst, SHORT), Probe::Refused, "{dst} without a local endpoint");
    }
    let listeners = metric(&c, "kubeproxy_nftables_localhost_nodeport_listeners");
    assert_eq!(listeners, BTreeMap::from([("IPv4".into(), 1.0), ("IPv6".into(), 1.0)]), "the gauge");
    route_localnet_off(&c);

    // The endpoint goes: its listeners close; the Service returns: they open again.
    let mut gone = objects(&c);
    gone[1]["endpoints"] = json!([]);
    gone[2]["endpoints"] = json!([]);
    write_manifests(&c, gone);
    let closed = || tcp(&c.node, "127.0.0.1:30071", SHORT) == Probe::Refused;
    assert!(wait_for(Duration::from_secs(10), closed).is_some(), "a listener without endpoints stayed open");
    let zero = BTreeMap::from([("IPv4".into(), 0.0), ("IPv6".into(), 0.0)]);
    assert_eq!(metric(&c, "kubeproxy_nftables_localhost_nodeport_listeners"), zero, "the gauge after");
    write_manifests(&c, objects(&c));
    assert!(answers(&c.node, "[::1]:30071"), "reopened");
    d.stop();
}

#[test]
fn without_the_gate_localhost_is_not_served_and_the_log_names_the_gate() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    let path = write_manifests(&c, objects(&c));
    let d = Daemon::start(&c.node, &path, &[LOCALHOST], &[]);
    assert!(answers(&c.client, "192.168.1.1:30071"), "the primary address serves NodePorts");
    for dst in ["127.0.0.1:30071", "[::1]:30071"] {
        assert_eq!(tcp(&c.node, dst, SHORT), Probe::Refused, "{dst} served without the gate");
    }
    let log = d.stop();
    assert!(log.contains("--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true"), "{log}");
}

/// Forges what a neighbour of the node can send (CVE-2020-8558): packets from the client for
/// the node's primary addresses on `port` arrive at the node for `127.0.0.1` and `::1`; the
/// answers are turned back at the client, so a connection completes if the node takes them.
fn forge_loopback(c: &Cluster, port: u16) {
    let at_node = format!(
        "table netdev forge {{\n chain in {{\n type filter hook ingress device \"to-client\" priority 0\n\
         ip daddr 192.168.1.1 tcp dport {port} ip daddr set 127.0.0.1\n\
         ip6 daddr fd00:192:168:1::1 tcp dport {port} ip6 daddr set ::1\n }}\n}}\n"
    );
    let at_client = format!(
        "table netdev forge {{\n chain in {{\n type filter hook ingress device \"eth0\" priority 0\n\
         ip saddr 127.0.0.1 tcp sport {port} ip saddr set 192.168.1.1\n }}\n}}\n"
    );
    for (ns, script) in [(&c.node, at_node), (&c.client, at_client)] {
        let out = ns.run(&["nft", "-f", "-"], &script);
        assert!(out.status.success(), "{}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn another_host_cannot_reach_localhost_nodeports() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    let path = write_manifests(&c, objects(&c));
    let d = Daemon::start(&c.node, &path, &[LOCALHOST, GATE], &[]);
    assert!(answers(&c.node, "127.0.0.1:30071"), "never served: {}", d.logged());
    // Not on a wildcard: the node's other addresses do not answer on the port.
    for dst in ["172.16.0.1:30071", "[fd00:172:16::1]:30071"] {
        assert_eq!(tcp(&c.client, dst, SHORT), Probe::Refused, "{dst} is no NodePort address");
    }
    forge_loopback(&c, 30071);
    for dst in ["192.168.1.1:30071", "[fd00:192:168:1::1]:30071"] {
        let p = tcp(&c.client, dst, SHORT);
        assert!(matches!(p, Probe::Timeout | Probe::Refused), "a forged {dst} reached localhost: {}", p.who());
    }
    route_localnet_off(&c);
    // What the forgery would do on a node with route_localnet on (upstream's iptables mode
    // turned it on): the same packets reach the localhost listener. This proves the forgery.
    let set = |v: &str| c.node.run(&["sysctl", "-qw", &format!("net.ipv4.conf.to-client.route_localnet={v}")], "");
    assert!(set("1").status.success());
    let p = tcp(&c.client, "192.168.1.1:30071", Duration::from_secs(3));
    assert!(set("0").status.success());
    let reached = matches!(&p, Probe::Reply(r) if ["pod-1", "rpod-1"].contains(&r.name.as_str()));
    assert!(reached, "the forged packet did not reach localhost even with route_localnet on: {}", p.who());
    d.stop();
}

#[test]
fn a_port_another_process_holds_is_counted_logged_and_taken_once_free() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 1);
    let squatter = in_netns(&c.node.name, || std::net::TcpListener::bind("127.0.0.1:30071").expect("bind"));
    let path = write_manifests(&c, objects(&c));
    let d = Daemon::start(&c.node, &path, &[LOCALHOST, GATE], &[]);
    // The other family's listener and the other NodePorts are served regardless.
    assert!(answers(&c.node, "[::1]:30071"), "IPv6 held up by IPv4's port: {}", d.logged());
    assert!(d.logs_within("localhost NodePort 127.0.0.1:30071 of test/web:http cannot listen", Duration::from_secs(5)));
    let failures = || metric(&c, "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total");
    assert!(failures().get("IPv4").is_some_and(|n| *n >= 1.0), "{:?}", failures());
    assert_eq!(failures().get("IPv6"), Some(&0.0));
    drop(squatter);
    assert!(answers(&c.node, "127.0.0.1:30071"), "the port was not taken once free: {}", d.logged());
    let log = d.stop();
    assert_eq!(log.matches("cannot listen").count(), 1, "logged once while it lasted: {log}");
}

/// Lifts this process's open-files limit to its hard limit (the test holds a thousand
/// connections).
fn more_files() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid, owned rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

#[test]
fn a_local_client_opening_connections_without_end_is_held_at_the_cap() {
    if !kernel_available() {
        return;
    }
    more_files();
    let c = Cluster::new(1, 1);
    // An endpoint that takes every connection and never answers: each one stays carried.
    let pod = c.pod_named("pod-1").ns.name.clone();
    let hold = in_netns(&pod, || std::net::TcpListener::bind("0.0.0.0:9000").expect("bind"));
    let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = kept.clone();
    std::thread::spawn(move || hold.incoming().flatten().for_each(|s| keep.lock().unwrap().push(s)));
    let mut objects = objects(&c);
    let mut held = nodeport(&c, "held", ["172.30.0.73", "fd00:172:30::73"], 30073, &["pod-1"], json!({}));
    held[0]["spec"]["ports"][0]["targetPort"] = json!(9000);
    held[1]["ports"] = json!([{"name": "http", "port": 9000, "protocol": "TCP"}]);
    held[2]["ports"] = held[1]["ports"].clone();
    objects.extend(held);
    let path = write_manifests(&c, objects);
    let d = Daemon::start(&c.node, &path, &[LOCALHOST, GATE], &[]);
    assert!(answers(&c.node, "127.0.0.1:30071"), "never served: {}", d.logged());
    let cap = kube_nftproxy::localhost::conn::MAX_CONNECTIONS;
    let crowd: Vec<std::net::TcpStream> = in_netns(&c.node.name, || {
        (0..cap + 20).map(|_| std::net::TcpStream::connect("127.0.0.1:30073").expect("connect")).collect()
    });
    std::thread::sleep(Duration::from_secs(2));
    let closed = crowd
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).expect("nonblocking");
            let open = matches!((&**s).read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
            !open
        })
        .count();
    assert_eq!(closed, 20, "past the cap, closed at once; below it, carried");
    assert!(d.logs_within(&format!("{cap} connections at once, the most carried"), Duration::from_secs(2)));
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let threads: usize = status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap();
    assert!(threads <= 2 * cap + 30, "{threads} threads for {cap} connections");
    // The clients go, then the endpoint closes its side (a connection is carried until both
    // sides have ended, as through the kernel's NAT): the slots are free again.
    drop(crowd);
    kept.lock().unwrap().clear();
    assert!(answers(&c.node, "[::1]:30071"), "served again once the crowd left: {}", d.logged());
    d.stop();
}
