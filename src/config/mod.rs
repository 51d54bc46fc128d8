//! The configuration: kube-proxy's flags and configuration file, merged and validated into
//! what the renderer and the sync loop use.

pub mod compat;
pub mod content_type;
mod effective;
pub mod features;
mod file;
mod flags;
pub mod help;
mod internal;
mod load;
mod run;
mod schema;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_upstream;
mod values;
pub mod watch;

pub use content_type::ContentType;
pub use effective::{effective, write_config};
pub use features::FeatureGates;
pub use file::{API_VERSION, FileSettings, KIND};
pub use flags::Flags;
pub use internal::internal;
pub use load::{CONFIG_BOUND, Notes, load_from};
pub use run::{ApiSettings, Command, ConntrackSettings, NodeSettings, Periods, Run, Serve, Sources};
pub use values::*;

use ipnet::IpNet;
use std::path::PathBuf;

/// Errors in the flags or the configuration file; they stop the program before it touches
/// anything.
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
    #[error("--iptables-masquerade-bit must be within 0..=31, got {0}")]
    BadMasqueradeBit(u8),
    /// The node name is needed to tell local endpoints apart.
    #[error("--hostname-override is required: the host name could not be read")]
    MissingHostname,
    /// The command line itself is wrong (or asks for help or the version).
    #[error("{0}")]
    Usage(#[from] clap::Error),
    /// The configuration file cannot be read, or is not a kube-proxy configuration.
    #[error("--config {path:?}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A field of the configuration file holds a value kube-proxy would refuse.
    #[error("--config: {field}: {message}")]
    Field {
        /// The field's path, as the file spells it (`nftables.masqueradeBit`).
        field: String,
        /// What is wrong with its value.
        message: String,
    },
    /// The bind address is not an IP.
    #[error("--bind-address: {0:?} is not an IP address")]
    BadBindAddress(String),
    /// The local-traffic detector is unknown or lacks what it needs.
    #[error("--detect-local-mode: {0}")]
    BadDetectLocal(String),
    /// The shortest time between syncs is longer than the longest (upstream's validation).
    #[error("{min_name} {min:?} must not be longer than {sync_name} {sync:?}")]
    MinSyncPeriodAboveSyncPeriod {
        /// The flag or field that set the minimum sync period.
        min_name: String,
        /// The minimum sync period in force.
        min: std::time::Duration,
        /// The flag or field that set the sync period.
        sync_name: String,
        /// The sync period in force.
        sync: std::time::Duration,
    },
    /// A value kube-proxy's validation refuses, named by its flag or the file's field.
    #[error("{what}: {message}")]
    Invalid {
        /// `--flag` or the file's field path.
        what: String,
        /// What is wrong.
        message: String,
    },
    /// `--write-config-to` could not write its file.
    #[error("--write-config-to {path:?}: {message}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The node name is not one Kubernetes accepts (it reaches the script's text).
    #[error(
        "--hostname-override: {0:?} is not a valid node name (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', at most 253 characters)"
    )]
    BadHostname(String),
    /// The `--config` file's content changed on disk while the daemon ran (`watch`); the
    /// daemon ends with it, as kube-proxy, for its supervisor to start it on the new file.
    #[error("content of the proxy server's configuration file was updated ({0:?}); exiting, as kube-proxy")]
    Changed(PathBuf),
    /// `explain` without the connection to explain.
    #[error(
        "explain needs --from SRC (a pod IP, `node`, or an outside address) and --to IP:PORT, and takes no --count or --timeout (trace's)"
    )]
    ExplainNeeds,
}

/// Where NodePort traffic is accepted: upstream's list of keywords and CIDRs, expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePortAddresses {
    /// `primary` (alone, the default): the node's primary IP of each family.
    pub primary: bool,
    /// The CIDRs, with `all` as `0.0.0.0/0` and `::/0` and `localhost` as `127.0.0.0/8` and
    /// `::1/128`. Per family, a `/0`, or no CIDR and no primary IP, means every local address.
    pub cidrs: Vec<IpNet>,
}

impl NodePortAddresses {
    /// Upstream nftables mode's default: `primary` alone.
    pub fn is_primary(&self) -> bool {
        self.primary && self.cidrs.is_empty()
    }

