//! Hostile and odd clients of the health servers: each gets its answer and holds up no one,
//! half-closed, many headers, absolute targets, HEAD, silent crowds, SIGTERM with many open.

use super::*;

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
