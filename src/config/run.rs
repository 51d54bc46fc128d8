//! The second phase's whole answer: what the binary is to do and with what, validated from the
//! loaded flags, so that the binary reads no raw flag (a bad value is refused at start).

use super::content_type::ContentType;
use super::{Config, ConfigError, Flags, features};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Every setting the command line's [`Command`] needs, validated (`from_flags` gives both:
/// the command apart, so the binary can take its [`Config`] by value while it reads these).
#[derive(Debug, Clone)]
pub struct Run {
    /// How to reach the API server.
    pub api: ApiSettings,
    /// The sync loop's timing.
    pub periods: Periods,
    /// Where the HTTP endpoints are served.
    pub serve: Serve,
    /// What the daemon does to the node and its own process.
    pub node: NodeSettings,
    /// Where Services and Endpoints come from besides the API server.
    pub sources: Sources,
}

/// What the command line asks for; each command that renders carries its [`Config`].
#[derive(Debug, Clone)]
pub enum Command {
    /// `--write-config-to`: write the effective configuration there, then exit.
    WriteConfig(PathBuf),
    /// `explain`: where a connection goes, and why.
    Explain {
        /// The configuration the rules are rendered from.
        config: Box<Config>,
        /// `--from`.
        from: String,
        /// `--to`.
        to: String,
        /// `--protocol`.
        protocol: String,
        /// `--output json`.
        json: bool,
    },
    /// `trace`: follow matching connections through the kernel's rules as they happen.
    Trace {
        /// The configuration the daemon runs with (to name its rules and explain).
        config: Box<Config>,
        /// `--from`.
        from: Option<String>,
        /// `--to`.
        to: Option<String>,
        /// `--protocol`.
        protocol: Option<String>,
        /// `--count`.
        count: Option<u64>,
        /// `--timeout`.
        timeout: Option<std::time::Duration>,
        /// `--output json`.
        json: bool,
    },
    /// `--cleanup`: remove this proxy's tables (with `kube_proxy`, kube-proxy's rules too).
    Cleanup {
        /// `--cleanup-kube-proxy`.
        kube_proxy: bool,
    },
    /// `--dry-run`: print the script a full sync would apply (with `diff`, what it would change).
    DryRun {
        /// The configuration the rules are rendered from.
        config: Box<Config>,
        /// `--diff`.
        diff: bool,
        /// `--output json`.
        json: bool,
    },
    /// `--init-only`: the conntrack settings, then exit.
    InitOnly(Box<Config>),
    /// The proxy daemon.
    Daemon(Box<Config>),
}

/// How the API server is reached (the `--kube-api-*` flags, `--kubeconfig`, `--master`).
///
/// Its last six fields are also `kube::Settings`: `config` sits below `kube` (which takes
/// `ContentType` from here) so cannot name kube's type, and kube's carries client-go's
/// defaults for callers that have no flags (tests, the emulator's followers). They are copied
/// in one place, `kube::Settings::from`.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--master`.
    pub master: Option<String>,
    /// Objects per list page (at least 1).
    pub page_size: usize,
    /// The shortest watch timeout asked of the server.
    pub watch_timeout: Duration,
    /// Requests per second, sustained.
    pub qps: f32,
    /// Requests in a burst (a negative one was refused when the flags were loaded).
    pub burst: u32,
    /// The encoding asked for.
    pub content_type: ContentType,
    /// Whether the first state (and every relist) is streamed as a watch, client-go's
    /// WatchList (gate `WatchListClient`), falling back to a list where the server refuses.
    pub watch_list: bool,
}

/// Timing of the sync loop.
#[derive(Debug, Clone, Copy)]
pub struct Periods {
    /// The pace's period: syncing is bounded to what one full sync per period costs, and no
    /// change waits longer than this for the pace (`sync::pace`).
    pub min_sync: Duration,
    /// Longest wait before a failed sync is retried.
    pub sync: Duration,
    /// Interval of full syncs that repair drift.
    pub full_sync: Duration,
    /// The share of one core syncing often may take while changes keep coming (`--sync-share`).
    pub share: f64,
}

/// Where the HTTP endpoints are served (none: off).
#[derive(Debug, Clone, Copy)]
pub struct Serve {
    /// `/healthz` and `/livez`.
    pub healthz: Option<SocketAddr>,
    /// `/metrics` and the debug views.
    pub metrics: Option<SocketAddr>,
    /// `/statusz` (its feature gate).
    pub statusz: bool,
    /// `/flagz` (its feature gate).
    pub flagz: bool,
}

/// What the daemon does to the node and to its own process.
#[derive(Debug, Clone, Copy)]
pub struct NodeSettings {
    /// How long the first sync waits for this node's Node object.
    pub node_wait: Duration,
    /// The daemon's `oom_score_adj`.
    pub oom_score_adj: i32,
    /// Longest a helper command may run.
    pub nft_timeout: Duration,
    /// Remove what kube-proxy left once this proxy's rules are in.
    pub cleanup_kube_proxy_at_start: bool,
    /// The conntrack sysctls to set.
    pub conntrack: ConntrackSettings,
}

