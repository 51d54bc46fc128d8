//! The proxy's health, as kube-proxy reports it on `/healthz` and `/livez`: the sync thread
//! notes when a change is queued and, per family, when a sync applied it; once a family's
//! sync has gone through, that family is unhealthy while a change has waited for it longer
//! than the health timeout (twice `--sync-period`), and the proxy is healthy while every
//! family that has synced is (upstream's proxier per family, each judged alone: the kernel
//! may refuse one family's table while the other's syncs). Before its first sync a family
//! is not judged, as upstream's. `/healthz` is
//! also 503 when this node should not take load-balanced traffic (its Node unknown, being
//! deleted, or tainted by the cluster autoscaler for deletion), so load balancers drain it
//! first. The `http` thread serves the answers (`crate::http`); `services` says what the
//! health-check node ports of `externalTrafficPolicy: Local` services answer.

pub mod local;
pub mod node_ports;

use crate::http::{self, Reply};
use crate::inbox::Inbox;
use crate::model::Family;
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The health state the sync thread keeps and the server reads.
#[derive(Debug)]
pub struct Health {
    timeout: Duration,
    state: Mutex<State>,
    /// The sync thread's inbox, whose changes count as queued before the thread takes them.
    inbox: Option<Arc<Inbox>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// Each family's, in `Family::ALL`'s order.
    families: [FamilyState; 2],
    /// Whether this node may take load-balanced traffic (`None`: its Node is unknown).
    node_eligible: Option<bool>,
}

#[derive(Debug, Default, Clone, Copy)]
struct FamilyState {
    /// When the family's last sync succeeded.
    last_updated: Option<SystemTime>,
    /// When the oldest change not yet applied to the family was queued.
    oldest_queued: Option<SystemTime>,
}

/// One answer of `/healthz` or `/livez`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Whether every family that has synced applied every change within the timeout.
    pub healthy: bool,
    /// Whether this node may take load-balanced traffic.
    pub node_eligible: bool,
    /// When a family's sync last succeeded (the latest of them).
    pub last_updated: Option<SystemTime>,
    /// Each family that has synced, as upstream lists them.
    pub families: Vec<FamilyReport>,
    /// Whether the API server's feed is whole: no source has been without it longer than the
    /// timeout. Only `/livez` needs it: the node's rules still serve while the control plane
    /// is away, so load balancers (`/healthz`, health-check node ports) must not drain every
    /// node at once for it; a proxy cut off for good is restarted.
    pub fed: bool,
}

/// One family's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyReport {
    /// The family.
    pub family: Family,
    /// When its last sync succeeded.
    pub last_updated: SystemTime,
    /// Whether every change was applied to it within the timeout.
    pub healthy: bool,
}

impl Health {
    /// Health with changes allowed to wait `timeout` (kube-proxy: twice its sync period).
    pub fn new(timeout: Duration) -> Health {
        Health { timeout, state: Mutex::default(), inbox: None }
    }

    /// Also counts changes waiting in `inbox` as queued.
    pub fn watching(mut self, inbox: Arc<Inbox>) -> Health {
        self.inbox = Some(inbox);
        self
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Notes a change waiting to be applied to both families (the oldest one counts).
    pub fn queued(&self, now: SystemTime) {
        self.with(|s| {
            for f in &mut s.families {
                f.oldest_queued = f.oldest_queued.or(Some(now));
            }
        });
    }

    /// Notes a sync that applied every change queued before it to `families`' tables.
    pub fn updated(&self, families: &[Family], now: SystemTime) {
        self.with(|s| {
            for (family, f) in Family::ALL.iter().zip(&mut s.families) {
                if families.contains(family) {
                    f.last_updated = Some(now);
                    f.oldest_queued = None;
                }
            }
        });
    }

    /// Notes whether this node may take load-balanced traffic (`None`: its Node is unknown).
    pub fn set_node_eligible(&self, eligible: Option<bool>) {
        self.with(|s| s.node_eligible = eligible);
    }

    /// The health at `now`.
    pub fn report(&self, now: SystemTime) -> Report {
        let s = self.with(|s| *s);
        let waiting = self.inbox.as_ref().and_then(|i| i.oldest_waiting());
        // As upstream: only a family that has synced once is judged, so a proxy still
        // listing a big cluster is not restarted by its liveness probe.
        let families: Vec<FamilyReport> = Family::ALL
            .iter()
            .zip(&s.families)
            .filter_map(|(family, f)| {
                let oldest = [f.oldest_queued, waiting].into_iter().flatten().min();
                let waited = oldest.and_then(|q| now.duration_since(q).ok()).unwrap_or_default();
                let healthy = waited < self.timeout;
                Some(FamilyReport { family: *family, last_updated: f.last_updated?, healthy })
            })
            .collect();
        // Judged as queued changes are: once a family has synced.
        let lost = self.inbox.as_ref().and_then(|i| i.stale_since()).filter(|_| !families.is_empty());
        let fed = lost.and_then(|t| now.duration_since(t).ok()).is_none_or(|d| d < self.timeout);
        Report {
            healthy: families.iter().all(|f| f.healthy),
            fed,
            node_eligible: s.node_eligible == Some(true),
            last_updated: families.iter().map(|f| f.last_updated).max(),
            families,
        }
    }
}

/// A body as upstream writes it (Go's RFC 3339 times with nanoseconds).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    last_updated: String,
    current_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_eligible: Option<bool>,
    healthy: bool,
    status: std::collections::BTreeMap<&'static str, FamilyBody>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FamilyBody {
    last_updated: String,
    healthy: bool,
}

