//! Prometheus metrics on `--metrics-bind-address`: upstream kube-proxy's nftables-mode names,
//! types, labels and buckets (so its dashboards and alerts work unchanged), plus the proxy's
//! own (`kube_nftproxy_*`) for what upstream's cannot answer: what each sync sent, repairs
//! after tampering, watch restarts and relists; `kubernetes_build_info` as every Kubernetes
//! component. Also `/healthz` ("ok", its one check, `ping`, counted in `/metrics/slis` as
//! upstream's component-base counts it) and `/proxyMode`.
//!
//! Both families are programmed by every sync, so a per-family metric is observed once for
//! each (a family whose part the kernel refused only as failed): a dual-stack dashboard sees
//! what upstream's two proxiers would report.

use crate::http::{self, Reply};
use crate::model::Family;
use crate::slis::Slis;
use crate::version;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder, exponential_buckets,
};
use std::time::{Duration, SystemTime};

/// Failures to set the metrics up (a name or label mistake, found at start).
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The registry refused a metric.
    #[error("registering metrics: {0}")]
    Register(#[from] prometheus::Error),
}

/// What `/proxyMode` answers, as upstream in nftables mode.
pub const PROXY_MODE: &str = "nftables";

/// Every metric the proxy exports.
pub struct Metrics {
    registry: Registry,
    /// `kubeproxy_sync_proxy_rules_duration_seconds{ip_family}`: every sync.
    pub sync_duration: HistogramVec,
    /// `kubeproxy_sync_full_proxy_rules_duration_seconds{ip_family}`.
    pub sync_full_duration: HistogramVec,
    /// `kubeproxy_sync_partial_proxy_rules_duration_seconds{ip_family}`.
    pub sync_partial_duration: HistogramVec,
    /// `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family}`: the last successful sync.
    pub last_sync: prometheus::GaugeVec,
    /// `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family}`.
    pub last_queued: prometheus::GaugeVec,
    /// `kubeproxy_sync_proxy_rules_endpoint_changes_pending`.
    pub endpoint_changes_pending: IntGauge,
    /// `kubeproxy_sync_proxy_rules_endpoint_changes_total`.
    pub endpoint_changes: IntCounter,
    /// `kubeproxy_sync_proxy_rules_service_changes_pending`.
    pub service_changes_pending: IntGauge,
    /// `kubeproxy_sync_proxy_rules_service_changes_total`.
    pub service_changes: IntCounter,
    /// `kubeproxy_proxy_healthz_total{code}`.
    pub healthz: IntCounterVec,
    /// `kubeproxy_proxy_livez_total{code}`.
    pub livez: IntCounterVec,
    /// `kubeproxy_network_programming_duration_seconds{ip_family}`.
    pub network_programming: HistogramVec,
    /// `kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family,traffic_policy}` (a gauge).
    pub no_local_endpoints: IntGaugeVec,
    /// `kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family}`.
    pub sync_failures: IntCounterVec,
    /// `kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total{ip_family}`.
    pub cleanup_failures: IntCounterVec,
    /// `kubeproxy_conntrack_reconciler_sync_duration_seconds{ip_family}`.
    pub conntrack_duration: HistogramVec,
    /// `kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family}`.
    pub conntrack_deleted: IntCounterVec,
    /// `kube_nftproxy_syncs_total{kind}`: syncs by kind (full, refresh, partial, unchanged).
    pub syncs: IntCounterVec,
    /// `kube_nftproxy_sync_bytes_total{kind}`: bytes of `nft` script sent.
    pub sync_bytes: IntCounterVec,
    /// `kube_nftproxy_sync_elements_total{kind}`: set and map elements written or deleted.
    pub sync_elements: IntCounterVec,
    /// `kube_nftproxy_repairs_total{reason}`: full syncs forced by tampering or a failed check.
    pub repairs: IntCounterVec,
    /// `kube_nftproxy_watch_restarts_total{resource}`: watches opened again after they ended.
    pub watch_restarts: IntCounterVec,
    /// `kube_nftproxy_relists_total{resource}`: full lists after the first (410 Gone and the like).
    pub relists: IntCounterVec,
    /// `kube_nftproxy_change_wait_seconds{reason}`: how long each change waited for the sync
    /// that applied it (from its arrival to the sync's start), by what held it: `none`, `cost`
    /// (a sync running), `pace`, `retry`.
    pub change_wait: HistogramVec,
    /// `kube_nftproxy_health_check_node_ports`: health-check node ports served now.
    pub health_check_node_ports: IntGauge,
    /// `kubeproxy_nftables_localhost_nodeport_listeners{ip_family}`: localhost NodePorts served.
    pub localhost_nodeports: IntGaugeVec,
    /// `kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total{ip_family}`.
    pub localhost_nodeport_failures: IntCounterVec,
    /// `/metrics/slis`.
    pub slis: Slis,
    /// client-go's `rest_client_requests_total{code,method,host}`: API requests by answer.
    pub rest_requests: IntCounterVec,
    /// client-go's `rest_client_request_duration_seconds{verb,host}` (watches are not timed).
    pub rest_request_duration: HistogramVec,
    /// client-go's `rest_client_rate_limiter_duration_seconds{verb,host}`: waits for a token.
    pub rest_rate_limiter_duration: HistogramVec,
}

