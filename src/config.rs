//! Command-line flags (named as upstream kube-proxy names them) and the validated configuration built from them.

use clap::Parser;
use ipnet::IpNet;
use std::path::PathBuf;
use std::time::Duration;

/// Errors in the flags; they stop the program before it touches anything.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A CIDR flag held something else.
    #[error("--{flag}: {value:?} is not a CIDR")]
    BadCidr {
        /// Flag name.
        flag: &'static str,
        /// Offending value.
        value: String,
    },
    /// The masquerade bit is outside the 32-bit mark.
    #[error("--masquerade-bit must be within 0..=31, got {0}")]
    BadMasqueradeBit(u8),
    /// The node name is needed to tell local endpoints apart.
    #[error("--hostname-override is required (the name of this node's Node object)")]
    MissingHostname,
    /// Nothing to read.
    #[error("--manifests is required")]
    MissingManifests,
    /// The local-traffic detector is unknown or lacks what it needs.
    #[error("--detect-local-mode: {0}")]
    BadDetectLocal(String),
    /// The node name is not one Kubernetes accepts (it reaches the script's text).
    #[error(
        "--hostname-override: {0:?} is not a valid node name (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', at most 253 characters)"
    )]
    BadHostname(String),
}

/// Raw command-line flags.
#[derive(Debug, Clone, Parser)]
#[command(name = "kube-nftproxy", version, about = "Kubernetes service proxy on nftables")]
pub struct Flags {
    /// Print the nftables script a full sync would apply, then exit without touching the kernel.
    #[arg(long)]
    pub dry_run: bool,
    /// A file or directory of YAML/JSON manifests (Services, EndpointSlices, this Node; `kind: List` too).
    #[arg(long, value_name = "PATH")]
    pub manifests: Option<PathBuf>,
    /// A kubeconfig naming the API server and credentials (its current context is used).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The API server's URL, overriding the kubeconfig's server.
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,
    /// The shortest watch timeout asked of the API server; each watch asks for a random one
    /// up to twice it (tests shorten it).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_period, hide = true)]
    pub watch_timeout: Duration,
    /// Objects per list page.
    #[arg(long, value_name = "N", default_value_t = 500, hide = true)]
    pub list_page_size: usize,
    /// How long the first sync waits for this node's Node object from the API server.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration, hide = true)]
    pub node_wait: Duration,
    /// This node's name, as in its Node object and EndpointSlice `nodeName`.
    #[arg(long, value_name = "NODE", env = "NODE_NAME")]
    pub hostname_override: Option<String>,
    /// Pod CIDRs of the cluster (comma separated, one per family); traffic from outside them to a ClusterIP is masqueraded.
    #[arg(long, value_name = "CIDR[,CIDR]", value_delimiter = ',')]
    pub cluster_cidr: Vec<String>,
    /// Where NodePorts are served: `primary` (the node's primary IPs, the default), `all`, or a CIDR list.
    #[arg(long, value_name = "primary|all|CIDR,...", value_delimiter = ',', default_value = "primary")]
    pub nodeport_addresses: Vec<String>,
    /// How traffic from this node's pods is told apart from other traffic: `ClusterCIDR`
    /// (source in --cluster-cidr), `NodeCIDR` (source in the Node's spec.podCIDRs),
    /// `BridgeInterface` (arrived on --pod-bridge-interface) or `InterfaceNamePrefix`
    /// (arrived on an interface named --pod-interface-name-prefix*).
    #[arg(long, value_name = "MODE", default_value = "ClusterCIDR")]
    pub detect_local_mode: String,
    /// The bridge pods are attached to, with --detect-local-mode=BridgeInterface.
    #[arg(long, value_name = "NAME", default_value = "")]
    pub pod_bridge_interface: String,
    /// The name prefix of pods' interfaces on the host, with --detect-local-mode=InterfaceNamePrefix.
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub pod_interface_name_prefix: String,
    /// Masquerade all traffic sent to service IPs.
    #[arg(long)]
    pub masquerade_all: bool,
    /// The bit of the packet mark used to flag packets for masquerading.
    #[arg(long, default_value_t = 14)]
    pub masquerade_bit: u8,
    /// Minimum time between syncs; changes arriving sooner are coalesced into the next one.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub min_sync_period: Duration,
    /// Longest wait before a failed sync is retried (retries back off up to this).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_period)]
    pub sync_period: Duration,
    /// Interval of full syncs that replace the tables whole, repairing any drift.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_period)]
    pub full_sync_period: Duration,
    /// Longest one `nft` run may take before it is killed and the sync counts as failed.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_period)]
    pub nft_timeout: Duration,
    /// Where `/healthz` and `/livez` are served (`IP:port`); empty turns them off.
    #[arg(long, value_name = "IP:PORT", default_value = "0.0.0.0:10256", value_parser = parse_bind_address)]
    pub healthz_bind_address: BindAddress,
    /// Where `/metrics`, `/healthz` and `/proxyMode` are served (`IP:port`); empty turns them off.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:10249", value_parser = parse_bind_address)]
    pub metrics_bind_address: BindAddress,
    /// Conntrack table entries per CPU; the table is raised to this times the CPUs (at
    /// least --conntrack-min), never lowered. 0 leaves it alone.
    #[arg(long, value_name = "N", default_value_t = 32768)]
    pub conntrack_max_per_core: u32,
    /// The smallest conntrack table --conntrack-max-per-core may ask for.
    #[arg(long, value_name = "N", default_value_t = 131072)]
    pub conntrack_min: u32,
    /// Idle timeout of established TCP connections (nf_conntrack_tcp_timeout_established); 0 leaves it alone.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    pub conntrack_tcp_timeout_established: Duration,
    /// Timeout of TCP connections in CLOSE_WAIT (nf_conntrack_tcp_timeout_close_wait); 0 leaves it alone.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub conntrack_tcp_timeout_close_wait: Duration,
    /// Accept TCP packets outside the window instead of marking them INVALID (nf_conntrack_tcp_be_liberal).
    #[arg(long)]
    pub conntrack_tcp_be_liberal: bool,
    /// Timeout of unreplied UDP flows (nf_conntrack_udp_timeout); 0 leaves it alone.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration)]
    pub conntrack_udp_timeout: Duration,
    /// Timeout of UDP flows that have seen replies (nf_conntrack_udp_timeout_stream); 0 leaves it alone.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration)]
    pub conntrack_udp_timeout_stream: Duration,
    /// Remove everything kube-nftproxy created, report upstream kube-proxy leftovers, and exit.
    #[arg(long)]
    pub cleanup: bool,
    /// With --cleanup: also remove upstream kube-proxy's tables and iptables KUBE-* chains.
    #[arg(long)]
    pub cleanup_kube_proxy: bool,
    /// After the first sync, remove what upstream kube-proxy left (as --cleanup-kube-proxy
    /// does); =false leaves it and only reports it. Upstream has no such flag: its modes clean
    /// up each other at start, which this does once its own rules are in.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub cleanup_kube_proxy_at_start: bool,
}

