//! The one Event the daemon records, as kube-proxy does: `Starting` on this node's Node once
//! the first sync went through, through the `events.k8s.io/v1` API. It is best effort: a
//! server that refuses it (no RBAC grant, an old server, a timeout) costs one warning line,
//! after at most one retry, and the proxy goes on.

use super::client::{ApiError, Client};
use super::reflector::Shared;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the Event is created. A cluster-scoped object's Events live in `default`, which is
/// where `kubectl describe node` looks for them.
pub const PATH: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

/// The verb the daemon uses on [`PATH`]: it creates one Event and never updates it (no
/// series), so the ClusterRole grants `create` and nothing else on events.
pub const VERB: &str = "create";

/// The `reportingController` of the daemon's Events.
pub const CONTROLLER: &str = "kube-nftproxy";

/// The wait before the one retry of a failure that may pass (no answer, 5xx, 429), unless the
/// server asked for longer (`Retry-After`).
const RETRY_AFTER: Duration = Duration::from_secs(3);

/// How the Event fared, for the log line.
#[derive(Debug)]
pub enum Outcome {
    /// The server took it (or already had it: an answer lost before a retry).
    Recorded,
    /// The server refused it, or could not be reached twice.
    Failed(ApiError),
    /// The daemon stopped before the retry.
    Stopped,
}

/// The `Starting` Event on Node `node_name` at `now`, as kube-proxy records it: the Node's
/// name doubles as its UID (the proxy need not have read the Node to say it started), and
/// the name is the Node's and the time in hexadecimal nanoseconds, as client-go names them.
pub fn starting(node_name: &str, now: SystemTime) -> Value {
    let nanos = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": format!("{node_name}.{nanos:x}"), "namespace": "default"},
        "eventTime": humantime::format_rfc3339_micros(now).to_string(),
        "reportingController": CONTROLLER,
        "reportingInstance": format!("{CONTROLLER}-{node_name}"),
        "action": "StartKubeProxy",
        "reason": "Starting",
        "type": "Normal",
        "regarding": {"kind": "Node", "name": node_name, "uid": node_name},
    })
}

/// Posts `event`, retrying once after [`RETRY_AFTER`] (or the server's `Retry-After`, if
/// longer) when the failure may pass; every
/// request is bounded by the client's timeouts.
pub fn record(client: &Client, event: &Value, stop: &AtomicBool) -> Outcome {
    let first = match client.post(PATH, event) {
        Ok(_) => return Outcome::Recorded,
        Err(ApiError::Stopped) => return Outcome::Stopped,
        Err(e) if !transient(&e) => return Outcome::Failed(e),
        Err(e) => e,
    };
    let wait = match &first {
        ApiError::Status { retry_after: Some(asked), .. } => (*asked).clamp(RETRY_AFTER, super::retry::MAX_RETRY_AFTER),
        _ => RETRY_AFTER,
    };
    log::debug!("recording the Starting event failed ({first}); trying once more in {wait:?}");
    if !sleep_unless_stopped(stop, wait) {
        return Outcome::Stopped;
    }
    match client.post(PATH, event) {
        Ok(_) => Outcome::Recorded,
        // The first request went through after all, its answer lost on the way.
        Err(ApiError::Status { code: 409, .. }) => Outcome::Recorded,
        Err(ApiError::Stopped) => Outcome::Stopped,
        Err(e) => Outcome::Failed(e),
    }
}

/// Whether a second try could fare better: no answer, a server error, or too many requests.
fn transient(e: &ApiError) -> bool {
    match e.code() {
        Some(code) => code == 429 || code >= 500,
        None => matches!(e, ApiError::Transport(_)),
    }
}

/// Sleeps up to `wait` in short steps; false if the daemon stopped meanwhile.
fn sleep_unless_stopped(stop: &AtomicBool, wait: Duration) -> bool {
    let step = Duration::from_millis(100);
    let mut left = wait;
    while !left.is_zero() {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let nap = left.min(step);
        std::thread::sleep(nap);
        left -= nap;
    }
    !stop.load(Ordering::SeqCst)
}

/// Records the `Starting` Event from a thread of its own, so the sync loop never waits for
/// the API server; the outcome is one log line.
pub fn spawn_starting(api: Arc<Shared>) {
    let spawned = std::thread::Builder::new().name("event".into()).spawn(move || {
        let event = starting(&api.node_name, SystemTime::now());
        match record(&api.client, &event, &api.stop) {
            Outcome::Recorded => log::info!("recorded the Starting event on Node {}", api.node_name),
            Outcome::Failed(e) => log::warn!(
                "could not record the Starting event on Node {} ({e}); the proxy runs on without it{}",
                api.node_name,
                hint(&e)
            ),
            Outcome::Stopped => {}
        }
    });
    if let Err(e) = spawned {
        log::warn!("cannot start the thread recording the Starting event: {e}");
    }
}

/// What an operator can do about a refusal.
fn hint(e: &ApiError) -> &'static str {
    match e.code() {
        Some(403) => "; grant create on events.k8s.io events (packaging/kubernetes/rbac.yaml)",
        Some(404) => "; the server has no events.k8s.io/v1 API",
        _ => "",
    }
}

/// `then`, followed by the `Starting` Event when an API server is followed: what runs once
/// the first sync went through.
pub fn and_starting(api: Option<Arc<Shared>>, then: Box<dyn FnOnce() + Send>) -> Box<dyn FnOnce() + Send> {
    match api {
        Some(api) => Box::new(move || {
            then();
            spawn_starting(api);
        }),
        None => then,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_starting_event_is_kube_proxys() {
        let at = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let e = starting("node-a", at);
        assert_eq!(e["metadata"]["name"], format!("node-a.{:x}", 1_700_000_000_123_456_789u64));
        assert_eq!(e["eventTime"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(e["regarding"], json!({"kind": "Node", "name": "node-a", "uid": "node-a"}));
        assert_eq!(
            (&e["reason"], &e["action"], &e["type"]),
            (&json!("Starting"), &json!("StartKubeProxy"), &json!("Normal"))
        );
        assert_eq!(e["reportingInstance"], "kube-nftproxy-node-a");
        assert!(PATH.contains(&format!("/namespaces/{}/", e["metadata"]["namespace"].as_str().unwrap_or_default())));
    }

    #[test]
    fn only_failures_that_may_pass_are_retried() {
        let status = |code| ApiError::Status { code, reason: String::new(), message: String::new(), retry_after: None };
        assert!(transient(&status(500)) && transient(&status(503)) && transient(&status(429)));
        assert!(!transient(&status(403)) && !transient(&status(404)) && !transient(&status(422)));
        assert!(transient(&ApiError::Transport("timed out".into())));
        assert!(!transient(&ApiError::Credentials("no token".into())));
    }
}