/// The one check upstream's generic `/healthz` on the metrics address runs.
pub const PING: &str = "ping";

/// The paths [`answer`] serves (their first segment), for `/statusz` to list.
pub const PATHS: &[&str] = &["/healthz", "/metrics", "/proxyMode"];

/// Upstream's sync buckets: 1 ms doubling to about 16 s.
fn sync_buckets() -> Vec<f64> {
    exponential_buckets(0.001, 2.0, 15).unwrap_or_default()
}

/// Upstream's network programming buckets: 0, ¼ s, ½ s, each second to a minute, then every
/// 5 s to 2 minutes, then every 30 s to 5 minutes.
fn programming_buckets() -> Vec<f64> {
    let mut b = vec![0.0, 0.25, 0.5];
    b.extend((1..60).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

/// client-go's buckets for request and rate-limiter durations: 5 ms to a minute.
fn rest_client_buckets() -> Vec<f64> {
    vec![0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0]
}

/// Registers metrics in one registry, keeping the help text next to each name.
struct Add<'r>(&'r Registry);

impl Add<'_> {
    /// Registers `metric` (once built) and hands it back for the struct to keep.
    fn reg<M: prometheus::core::Collector + Clone + 'static>(
        &self,
        metric: Result<M, prometheus::Error>,
    ) -> Result<M, MetricsError> {
        let m = metric?;
        self.0.register(Box::new(m.clone()))?;
        Ok(m)
    }
    fn histogram(&self, name: &str, help: &str, labels: &[&str], b: Vec<f64>) -> Result<HistogramVec, MetricsError> {
        self.reg(HistogramVec::new(HistogramOpts::new(name, help).buckets(b), labels))
    }
    fn counters(&self, name: &str, help: &str, labels: &[&str]) -> Result<IntCounterVec, MetricsError> {
        self.reg(IntCounterVec::new(Opts::new(name, help), labels))
    }
    fn counter(&self, name: &str, help: &str) -> Result<IntCounter, MetricsError> {
        self.reg(IntCounter::new(name, help))
    }
    fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, MetricsError> {
        self.reg(IntGauge::new(name, help))
    }
    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec, MetricsError> {
        self.reg(IntGaugeVec::new(Opts::new(name, help), labels))
    }
    fn times(&self, name: &str, help: &str) -> Result<prometheus::GaugeVec, MetricsError> {
        self.reg(prometheus::GaugeVec::new(Opts::new(name, help), FAMILY))
    }
}

const FAMILY: &[&str] = &["ip_family"];

/// `kubernetes_build_info`, constant 1, with upstream's labels ([`version::labels`]).
fn build_info(a: &Add) -> Result<(), MetricsError> {
    let help = "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree \
state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.";
    let labels = version::labels();
    let names: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
    let values: Vec<&str> = labels.iter().map(|(_, v)| v.as_str()).collect();
    a.gauges("kubernetes_build_info", help, &names)?.with_label_values(&values).set(1);
    Ok(())
}

