//! The proxy's health, as kube-proxy reports it on `/healthz` and `/livez`: the sync thread
//! notes when a change is queued and when a sync applied it; once a sync has gone through,
//! the proxy is unhealthy while a change has waited longer than the health timeout (twice
//! `--sync-period`). Before its first sync it is healthy, as upstream's. `/healthz` is
//! also 503 when this node should not take load-balanced traffic (its Node unknown, being
//! deleted, or tainted by the cluster autoscaler for deletion), so load balancers drain it
//! first. The `http` thread serves the answers (`crate::http`); `services` says what the
//! health-check node ports of `externalTrafficPolicy: Local` services answer.

pub mod local;
pub mod services;

use crate::http::{self, Reply};
use crate::inbox::Inbox;
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
    /// When the last sync succeeded.
    last_updated: Option<SystemTime>,
    /// When the oldest change not yet applied was queued.
    oldest_queued: Option<SystemTime>,
    /// Whether this node may take load-balanced traffic (`None`: its Node is unknown).
    node_eligible: Option<bool>,
}

/// One answer of `/healthz` or `/livez`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Whether every change was applied within the timeout.
    pub healthy: bool,
    /// Whether this node may take load-balanced traffic.
    pub node_eligible: bool,
    /// When the last sync succeeded.
    pub last_updated: Option<SystemTime>,
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

    /// Notes a change waiting to be applied (the oldest one counts).
    pub fn queued(&self, now: SystemTime) {
        self.with(|s| s.oldest_queued = s.oldest_queued.or(Some(now)));
    }

    /// Notes a sync that applied every change queued before it.
    pub fn updated(&self, now: SystemTime) {
        self.with(|s| {
            s.last_updated = Some(now);
            s.oldest_queued = None;
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
        let oldest = [s.oldest_queued, waiting].into_iter().flatten().min();
        let waited = oldest.and_then(|q| now.duration_since(q).ok()).unwrap_or_default();
        Report {
            // As upstream: only a family that has synced once is judged, so a proxy still
            // listing a big cluster is not restarted by its liveness probe.
            healthy: s.last_updated.is_none() || waited < self.timeout,
            node_eligible: s.node_eligible == Some(true),
            last_updated: s.last_updated,
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
        "/livez" => (r.healthy, None),
        _ => return None,
    };
    // Both families are programmed by every sync, so they share one state; as upstream, a
    // family appears once it has synced.
    let family = || FamilyBody { last_updated: rfc3339(r.last_updated), healthy: r.healthy };
    let families = if r.last_updated.is_some() { &["IPv4", "IPv6"][..] } else { &[] };
    let status = families.iter().map(|f| (*f, family())).collect();
    // As upstream: a healthy answer says "last updated now", for clients that compare it.
    let last_updated = if ok { rfc3339(Some(now)) } else { rfc3339(r.last_updated) };
    let body = Body { last_updated, current_time: rfc3339(Some(now)), node_eligible, healthy: r.healthy, status };
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
        h.updated(at(601));
        h.queued(at(700));
        h.queued(at(730));
        assert_eq!(body(&h, "/livez", at(759)).0, 200, "the oldest change counts, within the timeout");
        let (code, b) = body(&h, "/livez", at(761));
        assert_eq!((code, b["healthy"].clone()), (503, serde_json::json!(false)));
        assert_eq!(b["lastUpdated"], "2027-01-15T08:10:01Z", "the last sync, whole seconds as Go writes them");
        assert_eq!(b["status"]["IPv6"], serde_json::json!({"lastUpdated": "2027-01-15T08:10:01Z", "healthy": false}));
        h.updated(at(762));
        let (code, b) = body(&h, "/healthz", at(763));
        assert_eq!(code, 200);
        assert_eq!(b["lastUpdated"], b["currentTime"], "a healthy answer says updated now, as upstream");
        assert_eq!(b["status"]["IPv4"]["lastUpdated"], "2027-01-15T08:12:42Z");
    }

    #[test]
    fn a_change_the_sync_thread_has_not_taken_yet_counts_as_queued() {
        let inbox = Arc::new(Inbox::default());
        let h = Health::new(Duration::from_secs(60)).watching(inbox.clone());
        let later = || SystemTime::now() + Duration::from_secs(61);
        inbox.send(crate::model::ObjectChange::Service(("ns".into(), "a".into()), None));
        assert!(h.report(later()).healthy, "not judged before the first sync");
        h.updated(SystemTime::now());
        assert!(!h.report(later()).healthy, "the sync thread is stuck: the change waits in the inbox");
        let _ = inbox.wait(std::time::Instant::now());
        assert!(h.report(later()).healthy, "taken, and (as no sync is due for it) nothing waits");
        inbox.send(crate::model::ObjectChange::Node(None));
        assert!(h.report(later()).healthy, "a Node change is not a queued rule change, as upstream");
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
