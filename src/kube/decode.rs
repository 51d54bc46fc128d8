//! Decoding what the API server sends: list pages and watch events, and each object in them
//! into a validated [`ObjectChange`]. An object that does not decode or validate is reported
//! with its kind, namespace and name, so the reflector can skip it and keep its last good state.

use crate::model::{ApiObject, ObjectChange, ObjectKey, ObjectKind};
use serde::Deserialize;
use serde_json::value::RawValue;

/// One page of a list.
#[derive(Debug, Deserialize)]
pub(super) struct Page {
    #[serde(default)]
    pub(super) metadata: ListMeta,
    #[serde(default)]
    pub(super) items: Vec<Box<RawValue>>,
}

/// A list's metadata.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    pub(super) resource_version: String,
    #[serde(default, rename = "continue")]
    pub(super) continue_: String,
}

/// One watch event, its object not yet decoded.
#[derive(Debug, Deserialize)]
pub(super) struct Event {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) object: Box<RawValue>,
}

/// Just an object's metadata: enough to name it, and to follow its resourceVersion.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Meta {
    #[serde(default)]
    pub(super) metadata: MetaFields,
}

/// The metadata fields read from every object.
#[derive(Debug, Default, Deserialize)]
pub(super) struct MetaFields {
    #[serde(default)]
    pub(super) namespace: String,
    #[serde(default)]
    pub(super) name: String,
    #[serde(default, rename = "resourceVersion")]
    pub(super) resource_version: String,
}

/// What one object decoded to.
#[derive(Debug)]
pub(super) enum Decoded {
    /// A valid object: its key and its change (`None` for an object the proxy does not
    /// follow, such as another node's Node).
    Good(ObjectKey, Option<ObjectChange>),
    /// A named object that failed to decode or validate, and why.
    Bad(ObjectKey, String),
    /// An object without a name, and why it was unusable.
    Nameless(String),
}

/// Decodes one object of `kind` for node `node_name` and the proxy named `proxy_name`.
pub(super) fn object(kind: ObjectKind, raw: &RawValue, node_name: &str, proxy_name: Option<&str>) -> Decoded {
    let typed = match kind {
        ObjectKind::Service => serde_json::from_str(raw.get()).map(|s| ApiObject::Service(Box::new(s))),
        ObjectKind::EndpointSlice => serde_json::from_str(raw.get()).map(|s| ApiObject::EndpointSlice(Box::new(s))),
        ObjectKind::Node => serde_json::from_str(raw.get()).map(|n| ApiObject::Node(Box::new(n))),
        ObjectKind::ServiceCidr => serde_json::from_str(raw.get()).map(|c| ApiObject::ServiceCidr(Box::new(c))),
    };
    let failed = |why: String| match serde_json::from_str::<Meta>(raw.get()) {
        Ok(m) if !m.metadata.name.is_empty() => Decoded::Bad((m.metadata.namespace, m.metadata.name), why),
        _ => Decoded::Nameless(why),
    };
    let obj = match typed {
        Ok(obj) => obj,
        Err(e) => return failed(e.to_string()),
    };
    let key = match &obj {
        ApiObject::Service(s) => key_of(&s.metadata),
        ApiObject::EndpointSlice(s) => key_of(&s.metadata),
        ApiObject::Node(n) => key_of(&n.metadata),
        ApiObject::ServiceCidr(c) => key_of(&c.metadata),
    };
    if key.1.is_empty() {
        return Decoded::Nameless("it has no metadata.name".into());
    }
    match ObjectChange::from_api_for(&obj, node_name, proxy_name) {
        Ok(change) => Decoded::Good(key, change),
        Err(e) => Decoded::Bad(key, e.reason),
    }
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjectKey {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// `namespace/name`, or the name alone for a cluster-scoped object.
pub(super) fn describe(key: &ObjectKey) -> String {
    if key.0.is_empty() { key.1.clone() } else { format!("{}/{}", key.0, key.1) }
}
