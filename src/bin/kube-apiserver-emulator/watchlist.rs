//! WatchList (streaming lists, KEP-3157) as the API server serves it: a watch asking
//! `sendInitialEvents=true` (with `resourceVersionMatch=NotOlderThan`) gets every selected
//! object as an `ADDED` event, then, when it allows bookmarks, a bookmark annotated
//! `k8s.io/initial-events-end: "true"` at the state's resourceVersion, then the watch. Its
//! options are checked as the API server checks them, a server with its `WatchList` gate off
//! (or one before 1.27) refuses them with 422 (`--no-watch-list`, or the `watch_list` fault
//! switch at run time), and a resourceVersion the store has not reached is 504, "too large".

use crate::api::bad;
use crate::http::{Request, Response};
use crate::resources::Resource;
use kube_nftproxy::kube::{INITIAL_EVENTS_ANNOTATION_KEY, protobuf};

/// The only `resourceVersionMatch` a watch takes.
const NOT_OLDER_THAN: &str = "NotOlderThan";

/// What a watch asks of its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A plain watch: from its resourceVersion, or (none, or `0`) the state then the changes.
    Plain,
    /// `sendInitialEvents=true`: the state now, the bookmark ending it, then the changes.
    InitialEvents,
    /// `sendInitialEvents=false`: the changes after its resourceVersion (or after now).
    NoInitialEvents,
}

/// `sendInitialEvents`, read as Go's `strconv.ParseBool` reads it; `None` when not given.
fn send_initial_events(req: &Request) -> Result<Option<bool>, Response> {
    match req.param("sendInitialEvents") {
        None => Ok(None),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(Some(true)),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(Some(false)),
        Some(v) => Err(bad(&format!("invalid sendInitialEvents: {v}"))),
    }
}

/// Whether `req` (a watch) asks for a WatchList, well formed or not: what the stats count and
/// the `watchlist` faults match.
pub fn asked(req: &Request) -> bool {
    matches!(send_initial_events(req), Ok(Some(true)))
}

/// The 422 the API server answers to list options it refuses: each `field: what` of `errors`.
fn invalid(errors: &[String]) -> Response {
    let what = match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    Response::status(422, "Invalid", &format!("ListOptions.meta.k8s.io \"\" is invalid: {what}"))
}

/// A watch's start, its options checked as the API server's validation checks them; `served`
/// is whether the server's `WatchList` gate is on.
pub fn watch_start(req: &Request, served: bool) -> Result<Start, Response> {
    let initial = send_initial_events(req)?;
    let matching = req.param("resourceVersionMatch").unwrap_or("");
    let mut errors = Vec::new();
    if initial.is_some() {
        if matching != NOT_OLDER_THAN {
            errors.push(format!(
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"
            ));
        }
        if !served {
            errors.push(
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
                    .to_string(),
            );
        }
    }
    if !matching.is_empty() {
        if initial.is_none() {
            errors.push(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
                    .to_string(),
            );
        }
        if matching != NOT_OLDER_THAN {
            errors.push(format!(
                "resourceVersionMatch: Unsupported value: {matching:?}: supported values: {NOT_OLDER_THAN:?}"
            ));
        }
    }
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }
    Ok(match initial {
        None => Start::Plain,
        Some(true) => Start::InitialEvents,
        Some(false) => Start::NoInitialEvents,
    })
}

/// Refuses `sendInitialEvents` on a list, as the API server does.
pub fn check_list(req: &Request) -> Result<(), Response> {
    match send_initial_events(req)? {
        Some(_) => Err(invalid(&["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list".into()])),
        None => Ok(()),
    }
}

/// The 504 for a resourceVersion `asked` newer than the store's `current` (the API server's
/// watch cache answers it once it has waited a few seconds for it in vain).
pub fn too_large(asked: u64, current: u64) -> Response {
    Response::status(504, "Timeout", &format!("Timeout: Too large resource version: {asked}, current: {current}"))
}

/// A `BOOKMARK` event at `rv` of resource `res`, as a protobuf frame or a JSON line (not yet
/// chunked); `initial_events_end` marks it as the end of a WatchList's initial events.
pub fn bookmark(res: &Resource, rv: u64, initial_events_end: bool, proto: bool) -> Vec<u8> {
    let annotations: &[(&str, &str)] =
        if initial_events_end { &[(INITIAL_EVENTS_ANNOTATION_KEY, "true")] } else { &[] };
    if proto {
        let raw = protobuf::annotated("", "", &rv.to_string(), annotations);
        return protobuf::watch_frame("BOOKMARK", protobuf::seal(&res.api_version(), res.kind, raw));
    }
    let mut metadata = serde_json::json!({"resourceVersion": rv.to_string()});
    if !annotations.is_empty() {
        metadata["annotations"] = annotations.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect();
    }
    let object = serde_json::json!({"kind": res.kind, "apiVersion": res.api_version(), "metadata": metadata});
    let mut line = serde_json::json!({"type": "BOOKMARK", "object": object}).to_string().into_bytes();
    line.push(b'\n');
    line
}
