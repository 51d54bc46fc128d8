//! A hostile round against the health-check node ports, `/healthz` and `/metrics` through
//! the real daemon in network namespaces: odd clients, odd Services and node changes. Each
//! test holds the proxy to what upstream kube-proxy does (each finding of the round was
//! mended and its test kept). The in-memory half is `tests/offline/local_view.rs`.

use crate::common::checker::{NODE_IP, check_at, expect, expect_at, local_lb};
use crate::common::cluster::{Cluster, endpoint, service, slice};
use crate::common::daemon::{Daemon, wait_for, write_manifests};
use crate::common::kernel_available;
use crate::common::net::{http_get, in_netns};
use crate::common::owner::TableOwner;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

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
fn an_absolute_target_and_a_head_too_large_are_answered_as_gos_server_answers() {
    if !kernel_available() {
        return;
    }
    let (c, d) = one_port(32066, &[]);
    // A client speaking to a proxy sends the absolute URI: Go serves its path.
    let absolute = format!("GET http://{NODE_IP}:10256/livez HTTP/1.1\r\nHost: {NODE_IP}\r\n\r\n").into_bytes();
    let got = exchange(&c, &format!("{NODE_IP}:10256"), vec![absolute], Duration::ZERO, false);
    assert!(got.starts_with("HTTP/1.1 200 ") && got.contains("\"healthy\""), "answered {got:?}");
    // A head over 8 KiB (here 9 and 64 KiB, sent at once): 431, as Go answers one over its
    // limit, read whole by the client although it sent more than was read.
    for size in [9, 64] {
        let big = request("GET", &format!("X-Big: {}\r\n", "a".repeat(size * 1024)));
        let got = exchange(&c, &format!("{NODE_IP}:32066"), vec![big], Duration::ZERO, false);
        assert!(got.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{size} KiB: {got:?}");
        assert!(got.ends_with("\r\n\r\n431 Request Header Fields Too Large"), "{size} KiB: {got:?}");
    }
    expect(&c, &d, 32066, Some((200, "1")), "still served");
    d.stop();
}

#[test]
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
fn with_bindv6only_set_a_port_on_every_address_still_takes_ipv4() {
    if !kernel_available() {
        return;
    }
    // Go's listener on 0.0.0.0 (upstream's for "all") clears IPV6_V6ONLY itself; a socket
    // that leaves it to the sysctl takes no IPv4 on hosts that set it. A dual-stack Service
    // gets such a `[::]`; an IPv4 one `0.0.0.0` alone, as upstream's IPv4 proxier opens it.
    let c = Cluster::new(1, 0);
    let out = c.node.run(&["sysctl", "-qw", "net.ipv6.bindv6only=1"], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut objects = local_lb(&c, "web", 64, 32064, &["pod-1"]);
    let mut dual = local_lb(&c, "dual", 65, 32065, &["pod-1"]);
    let spec = &mut dual[0]["spec"];
    spec["clusterIPs"] = json!(["172.30.0.65", "fd00:172:30::65"]);
    spec["ipFamilies"] = json!(["IPv4", "IPv6"]);
    spec["ipFamilyPolicy"] = json!("RequireDualStack");
    dual.push(slice("dual", true, "TCP", vec![endpoint(c.pod_named("pod-1"), true, json!({}))]));
    objects.extend(dual);
    let path = write_manifests(&c, objects);
    let d = Daemon::start(&c.node, &path, &["--healthz-bind-address=", "--nodeport-addresses=all"], &[]);
    expect(&c, &d, 32065, Some((200, "1")), "a dual-stack Service's port takes IPv4");
    expect_at(&c, &d, "[fd00:172:16::1]:32065", Some((200, "1")), "and IPv6, counting IPv6 endpoints");
    expect(&c, &d, 32064, Some((200, "1")), "an IPv4 Service's port");
    expect_at(&c, &d, "[fd00:172:16::1]:32064", None, "not over IPv6, where it could only answer 503");
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
    let (left, want) = if weight == "1" { (two.clone(), "2") } else { (one.clone(), "1") };
    assert!(body.contains(if weight == "1" { "\"one\"" } else { "\"two\"" }), "{weight} {body}");
    // The conflict is logged, as upstream logs it: once, however often the ports change.
    let claimed = "health-check node port 32073 of Service test/two is already claimed by Service test/one";
    assert!(d.logged().contains(claimed), "the conflict is not logged:\n{}", d.logged());
    write_manifests(&c, [one, two, local_lb(&c, "three", 75, 32075, &["pod-1"])].concat());
    expect(&c, &d, 32075, Some((200, "1")), "a third port");
    assert_eq!(d.logged().matches(claimed).count(), 1, "logged more than once:\n{}", d.logged());
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
    let probe = std::process::Command::new("/usr/bin/python3").args(["-c", "import prometheus_client"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        assert!(std::env::var_os("CI").is_none(), "python3 with prometheus_client is missing (tests/run installs it)");
        eprintln!("SKIPPING the strict parse of /metrics: python3 with prometheus_client is not installed");
        return;
    }
    let mut child = std::process::Command::new("/usr/bin/python3")
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
    let mut objects = local_lb(&c, "web", 78, 32078, &["pod-1"]);
    objects.extend(local_lb(&c, "api", 79, 32079, &["pod-1"]));
    let path = write_manifests(&c, objects.clone());
    let mut d = Daemon::start(&c.node, &path, &["--healthz-bind-address=", "--sync-period=1s"], &[]);
    expect(&c, &d, 32078, Some((200, "1")), "healthy first");
    expect(&c, &d, 32079, Some((200, "1")), "healthy first");
    // From now on another process owns the tables: every sync fails with EPERM, so a new
    // Service cannot be applied. (The checks reach the ports still: the owned table is empty.)
    let _owner = [TableOwner::take(&c.node, "ip"), TableOwner::take(&c.node, "ip6")];
    let mut more = objects;
    more.extend(local_lb(&c, "new", 80, 32080, &["pod-1"]));
    write_manifests(&c, more);
    for port in [32078, 32079] {
        expect(&c, &d, port, Some((503, "1")), "an unhealthy proxy fails every check");
        let (_, _, body) = check_at(&c, &format!("{NODE_IP}:{port}")).unwrap();
        assert!(body.contains("\"serviceProxyHealthy\": false"), "{body}");
    }
    assert!(d.logged().contains("sync failed"), "the proxy is unhealthy for another reason:\n{}", d.logged());
    // SIGTERM still ends it promptly, its syncs failing and retried.
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

#[test]
fn silent_crowds_on_every_endpoint_cost_no_thread_and_keep_no_checker_out() {
    if !kernel_available() {
        return;
    }
    // /healthz, /metrics and a health-check port, each with a crowd that connects and says
    // nothing: past the connection cap the oldest silent ones make room, so a checker that
    // comes last is still answered, and no connection costs a thread.
    let (c, d) = one_port(32080, &[&format!("--healthz-bind-address={NODE_IP}:10256")]);
    let node_ip: std::net::IpAddr = NODE_IP.parse().unwrap();
    let crowd: Vec<TcpStream> = in_netns(&c.client.name, move || {
        let mut all = Vec::new();
        for port in [10256, 32080] {
            for _ in 0..600 {
                all.extend(TcpStream::connect_timeout(&(node_ip, port).into(), Duration::from_secs(1)));
            }
        }
        all
    });
    assert!(crowd.len() >= 1100, "only {} connections opened", crowd.len());
    let metrics_crowd: Vec<TcpStream> =
        in_netns(&c.node.name, || (0..100).filter_map(|_| TcpStream::connect(("127.0.0.1", 10249)).ok()).collect());
    let started = Instant::now();
    expect(&c, &d, 32080, Some((200, "1")), "a checker after the crowd");
    let healthz = http_get(&c.client.name, &format!("{NODE_IP}:10256"), "/healthz").map(|r| r.0);
    assert_eq!(healthz, Some(200), "/healthz after the crowd");
    let metrics = http_get(&c.node.name, "127.0.0.1:10249", "/metrics").map(|r| r.0);
    assert_eq!(metrics, Some(200), "/metrics after the crowd");
    assert!(started.elapsed() < Duration::from_secs(2), "the checks waited {:?}", started.elapsed());
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let threads: usize = status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap();
    assert!(threads < 16, "{threads} threads for {} connections", crowd.len() + metrics_crowd.len());
    drop((crowd, metrics_crowd));
    d.stop();
}