/// The longest period a flag takes: a year; longer ones would overflow timers.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// An address to serve on, or none (the flag given empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindAddress(pub Option<std::net::SocketAddr>);

/// Parses a bind address `IP:port`; empty means none.
pub fn parse_bind_address(s: &str) -> Result<BindAddress, String> {
    if s.trim().is_empty() {
        return Ok(BindAddress(None));
    }
    s.trim().parse().map(|a| BindAddress(Some(a))).map_err(|_| format!("{s:?} is not IP:port"))
}

/// Parses `500ms`, `30s`, `15m`, `1h` (or a bare number of seconds), at most `MAX_DURATION`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("{s:?} is not a duration like 500ms, 30s, 15m, 1h or 1h30m0s");
    // Number-unit pairs as Go writes them (`24h0m0s`, as kube-proxy's flags and
    // configuration take them); a bare number is seconds.
    let mut seconds = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let split = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, tail) = rest.split_at(split);
        let n: f64 = number.parse().map_err(|_| bad())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        seconds += n * match unit {
            "" if rest == s => 1.0,
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
        };
        rest = next;
    }
    if s.is_empty() {
        return Err(bad());
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!("{s:?} is longer than the longest period allowed ({}h)", MAX_DURATION.as_secs() / 3600)),
    }
}

/// A period that must not be zero (a zero full-sync period would sync fully without pause, a
/// zero timeout would fail every sync).
pub fn parse_period(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: must be longer than zero")),
        d => Ok(d),
    }
}

/// Whether `name` is a DNS-1123 subdomain, as Kubernetes requires of node names.
pub fn valid_node_name(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(crate::model::is_dns_label)
}

/// Where NodePort traffic is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodePortAddresses {
    /// The node's primary IP of each family (upstream nftables mode's default).
    Primary,
    /// Every local address but loopback (`0.0.0.0/0` / `::/0`).
    All,
    /// The node's addresses within these CIDRs; per family, a `/0` means all local
    /// addresses and no CIDR of that family means no NodePorts in that family.
    Cidrs(Vec<IpNet>),
}

