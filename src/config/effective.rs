//! The effective configuration as a `KubeProxyConfiguration` (v1alpha1): what
//! `--write-config-to` writes (`/configz` serves the internal type: `internal.rs`).

use super::values::go_duration;
use super::{API_VERSION, BindAddress, ConfigError, Flags, KIND};
use serde_json::{Value, json};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The configuration this run is using, as kube-proxy writes its own: every v1alpha1 field,
/// with this run's values where it has them and kube-proxy's defaults elsewhere, the sync
/// periods in the section of the mode (`iptables` for an empty mode, as upstream's
/// conversion), and kube-nftproxy's own settings under `kubeNftproxy`. Reading it back with
/// `--config` gives the same configuration.
pub fn effective(flags: &Flags) -> Value {
    let mode = flags.proxy_mode.clone().unwrap_or_default();
    let n = &flags.no_effect;
    let mut config = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "bindAddress": flags.bind_address,
        "bindAddressHardFail": n.bind_address_hard_fail,
        "clientConnection": {
            "acceptContentTypes": flags.kube_api_accept_content_types,
            "burst": flags.kube_api_burst,
            "contentType": flags.kube_api_content_type,
            "kubeconfig": flags.kubeconfig.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            "qps": flags.kube_api_qps,
        },
        "conntrack": conntrack(flags),
        "clusterCIDR": flags.cluster_cidr.join(","),
        "configSyncPeriod": go_duration(n.config_sync_period),
        "detectLocal": {
            "bridgeInterface": flags.pod_bridge_interface,
            "interfaceNamePrefix": flags.pod_interface_name_prefix,
        },
        "detectLocalMode": flags.detect_local_mode,
        "enableProfiling": n.profiling,
        "featureGates": flags.feature_gates.0,
        "healthzBindAddress": address(flags.healthz_bind_address),
        "hostnameOverride": flags.hostname_override.as_deref().map(|h| h.trim().to_lowercase()).unwrap_or_default(),

        "logging": logging(flags),
        "metricsBindAddress": address(flags.metrics_bind_address),
        "mode": mode,
        "nodePortAddresses": flags.nodeport_addresses,
        "oomScoreAdj": flags.oom_score_adj,
        "portRange": "",
        "showHiddenMetricsForVersion": n.show_hidden_metrics_for_version,
        "winkernel": {"enableDSR": false, "forwardHealthCheckVip": false, "networkName": "",
                      "rootHnsEndpointName": "", "sourceVip": ""},
        "windowsRunAsService": false,
    });
    let [iptables, ipvs, nftables] = mode_sections(flags, &mode);
    config["iptables"] = iptables;
    config["ipvs"] = ipvs;
    config["nftables"] = nftables;
    config["kubeNftproxy"] = json!({
        "manifests": flags.manifests.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        "fullSyncPeriod": go_duration(flags.full_sync_period),
        "syncShare": flags.sync_share,
        "nftTimeout": go_duration(flags.nft_timeout),
        "cleanupKubeProxyAtStart": flags.cleanup_kube_proxy_at_start,
        "serviceProxyName": flags.service_proxy_name.clone().unwrap_or_default(),
    });
    config
}

fn conntrack(flags: &Flags) -> Value {
    json!({
        "maxPerCore": flags.conntrack_max_per_core,
        "min": flags.conntrack_min,
        "tcpBeLiberal": flags.conntrack_tcp_be_liberal,
        "tcpCloseWaitTimeout": go_duration(flags.conntrack_tcp_timeout_close_wait),
        "tcpEstablishedTimeout": go_duration(flags.conntrack_tcp_timeout_established),
        "udpStreamTimeout": go_duration(flags.conntrack_udp_timeout_stream),
        "udpTimeout": go_duration(flags.conntrack_udp_timeout),
    })
}

/// The `iptables`, `ipvs` and `nftables` sections: the periods in the mode's section (0s in
/// the others, as upstream's conversion writes them), masquerading in nftables' or iptables'.
fn mode_sections(flags: &Flags, mode: &str) -> [Value; 3] {
    let section = match mode {
        "nftables" | "ipvs" => mode,
        _ => "iptables",
    };
    let periods = |name: &str| {
        if name == section {
            (go_duration(flags.sync_period), go_duration(flags.min_sync_period))
        } else {
            ("0s".to_string(), "0s".to_string())
        }
    };
    let ((ipt_sync, ipt_min), (nft_sync, nft_min)) = (periods("iptables"), periods("nftables"));
    let nft_masq = mode == "nftables";
    let iptables = json!({
        "localhostNodePorts": flags.no_effect.iptables_localhost_nodeports,
        "masqueradeAll": flags.masquerade_all && !nft_masq,
        "masqueradeBit": flags.masquerade_bit,
        "minSyncPeriod": ipt_min,
        "syncPeriod": ipt_sync,
    });
    let nftables = json!({
        "masqueradeAll": flags.masquerade_all && nft_masq,
        "masqueradeBit": flags.masquerade_bit,
        "minSyncPeriod": nft_min,
        "syncPeriod": nft_sync,
    });
    [iptables, ipvs(flags, periods("ipvs")), nftables]
}

