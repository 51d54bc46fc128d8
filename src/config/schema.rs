//! The shape of kube-proxy's configuration file (`KubeProxyConfiguration` v1alpha1) as this
//! proxy reads it: the fields it uses, those it takes with no effect, and Go durations.

use super::values::{MAX_DURATION, MISSING_UNIT, parse_duration};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// A kube-proxy field this proxy has no use for. (Not `IgnoredAny`: what that reads counts as
/// ignored, and would be warned about as unknown.)
pub(super) type Unused = serde_json::Value;

/// The fields of a `KubeProxyConfiguration` this proxy reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct KubeProxyConfiguration {
    pub(super) api_version: Option<String>,
    pub(super) kind: Option<String>,
    pub(super) mode: Option<String>,
    pub(super) hostname_override: Option<String>,
    pub(super) bind_address: Option<String>,
    #[serde(rename = "clusterCIDR")]
    pub(super) cluster_cidr: Option<String>,
    pub(super) node_port_addresses: Option<Vec<String>>,
    pub(super) healthz_bind_address: Option<String>,
    pub(super) metrics_bind_address: Option<String>,
    #[serde(default)]
    pub(super) nftables: ModeSection,
    #[serde(default)]
    pub(super) iptables: ModeSection,
    #[serde(default)]
    pub(super) ipvs: Ipvs,
    pub(super) feature_gates: Option<BTreeMap<String, bool>>,
    pub(super) detect_local_mode: Option<String>,
    #[serde(default)]
    pub(super) detect_local: DetectLocal,
    #[serde(default)]
    pub(super) conntrack: Conntrack,
    #[serde(default)]
    pub(super) client_connection: ClientConnection,
    pub(super) oom_score_adj: Option<i32>,
    #[serde(default)]
    pub(super) logging: Logging,
    #[serde(default)]
    pub(super) kube_nftproxy: Own,
    // kube-proxy's settings that do not apply here (other modes, other platforms, and what
    // this proxy does its own way): accepted as kube-proxy accepts them, and not used.
    pub(super) winkernel: Option<Unused>,
    pub(super) windows_run_as_service: Option<Unused>,
    pub(super) port_range: Option<Unused>,
    pub(super) enable_profiling: Option<Unused>,
    pub(super) bind_address_hard_fail: Option<Unused>,
    pub(super) config_sync_period: Option<Unused>,
    pub(super) show_hidden_metrics_for_version: Option<Unused>,
}

/// A mode's section (`nftables`, `iptables`): which one is read depends on `mode`, as in
/// upstream's conversion.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ModeSection {
    pub(super) masquerade_all: Option<bool>,
    pub(super) masquerade_bit: Option<i32>,
    pub(super) sync_period: Option<GoDuration>,
    pub(super) min_sync_period: Option<GoDuration>,
    pub(super) localhost_node_ports: Option<Unused>,
}

