//! What the sync loop reports outward: the state `/healthz` and `/livez` answer from, the
//! metrics, and the health-check node ports and localhost NodePorts to serve. Each part is optional (the loop's
//! tests run without them); all of it is kept current only for what a sync touched.

use crate::config::Config;
use crate::health::Health;
use crate::health::local::LocalView;
use crate::health::node_ports::{Listen, Wanted};
use crate::http::Server;
use crate::localhost::{LocalhostView, proxy::Proxy};
use crate::metrics::Metrics;
use crate::model::{Changes, Family, Model, ObjectKey, ObjectKind};
use crate::nft::SyncKind;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// One successful sync, as reported.
#[derive(Debug, Clone, Copy)]
pub struct Synced {
    /// What kind of transaction it was.
    pub kind: SyncKind,
    /// Render and apply together.
    pub took: Duration,
    /// Bytes of `nft` script sent.
    pub bytes: usize,
    /// Set and map elements written or deleted.
    pub elements: usize,
}

/// The sync loop's outward reports.
pub struct Observers {
    /// When the proxy started: a change triggered before was no latency of this proxy's (as
    /// upstream, whose first listing would otherwise report every object's age).
    started: SystemTime,
    health: Option<Arc<Health>>,
    metrics: Option<Arc<Metrics>>,
    server: Option<Server<Wanted>>,
    local: LocalView,
    /// What the health-check servers were last asked for.
    wanted: Option<Wanted>,
    /// Localhost NodePorts: what each Service asks for, and the thread that serves them.
    localhost: Option<(LocalhostView, Proxy)>,
    /// Services with a Service change, and Services with an EndpointSlice change, not yet
    /// applied: the pending gauges count Services, as upstream's change trackers do. (A first
    /// listing fills them for a moment; the first sync empties them.)
    pending_services: BTreeSet<ObjectKey>,
    pending_endpoints: BTreeSet<ObjectKey>,
}

impl Default for Observers {
    fn default() -> Observers {
        Observers {
            started: SystemTime::now(),
            health: None,
            metrics: None,
            server: None,
            local: LocalView::default(),
            wanted: None,
            localhost: None,
            pending_services: BTreeSet::new(),
            pending_endpoints: BTreeSet::new(),
        }
    }
}

impl Observers {
    /// Reports to `/healthz` and `/livez` through `health`.
    pub fn with_health(mut self, health: Arc<Health>) -> Observers {
        self.health = Some(health);
        self
    }

