//! The "why" of an answer: which service port's rules took the packet, what about it (no
//! endpoints, traffic policy, source ranges, affinity, masquerading) decided the outcome,
//! and which of its endpoints take none of the traffic, for what reason.

use super::{Explanation, Fate, Step};
use crate::config::Config;
use crate::model::{Family, Model, Protocol, Scheduler, ServicePort};
use crate::render::{self, MapName, chain};
use crate::topology::{self, Choice};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// What serves a connection to a loopback address on a NodePort, which the rules leave alone
/// (`crate::localhost`): the userspace listener, or why there is none.
fn localhost_nodeport(e: &Explanation, model: &Model, cfg: &Config) -> Option<(&'static str, String)> {
    let (ip, port) = (e.query.to.ip(), e.query.to.port());
    let tcp = e.query.protocol == crate::model::Protocol::Tcp;
    if !ip.is_loopback() || e.kind != super::SourceKind::Node {
        return None;
    }
    let node_port = |sp: &&ServicePort| sp.node_port == Some(port) && sp.name.protocol == e.query.protocol;
    let sp = model.services.values().flatten().find(node_port)?;
    let family = Family::of(&ip);
    let listening = crate::localhost::families(cfg).contains(&family) && tcp;
    let exact = ip == std::net::Ipv4Addr::LOCALHOST || ip == std::net::Ipv6Addr::LOCALHOST;
    let gate = crate::config::features::LOCALHOST_NODE_PORTS;
    let text = if listening && exact {
        let mut view = crate::localhost::LocalhostView::new(vec![family]);
        // The Service that has the port alone: not the whole cluster for one question.
        let key: crate::model::ObjectKey = (sp.name.namespace.clone(), sp.name.name.clone());
        view.update(model, &cfg.node_name, false, [key].iter());
        match view.wanted().remove(&(family, port)) {
            Some(spec) => {
                let pick =
                    if spec.affinity.is_some() { "the pinned one (ClientIP affinity)" } else { "picked at random" };
                format!(
                    "{ip}:{port} is a localhost NodePort of {}: the proxy's listener takes the connection and opens \
                     its own to one of {} endpoints, {pick}",
                    spec.service,
                    spec.endpoints.len()
                )
            }
            None => {
                format!("NodePort {port} of {} has no endpoint it may use, so no listener on {ip}: refused", sp.name)
            }
        }
    } else if listening {
        format!("localhost NodePorts listen on 127.0.0.1 and ::1 alone, not {ip}")
    } else if !tcp {
        format!("NodePort {port} of {} is {}: localhost NodePorts are TCP alone", sp.name, e.query.protocol)
    } else {
        format!(
            "NodePort {port} of {} is not served on {ip}: localhost NodePorts need nodePortAddresses `localhost` \
             and --feature-gates={gate}=true",
            sp.name
        )
    };
    Some(("localhost-nodeport", text))
}

/// One reason, with a stable name for scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// Its name (`no-service`, `no-endpoints`, `traffic-policy`, `source-ranges`,
    /// `cluster-ip-port`, `service-cidr`, `affinity`, `scheduler`, `masquerade`,
    /// `localhost-nodeport`).
    pub kind: &'static str,
    /// For people.
    pub text: String,
}

/// An endpoint of the service port that takes none of this connection's traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnusedEndpoint {
    /// The endpoint.
    pub endpoint: SocketAddr,
    /// Its node, when its slice says.
    pub node: Option<String>,
    /// Why, by name (`not-ready`, `terminating`, `topology`, `other-node`: `topology::Unused`).
    pub reason: &'static str,
    /// Why, for people.
    pub text: String,
}

/// The node each endpoint of `family` runs on, by address, as the slices say.
pub fn endpoint_nodes(model: &Model, family: Family) -> BTreeMap<IpAddr, String> {
    let mut nodes = BTreeMap::new();
    for sp in model.services.values().flatten() {
        for e in model.endpoints(&sp.name, family) {
            if let Some(n) = e.node_name {
                nodes.entry(e.ip).or_insert_with(|| n.to_string());
            }
        }
    }
    nodes
}

