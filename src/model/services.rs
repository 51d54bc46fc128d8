//! Services, converted and validated into one `ServicePort` per port, with upstream's skip rules.

use super::endpoints::{object_key, valid_port};
use super::scheduler::{SCHEDULER_ANNOTATION, SCHEDULER_FLAGS_ANNOTATION, Scheduler};
use super::{ObjectKey, Protocol, ServicePortName};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use std::net::IpAddr;

/// Services with this label belong to another proxy and are left alone, as upstream does.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";

/// The label that marks a headless Service's EndpointSlices; a Service carrying it is left
/// out whatever its spec, as kube-proxy's informers did before 1.32 (both label
/// requirements on both resources).
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// The session affinity timeout the API defaults to (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10800;

/// Why one API object was skipped; the message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("skipping {kind} {}: {reason}", self.object())]
pub struct ObjectError {
    /// Object kind.
    pub kind: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ObjectError {
    /// `namespace/name`, or just the name of a cluster-scoped object.
    fn object(&self) -> String {
        if self.namespace.is_empty() { self.name.clone() } else { format!("{}/{}", self.namespace, self.name) }
    }

    /// Builds an error for `kind namespace/name`.
    pub fn new(kind: &'static str, namespace: &str, name: &str, reason: String) -> ObjectError {
        ObjectError { kind, namespace: namespace.into(), name: name.into(), reason }
    }
}

/// One port of a Service, with everything that decides how its traffic is handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// Identity.
    pub name: ServicePortName,
    /// The service port number.
    pub port: u16,
    /// The NodePort, if allocated.
    pub node_port: Option<u16>,
    /// All cluster IPs (one per family for dual-stack).
    pub cluster_ips: Vec<IpAddr>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` in VIP mode.
    pub load_balancer_ips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges`.
    pub source_ranges: Vec<IpNet>,
    /// ClientIP session affinity timeout in seconds, if affinity is on.
    pub affinity_timeout: Option<u32>,
    /// `externalTrafficPolicy: Local` on an externally reachable service.
    pub external_policy_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// `spec.healthCheckNodePort`, for eTP=Local load balancers.
    pub health_check_node_port: Option<u16>,
    /// The scheduler the Service asks for by annotation; `None` takes the node's default.
    pub scheduler: Option<Scheduler>,
}

