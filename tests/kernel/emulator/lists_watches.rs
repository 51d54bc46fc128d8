//! Lists and watches as the emulator serves them: paging at a snapshot, selectors, watches
//! replayed and resumed, selector transitions, bookmarks, timeouts and compaction.

use super::*;

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