    /// Whether a CIDR of `family` names loopback (`localhost`, `127.0.0.1/32`, `::1/128`):
    /// what asks for localhost NodePorts in that family, as upstream. `all` does not, though
    /// it contains loopback.
    pub fn names_loopback(&self, family: crate::model::Family) -> bool {
        self.cidrs.iter().any(|c| crate::model::Family::of(&c.addr()) == family && c.addr().is_loopback())
    }
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

/// The validated configuration the renderer and sync loop use.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's name.
    pub node_name: String,
    /// Cluster pod CIDRs (what `DetectLocal::ClusterCidr` matches).
    pub cluster_cidrs: Vec<IpNet>,
    /// How traffic from this node's pods is told apart.
    pub detect_local: DetectLocal,
    /// This node's primary IP as `--bind-address` names it (none when unspecified, `0.0.0.0`
    /// or `::`): it stands for the Node object's address of its family.
    pub bind_address: Option<std::net::IpAddr>,
    /// NodePort address selection.
    pub nodeport_addresses: NodePortAddresses,
    /// Masquerade all service traffic.
    pub masquerade_all: bool,
    /// The masquerade mark (`1 << masquerade_bit`).
    pub masquerade_mark: u32,
    /// `--service-proxy-name`: serve only the Services labelled with this name, beside
    /// kube-proxy (no takeover, no node-wide rule that could catch its traffic).
    pub service_proxy_name: Option<String>,
    /// Whether Services' `externalIPs` are served: the AllowServiceExternalIPs feature gate
    /// (on by default; kube-proxy stops programming them when it is off).
    pub external_ips: bool,
    /// Whether NodePorts are served on `127.0.0.1` / `::1` where `nodeport_addresses` names
    /// loopback: the KubeProxyNFTablesLocalhostNodePorts gate.
    pub localhost_nodeports: bool,
    /// The node's default scheduler: kube-proxy's IPVS scheduler (`--ipvs-scheduler`,
    /// `ipvs.scheduler`), read in ipvs mode only as upstream does; random otherwise, and
    /// for the empty name. A Service's annotation overrides it.
    pub scheduler: crate::model::Scheduler,
}

impl Config {
    /// Validates flags into a configuration.
    pub fn from_flags(flags: &Flags) -> Result<Config, ConfigError> {
        // Upstream trims and lower-cases the name, then it must be a valid node name: it is
        // written into the script's header. An empty override is no override, as upstream.
        let node_name = flags
            .hostname_override
            .clone()
            .filter(|h| !h.is_empty())
            .or_else(host_name)
            .map(|h| h.trim().to_lowercase())
            .filter(|h| !h.is_empty())
            .ok_or(ConfigError::MissingHostname)?;
        if !valid_node_name(&node_name) {
            return Err(ConfigError::BadHostname(node_name));
        }
        if flags.masquerade_bit > 31 {
            return Err(ConfigError::BadMasqueradeBit(flags.masquerade_bit));
        }
        let bind = flags.bind_address.trim();
        let bind_address = match bind.parse::<std::net::IpAddr>() {
            Ok(ip) => Some(ip).filter(|ip| !ip.is_unspecified()),
            Err(_) if bind.is_empty() => None,
            Err(_) => return Err(ConfigError::BadBindAddress(bind.to_string())),
        };
        Ok(Config {
            node_name,
            bind_address,
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
            service_proxy_name: flags.service_proxy_name.clone(),
            external_ips: gates(flags).enabled(features::ALLOW_SERVICE_EXTERNAL_IPS),
            localhost_nodeports: gates(flags).enabled(features::LOCALHOST_NODE_PORTS),
            scheduler: match flags.proxy_mode.as_deref() {
                // The name was checked against kube-proxy's list when the flags were loaded.
                Some("ipvs") => {
                    crate::model::Scheduler::parse(&flags.ipvs_scheduler, "").map(|(s, _)| s).unwrap_or_default()
                }
                _ => crate::model::Scheduler::Random,
            },
        })
    }
}

/// The feature gates in force: the file's or the merged `--feature-gates` (`load_from` merges
/// them; flags parsed without it still count).
fn gates(flags: &Flags) -> FeatureGates {
    let mut gates = flags.feature_gates.clone();
    flags.feature_gates_given.iter().for_each(|g| gates.merge(g.clone()));
    gates
}

/// The host's name, which kube-proxy takes as the node's name when none is given.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok()
}

fn nodeport_addresses(values: &[String]) -> Result<NodePortAddresses, ConfigError> {
    let mut out = NodePortAddresses { primary: false, cidrs: Vec::new() };
    let mut rest = Vec::new();
    for v in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
        match v {
            "primary" => out.primary = true,
            "all" => out.cidrs.extend(["0.0.0.0/0", "::/0"].into_iter().flat_map(str::parse::<IpNet>)),
            "localhost" => out.cidrs.extend(["127.0.0.0/8", "::1/128"].into_iter().flat_map(str::parse::<IpNet>)),
            cidr => rest.push(cidr.to_string()),
        }
    }
    out.cidrs.extend(parse_cidrs("nodeport-addresses", &rest)?);
    out.primary |= out.cidrs.is_empty();
    Ok(out)
}

fn parse_cidrs(flag: &'static str, values: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(|v| v.parse::<IpNet>().map(|n| n.trunc()).map_err(|_| ConfigError::BadCidr { flag, value: v.to_string() }))
        .collect()
}