impl Metrics {
    /// Every metric, registered, at zero; with the process's own (memory, CPU, descriptors).
    pub fn new() -> Result<Metrics, MetricsError> {
        let registry = Registry::new();
        #[cfg(target_os = "linux")]
        registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        let a = Add(&registry);
        let info = a.gauges("kube_nftproxy_build_info", "The proxy's version, always 1.", &["version"])?;
        info.with_label_values(&[version::VERSION]).set(1);
        build_info(&a)?;
        let m = Metrics {
            sync_duration: a.histogram(
                "kubeproxy_sync_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds",
                FAMILY,
                sync_buckets(),
            )?,
            sync_full_duration: a.histogram(
                "kubeproxy_sync_full_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for full resyncs",
                FAMILY,
                sync_buckets(),
            )?,
            sync_partial_duration: a.histogram(
                "kubeproxy_sync_partial_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for partial resyncs",
                FAMILY,
                sync_buckets(),
            )?,
            last_sync: a.times(
                "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                "The last time proxy rules were successfully synced",
            )?,
            last_queued: a.times(
                "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
                "The last time a sync of proxy rules was queued",
            )?,
            endpoint_changes_pending: a
                .gauge("kubeproxy_sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes")?,
            endpoint_changes: a.counter(
                "kubeproxy_sync_proxy_rules_endpoint_changes_total",
                "Cumulative proxy rules Endpoint changes",
            )?,
            service_changes_pending: a
                .gauge("kubeproxy_sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes")?,
            service_changes: a.counter(
                "kubeproxy_sync_proxy_rules_service_changes_total",
                "Cumulative proxy rules Service changes",
            )?,
            healthz: a.counters("kubeproxy_proxy_healthz_total", "Cumulative proxy healthz HTTP status", &["code"])?,
            livez: a.counters("kubeproxy_proxy_livez_total", "Cumulative proxy livez HTTP status", &["code"])?,
            network_programming: a.histogram(
                "kubeproxy_network_programming_duration_seconds",
                "In Cluster Network Programming Latency in seconds",
                FAMILY,
                programming_buckets(),
            )?,
            no_local_endpoints: a.gauges(
                "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
                "Number of services with a Local traffic policy and no endpoints",
                &["ip_family", "traffic_policy"],
            )?,
            sync_failures: a.counters(
                "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
                "Cumulative proxy nftables sync failures",
                FAMILY,
            )?,
            cleanup_failures: a.counters(
                "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
                "Cumulative proxy nftables cleanup failures",
                FAMILY,
            )?,
            conntrack_duration: a.histogram(
                "kubeproxy_conntrack_reconciler_sync_duration_seconds",
                "ReconcileConntrackFlowsLatency latency in seconds",
                FAMILY,
                sync_buckets(),
            )?,
            conntrack_deleted: a.counters(
                "kubeproxy_conntrack_reconciler_deleted_entries_total",
                "Cumulative conntrack flows deleted by conntrack reconciler",
                FAMILY,
            )?,
            syncs: a.counters(
                "kube_nftproxy_syncs_total",
                "Syncs by kind: full, refresh, partial, unchanged",
                &["kind"],
            )?,
            sync_bytes: a.counters(
                "kube_nftproxy_sync_bytes_total",
                "Bytes of nftables script sent, by sync kind",
                &["kind"],
            )?,
            sync_elements: a.counters(
                "kube_nftproxy_sync_elements_total",
                "Set and map elements sent, by sync kind",
                &["kind"],
            )?,
            repairs: a.counters(
                "kube_nftproxy_repairs_total",
                "Full syncs forced to restore the tables, by reason",
                &["reason"],
            )?,
            watch_restarts: a.counters(
                "kube_nftproxy_watch_restarts_total",
                "API watches opened again after they ended, by resource",
                &["resource"],
            )?,
            relists: a.counters(
                "kube_nftproxy_relists_total",
                "Full lists after the first, by resource",
                &["resource"],
            )?,
            change_wait: a.histogram(
                "kube_nftproxy_change_wait_seconds",
                "How long each change waited for the sync that applied it, by what held it: none, gather, cost, pace, retry",
                &["reason"],
                sync_buckets(),
            )?,
            health_check_node_ports: a
                .gauge("kube_nftproxy_health_check_node_ports", "Service health-check node ports served")?,
            localhost_nodeports: a.gauges(
                "kubeproxy_nftables_localhost_nodeport_listeners",
                "Localhost NodePort listeners open",
                FAMILY,
            )?,
            localhost_nodeport_failures: a.counters(
                "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total",
                "Localhost NodePort listeners that could not be opened (each try)",
                FAMILY,
            )?,
            rest_requests: a.counters(
                "rest_client_requests_total",
                "HTTP requests to the API server, by status code (<error>: no answer), method and host",
                &["code", "method", "host"],
            )?,
            rest_request_duration: a.histogram(
                "rest_client_request_duration_seconds",
                "API request latency in seconds, token wait included, by verb and host",
                &["verb", "host"],
                rest_client_buckets(),
            )?,
            rest_rate_limiter_duration: a.histogram(
                "rest_client_rate_limiter_duration_seconds",
                "Time API requests waited for the client-side rate limit, by verb and host",
                &["verb", "host"],
                rest_client_buckets(),
            )?,
            registry,
            slis: Slis::new()?,
        };
        m.zero_families();
        Ok(m)
    }

