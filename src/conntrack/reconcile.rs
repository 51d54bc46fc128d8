//! Which UDP flows a sync left stale. The sync loop notes the Services each sync touched;
//! after a successful sync the reconciler compares each touched Service's UDP frontends and
//! serving endpoints with what it saw at its last cleanup, and plans a cleanup of the old and
//! new frontends of those that changed (an endpoint added, removed or no longer serving, a
//! scale to zero, a port, NodePort, external or load-balancer IP changed, the Service
//! deleted). Until a cleanup has succeeded once, every UDP Service counts as touched: after a
//! restart, flows may lead anywhere. A failed cleanup is planned again after the next sync.

use super::{ConntrackError, Frontend, Plan, Report};
use crate::model::{Family, Model, ObjectKey, Protocol};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// One Service's UDP frontends, each with its serving endpoints.
type Ports = BTreeMap<Frontend, BTreeSet<SocketAddr>>;

/// What the cleanups did since start, for the log and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Entries deleted, per family.
    pub deleted: BTreeMap<Family, u64>,
    /// Cleanups run.
    pub runs: u64,
    /// Cleanups that failed (logged; their Services are planned again after the next sync).
    pub failures: u64,
    /// The last successful cleanup's report.
    pub last: Option<Report>,
}

/// The sync thread's record of UDP Services between cleanups.
#[derive(Debug)]
pub struct Reconciler {
    /// Each UDP Service as the last successful cleanup left it.
    seen: BTreeMap<ObjectKey, Ports>,
    /// Services touched by syncs since the last plan.
    touched: BTreeSet<ObjectKey>,
    /// No cleanup has succeeded yet: every Service counts as touched.
    all: bool,
    /// What the plan being run makes of `seen` once it succeeds (`None`: no UDP port left).
    pending: Vec<(ObjectKey, Option<Ports>)>,
    totals: Totals,
}

impl Default for Reconciler {
    fn default() -> Reconciler {
        Reconciler {
            seen: BTreeMap::new(),
            touched: BTreeSet::new(),
            all: true,
            pending: Vec::new(),
            totals: Totals::default(),
        }
    }
}

impl Reconciler {
    /// Notes Services a sync is about to apply (`model::Changes::services`).
    pub fn touch<'a>(&mut self, services: impl IntoIterator<Item = &'a ObjectKey>) {
        // Until a cleanup succeeds every Service counts anyway: no copy of 30k keys.
        if !self.all {
            self.touched.extend(services.into_iter().cloned());
        }
    }

    /// What the Services touched since the last plan need cleaned, now that `model` is
    /// applied; `None` when no UDP frontend or serving endpoint changed. Run it, then hand
    /// the outcome to `finish`.
    pub fn plan(&mut self, model: &Model) -> Option<Plan> {
        let touched = std::mem::take(&mut self.touched);
        let keys: Box<dyn Iterator<Item = &ObjectKey>> = if self.all {
            let gone = self.seen.keys().filter(|k| !model.services.contains_key(*k));
            Box::new(model.services.keys().chain(gone))
        } else {
            Box::new(touched.iter())
        };
        self.pending.clear();
        let mut plan = Plan::default();
        let mut removed = BTreeSet::new();
        for key in keys {
            let now = udp_ports(model, key);
            let before = self.seen.get(key);
            if before.map_or(now.is_empty(), |b| *b == now) {
                continue;
            }
            for (f, allowed) in &now {
                plan.frontends.entry(*f).or_default().extend(allowed);
            }
            removed.extend(before.into_iter().flat_map(|b| b.keys()).filter(|f| !now.contains_key(f)));
            self.pending.push((key.clone(), (!now.is_empty()).then_some(now)));
        }
        self.plan_removed(&mut plan, removed);
        if plan.is_empty() {
            self.all = false;
            return None;
        }
        Some(plan)
    }

    /// Frontends a Service let go: their flows may now lead only to the endpoints of a Service
    /// that holds the frontend now (one handed over), else to none.
    fn plan_removed(&self, plan: &mut Plan, removed: BTreeSet<Frontend>) {
        if removed.is_empty() {
            return;
        }
        let changed: BTreeSet<&ObjectKey> = self.pending.iter().map(|(k, _)| k).collect();
        let others = self.seen.iter().filter(|(k, _)| !changed.contains(k)).map(|(_, ports)| ports);
        for ports in others {
            for (f, allowed) in ports.iter().filter(|(f, _)| removed.contains(f)) {
                plan.frontends.entry(*f).or_default().extend(allowed);
            }
        }
        for f in removed {
            plan.frontends.entry(f).or_default();
        }
    }

    /// Takes in how the last plan's cleanup went: success makes its view the one later plans
    /// compare with; a failure plans its Services again after the next sync. Logs either.
    pub fn finish(&mut self, result: Result<Report, ConntrackError>) {
        self.totals.runs += 1;
        match result {
            Ok(report) => {
                for (key, ports) in self.pending.drain(..) {
                    match ports {
                        Some(ports) => self.seen.insert(key, ports),
                        None => self.seen.remove(&key),
                    };
                }
                self.all = false;
                for f in &report.families {
                    *self.totals.deleted.entry(f.family).or_default() += f.deleted;
                }
                log::info!("conntrack cleanup: {}", describe(&report));
                self.totals.last = Some(report);
            }
            Err(e) => {
                self.totals.failures += 1;
                self.touched.extend(self.pending.drain(..).map(|(k, _)| k));
                log::warn!("{e}; the rules are applied, the cleanup is tried again after the next sync");
            }
        }
    }

    /// What the cleanups did since start.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }
}