/// A time as Go's `time.RFC3339Nano` writes it: the fraction without trailing zeros (none
/// at all on a whole second), and Go's zero time for a time never set.
fn rfc3339(t: Option<SystemTime>) -> String {
    let Some(t) = t else { return "0001-01-01T00:00:00Z".into() };
    let text = humantime::format_rfc3339_nanos(t).to_string();
    match text.strip_suffix('Z').and_then(|s| s.split_once('.')) {
        Some((whole, fraction)) => match fraction.trim_end_matches('0') {
            "" => format!("{whole}Z"),
            f => format!("{whole}.{f}Z"),
        },
        None => text,
    }
}

/// The status code and JSON body for `path` (`/healthz` or `/livez`); `None` for other paths.
pub fn answer(health: &Health, path: &str, now: SystemTime) -> Option<(u16, String)> {
    let r = health.report(now);
    let (ok, node_eligible) = match path {
        "/healthz" => (r.healthy && r.node_eligible, Some(r.node_eligible)),
        "/livez" => (r.healthy && r.fed, None),
        _ => return None,
    };
    let body = |f: &FamilyReport| FamilyBody { last_updated: rfc3339(Some(f.last_updated)), healthy: f.healthy };
    let status = r.families.iter().map(|f| (f.family.label(), body(f))).collect();
    // As upstream: a healthy answer says "last updated now", for clients that compare it.
    let last_updated = if ok { rfc3339(Some(now)) } else { rfc3339(r.last_updated) };
    let healthy = r.healthy && (node_eligible.is_some() || r.fed);
    let body = Body { last_updated, current_time: rfc3339(Some(now)), node_eligible, healthy, status };
    let text = serde_json::to_string(&body).unwrap_or_default();
    Some((if ok { 200 } else { 503 }, text))
}

