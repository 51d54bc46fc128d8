//! The z-pages' formats, and their negotiation over real HTTP through the `http` thread.

use super::*;
use crate::health::Health;
use crate::health::node_ports::Wanted;
use crate::http::test_client::{read, send_with};
use crate::http::{Route, Server};
use crate::inbox::Inbox;
use crate::metrics::Metrics;
use crate::serve::Endpoints;

use std::net::SocketAddr;
use std::sync::Arc;

#[test]
fn dates_and_uptimes_as_go_writes_them() {
    let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    assert_eq!(unix_date(at(0)), "Thu Jan  1 00:00:00 UTC 1970");
    assert_eq!(unix_date(at(1_729_112_623)), "Wed Oct 16 21:03:43 UTC 2024");
    assert_eq!(unix_date(at(951_782_400)), "Tue Feb 29 00:00:00 UTC 2000");
    assert_eq!(uptime(Duration::from_secs(16)), "0 hr 00 min 16 sec");
    assert_eq!(uptime(Duration::from_secs(3 * 3600 + 7 * 60 + 5)), "3 hr 07 min 05 sec");
    assert_eq!(escape("a<b>&'\""), "a&lt;b&gt;&amp;&#39;&#34;");
}

/// The value of `field` in a plain-text page, whichever separator it was given.
fn field<'a>(page: &'a str, field: &str) -> Option<&'a str> {
    page.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?;
        DELIMITERS.iter().rev().find_map(|d| rest.strip_prefix(d)).map(str::trim_start)
    })
}

#[test]
fn statusz_in_upstreams_layout_and_as_the_v1beta1_object() {
    let started = SystemTime::UNIX_EPOCH + Duration::from_secs(1_729_112_623);
    let z = ZPages::new(started, None, Vec::new());
    let now = started + Duration::from_secs(3 * 3600 + 61);
    let text = z.statusz(Media::Text, now);
    assert_eq!((text.code, text.content_type), (200, http::TEXT));
    let page = text.body;
    assert!(page.starts_with(&format!("\nkube-nftproxy statusz\n{WARNING}\n\nStarted")), "{page}");
    assert_eq!(field(&page, "Started"), Some("Wed Oct 16 21:03:43 UTC 2024"), "{page}");
    assert_eq!(field(&page, "Up"), Some("3 hr 01 min 01 sec"), "{page}");
    assert_eq!(field(&page, "Go version"), Some(version::RUSTC), "{page}");
    assert_eq!(field(&page, "Binary version"), Some(version::VERSION), "{page}");
    assert_eq!(field(&page, "Paths"), Some("/configz /debug /flagz /healthz /metrics /proxyMode"), "{page}");
    assert_eq!(page.lines().count(), 10, "title, warning, five fields, three empty: {page}");
    let json = z.statusz(Media::Json, now);
    let doc: serde_json::Value = serde_json::from_str(&json.body).expect("JSON");
    assert_eq!((doc["kind"].as_str(), doc["apiVersion"].as_str()), (Some("Statusz"), Some("config.k8s.io/v1beta1")));
    assert_eq!(doc["metadata"]["name"], COMPONENT);
    assert_eq!(doc["startTime"], "2024-10-16T21:03:43Z");
    assert_eq!(doc["uptimeSeconds"], 3 * 3600 + 61);
    assert_eq!(doc["paths"][0], "/configz");
    assert!(doc.get("emulationVersion").is_none(), "{doc}");
}

/// A `Server` serving metrics with `pages` on a free port of 127.0.0.1.
fn serve(pages: ZPages) -> (SocketAddr, Server<Wanted>) {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
    let metrics = Some(Arc::new(Metrics::new().expect("metrics")));
    let health = Arc::new(Health::new(Duration::from_secs(60)));
    let endpoints = Endpoints::new(health, metrics, Arc::new(Inbox::default()), Some(Arc::new(pages)));
    let server = Server::start(vec![(addr, Route::Metrics)], endpoints).expect("server");
    (addr, server)
}

/// `GET path` with `accept`: status, lowercased head, body.
fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    let text = read(send_with(addr, path, &accept));
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status");
    (code, head.to_lowercase(), body.to_string())
}

#[test]
fn served_on_the_metrics_address_by_what_the_client_accepts() {
    let config = serde_json::json!({"bindAddress": "0.0.0.0", "mode": "nftables"});
    let flags = vec![("v".to_string(), "2".to_string()), ("cleanup".to_string(), "false".to_string())];
    let (addr, _server) = serve(ZPages::new(SystemTime::now(), Some(config.clone()), flags));
    let (code, head, body) = get(addr, "/configz", None);
    assert_eq!(code, 200);
    assert!(head.contains("content-type: application/json") && head.contains("x-content-type-options: nosniff"));
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).ok(), Some(serde_json::json!({CONFIGZ_KEY: config})));
    let (code, head, body) = get(addr, "/flagz", Some("text/plain"));
    assert_eq!(code, 200);
    assert!(head.contains("content-type: text/plain; charset=utf-8"), "{head}");
    let lines: Vec<&str> = body.lines().skip(4).collect();
    assert_eq!(lines.len(), 2, "{body}");
    assert!(lines[0].starts_with("cleanup") && lines[0].ends_with("false"), "sorted: {body}");
    assert_eq!(field(&body, "v"), Some("2"), "{body}");
    let flagz = "application/json;v=v1beta1;g=config.k8s.io;as=Flagz";
    let (code, _, body) = get(addr, "/flagz", Some(flagz));
    let doc: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!((code, doc["kind"].as_str(), doc["flags"]["v"].as_str()), (200, Some("Flagz"), Some("2")));
    let (code, _, body) = get(addr, "/statusz", Some("application/json"));
    assert_eq!((code, body.as_str()), (406, "not acceptable\n"), "a bare application/json is refused");
    let (code, head, _) = get(addr, "/statusz", Some(flagz));
    assert_eq!(code, 406, "{head}");
    assert!(head.starts_with("http/1.1 406 not acceptable"), "{head}");
    let (code, _, body) = get(addr, "/statusz", None);
    assert!(code == 200 && body.contains("kube-nftproxy statusz"), "{body}");
    // The metrics' own paths are still theirs.
    assert_eq!(get(addr, "/proxyMode", None).2, "nftables");
    assert_eq!(get(addr, "/nothing", None).0, 404);
}

#[test]
fn statusz_and_flagz_are_served_only_while_their_gates_are_on() {
    let pages = |statusz, flagz| ZPages::new(SystemTime::now(), None, Vec::new()).gated(statusz, flagz);
    let (addr, _server) = serve(pages(true, false));
    assert_eq!(get(addr, "/flagz", None).0, 404, "ComponentFlagz off");
    let (code, _, page) = get(addr, "/statusz", None);
    assert_eq!(code, 200, "{page}");
    assert_eq!(field(&page, "Paths"), Some("/configz /debug /healthz /metrics /proxyMode"), "no /flagz: {page}");
    let (addr, _server) = serve(pages(false, true));
    assert_eq!(get(addr, "/statusz", None).0, 404, "ComponentStatusz off");
    assert_eq!(get(addr, "/flagz", None).0, 200);
    assert_eq!(get(addr, "/configz", None).0, 200, "no gate: always served, as upstream's");
}