impl ServicePort {
    /// Whether traffic from outside reaches it at all (NodePort, external or LB IPs).
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some() || !self.external_ips.is_empty() || !self.load_balancer_ips.is_empty()
    }

    /// Whether Cluster-policy endpoints are needed: for internal traffic, or to short-circuit
    /// pods and the host when external traffic is Local.
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || self.externally_accessible()
    }

    /// The scheduler that serves it: its own, else the node's `default`.
    pub fn scheduler_or(&self, default: Scheduler) -> Scheduler {
        self.scheduler.unwrap_or(default)
    }

    /// Whether node-local endpoints are needed.
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || self.external_policy_local
    }

    /// Converts a Service; `Ok(None)` means the proxy has nothing to do for it
    /// (headless or labelled headless, ExternalName, another proxy's, or no ports).
    pub fn from_api(svc: &Service) -> Result<Option<(ObjectKey, Vec<ServicePort>)>, ObjectError> {
        ServicePort::from_api_for(svc, None)
    }

    /// As [`ServicePort::from_api`] for the proxy named `proxy_name`
    /// (`--service-proxy-name`): with a name, only Services labelled with it are served.
    pub fn from_api_for(
        svc: &Service,
        proxy_name: Option<&str>,
    ) -> Result<Option<(ObjectKey, Vec<ServicePort>)>, ObjectError> {
        let (namespace, name) = object_key("Service", &svc.metadata)?;
        let err = |what: String| ObjectError::new("Service", &namespace, &name, what);
        check_name(&namespace).and(check_name(&name)).map_err(&err)?;
        let labels = svc.metadata.labels.as_ref();
        let claimed_by = labels.and_then(|l| l.get(SERVICE_PROXY_NAME_LABEL)).map(String::as_str);
        if claimed_by != proxy_name || labels.is_some_and(|l| l.contains_key(HEADLESS_LABEL)) {
            return Ok(None);
        }
        let spec = svc.spec.clone().unwrap_or_default();
        if spec.type_.as_deref() == Some("ExternalName") {
            return Ok(None);
        }
        let cluster_ips = cluster_ips(&spec).map_err(&err)?;
        if cluster_ips.is_empty() {
            return Ok(None);
        }
        let (external_ips, load_balancer_ips, source_ranges) = external_addresses(svc, &format!("{namespace}/{name}"));
        let affinity_timeout = affinity(&spec).map_err(&err)?;
        let scheduler = scheduler(svc, &format!("{namespace}/{name}"));
        // Only a LoadBalancer with the Local policy has its health checked, as upstream reads it
        // (a stale field on another Service is not served).
        let checked =
            spec.type_.as_deref() == Some("LoadBalancer") && spec.external_traffic_policy.as_deref() == Some("Local");
        let health_check_node_port =
            spec.health_check_node_port.filter(|_| checked).map(valid_port).transpose().map_err(&err)?;
        let mut ports = Vec::new();
        for p in spec.ports.iter().flatten() {
            let protocol = Protocol::parse(p.protocol.as_deref()).map_err(&err)?;
            let port_name = p.name.clone().unwrap_or_default();
            check_port_name(&port_name).map_err(&err)?;
            let sp = ServicePort {
                name: ServicePortName { namespace: namespace.clone(), name: name.clone(), port: port_name, protocol },
                port: valid_port(p.port).map_err(&err)?,
                node_port: p.node_port.filter(|n| *n != 0).map(valid_port).transpose().map_err(&err)?,
                cluster_ips: cluster_ips.clone(),
                external_ips: external_ips.clone(),
                load_balancer_ips: load_balancer_ips.clone(),
                source_ranges: source_ranges.clone(),
                affinity_timeout,
                external_policy_local: false,
                internal_policy_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
                health_check_node_port,
                scheduler,
            };
            let local = spec.external_traffic_policy.as_deref() == Some("Local");
            let external_policy_local = local && sp.externally_accessible();
            if ports.iter().any(|q: &ServicePort| q.name == sp.name) {
                return Err(err(format!("port name {:?} is used twice", sp.name.port)));
            }
            ports.push(ServicePort { external_policy_local, ..sp });
        }
        if ports.is_empty() {
            return Ok(None);
        }
        // Kept for as long as the Service lives: no room for ports it does not have.
        ports.shrink_to_fit();
        Ok(Some(((namespace, name), ports)))
    }
}

/// `spec.clusterIPs` (or the older `spec.clusterIP`); empty for headless or unallocated services.
fn cluster_ips(spec: &k8s_openapi::api::core::v1::ServiceSpec) -> Result<Vec<IpAddr>, String> {
    let listed: Vec<&String> = match &spec.cluster_ips {
        Some(ips) if !ips.is_empty() => ips.iter().collect(),
        _ => spec.cluster_ip.iter().collect(),
    };
    if listed.iter().any(|ip| ip.as_str() == "None" || ip.is_empty()) {
        return Ok(Vec::new());
    }
    let ips = parse_ips(listed, "clusterIP")?;
    if ips.len() > 2 {
        return Err(format!("clusterIPs has {} addresses; a Service has at most one per family", ips.len()));
    }
    if ips.len() == 2 && ips[0].is_ipv4() == ips[1].is_ipv4() {
        return Err("clusterIPs has two addresses of the same family".into());
    }
    Ok(ips)
}

/// `spec.externalIPs`, the load balancer ingress IPs and `spec.loadBalancerSourceRanges` of
/// Service `object` (`namespace/name`), each entry that cannot be read left out with a warning.
fn external_addresses(svc: &Service, object: &str) -> (Vec<IpAddr>, Vec<IpAddr>, Vec<IpNet>) {
    let skip = |what: &str, entry: &str, why: &str| {
        crate::skips::warn_skipped!("Service {object}: skipping {what} {entry:?}: it is not {why}");
    };
    let spec = svc.spec.as_ref();
    let external = spec.iter().flat_map(|s| s.external_ips.iter().flatten());
    let ranges = spec.iter().flat_map(|s| s.load_balancer_source_ranges.iter().flatten());
    (
        readable(external, super::parse_ip, |e| skip("externalIP", e, "an IP address")),
        readable(lb_ips(svc), super::parse_ip, |e| skip("load balancer ingress IP", e, "an IP address")),
        readable(ranges, super::parse_cidr, |e| skip("loadBalancerSourceRange", e, "a CIDR")),
    )
}

