//! The `/emulator/*` control endpoints: bulk apply and delete, faults, stats, and the latest
//! requests.

use crate::api::{App, bad, store_error};
use crate::http::{Request, Response};
use crate::store::{Mode, key_of};
use serde_json::{Value, json};

/// Handles `/emulator/{rest}`.
pub fn handle(app: &App, req: &Request, rest: &str) -> Response {
    match (req.method.as_str(), rest) {
        ("GET", "requests") => Response::json(200, app.stats.recent().to_string().into_bytes()),
        ("GET", "stats") => {
            let (rv, compacted) = app.store.versions();
            let open = app.store.lock().watchers.counts();
            Response::json(200, app.stats.report(rv, compacted, open).to_string().into_bytes())
        }
        ("POST", "apply" | "delete" | "faults") => {
            let body: Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return bad(&format!("invalid JSON: {e}")),
            };
            let result = match rest {
                "apply" => each(app, &body, true),
                "delete" => each(app, &body, false),
                _ => app.faults.apply(&body, &app.store).map(|_| json!({})).map_err(|e| bad(&e.to_string())),
            };
            match result {
                Ok(v) => Response::json(200, v.to_string().into_bytes()),
                Err(resp) => resp,
            }
        }
        _ => Response::status(404, "NotFound", "unknown emulator endpoint"),
    }
}

/// The objects of a body: one object, an array, or `{"items": [...]}`.
fn objects(body: &Value) -> Vec<Value> {
    match body {
        Value::Array(items) => items.clone(),
        _ if body.get("items").is_some_and(Value::is_array)
            && body.get("metadata").is_none_or(|m| m.get("name").is_none()) =>
        {
            body["items"].as_array().cloned().unwrap_or_default()
        }
        _ => vec![body.clone()],
    }
}

/// Upserts (`apply`) or deletes each object; answers the resourceVersion after the last write.
fn each(app: &App, body: &Value, apply: bool) -> Result<Value, Response> {
    for mut obj in objects(body) {
        let (api_version, kind) = (obj["apiVersion"].as_str().unwrap_or(""), obj["kind"].as_str().unwrap_or(""));
        let res = app
            .catalog
            .by_kind(api_version, kind)
            .ok_or_else(|| bad(&format!("no served resource for apiVersion {api_version:?} kind {kind:?}")))?;
        if apply {
            app.store.write(res, obj, Mode::Upsert).map_err(store_error)?;
        } else {
            let key = key_of(res, &mut obj).map_err(store_error)?;
            match app.store.delete(res, key) {
                Ok(_) | Err(crate::store::StoreError::NotFound { .. }) => {}
                Err(e) => return Err(store_error(e)),
            }
        }
    }
    Ok(json!({"resourceVersion": app.store.versions().0.to_string()}))
}
