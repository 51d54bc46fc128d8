//! Health-check node ports: for each `externalTrafficPolicy: Local` service with a
//! `healthCheckNodePort`, an HTTP server on that port, on the NodePort addresses, that tells a
//! cloud load balancer whether this node has ready endpoints of the service (upstream's body
//! and `X-Load-Balancing-Endpoint-Weight`). The sync thread hands what is wanted to the
//! `http` thread (`crate::http`), which opens and closes listeners to match and retries a
//! port already taken every few seconds, never failing the proxy.

use crate::http::{self, Reply};
use crate::model::Family;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// What one health-check node port answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceHealth {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// Distinct ready endpoint IPs of the Service on this node, per family (IPv4, IPv6).
    pub local_endpoints: [usize; 2],
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
    /// also takes IPv4 connections (a host without IPv6 gets `0.0.0.0` instead).
    pub fn sockets(&self) -> BTreeSet<SocketAddr> {
        let ips = match &self.listen {
            Listen::All => vec![IpAddr::V6(Ipv6Addr::UNSPECIFIED)],
            Listen::Ips(ips) => ips.clone(),
        };
        self.ports.keys().flat_map(|p| ips.iter().map(move |ip| SocketAddr::new(*ip, *p))).collect()
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
        ServiceHealth { namespace: "shop".into(), name: "web".into(), local_endpoints: [n, 0] }
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
