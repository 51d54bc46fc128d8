//! `--config`: kube-proxy's configuration file (`KubeProxyConfiguration`,
//! `kubeproxy.config.k8s.io/v1alpha1`, YAML or JSON), read into the flags it stands for.
//!
//! A value the file leaves out, null or zero takes kube-proxy's default, as its defaulting
//! does, so the file kubeadm writes (every field present, most zero) means what it means to
//! kube-proxy. The periods and masquerading come from the mode's section, as upstream's
//! conversion reads them; fields with no effect here are named, and any unknown field is a
//! warning naming it (kube-proxy's lenient decoding).

use super::features::FeatureGates;
use super::schema::{ClientConnection, GoDuration, KubeProxyConfiguration};
use super::values::{
    parse_healthz_bind, parse_metrics_bind, parse_proxy_mode, parse_service_proxy_name, valid_node_name,
};
use super::{ConfigError, Flags};
use crate::input;
use ipnet::IpNet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file's `apiVersion`.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";

/// The file's `kind`.
pub const KIND: &str = "KubeProxyConfiguration";

/// What a configuration file said: the flags it sets, and the fields it held that nothing reads.
#[derive(Debug)]
pub struct FileSettings {
    file: KubeProxyConfiguration,
    /// Fields of the file this proxy does not know (paths like `nftables.foo`).
    pub unknown_fields: Vec<String>,
    /// The digest of the content read (`watch::digest`), the watcher's baseline.
    pub digest: u64,
}

impl FileSettings {
    /// The file's fields that have no effect here and hold a value other than kube-proxy's
    /// "unset" (kubeadm writes them all, empty), by path.
    pub fn no_effect_fields(&self) -> Vec<String> {
        self.file.no_effect_fields()
    }
}

/// Reads and checks a configuration file.
pub fn read(path: &Path) -> Result<FileSettings, ConfigError> {
    let bad = |message: String| ConfigError::File { path: path.to_path_buf(), message };
    let text = input::read_text(path, input::CONFIG).map_err(|e| bad(e.to_string()))?;
    // JSON is YAML, so one parser reads both. Its errors are told by place, not by the text
    // there (the same rule as for a kubeconfig, which holds credentials).
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let value: serde_json::Value = serde_saphyr::from_str_with_options(&text, options)
        .map_err(|e| bad(format!("not YAML or JSON: {}", input::yaml_error(&e))))?;
    let mut unknown_fields = Vec::new();
    let mut note = |field: serde_ignored::Path| unknown_fields.push(field.to_string());
    let ignoring = serde_ignored::Deserializer::new(value, &mut note);
    let file: KubeProxyConfiguration = serde_path_to_error::deserialize(ignoring)
        .map_err(|e| bad(format!("{}: {}", e.path(), input::serde_message(&e.inner().to_string()))))?;
    match (file.api_version.as_deref(), file.kind.as_deref()) {
        (Some(API_VERSION), Some(KIND)) => {
            Ok(FileSettings { file, unknown_fields, digest: super::watch::digest(text.as_bytes()) })
        }
        (v, k) => Err(bad(format!("apiVersion {v:?} kind {k:?}: expected {API_VERSION} {KIND}"))),
    }
}

/// The flags being filled from the file: those the command line gave stay, and the ids of
/// those the file set are noted (a default that depends on another setting must know).
struct Merge<'a, G> {
    flags: &'a mut Flags,
    given: G,
    filed: Vec<&'static str>,
}

/// Sets flag `$flag` to a file value that is present and not kube-proxy's "unset", unless the
/// command line gave that flag.
macro_rules! set {
    ($m:ident, $flag:ident, $value:expr) => {
        if let Some(v) = $value {
            if !($m.given)(stringify!($flag)) {
                $m.flags.$flag = v;
                $m.filed.push(stringify!($flag));
            }
        }
    };
}

