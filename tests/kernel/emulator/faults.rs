//! The faults the emulator makes on request: broken streams, redirects, error events, endless
//! lines, slow lists, failed authentication, and the stats that count them.

use super::*;

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
