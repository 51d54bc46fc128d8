//! A minimal OpenAPI v3 index and per-group-version documents. kubectl downloads them before
//! `create`/`apply` to learn whether the server validates fields itself; these documents say it
//! does (the `fieldValidation` parameter), so kubectl needs no client-side schema.

use crate::resources::{Catalog, Resource};
use serde_json::{Map, Value, json};

/// The document at `path` (`/openapi/v3` or `/openapi/v3/{api/v1|apis/g/v}`), if any.
pub fn document(catalog: &Catalog, path: &str) -> Option<Value> {
    let rest = path.strip_prefix("/openapi/v3")?.trim_matches('/');
    let gvs = group_versions(catalog);
    if rest.is_empty() {
        let paths: Map<String, Value> = gvs
            .iter()
            .map(|(gv, _, _)| (gv.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash=emulator")})))
            .collect();
        return Some(json!({"paths": paths}));
    }
    let (_, group, version) = gvs.into_iter().find(|(gv, _, _)| gv == rest)?;
    let mut paths = Map::new();
    for r in catalog.served().filter(|r| r.group == group && r.version == version) {
        let op = operation(r);
        let item = json!({"put": op, "patch": op});
        paths.insert(item_path(r), item);
        paths.insert(collection_path(r), json!({"post": op}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::GIT_VERSION},
        "paths": paths,
    }))
}

/// `(api/v1 or apis/group/version, group, version)` of every served group version.
fn group_versions(catalog: &Catalog) -> Vec<(String, &'static str, &'static str)> {
    let mut out: Vec<(String, &str, &str)> = Vec::new();
    for r in catalog.served() {
        let gv =
            if r.group.is_empty() { format!("api/{}", r.version) } else { format!("apis/{}/{}", r.group, r.version) };
        if !out.iter().any(|(g, _, _)| *g == gv) {
            out.push((gv, r.group, r.version));
        }
    }
    out
}

fn prefix(r: &Resource) -> String {
    if r.group.is_empty() { format!("/api/{}", r.version) } else { format!("/apis/{}/{}", r.group, r.version) }
}

fn collection_path(r: &Resource) -> String {
    let ns = if r.namespaced { "/namespaces/{namespace}" } else { "" };
    format!("{}{ns}/{}", prefix(r), r.plural)
}

fn item_path(r: &Resource) -> String {
    format!("{}/{{name}}", collection_path(r))
}

fn operation(r: &Resource) -> Value {
    json!({
        "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}}],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
    })
}
