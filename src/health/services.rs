//! Health-check node ports: for each `externalTrafficPolicy: Local` service with a
//! `healthCheckNodePort`, an HTTP server on that port, on the NodePort addresses, that tells a
//! cloud load balancer whether this node has ready endpoints of the service (upstream's body
//! and `X-Load-Balancing-Endpoint-Weight`). The sync thread sends the wanted ports; a thread
//! named `svc-health` opens and closes servers to match, and retries a port already taken
//! every few seconds without ever failing the proxy.

use super::Health;
use crate::http::{self, Reply};
use crate::metrics::Metrics;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// How long the manager waits for news when every server is up (it wakes on news anyway).
const IDLE: Duration = Duration::from_secs(3600);

/// What one health-check node port answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceHealth {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// Distinct ready endpoint IPs of the Service on this node.
    pub local_endpoints: usize,
}

/// Where the servers listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// Every address (NodePorts are served on all of them).
    All,
    /// These addresses (the NodePort addresses).
    Ips(Vec<IpAddr>),
}

/// What should be served: the ports and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// Health-check node port → the Service it answers for.
    pub ports: BTreeMap<u16, ServiceHealth>,
    /// The addresses to listen on.
    pub listen: Listen,
}

impl Wanted {
    /// The sockets to listen on: each port on each address. For every address, `[::]`, which
    /// also takes IPv4 connections; a host without IPv6 gets `0.0.0.0` instead (see [`bind`]).
    fn sockets(&self) -> BTreeSet<SocketAddr> {
        let ips = match &self.listen {
            Listen::All => vec![IpAddr::V6(Ipv6Addr::UNSPECIFIED)],
            Listen::Ips(ips) => ips.clone(),
        };
        self.ports.keys().flat_map(|p| ips.iter().map(move |ip| SocketAddr::new(*ip, *p))).collect()
    }
}

/// The body upstream writes: tab-indented JSON, no newline at the end.
fn body(s: &ServiceHealth, healthy: bool) -> String {
    let quote = |v: &str| serde_json::to_string(v).unwrap_or_default();
    format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {},\n\t\"serviceProxyHealthy\": {healthy}\n}}",
        quote(&s.namespace),
        quote(&s.name),
        s.local_endpoints
    )
}

/// The answer on `port` (any path): 200 when this node has ready endpoints of the service
/// and the proxy is healthy, else 503; 404 for a port no longer wanted.
pub fn answer(s: Option<&ServiceHealth>, healthy: bool) -> Reply {
    let Some(s) = s else { return Reply::not_found() };
    let ok = s.local_endpoints > 0 && healthy;
    let mut reply = Reply::new(if ok { 200 } else { 503 }, http::JSON, body(s, healthy));
    reply.headers.push(("X-Load-Balancing-Endpoint-Weight", s.local_endpoints.to_string()));
    reply
}

/// The sync thread's handle on the servers.
pub struct Servers {
    wanted: Sender<Wanted>,
}

impl Servers {
    /// Starts the `svc-health` thread; it ends, closing every server, when this is dropped.
    pub fn start(health: Arc<Health>, metrics: Option<Arc<Metrics>>) -> std::io::Result<Servers> {
        let (tx, rx) = channel();
        std::thread::Builder::new().name("svc-health".into()).spawn(move || manage(&rx, &health, metrics))?;
        Ok(Servers { wanted: tx })
    }

    /// Asks for exactly `wanted` to be served.
    pub fn want(&self, wanted: Wanted) {
        let _ = self.wanted.send(wanted);
    }
}

/// One open server and the thread answering on it.
struct Running {
    server: Arc<tiny_http::Server>,
    thread: JoinHandle<()>,
}

impl Running {
    fn close(self) {
        self.server.unblock();
        let _ = self.thread.join();
    }
}

type Table = Arc<RwLock<BTreeMap<u16, ServiceHealth>>>;

