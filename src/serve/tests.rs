//! The proxy's endpoints served over real HTTP by the `http` thread: the debug views asked of
//! the sync thread's inbox on the metrics address alone, and the health-check node ports
//! opened, answered, counted and closed as the sync loop's news says.

use super::*;
use crate::health::node_ports::Listen;
use crate::http::Server;
use crate::http::test_client::{read, send};

use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

/// A free port of 127.0.0.1.
fn free() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port")
}

/// A server of `fixed` listeners with metrics on or off; the inbox the views are asked through.
fn start(fixed: Vec<(SocketAddr, Route)>, metrics: Option<Arc<Metrics>>) -> (Server<Wanted>, Arc<Inbox>) {
    let inbox = Arc::new(Inbox::default());
    let health = Arc::new(Health::new(Duration::from_secs(60)));
    let server = Server::start(fixed, Endpoints::new(health, metrics, inbox.clone(), None)).expect("server");
    (server, inbox)
}

#[test]
fn a_debug_view_is_asked_of_the_sync_thread_on_the_metrics_address_alone() {
    let (m, h) = (free(), free());
    let (_server, inbox) =
        start(vec![(m, Route::Metrics), (h, Route::Health)], Some(Arc::new(Metrics::new().expect("metrics"))));
    let first = send(m, "/debug/services?service=shop%2Fweb");
    let mut asks = inbox.wait(Instant::now() + Duration::from_secs(5)).asks;
    assert_eq!(asks.len(), 1, "asked of the sync thread");
    assert_eq!(asks[0].view, View::Services(Some(("shop".into(), "web".into()))));
    let busy = read(send(m, "/debug/ruleset"));
    assert!(busy.starts_with("HTTP/1.1 503 ") && busy.contains("another debug view"), "{busy}");
    let bad = read(send(m, "/debug/ruleset?x=1"));
    assert!(bad.starts_with("HTTP/1.1 400 ") && bad.ends_with("takes no parameters\n"), "{bad}");
    let metrics = read(send(m, "/metrics"));
    assert!(metrics.starts_with("HTTP/1.1 200 ") && metrics.contains("kube_nftproxy"), "served meanwhile: {metrics}");
    let health = read(send(h, "/debug/ruleset"));
    assert!(health.starts_with("HTTP/1.1 404 "), "no view on the health address: {health}");
    assert!(inbox.wait(Instant::now()).asks.is_empty(), "nothing more asked");
    asks.remove(0).answer(Reply::pieces(200, http::TEXT, "# made\n", vec![b"the services\n".to_vec()]));
    let answer = read(first);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("Content-Length: 20\r\nConnection: close\r\n\r\n# made\nthe services\n"), "{answer}");
}

#[test]
fn without_metrics_the_metrics_address_serves_no_debug_view() {
    let m = free();
    let (_server, inbox) = start(vec![(m, Route::Metrics)], None);
    let answer = read(send(m, "/debug/ruleset"));
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    assert!(inbox.wait(Instant::now()).asks.is_empty(), "nothing asked");
}

/// The gauge of health-check node ports, once it says `n` (the loop sets it after binding).
fn gauge_reaches(metrics: &Metrics, n: i64) -> bool {
    let start = Instant::now();
    while metrics.health_check_node_ports.get() != n && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    metrics.health_check_node_ports.get() == n
}

#[test]
fn health_check_ports_open_answer_count_and_close_as_wanted() {
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let (server, _inbox) = start(Vec::new(), Some(metrics.clone()));
    let port = free().port();
    let web = ServiceHealth {
        namespace: "shop".into(),
        name: "web".into(),
        local_endpoints: [2, 0],
        families: [true, false],
    };
    let listen = Listen::Ips(vec![Ipv4Addr::LOCALHOST.into()]);
    server.want(Wanted { ports: [(port, web)].into(), listen: listen.clone() });
    assert!(gauge_reaches(&metrics, 1), "one port counted");
    let answer = read(send(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), "/"));
    assert!(
        answer.starts_with("HTTP/1.1 200 ") && answer.contains("X-Load-Balancing-Endpoint-Weight: 2\r\n"),
        "{answer}"
    );
    assert!(answer.contains("\"name\": \"web\"") && answer.contains("\"localEndpoints\": 2"), "{answer}");
    server.want(Wanted { ports: BTreeMap::new(), listen });
    assert!(gauge_reaches(&metrics, 0), "none counted");
    assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err(), "closed when no longer wanted");
}
