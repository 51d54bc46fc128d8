//! Decoding what the API server sends, in JSON or protobuf: list pages and watch events, and
//! each object in them into a validated [`ObjectChange`]. An object that does not decode or validate is reported
//! with its kind, namespace and name, so the reflector can skip it and keep its last good state.

use super::client::Status;
use super::protobuf;
use crate::model::{ApiObject, ObjectChange, ObjectKey, ObjectKind};
use serde::Deserialize;
use serde_json::value::RawValue;

/// One object as the server sent it: JSON text, or its protobuf message (not enveloped).
#[derive(Debug)]
pub(super) enum Item {
    Json(Box<RawValue>),
    Proto(Vec<u8>),
}

/// One page of a list in JSON.
#[derive(Debug, Deserialize)]
pub(super) struct JsonPage {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
}

impl JsonPage {
    /// The page's metadata and its items.
    pub(super) fn into_parts(self) -> (ListMeta, Vec<Box<RawValue>>) {
        (self.metadata, self.items)
    }
}

/// Hands `raw`, one protobuf object of a list, to `f` as an [`Item`], in `held` (a buffer kept
/// from one object to the next, so a listing does not allocate one per object).
pub(super) fn proto_item<R>(held: &mut Vec<u8>, raw: &[u8], f: impl FnOnce(&Item) -> R) -> R {
    held.clear();
    held.extend_from_slice(raw);
    let item = Item::Proto(std::mem::take(held));
    let out = f(&item);
    if let Item::Proto(back) = item {
        *held = back;
    }
    out
}

/// A list's metadata.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    pub(super) resource_version: String,
    #[serde(default, rename = "continue")]
    pub(super) continue_: String,
}

/// One watch event in JSON, its object not yet decoded.
#[derive(Debug, Deserialize)]
pub(super) struct JsonEvent {
    #[serde(rename = "type")]
    kind: String,
    object: Box<RawValue>,
}

/// One watch event, its object not yet decoded.
#[derive(Debug)]
pub(super) struct Event {
    pub(super) kind: String,
    pub(super) object: Item,
}

impl From<JsonEvent> for Event {
    fn from(e: JsonEvent) -> Event {
        Event { kind: e.kind, object: Item::Json(e.object) }
    }
}

impl Event {
    /// A watch event in protobuf: one frame, whose object is a whole enveloped body.
    pub(super) fn from_protobuf(frame: &[u8]) -> Result<Event, protobuf::ProtoError> {
        let (kind, object) = protobuf::watch_event(frame)?;
        Ok(Event { kind, object: Item::Proto(protobuf::open(&object)?.raw) })
    }
}

/// The metadata fields of an object, in whichever form it came; empty where unreadable.
pub(super) fn meta(item: &Item) -> MetaFields {
    match item {
        Item::Json(raw) => serde_json::from_str::<Meta>(raw.get()).map(|m| m.metadata).unwrap_or_default(),
        Item::Proto(raw) => protobuf::names(raw)
            .map(|(namespace, name, resource_version)| MetaFields { namespace, name, resource_version })
            .unwrap_or_default(),
    }
}

/// The Status an ERROR event carries; empty where unreadable.
pub(super) fn status(item: &Item) -> Status {
    match item {
        Item::Json(raw) => serde_json::from_str(raw.get()).unwrap_or_default(),
        Item::Proto(raw) => {
            protobuf::status(raw).map(|(code, reason, message)| Status { code, reason, message }).unwrap_or_default()
        }
    }
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
pub(super) fn object(kind: ObjectKind, item: &Item, node_name: &str, proxy_name: Option<&str>) -> Decoded {
    let typed = match item {
        Item::Json(raw) => json_object(kind, raw).map_err(|e| e.to_string()),
        Item::Proto(raw) => protobuf::object(kind, raw).map_err(|e| e.to_string()),
    };
    let obj = match typed {
        Ok(obj) => obj,
        Err(why) => {
            let m = meta(item);
            return if m.name.is_empty() { Decoded::Nameless(why) } else { Decoded::Bad((m.namespace, m.name), why) };
        }
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

fn json_object(kind: ObjectKind, raw: &RawValue) -> serde_json::Result<ApiObject> {
    Ok(match kind {
        ObjectKind::Service => ApiObject::Service(Box::new(serde_json::from_str(raw.get())?)),
        ObjectKind::EndpointSlice => ApiObject::EndpointSlice(Box::new(serde_json::from_str(raw.get())?)),
        ObjectKind::Node => ApiObject::Node(Box::new(serde_json::from_str(raw.get())?)),
        ObjectKind::ServiceCidr => ApiObject::ServiceCidr(Box::new(serde_json::from_str(raw.get())?)),
    })
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjectKey {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// `namespace/name`, or the name alone for a cluster-scoped object.
pub(super) fn describe(key: &ObjectKey) -> String {
    if key.0.is_empty() { key.1.clone() } else { format!("{}/{}", key.0, key.1) }
}
