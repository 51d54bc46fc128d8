//! What the emulator checks of an `events.k8s.io/v1` Event written through the API, as the
//! API server's strict validation for that API does: the fields every new Event must carry,
//! a known type, and a regarding object in the Event's namespace. A refusal is a 422 Invalid
//! Status naming each field, as the server's is.

use crate::http::Response;
use serde_json::{Value, json};

/// The fields an `events.k8s.io/v1` Event cannot be created without.
const REQUIRED: [&str; 5] = ["eventTime", "reportingController", "reportingInstance", "action", "reason"];

/// The event types the server accepts.
const TYPES: [&str; 2] = ["Normal", "Warning"];

/// One thing wrong with an Event: the field and the server's words for it.
struct Cause {
    reason: &'static str,
    field: String,
    message: String,
}

/// Checks `event` (its namespace already set from the path); the 422 to answer if it fails.
pub fn validate(event: &Value) -> Result<(), Response> {
    let text = |field: &str| event[field].as_str().unwrap_or_default();
    let mut causes: Vec<Cause> = REQUIRED
        .iter()
        .filter(|f| text(f).is_empty())
        .map(|f| Cause { reason: "FieldValueRequired", field: f.to_string(), message: "Required value".into() })
        .collect();
    let kind = text("type");
    if !TYPES.contains(&kind) {
        let message = format!("Invalid value: {kind:?}: has invalid value: {kind}");
        causes.push(Cause { reason: "FieldValueInvalid", field: "type".into(), message });
    }
    // A cluster-scoped object's Events go to `default` (or no namespace); a namespaced
    // object's go to its own namespace.
    let namespace = event["metadata"]["namespace"].as_str().unwrap_or_default();
    let regarding = event["regarding"]["namespace"].as_str().unwrap_or_default();
    let fits = if regarding.is_empty() { matches!(namespace, "" | "default") } else { regarding == namespace };
    if !fits {
        let message = format!("Invalid value: {regarding:?}: does not match event.namespace");
        causes.push(Cause { reason: "FieldValueInvalid", field: "regarding.namespace".into(), message });
    }
    if causes.is_empty() { Ok(()) } else { Err(invalid(event, &causes)) }
}

/// The 422 Status for `causes`, worded as the API server words it.
fn invalid(event: &Value, causes: &[Cause]) -> Response {
    let meta = &event["metadata"];
    let name = meta["name"].as_str().filter(|n| !n.is_empty()).or(meta["generateName"].as_str()).unwrap_or_default();
    let each: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    let list = if each.len() == 1 { each.concat() } else { format!("[{}]", each.join(", ")) };
    let details: Vec<Value> =
        causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect();
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("Event.events.k8s.io {name:?} is invalid: {list}"),
        "reason": "Invalid",
        "details": {"name": name, "group": "events.k8s.io", "kind": "Event", "causes": details},
        "code": 422,
    });
    Response::json(422, status.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"generateName": "node-a.", "namespace": "default"},
            "eventTime": "2025-01-02T03:04:05.678901Z",
            "reportingController": "kube-nftproxy", "reportingInstance": "kube-nftproxy-node-a",
            "action": "StartKubeProxy", "reason": "Starting", "type": "Normal",
            "regarding": {"kind": "Node", "name": "node-a", "uid": "node-a"},
        })
    }

    fn refusal(e: &Value) -> Value {
        let resp = validate(e).err().unwrap_or_else(|| panic!("accepted: {e}"));
        assert_eq!(resp.status, 422);
        serde_json::from_slice(&resp.body).unwrap_or_default()
    }

    #[test]
    fn a_complete_event_passes() {
        assert!(validate(&event()).is_ok());
    }

    #[test]
    fn missing_fields_and_a_bad_type_are_422_naming_each() {
        let mut e = event();
        e.as_object_mut().map(|m| m.remove("reason"));
        e["action"] = json!("");
        let status = refusal(&e);
        assert_eq!(status["reason"], "Invalid");
        let msg = status["message"].as_str().unwrap_or_default();
        assert_eq!(
            msg,
            r#"Event.events.k8s.io "node-a." is invalid: [action: Required value, reason: Required value]"#
        );
        e = event();
        e["type"] = json!("Info");
        assert_eq!(refusal(&e)["details"]["causes"][0]["field"], "type");
    }

    #[test]
    fn the_regarding_object_must_be_in_the_events_namespace() {
        let mut e = event();
        e["regarding"]["namespace"] = json!("shop");
        assert_eq!(refusal(&e)["details"]["causes"][0]["field"], "regarding.namespace");
        e["metadata"]["namespace"] = json!("shop");
        assert!(validate(&e).is_ok());
    }
}