impl FileSettings {
    /// Writes what the file sets into `flags`, except where `given(id)` says the command line
    /// (or the environment) set that flag: those win. Returns the ids of the flags the file
    /// set. A value kube-proxy would refuse is an error naming its field.
    pub fn apply(self, flags: &mut Flags, given: impl Fn(&str) -> bool) -> Result<Vec<&'static str>, ConfigError> {
        let f = self.file;
        let mut m = Merge { flags, given, filed: Vec::new() };
        let mode = text(&f.mode).map(|mode| parse_proxy_mode(&mode)).transpose().map_err(|e| field("mode", e))?;
        set!(m, proxy_mode, mode.map(Some));
        node(&f, &mut m)?;
        mode_sections(&f, &mut m)?;
        let c = &f.conntrack;
        set!(
            m,
            conntrack_max_per_core,
            checked(("conntrack.maxPerCore", "must not be negative"), c.max_per_core, |n| u32::try_from(n).ok())?
        );
        set!(m, conntrack_min, checked(("conntrack.min", "must not be negative"), c.min, |n| u32::try_from(n).ok())?);
        set!(m, conntrack_tcp_timeout_established, c.tcp_established_timeout.map(|d| d.0));
        set!(m, conntrack_tcp_timeout_close_wait, c.tcp_close_wait_timeout.map(|d| d.0));
        set!(m, conntrack_tcp_be_liberal, c.tcp_be_liberal);
        set!(m, conntrack_udp_timeout, c.udp_timeout.map(|d| d.0));
        set!(m, conntrack_udp_timeout_stream, c.udp_stream_timeout.map(|d| d.0));
        client(&f.client_connection, &mut m)?;
        let oom = checked(("oomScoreAdj", "must be within -1000..=1000"), f.oom_score_adj, |n| {
            (-1000..=1000).contains(&n).then_some(n)
        })?;
        set!(m, oom_score_adj, oom);
        set!(m, feature_gates, f.feature_gates.clone().map(FeatureGates));
        let verbosity = f.logging.verbosity.filter(|v| *v > 0).map(Some);
        set!(m, verbosity, verbosity);
        let format = checked(("logging.format", "must be text or json"), text(&f.logging.format), |f| {
            matches!(f.as_str(), "text" | "json").then_some(f)
        })?;
        set!(m, logging_format, format);
        let own = &f.kube_nftproxy;
        set!(m, manifests, text(&own.manifests).map(|p| Some(PathBuf::from(p))));
        set!(m, full_sync_period, nonzero(own.full_sync_period));
        let share = checked(("kubeNftproxy.syncShare", "must be above 0 and at most 1"), own.sync_share, |v| {
            (v > 0.0 && v <= 1.0).then_some(v)
        })?;
        set!(m, sync_share, share);
        set!(m, nft_timeout, nonzero(own.nft_timeout));
        set!(m, cleanup_kube_proxy_at_start, own.cleanup_kube_proxy_at_start);
        let name = text(&own.service_proxy_name).map(|n| parse_service_proxy_name(&n).map(Some));
        set!(m, service_proxy_name, name.transpose().map_err(|e| field("kubeNftproxy.serviceProxyName", e))?);
        Ok(m.filed)
    }
}

/// The periods and masquerading from the section of the file's mode, as upstream's
/// conversion reads them: `nftables` in nftables mode, `ipvs`'s periods and `iptables`'s
/// masquerading in ipvs mode, `iptables` otherwise; and the IPVS scheduler.
fn mode_sections<G: Fn(&str) -> bool>(f: &KubeProxyConfiguration, m: &mut Merge<'_, G>) -> Result<(), ConfigError> {
    let mode = text(&f.mode).unwrap_or_default();
    let (masq, masq_name) = if mode == "nftables" { (&f.nftables, "nftables") } else { (&f.iptables, "iptables") };
    let (sync, min) = match mode.as_str() {
        "nftables" => (f.nftables.sync_period, f.nftables.min_sync_period),
        "ipvs" => (f.ipvs.sync_period, f.ipvs.min_sync_period),
        _ => (f.iptables.sync_period, f.iptables.min_sync_period),
    };
    set!(m, masquerade_all, masq.masquerade_all);
    let bit_name = format!("{masq_name}.masqueradeBit");
    let bit = checked((&bit_name, "must be within 0..=31"), masq.masquerade_bit, |b| {
        u8::try_from(b).ok().filter(|b| *b <= 31)
    })?;
    set!(m, masquerade_bit, bit);
    set!(m, sync_period, nonzero(sync));
    // Upstream's v1alpha1 defaulting gives iptables' and nftables' minSyncPeriod 1s when
    // zero, and leaves ipvs' alone: zero there is zero.
    let min = if mode == "ipvs" { Some(min.map(|d| d.0).unwrap_or_default()) } else { nonzero(min) };
    set!(m, min_sync_period, min);
    set!(m, ipvs_scheduler, f.ipvs.scheduler.clone().map(|s| s.trim().to_string()));
    if let Some(cidrs) = &f.ipvs.exclude_cidrs {
        m.flags.no_effect.ipvs_exclude_cidrs = cidrs.clone();
    }
    Ok(())
}

