//! Legacy (unaggregated) discovery documents: `/version`, `/api`, `/apis`, and each group
//! version's APIResourceList. Clients asking for aggregated discovery fall back to these.

use crate::resources::{Catalog, Resource};
use serde_json::{Value, json};

/// The Kubernetes version the emulator claims.
pub const GIT_VERSION: &str = "v1.34.0";

/// The discovery document at `path`, if it is a discovery path.
pub fn document(catalog: &Catalog, path: &str, host: &str) -> Option<Value> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["version"] => Some(version()),
        ["api"] => Some(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        })),
        ["api", "v1"] => Some(resource_list(catalog, "", "v1")),
        ["apis"] => Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups(catalog)})),
        ["apis", group] => groups(catalog).into_iter().find(|g| g["name"] == *group).map(|mut g| {
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        }),
        ["apis", group, version] => catalog
            .served()
            .any(|r| r.group == *group && r.version == *version)
            .then(|| resource_list(catalog, group, version)),
        _ => None,
    }
}

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-08-27T00:00:00Z",
        "goVersion": "go1.24.6",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

fn groups(catalog: &Catalog) -> Vec<Value> {
    let mut names: Vec<&str> = catalog.served().map(|r| r.group).filter(|g| !g.is_empty()).collect();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let gv = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
            json!({"name": name, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect()
}

fn resource_list(catalog: &Catalog, group: &str, version: &str) -> Value {
    let resources: Vec<Value> =
        catalog.served().filter(|r| r.group == group && r.version == version).map(api_resource).collect();
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

fn api_resource(r: &Resource) -> Value {
    let mut v = json!({
        "name": r.plural,
        "singularName": r.kind.to_ascii_lowercase(),
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    v
}
