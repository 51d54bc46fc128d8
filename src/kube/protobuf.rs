//! Kubernetes' protobuf wire format (`application/vnd.kubernetes.protobuf`), which kube-proxy
//! asks for by default: each body is the magic `k8s\0` and a `runtime.Unknown` envelope whose
//! `raw` is the object's message; a watch is a stream of length-prefixed `WatchEvent`s (not
//! enveloped) whose objects are whole enveloped bodies. The messages are declared here by hand,
//! the few dozen the proxy needs, rather than taken from a crate of all of them; objects are
//! converted to and from the k8s-openapi types the JSON path uses, so both meet the model alike.

mod decode;
mod encode;
mod frames;
mod kinds;
mod meta;
pub(crate) mod stream;

pub(crate) use frames::{Frame, read_frame};

use crate::model::{ApiObject, ObjectKind};
use prost::Message;

use crate::config::content_type::PROTOBUF;

/// What every protobuf body starts with (the last byte names the envelope: 0 = Unknown).
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// Why a protobuf body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The body does not start with [`MAGIC`].
    #[error("the body is not a Kubernetes protobuf message (no k8s\\0 prefix)")]
    NoMagic,
    /// The bytes are not the message they should be.
    #[error("{0}")]
    Malformed(String),
    /// The emulator was asked to encode a kind it has no message for.
    #[error("kind {0} has no protobuf form here")]
    Unsupported(String),
}

impl From<prost::DecodeError> for ProtoError {
    fn from(e: prost::DecodeError) -> ProtoError {
        ProtoError::Malformed(e.to_string())
    }
}

/// Whether a response's media type (without parameters) is protobuf.
pub fn is_protobuf(mime: Option<&str>) -> bool {
    mime.is_some_and(|m| m.trim().eq_ignore_ascii_case(PROTOBUF))
}

/// An enveloped body: `apiVersion`, `kind` and the object's own message.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// `apiVersion` of what the envelope holds.
    pub api_version: String,
    /// Its kind (`ServiceList`, `Service`, `Status`, …).
    pub kind: String,
    /// Its message.
    pub raw: Vec<u8>,
}

/// Opens an enveloped body.
pub fn open(body: &[u8]) -> Result<Envelope, ProtoError> {
    let rest = body.strip_prefix(&MAGIC[..]).ok_or(ProtoError::NoMagic)?;
    let unknown = meta::Unknown::decode(rest)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    Ok(Envelope {
        api_version: type_meta.api_version.unwrap_or_default(),
        kind: type_meta.kind.unwrap_or_default(),
        raw: unknown.raw.unwrap_or_default(),
    })
}

