//! Serving protobuf (`application/vnd.kubernetes.protobuf`) to clients that prefer it, as the
//! real server does for built-in kinds: lists, gets, watch streams and error Statuses of the
//! kinds with a message (Services, EndpointSlices, Nodes, ServiceCIDRs, Events), encoded from
//! the JSON store through k8s-openapi once per stored version; every other answer stays JSON.

use crate::history::Obj;
use crate::http::{Request, Response};
use crate::list::Page;
use crate::resources::Resource;
use crate::store::parse;
use kube_nftproxy::config::content_type::PROTOBUF;
use kube_nftproxy::kube::protobuf;
use std::sync::Arc;

/// The media type of a protobuf watch stream.
pub const STREAM: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The media type of a watch stream, protobuf or JSON.
pub fn stream_type(proto: bool) -> &'static str {
    if proto { STREAM } else { "application/json" }
}

/// `data` with the 4-byte length prefix of a protobuf frame (for a frame that is not an
/// event: the garbage fault).
pub fn framed(data: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes().to_vec();
    out.extend_from_slice(data);
    out
}

/// Whether the request's `Accept` prefers protobuf: the entry of the highest `q` (the first
/// of equals) names it.
pub fn wanted(req: &Request) -> bool {
    let Some(accept) = req.header("accept") else { return false };
    let mut best: Option<(f32, &str)> = None;
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let q = parts.find_map(|p| p.strip_prefix("q=")).and_then(|q| q.parse().ok()).unwrap_or(1.0);
        if best.is_none_or(|(b, _)| q > b) {
            best = Some((q, media));
        }
    }
    best.is_some_and(|(_, media)| media.eq_ignore_ascii_case(PROTOBUF))
}

/// Whether objects of `res` have a protobuf form here.
pub fn served(res: &Resource) -> bool {
    matches!(res.kind, "Service" | "EndpointSlice" | "Node" | "ServiceCIDR" | "Event")
}

/// The object's message, encoded once per stored version.
pub fn message(res: &Resource, obj: &Obj) -> Option<Arc<[u8]>> {
    obj.proto
        .get_or_init(|| match protobuf::encode_json(res.kind, &parse(&obj.body)) {
            Ok(raw) => Some(raw.into()),
            Err(e) => {
                log::warn!("{} {}/{} has no protobuf form: {e}", res.kind, obj.facts.namespace, obj.facts.name);
                None
            }
        })
        .clone()
}

/// The object as a whole enveloped body (a GET's answer, a watch event's object).
pub fn enveloped(res: &Resource, obj: &Obj) -> Option<Vec<u8>> {
    message(res, obj).map(|raw| protobuf::seal(&res.api_version(), res.kind, raw.to_vec()))
}

/// A protobuf response of `body`.
pub fn response(status: u16, body: Vec<u8>) -> Response {
    Response { content_type: PROTOBUF, ..Response::json(status, body) }
}

/// A list page as an enveloped `…List`; `None` when an item has no protobuf form.
pub fn list(res: &Resource, page: &Page) -> Option<Vec<u8>> {
    let items: Vec<Arc<[u8]>> = page.items.iter().map(|o| message(res, o)).collect::<Option<_>>()?;
    let refs: Vec<&[u8]> = items.iter().map(|i| &i[..]).collect();
    let next = page.next.as_ref().map(|c| c.encode());
    let remaining = page.remaining.and_then(|n| i64::try_from(n).ok());
    let raw = protobuf::list_message(&page.rv.to_string(), next.as_deref(), remaining, &refs);
    Some(protobuf::seal(&res.api_version(), &res.list_kind(), raw))
}

/// A JSON Status answer (a failure, or a fault's Status answered with 200) re-encoded for a
/// protobuf client (other answers unchanged).
pub fn status(resp: Response) -> Response {
    if resp.content_type != "application/json" {
        return resp;
    }
    let v = parse(&resp.body);
    if v["kind"] != "Status" {
        return resp;
    }
    let code = v["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(resp.status);
    let body = protobuf::status_body(code, v["reason"].as_str().unwrap_or(""), v["message"].as_str().unwrap_or(""));
    Response { body, content_type: PROTOBUF, ..resp }
}

/// A protobuf request body as the JSON object the store keeps, with `kind` and `apiVersion`.
pub fn body(req: &Request) -> Option<Result<serde_json::Value, String>> {
    let media = req.header("content-type")?.split(';').next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case(PROTOBUF) {
        return None;
    }
    let read = || {
        let env = protobuf::open(&req.body).map_err(|e| e.to_string())?;
        let mut v = protobuf::decode_json(&env.kind, &env.raw).map_err(|e| e.to_string())?;
        v["kind"] = env.kind.into();
        v["apiVersion"] = env.api_version.into();
        Ok(v)
    };
    Some(read())
}
