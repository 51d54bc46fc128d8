//! The REST routes: resource paths to store operations, query parameters to list and watch
//! options, and store errors to Status responses.

use crate::faults::{Failure, Faults};
use crate::history::Key;
use crate::http::{Request, Response};
use crate::list::{Continue, Query};
use crate::resources::{Catalog, Resource};
use crate::selectors::Selector;
use crate::stats::Stats;
use crate::store::{Mode, Store, StoreError, with_kind};
use crate::watch::WatchRequest;
use crate::watchlist::{self, Start};
use crate::{control, discovery, events, list, openapi, proto};
use serde_json::Value;
use std::time::Duration;

/// Message of a 410 for a continue token older than the history.
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response to get an inconsistent list.";

/// Everything the request handlers share.
pub struct App {
    /// Objects, history, watchers.
    pub store: Store,
    /// Served resources.
    pub catalog: Catalog,
    /// Armed failures.
    pub faults: Faults,
    /// Counters.
    pub stats: Stats,
    /// Interval between bookmarks.
    pub bookmark_interval: Duration,
    /// A watch without `timeoutSeconds` lasts this × [1, 2).
    pub min_request_timeout: Duration,
}

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The API listener: authenticated, faults apply, counted.
    Api,
    /// The control listener: open, exempt from faults and counters.
    Control,
}

/// What to do with a request.
pub enum Reply {
    /// Send this response.
    Done(Response),
    /// Stream a watch.
    Watch(Box<WatchRequest>),
}

impl From<Response> for Reply {
    fn from(r: Response) -> Reply {
        Reply::Done(r)
    }
}

/// The resource a path names.
struct Target {
    res: &'static Resource,
    namespace: Option<String>,
    name: Option<String>,
}

/// Routes one (authenticated) request.
pub fn route(app: &App, req: &Request, listener: Listener) -> Reply {
    if let Some(rest) = req.path.strip_prefix("/emulator/") {
        return control::handle(app, req, rest).into();
    }
    if matches!(req.path.as_str(), "/healthz" | "/livez" | "/readyz") {
        return Response::json(200, b"\"ok\"".to_vec()).into();
    }
    let host = req.header("host").unwrap_or("localhost");
    if let Some(doc) = discovery::document(&app.catalog, &req.path, host) {
        return Response::json(200, doc.to_string().into_bytes()).into();
    }
    if let Some(doc) = openapi::document(&app.catalog, &req.path) {
        return Response::json(200, doc.to_string().into_bytes()).into();
    }
    let Some(target) = target(&app.catalog, &req.path) else {
        return Response::status(404, "NotFound", "the server could not find the requested resource").into();
    };
    let verb = verb(req, &target);
    // A protobuf client gets its failures as protobuf Statuses too.
    let failed = |resp: Response| if proto::wanted(req) { proto::status(resp) } else { resp };
    if listener == Listener::Api {
        let watch_list = verb == "watch" && watchlist::asked(req);
        app.stats.request(verb, target.res.plural, &req.target, watch_list);
        match app.faults.take(target.res.plural, verb, watch_list, &req.target) {
            Some(Failure::Answer(failure)) => return failed(failure).into(),
            Some(Failure::Slow(pace)) => {
                return match handle(app, req, &target, verb) {
                    Ok(Reply::Done(resp)) | Err(resp) => Reply::Done(Response { pace: Some(pace), ..failed(resp) }),
                    Ok(Reply::Watch(mut w)) => {
                        w.pace = Some(pace);
                        Reply::Watch(w)
                    }
                };
            }
            None => {}
        }
    }
    match handle(app, req, &target, verb) {
        // Like the other faults, a cut is for the API listener's WatchLists alone.
        Ok(Reply::Watch(mut w)) if listener == Listener::Api && w.initial_events => {
            w.cut_after = app.faults.take_cut(target.res.plural);
            Reply::Watch(w)
        }
        Ok(reply) => reply,
        Err(resp) => failed(resp).into(),
    }
}

fn verb(req: &Request, t: &Target) -> &'static str {
    let watch = matches!(req.param("watch"), Some("true" | "1"));
    match (req.method.as_str(), &t.name) {
        ("GET", None) if watch => "watch",
        ("GET", None) => "list",
        ("GET", Some(_)) => "get",
        ("POST", None) => "create",
        ("PUT", Some(_)) => "update",
        ("PATCH", Some(_)) => "patch",
        ("DELETE", Some(_)) => "delete",
        _ => "unsupported",
    }
}