/// Envelopes `raw`, a `kind` of `api_version`.
pub fn seal(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = meta::Unknown {
        type_meta: Some(meta::TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&unknown.encode_to_vec());
    out
}

/// A list's metadata and its items' messages, each still to decode.
#[derive(Debug, Default)]
pub struct ListPage {
    /// The list's resourceVersion.
    pub resource_version: String,
    /// The continue token; empty on the last page.
    pub continue_: String,
    /// Each item's message.
    pub items: Vec<Vec<u8>>,
}

/// Reads a list's message (the `raw` of its envelope).
pub fn list_page(raw: &[u8]) -> Result<ListPage, ProtoError> {
    let list = meta::List::decode(raw)?;
    let m = list.metadata.unwrap_or_default();
    Ok(ListPage {
        resource_version: m.resource_version.unwrap_or_default(),
        continue_: m.r#continue.unwrap_or_default(),
        items: list.items,
    })
}

/// A list's message from its metadata and its items' messages.
pub fn list_message(rv: &str, continue_: Option<&str>, remaining: Option<i64>, items: &[&[u8]]) -> Vec<u8> {
    let list = meta::List {
        metadata: Some(meta::ListMeta {
            self_link: None,
            resource_version: Some(rv.into()),
            r#continue: continue_.map(str::to_string),
            remaining_item_count: remaining,
        }),
        items: items.iter().map(|i| i.to_vec()).collect(),
    };
    list.encode_to_vec()
}

/// What a watch frame says: the event type and its object's enveloped body.
pub fn watch_event(frame: &[u8]) -> Result<(String, Vec<u8>), ProtoError> {
    let event = meta::WatchEvent::decode(frame)?;
    let object = event.object.and_then(|o| o.raw).unwrap_or_default();
    Ok((event.r#type.unwrap_or_default(), object))
}

/// A watch frame (length prefix included) of event `kind` with enveloped `object`.
pub fn watch_frame(kind: &str, object: Vec<u8>) -> Vec<u8> {
    let event = meta::WatchEvent { r#type: Some(kind.into()), object: Some(meta::RawExtension { raw: Some(object) }) };
    frames::framed(&event.encode_to_vec())
}

/// Namespace, name and resourceVersion of an object's message, read from those fields of its
/// metadata alone.
pub fn names(raw: &[u8]) -> Option<(String, String, String)> {
    let m = meta::NameOnly::decode(raw).ok()?.metadata?;
    Some((m.namespace.unwrap_or_default(), m.name.unwrap_or_default(), m.resource_version.unwrap_or_default()))
}

/// The value of annotation `key` of an object's message, read from its metadata's
/// annotations alone (a bookmark's: the one ending a WatchList's initial events carries one).
pub fn annotation(raw: &[u8], key: &str) -> Option<String> {
    meta::AnnotationsOnly::decode(raw).ok()?.metadata?.annotations.remove(key)
}

/// Decodes an object's message of `kind` into the type the JSON path yields.
pub fn object(kind: ObjectKind, raw: &[u8]) -> Result<ApiObject, ProtoError> {
    let bad = ProtoError::Malformed;
    Ok(match kind {
        ObjectKind::Service => {
            ApiObject::Service(Box::new(decode::service(kinds::Service::decode(raw)?).map_err(bad)?))
        }
        ObjectKind::EndpointSlice => {
            ApiObject::EndpointSlice(Box::new(decode::endpoint_slice(kinds::EndpointSlice::decode(raw)?).map_err(bad)?))
        }
        ObjectKind::Node => ApiObject::Node(Box::new(decode::node(kinds::Node::decode(raw)?).map_err(bad)?)),
        ObjectKind::ServiceCidr => {
            ApiObject::ServiceCidr(Box::new(decode::service_cidr(kinds::ServiceCidr::decode(raw)?).map_err(bad)?))
        }
    })
}

/// The message of a JSON object of `kind` (`Service`, `EndpointSlice`, `Node`, `ServiceCIDR`,
/// `Event`), read through its k8s-openapi type.
pub fn encode_json(kind: &str, value: &serde_json::Value) -> Result<Vec<u8>, ProtoError> {
    fn typed<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> Result<T, ProtoError> {
        T::deserialize(v).map_err(|e| ProtoError::Malformed(e.to_string()))
    }
    Ok(match kind {
        "Service" => encode::service(&typed(value)?).encode_to_vec(),
        "EndpointSlice" => encode::endpoint_slice(&typed(value)?).encode_to_vec(),
        "Node" => encode::node(&typed(value)?).encode_to_vec(),
        "ServiceCIDR" => encode::service_cidr(&typed(value)?).encode_to_vec(),
        "Event" => encode::event(&typed(value)?).encode_to_vec(),
        other => return Err(ProtoError::Unsupported(other.into())),
    })
}

/// The JSON of an object's message of `kind`, for the kinds [`encode_json`] writes.
pub fn decode_json(kind: &str, raw: &[u8]) -> Result<serde_json::Value, ProtoError> {
    fn json<T: serde::Serialize>(t: Result<T, String>) -> Result<serde_json::Value, ProtoError> {
        serde_json::to_value(t.map_err(ProtoError::Malformed)?).map_err(|e| ProtoError::Malformed(e.to_string()))
    }
    match kind {
        "Service" => json(decode::service(kinds::Service::decode(raw)?)),
        "EndpointSlice" => json(decode::endpoint_slice(kinds::EndpointSlice::decode(raw)?)),
        "Node" => json(decode::node(kinds::Node::decode(raw)?)),
        "ServiceCIDR" => json(decode::service_cidr(kinds::ServiceCidr::decode(raw)?)),
        "Event" => json(decode::event(kinds::Event::decode(raw)?)),
        other => Err(ProtoError::Unsupported(other.into())),
    }
}

/// A `Status`'s code, reason and message.
pub fn status(raw: &[u8]) -> Option<(u16, String, String)> {
    let s = meta::Status::decode(raw).ok()?;
    let code = u16::try_from(s.code.unwrap_or_default()).unwrap_or_default();
    Some((code, s.reason.unwrap_or_default(), s.message.unwrap_or_default()))
}

/// An enveloped failure `Status`.
pub fn status_body(code: u16, reason: &str, message: &str) -> Vec<u8> {
    let status = meta::Status {
        metadata: Some(meta::ListMeta::default()),
        status: Some("Failure".into()),
        message: Some(message.into()),
        reason: Some(reason.into()),
        code: Some(i32::from(code)),
    };
    seal("v1", "Status", status.encode_to_vec())
}

/// An object's message holding only its namespace, name and resourceVersion (every kind numbers
/// its metadata 1, so this is a message of any kind): a bookmark's object.
pub fn metadata_only(namespace: &str, name: &str, rv: &str) -> Vec<u8> {
    annotated(namespace, name, rv, &[])
}

/// [`metadata_only`] with `annotations` too (the bookmark that ends a WatchList's initial
/// events carries one).
pub fn annotated(namespace: &str, name: &str, rv: &str, annotations: &[(&str, &str)]) -> Vec<u8> {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let metadata = meta::ObjectMeta {
        namespace: some(namespace),
        name: some(name),
        resource_version: some(rv),
        annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    };
    meta::Named { metadata: Some(metadata) }.encode_to_vec()
}

#[cfg(test)]
mod tests;
