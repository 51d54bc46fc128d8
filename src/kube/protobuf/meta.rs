//! The apimachinery messages of the protobuf wire format: the `runtime.Unknown` envelope, list
//! and object metadata, watch events and `Status`, each field numbered as upstream's
//! `generated.proto` numbers it (proto2: every scalar has presence, hence the `Option`s).

use std::collections::BTreeMap;

/// `runtime.TypeMeta`: what the envelope holds.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

/// `runtime.Unknown`: the envelope after the magic; `raw` is the object's own message.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub content_type: Option<String>,
}

/// `runtime.RawExtension`: a watch event's object, itself a whole envelope.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RawExtension {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub raw: Option<Vec<u8>>,
}

/// `meta.v1.WatchEvent`: one frame of a protobuf watch stream (not enveloped).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub object: Option<RawExtension>,
}

/// `meta.v1.ListMeta`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListMeta {
    #[prost(string, optional, tag = "1")]
    pub self_link: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub r#continue: Option<String>,
    #[prost(int64, optional, tag = "4")]
    pub remaining_item_count: Option<i64>,
}

/// Any `…List`: its items kept as bytes (a message and a bytes field share one wire form), so
/// that each is decoded on its own and a bad one costs only itself.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct List {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub items: Vec<Vec<u8>>,
}

/// Just an object's metadata (every kind numbers it 1): enough to name an object that does
/// not decode whole, and to follow its resourceVersion.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Named {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
}

/// An object's name, namespace and resourceVersion, the rest of its metadata skipped unread:
/// an object whose labels do not decode is still named in the warning that skips it.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NameOnly {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<Naming>,
}

/// The fields of `meta.v1.ObjectMeta` that name an object.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Naming {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
}

/// Just an object's annotations (a bookmark's: the one that ends a WatchList's initial events
/// says so in one), the rest of it skipped unread.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AnnotationsOnly {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<Annotations>,
}

/// The annotations of `meta.v1.ObjectMeta`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Annotations {
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
}

/// `meta.v1.Time` (and `MicroTime`, numbered alike).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Time {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

/// `meta.v1.OwnerReference`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    pub controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    pub block_owner_deletion: Option<bool>,
}

/// `meta.v1.ObjectMeta` (managed fields left out: the proxy never reads them).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub self_link: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    pub creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<Time>,
    #[prost(int64, optional, tag = "10")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    pub owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    pub finalizers: Vec<String>,
}

/// `meta.v1.Status`: an error answer, or a watch's ERROR event.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Status {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

/// `util.intstr.IntOrString` (a Service port's `targetPort`); `type` 0 is the number.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct IntOrString {
    #[prost(int64, optional, tag = "1")]
    pub r#type: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub int_val: Option<i32>,
    #[prost(string, optional, tag = "3")]
    pub str_val: Option<String>,
}