/// Parses `/api/v1/...` and `/apis/{group}/{version}/...`.
fn target(catalog: &Catalog, path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, plural, name) = match rest {
        ["namespaces", ns, plural, more @ ..] => (Some(ns.to_string()), *plural, more),
        [plural, more @ ..] => (None, *plural, more),
        [] => return None,
    };
    let res = catalog.find(group, version, plural)?;
    if (namespace.is_some() && !res.namespaced) || name.len() > 1 {
        return None;
    }
    Some(Target { res, namespace, name: name.first().map(|n| n.to_string()) })
}

fn handle(app: &App, req: &Request, t: &Target, verb: &str) -> Result<Reply, Response> {
    let key = || -> Key {
        let ns = if t.res.namespaced { t.namespace.clone().unwrap_or_default() } else { String::new() };
        (ns, t.name.clone().unwrap_or_default())
    };
    let proto = proto::wanted(req) && proto::served(t.res);
    let obj = |v: Value| answer(t.res, v, proto);
    match verb {
        "list" => list_reply(app, req, t),
        "watch" => watch_request(app, req, t).map(|w| Reply::Watch(Box::new(w))),
        "get" => match app.store.get(t.res, &key()) {
            Some(o) if proto => match proto::enveloped(t.res, &o) {
                Some(body) => Ok(proto::response(200, body).into()),
                None => Ok(Response::json(200, o.with_kind(t.res)).into()),
            },
            Some(o) => Ok(Response::json(200, o.with_kind(t.res)).into()),
            None => Err(store_error(StoreError::NotFound { plural: t.res.plural, name: key().1 })),
        },
        "create" | "update" => {
            let body = body_object(req, t)?;
            if t.res.plural == "events" {
                events::validate(&body)?;
            }
            let mode = if verb == "create" { Mode::Create } else { Mode::Replace };
            let v = app.store.write(t.res, body, mode).map_err(store_error)?;
            let mut resp = obj(v);
            resp.status = if verb == "create" { 201 } else { 200 };
            Ok(resp.into())
        }
        "patch" => {
            let kind = req.header("content-type").unwrap_or_default();
            if !kind.starts_with("application/merge-patch+json")
                && !kind.starts_with("application/strategic-merge-patch+json")
            {
                let msg = format!("the server does not support patch type {kind:?}");
                return Err(Response::status(415, "UnsupportedMediaType", &msg));
            }
            let patch: Value = serde_json::from_slice(&req.body).map_err(|e| bad(&format!("invalid patch: {e}")))?;
            Ok(obj(app.store.patch(t.res, key(), &patch).map_err(store_error)?).into())
        }
        "delete" => Ok(obj(app.store.delete(t.res, key()).map_err(store_error)?).into()),
        _ => Err(Response::status(405, "MethodNotAllowed", &format!("{} is not supported here", req.method))),
    }
}

/// An object answer, in protobuf when asked for and the kind has a message.
fn answer(res: &Resource, v: Value, proto: bool) -> Response {
    let encoded = proto.then(|| kube_nftproxy::kube::protobuf::encode_json(res.kind, &v).ok()).flatten();
    match encoded {
        Some(raw) => proto::response(200, kube_nftproxy::kube::protobuf::seal(&res.api_version(), res.kind, raw)),
        None => Response::json(200, v.to_string().into_bytes()),
    }
}

/// The request body (JSON, or protobuf as its Content-Type says) as an object of this
/// resource, in the path's namespace and with its name.
fn body_object(req: &Request, t: &Target) -> Result<Value, Response> {
    let mut body: Value = match proto::body(req) {
        Some(read) => read.map_err(|e| bad(&format!("invalid protobuf body: {e}")))?,
        None => serde_json::from_slice(&req.body).map_err(|e| bad(&format!("invalid body: {e}")))?,
    };
    let kind = body["kind"].as_str().unwrap_or(t.res.kind);
    let api_version = body["apiVersion"].as_str().map(str::to_string).unwrap_or_else(|| t.res.api_version());
    if kind != t.res.kind || api_version != t.res.api_version() {
        return Err(bad(&format!("the body is a {api_version} {kind}, not a {}", t.res.kind)));
    }
    let meta = body.get_mut("metadata").and_then(Value::as_object_mut).ok_or_else(|| bad("metadata missing"))?;
    if let Some(ns) = &t.namespace {
        if meta.get("namespace").and_then(Value::as_str).is_some_and(|n| !n.is_empty() && n != ns) {
            return Err(bad("the namespace of the provided object does not match the namespace sent on the request"));
        }
        meta.insert("namespace".into(), Value::String(ns.clone()));
    }
    if let Some(name) = &t.name {
        if meta.get("name").and_then(Value::as_str).is_some_and(|n| n != name) {
            return Err(bad("the name of the object does not match the name on the URL"));
        }
        meta.insert("name".into(), Value::String(name.clone()));
    }
    with_kind(t.res, &mut body);
    Ok(body)
}

