//! kube-proxy's flags that mean nothing to this proxy (other modes' and platforms' knobs,
//! profiling, log buffering): taken with kube-proxy's syntax and checks, so no command line
//! kube-proxy runs with is refused, and named once at start as having no effect.

use super::values::{parse_duration, parse_go_bool, parse_period, parse_quantity};
use clap::Args;
use std::time::Duration;

const HEADING: &str = "kube-proxy flags taken for compatibility, with no effect here";

/// The heading of the no-effect logging options: like kube-proxy's logging flags, they win
/// over `--config` (`ids` tells them by it).
const LOGGING_HEADING: &str = "klog's options taken for compatibility, with no effect here";

/// The no-effect flags (`Flags::no_effect`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = HEADING)]
pub struct NoEffect {
    /// kube-proxy: exit when a port cannot be bound (this proxy always exits).
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub bind_address_hard_fail: bool,
    /// kube-proxy: serve /debug/pprof.
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub profiling: bool,
    /// kube-proxy: show metrics hidden since this version (`1.35`).
    #[arg(long, value_name = "MAJOR.MINOR", default_value = "", value_parser = parse_version)]
    pub show_hidden_metrics_for_version: String,
    /// kube-proxy's iptables mode: answer NodePorts on 127.0.0.1 (never done in nftables mode).
    #[arg(long, value_name = "BOOL", default_value = "true", value_parser = parse_go_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub iptables_localhost_nodeports: bool,
    /// kube-proxy's IPVS mode: CIDRs its cleanup leaves alone.
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',')]
    pub ipvs_exclude_cidrs: Vec<String>,
    /// kube-proxy's IPVS mode: set arp_ignore and arp_announce.
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub ipvs_strict_arp: bool,
    /// kube-proxy's IPVS mode: idle TCP timeout.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub ipvs_tcp_timeout: Duration,
    /// kube-proxy's IPVS mode: TCP timeout after a FIN.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub ipvs_tcpfin_timeout: Duration,
    /// kube-proxy's IPVS mode: UDP timeout.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub ipvs_udp_timeout: Duration,
    /// kube-proxy: how often its informers resync (watches here never need it).
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_period)]
    pub config_sync_period: Duration,
    /// klog's text format: errors to stderr, the rest to stdout (needs LoggingAlphaOptions).
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = LOGGING_HEADING)]
    pub log_text_split_stream: bool,
    /// klog's text format: buffer for info lines (needs LoggingAlphaOptions).
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_quantity, help_heading = LOGGING_HEADING)]
    pub log_text_info_buffer_size: String,
    /// klog's JSON format: errors to stderr, the rest to stdout (needs LoggingAlphaOptions).
    #[arg(long, value_name = "BOOL", default_value = "false", value_parser = parse_go_bool,
          num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = LOGGING_HEADING)]
    pub log_json_split_stream: bool,
    /// klog's JSON format: buffer for info lines (needs LoggingAlphaOptions).
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_quantity, help_heading = LOGGING_HEADING)]
    pub log_json_info_buffer_size: String,
}

/// The no-effect flags' clap ids (their field names), as clap has them from `NoEffect`, each
/// with whether `--config` replaces it (all but the logging options, which win over it).
pub fn ids() -> Vec<(String, bool)> {
    NoEffect::augment_args(clap::Command::new("no-effect"))
        .get_arguments()
        .map(|a| (a.get_id().to_string(), a.get_help_heading() != Some(LOGGING_HEADING)))
        .collect()
}

/// The alpha logging options set away from their defaults (kube-proxy refuses them unless
/// the LoggingAlphaOptions gate is on), as flag names.
pub fn alpha_logging_options(n: &NoEffect) -> Vec<&'static str> {
    let mut set = Vec::new();
    if n.log_text_split_stream {
        set.push("--log-text-split-stream");
    }
    if n.log_json_split_stream {
        set.push("--log-json-split-stream");
    }
    if nonzero(&n.log_text_info_buffer_size) {
        set.push("--log-text-info-buffer-size");
    }
    if nonzero(&n.log_json_info_buffer_size) {
        set.push("--log-json-info-buffer-size");
    }
    set
}

/// Whether a quantity (`parse_quantity`'s) is more than zero.
fn nonzero(quantity: &str) -> bool {
    let number = quantity.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    number.parse::<f64>().is_ok_and(|n| n > 0.0)
}

/// `--show-hidden-metrics-for-version`: empty or `MAJOR.MINOR`.
fn parse_version(s: &str) -> Result<String, String> {
    let ok =
        s.is_empty() || s.split_once('.').is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
    if ok { Ok(s.to_string()) } else { Err(format!("{s:?} is not a version like 1.35")) }
}