fn manage(rx: &Receiver<Wanted>, health: &Arc<Health>, metrics: Option<Arc<Metrics>>) {
    let table: Table = Arc::default();
    let mut running: BTreeMap<SocketAddr, Running> = BTreeMap::new();
    let mut sockets = BTreeSet::new();
    let mut failing: BTreeSet<SocketAddr> = BTreeSet::new();
    loop {
        let wait = if failing.is_empty() { IDLE } else { http::REBIND };
        match rx.recv_timeout(wait) {
            Ok(mut wanted) => {
                // Only the newest state matters.
                while let Ok(newer) = rx.try_recv() {
                    wanted = newer;
                }
                sockets = wanted.sockets();
                *table.write().unwrap_or_else(|p| p.into_inner()) = wanted.ports;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        for addr in running.keys().filter(|a| !sockets.contains(a)).copied().collect::<Vec<_>>() {
            if let Some(r) = running.remove(&addr) {
                r.close();
                log::info!("closed the health-check node port {addr}");
            }
        }
        failing.retain(|a| sockets.contains(a));
        let missing: Vec<SocketAddr> = sockets.iter().filter(|a| !running.contains_key(a)).copied().collect();
        for addr in &missing {
            match open(*addr, &table, health) {
                Ok(r) => {
                    running.insert(*addr, r);
                    failing.remove(addr);
                    log::info!("serving the health-check node port {addr}");
                }
                Err(e) if failing.insert(*addr) => {
                    log::error!(
                        "cannot serve the health-check node port {addr}: {e}; trying again every {:?}",
                        http::REBIND
                    );
                }
                Err(_) => {}
            }
        }
        if let Some(m) = &metrics {
            let ports: BTreeSet<u16> = running.keys().map(SocketAddr::port).collect();
            m.health_check_node_ports.set(i64::try_from(ports.len()).unwrap_or(i64::MAX));
        }
    }
    running.into_values().for_each(Running::close);
}

/// Binds `addr`; `[::]` on a host without IPv6 falls back to `0.0.0.0`.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    match TcpListener::bind(addr) {
        Err(e) if addr.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED) && e.kind() != std::io::ErrorKind::AddrInUse => {
            TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), addr.port()))
        }
        other => other,
    }
}

fn open(addr: SocketAddr, table: &Table, health: &Arc<Health>) -> std::io::Result<Running> {
    let server = tiny_http::Server::from_listener(bind(addr)?, None).map_err(std::io::Error::other)?;
    let server = Arc::new(server);
    let (serving, table, health) = (server.clone(), table.clone(), health.clone());
    let port = addr.port();
    let thread = std::thread::Builder::new().name(format!("hc-{port}")).spawn(move || {
        // Ends when the manager unblocks it (an accept error is logged and waited out).
        while let Ok(request) = serving.recv() {
            let healthy = health.report(SystemTime::now()).healthy;
            let reply = answer(table.read().unwrap_or_else(|p| p.into_inner()).get(&port), healthy);
            http::respond(request, reply);
        }
    })?;
    Ok(Running { server, thread })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web(n: usize) -> ServiceHealth {
        ServiceHealth { namespace: "shop".into(), name: "web".into(), local_endpoints: n }
    }

    #[test]
    fn answers_as_upstream() {
        let r = answer(Some(&web(2)), true);
        assert_eq!(r.code, 200);
        assert_eq!(r.headers, vec![("X-Load-Balancing-Endpoint-Weight", "2".to_string())]);
        assert_eq!(
            r.body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"shop\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
        assert_eq!(answer(Some(&web(0)), true).code, 503, "no local endpoints");
        let sick = answer(Some(&web(2)), false);
        assert_eq!(sick.code, 503, "proxy unhealthy");
        assert!(sick.body.contains("\"serviceProxyHealthy\": false"));
        assert_eq!(answer(None, true).code, 404);
    }

    #[test]
    fn each_port_listens_on_each_address() {
        let ips = vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        let w = Wanted { ports: [(30001, web(1)), (30002, web(0))].into(), listen: Listen::Ips(ips) };
        let got: Vec<String> = w.sockets().iter().map(ToString::to_string).collect();
        assert_eq!(got, ["192.0.2.1:30001", "192.0.2.1:30002", "[2001:db8::1]:30001", "[2001:db8::1]:30002"]);
        let all = Wanted { listen: Listen::All, ..w };
        assert_eq!(all.sockets().len(), 2);
    }
}
