//! The API-server emulator's protocol, against the running binary: paging at a snapshot,
//! selectors, watch replay and transitions, bookmarks, timeouts, compaction, every fault switch,
//! authentication, stats, Events written and read back, protobuf to clients that prefer it
//! (a JSON and a protobuf client delivering the same objects), and (when installed) real kubectl.

use crate::common::emulator::{Emulator, Item, RawWatch, plain_agent, request, request_with, tls_agent};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn svc(ns: &str, name: &str, labels: Value, cluster_ip: &str) -> Value {
    json!({"apiVersion":"v1","kind":"Service","metadata":{"name":name,"namespace":ns,"labels":labels},
           "spec":{"clusterIP":cluster_ip,"ports":[{"port":80}]}})
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn started() -> Emulator {
    Emulator::start(None, "127.0.0.1:0", None, &[])
}

#[test]
fn paging_is_consistent_at_the_snapshot_and_expires_with_compaction() {
    let emu = started();
    let all: Vec<Value> = (0..10).map(|i| svc("p", &format!("s{i}"), json!({"v":"old"}), "10.0.0.1")).collect();
    emu.apply(&Value::Array(all));
    let page1 = emu.list("/api/v1/namespaces/p/services?limit=4");
    assert_eq!(names(&page1), ["s0", "s1", "s2", "s3"]);
    assert_eq!(page1["metadata"]["remainingItemCount"], 6);
    assert!(page1["items"][0].get("kind").is_none(), "list items carry no kind");
    let token = page1["metadata"]["continue"].as_str().expect("continue").to_string();
    // Writes after the snapshot: a change, a deletion and a creation inside page 2's range.
    emu.apply(&svc("p", "s4", json!({"v":"new"}), "10.0.0.1"));
    emu.delete(&svc("p", "s5", json!({}), ""));
    emu.apply(&svc("p", "s45", json!({}), "10.0.0.1"));
    let page2 = emu.list(&format!("/api/v1/namespaces/p/services?limit=4&continue={token}"));
    assert_eq!(names(&page2), ["s4", "s5", "s6", "s7"], "page 2 shows the snapshot");
    assert_eq!(page2["items"][0]["metadata"]["labels"]["v"], "old");
    assert_eq!(page2["metadata"]["resourceVersion"], page1["metadata"]["resourceVersion"]);
    let token2 = page2["metadata"]["continue"].as_str().expect("continue").to_string();
    let fresh = emu.list("/api/v1/namespaces/p/services");
    assert!(names(&fresh).contains(&"s45".to_string()) && !names(&fresh).contains(&"s5".to_string()));
    emu.fault(&json!({"compact": true}));
    let (status, body) = emu.get(&format!("/api/v1/namespaces/p/services?limit=4&continue={token2}"));
    assert_eq!((status, body["reason"].as_str()), (410, Some("Expired")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("continue parameter is too old"));
}

#[test]
fn label_and_field_selectors() {
    let emu = started();
    emu.apply(&json!([
        svc("a", "plain", json!({}), "10.0.0.1"),
        svc("a", "other-proxy", json!({"service.kubernetes.io/service-proxy-name": "x"}), "10.0.0.2"),
        svc("a", "headless", json!({"tier": "db"}), "None"),
        svc("b", "web", json!({"tier": "web"}), "10.0.0.3"),
    ]));
    let q = |s: &str| names(&emu.list(&format!("/api/v1/services?{s}")));
    assert_eq!(
        q("labelSelector=%21service.kubernetes.io%2Fservice-proxy-name&fieldSelector=spec.clusterIP%21%3DNone"),
        ["plain", "web"]
    );
    assert_eq!(q("labelSelector=tier+in+(db,web),tier!=web"), ["headless"]);
    assert_eq!(q("labelSelector=tier+notin+(web)"), ["headless", "other-proxy", "plain"]);
    assert_eq!(q("fieldSelector=metadata.namespace=b"), ["web"]);
    assert_eq!(q("fieldSelector=metadata.name==plain"), ["plain"]);
    let (status, body) = emu.get("/api/v1/services?labelSelector=tier+in+db");
    assert_eq!((status, body["reason"].as_str()), (400, Some("BadRequest")));
    let (status, body) = emu.get("/api/v1/services?fieldSelector=spec.foo%3Dx");
    assert_eq!(status, 400);
    assert_eq!(body["message"], "field label not supported: spec.foo");
    let old = Emulator::start(None, "127.0.0.1:0", None, &["--no-service-field-selectors", "--no-servicecidrs"]);
    let (status, body) = old.get("/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone");
    assert_eq!((status, body["message"].as_str()), (400, Some("field label not supported: spec.clusterIP")));
    assert_eq!(old.get("/apis/networking.k8s.io/v1/servicecidrs").0, 404);
    assert_eq!(emu.get("/apis/networking.k8s.io/v1/servicecidrs").0, 200);
    assert!(!old.list("/apis").to_string().contains("networking.k8s.io"));
}

#[test]
fn watch_replays_then_streams_and_resumes_from_a_version() {
    let emu = started();
    emu.apply(&json!([svc("w", "a", json!({}), "10.0.0.1"), svc("w", "b", json!({}), "10.0.0.2")]));
    let mut w = RawWatch::open(&emu.control_addr(), "/api/v1/services?watch=true&resourceVersion=0");
    assert!(w.head.contains("Transfer-Encoding: chunked"), "{}", w.head);
    let first: Vec<Value> = (0..2).map(|_| w.event()).collect();
    assert!(first.iter().all(|e| e["type"] == "ADDED" && e["object"]["kind"] == "Service"), "{first:?}");
    let rv = emu.apply(&svc("w", "c", json!({}), "10.0.0.3"))["resourceVersion"].as_str().unwrap().to_string();
    let live = w.event();
    assert_eq!((live["type"].as_str(), live["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("c")));
    assert_eq!(live["object"]["metadata"]["resourceVersion"], rv);
    emu.apply(&svc("w", "c", json!({"x":"y"}), "10.0.0.3"));
    assert_eq!(w.event()["type"], "MODIFIED");
    emu.delete(&svc("w", "a", json!({}), ""));
    let mut from = RawWatch::open(&emu.control_addr(), &format!("/api/v1/services?watch=1&resourceVersion={rv}"));
    let replay: Vec<String> = (0..2).map(|_| from.event()["type"].as_str().unwrap().to_string()).collect();
    assert_eq!(replay, ["MODIFIED", "DELETED"], "only events after {rv}");
    assert!(matches!(from.next(Duration::from_millis(300)), Item::Timeout));
}

#[test]
fn selector_transitions_become_added_and_deleted() {
    let emu = started();
    emu.apply(&svc("t", "x", json!({"app": "web"}), "10.0.0.1"));
    let mut w = RawWatch::open(&emu.control_addr(), "/api/v1/namespaces/t/services?watch=true&labelSelector=app%3Dweb");
    assert_eq!(w.event()["type"], "ADDED");
    let rv = emu.apply(&svc("t", "x", json!({"app": "db"}), "10.0.0.1"))["resourceVersion"].clone();
    let gone = w.event();
    assert_eq!(gone["type"], "DELETED");
    assert_eq!(gone["object"]["metadata"]["labels"]["app"], "web", "the previous object");
    assert_eq!(gone["object"]["metadata"]["resourceVersion"], rv);
    emu.apply(&svc("t", "x", json!({"app": "web"}), "10.0.0.1"));
    assert_eq!(w.event()["type"], "ADDED");
}

#[test]
fn bookmarks_timeout_and_compaction() {
    let emu = Emulator::start(None, "127.0.0.1:0", None, &["--bookmark-interval=300ms", "--history=3"]);
    let start = emu.rv();
    let t0 = Instant::now();
    let path = "/api/v1/services?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=0";
    let mut w = RawWatch::open(&emu.control_addr(), path);
    let mut bookmarks = 0;
    loop {
        match w.next(Duration::from_secs(5)) {
            Item::Event(e) => {
                assert_eq!((e["type"].as_str(), e["object"]["kind"].as_str()), (Some("BOOKMARK"), Some("Service")));
                assert!(e["object"]["metadata"]["resourceVersion"].is_string());
                bookmarks += 1;
            }
            Item::End => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(bookmarks >= 3, "{bookmarks} bookmarks in 1 s at 300 ms, plus the last one");
    assert!(t0.elapsed() < Duration::from_secs(3));
    for i in 0..5 {
        emu.apply(&svc("c", &format!("s{i}"), json!({}), "10.0.0.1"));
    }
    let mut old = RawWatch::open(&emu.control_addr(), &format!("/api/v1/services?watch=true&resourceVersion={start}"));
    let err = old.event();
    assert_eq!((err["type"].as_str(), err["object"]["code"].as_u64()), (Some("ERROR"), Some(410)), "{err}");
    assert!(err["object"]["message"].as_str().unwrap().starts_with(&format!("too old resource version: {start} (")));
    assert!(matches!(old.next(Duration::from_secs(2)), Item::End));
    let now = emu.rv();
    emu.fault(&json!({"compact": true}));
    assert_eq!(emu.stats()["compacted"], now.to_string());
}

fn watch(emu: &Emulator, plural_path: &str) -> RawWatch {
    let mut w = RawWatch::open(&emu.control_addr(), &format!("{plural_path}?watch=true"));
    assert!(matches!(w.next(Duration::from_millis(100)), Item::Timeout));
    w
}

#[test]
fn stream_faults() {
    let emu = started();
    let svcs = "/api/v1/services";
    let mut clean = watch(&emu, svcs);
    let mut other = watch(&emu, "/api/v1/nodes");
    emu.fault(&json!({"drop": "clean", "resource": "services"}));
    assert!(matches!(clean.next(Duration::from_secs(5)), Item::End));
    assert!(matches!(other.next(Duration::from_millis(200)), Item::Timeout), "nodes untouched");
    let mut abrupt = watch(&emu, svcs);
    emu.fault(&json!({"drop": "abrupt"}));
    assert!(matches!(abrupt.next(Duration::from_secs(5)), Item::Eof));
    assert!(matches!(other.next(Duration::from_secs(5)), Item::Eof), "no resource: every watch");
    let mut reset = watch(&emu, svcs);
    emu.fault(&json!({"drop": "reset"}));
    assert!(matches!(reset.next(Duration::from_secs(5)), Item::Reset | Item::Eof));
    let mut stalled = watch(&emu, svcs);
    emu.fault(&json!({"stall": true}));
    emu.apply(&svc("f", "a", json!({}), "10.0.0.1"));
    assert!(matches!(stalled.next(Duration::from_millis(600)), Item::Timeout), "stalled");
    emu.fault(&json!({"stall": false}));
    assert_eq!(stalled.event()["type"], "ADDED");
    emu.fault(&json!({"malformed": "services"}));
    let bad = stalled.event();
    assert_eq!((bad["type"].as_str(), bad["object"]["spec"]["ports"].as_str()), (Some("MODIFIED"), Some("not-a-list")));
    assert!(bad["object"]["metadata"]["resourceVersion"].is_string());
    emu.fault(&json!({"garbage": "services"}));
    assert!(matches!(stalled.next(Duration::from_secs(5)), Item::Garbage(_)));
    emu.fault(&json!({"expire": true, "resource": "services"}));
    assert_eq!(stalled.event()["object"]["reason"], "Expired");
    assert!(matches!(stalled.next(Duration::from_secs(5)), Item::End));
    let _nodes = watch(&emu, "/api/v1/nodes");
    let deadline = Instant::now() + Duration::from_secs(5);
    while emu.stats()["openWatches"] != json!({"nodes": 1}) {
        assert!(Instant::now() < deadline, "open watches: {}", emu.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn redirects_error_events_endless_lines_and_slow_lists() {
    let emu = Emulator::start(None, "127.0.0.1:0", None, &["--plain"]);
    let api = emu.api.clone();
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).build().into();
    let get = |path: &str| agent.get(format!("{api}{path}")).call().expect("answered");
    emu.fault(&json!({"fail": {"status": 307, "verb": "list", "location": "http://elsewhere:81"}}));
    let moved = get("/api/v1/services?limit=5");
    assert_eq!(moved.status(), 307);
    assert_eq!(moved.headers()["location"], "http://elsewhere:81/api/v1/services?limit=5");
    emu.fault(&json!({"fail": {"status": 410, "verb": "watch", "as_event": true}}));
    let mut opened = get("/api/v1/services?watch=true");
    assert_eq!(opened.status(), 200);
    let event: Value = serde_json::from_str(&opened.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!((event["type"].as_str(), event["object"]["code"].as_u64()), (Some("ERROR"), Some(410)));
    emu.fault(&json!({"fail": {"status": 200, "verb": "list", "byte_every_ms": 10}}));
    let started = Instant::now();
    let text = get("/api/v1/services").body_mut().read_to_string().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(10) * (text.len() as u32 - 1), "{:?}", started.elapsed());
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["kind"], "ServiceList");
    let mut endless = RawWatch::open(api.trim_start_matches("http://"), "/api/v1/services?watch=true");
    emu.fault(&json!({"endless": "services"}));
    let mut line = String::new();
    while line.len() < 4 << 20 {
        match endless.next(Duration::from_secs(5)) {
            Item::Garbage(text) => line.push_str(&text),
            other => panic!("the line ended: {other:?} after {} bytes", line.len()),
        }
    }
    assert!(line.starts_with(r#"{"type":"MODIFIED","object":{"padding":"aaa"#) && !line.contains('\n'));
    assert_eq!(get("/api/v1/services").status(), 200, "every armed rule is used up");
}

#[test]
fn authentication_fail_faults_and_stats() {
    let emu = Emulator::start(None, "127.0.0.1:0", Some(&crate::common::root().join("examples/cluster")), &[]);
    assert!(emu.ready.starts_with("ready api=https://127.0.0.1:") && emu.control.starts_with("http://127.0.0.1:"));
    let url = format!("{}/api/v1/services", emu.api);
    let anonymous = tls_agent(&emu.tls_dir, false);
    let (status, body) = request(&anonymous, "GET", &url, None);
    assert_eq!((status, body["reason"].as_str()), (401, Some("Unauthorized")));
    let certified = tls_agent(&emu.tls_dir, true);
    let (status, list) = request(&certified, "GET", &url, None);
    assert_eq!(status, 200);
    assert!(names(&list).contains(&"kubernetes".to_string()), "manifests loaded");
    let token = std::fs::read_to_string(emu.tls_dir.join("token")).unwrap().trim().to_string();
    let bearer =
        |t: &str| request_with(&anonymous, "GET", &url, None, &[("authorization", &format!("Bearer {t}"))]).0.0;
    assert_eq!(bearer(&token), 200);
    std::fs::write(emu.tls_dir.join("token"), "rotated\n").unwrap();
    assert_eq!((bearer(&token), bearer("rotated")), (401, 200), "the token file is re-read");
    emu.fault(&json!({"fail": {"status": 429, "count": 1, "retry_after": 3, "resource": "services", "verb": "list"}}));
    let ((status, body), retry) = request_with(&certified, "GET", &url, None, &[]);
    assert_eq!((status, body["reason"].as_str(), retry.as_deref()), (429, Some("TooManyRequests"), Some("3")));
    assert_eq!(request(&certified, "GET", &url, None).0, 200, "only the next one fails");
    let stats = emu.stats();
    assert_eq!(stats["requests"]["list"]["services"], 5, "{stats}");
    assert_eq!((stats["status"]["401"].as_u64(), stats["status"]["429"].as_u64()), (Some(2), Some(1)), "{stats}");
    let (status, _) = request(&plain_agent(), "GET", &format!("{}/api/v1/services", emu.control), None);
    assert_eq!(status, 200, "control needs no credentials");
    assert_eq!(emu.stats()["requests"]["list"]["services"], 5, "control traffic is not counted");
}

#[test]
fn kubectl_works_against_the_emulator() {
    // The first on PATH (tests/run installs Debian's `kubernetes-client` where none is). In
    // CI a missing kubectl fails the test, so the emulator is always checked by a real client.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(kubectl) = std::env::split_paths(&path).map(|d| d.join("kubectl")).find(|k| k.is_file()) else {
        assert!(std::env::var_os("CI").is_none(), "kubectl is not installed: tests/run installs it");
        println!("kubectl not installed; skipping");
        return;
    };
    let emu = Emulator::start(None, "127.0.0.1:0", Some(&crate::common::root().join("examples/cluster")), &[]);
    let scratch = crate::common::Scratch::new("kubectl");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(emu.kubeconfig())
            .args(args)
            .env("HOME", &scratch.0)
            .output()
            .expect("run kubectl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        text
    };
    let list: Value = serde_json::from_str(&run(&["get", "services", "-A", "-o", "json"])).expect("json");
    assert!(names(&list).contains(&"kubernetes".to_string()));
    assert!(run(&["get", "endpointslices", "-A"]).contains("kube-dns"));
    scratch.write(
        "svc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: made, namespace: default}\nspec: {ports: [{port: 80}]}\n",
    );
    // Without client-side validation: older clients (Debian's is 1.20) fetch `/openapi/v2`
    // for it, which the emulator does not serve.
    run(&["create", "--validate=false", "-f", &scratch.0.join("svc.yaml").to_string_lossy()]);
    run(&["label", "service", "made", "app=x"]);
    assert_eq!(emu.list("/api/v1/namespaces/default/services/made")["metadata"]["labels"]["app"], "x");
    run(&["delete", "service", "made"]);
    assert_eq!(emu.get("/api/v1/namespaces/default/services/made").0, 404);
    emu.apply(&node_event("node-a"));
    let reasons = run(&["get", "events.events.k8s.io", "-A", "-o", "jsonpath={.items[*].reason}"]);
    assert_eq!(reasons, "Starting", "kubectl reads Events back");
}

#[test]
fn write_verbs_and_their_errors() {
    let emu = started();
    let agent = plain_agent();
    let base = format!("{}/api/v1/namespaces/v/services", emu.control);
    let body = svc("v", "one", json!({}), "10.0.0.1");
    let (status, created) = request(&agent, "POST", &base, Some(&body));
    assert_eq!((status, created["kind"].as_str()), (201, Some("Service")));
    assert!(created["metadata"]["uid"].is_string() && created["metadata"]["creationTimestamp"].is_string());
    let (status, again) = request(&agent, "POST", &base, Some(&body));
    assert_eq!((status, again["reason"].as_str()), (409, Some("AlreadyExists")));
    let one = format!("{base}/one");
    let mut stale = body.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    assert_eq!(request(&agent, "PUT", &one, Some(&stale)).1["reason"], "Conflict");
    let mut fresh = body.clone();
    fresh["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let (status, replaced) = request(&agent, "PUT", &one, Some(&fresh));
    assert_eq!((status, &replaced["metadata"]["uid"]), (200, &created["metadata"]["uid"]));
    assert_eq!(request(&agent, "PUT", &format!("{base}/two"), Some(&svc("v", "two", json!({}), ""))).0, 404);
    let patch = json!({"metadata": {"labels": {"a": "b"}}});
    let ((status, patched), _) =
        request_with(&agent, "PATCH", &one, Some(&patch), &[("content-type", "application/merge-patch+json")]);
    assert_eq!((status, patched["metadata"]["labels"]["a"].as_str()), (200, Some("b")));
    let (status, deleted) = request(&agent, "DELETE", &one, None);
    assert_eq!((status, deleted["metadata"]["name"].as_str()), (200, Some("one")));
    assert_eq!(request(&agent, "GET", &one, None).1["reason"], "NotFound");
    let (status, bad) = request_with(&agent, "GET", &format!("{base}?limit=x"), None, &[]).0;
    assert_eq!((status, bad["reason"].as_str()), (400, Some("BadRequest")));
}

/// An `events.k8s.io/v1` Event about Node `node`, named by the server.
fn node_event(node: &str) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"generateName": format!("{node}."), "namespace": "default"},
        "eventTime": "2025-01-02T03:04:05.678901Z", "reportingController": "kube-nftproxy",
        "reportingInstance": format!("kube-nftproxy-{node}"), "action": "StartKubeProxy", "reason": "Starting",
        "type": "Normal", "regarding": {"kind": "Node", "name": node, "uid": node}})
}

#[test]
fn events_posted_are_listed_back_and_bad_ones_refused() {
    let emu = started();
    let agent = tls_agent(&emu.tls_dir, true);
    let base = format!("{}/apis/events.k8s.io/v1/namespaces/default/events", emu.api);
    let (status, created) = request(&agent, "POST", &base, Some(&node_event("node-a")));
    assert_eq!((status, created["kind"].as_str()), (201, Some("Event")), "{created}");
    let name = created["metadata"]["name"].as_str().expect("a name from generateName").to_string();
    assert!(name.starts_with("node-a.") && name.len() > "node-a.".len(), "{name}");
    assert!(created["metadata"]["uid"].is_string() && created["metadata"]["resourceVersion"].is_string());
    let (status, list) = request(&agent, "GET", &base, None);
    assert_eq!((status, list["kind"].as_str()), (200, Some("EventList")));
    assert_eq!(names(&list), std::slice::from_ref(&name));
    assert_eq!(list["items"][0]["regarding"]["name"], "node-a");
    let everywhere = emu.list("/apis/events.k8s.io/v1/events");
    assert_eq!(names(&everywhere), [name]);
    // A core v1 Event is not an events.k8s.io/v1 one; an Event without a reason is invalid.
    let mut core = node_event("node-a");
    core["apiVersion"] = json!("v1");
    let (status, refused) = request(&agent, "POST", &base, Some(&core));
    assert_eq!(
        (status, refused["kind"].as_str(), refused["reason"].as_str()),
        (400, Some("Status"), Some("BadRequest"))
    );
    let mut reasonless = node_event("node-a");
    reasonless["reason"] = json!("");
    let (status, invalid) = request(&agent, "POST", &base, Some(&reasonless));
    assert_eq!((status, invalid["reason"].as_str()), (422, Some("Invalid")), "{invalid}");
    assert_eq!(invalid["details"]["causes"][0]["field"], "reason");
    // A server whose RBAC lacks the grant.
    emu.fault(&json!({"fail": {"status": 403, "resource": "events", "verb": "create"}}));
    let (status, forbidden) = request(&agent, "POST", &base, Some(&node_event("node-b")));
    assert_eq!((status, forbidden["reason"].as_str()), (403, Some("Forbidden")));
    assert_eq!(names(&emu.list("/apis/events.k8s.io/v1/events")).len(), 1, "nothing stored past the refusals");
    assert_eq!(emu.stats()["requests"]["create"]["events"], 4);
}

#[test]
fn api_listener_inside_a_network_namespace() {
    if !crate::common::kernel_available() {
        return;
    }
    let ns = crate::common::Netns::with_loopback("emu");
    let emu = Emulator::start(Some(&ns.name), "127.0.0.1:0", None, &[]);
    let addr = emu.api.trim_start_matches("https://").to_string();
    assert!(std::net::TcpStream::connect(&addr).is_err(), "the API listener is not in the host namespace");
    let port = addr.rsplit(':').next().unwrap();
    let probe = ns.run(&["bash", "-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{port}")], "");
    assert!(probe.status.success(), "reachable inside {}", ns.name);
    assert_eq!(emu.stats()["resourceVersion"], "1000", "control stays in the host namespace");
}

#[test]
fn protobuf_and_json_clients_deliver_the_same_objects_and_each_is_answered_in_its_own() {
    use crate::common::follower::{Follower, cluster, converge};
    use kube_nftproxy::kube::{ContentType, protobuf};
    let emu = started();
    emu.apply(&cluster());
    let mut json = Follower::start(&emu, ContentType::Json);
    let mut proto = Follower::start(&emu, ContentType::Protobuf);
    // 3 Services (one ExternalName), 3 slices (one FQDN), this Node, 1 ServiceCIDR; the
    // refused ones (a port out of range, a slice without its Service) are delivered by neither.
    let same = |a: &Follower, b: &Follower| format!("json {:#?}\nprotobuf {:#?}", a.state, b.state);
    let listed = |s: &str| s.contains("192.168.1.1") && s.contains("service: \"dns\", family: V6");
    assert!(converge(&mut json, &mut proto, 8, listed, Duration::from_secs(10)), "{}", same(&json, &proto));
    // Watched changes, a malformed object and a garbage frame in both streams, then more changes.
    let mut web = cluster()[0].clone();
    web["status"]["loadBalancer"]["ingress"] = json!([{"ip": "198.51.100.3"}]);
    web["spec"]["sessionAffinity"] = json!("None");
    emu.apply(&web);
    emu.fault(&json!({"malformed": "services"}));
    emu.fault(&json!({"garbage": "endpointslices"}));
    emu.delete(&cluster()[7]);
    let mut theirs = cluster()[1].clone();
    theirs["metadata"]["labels"] = json!({"service.kubernetes.io/service-proxy-name": "other"});
    emu.apply(&theirs);
    let mut node = cluster()[10].clone();
    node["status"]["addresses"] = json!([{"type": "InternalIP", "address": "192.168.1.7"}]);
    emu.apply(&node);
    // The Node moved, dns-6 went, dns left the selection, web lost its affinity.
    let followed = |s: &str| {
        s.contains("192.168.1.7")
            && s.contains(r#"Slice(("shop", "dns-6"), None)"#)
            && s.contains(r#"Service(("shop", "dns"), None)"#)
            && s.contains("198.51.100.3")
            && !s.contains("affinity_timeout: Some")
    };
    assert!(converge(&mut json, &mut proto, 8, followed, Duration::from_secs(10)), "{}", same(&json, &proto));
    // Both were answered in their own encoding, lists and watches alike.
    let media = &emu.stats()["media"];
    // Four lists and four watches each at least (the watches are reopened every 2 to 4 s).
    assert!(media[protobuf::MEDIA_TYPE].as_u64() >= Some(8), "{media}");
    assert!(media["application/json"].as_u64() >= Some(8), "{media}");
    // The Event goes out as protobuf and reads back as JSON whole.
    let event =
        kube_nftproxy::kube::events::starting("node-a", std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let outcome = kube_nftproxy::kube::events::record(&proto.shared.client, &event, &proto.shared.stop);
    assert!(matches!(outcome, kube_nftproxy::kube::events::Outcome::Recorded), "{outcome:?}");
    let listed = emu.list("/apis/events.k8s.io/v1/events");
    let back = &listed["items"][0];
    for field in ["reason", "action", "reportingController", "reportingInstance", "type", "regarding", "eventTime"] {
        assert_eq!(back[field], event[field], "{field}: {back}");
    }
}

#[test]
fn protobuf_answers_are_kubernetes_protobuf_and_json_stays_json() {
    let emu = started();
    emu.apply(&Value::Array(vec![svc("p", "a", json!({}), "10.0.0.1")]));
    let agent = tls_agent(&emu.tls_dir, true);
    let get = |path: &str, accept: &str| {
        let mut resp = agent.get(format!("{}{path}", emu.api)).header("Accept", accept).call().expect("answer");
        let media = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        (resp.status().as_u16(), media, resp.body_mut().read_to_vec().unwrap_or_default())
    };
    let proto = "application/vnd.kubernetes.protobuf, */*";
    let (status, media, body) = get("/api/v1/services", proto);
    assert_eq!((status, media.as_str(), &body[..4]), (200, "application/vnd.kubernetes.protobuf", &b"k8s\0"[..]));
    let env = kube_nftproxy::kube::protobuf::open(&body).expect("an envelope");
    assert_eq!((env.api_version.as_str(), env.kind.as_str()), ("v1", "ServiceList"));
    let (_, media, body) = get("/api/v1/namespaces/p/services/a", proto);
    assert_eq!(media, "application/vnd.kubernetes.protobuf");
    assert_eq!(kube_nftproxy::kube::protobuf::open(&body).expect("an envelope").kind, "Service");
    let (status, media, body) = get("/api/v1/namespaces/p/services/none", proto);
    let env = kube_nftproxy::kube::protobuf::open(&body).expect("a Status envelope");
    assert_eq!((status, media.as_str(), env.kind.as_str()), (404, "application/vnd.kubernetes.protobuf", "Status"));
    // JSON preferred, or a kind without a message here: JSON.
    assert_eq!(
        get("/api/v1/services", "application/json, application/vnd.kubernetes.protobuf;q=0.5").1,
        "application/json"
    );
    assert_eq!(get("/api/v1/namespaces", proto).1, "application/json");
}
