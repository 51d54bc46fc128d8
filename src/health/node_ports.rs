//! Health-check node ports: for each `externalTrafficPolicy: Local` service with a
//! `healthCheckNodePort`, an HTTP server on that port, on the NodePort addresses, that tells a
//! cloud load balancer whether this node has ready endpoints of the service (upstream's body
//! and `X-Load-Balancing-Endpoint-Weight`). The sync thread hands what is wanted to the
//! `http` thread (`crate::http`), which opens and closes listeners to match and retries a
//! port already taken every few seconds, never failing the proxy.

use crate::http::{self, Reply, Route};
use crate::model::Family;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What one health-check node port answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceHealth {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// Distinct ready endpoint IPs of the Service on this node, per family (IPv4, IPv6).
    pub local_endpoints: [usize; 2],
    /// The Service's families (IPv4, IPv6): its port is served in those alone, as upstream's
    /// proxier of each family serves its own Services' ports.
    pub families: [bool; 2],
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
    /// The sockets to listen on: each port on each address of its Service's families. On
    /// every address: `0.0.0.0` for an IPv4 Service, `[::]` for an IPv6 one, and for a
    /// dual-stack one `[::]` taking IPv4 too (`0.0.0.0` on a host without IPv6).
    pub fn sockets(&self) -> BTreeSet<(SocketAddr, Route)> {
        let mut out = BTreeSet::new();
        for (port, s) in &self.ports {
            // A Service without cluster IPs says no family: both, as before families were kept.
            let [v4, v6] = if s.families == [false, false] { [true, true] } else { s.families };
            let of_family = |ip: &IpAddr| if ip.is_ipv4() { v4 } else { v6 };
            let single = Route::HealthCheck { dual_stack: false };
            match &self.listen {
                Listen::All if v4 && v6 => {
                    let any = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), *port);
                    out.insert((any, Route::HealthCheck { dual_stack: true }));
                }
                Listen::All => {
                    let ip = if v4 { IpAddr::V4(Ipv4Addr::UNSPECIFIED) } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
                    out.insert((SocketAddr::new(ip, *port), single));
                }
                Listen::Ips(ips) => {
                    out.extend(ips.iter().filter(|ip| of_family(ip)).map(|ip| (SocketAddr::new(*ip, *port), single)));
                }
            }
        }
        out
    }
}

/// The body upstream writes: tab-indented JSON, no newline at the end.
fn body(s: &ServiceHealth, local: usize, healthy: bool) -> String {
    let quote = |v: &str| serde_json::to_string(v).unwrap_or_default();
    format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {local},\n\t\"serviceProxyHealthy\": {healthy}\n}}",
        quote(&s.namespace),
        quote(&s.name),
    )
}

/// The answer on a port to a checker connected over `family` (any path): 200 when this node
/// has ready endpoints of the service in that family and the proxy is healthy, else 503;
/// 404 for a port no longer wanted. As upstream's per-family proxiers each answer for theirs.
pub fn answer(s: Option<&ServiceHealth>, family: Family, healthy: bool) -> Reply {
    let Some(s) = s else { return Reply::not_found() };
    let local = s.local_endpoints[match family {
        Family::V4 => 0,
        Family::V6 => 1,
    }];
    let ok = local > 0 && healthy;
    let mut reply = Reply::new(if ok { 200 } else { 503 }, http::JSON, body(s, local, healthy));
    reply.headers.push(("X-Load-Balancing-Endpoint-Weight", local.to_string()));
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web(n: usize) -> ServiceHealth {
        let families = [true, true];
        ServiceHealth { namespace: "shop".into(), name: "web".into(), local_endpoints: [n, 0], families }
    }

    #[test]
    fn answers_as_upstream() {
        let r = answer(Some(&web(2)), Family::V4, true);
        assert_eq!(r.code, 200);
        assert_eq!(r.headers, vec![("X-Load-Balancing-Endpoint-Weight", "2".to_string())]);
        assert_eq!(
            r.body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"shop\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
        assert_eq!(answer(Some(&web(0)), Family::V4, true).code, 503, "no local endpoints");
        let sick = answer(Some(&web(2)), Family::V4, false);
        assert_eq!(sick.code, 503, "proxy unhealthy");
        assert!(sick.body.contains("\"serviceProxyHealthy\": false"));
        assert_eq!(answer(None, Family::V4, true).code, 404);
        let v6 = answer(Some(&web(2)), Family::V6, true);
        assert_eq!((v6.code, v6.headers[0].1.as_str()), (503, "0"), "an IPv6 checker counts IPv6 endpoints");
    }

    fn shown(w: &Wanted) -> Vec<String> {
        let dual = |r: &Route| if *r == (Route::HealthCheck { dual_stack: true }) { " dual-stack" } else { "" };
        w.sockets().iter().map(|(a, r)| format!("{a}{}", dual(r))).collect()
    }

    #[test]
    fn each_port_listens_on_each_address_of_its_services_families() {
        let ips = vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        let v4 = ServiceHealth { families: [true, false], ..web(1) };
        let v6 = ServiceHealth { families: [false, true], ..web(1) };
        let ports = [(30001, web(1)), (30002, web(0)), (30003, v4), (30004, v6)].into();
        let w = Wanted { ports, listen: Listen::Ips(ips) };
        let want = ["192.0.2.1:30001", "192.0.2.1:30002", "192.0.2.1:30003", "[2001:db8::1]:30001"];
        let want = want.into_iter().chain(["[2001:db8::1]:30002", "[2001:db8::1]:30004"]);
        assert_eq!(shown(&w), want.collect::<Vec<_>>());
        let all = Wanted { listen: Listen::All, ..w };
        let want = ["0.0.0.0:30003", "[::]:30001 dual-stack", "[::]:30002 dual-stack", "[::]:30004"];
        assert_eq!(shown(&all), want);
    }
}