/// `clientConnection`: zero and empty values take kube-proxy's defaults.
fn client<G: Fn(&str) -> bool>(c: &ClientConnection, m: &mut Merge<'_, G>) -> Result<(), ConfigError> {
    set!(m, kubeconfig, text(&c.kubeconfig).map(|k| Some(PathBuf::from(k))));
    set!(m, kube_api_content_type, text(&c.content_type));
    set!(m, kube_api_accept_content_types, text(&c.accept_content_types));
    set!(m, kube_api_qps, c.qps.filter(|q| *q != 0.0));
    let burst = checked(("clientConnection.burst", "must not be negative"), c.burst.filter(|b| *b != 0), |b| {
        (b >= 0).then_some(b)
    })?;
    set!(m, kube_api_burst, burst);
    Ok(())
}

/// The settings about this node and where it serves, each checked as its flag would be.
fn node<G: Fn(&str) -> bool>(f: &KubeProxyConfiguration, m: &mut Merge<'_, G>) -> Result<(), ConfigError> {
    let hostname = text(&f.hostname_override).map(|h| h.to_lowercase());
    let hostname = checked(("hostnameOverride", "not a node name (a DNS-1123 subdomain)"), hostname, |h| {
        valid_node_name(&h).then_some(Some(h))
    })?;
    set!(m, hostname_override, hostname);
    let bind =
        checked(("bindAddress", "not an IP address"), text(&f.bind_address), |a| a.parse::<IpAddr>().ok().map(|_| a))?;
    set!(m, bind_address, bind);
    let cidrs = text(&f.cluster_cidr).map(|c| c.split(',').map(|c| c.trim().to_string()).collect::<Vec<_>>());
    let cidrs = checked(("clusterCIDR", "not CIDRs separated by commas"), cidrs, |c| {
        c.iter().all(|c| c.parse::<IpNet>().is_ok()).then_some(c)
    })?;
    set!(m, cluster_cidr, cidrs);
    let addresses = f.node_port_addresses.clone().filter(|a| !a.is_empty());
    let addresses =
        checked(("nodePortAddresses", "not a list of `primary`, `all`, `localhost` and CIDRs"), addresses, |a| {
            super::nodeport_addresses(&a).ok().map(|_| a)
        })?;
    set!(m, nodeport_addresses, addresses);
    let healthz = text(&f.healthz_bind_address).map(|a| parse_healthz_bind(&a));
    set!(m, healthz_bind_address, healthz.transpose().map_err(|e| field("healthzBindAddress", e))?);
    let metrics = text(&f.metrics_bind_address).map(|a| parse_metrics_bind(&a));
    set!(m, metrics_bind_address, metrics.transpose().map_err(|e| field("metricsBindAddress", e))?);
    let (bridge, prefix) = (text(&f.detect_local.bridge_interface), text(&f.detect_local.interface_name_prefix));
    let mode = text(&f.detect_local_mode);
    if let Some(d) = &mode {
        let (b, p) = (
            bridge.as_deref().unwrap_or(&m.flags.pod_bridge_interface),
            prefix.as_deref().unwrap_or(&m.flags.pod_interface_name_prefix),
        );
        super::DetectLocal::new(d, b, p).map_err(|e| field("detectLocalMode", e))?;
    }
    set!(m, detect_local_mode, mode);
    set!(m, pod_bridge_interface, bridge);
    set!(m, pod_interface_name_prefix, prefix);
    Ok(())
}

fn field(field: &str, message: String) -> ConfigError {
    ConfigError::Field { field: field.to_string(), message }
}

/// `value` passed through `check`, or an error naming `name` and the value it refused.
fn checked<T: std::fmt::Debug + Clone, U>(
    (name, wanted): (&str, &str),
    value: Option<T>,
    check: impl FnOnce(T) -> Option<U>,
) -> Result<Option<U>, ConfigError> {
    value.map(|v| check(v.clone()).ok_or_else(|| field(name, format!("{v:?}: {wanted}")))).transpose()
}

/// A string value, trimmed; empty is kube-proxy's "unset".
fn text(v: &Option<String>) -> Option<String> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string)
}

/// A duration that is kube-proxy's "unset" when zero (its defaulting replaces it).
fn nonzero(d: Option<GoDuration>) -> Option<Duration> {
    d.map(|d| d.0).filter(|d| !d.is_zero())
}
