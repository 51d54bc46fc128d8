//! Decoding what the API server sends, in JSON or protobuf: list pages and watch events, and
//! each object in them into a validated [`ObjectChange`]. An object that does not decode or validate is reported
//! with its kind, namespace and name, so the reflector can skip it and keep its last good state.

use super::client::{ApiError, Status};
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

/// One page of a list in JSON; a `Status` in its place reads as one too, with its fields.
#[derive(Debug, Deserialize)]
pub(super) struct JsonPage {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
    #[serde(default)]
    code: u16,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    status: String,
}

impl JsonPage {
    /// The page's metadata and its items, when it is the list of `want` (`ServiceList`; a
    /// page naming no kind is taken as `want`, as client-go's decoder defaults it); else its
    /// kind, with the Status's fields when it is one.
    pub(super) fn into_parts(self, want: &str) -> Result<(ListMeta, Vec<Box<RawValue>>), NotTheList> {
        // A Status that names no kind still says what it is.
        let kind = match self.kind.is_empty() && (self.code != 0 || !self.status.is_empty()) {
            true => "Status".to_string(),
            false => self.kind,
        };
        if !kind.is_empty() && kind != want {
            let status = Status { code: self.code, reason: self.reason, message: self.message };
            return Err(NotTheList { kind, status });
        }
        Ok((self.metadata, self.items))
    }
}

/// An answer to a list that is not the list asked for: its kind and, for a `Status`, what
/// it says.
#[derive(Debug)]
pub(super) struct NotTheList {
    pub(super) kind: String,
    pub(super) status: Status,
}

impl NotTheList {
    /// The error listing resource `name` met: never an empty list, so nothing is removed. A
    /// failure Status is the failure it reports, as client-go takes it (a 410 in it lists
    /// the latest state, as an HTTP 410 does), said to have come in place of a list.
    pub(super) fn into_error(self, name: &str) -> ApiError {
        let NotTheList { kind, status: s } = self;
        match kind.as_str() {
            "Status" if s.code >= 400 => ApiError::Status {
                code: s.code,
                reason: s.reason,
                message: format!("{} (listing {name}: the server answered with a Status, not a list)", s.message),
                retry_after: None,
            },
            "Status" => ApiError::Decode(format!(
                "listing {name}: the server answered with a Status, not a list (code {}, reason {:?}, message {:?})",
                s.code, s.reason, s.message
            )),
            other => ApiError::Decode(format!("listing {name}: the server answered with a {other:?}, not a list")),
        }
    }
}

/// The kind a list of `kind` is (`ServiceList`).
pub(super) fn list_kind(kind: ObjectKind) -> String {
    format!("{}List", kind.as_str())
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
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub(super) kind: String,
    /// The kind its object says it is (`Service`, `Status`); empty when it says none.
    pub(super) object_kind: String,
    pub(super) object: Item,
}

/// Just an object's kind (`null` as none, as Go reads it).
#[derive(Debug, Default, Deserialize)]
struct Kinded {
    #[serde(default)]
    kind: Option<String>,
}

/// The kind of an object whose `kind` is not a string (a number, given twice): no kind that
/// is watched, so the event is taken as not of the watched kind.
const UNREADABLE_KIND: &str = "(unreadable)";

impl From<JsonEvent> for Event {
    fn from(e: JsonEvent) -> Event {
        let object_kind = match serde_json::from_str::<Kinded>(e.object.get()) {
            Ok(k) => k.kind.unwrap_or_default(),
            Err(_) => UNREADABLE_KIND.to_string(),
        };
        Event { kind: e.kind, object_kind, object: Item::Json(e.object) }
    }
}

impl Event {
    /// A watch event in protobuf: one frame, whose object is a whole enveloped body.
    pub(super) fn from_protobuf(frame: &[u8]) -> Result<Event, protobuf::ProtoError> {
        let (kind, object) = protobuf::watch_event(frame)?;
        let envelope = protobuf::open(&object)?;
        Ok(Event { kind, object_kind: envelope.kind, object: Item::Proto(envelope.raw) })
    }

    /// Whether the event's object is not of `watched` (an `ERROR` carries a Status, and an
    /// object that names no kind is taken as the watched one, as client-go's decoder does).
    pub(super) fn foreign(&self, watched: ObjectKind) -> bool {
        self.kind != "ERROR" && !self.object_kind.is_empty() && self.object_kind != watched.as_str()
    }
}

/// The metadata fields of an object, in whichever form it came; empty where unreadable. In
/// JSON, a metadata field of the wrong type elsewhere (labels as a number) still leaves the
/// name readable, so the object that fails to decode is named in the warning.
pub(super) fn meta(item: &Item) -> MetaFields {
    match item {
        Item::Json(raw) => serde_json::from_str::<Meta>(raw.get()).map(|m| m.metadata).unwrap_or_else(|_| loose(raw)),
        Item::Proto(raw) => protobuf::names(raw)
            .map(|(namespace, name, resource_version)| MetaFields { namespace, name, resource_version })
            .unwrap_or_default(),
    }
}