fn selector(app: &App, req: &Request, t: &Target) -> Result<Selector, Response> {
    let (labels, fields) = (req.param("labelSelector").unwrap_or(""), req.param("fieldSelector").unwrap_or(""));
    Selector::parse(labels, fields, t.res, &app.catalog).map_err(|e| bad(&e.to_string()))
}

/// `resourceVersion`: unset and `0` mean "now"; otherwise a number.
fn resource_version(req: &Request) -> Result<Option<u64>, Response> {
    match req.param("resourceVersion").unwrap_or("") {
        "" | "0" => Ok(None),
        v => v.parse().map(Some).map_err(|_| bad(&format!("invalid resource version: {v}"))),
    }
}

fn list_reply(app: &App, req: &Request, t: &Target) -> Result<Reply, Response> {
    let selector = selector(app, req, t)?;
    resource_version(req)?;
    watchlist::check_list(req)?;
    let limit = match req.param("limit").unwrap_or("") {
        "" => 0,
        v => v.parse().map_err(|_| bad(&format!("invalid limit: {v}")))?,
    };
    let from = match req.param("continue").unwrap_or("") {
        "" => None,
        token => Some(Continue::decode(token).ok_or_else(|| bad("continue key is not valid"))?),
    };
    // A real server's watch cache answers a resourceVersion=0 list whole, ignoring its limit
    // (as client-go's reflector counts on for its first listing).
    let from_cache = app.catalog.watch_cache && from.is_none() && req.param("resourceVersion") == Some("0");
    let limit = if from_cache { 0 } else { limit };
    let query = Query { namespace: t.namespace.as_deref(), selector: &selector, limit, from };
    let page = list::list(&app.store, t.res, &query).map_err(|_| Response::status(410, "Expired", CONTINUE_EXPIRED))?;
    if proto::wanted(req)
        && proto::served(t.res)
        && let Some(body) = proto::list(t.res, &page)
    {
        return Ok(proto::response(200, body).into());
    }
    Ok(Response::json(200, list::render(t.res, &page)).into())
}

fn watch_request(app: &App, req: &Request, t: &Target) -> Result<WatchRequest, Response> {
    let timeout = match req.param("timeoutSeconds").unwrap_or("") {
        "" => app.min_request_timeout.mul_f64(1.0 + fastrand::f64()),
        v => Duration::from_secs(v.parse().map_err(|_| bad(&format!("invalid timeoutSeconds: {v}")))?),
    };
    let start = watchlist::watch_start(req, app.faults.serves_watch_list())?;
    let asked = resource_version(req)?;
    let current = app.store.versions().0;
    let since = match start {
        Start::Plain => asked,
        // The state now, once the store has what was asked for (a watch cache waits a few
        // seconds for it, then gives up as here).
        Start::InitialEvents => match asked {
            Some(rv) if rv > current => return Err(watchlist::too_large(rv, current)),
            _ => None,
        },
        Start::NoInitialEvents => Some(asked.unwrap_or(current)),
    };
    let initial_events = start == Start::InitialEvents;
    Ok(WatchRequest {
        res: t.res,
        namespace: t.namespace.clone(),
        selector: selector(app, req, t)?,
        since,
        bookmarks: req.param("allowWatchBookmarks") == Some("true"),
        proto: proto::wanted(req) && proto::served(t.res),
        timeout,
        initial_events,
        cut_after: None,
        pace: None,
    })
}

/// A 400 BadRequest Status.
pub fn bad(message: &str) -> Response {
    Response::status(400, "BadRequest", message)
}

/// The Status response for a store error.
pub fn store_error(e: StoreError) -> Response {
    let (code, reason) = match &e {
        StoreError::NotFound { .. } => (404, "NotFound"),
        StoreError::AlreadyExists { .. } => (409, "AlreadyExists"),
        StoreError::Conflict { .. } => (409, "Conflict"),
        StoreError::Invalid(_) => (422, "Invalid"),
        StoreError::TooOld(_) => (410, "Expired"),
    };
    Response::status(code, reason, &e.to_string())
}