fn ipvs(flags: &Flags, (sync, min): (String, String)) -> Value {
    let n = &flags.no_effect;
    json!({
        "excludeCIDRs": if n.ipvs_exclude_cidrs.is_empty() { Value::Null } else { json!(n.ipvs_exclude_cidrs) },
        "minSyncPeriod": min,
        "scheduler": flags.ipvs_scheduler,
        "strictARP": n.ipvs_strict_arp,
        "syncPeriod": sync,
        "tcpFinTimeout": go_duration(n.ipvs_tcpfin_timeout),
        "tcpTimeout": go_duration(n.ipvs_tcp_timeout),
        "udpTimeout": go_duration(n.ipvs_udp_timeout),
    })
}

fn logging(flags: &Flags) -> Value {
    let n = &flags.no_effect;
    let mut logging = json!({
        "flushFrequency": go_duration(flags.log_flush_frequency),
        "format": flags.logging_format,
        "options": {
            "json": {"infoBufferSize": n.log_json_info_buffer_size, "splitStream": n.log_json_split_stream},
            "text": {"infoBufferSize": n.log_text_info_buffer_size, "splitStream": n.log_text_split_stream},
        },
        "verbosity": flags.verbosity.unwrap_or(0),
    });
    if let Some(vmodule) = &flags.vmodule {
        let pairs: Vec<Value> = vmodule
            .split(',')
            .filter_map(|p| p.split_once('='))
            .map(|(pattern, v)| json!({"filePattern": pattern, "verbosity": v.parse::<u32>().unwrap_or(0)}))
            .collect();
        logging["vmodule"] = Value::Array(pairs);
    }
    logging
}

/// An address as the configuration writes it; empty when the server is off.
fn address(a: BindAddress) -> String {
    a.0.map(|a| a.to_string()).unwrap_or_default()
}

/// `--write-config-to`: writes `effective(flags)` to `path` as YAML, within [`WRITE_WAIT`]
/// however `path` takes it: a FIFO no one reads fails rather than hangs.
pub fn write_config(flags: &Flags, path: &Path) -> Result<(), ConfigError> {
    let bad = |message: String| ConfigError::Write { path: path.to_path_buf(), message };
    let yaml = serde_saphyr::to_string(&effective(flags)).map_err(|e| bad(e.to_string()))?;
    let deadline = Instant::now() + WRITE_WAIT;
    let mut file = open_bounded(path, deadline).map_err(|e| bad(e.to_string()))?;
    write_bounded(&mut file, yaml.as_bytes(), deadline).map_err(|e| bad(e.to_string()))
}

/// The longest `--write-config-to` waits for a FIFO's reader to open it and take the
/// configuration: a reader that comes is there at once, and one that never comes would
/// otherwise hold the command forever.
pub const WRITE_WAIT: Duration = Duration::from_secs(3);

/// How often a wait for a reader looks again.
const WRITE_RETRY: Duration = Duration::from_millis(20);

/// Opens `path` for writing (created, truncated) without blocking: opening a FIFO for writing
/// blocks until a reader opens it, and non-blocking it fails with ENXIO instead, retried
/// until `deadline`.
fn open_bounded(path: &Path, deadline: Instant) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true).custom_flags(libc::O_NONBLOCK);
    loop {
        match options.open(path) {
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => sleep(WRITE_RETRY),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                let waited = WRITE_WAIT.as_secs();
                return Err(std::io::Error::new(e.kind(), format!("no reader opened the FIFO within {waited}s")));
            }
            opened => return opened,
        }
    }
}

/// Writes all of `bytes` to `file`, open non-blocking, by `deadline`: the configuration fits a
/// pipe's buffer many times over, but a reader that opened a FIFO and never reads must not
/// hold the command either.
fn write_bounded(file: &mut std::fs::File, mut bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
    use std::io::{ErrorKind, Write};
    while !bytes.is_empty() {
        match file.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => sleep(WRITE_RETRY),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let waited = WRITE_WAIT.as_secs();
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!("the reader did not take it within {waited}s"),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