/// Load balancer ingress IPs as listed, leaving out `ipMode: Proxy` (the LB itself proxies those).
fn lb_ips(svc: &Service) -> impl Iterator<Item = &String> {
    let ingress = svc.status.iter().flat_map(|s| s.load_balancer.iter()).flat_map(|lb| lb.ingress.iter().flatten());
    ingress.filter(|i| i.ip_mode.as_deref() != Some("Proxy")).filter_map(|i| i.ip.as_ref())
}

/// The entries of a list `parse` can read, each once, in listed order. As upstream splits
/// these lists by family, an entry it cannot read is left out and the Service keeps the rest:
/// `unreadable` is told of it (an empty entry, which stands for nothing, is passed over quietly).
fn readable<'a, T: PartialEq>(
    listed: impl IntoIterator<Item = &'a String>,
    parse: impl Fn(&str) -> Option<T>,
    unreadable: impl Fn(&str),
) -> Vec<T> {
    let mut out = Vec::new();
    for entry in listed {
        match parse(entry) {
            Some(v) if !out.contains(&v) => out.push(v),
            Some(_) => {}
            None if entry.trim().is_empty() => {}
            None => unreadable(entry),
        }
    }
    out
}

/// The scheduler Service `object` (`namespace/name`) asks for by annotation; none (the
/// node's default) without one or with an empty one. An unknown name is warned of and the
/// node's default serves; so is a scheduler nftables cannot serve, which is served as
/// random; and flags that are not read.
fn scheduler(svc: &Service, object: &str) -> Option<Scheduler> {
    let annotations = svc.metadata.annotations.as_ref()?;
    let flags = annotations.get(SCHEDULER_FLAGS_ANNOTATION).map_or("", String::as_str);
    let Some(name) = annotations.get(SCHEDULER_ANNOTATION).filter(|n| !n.trim().is_empty()) else {
        if !flags.trim().is_empty() {
            crate::skips::warn_skipped!(
                "Service {object}: {SCHEDULER_FLAGS_ANNOTATION} is left unread without {SCHEDULER_ANNOTATION}"
            );
        }
        return None;
    };
    match Scheduler::parse(name, flags) {
        Err(why) => {
            crate::skips::warn_skipped!(
                "Service {object}: annotation {SCHEDULER_ANNOTATION}: {why}; the node's default serves it"
            );
            None
        }
        Ok((scheduler, unread)) => {
            if let Scheduler::Unserved(u) = scheduler {
                crate::skips::warn_skipped!(
                    "Service {object}: scheduler {} is served as random: {}",
                    u.as_str(),
                    u.why()
                );
            }
            if !unread.is_empty() {
                let name = scheduler.name();
                crate::skips::warn_skipped!(
                    "Service {object}: {SCHEDULER_FLAGS_ANNOTATION}: {unread:?} left unread (unknown, or of no effect with {name})"
                );
            }
            Some(scheduler)
        }
    }
}

fn affinity(spec: &k8s_openapi::api::core::v1::ServiceSpec) -> Result<Option<u32>, String> {
    if spec.session_affinity.as_deref() != Some("ClientIP") {
        return Ok(None);
    }
    let configured = spec.session_affinity_config.as_ref().and_then(|c| c.client_ip.as_ref());
    match configured.and_then(|c| c.timeout_seconds) {
        None => Ok(Some(DEFAULT_AFFINITY_TIMEOUT)),
        Some(t) if (1..=86400).contains(&t) => Ok(Some(t as u32)),
        Some(t) => Err(format!("sessionAffinity timeoutSeconds {t} is out of range 1..86400")),
    }
}

fn parse_ips<'a>(ips: impl IntoIterator<Item = &'a String>, what: &str) -> Result<Vec<IpAddr>, String> {
    let mut out: Vec<IpAddr> = Vec::new();
    for s in ips {
        let ip = super::parse_ip(s).ok_or_else(|| format!("{what} {s:?} is not an IP address"))?;
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    Ok(out)
}

/// Whether `s` is a DNS-1123 label, as Kubernetes requires of namespaces, Service names and
/// port names (and of each part of a node name).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Namespaces and names become part of chain names, so they must be DNS labels.
fn check_name(s: &str) -> Result<(), String> {
    if is_dns_label(s) { Ok(()) } else { Err(format!("{s:?} is not a valid DNS label")) }
}

/// Service port names are DNS labels (up to 63 characters), as the API server validates them.
fn check_port_name(s: &str) -> Result<(), String> {
    if s.is_empty() || check_name(s).is_ok() {
        Ok(())
    } else {
        Err(format!("port name {s:?} is not a valid DNS label"))
    }
}
