//! Conntrack through a real kernel: a sweep deletes exactly the entries it picks, in its own
//! network namespace only; the daemon's cleanup sends a UDP client that keeps its source port
//! to the new endpoint with its very next datagram after an endpoint is replaced, a service
//! is scaled to zero and back, or deleted and created again, while a TCP connection to the
//! same service lives on; and the daemon sets the conntrack sysctls of its namespace.

use crate::common::cluster::{Cluster, ECHO_PORT, endpoint, service, slice};
use crate::common::daemon::{Daemon, wait_for, write_manifests};
use crate::common::net::in_netns;
use crate::common::{Netns, Scratch, kernel_available};
use kube_nftproxy::conntrack::{self, Frontend, Plan};
use kube_nftproxy::model::Family;
use kube_nftproxy::netlink::conntrack::{IPPROTO_TCP, IPPROTO_UDP, NewFlow, create};
use kube_nftproxy::netlink::{NfFamily, Socket};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A flow from a client port to `orig_dst`, answered from `reply_src`.
fn flow(proto: u8, client_port: u16, orig_dst: &str, reply_src: &str) -> NewFlow {
    let client =
        SocketAddr::new(if orig_dst.starts_with('[') { "fd00::2" } else { "10.9.0.2" }.parse().unwrap(), client_port);
    NewFlow {
        proto,
        orig_src: client,
        orig_dst: addr(orig_dst),
        reply_src: addr(reply_src),
        reply_dst: client,
        timeout: 600,
    }
}

/// Every entry of `ns` as (protocol, original destination, reply source), sorted.
fn entries(ns: &Netns) -> Vec<(u8, SocketAddr, SocketAddr)> {
    in_netns(&ns.name, || {
        let mut sock = Socket::open().expect("netlink socket");
        let mut all = Vec::new();
        for family in [NfFamily::Ip, NfFamily::Ip6] {
            sock.dump_conntrack(family, |e| {
                all.push((e.proto, e.orig_dst, e.reply_src));
                Ok(())
            })
            .expect("dump");
        }
        all.sort();
        all
    })
}

#[test]
fn a_sweep_deletes_exactly_the_entries_it_picks_in_its_own_namespace() {
    if !kernel_available() {
        return;
    }
    let (ns, other) = (Netns::new("ctsweep"), Netns::new("ctother"));
    let flows = vec![
        flow(IPPROTO_UDP, 40001, "172.30.0.10:53", "10.1.1.2:8080"),
        flow(IPPROTO_UDP, 40002, "172.30.0.10:53", "10.1.2.2:8080"),
        flow(IPPROTO_UDP, 40003, "172.30.0.10:53", "10.1.2.2:8080"),
        flow(IPPROTO_TCP, 40004, "172.30.0.10:53", "10.1.2.2:8080"),
        flow(IPPROTO_UDP, 40005, "192.168.1.1:30053", "10.1.2.2:8080"),
        flow(IPPROTO_UDP, 40006, "192.168.1.1:30053", "10.1.1.2:8080"),
        flow(IPPROTO_UDP, 40007, "172.30.0.11:53", "10.1.2.2:8080"),
        flow(IPPROTO_UDP, 40008, "[fd00:30::10]:53", "[fd00:10:1:2::2]:8080"),
        flow(IPPROTO_UDP, 40009, "[fd00:30::11]:53", "[fd00:10:1:2::2]:8080"),
    ];
    for n in [&ns, &other] {
        assert_eq!(in_netns(&n.name, || create(flows.clone())).expect("create flows"), 9);
    }
    let before = entries(&ns);
    assert_eq!(before.len(), 9, "{before:?}");
    let serving = BTreeSet::from([addr("10.1.1.2:8080")]);
    let mut plan = Plan::default();
    plan.frontends.insert(Frontend::Address(addr("172.30.0.10:53")), serving.clone());
    plan.frontends.insert(Frontend::NodePort(Family::V4, 30053), serving);
    plan.frontends.insert(Frontend::Address(addr("[fd00:30::10]:53")), BTreeSet::new());
    let report = in_netns(&ns.name, || conntrack::clear(&plan)).expect("sweep");
    let deleted: Vec<(Family, u64, u64)> = report.families.iter().map(|f| (f.family, f.deleted, f.scanned)).collect();
    assert_eq!(deleted, [(Family::V4, 3, 7), (Family::V6, 1, 2)]);
    let mut kept: Vec<_> =
        [0, 3, 5, 6, 8].iter().map(|&i| (flows[i].proto, flows[i].orig_dst, flows[i].reply_src)).collect();
    kept.sort();
    assert_eq!(entries(&ns), kept, "exactly the stale UDP flows went");
    assert_eq!(entries(&other).len(), 9, "another namespace's table is its own");
    let count = in_netns(&ns.name, || Socket::open().and_then(|mut s| s.conntrack_count())).expect("count");
    assert_eq!(count, 5);
}