/// `IPv4: deleted 1 of 57 flows in 1.2ms`, per family.
fn describe(report: &Report) -> String {
    let parts: Vec<String> = report
        .families
        .iter()
        .map(|f| {
            let partial = if f.partial { " (dump interrupted: some flows may remain)" } else { "" };
            let family = if f.family == Family::V4 { "IPv4" } else { "IPv6" };
            format!("{family}: deleted {} of {} flows in {:?}{partial}", f.deleted, f.scanned, f.took)
        })
        .collect();
    parts.join("; ")
}

/// A Service's UDP frontends with their serving endpoints, in each family it has a ClusterIP
/// of (as upstream's per-family proxiers see it). Traffic policies and topology do not
/// narrow the endpoints: a flow to any serving endpoint is fine.
fn udp_ports(model: &Model, key: &ObjectKey) -> Ports {
    let mut out = Ports::new();
    let udp = model.services.get(key).into_iter().flatten().filter(|p| p.name.protocol == Protocol::Udp);
    for sp in udp {
        for family in Family::ALL {
            if !sp.cluster_ips.iter().any(|ip| Family::of(ip) == family) {
                continue;
            }
            let serving = model.endpoints(&sp.name, family).into_iter().filter(|e| e.serving);
            let allowed: BTreeSet<SocketAddr> = serving.map(|e| SocketAddr::new(e.ip, e.port)).collect();
            let ips = sp.cluster_ips.iter().chain(&sp.external_ips).chain(&sp.load_balancer_ips);
            for ip in ips.filter(|ip| Family::of(ip) == family) {
                out.entry(Frontend::Address(SocketAddr::new(*ip, sp.port))).or_default().extend(&allowed);
            }
            if let Some(port) = sp.node_port {
                out.entry(Frontend::NodePort(family, port)).or_default().extend(&allowed);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ApiObject;
    use serde_json::{Value, json};

    fn file(model: &mut Model, v: Value) {
        model.apply(&ApiObject::from_json(v).unwrap().unwrap(), "node-a").unwrap();
    }

    /// Service `name` at ClusterIP `ip` with UDP port 53 (NodePort 30053) and TCP port 53.
    fn dns(model: &mut Model, name: &str, ip: &str, udp_port: u16) {
        file(
            model,
            json!({"kind": "Service", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"clusterIP": ip, "type": "NodePort", "externalIPs": ["192.0.2.7"], "ports": [
                {"name": "udp", "port": udp_port, "protocol": "UDP", "nodePort": 30053},
                {"name": "tcp", "port": 53, "protocol": "TCP"}]}}),
        );
    }

    /// Its slice: endpoints `10.1.0.N` (serving unless listed in `not_serving`).
    fn endpoints(model: &mut Model, name: &str, pods: &[u8], not_serving: &[u8]) {
        let eps: Vec<Value> = pods
            .iter()
            .map(|i| {
                json!({"addresses": [format!("10.1.0.{i}")],
            "conditions": {"ready": !not_serving.contains(i), "serving": !not_serving.contains(i)}})
            })
            .collect();
        file(
            model,
            json!({"kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": format!("{name}-a"), "namespace": "ns", "labels": {"kubernetes.io/service-name": name}},
            "ports": [{"name": "udp", "port": 5353, "protocol": "UDP"}, {"name": "tcp", "port": 5353, "protocol": "TCP"}],
            "endpoints": eps}),
        );
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// The plan after the model's changes are touched, with a successful (empty) cleanup.
    fn sync(r: &mut Reconciler, model: &mut Model) -> Option<Plan> {
        r.touch(&model.take_changes().services);
        let plan = r.plan(model);
        if plan.is_some() {
            r.finish(Ok(Report::default()));
        }
        plan
    }

    /// A plan of the three frontends of a port at 172.30.0.10:`port`, each allowing `allowed`.
    fn expected(port: u16, allowed: &[&str]) -> Vec<(Frontend, BTreeSet<SocketAddr>)> {
        let allowed: BTreeSet<SocketAddr> = allowed.iter().map(|a| addr(a)).collect();
        vec![
            (Frontend::Address(addr(&format!("172.30.0.10:{port}"))), allowed.clone()),
            (Frontend::Address(addr(&format!("192.0.2.7:{port}"))), allowed.clone()),
            (Frontend::NodePort(Family::V4, 30053), allowed),
        ]
    }

    fn sorted(plan: Option<Plan>) -> Vec<(Frontend, BTreeSet<SocketAddr>)> {
        let mut v: Vec<_> = plan.map(|p| p.frontends.into_iter().collect()).unwrap_or_default();
        v.sort();
        v
    }

    fn with_sorted(mut v: Vec<(Frontend, BTreeSet<SocketAddr>)>) -> Vec<(Frontend, BTreeSet<SocketAddr>)> {
        v.sort();
        v
    }

    #[test]
    fn each_udp_change_plans_its_frontends_and_nothing_else_does() {
        let (mut model, mut r) = (Model::default(), Reconciler::default());
        dns(&mut model, "dns", "172.30.0.10", 53);
        endpoints(&mut model, "dns", &[1, 2], &[]);
        file(
            &mut model,
            json!({"kind": "Service", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"clusterIP": "172.30.0.20", "ports": [{"port": 80}]}}),
        );
        let first = ["10.1.0.1:5353", "10.1.0.2:5353"];
        assert_eq!(
            sorted(sync(&mut r, &mut model)),
            with_sorted(expected(53, &first)),
            "the first sync: every UDP service"
        );
        endpoints(&mut model, "dns", &[1, 2], &[]);
        assert_eq!(sync(&mut r, &mut model), None, "an unchanged slice");
        file(
            &mut model,
            json!({"kind": "Service", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"clusterIP": "172.30.0.20", "ports": [{"port": 81}]}}),
        );
        assert_eq!(sync(&mut r, &mut model), None, "a TCP service changed");
        endpoints(&mut model, "dns", &[2, 3], &[3]);
        assert_eq!(
            sorted(sync(&mut r, &mut model)),
            with_sorted(expected(53, &["10.1.0.2:5353"])),
            "replaced; not serving"
        );
        endpoints(&mut model, "dns", &[], &[]);
        assert_eq!(sorted(sync(&mut r, &mut model)), with_sorted(expected(53, &[])), "scaled to zero");
        endpoints(&mut model, "dns", &[4], &[]);
        dns(&mut model, "dns", "172.30.0.10", 54);
        let mut moved = expected(54, &["10.1.0.4:5353"]);
        moved.extend(expected(53, &[]).into_iter().filter(|(f, _)| matches!(f, Frontend::Address(_))));
        assert_eq!(sorted(sync(&mut r, &mut model)), with_sorted(moved), "a port moved: the old frontends go");
        model.file(crate::model::ObjectChange::Service(("ns".into(), "dns".into()), None));
        assert_eq!(sorted(sync(&mut r, &mut model)), with_sorted(expected(54, &[])), "deleted");
        assert_eq!(sync(&mut r, &mut model), None, "nothing left to clean");
    }

    #[test]
    fn a_nodeport_or_an_external_ip_removed_alone_loses_every_flow() {
        let (mut model, mut r) = (Model::default(), Reconciler::default());
        dns(&mut model, "dns", "172.30.0.10", 53);
        endpoints(&mut model, "dns", &[1], &[]);
        sync(&mut r, &mut model);
        let one = BTreeSet::from([addr("10.1.0.1:5353")]);
        // The external IP goes, the rest stays.
        file(
            &mut model,
            json!({"kind": "Service", "metadata": {"name": "dns", "namespace": "ns"},
            "spec": {"clusterIP": "172.30.0.10", "type": "NodePort", "ports": [
                {"name": "udp", "port": 53, "protocol": "UDP", "nodePort": 30053},
                {"name": "tcp", "port": 53, "protocol": "TCP"}]}}),
        );
        let plan = sync(&mut r, &mut model).expect("a plan");
        assert_eq!(plan.frontends[&Frontend::Address(addr("192.0.2.7:53"))], BTreeSet::new(), "the IP went");
        assert_eq!(plan.frontends.get(&Frontend::NodePort(Family::V4, 30053)), Some(&one));
        // Then the NodePort: a ClusterIP service now.
        file(
            &mut model,
            json!({"kind": "Service", "metadata": {"name": "dns", "namespace": "ns"},
            "spec": {"clusterIP": "172.30.0.10", "ports": [
                {"name": "udp", "port": 53, "protocol": "UDP"}, {"name": "tcp", "port": 53, "protocol": "TCP"}]}}),
        );
        let plan = sync(&mut r, &mut model).expect("a plan");
        assert_eq!(plan.frontends[&Frontend::NodePort(Family::V4, 30053)], BTreeSet::new(), "the NodePort went");
        assert_eq!(plan.frontends.get(&Frontend::Address(addr("172.30.0.10:53"))), Some(&one));
        assert!(!plan.frontends.contains_key(&Frontend::Address(addr("192.0.2.7:53"))), "cleaned already");
    }

    #[test]
    fn a_frontend_handed_over_keeps_its_new_owners_endpoints() {
        let (mut model, mut r) = (Model::default(), Reconciler::default());
        dns(&mut model, "a", "172.30.0.10", 53);
        endpoints(&mut model, "a", &[1], &[]);
        sync(&mut r, &mut model);
        // `b` takes a's external IP and NodePort: only `a` changes in the next sync.
        dns(&mut model, "b", "172.30.0.11", 53);
        endpoints(&mut model, "b", &[2], &[]);
        sync(&mut r, &mut model);
        model.file(crate::model::ObjectChange::Service(("ns".into(), "a".into()), None));
        let plan = sync(&mut r, &mut model).expect("a plan");
        assert_eq!(plan.frontends[&Frontend::Address(addr("172.30.0.10:53"))], BTreeSet::new());
        let b = BTreeSet::from([addr("10.1.0.2:5353")]);
        assert_eq!(plan.frontends[&Frontend::Address(addr("192.0.2.7:53"))], b);
        assert_eq!(plan.frontends[&Frontend::NodePort(Family::V4, 30053)], b);
    }

    #[test]
    fn a_failed_cleanup_is_planned_again_and_counted() {
        let (mut model, mut r) = (Model::default(), Reconciler::default());
        dns(&mut model, "dns", "172.30.0.10", 53);
        endpoints(&mut model, "dns", &[1], &[]);
        sync(&mut r, &mut model);
        model.file(crate::model::ObjectChange::Service(("ns".into(), "dns".into()), None));
        r.touch(&model.take_changes().services);
        let plan = r.plan(&model).expect("a plan");
        let e = std::io::Error::from_raw_os_error(libc::EPERM);
        r.finish(Err(ConntrackError::Netlink { family: Family::V4, source: e }));
        assert_eq!(r.plan(&model), Some(plan), "the same plan after the next sync");
        let report = Report {
            families: vec![super::super::FamilyReport {
                family: Family::V4,
                deleted: 3,
                scanned: 9,
                partial: false,
                took: std::time::Duration::ZERO,
            }],
        };
        r.finish(Ok(report));
        assert_eq!((r.totals().runs, r.totals().failures, r.totals().deleted[&Family::V4]), (3, 1, 3));
        assert_eq!(r.plan(&model), None);
    }
}