    /// Records metrics in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Observers {
        self.metrics = Some(metrics);
        self
    }

    /// Has `server` serve the health-check node ports.
    pub fn with_service_health(mut self, server: Server<Wanted>) -> Observers {
        self.server = Some(server);
        self
    }

    /// Has `proxy` serve the localhost NodePorts `view` finds.
    pub fn with_localhost(mut self, view: LocalhostView, proxy: Proxy) -> Observers {
        self.localhost = Some((view, proxy));
        self
    }

    /// Notes one object delivered to the loop, about `service` (a Service's own key, or the
    /// Service an EndpointSlice belongs to); `changed` says whether the rules depend on what
    /// changed.
    pub fn delivered(&mut self, kind: ObjectKind, service: Option<ObjectKey>, changed: bool, now: SystemTime) {
        let Some(m) = &self.metrics else { return };
        let (total, pending, gauge) = match kind {
            ObjectKind::Service => (&m.service_changes, &mut self.pending_services, &m.service_changes_pending),
            ObjectKind::EndpointSlice => {
                (&m.endpoint_changes, &mut self.pending_endpoints, &m.endpoint_changes_pending)
            }
            _ => return,
        };
        total.inc();
        if changed {
            if let Some(service) = service {
                pending.insert(service);
            }
            gauge.set(pending.len() as i64);
            Metrics::stamp_families(&m.last_queued, &Family::ALL, now);
        }
    }

    /// Notes a change to the rules waiting to be applied, and this node's eligibility.
    pub fn queued(&self, changed: bool, node_eligible: Option<bool>, now: SystemTime) {
        if let Some(h) = &self.health {
            if changed {
                h.queued(now);
            }
            h.set_node_eligible(node_eligible);
        }
    }

    /// Notes a full sync forced to restore the tables, and why (`tampered`, `not-intact`).
    pub fn repair(&self, reason: &str) {
        if let Some(m) = &self.metrics {
            m.repairs.with_label_values(&[reason]).inc();
        }
    }

    /// Notes a sync that took `took` and failed for `families` (the kernel refused their
    /// part, or all of it): upstream times every attempt of each family's proxier, so
    /// failures ÷ attempts is a failure ratio per family.
    pub fn failed(&self, took: Duration, families: &[Family]) {
        if let Some(m) = &self.metrics {
            Metrics::count_families(&m.sync_failures, families);
            Metrics::observe_families(&m.sync_duration, families, took);
        }
    }

    /// Notes how long each change a sync applied waited for it, and why (a reason's label).
    pub fn waited(&self, waits: impl Iterator<Item = (Duration, &'static str)>) {
        if let Some(m) = &self.metrics {
            for (wait, reason) in waits {
                m.change_wait.with_label_values(&[reason]).observe(wait.as_secs_f64());
            }
        }
    }

    /// Notes a failed deletion of stale chains.
    pub fn cleanup_failed(&self) {
        if let Some(m) = &self.metrics {
            Metrics::count_families(&m.cleanup_failures, &Family::ALL);
        }
    }

    /// Notes a successful sync that applied `changes` (taken from the model when it rendered)
    /// to the tables of `families` (both, unless the kernel refused one or it was held).
    pub fn synced(&mut self, s: &Synced, changes: &Changes, now: SystemTime, families: &[Family]) {
        if let Some(h) = &self.health {
            h.updated(families, now);
        }
        let Some(m) = &self.metrics else { return };
        let kind = format!("{:?}", s.kind).to_lowercase();
        m.syncs.with_label_values(&[&kind]).inc();
        m.sync_bytes.with_label_values(&[&kind]).inc_by(s.bytes as u64);
        m.sync_elements.with_label_values(&[&kind]).inc_by(s.elements as u64);
        let by_kind = match s.kind {
            SyncKind::Full | SyncKind::Refresh => &m.sync_full_duration,
            SyncKind::Partial | SyncKind::Unchanged => &m.sync_partial_duration,
        };
        Metrics::observe_families(&m.sync_duration, families, s.took);
        Metrics::observe_families(by_kind, families, s.took);
        Metrics::stamp_families(&m.last_sync, families, now);
        let applied = changes.trigger_times.iter().filter(|(f, t)| *t > self.started && families.contains(f));
        for (family, triggered) in applied {
            if let Ok(waited) = now.duration_since(*triggered) {
                m.network_programming.with_label_values(&[family.label()]).observe(waited.as_secs_f64());
            }
        }
        self.pending_services.clear();
        self.pending_endpoints.clear();
        m.service_changes_pending.set(0);
        m.endpoint_changes_pending.set(0);
    }

    /// Notes a conntrack cleanup: per family, how long its sweep took and what it deleted.
    pub fn conntrack(&self, report: &crate::conntrack::Report) {
        let Some(m) = &self.metrics else { return };
        for f in &report.families {
            let family = f.family.label();
            m.conntrack_duration.with_label_values(&[family]).observe(f.took.as_secs_f64());
            m.conntrack_deleted.with_label_values(&[family]).inc_by(f.deleted);
        }
    }

    /// Brings the node-local views up to `model` for what `changes` touched (everything after
    /// a rebuild, `all`), and hands the health-check node ports and localhost NodePorts to
    /// their servers.
    pub fn local(&mut self, model: &Model, cfg: &Config, changes: &Changes, all: bool) {
        let all = all || changes.global;
        if let Some((view, proxy)) = &mut self.localhost
            && view.update(model, &cfg.node_name, all, changes.services.iter())
        {
            proxy.want(view.wanted());
        }
        if self.metrics.is_none() && self.server.is_none() {
            return;
        }
        let changed = self.local.update(model, &cfg.node_name, all, changes.services.iter());
        if let Some(m) = &self.metrics {
            for (family, policy, n) in self.local.no_local_endpoints() {
                m.no_local_endpoints.with_label_values(&[family.label(), policy]).set(i64::from(n));
            }
        }
        let Some(server) = &self.server else { return };
        let listen = listen_on(model, cfg);
        if changed || self.wanted.as_ref().is_none_or(|w| w.listen != listen) {
            let wanted = Wanted { ports: self.local.health_check_ports(), listen };
            server.want(wanted.clone());
            self.wanted = Some(wanted);
        }
    }
}

/// Where the health-check node ports listen: where NodePorts are served. A family serving
/// NodePorts on every address listens on every address, unless IPv4 already listens on
/// chosen ones: upstream's proxiers each listen for their family, IPv4's first, and the
/// IPv6 wildcard listener then finds the port taken (`primary` on a Node without an IPv6
/// address, or CIDRs of IPv4 alone, must not open the port on every address).
fn listen_on(model: &Model, cfg: &Config) -> Listen {
    let mut ips: Vec<IpAddr> = Vec::new();
    for family in Family::ALL {
        match crate::render::nodeport_ips(cfg, model, family) {
            None if ips.is_empty() => return Listen::All,
            None => {}
            Some(of_family) => ips.extend(of_family),
        }
    }
    Listen::Ips(ips)
}
