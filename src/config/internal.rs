//! The configuration as kube-proxy's `/configz` shows it: its internal
//! `kubeproxyconfig.KubeProxyConfiguration` (1.31 and later), marshalled by Go's
//! `encoding/json`. That type has no json tags, so its keys are the Go field names (`Mode`,
//! `Linux.Conntrack.MaxPerCore`, `ClientConnection.QPS`); component-base's
//! `LoggingConfiguration` inside it has tags, so `Logging`'s keys are lower-case. Durations are
//! `metav1.Duration`s, which marshal as Go's duration text (`"30s"`, `"15m0s"`); the logging
//! flush frequency, a `TimeOrMetaDuration`, does too unless a file gave it as nanoseconds.

use super::effective::effective;
use super::values::go_duration;
use super::{BindAddress, Flags};
use serde_json::{Value, json};

/// The internal `KubeProxyConfiguration` this run's flags make, as upstream's `/configz`
/// serves it under `kubeproxy.config.k8s.io`.
pub fn internal(flags: &Flags) -> Value {
    let n = &flags.no_effect;
    let masquerade_bit = i32::from(flags.masquerade_bit);
    let gates = super::gates(flags).0;
    json!({
        "Linux": {
            "Conntrack": conntrack(flags),
            "MasqueradeAll": flags.masquerade_all,
            "OOMScoreAdj": flags.oom_score_adj,
        },
        "Windows": {"RunAsService": false},
        "FeatureGates": if gates.is_empty() { Value::Null } else { json!(gates) },
        "ClientConnection": {
            "Kubeconfig": flags.kubeconfig.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            "AcceptContentTypes": flags.kube_api_accept_content_types,
            "ContentType": flags.kube_api_content_type,
            "QPS": go_float(flags.kube_api_qps),
            "Burst": flags.kube_api_burst,
        },
        "Logging": logging(flags),
        "HostnameOverride": flags.hostname_override.as_deref().map(|h| h.trim().to_lowercase()).unwrap_or_default(),
        "BindAddress": flags.bind_address,
        "HealthzBindAddress": address(flags.healthz_bind_address),
        "MetricsBindAddress": address(flags.metrics_bind_address),
        "BindAddressHardFail": n.bind_address_hard_fail,
        "EnableProfiling": n.profiling,
        "ShowHiddenMetricsForVersion": n.show_hidden_metrics_for_version,
        "Mode": flags.proxy_mode.clone().unwrap_or_default(),
        "IPTables": {"MasqueradeBit": masquerade_bit, "LocalhostNodePorts": n.iptables_localhost_nodeports},
        "IPVS": {
            "Scheduler": flags.ipvs_scheduler,
            "ExcludeCIDRs": if n.ipvs_exclude_cidrs.is_empty() { Value::Null } else { json!(n.ipvs_exclude_cidrs) },
            "StrictARP": n.ipvs_strict_arp,
            "TCPTimeout": go_duration(n.ipvs_tcp_timeout),
            "TCPFinTimeout": go_duration(n.ipvs_tcpfin_timeout),
            "UDPTimeout": go_duration(n.ipvs_udp_timeout),
        },
        "Winkernel": {"NetworkName": "", "SourceVip": "", "EnableDSR": false, "RootHnsEndpointName": "",
                      "ForwardHealthCheckVip": false},
        "NFTables": {"MasqueradeBit": masquerade_bit},
        "DetectLocalMode": flags.detect_local_mode,
        "DetectLocal": {
            "BridgeInterface": flags.pod_bridge_interface,
            "ClusterCIDRs": flags.cluster_cidr,
            "InterfaceNamePrefix": flags.pod_interface_name_prefix,
        },
        "NodePortAddresses": if flags.nodeport_addresses.is_empty() { Value::Null } else { json!(flags.nodeport_addresses) },
        "SyncPeriod": go_duration(flags.sync_period),
        "MinSyncPeriod": go_duration(flags.min_sync_period),
        "ConfigSyncPeriod": go_duration(n.config_sync_period),
    })
}

fn conntrack(flags: &Flags) -> Value {
    json!({
        "MaxPerCore": flags.conntrack_max_per_core,
        "Min": flags.conntrack_min,
        "TCPEstablishedTimeout": go_duration(flags.conntrack_tcp_timeout_established),
        "TCPCloseWaitTimeout": go_duration(flags.conntrack_tcp_timeout_close_wait),
        "TCPBeLiberal": flags.conntrack_tcp_be_liberal,
        "UDPTimeout": go_duration(flags.conntrack_udp_timeout),
        "UDPStreamTimeout": go_duration(flags.conntrack_udp_timeout_stream),
    })
}

/// component-base's `LoggingConfiguration`, which has json tags: the v1alpha1 file's `logging`
/// section, minus what `omitempty` drops (`splitStream: false`, an empty `vmodule`).
fn logging(flags: &Flags) -> Value {
    let mut logging = effective(flags)["logging"].take();
    for format in ["text", "json"] {
        let options = &mut logging["options"][format];
        if options["splitStream"] == json!(false)
            && let Some(o) = options.as_object_mut()
        {
            o.remove("splitStream");
        }
    }
    logging
}

/// A float32 as Go's `encoding/json` writes it: a whole number without a fraction (`5`, not
/// `5.0`).
fn go_float(v: f32) -> Value {
    if v.fract() == 0.0 && v.abs() < 1e9 { json!(v as i64) } else { json!(v) }
}

/// An address as the configuration holds it; empty when the server is off.
fn address(a: BindAddress) -> String {
    a.0.map(|a| a.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_from;

    #[test]
    fn the_keys_are_the_internal_types_go_field_names() {
        let args = ["kube-nftproxy", "--proxy-mode=nftables", "--conntrack-max-per-core=0", "--kube-api-qps=7"];
        let c = internal(
            &load_from(args.iter().chain(&["--iptables-sync-period=1m", "--cluster-cidr=10.0.0.0/8"])).unwrap().0,
        );
        assert_eq!(c["Mode"], "nftables");
        assert_eq!(
            (c["Linux"]["Conntrack"]["MaxPerCore"].as_u64(), c["Linux"]["OOMScoreAdj"].as_i64()),
            (Some(0), Some(-999))
        );
        assert_eq!(
            (c["ClientConnection"]["QPS"].as_f64(), c["ClientConnection"]["Burst"].as_i64()),
            (Some(7.0), Some(10))
        );
        assert_eq!(c["DetectLocal"]["ClusterCIDRs"], json!(["10.0.0.0/8"]));
        assert_eq!(
            (c["SyncPeriod"].as_str(), c["Linux"]["Conntrack"]["TCPEstablishedTimeout"].as_str()),
            (Some("1m0s"), Some("24h0m0s")),
            "metav1.Duration's text"
        );
        assert_eq!(c["Logging"]["format"], "text", "component-base's tags");
        let whole = internal(&load_from(["kube-nftproxy"]).unwrap().0);
        assert_eq!(whole["ClientConnection"]["QPS"].to_string(), "5", "Go writes a whole float32 bare");
        assert!(c.get("mode").is_none() && c.get("conntrack").is_none() && c.get("kind").is_none(), "{c}");
    }
}