const CLUSTER_IP: &str = "172.30.0.53";
/// The port of pod-1's TCP echo, which the Service's TCP port leads to.
const TCP_ECHO_PORT: u16 = 9053;

/// Service `dns` (dual-stack ClusterIP, UDP 53 with NodePort 30053, TCP 53) on `pods`.
fn dns(c: &Cluster, pods: &[&str]) -> Vec<Value> {
    let spec = json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack", "clusterIPs": [CLUSTER_IP, "fd00:172:30::53"],
        "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": ECHO_PORT, "nodePort": 30053},
                  {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": TCP_ECHO_PORT, "nodePort": 30054}]});
    let mut objects = vec![service("dns", spec, json!({}))];
    for v6 in [false, true] {
        let eps = pods.iter().map(|p| endpoint(c.pod_named(p), v6, json!({}))).collect();
        let mut s = slice("dns", v6, "UDP", eps);
        s["ports"] = json!([{"name": "dns", "port": ECHO_PORT, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": TCP_ECHO_PORT, "protocol": "TCP"}]);
        objects.push(s);
    }
    objects
}

/// A UDP socket in `ns` connected to `dst`: one source port for its whole life.
fn udp_client(ns: &Netns, dst: &str) -> UdpSocket {
    let dst = addr(dst);
    in_netns(&ns.name, move || {
        let sock = UdpSocket::bind(if dst.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }).expect("bind");
        sock.connect(dst).expect("connect");
        sock
    })
}

/// Sends one datagram and says who answered: a pod's name, "refused" or "timeout". Whatever
/// an earlier datagram left in the socket (a late answer, an ICMP error) is read first.
fn ask(sock: &UdpSocket) -> String {
    let mut buf = [0u8; 512];
    sock.set_nonblocking(true).unwrap();
    while !matches!(sock.recv(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock) {}
    sock.set_nonblocking(false).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(800))).unwrap();
    let answer = sock.send(b"hello").and_then(|_| sock.recv(&mut buf));
    match answer {
        Ok(n) => String::from_utf8_lossy(&buf[..n]).split_whitespace().next().unwrap_or("").to_string(),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => "refused".into(),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => "timeout".into(),
        Err(e) => format!("error {e}"),
    }
}

/// A TCP echo server in `ns` that serves one connection, line by line.
fn tcp_echo(ns: &Netns, port: u16) {
    let listener = in_netns(&ns.name, move || TcpListener::bind(("0.0.0.0", port)).expect("listen"));
    std::thread::spawn(move || {
        if let Ok((stream, _)) = listener.accept() {
            let mut out = stream.try_clone().expect("clone");
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = writeln!(out, "{line}");
            }
        }
    });
}

/// One line through a held TCP connection, echoed back.
fn echo(conn: &mut BufReader<TcpStream>, text: &str) -> std::io::Result<String> {
    writeln!(conn.get_mut(), "{text}")?;
    let mut line = String::new();
    conn.read_line(&mut line)?;
    Ok(line.trim().to_string())
}

/// Conntrack cleanups the daemon has logged.
fn cleanups(d: &Daemon) -> usize {
    d.logged().matches("conntrack cleanup:").count()
}

/// Writes the manifests and waits for the daemon's cleanup after the sync they cause.
fn change(c: &Cluster, d: &Daemon, objects: Vec<Value>, what: &str) {
    let before = cleanups(d);
    write_manifests(c, objects);
    let done = wait_for(Duration::from_secs(10), || cleanups(d) > before);
    assert!(done.is_some(), "no conntrack cleanup after {what}:\n{}", d.logged());
}

/// Asks each client once; returns who answered each.
fn answers(clients: &[(&str, &UdpSocket)]) -> Vec<(String, String)> {
    clients.iter().map(|(what, s)| (what.to_string(), ask(s))).collect()
}

fn all(clients: &[(&str, &UdpSocket)], who: &str) -> Vec<(String, String)> {
    clients.iter().map(|(what, _)| (what.to_string(), who.to_string())).collect()
}

