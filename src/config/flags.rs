//! The command line: kube-proxy's flag names, grouped as `--help` shows them, and the parsers
//! of their values.

use super::BindAddress;
use super::compat::NoEffect;
use super::features::FeatureGates;
use super::values::{
    parse_duration, parse_go_bool, parse_healthz_bind, parse_metrics_bind, parse_period, parse_proxy_mode,
    parse_service_proxy_name, parse_share, parse_vmodule,
};
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

const SOURCES: &str = "Where Services and Endpoints come from";
const NODE: &str = "This node";
const NFTABLES: &str = "Rules and syncing";
const SERVING: &str = "Health and metrics";
const CONNTRACK: &str = "Conntrack";
const RUN: &str = "Start, stop and clean up";
const LOGGING: &str = "Logging";
const EXPLAIN: &str = "Explain or trace a connection (`kube-nftproxy explain`, `kube-nftproxy trace`)";

/// `--version`: the version, then how the binary was built.
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("KUBE_NFTPROXY_COMMIT"),
    "\nbuilt by: ",
    env!("KUBE_NFTPROXY_RUSTC"),
    "\ntarget: ",
    env!("KUBE_NFTPROXY_TARGET"),
    " (",
    env!("KUBE_NFTPROXY_PROFILE"),
    " profile)",
);

/// The command line, with what `--config` sets (kube-proxy's flags are ignored when it is
/// given, as upstream: `load_from` resets them and the file fills them in).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kube-nftproxy",
    version,
    // As pflag: a flag given again takes the later value.
    args_override_self = true,
    long_version = LONG_VERSION,
    about = "Kubernetes service proxy on nftables, a drop-in for kube-proxy's nftables mode",
    after_help = "With --config, as with kube-proxy, the file replaces kube-proxy's flags given on the command \
                  line (each is named in a warning), except --hostname-override (or NODE_NAME) and the logging \
                  flags, which win; kube-nftproxy's own flags win over the file's kubeNftproxy section."
)]
pub struct Flags {
    /// A kube-proxy configuration file (KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1,
    /// YAML or JSON); kube-nftproxy's own settings go under its `kubeNftproxy:` key.
    #[arg(long, value_name = "FILE", help_heading = SOURCES)]
    pub config: Option<PathBuf>,
    /// Write the effective configuration (KubeProxyConfiguration YAML) to FILE and exit.
    #[arg(long, value_name = "FILE", help_heading = RUN)]
    pub write_config_to: Option<PathBuf>,
    /// A kubeconfig naming the API server and credentials (its current context is used).
    #[arg(long, value_name = "FILE", help_heading = SOURCES)]
    pub kubeconfig: Option<PathBuf>,
    /// The API server's URL, overriding the kubeconfig's server.
    #[arg(long, value_name = "URL", help_heading = SOURCES)]
    pub master: Option<String>,
    /// Content type of requests to the API server.
    #[arg(long, value_name = "TYPE", default_value = "application/vnd.kubernetes.protobuf", help_heading = SOURCES)]
    pub kube_api_content_type: String,
    /// Requests per second to the API server, sustained.
    #[arg(long, value_name = "QPS", default_value_t = 5.0, allow_negative_numbers = true, help_heading = SOURCES)]
    pub kube_api_qps: f32,
    /// Requests to the API server in a burst.
    #[arg(long, value_name = "N", default_value_t = 10, allow_negative_numbers = true, help_heading = SOURCES)]
    pub kube_api_burst: i32,
    /// The file's `clientConnection.acceptContentTypes` (no flag, as upstream).
    #[arg(skip)]
    pub kube_api_accept_content_types: String,
    /// A file or directory of YAML/JSON manifests (Services, EndpointSlices, this Node; `kind: List` too).
    #[arg(long, value_name = "PATH", help_heading = SOURCES)]
    pub manifests: Option<PathBuf>,
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