/// Fills in the service, the reasons and the unused endpoints of `e` from its outcomes.
pub fn fill(e: &mut Explanation, model: &Model, cfg: &Config) {
    let steps: Vec<Step> = e.outcomes.iter().flat_map(|o| o.path.iter().cloned()).collect();
    let dispatch: Vec<String> =
        MapName::all().into_iter().filter(|m| m.names_frontend()).map(|m| m.to_string()).collect();
    // The maps that send a frontend's traffic somewhere name its service port; the address
    // sets (cluster-ips, nodeport-ips) hold elements that many ports share.
    let owner = steps.iter().find_map(|s| match s {
        Step::Element { owner: Some(owner), set } if dispatch.contains(set) => Some(owner.to_string()),
        _ => None,
    });
    let rejected = e.outcomes.iter().any(|o| o.fate == Fate::Rejected);
    let ran_in = |chain: &str| steps.iter().any(|s| matches!(s, Step::Rule { chain: c, .. } if c == chain));
    // A ClusterIP's port without endpoints has no element of its own: `cluster-ips-check`
    // rejects it with the ports no Service has.
    let no_endpoints = (owner.is_none() && rejected && ran_in(chain::CLUSTER_IPS_CHECK))
        .then(|| cluster_ip_port(model, e.query.to, e.query.protocol))
        .flatten();
    let owner = owner.or_else(|| no_endpoints.map(|sp| sp.name.to_string()));
    let sp = owner.as_ref().and_then(|o| model.services.values().flatten().find(|sp| sp.name.to_string() == *o));
    let frontend = sp.map(|sp| frontend(sp, e.query.to));
    e.service = owner.zip(frontend);
    // What decided is read from where the packet went (chains the templates declare, sets
    // by their names), not from rule text.
    let element_in =
        |set: MapName| steps.iter().any(|s| matches!(s, Step::Element { set: s, .. } if *s == set.to_string()));
    let localhost = if e.service.is_none() { localhost_nodeport(e, model, cfg) } else { None };
    let mut add = |kind, text: String| e.reasons.push(super::Reason { kind, text });
    let to = format!("{}/{}", e.query.to, e.query.protocol);
    if e.service.is_none() {
        // That chain rejects a ClusterIP's other ports and drops the rest of the ServiceCIDRs.
        if ran_in(chain::CLUSTER_IPS_CHECK) && rejected {
            add(
                "cluster-ip-port",
                format!("{} is a ClusterIP, but no service port {to} is on it: rejected", e.query.to.ip()),
            );
        } else if ran_in(chain::CLUSTER_IPS_CHECK) {
            add("service-cidr", format!("{} is in a ServiceCIDR, but no Service holds it: dropped", e.query.to.ip()));
        } else if let Some((kind, text)) = localhost {
            add(kind, text);
        } else {
            add("no-service", format!("no Service serves {to} on this node: the proxy leaves the packet alone"));
        }
        return;
    }
    let Some(sp) = sp else { return };
    // Its one rule drops what the source ranges do not allow.
    if ran_in(chain::FIREWALL_CHECK) {
        let ranges: Vec<String> = sp.source_ranges.iter().map(ToString::to_string).collect();
        add(
            "source-ranges",
            format!("{} is not in loadBalancerSourceRanges ({}): dropped", e.source, ranges.join(", ")),
        );
    }
    if no_endpoints.is_some() || element_in(MapName::NoEndpointServices) || element_in(MapName::NoEndpointNodeports) {
        if rejected {
            add("no-endpoints", "the service port has no ready or serving endpoint anywhere: rejected".into());
        } else {
            add(
                "traffic-policy",
                format!("endpoints exist, but none on {} that the Local traffic policy allows: dropped", cfg.node_name),
            );
        }
    }
    policy(e, sp, cfg);
    pick(e, sp, sp.scheduler_or(cfg.scheduler));
    masquerade(e, &steps, element_in(MapName::HairpinConnections));
    e.unused = unused(e, model, sp, cfg);
}

