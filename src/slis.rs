//! `/metrics/slis`: upstream's health-check SLIs (component-base's `slis`), the result of
//! each health check a component runs, in a registry of their own as upstream keeps them
//! out of `/metrics`.

use prometheus::{Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};

/// The SLI metrics and their registry.
pub struct Slis {
    registry: Registry,
    /// `kubernetes_healthcheck{name,type}`: the last result of each check, 1 or 0.
    healthcheck: IntGaugeVec,
    /// `kubernetes_healthchecks_total{name,type,status}`.
    healthchecks: IntCounterVec,
}

impl Slis {
    /// Both metrics, registered, with no series until a check runs (as upstream).
    pub fn new() -> Result<Slis, prometheus::Error> {
        let registry = Registry::new();
        let help = "This metric records the result of a single healthcheck.";
        let healthcheck = IntGaugeVec::new(Opts::new("kubernetes_healthcheck", help), &["name", "type"])?;
        let help = "This metric records the results of all healthcheck.";
        let healthchecks =
            IntCounterVec::new(Opts::new("kubernetes_healthchecks_total", help), &["name", "type", "status"])?;
        registry.register(Box::new(healthcheck.clone()))?;
        registry.register(Box::new(healthchecks.clone()))?;
        Ok(Slis { registry, healthcheck, healthchecks })
    }

    /// Notes the result of check `name` run for path `kind` (`healthz`).
    pub fn observe(&self, name: &str, kind: &str, ok: bool) {
        self.healthcheck.with_label_values(&[name, kind]).set(i64::from(ok));
        let status = if ok { "success" } else { "error" };
        self.healthchecks.with_label_values(&[name, kind, status]).inc();
    }

    /// The page, in Prometheus' text format.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            log::warn!("encoding the SLI metrics: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_result_sets_the_gauge_and_counts_by_status() {
        let s = Slis::new().expect("slis");
        assert!(!s.text().contains("kubernetes_healthcheck{"), "nothing checked yet, as upstream");
        s.observe("ping", "healthz", true);
        s.observe("ping", "healthz", false);
        let text = s.text();
        assert!(text.contains("# TYPE kubernetes_healthcheck gauge"), "{text}");
        assert!(text.contains("# TYPE kubernetes_healthchecks_total counter"), "{text}");
        for line in [
            "kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 0",
            "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"} 1",
            "kubernetes_healthchecks_total{name=\"ping\",status=\"error\",type=\"healthz\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }
}