    /// This node's name, as in its Node object and EndpointSlice `nodeName` (default: the host name).
    #[arg(long, value_name = "NODE", env = "NODE_NAME", help_heading = NODE)]
    pub hostname_override: Option<String>,
    /// This node's primary IP when it is not 0.0.0.0 or ::, instead of the Node object's
    /// address of that family (NodePorts on `primary`).
    #[arg(long, value_name = "IP", default_value = "0.0.0.0", help_heading = NODE)]
    pub bind_address: String,
    /// Pod CIDRs of the cluster (comma separated, one per family), for --detect-local-mode=ClusterCIDR.
    #[arg(long, value_name = "CIDR[,CIDR]", value_delimiter = ',', help_heading = NODE)]
    pub cluster_cidr: Vec<String>,
    /// How traffic from this node's pods is told apart: `ClusterCIDR` (source in
    /// --cluster-cidr), `NodeCIDR` (source in the Node's spec.podCIDRs), `BridgeInterface`
    /// (arrived on --pod-bridge-interface) or `InterfaceNamePrefix` (arrived on an interface
    /// named --pod-interface-name-prefix*).
    #[arg(long, value_name = "MODE", default_value = "ClusterCIDR", help_heading = NODE)]
    pub detect_local_mode: String,
    /// The bridge pods are attached to, with --detect-local-mode=BridgeInterface.
    #[arg(long, value_name = "NAME", default_value = "", help_heading = NODE)]
    pub pod_bridge_interface: String,
    /// The name prefix of pods' interfaces on the host, with --detect-local-mode=InterfaceNamePrefix.
    #[arg(long, value_name = "PREFIX", default_value = "", help_heading = NODE)]
    pub pod_interface_name_prefix: String,
    /// Where NodePorts are served: `primary` (the node's primary IPs, the default), `all`, or a CIDR list.
    #[arg(long, value_name = "primary|all|CIDR,...", value_delimiter = ',', default_value = "primary", help_heading = NODE)]
    pub nodeport_addresses: Vec<String>,