/// Whether a bookmark's object says the WatchList's initial events end here (its annotation
/// [`INITIAL_EVENTS_ANNOTATION_KEY`](super::INITIAL_EVENTS_ANNOTATION_KEY) is `"true"`).
pub(super) fn initial_events_end(item: &Item) -> bool {
    #[derive(Default, Deserialize)]
    struct Annotated {
        #[serde(default)]
        metadata: Annotations,
    }
    #[derive(Default, Deserialize)]
    struct Annotations {
        #[serde(default)]
        annotations: std::collections::HashMap<String, String>,
    }
    let key = super::INITIAL_EVENTS_ANNOTATION_KEY;
    let value = match item {
        Item::Json(raw) => {
            serde_json::from_str::<Annotated>(raw.get()).ok().and_then(|mut a| a.metadata.annotations.remove(key))
        }
        Item::Proto(raw) => protobuf::annotation(raw, key),
    };
    value.as_deref() == Some("true")
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

/// The metadata fields that are strings, whatever the rest of the object holds.
fn loose(raw: &RawValue) -> MetaFields {
    #[derive(Deserialize)]
    struct Loose<'a> {
        #[serde(borrow, default)]
        metadata: std::collections::HashMap<&'a str, &'a RawValue>,
    }
    let Ok(object) = serde_json::from_str::<Loose>(raw.get()) else { return MetaFields::default() };
    let field = |key: &str| {
        object.metadata.get(key).and_then(|v| serde_json::from_str::<String>(v.get()).ok()).unwrap_or_default()
    };
    MetaFields { namespace: field("namespace"), name: field("name"), resource_version: field("resourceVersion") }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Item {
        Item::Json(RawValue::from_string(text.to_string()).expect("JSON"))
    }

    #[test]
    fn an_object_that_fails_to_decode_is_named_when_its_name_is_readable() {
        let bad_labels = r#"{"kind":"Service","metadata":{"name":"web","namespace":"shop","labels":5},"spec":{}}"#;
        match object(ObjectKind::Service, &json(bad_labels), "node-a", None) {
            Decoded::Bad(key, _) => assert_eq!(key, ("shop".to_string(), "web".to_string())),
            other => panic!("{other:?}"),
        }
        let nameless = r#"{"kind":"Service","metadata":{"name":7,"labels":5}}"#;
        assert!(matches!(object(ObjectKind::Service, &json(nameless), "node-a", None), Decoded::Nameless(_)));
    }

    #[test]
    fn only_the_annotated_bookmark_ends_the_initial_events() {
        let key = crate::kube::INITIAL_EVENTS_ANNOTATION_KEY;
        let ends = |text: String| initial_events_end(&json(&text));
        let annotated =
            |a: &str| format!(r#"{{"kind":"Service","metadata":{{"resourceVersion":"9","annotations":{a}}}}}"#);
        assert!(ends(annotated(&format!(r#"{{"{key}":"true"}}"#))));
        assert!(!ends(annotated(&format!(r#"{{"{key}":"false"}}"#))));
        assert!(!ends(annotated(r#"{"other":"true"}"#)));
        assert!(!ends(annotated("5")), "annotations that are not a map end nothing");
        assert!(!ends(r#"{"metadata":{"resourceVersion":"9"}}"#.into()), "a periodic bookmark");
        let proto = |a: &[(&str, &str)]| Item::Proto(protobuf::annotated("", "", "9", a));
        assert!(initial_events_end(&proto(&[("a", "b"), (key, "true")])));
        assert!(!initial_events_end(&proto(&[])) && !initial_events_end(&proto(&[(key, "")])));
    }

    #[test]
    fn a_watch_event_whose_object_is_another_kind_is_foreign() {
        let raw = |text: &str| RawValue::from_string(text.to_string()).expect("JSON");
        let event = |object: &str| Event::from(JsonEvent { kind: "DELETED".into(), object: raw(object) });
        let status = event(r#"{"kind":"Status","metadata":{"name":"web","namespace":"shop"}}"#);
        assert!(status.foreign(ObjectKind::Service));
        assert!(!event(r#"{"kind":"Service","metadata":{"name":"web"}}"#).foreign(ObjectKind::Service));
        assert!(!event(r#"{"metadata":{"name":"web"}}"#).foreign(ObjectKind::Service), "no kind: the watched one");
        let error = Event::from(JsonEvent { kind: "ERROR".into(), object: raw(r#"{"kind":"Status"}"#) });
        assert!(!error.foreign(ObjectKind::Service), "an ERROR carries a Status");
        let page: JsonPage = serde_json::from_str(r#"{"kind":"Status","code":500,"message":"down"}"#).expect("page");
        let e = page.into_parts("ServiceList").expect_err("a Status is not a list").into_error("services");
        assert_eq!(e.code(), Some(500), "the failure it reports: {e}");
        assert!(
            e.to_string().contains("down (listing services: the server answered with a Status, not a list)"),
            "{e}"
        );
        let gone: JsonPage =
            serde_json::from_str(r#"{"code":410,"reason":"Expired","metadata":{"resourceVersion":"9"}}"#)
                .expect("a Status without its kind");
        assert!(gone.into_parts("ServiceList").expect_err("still a Status").into_error("services").is_gone());
        for kind in ["7", "\"Status\",\"kind\":\"Status\""] {
            let object = format!(r#"{{"kind":{kind},"metadata":{{"name":"web","namespace":"shop"}}}}"#);
            assert!(event(&object).foreign(ObjectKind::Service), "{object}");
        }
        assert!(!event(r#"{"kind":null,"metadata":{"name":"web"}}"#).foreign(ObjectKind::Service), "null: no kind");
    }
}