/// How traffic from this node's pods is told apart (kube-proxy's detect-local modes); pod
/// traffic to a ClusterIP keeps its source, other traffic is masqueraded, and pod traffic to
/// an external IP of an `externalTrafficPolicy: Local` Service may use any endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetectLocal {
    /// Source within `Config::cluster_cidrs` (no detector when there are none).
    ClusterCidr,
    /// Source within the Node object's `spec.podCIDRs` (no detector until it has some).
    NodeCidr,
    /// Arrived on this interface (the bridge pods are attached to).
    BridgeInterface(String),
    /// Arrived on an interface whose name starts with this.
    InterfaceNamePrefix(String),
}

impl DetectLocal {
    /// Builds the detector from kube-proxy's mode name and its interface settings.
    pub fn new(mode: &str, bridge: &str, prefix: &str) -> Result<DetectLocal, String> {
        let interface = |what: &str, name: &str| {
            if valid_interface_name(name) {
                Ok(name.to_string())
            } else if name.is_empty() {
                Err(format!("{mode} needs {what}"))
            } else {
                Err(format!("{what} {name:?} is not an interface name (1 to 15 of A-Z a-z 0-9 . _ - @ :)"))
            }
        };
        match mode.trim() {
            "" | "ClusterCIDR" => Ok(DetectLocal::ClusterCidr),
            "NodeCIDR" => Ok(DetectLocal::NodeCidr),
            "BridgeInterface" => interface("a bridge interface", bridge).map(DetectLocal::BridgeInterface),
            "InterfaceNamePrefix" => {
                interface("an interface name prefix", prefix).map(DetectLocal::InterfaceNamePrefix)
            }
            other => {
                Err(format!("{other:?} is not a mode (ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix)"))
            }
        }
    }
}

/// Whether `name` can be an interface name (it is written into the ruleset's text).
pub fn valid_interface_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@' | b':'))
}

/// The validated configuration the renderer and sync loop use.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's name.
    pub node_name: String,
    /// Cluster pod CIDRs (what `DetectLocal::ClusterCidr` matches).
    pub cluster_cidrs: Vec<IpNet>,
    /// How traffic from this node's pods is told apart.
    pub detect_local: DetectLocal,
    /// NodePort address selection.
    pub nodeport_addresses: NodePortAddresses,
    /// Masquerade all service traffic.
    pub masquerade_all: bool,
    /// The masquerade mark (`1 << masquerade_bit`).
    pub masquerade_mark: u32,
}

impl Config {
    /// Validates flags into a configuration.
    pub fn from_flags(flags: &Flags) -> Result<Config, ConfigError> {
        // Upstream trims and lower-cases the name, then it must be a valid node name: it is
        // written into the script's header.
        let node_name = flags
            .hostname_override
            .as_deref()
            .map(|h| h.trim().to_lowercase())
            .filter(|h| !h.is_empty())
            .ok_or(ConfigError::MissingHostname)?;
        if !valid_node_name(&node_name) {
            return Err(ConfigError::BadHostname(node_name));
        }
        if flags.masquerade_bit > 31 {
            return Err(ConfigError::BadMasqueradeBit(flags.masquerade_bit));
        }
        Ok(Config {
            node_name,
            cluster_cidrs: parse_cidrs("cluster-cidr", &flags.cluster_cidr)?,
            detect_local: DetectLocal::new(
                &flags.detect_local_mode,
                &flags.pod_bridge_interface,
                &flags.pod_interface_name_prefix,
            )
            .map_err(ConfigError::BadDetectLocal)?,
            nodeport_addresses: nodeport_addresses(&flags.nodeport_addresses)?,
            masquerade_all: flags.masquerade_all,
            masquerade_mark: 1u32 << flags.masquerade_bit,
        })
    }
}

fn nodeport_addresses(values: &[String]) -> Result<NodePortAddresses, ConfigError> {
    let values: Vec<String> = values.iter().map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
    match values.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] | ["primary"] => return Ok(NodePortAddresses::Primary),
        ["all"] => return Ok(NodePortAddresses::All),
        _ => {}
    }
    Ok(NodePortAddresses::Cidrs(parse_cidrs("nodeport-addresses", &values)?))
}

fn parse_cidrs(flag: &'static str, values: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(|v| v.parse::<IpNet>().map(|n| n.trunc()).map_err(|_| ConfigError::BadCidr { flag, value: v.to_string() }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kube_proxy_writes_them() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs_f64());
        for (text, want) in [
            ("30", 30.0),
            ("1.5", 1.5),
            ("500ms", 0.5),
            ("15m", 900.0),
            ("24h0m0s", 86400.0),
            ("1h30m", 5400.0),
            ("1m30.5s", 90.5),
            ("250us", 0.00025),
        ] {
            assert_eq!(secs(text), Ok(want), "{text}");
        }
        for text in ["", "s", "-1s", "1d", "1h30", "inf", "1 s"] {
            assert!(parse_duration(text).is_err(), "{text:?} must be refused");
        }
        assert!(parse_period("0s").is_err());
    }
}