#[test]
fn the_next_datagram_after_a_sync_reaches_the_new_endpoints() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(2, 0);
    tcp_echo(&c.pod_named("pod-1").ns, TCP_ECHO_PORT);
    let manifests = write_manifests(&c, dns(&c, &["pod-1"]));
    let d = Daemon::start(&c.node, &manifests, &[], &[]);
    assert!(wait_for(Duration::from_secs(10), || cleanups(&d) > 0).is_some(), "no first cleanup:\n{}", d.logged());
    let (cluster_ip, node_port) = (udp_client(&c.client, "172.30.0.53:53"), udp_client(&c.client, "192.168.1.1:30053"));
    let v6 = udp_client(&c.client, "[fd00:172:30::53]:53");
    let clients = [("ClusterIP", &cluster_ip), ("NodePort", &node_port), ("IPv6 ClusterIP", &v6)];
    assert_eq!(answers(&clients), all(&clients, "pod-1"));
    let tcp = in_netns(&c.client.name, || TcpStream::connect_timeout(&addr("172.30.0.53:53"), Duration::from_secs(2)));
    let mut tcp = BufReader::new(tcp.expect("TCP to the ClusterIP"));
    tcp.get_ref().set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(echo(&mut tcp, "before").expect("TCP echo"), "before");

    change(&c, &d, dns(&c, &["pod-2"]), "pod-1 replaced by pod-2");
    assert_eq!(answers(&clients), all(&clients, "pod-2"), "the very next datagram after the endpoint was replaced");
    change(&c, &d, dns(&c, &[]), "a scale to zero");
    assert_eq!(answers(&clients), all(&clients, "refused"), "no endpoint: no flow may lead to the old one");
    change(&c, &d, dns(&c, &["pod-1"]), "a scale back");
    assert_eq!(answers(&clients), all(&clients, "pod-1"));
    change(&c, &d, vec![], "the service's deletion");
    let after_delete = answers(&clients[..1]);
    assert_ne!(after_delete[0].1, "pod-1", "a deleted service's flows must go");
    change(&c, &d, dns(&c, &["pod-2"]), "the service's return");
    assert_eq!(answers(&clients), all(&clients, "pod-2"), "a recreated service with a new endpoint");

    let tcp_kept = entries(&c.node)
        .iter()
        .any(|(p, dst, src)| *p == IPPROTO_TCP && *dst == addr("172.30.0.53:53") && src.port() == TCP_ECHO_PORT);
    assert!(tcp_kept, "the TCP connection's conntrack entry must survive every UDP cleanup");
    assert_eq!(echo(&mut tcp, "after").expect("the TCP connection still works"), "after");
    d.stop();
}

/// A sysctl of namespace `ns` under net.netfilter.
fn sysctl(ns: &Netns, name: &str) -> String {
    let out = ns.run(&["cat", &format!("/proc/sys/net/netfilter/{name}")], "");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_daemon_sets_the_conntrack_sysctls_of_its_namespace() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::node_like("ctsys");
    let dir = Scratch::new("ctsys");
    let node = crate::common::cluster::Cluster::node_object();
    dir.write("node.json", &node.to_string());
    let stream_before = sysctl(&ns, "nf_conntrack_udp_timeout_stream");
    // The table's size is global: a namespace may not change it (the kernel makes it
    // read-only there), which is what lets this test ask for more than any node has.
    let max_read_only =
        ns.run(&["test", "-w", "/proc/sys/net/netfilter/nf_conntrack_max"], "").status.code() == Some(1);
    let mut flags =
        vec!["--conntrack-tcp-timeout-close-wait=90m", "--conntrack-udp-timeout=45s", "--conntrack-tcp-be-liberal"];
    if max_read_only {
        flags.push("--conntrack-min=2000000000");
    } else {
        eprintln!("nf_conntrack_max is writable in a namespace here: the global table size is not tested");
    }
    let d = Daemon::start(&ns, &dir.0, &flags, &[]);
    let want = [
        ("nf_conntrack_tcp_timeout_established", "86400"),
        ("nf_conntrack_tcp_timeout_close_wait", "5400"),
        ("nf_conntrack_udp_timeout", "45"),
        ("nf_conntrack_tcp_be_liberal", "1"),
    ];
    let set = || want.iter().all(|(name, v)| sysctl(&ns, name) == *v);
    assert!(
        wait_for(Duration::from_secs(10), set).is_some(),
        "{:?}\n{}",
        want.map(|(n, _)| sysctl(&ns, n)),
        d.logged()
    );
    assert_eq!(sysctl(&ns, "nf_conntrack_udp_timeout_stream"), stream_before, "0 leaves a sysctl alone");
    assert!(wait_for(Duration::from_secs(10), || d.logged().contains("Full sync: ")).is_some(), "{}", d.logged());
    let log = d.stop();
    assert!(log.contains("nf_conntrack_tcp_timeout_established: 432000 -> 86400"), "changes are logged:\n{log}");
    if max_read_only {
        assert!(log.contains("nf_conntrack_max left as it is"), "a read-only setting is a warning:\n{log}");
    }
}