/// The `ipvs` section: its periods in ipvs mode, its scheduler (checked in ipvs mode), and
/// knobs with no effect here.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Ipvs {
    pub(super) sync_period: Option<GoDuration>,
    pub(super) min_sync_period: Option<GoDuration>,
    pub(super) scheduler: Option<String>,
    #[serde(rename = "excludeCIDRs")]
    pub(super) exclude_cidrs: Option<Vec<String>>,
    #[serde(rename = "strictARP")]
    pub(super) strict_arp: Option<Unused>,
    pub(super) tcp_timeout: Option<Unused>,
    pub(super) tcp_fin_timeout: Option<Unused>,
    pub(super) udp_timeout: Option<Unused>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DetectLocal {
    pub(super) bridge_interface: Option<String>,
    pub(super) interface_name_prefix: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Conntrack {
    pub(super) max_per_core: Option<i32>,
    pub(super) min: Option<i32>,
    pub(super) tcp_established_timeout: Option<GoDuration>,
    pub(super) tcp_close_wait_timeout: Option<GoDuration>,
    pub(super) tcp_be_liberal: Option<bool>,
    pub(super) udp_timeout: Option<GoDuration>,
    pub(super) udp_stream_timeout: Option<GoDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ClientConnection {
    pub(super) kubeconfig: Option<String>,
    pub(super) accept_content_types: Option<String>,
    pub(super) content_type: Option<String>,
    pub(super) qps: Option<f32>,
    pub(super) burst: Option<i32>,
}

/// kube-proxy's `logging` (component-base's LoggingConfiguration): the verbosity and format
/// mean something here; flushing, per-file levels and stream options are klog's.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Logging {
    pub(super) verbosity: Option<u32>,
    pub(super) format: Option<String>,
    pub(super) vmodule: Option<Unused>,
    pub(super) flush_frequency: Option<Unused>,
    pub(super) options: Option<Unused>,
}

/// kube-nftproxy's own settings, under `kubeNftproxy:`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Own {
    pub(super) manifests: Option<String>,
    pub(super) full_sync_period: Option<GoDuration>,
    pub(super) sync_share: Option<f64>,
    pub(super) nft_timeout: Option<GoDuration>,
    pub(super) cleanup_kube_proxy_at_start: Option<bool>,
    pub(super) service_proxy_name: Option<String>,
}

/// A duration as Kubernetes writes one (`"30s"`, `"1h0m0s"`).
#[derive(Debug, Clone, Copy)]
pub(super) struct GoDuration(pub(super) Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        // Not the parser's message: it quotes the value, and the file's values are not quoted.
        let wanted =
            format!("not a duration like 500ms, 30s, 15m or 1h30m0s of at most {}h", MAX_DURATION.as_secs() / 3600);
        parse_duration(&text).map(GoDuration).map_err(|e| {
            let unit = if e.starts_with(MISSING_UNIT) { "missing unit: " } else { "" };
            serde::de::Error::custom(format!("{unit}{wanted}"))
        })
    }
}

impl KubeProxyConfiguration {
    /// The file's fields that have no effect here and hold a value other than kube-proxy's
    /// "unset" (kubeadm writes them all, empty), by path.
    pub fn no_effect_fields(&self) -> Vec<String> {
        let (f, ipvs) = (self, &self.ipvs);
        // Each field's path beside its value, so that the two cannot drift apart.
        let named: [(&str, &Option<Unused>); 16] = [
            ("winkernel", &f.winkernel),
            ("windowsRunAsService", &f.windows_run_as_service),
            ("portRange", &f.port_range),
            ("enableProfiling", &f.enable_profiling),
            ("bindAddressHardFail", &f.bind_address_hard_fail),
            ("configSyncPeriod", &f.config_sync_period),
            ("showHiddenMetricsForVersion", &f.show_hidden_metrics_for_version),
            ("ipvs.strictARP", &ipvs.strict_arp),
            ("ipvs.tcpTimeout", &ipvs.tcp_timeout),
            ("ipvs.tcpFinTimeout", &ipvs.tcp_fin_timeout),
            ("ipvs.udpTimeout", &ipvs.udp_timeout),
            ("iptables.localhostNodePorts", &f.iptables.localhost_node_ports),
            ("nftables.localhostNodePorts", &f.nftables.localhost_node_ports),
            ("logging.vmodule", &f.logging.vmodule),
            ("logging.flushFrequency", &f.logging.flush_frequency),
            ("logging.options", &f.logging.options),
        ];
        named.into_iter().filter(|(_, v)| v.as_ref().is_some_and(holds_value)).map(|(n, _)| n.to_string()).collect()
    }
}

/// Whether a value is more than kube-proxy's "unset" (null, false, zero, empty).
fn holds_value(v: &Unused) -> bool {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !matches!(s.trim(), "" | "0" | "0s"),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => o.values().any(holds_value),
        Value::Bool(true) => true,
    }
}