    /// Shows every per-family series from the start, as upstream's do once a proxier runs.
    fn zero_families(&self) {
        for f in Family::ALL.map(Family::label) {
            for h in [&self.sync_duration, &self.network_programming, &self.conntrack_duration] {
                let _ = h.with_label_values(&[f]);
            }
            self.localhost_nodeports.with_label_values(&[f]).set(0);
            for c in [
                &self.sync_failures,
                &self.cleanup_failures,
                &self.conntrack_deleted,
                &self.localhost_nodeport_failures,
            ] {
                let _ = c.with_label_values(&[f]);
            }
            for policy in ["internal", "external"] {
                self.no_local_endpoints.with_label_values(&[f, policy]).set(0);
            }
        }
    }

    /// Observes `took` in `h` once for each of `families`.
    pub fn observe_families(h: &HistogramVec, families: &[Family], took: Duration) {
        for f in families {
            h.with_label_values(&[f.label()]).observe(took.as_secs_f64());
        }
    }

    /// Adds one to `c` for each of `families`.
    pub fn count_families(c: &IntCounterVec, families: &[Family]) {
        for f in families {
            c.with_label_values(&[f.label()]).inc();
        }
    }

    /// Sets a timestamp gauge of each of `families` to `t`.
    pub fn stamp_families(g: &prometheus::GaugeVec, families: &[Family], t: SystemTime) {
        let secs = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default();
        for f in families {
            g.with_label_values(&[f.label()]).set(secs);
        }
    }

    /// Notes an answer of `/healthz` or `/livez`.
    pub fn count_health(&self, path: &str, code: u16) {
        let counter = match path {
            "/healthz" => &self.healthz,
            "/livez" => &self.livez,
            _ => return,
        };
        counter.with_label_values(&[&code.to_string()]).inc();
    }

    /// The metrics in Prometheus' text format (0.0.4), as upstream serves them by default.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            log::warn!("encoding metrics: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The answer of the metrics server for `path` with `query`. `/healthz` runs upstream's one
/// check there, `ping`, and counts it; `?verbose` lists it as upstream does.
pub fn answer(metrics: &Metrics, path: &str, query: Option<&str>) -> Reply {
    match path {
        "/metrics" => Reply::new(200, prometheus::TEXT_FORMAT, metrics.text()),
        "/metrics/slis" => Reply::new(200, prometheus::TEXT_FORMAT, metrics.slis.text()),
        "/healthz" => {
            metrics.slis.observe(PING, "healthz", true);
            let verbose = query.unwrap_or_default().split('&').any(|p| p == "verbose" || p.starts_with("verbose="));
            let body = if verbose { format!("[+]{PING} ok\nhealthz check passed\n") } else { "ok".into() };
            Reply::new(200, http::TEXT, body)
        }
        "/healthz/ping" => Reply::new(200, http::TEXT, "ok"),
        "/proxyMode" => Reply::new(200, http::TEXT, PROXY_MODE),
        _ => Reply::not_found(),
    }
}

#[cfg(test)]
mod tests;