/// The conntrack sysctls to set, from kube-proxy's `--conntrack-*` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConntrackSettings {
    /// `--conntrack-max-per-core`.
    pub max_per_core: u32,
    /// `--conntrack-min`.
    pub min: u32,
    /// `--conntrack-tcp-timeout-established`.
    pub tcp_established: Duration,
    /// `--conntrack-tcp-timeout-close-wait`.
    pub tcp_close_wait: Duration,
    /// `--conntrack-tcp-be-liberal`.
    pub tcp_be_liberal: bool,
    /// `--conntrack-udp-timeout`.
    pub udp: Duration,
    /// `--conntrack-udp-timeout-stream`.
    pub udp_stream: Duration,
}

/// Sources other than the API server.
#[derive(Debug, Clone)]
pub struct Sources {
    /// `--manifests`.
    pub manifests: Option<PathBuf>,
    /// The `--config` file and the digest of its content as loaded, watched for changes.
    pub config_file: Option<(PathBuf, u64)>,
}

impl Run {
    /// Validates the loaded flags into what to run and with what. Commands that render (all
    /// but `--write-config-to` and `--cleanup`) validate the [`Config`] too.
    pub fn from_flags(flags: &Flags) -> Result<(Command, Run), ConfigError> {
        let content_type = ContentType::parse(&flags.kube_api_content_type)
            .map_err(|message| ConfigError::Invalid { what: "--kube-api-content-type".into(), message })?;
        let command = command(flags)?;
        let run = Run {
            api: ApiSettings {
                kubeconfig: flags.kubeconfig.clone(),
                master: flags.master.clone(),
                page_size: flags.list_page_size.max(1),
                watch_timeout: flags.watch_timeout,
                qps: flags.kube_api_qps,
                burst: u32::try_from(flags.kube_api_burst).unwrap_or_default(),
                content_type,
                watch_list: flags.feature_gates.enabled(features::WATCH_LIST_CLIENT),
            },
            periods: Periods {
                min_sync: flags.min_sync_period,
                sync: flags.sync_period,
                full_sync: flags.full_sync_period,
                share: flags.sync_share,
            },
            serve: Serve {
                healthz: flags.healthz_bind_address.0,
                metrics: flags.metrics_bind_address.0,
                statusz: flags.feature_gates.enabled(features::COMPONENT_STATUSZ),
                flagz: flags.feature_gates.enabled(features::COMPONENT_FLAGZ),
            },
            node: NodeSettings {
                node_wait: flags.node_wait,
                oom_score_adj: flags.oom_score_adj,
                nft_timeout: flags.nft_timeout,
                cleanup_kube_proxy_at_start: flags.cleanup_kube_proxy_at_start,
                conntrack: conntrack(flags),
            },
            sources: Sources {
                manifests: flags.manifests.clone(),
                config_file: flags.config.clone().zip(flags.config_digest),
            },
        };
        Ok((command, run))
    }
}

/// The command the flags ask for, in the order they win.
fn command(flags: &Flags) -> Result<Command, ConfigError> {
    let config = || Config::from_flags(flags).map(Box::new);
    let json = flags.output == "json";
    Ok(if let Some(path) = &flags.write_config_to {
        Command::WriteConfig(path.clone())
    } else if flags.command.as_deref() == Some("trace") {
        let (from, to, protocol) = (flags.from.clone(), flags.to.clone(), flags.protocol.clone());
        let (count, timeout) = (flags.count, flags.timeout);
        Command::Trace { config: config()?, from, to, protocol, count, timeout, json }
    } else if flags.command.is_some() {
        let (Some(from), Some(to)) = (&flags.from, &flags.to) else {
            return Err(ConfigError::ExplainNeeds);
        };
        if flags.count.is_some() || flags.timeout.is_some() {
            return Err(ConfigError::ExplainNeeds);
        }
        let (from, to) = (from.clone(), to.clone());
        let protocol = flags.protocol.clone().unwrap_or_else(|| "tcp".into());
        Command::Explain { config: config()?, from, to, protocol, json }
    } else if flags.cleanup {
        Command::Cleanup { kube_proxy: flags.cleanup_kube_proxy }
    } else if flags.dry_run {
        Command::DryRun { config: config()?, diff: flags.diff, json }
    } else if flags.init_only {
        Command::InitOnly(config()?)
    } else {
        Command::Daemon(config()?)
    })
}

/// The conntrack settings the flags ask for.
fn conntrack(flags: &Flags) -> ConntrackSettings {
    ConntrackSettings {
        max_per_core: flags.conntrack_max_per_core,
        min: flags.conntrack_min,
        tcp_established: flags.conntrack_tcp_timeout_established,
        tcp_close_wait: flags.conntrack_tcp_timeout_close_wait,
        tcp_be_liberal: flags.conntrack_tcp_be_liberal,
        udp: flags.conntrack_udp_timeout,
        udp_stream: flags.conntrack_udp_timeout_stream,
    }
}