/// How the endpoint was picked: session affinity's reason, which takes precedence over the
/// scheduler, else the scheduler's.
fn pick(e: &mut Explanation, sp: &ServicePort, scheduler: Scheduler) {
    if let Some(t) = sp.affinity_timeout {
        let over = match scheduler {
            Scheduler::Random => String::new(),
            s => format!(" (it takes precedence over scheduler {s})"),
        };
        let text = format!(
            "sessionAffinity ClientIP{over}: this first connection is spread as shown; the next ones from {} go to the same endpoint until it has been idle {t}s",
            e.source
        );
        e.reasons.push(Reason { kind: "affinity", text });
    } else if let Some(text) = scheduled(e, scheduler) {
        e.reasons.push(Reason { kind: "scheduler", text });
    }
}

/// How the scheduler picked among the endpoints, when the packet reached one: for the
/// hashing ones, the endpoint this client gets.
fn scheduled(e: &Explanation, scheduler: Scheduler) -> Option<String> {
    let reached: Vec<SocketAddr> = e
        .outcomes
        .iter()
        .filter_map(|o| match o.fate {
            Fate::Endpoint { to, .. } => Some(to),
            _ => None,
        })
        .collect();
    let (client, n) = (e.source, reached.len());
    Some(match (scheduler, reached.as_slice()) {
        (_, []) => return None,
        // One endpoint: nothing to pick among.
        (Scheduler::Random | Scheduler::RoundRobin, [_]) => return None,
        (Scheduler::Random, _) => {
            format!("scheduler random: each new connection goes to one of {n} endpoints at random")
        }
        (Scheduler::Unserved(u), _) => format!("scheduler {}: served as random ({})", u.as_str(), u.why()),
        (Scheduler::RoundRobin, _) => format!(
            "scheduler rr: new connections take the {n} endpoints in turn (one turn per service port and frontend kind), so this one may go to any"
        ),
        (s, [to]) if s.hashes() => {
            let port = match s {
                Scheduler::SourceHash { port: true } | Scheduler::Maglev { port: true } => {
                    format!(
                        " from port {} (the client's port is hashed too)",
                        e.query.from_port.unwrap_or(super::CLIENT_PORT)
                    )
                }
                _ => String::new(),
            };
            let how = match s {
                Scheduler::Maglev { .. } => {
                    "its hash picks a slot of the service port's table (mh), which moves few clients when an endpoint goes"
                }
                _ => {
                    "its hash modulo the endpoint count picks (sh), which moves most clients when the endpoints change"
                }
            };
            format!(
                "scheduler {s}: connections from {client}{port} go to {to} while the endpoints stay the same: {how}"
            )
        }
        (s, _) => format!("scheduler {s}: the client's hash picks one of {n} endpoints"),
    })
}

/// The service port whose ClusterIP and port `to` is, for `protocol`.
fn cluster_ip_port(model: &Model, to: SocketAddr, protocol: Protocol) -> Option<&ServicePort> {
    let mut ports = model.services.values().flatten();
    ports.find(|sp| sp.cluster_ips.contains(&to.ip()) && sp.port == to.port() && sp.name.protocol == protocol)
}

/// Which of the service port's frontends `to` is.
fn frontend(sp: &ServicePort, to: SocketAddr) -> &'static str {
    let ip = to.ip();
    if sp.cluster_ips.contains(&ip) && to.port() == sp.port {
        "ClusterIP"
    } else if sp.load_balancer_ips.contains(&ip) && to.port() == sp.port {
        "LoadBalancer IP"
    } else if sp.external_ips.contains(&ip) && to.port() == sp.port {
        "external IP"
    } else {
        "NodePort"
    }
}