/// The reply for `path` (`/healthz`, `/livez`, else 404) at `now`.
pub fn reply(health: &Health, path: &str, now: SystemTime) -> Reply {
    match answer(health, path, now) {
        Some((code, body)) => Reply::new(code, http::JSON, body),
        None => Reply::not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn body(h: &Health, path: &str, now: SystemTime) -> (u16, serde_json::Value) {
        let (code, text) = answer(h, path, now).expect("a health path");
        (code, serde_json::from_str(&text).expect("json"))
    }

    #[test]
    fn a_change_waiting_past_the_timeout_is_unhealthy_until_applied() {
        let h = Health::new(Duration::from_secs(60));
        h.set_node_eligible(Some(true));
        h.queued(at(0));
        let (code, b) = body(&h, "/livez", at(600));
        assert_eq!(code, 200, "before its first sync the proxy is healthy, as upstream's: {b}");
        assert_eq!(b["status"], serde_json::json!({}), "no family has synced: {b}");
        h.updated(&Family::ALL, at(601));
        h.queued(at(700));
        h.queued(at(730));
        assert_eq!(body(&h, "/livez", at(759)).0, 200, "the oldest change counts, within the timeout");
        let (code, b) = body(&h, "/livez", at(761));
        assert_eq!((code, b["healthy"].clone()), (503, serde_json::json!(false)));
        assert_eq!(b["lastUpdated"], "2027-01-15T08:10:01Z", "the last sync, whole seconds as Go writes them");
        assert_eq!(b["status"]["IPv6"], serde_json::json!({"lastUpdated": "2027-01-15T08:10:01Z", "healthy": false}));
        h.updated(&Family::ALL, at(762));
        let (code, b) = body(&h, "/healthz", at(763));
        assert_eq!(code, 200);
        assert_eq!(b["lastUpdated"], b["currentTime"], "a healthy answer says updated now, as upstream");
        assert_eq!(b["status"]["IPv4"]["lastUpdated"], "2027-01-15T08:12:42Z");
    }

    #[test]
    fn each_family_is_judged_alone_and_the_proxy_is_healthy_only_when_every_synced_one_is() {
        let h = Health::new(Duration::from_secs(60));
        h.set_node_eligible(Some(true));
        h.queued(at(0));
        // The kernel refused IPv6's table from the start: as upstream, a family that never
        // synced is not judged (nor listed).
        h.updated(&[Family::V4], at(1));
        let (code, b) = body(&h, "/healthz", at(100));
        assert_eq!(code, 200, "{b}");
        assert_eq!(b["status"], serde_json::json!({"IPv4": {"lastUpdated": "2027-01-15T08:00:01Z", "healthy": true}}));
        h.updated(&Family::ALL, at(110));
        // Now IPv6's sync is refused: a change reaches IPv4's table only.
        h.queued(at(200));
        h.updated(&[Family::V4], at(201));
        assert_eq!(body(&h, "/healthz", at(259)).0, 200, "within the timeout");
        let (code, b) = body(&h, "/healthz", at(261));
        assert_eq!((code, b["healthy"].clone()), (503, serde_json::json!(false)), "{b}");
        assert_eq!(b["status"]["IPv4"], serde_json::json!({"lastUpdated": "2027-01-15T08:03:21Z", "healthy": true}));
        assert_eq!(b["status"]["IPv6"], serde_json::json!({"lastUpdated": "2027-01-15T08:01:50Z", "healthy": false}));
        assert_eq!(b["lastUpdated"], "2027-01-15T08:03:21Z", "the latest family's, as upstream");
        assert_eq!(body(&h, "/livez", at(261)).0, 503);
        // IPv6's retry goes through.
        h.updated(&[Family::V6], at(262));
        let (code, b) = body(&h, "/healthz", at(263));
        assert_eq!(code, 200, "{b}");
        assert_eq!(b["status"]["IPv6"]["healthy"], true);
    }

    #[test]
    fn a_change_the_sync_thread_has_not_taken_yet_counts_as_queued() {
        let inbox = Arc::new(Inbox::default());
        let h = Health::new(Duration::from_secs(60)).watching(inbox.clone());
        let later = || SystemTime::now() + Duration::from_secs(61);
        inbox.send(crate::model::ObjectChange::Service(("ns".into(), "a".into()), None));
        assert!(h.report(later()).healthy, "not judged before the first sync");
        h.updated(&Family::ALL, SystemTime::now());
        assert!(!h.report(later()).healthy, "the sync thread is stuck: the change waits in the inbox");
        let _ = inbox.wait(std::time::Instant::now());
        assert!(h.report(later()).healthy, "taken, and (as no sync is due for it) nothing waits");
        inbox.send(crate::model::ObjectChange::Node(None));
        assert!(h.report(later()).healthy, "a Node change is not a queued rule change, as upstream");
    }

    #[test]
    fn a_lost_feed_turns_livez_alone_unhealthy_once_it_outlasts_the_timeout() {
        let inbox = Arc::new(Inbox::default());
        let h = Health::new(Duration::from_secs(60)).watching(inbox.clone());
        h.set_node_eligible(Some(true));
        let now = SystemTime::now();
        inbox.stale("services", now - Duration::from_secs(61));
        assert_eq!(body(&h, "/livez", now).0, 200, "not judged before the first sync");
        h.updated(&Family::ALL, now);
        let (code, b) = body(&h, "/livez", now);
        assert_eq!((code, b["healthy"].clone()), (503, false.into()), "{b}");
        let (code, b) = body(&h, "/healthz", now);
        assert_eq!((code, b["healthy"].clone()), (200, true.into()), "load balancers keep the node: {b}");
        inbox.fresh("services");
        inbox.stale("services", now - Duration::from_secs(59));
        assert_eq!(body(&h, "/livez", now).0, 200, "lost for less than the timeout");
    }

    #[test]
    fn times_are_written_as_gos_rfc3339_nano() {
        let t = |nanos: u32| rfc3339(Some(at(0) + Duration::from_nanos(u64::from(nanos))));
        assert_eq!(t(0), "2027-01-15T08:00:00Z");
        assert_eq!(t(500_000_000), "2027-01-15T08:00:00.5Z");
        assert_eq!(t(123_450_000), "2027-01-15T08:00:00.12345Z");
        assert_eq!(t(1), "2027-01-15T08:00:00.000000001Z");
        assert_eq!(rfc3339(None), "0001-01-01T00:00:00Z");
    }

    #[test]
    fn healthz_also_needs_an_eligible_node_and_livez_does_not() {
        let h = Health::new(Duration::from_secs(60));
        for node in [None, Some(false)] {
            h.set_node_eligible(node);
            let (code, b) = body(&h, "/healthz", at(0));
            assert_eq!((code, b["nodeEligible"].clone(), b["healthy"].clone()), (503, false.into(), true.into()));
            assert_eq!(body(&h, "/livez", at(0)).0, 200);
        }
        assert!(answer(&h, "/other", at(0)).is_none());
    }
}