    /// kube-proxy's mode: `nftables`, `iptables`, `ipvs` or empty; each is served by this
    /// proxy with nftables (`iptables` and `ipvs` with a warning). Others are refused.
    #[arg(long, value_name = "MODE", value_parser = parse_proxy_mode, help_heading = NFTABLES)]
    pub proxy_mode: Option<String>,
    /// Masquerade all traffic sent to ClusterIPs.
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", help_heading = NFTABLES)]
    pub masquerade_all: bool,
    /// The bit of the packet mark used to flag packets for masquerading (0 to 31).
    #[arg(long = "iptables-masquerade-bit", alias = "masquerade-bit", value_name = "BIT", default_value_t = 14,
          help_heading = NFTABLES)]
    pub masquerade_bit: u8,
    /// kube-proxy's minSyncPeriod: bounds the time spent syncing to what one full sync per
    /// period costs; cheap changes go at once, and none waits longer than this for the pace.
    /// At most the sync period. Not in ipvs mode, where --ipvs-min-sync-period sets it.
    #[arg(long = "iptables-min-sync-period", alias = "min-sync-period", value_name = "DURATION", default_value = "1s",
          value_parser = parse_duration, help_heading = NFTABLES)]
    pub min_sync_period: Duration,
    /// kube-proxy's syncPeriod: the longest wait before a failed sync is retried (retries
    /// back off up to this; kube-proxy retries after it too), and half the time a pending
    /// change may wait before /healthz fails. Not in ipvs mode, where --ipvs-sync-period sets it.
    #[arg(long = "iptables-sync-period", alias = "sync-period", value_name = "DURATION", default_value = "30s",
          value_parser = parse_period, help_heading = NFTABLES)]
    pub sync_period: Duration,
    /// The sync period in ipvs mode (ignored in other modes, as by kube-proxy).
    #[arg(long, value_name = "DURATION", value_parser = parse_period, help_heading = NFTABLES)]
    pub ipvs_sync_period: Option<Duration>,
    /// The minimum sync period in ipvs mode (ignored in other modes, as by kube-proxy).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = NFTABLES)]
    pub ipvs_min_sync_period: Option<Duration>,
    /// kube-proxy's IPVS scheduler; read and checked in ipvs mode, the node's default scheduler.
    #[arg(long, value_name = "NAME", default_value = "", help_heading = NFTABLES)]
    pub ipvs_scheduler: String,
    /// Feature gates, `Name=true|false` separated by commas (kube-proxy's names).
    #[arg(long = "feature-gates", value_name = "NAME=BOOL,...", value_parser = FeatureGates::parse,
          action = clap::ArgAction::Append, help_heading = NFTABLES)]
    pub feature_gates_given: Vec<FeatureGates>,
    /// The feature gates in force: every `--feature-gates` merged, or the file's `featureGates`.
    #[arg(skip)]
    pub feature_gates: FeatureGates,
    /// Interval of refreshes: the tables read and compared with what they should hold, and
    /// what differs sent, repairing any drift.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_period, help_heading = NFTABLES)]
    pub full_sync_period: Duration,
    /// The share of one core that syncing often may take while changes keep coming: each sync's
    /// fixed cost is followed by a rest that keeps it within that share, so a steady stream of
    /// changes is applied several at a time, while an isolated change still goes at once and a
    /// burst of big syncs is paced by the min-sync-period's bound alone. 1 leaves that bound
    /// alone.
    #[arg(long, value_name = "SHARE", default_value = "0.08", value_parser = parse_share, help_heading = NFTABLES)]
    pub sync_share: f64,
    /// Longest a helper command may run before it is killed: `nft --version` (at most 10s; the
    /// version is only logged) and `iptables-legacy-save` (looking for kube-proxy's legacy
    /// chains). Syncs and the takeover go over netlink and run none.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_period, help_heading = NFTABLES)]
    pub nft_timeout: Duration,

    /// Where `/healthz` and `/livez` are served (`IP:port`, or an IP on port 10256); empty turns
    /// them off. `[::]:10256` when --bind-address is IPv6. `0.0.0.0` serves IPv6 too.
    #[arg(long, value_name = "IP:PORT", default_value = "0.0.0.0:10256", value_parser = parse_healthz_bind, help_heading = SERVING)]
    pub healthz_bind_address: BindAddress,
    /// Where `/metrics`, `/healthz`, `/proxyMode` and the debug views (`/debug/ruleset`,
    /// `/debug/services`) are served (`IP:port`, or an IP on port 10249); empty turns them
    /// off. `[::1]:10249` when --bind-address is IPv6.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:10249", value_parser = parse_metrics_bind, help_heading = SERVING)]
    pub metrics_bind_address: BindAddress,
    /// Deprecated (kube-proxy's): the health port; 0 turns /healthz off.
    #[arg(long, value_name = "PORT", hide = true, allow_negative_numbers = true)]
    pub healthz_port: Option<i32>,
    /// Deprecated (kube-proxy's): the metrics port; 0 turns the metrics server off.
    #[arg(long, value_name = "PORT", hide = true, allow_negative_numbers = true)]
    pub metrics_port: Option<i32>,

    /// Conntrack table entries per CPU; the table is raised to this times the CPUs (at
    /// least --conntrack-min), never lowered. 0 leaves it alone.
    #[arg(long, value_name = "N", default_value_t = 32768, help_heading = CONNTRACK)]
    pub conntrack_max_per_core: u32,
    /// The smallest conntrack table --conntrack-max-per-core may ask for.
    #[arg(long, value_name = "N", default_value_t = 131072, help_heading = CONNTRACK)]
    pub conntrack_min: u32,
    /// Idle timeout of established TCP connections (nf_conntrack_tcp_timeout_established); 0 leaves it alone.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration, help_heading = CONNTRACK)]
    pub conntrack_tcp_timeout_established: Duration,
    /// Timeout of TCP connections in CLOSE_WAIT (nf_conntrack_tcp_timeout_close_wait); 0 leaves it alone.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration, help_heading = CONNTRACK)]
    pub conntrack_tcp_timeout_close_wait: Duration,
    /// Accept TCP packets outside the window instead of marking them INVALID (nf_conntrack_tcp_be_liberal).
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", help_heading = CONNTRACK)]
    pub conntrack_tcp_be_liberal: bool,
    /// Timeout of unreplied UDP flows (nf_conntrack_udp_timeout); 0 leaves it alone.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration, help_heading = CONNTRACK)]
    pub conntrack_udp_timeout: Duration,
    /// Timeout of UDP flows that have seen replies (nf_conntrack_udp_timeout_stream); 0 leaves it alone.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = parse_duration, help_heading = CONNTRACK)]
    pub conntrack_udp_timeout_stream: Duration,

    /// Print the nftables script a full sync would apply, then exit without touching the kernel.
    #[arg(long, help_heading = RUN)]
    pub dry_run: bool,
    /// With --dry-run: print what a sync would change in the kernel's current tables (grouped
    /// by service) instead of the script, changing nothing; exit status 0 when there is no
    /// difference, 1 when there is one, 2 on trouble (as `diff`).
    #[arg(long, requires = "dry_run", help_heading = RUN)]
    pub diff: bool,
    /// How `explain`, `trace` and `--dry-run --diff` print their answer: `text` (aligned, for
    /// people) or `json` (for scripts; `trace`: an object per line; README, Seeing what the
    /// proxy does).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"], help_heading = RUN)]
    pub output: String,
    /// Remove everything kube-nftproxy created, report upstream kube-proxy leftovers, and exit.
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", help_heading = RUN)]
    pub cleanup: bool,
    /// With --cleanup: also remove upstream kube-proxy's tables and iptables KUBE-* chains.
    #[arg(long, help_heading = RUN)]
    pub cleanup_kube_proxy: bool,
    /// After the first sync, remove what upstream kube-proxy left (as --cleanup-kube-proxy
    /// does); =false leaves it and only reports it. Upstream has no such flag: its modes clean
    /// up each other at start, which this does once its own rules are in.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", help_heading = RUN)]
    pub cleanup_kube_proxy_at_start: bool,
    /// The daemon's OOM score adjustment (/proc/self/oom_score_adj), within -1000..=1000.
    #[arg(long, value_name = "N", default_value_t = -999, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-1000..=1000), help_heading = RUN)]
    pub oom_score_adj: i32,
    /// Set the conntrack sysctls, which need a writable /proc/sys and /sys, then exit (as
    /// kube-proxy's flag): run it in a privileged init container, then the daemon with
    /// CAP_NET_ADMIN alone.
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", help_heading = RUN)]
    pub init_only: bool,

    /// Log verbosity as kube-proxy's -v: 0-2 info, 3-4 debug, 5 and up trace (default:
    /// RUST_LOG, else info).
    #[arg(short = 'v', long = "v", value_name = "N", help_heading = LOGGING)]
    pub verbosity: Option<u32>,
    /// The log format: `text` or `json` (klog's formats).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"], help_heading = LOGGING)]
    pub logging_format: String,
    /// klog's flush interval (each line is written at once here: no effect).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help_heading = LOGGING)]
    pub log_flush_frequency: Duration,
    /// klog's per-file levels, `pattern=N,...` (no effect: RUST_LOG sets per-module levels).
    #[arg(long, value_name = "PATTERN=N,...", value_parser = parse_vmodule, help_heading = LOGGING)]
    pub vmodule: Option<String>,

    /// `explain`: say where a connection from --from to --to goes through the rules this node
    /// would apply, and why, then exit. `trace`: follow the new connections that match
    /// --from, --to and --protocol through the rules the kernel holds, as they happen, until
    /// Ctrl-C, --count or --timeout.
    #[arg(value_name = "COMMAND", value_parser = ["explain", "trace"], conflicts_with_all = ["dry_run", "cleanup", "init_only"],
          help_heading = EXPLAIN)]
    pub command: Option<String>,
    /// The connection's source: a pod IP, `node` (this node itself), or an outside address; `IP:PORT`
    /// gives the client's port too (what `sh-port`/`mh-port` schedulers hash). For `trace`, an
    /// address or `IP:PORT` that selects.
    #[arg(long, value_name = "SRC", requires = "command", help_heading = EXPLAIN)]
    pub from: Option<String>,
    /// The connection's destination, `IP:PORT` (`[IPv6]:PORT`); for `trace`, an address or
    /// `IP:PORT` that selects.
    #[arg(long, value_name = "IP:PORT", requires = "command", help_heading = EXPLAIN)]
    pub to: Option<String>,
    /// The connection's protocol (`explain`: tcp when not given; `trace`: any of the three).
    #[arg(long, value_name = "PROTO", value_parser = ["tcp", "udp", "sctp"], help_heading = EXPLAIN)]
    pub protocol: Option<String>,
    /// `trace`: stop after this many connections.
    #[arg(long, value_name = "N", requires = "command", value_parser = clap::value_parser!(u64).range(1..),
          help_heading = EXPLAIN)]
    pub count: Option<u64>,
    /// `trace`: stop after this long (`30s`, `5m`).
    #[arg(long, value_name = "DURATION", requires = "command", value_parser = parse_duration, help_heading = EXPLAIN)]
    pub timeout: Option<Duration>,

    /// Print what packages install beside the binary, generated from this command line, and
    /// exit: `man` (the kube-nftproxy(8) page, roff), or the completions for `bash`, `zsh` or
    /// `fish`.
    #[arg(long, hide = true, value_name = "WHAT", value_parser = ["man", "bash", "zsh", "fish"],
          conflicts_with_all = ["dry_run", "cleanup", "init_only", "command"])]
    pub generate: Option<String>,

    /// The digest of the `--config` file's content as it was loaded (`watch::digest`): a
    /// change is told from this, not from the file when the watch starts.
    #[arg(skip)]
    pub config_digest: Option<u64>,

    /// kube-proxy's flags with no effect here.
    #[command(flatten)]
    pub no_effect: NoEffect,

    /// Serve only the Services labelled `service.kubernetes.io/service-proxy-name=NAME` (which
    /// kube-proxy leaves alone) and touch nothing else: kube-proxy's rules stay, so Services
    /// can move over one at a time beside it (README, Canary beside kube-proxy). Not upstream's.
    #[arg(long, value_name = "NAME", value_parser = parse_service_proxy_name, help_heading = NODE)]
    pub service_proxy_name: Option<String>,
}

impl Flags {
    /// The log level `-v N` asks for, if it was given.
    pub fn log_level(&self) -> Option<log::LevelFilter> {
        self.verbosity.map(crate::logging::level_for)
    }

    /// Whether these flags run the daemon, not a command that does one thing and exits
    /// (`explain`, `trace`, `--dry-run`, `--cleanup`, `--write-config-to`, `--init-only`,
    /// `--generate`).
    pub fn runs_daemon(&self) -> bool {
        let one_shot = self.dry_run || self.cleanup || self.init_only || self.generate.is_some();
        self.command.is_none() && self.write_config_to.is_none() && !one_shot
    }
}
