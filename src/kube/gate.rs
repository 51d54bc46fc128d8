//! What every request of one client passes through: the client-side rate limit before it is
//! sent (logged when a request waited long, as client-go logs it), and client-go's
//! `rest_client_*` metrics once it is answered, labelled as client-go labels them.

use super::client::ApiError;
use super::ratelimit::{Stopped, TokenBucket};
use crate::metrics::Metrics;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A wait for a token longer than this is logged (at debug level), as client-go does at V(3).
const LONG_WAIT: Duration = Duration::from_millis(50);

/// A wait longer than this is logged at info level, at most once per [`INFO_EVERY`].
const VERY_LONG_WAIT: Duration = Duration::from_secs(1);

/// How often a very long wait is logged at info level (client-go's throttled logger too).
const INFO_EVERY: Duration = Duration::from_secs(10);

/// The label client-go gives a request that got no answer (refused, reset, timed out).
const NO_ANSWER: &str = "<error>";

/// The rate limit, the stop flag that ends a wait, and the metrics of one client.
pub(super) struct Gate {
    bucket: Option<TokenBucket>,
    stop: Arc<AtomicBool>,
    /// The server's `host[:port]`, client-go's `host` label.
    host: String,
    metrics: OnceLock<Arc<Metrics>>,
    /// When a wait was last logged at info level.
    told: Mutex<Option<Instant>>,
}

impl Gate {
    /// The gate of a client of `server`, limited to `qps` and `burst` (client-go's reading:
    /// 0 is the default, a negative `qps` no limit), whose waits end when `stop` is set.
    pub(super) fn new(server: &str, qps: f32, burst: u32, stop: Arc<AtomicBool>) -> Gate {
        let host = host_of(server);
        Gate { bucket: TokenBucket::new(qps, burst), stop, host, metrics: OnceLock::new(), told: Mutex::new(None) }
    }

    /// Records requests in `metrics` from now on.
    pub(super) fn set_metrics(&self, metrics: Arc<Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// Waits for the token of request `method path`; the instant the request began (its
    /// duration counts the wait, as client-go's does).
    pub(super) fn admit(&self, method: &str, path: &str) -> Result<Instant, ApiError> {
        let began = Instant::now();
        let Some(bucket) = &self.bucket else { return Ok(began) };
        let waited = bucket.wait(&self.stop).map_err(|Stopped| ApiError::Stopped)?;
        if let Some(m) = self.metrics.get() {
            m.rest_rate_limiter_duration.with_label_values(&[method, &self.host]).observe(waited.as_secs_f64());
        }
        if waited >= LONG_WAIT {
            let (qps, burst) = (bucket.qps(), bucket.burst());
            let text = format!(
                "waited {waited:.1?} before {method} {path}: client-side throttling at {qps} requests a second, \
                 burst {burst} (--kube-api-qps, --kube-api-burst), not the API server's priority and fairness"
            );
            if waited >= VERY_LONG_WAIT && self.tell_now() {
                log::info!("{text}");
            } else {
                log::debug!("{text}");
            }
        }
        Ok(began)
    }

    /// Whether a very long wait is logged at info level now (not within [`INFO_EVERY`] of the last).
    fn tell_now(&self) -> bool {
        let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if told.is_some_and(|t| now.duration_since(t) < INFO_EVERY) {
            return false;
        }
        *told = Some(now);
        true
    }

    /// Counts a request of `method` answered with `status` (`None`: no answer), and, unless it
    /// is a watch (`began` is `None`: client-go times no watch), its duration until the answer.
    pub(super) fn record(&self, method: &str, status: Option<u16>, began: Option<Instant>) {
        let Some(m) = self.metrics.get() else { return };
        let code = status.map_or_else(|| NO_ANSWER.to_string(), |s| s.to_string());
        m.rest_requests.with_label_values(&[&code, method, &self.host]).inc();
        if let Some(began) = began {
            m.rest_request_duration.with_label_values(&[method, &self.host]).observe(began.elapsed().as_secs_f64());
        }
    }
}

/// The `host[:port]` of a server URL (no scheme, user info or path), as Go's `url.URL.Host`.
fn host_of(server: &str) -> String {
    let rest = server.split_once("://").map_or(server, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.rsplit_once('@').map_or(authority, |(_, h)| h).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_label_is_the_servers_host_and_port_alone() {
        assert_eq!(host_of("https://192.168.1.2:6443"), "192.168.1.2:6443");
        assert_eq!(host_of("https://user:secret@[fd00::1]:6443/prefix/"), "[fd00::1]:6443");
        assert_eq!(host_of("https://kubernetes.default.svc"), "kubernetes.default.svc");
        assert_eq!(host_of("http://a.example:8080?x=1"), "a.example:8080");
    }

    #[test]
    fn requests_are_counted_by_code_method_and_host_and_timed_unless_watches() {
        let m = Arc::new(Metrics::new().expect("metrics"));
        let gate = Gate::new("https://10.0.0.1:6443", -1.0, 0, Arc::new(AtomicBool::new(false)));
        gate.set_metrics(m.clone());
        let began = gate.admit("GET", "/api/v1/services").expect("no limit, no wait");
        gate.record("GET", Some(200), Some(began));
        gate.record("GET", Some(410), None);
        gate.record("POST", None, Some(Instant::now()));
        let text = m.text();
        for line in [
            r#"rest_client_requests_total{code="200",host="10.0.0.1:6443",method="GET"} 1"#,
            r#"rest_client_requests_total{code="410",host="10.0.0.1:6443",method="GET"} 1"#,
            r#"rest_client_requests_total{code="<error>",host="10.0.0.1:6443",method="POST"} 1"#,
            r#"rest_client_request_duration_seconds_count{host="10.0.0.1:6443",verb="GET"} 1"#,
            r#"rest_client_request_duration_seconds_bucket{host="10.0.0.1:6443",verb="POST",le="60"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
        }
        assert!(!text.contains("rest_client_rate_limiter_duration_seconds_count"), "no limit, no limiter series");
        let limited = Gate::new("https://10.0.0.1:6443", 0.0, 0, Arc::new(AtomicBool::new(false)));
        limited.set_metrics(m.clone());
        limited.admit("POST", "/apis/events.k8s.io/v1/namespaces/default/events").expect("a token");
        let line = r#"rest_client_rate_limiter_duration_seconds_bucket{host="10.0.0.1:6443",verb="POST",le="0.005"} 1"#;
        assert!(m.text().lines().any(|l| l == line), "missing {line:?}");
    }
}
