//! Which encoding the client asks the API server for (kube-proxy's `clientConnection.contentType`),
//! and the bodies it sends and the error answers it reads in either. The answer's own
//! `Content-Type` decides how it is read: a server that answers JSON to a protobuf client is
//! read as JSON.

use super::client::Status;
use super::protobuf;

use crate::config::content_type::{ContentType, JSON, PROTOBUF};

/// The body of a write of `object` and its media type: protobuf for the kinds that have a
/// message here when protobuf is asked for (as client-go encodes writes in its content type),
/// JSON otherwise.
pub(super) fn body(content: ContentType, object: &serde_json::Value) -> (Vec<u8>, &'static str) {
    if content == ContentType::Protobuf
        && let (Some(api_version), Some(kind)) = (object["apiVersion"].as_str(), object["kind"].as_str())
        && let Ok(raw) = protobuf::encode_json(kind, object)
    {
        return (protobuf::seal(api_version, kind, raw), PROTOBUF);
    }
    (object.to_string().into_bytes(), JSON)
}

/// The `Status` of an error answer of media type `mime`, if it holds one.
pub(super) fn status(mime: Option<&str>, body: &[u8]) -> Status {
    if protobuf::is_protobuf(mime) {
        let found = protobuf::open(body).ok().filter(|e| e.kind == "Status").and_then(|e| protobuf::status(&e.raw));
        let (code, reason, message) = found.unwrap_or_default();
        return Status { code, reason, message };
    }
    serde_json::from_slice(body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_read_as_kube_proxy_gives_them() {
        assert_eq!(ContentType::parse(""), Ok(ContentType::Protobuf), "kube-proxy's default");
        assert_eq!(ContentType::parse("application/json"), Ok(ContentType::Json));
        assert_eq!(ContentType::parse("application/vnd.kubernetes.protobuf"), Ok(ContentType::Protobuf));
        assert_eq!(ContentType::parse("Application/JSON; charset=utf-8"), Ok(ContentType::Json));
        assert!(ContentType::parse("application/yaml").unwrap_err().contains("not supported"));
        assert_eq!(ContentType::Protobuf.accept(), "application/vnd.kubernetes.protobuf, */*");
    }

    #[test]
    fn an_error_answer_is_read_in_its_own_encoding() {
        let proto = protobuf::status_body(410, "Expired", "too old");
        let s = status(Some(PROTOBUF), &proto);
        assert_eq!((s.code, s.reason.as_str(), s.message.as_str()), (410, "Expired", "too old"));
        let json = br#"{"kind":"Status","code":403,"reason":"Forbidden","message":"no"}"#;
        let s = status(Some(JSON), json);
        assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
        assert_eq!(status(Some(PROTOBUF), b"not protobuf").code, 0, "unreadable is empty");
    }

    #[test]
    fn writes_are_protobuf_for_kinds_with_a_message_and_json_otherwise() {
        let event = serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "n.1", "namespace": "default"}, "eventTime": "2023-11-14T22:13:20.123456Z",
            "reason": "Starting", "regarding": {"kind": "Node", "name": "n"}});
        let (bytes, media) = body(ContentType::Protobuf, &event);
        assert_eq!(media, PROTOBUF);
        let env = protobuf::open(&bytes).unwrap();
        assert_eq!((env.api_version.as_str(), env.kind.as_str()), ("events.k8s.io/v1", "Event"));
        assert_eq!(protobuf::decode_json("Event", &env.raw).unwrap(), event, "the typed Event names its kind");
        assert_eq!(body(ContentType::Json, &event).1, JSON);
        let other = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        assert_eq!(body(ContentType::Protobuf, &other).1, JSON, "no message for it: JSON");
    }
}