/// The traffic policy that applies to this source and frontend.
fn policy(e: &mut Explanation, sp: &ServicePort, cfg: &Config) {
    let external = e.service.as_ref().is_some_and(|(_, f)| *f != "ClusterIP");
    let reached = e.outcomes.iter().any(|o| matches!(o.fate, Fate::Endpoint { .. }));
    let text = match (external, local_scope(e, sp)) {
        (true, true) if sp.external_policy_local => {
            format!("externalTrafficPolicy Local: only endpoints on {}; the client's address is kept", cfg.node_name)
        }
        (true, false) if sp.external_policy_local && reached => {
            "externalTrafficPolicy Local does not bind traffic from this node or its pods (as --detect-local-mode tells them): it may use every endpoint".to_string()
        }
        (false, true) => format!("internalTrafficPolicy Local: only endpoints on {}", cfg.node_name),
        _ => return,
    };
    e.reasons.push(Reason { kind: "traffic-policy", text });
}

/// Whether the traffic went to this node's endpoints only: what the rules did (a `local-`
/// chain picked the endpoint), or, where no endpoint was reached, what the policy says.
fn local_scope(e: &Explanation, sp: &ServicePort) -> bool {
    let chains = e.outcomes.iter().flat_map(|o| o.path.iter()).filter_map(|s| match s {
        Step::Rule { chain, .. } => Some(chain.as_str()),
        Step::Element { .. } | Step::Marked { .. } => None,
    });
    let picked: Vec<&str> = chains.filter(|c| render::picks_endpoints(c)).collect();
    if picked.is_empty() {
        let external = e.service.as_ref().is_some_and(|(_, f)| *f != "ClusterIP");
        return if external { sp.external_policy_local } else { sp.internal_policy_local };
    }
    picked.iter().all(|c| render::picks_local_endpoints(c))
}

/// Why a masqueraded outcome is masqueraded: the rule that marked it, or a hairpin.
fn masquerade(e: &mut Explanation, steps: &[Step], hairpin: bool) {
    if !e
        .outcomes
        .iter()
        .any(|o| matches!(o.fate, Fate::Endpoint { masquerade: true, .. } | Fate::Unchanged { masquerade: true }))
    {
        return;
    }
    let marked_in = steps.iter().find_map(|s| match s {
        Step::Marked { chain } => Some(chain.as_str()),
        _ => None,
    });
    let text = match marked_in {
        Some(chain::SERVICES) => {
            "the source is not one of this cluster's pods (--detect-local-mode): masqueraded so replies come back through this node"
        }
        Some(c) if render::is_service_chain(c) => "--masquerade-all: masqueraded",
        Some(_) => {
            "traffic to an external frontend under externalTrafficPolicy Cluster is masqueraded, so replies come back through this node"
        }
        None if hairpin => {
            "a pod reaching itself through the service is masqueraded, or it would answer itself directly"
        }
        None => "masqueraded",
    };
    e.reasons.push(Reason { kind: "masquerade", text: text.into() });
}

/// The endpoints of `sp` (of the query's family) that endpoint selection passes over for
/// this traffic, with the reason: the Local scope's for traffic a Local policy binds, else
/// the Cluster scope's.
fn unused(e: &Explanation, model: &Model, sp: &ServicePort, cfg: &Config) -> Vec<UnusedEndpoint> {
    let family = Family::of(&e.query.to.ip());
    let endpoints = model.endpoints(&sp.name, family);
    let zone = model.node.as_ref().and_then(|n| n.zone.as_deref());
    let local_scope = local_scope(e, sp);
    topology::endpoint_uses(&endpoints, sp, &cfg.node_name, zone)
        .into_iter()
        .filter_map(|u| {
            let (this, other) = if local_scope { (u.local, u.cluster) } else { (u.cluster, u.local) };
            let why = match this {
                Choice::Chosen => return None,
                Choice::Passed(why) => why,
                Choice::NotNeeded => other.passed()?,
            };
            Some(UnusedEndpoint {
                endpoint: SocketAddr::new(u.endpoint.ip, u.endpoint.port),
                node: u.endpoint.node_name.as_deref().map(str::to_string),
                reason: why.name(),
                text: why.to_string(),
            })
        })
        .collect()
}
