//! WatchList as the emulator serves it: the selected state as `ADDED` events, the bookmark
//! annotated `k8s.io/initial-events-end` at the state's resourceVersion, then the changes, in
//! JSON and protobuf; its options checked and refused as the API server's validation does;
//! refused whole as with the `WatchList` gate off; cut before its bookmark; counted. And
//! kubectl: its raw stream, and its client-go streaming the list or falling back to a list.

use super::*;
use kube_nftproxy::kube::{INITIAL_EVENTS_ANNOTATION_KEY, protobuf};

/// A WatchList's query, without a resourceVersion.
const WATCH_LIST: &str = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

/// The type, name and resourceVersion of a JSON event, and its initial-events-end annotation.
fn read(e: &Value) -> (String, String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let meta = &e["object"]["metadata"];
    (
        s(&e["type"]),
        s(&meta["name"]),
        s(&meta["resourceVersion"]),
        s(&meta["annotations"][INITIAL_EVENTS_ANNOTATION_KEY]),
    )
}

#[test]
fn a_watch_list_streams_the_selected_state_then_the_bookmark_ending_it_then_the_changes() {
    let emu = started();
    emu.apply(&json!([
        svc("a", "one", json!({"app": "x"}), "10.0.0.1"),
        svc("a", "two", json!({}), "10.0.0.2"),
        svc("b", "three", json!({"app": "x"}), "10.0.0.3")
    ]));
    let rv = emu.rv().to_string();
    let mut w = RawWatch::open(&emu.control_addr(), &format!("/api/v1/services?{WATCH_LIST}&labelSelector=app%3Dx"));
    let events: Vec<_> = (0..3).map(|_| read(&w.event())).collect();
    let names: Vec<(&str, &str)> = events.iter().map(|e| (e.0.as_str(), e.1.as_str())).collect();
    assert_eq!(names, [("ADDED", "one"), ("ADDED", "three"), ("BOOKMARK", "")], "{events:?}");
    assert_eq!((events[2].2.as_str(), events[2].3.as_str()), (rv.as_str(), "true"), "at the state's resourceVersion");
    // The same stream goes on as the watch.
    emu.apply(&svc("a", "four", json!({"app": "x"}), "10.0.0.4"));
    let (kind, name, at, _) = read(&w.event());
    assert_eq!((kind.as_str(), name.as_str()), ("ADDED", "four"));
    assert!(at.parse::<u64>().unwrap() > rv.parse().unwrap());
    // From a resourceVersion the store has reached: the state now all the same.
    let mut w = RawWatch::open(&emu.control_addr(), &format!("/api/v1/services?{WATCH_LIST}&resourceVersion={rv}"));
    let kinds: Vec<String> = (0..5).map(|_| read(&w.event()).0).collect();
    assert_eq!(kinds, ["ADDED", "ADDED", "ADDED", "ADDED", "BOOKMARK"]);
    // One it has not: 504, too large, as a watch cache gives up on it.
    let (status, body) = emu.get(&format!("/api/v1/services?{WATCH_LIST}&resourceVersion=999999"));
    assert_eq!((status, body["reason"].as_str()), (504, Some("Timeout")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("Too large resource version: 999999"), "{body}");
    // sendInitialEvents=false: the changes after the resourceVersion, no state.
    let mut w = RawWatch::open(
        &emu.control_addr(),
        &format!(
            "/api/v1/services?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion={rv}"
        ),
    );
    assert_eq!(read(&w.event()).1, "four", "only what came after {rv}");
}

#[test]
fn a_protobuf_watch_list_ends_its_state_with_the_annotated_bookmark() {
    let emu = started();
    emu.apply(&json!([svc("a", "one", json!({}), "10.0.0.1"), svc("a", "two", json!({}), "10.0.0.2")]));
    let rv = emu.rv().to_string();
    let agent = tls_agent(&emu.tls_dir, true);
    let url = format!("{}/api/v1/services?{WATCH_LIST}&timeoutSeconds=1", emu.api);
    let mut resp =
        agent.get(url).header("Accept", "application/vnd.kubernetes.protobuf, */*").call().expect("an answer");
    let media = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    assert_eq!(media, "application/vnd.kubernetes.protobuf;stream=watch");
    let body = resp.body_mut().read_to_vec().expect("the stream, ended at its timeout");
    let mut rest = &body[..];
    let mut events = Vec::new();
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let (kind, object) = protobuf::watch_event(&rest[4..4 + len]).expect("a WatchEvent");
        let env = protobuf::open(&object).expect("an envelope");
        let (_, name, at) = protobuf::names(&env.raw).expect("metadata");
        let end = protobuf::annotation(&env.raw, INITIAL_EVENTS_ANNOTATION_KEY);
        events.push((kind, env.kind, name, at, end));
        rest = &rest[4 + len..];
    }
    let s = String::from;
    assert_eq!(
        events,
        [
            (s("ADDED"), s("Service"), s("one"), events[0].3.clone(), None),
            (s("ADDED"), s("Service"), s("two"), events[1].3.clone(), None),
            (s("BOOKMARK"), s("Service"), s(""), rv.clone(), Some(s("true"))),
            (s("BOOKMARK"), s("Service"), s(""), rv, None),
        ],
        "the state, the bookmark ending it, and the timeout's plain bookmark"
    );
}

#[test]
fn watch_list_options_are_checked_refused_with_the_gate_off_and_cut_before_the_bookmark() {
    let emu = Emulator::start(None, "127.0.0.1:0", None, &["--no-watch-list"]);
    emu.apply(&json!([
        svc("a", "one", json!({}), "10.0.0.1"),
        svc("a", "two", json!({}), "10.0.0.2"),
        svc("a", "three", json!({}), "10.0.0.3")
    ]));
    let agent = tls_agent(&emu.tls_dir, true);
    let get = |query: &str| request(&agent, "GET", &format!("{}/api/v1/services?{query}", emu.api), None);
    let invalid = |query: &str, what: &str| {
        let (status, body) = get(query);
        assert_eq!((status, body["reason"].as_str()), (422, Some("Invalid")), "{query}: {body}");
        let message = format!("ListOptions.meta.k8s.io \"\" is invalid: {what}");
        assert_eq!(body["message"].as_str(), Some(message.as_str()), "{query}");
    };
    invalid(
        WATCH_LIST,
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
    );
    emu.fault(&json!({"watch_list": true}));
    invalid(
        "watch=true&sendInitialEvents=true",
        "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
    );
    invalid(
        "watch=true&resourceVersionMatch=NotOlderThan",
        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
    );
    invalid(
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
    );
    // Served now; the next one is cut after two objects, before its bookmark.
    emu.fault(&json!({"cut_watch_list": {"resource": "services", "after": 2}}));
    let url = format!("{}/api/v1/services?{WATCH_LIST}&timeoutSeconds=5", emu.api);
    let mut reader = agent.get(&url).call().expect("an answer").into_body().into_reader();
    let mut text = Vec::new();
    let ended = std::io::Read::read_to_end(&mut reader, &mut text);
    let text = String::from_utf8_lossy(&text);
    assert!(ended.is_err() || !text.ends_with('\n'), "the stream was not cut: {text}");
    let whole: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let kinds: Vec<&str> = whole.iter().map(|e| e["type"].as_str().unwrap_or_default()).collect();
    assert_eq!(kinds, ["ADDED", "ADDED"], "two objects and no bookmark: {text}");
    // The next is whole again.
    let mut reader = agent.get(&url.replace("timeoutSeconds=5", "timeoutSeconds=1")).call().expect("an answer");
    let text = reader.body_mut().read_to_string().expect("a whole stream");
    assert_eq!(text.lines().filter(|l| l.contains(INITIAL_EVENTS_ANNOTATION_KEY)).count(), 1, "{text}");
    let stats = emu.stats();
    assert_eq!(stats["requests"]["watchlist"]["services"], 4, "every WatchList asked for, refused or not: {stats}");
    assert_eq!(stats["status"]["422"], 4, "{stats}");
    assert!(stats["bytesSent"].as_u64() > Some(1000), "{stats}");
    let seen = emu.list("/emulator/requests");
    let last = seen.as_array().and_then(|a| a.last()).cloned().unwrap_or_default();
    assert_eq!((last["verb"].as_str(), last["resource"].as_str()), (Some("watchlist"), Some("services")), "{seen}");
    assert!(last["target"].as_str().unwrap_or_default().contains("sendInitialEvents=true"), "{last}");
}

/// kubectl's minor version (its client-go's), if it says.
fn minor(kubectl: &std::path::Path) -> Option<u32> {
    let out = std::process::Command::new(kubectl).args(["version", "--client", "-o", "json"]).output().ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["clientVersion"]["minor"].as_str()?.trim_end_matches('+').parse().ok()
}

#[test]
fn kubectl_reads_the_streamed_list_and_its_client_go_streams_it_or_falls_back() {
    let Some(kubectl) = kubectl() else { return };
    let emu = Emulator::start(None, "127.0.0.1:0", Some(&crate::common::root().join("examples/cluster")), &[]);
    let scratch = crate::common::Scratch::new("kubectl-wl");
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let out = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(emu.kubeconfig())
            .args(args)
            .env("HOME", &scratch.0)
            .envs(env.iter().copied())
            .output()
            .expect("run kubectl");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "kubectl {args:?}: {err}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), err)
    };
    let services = emu.list("/api/v1/services")["items"].as_array().map_or(0, Vec::len);
    let (raw, _) = run(&[], &["get", "--raw", &format!("/api/v1/services?{WATCH_LIST}&timeoutSeconds=1")]);
    let events: Vec<Value> = raw.lines().map(|l| serde_json::from_str(l).expect("an event a line")).collect();
    let added = events.iter().take_while(|e| e["type"] == "ADDED").count();
    assert_eq!(added, services, "{raw}");
    assert_eq!(read(&events[added]).3, "true", "the bookmark ending the state follows it: {raw}");
    // client-go streams lists from 1.27 behind WatchListClient, read from the environment from 1.30.
    let Some(minor) = minor(&kubectl).filter(|m| *m >= 30) else {
        println!("kubectl's client-go has no WatchListClient it reads from the environment; not checked");
        return;
    };
    let wait = ["-v=6", "wait", "-n", "default", "service/kubernetes", "--for=jsonpath={.metadata.name}=kubernetes"];
    let gate = [("KUBE_FEATURE_WatchListClient", "true")];
    let count = |verb: &str| emu.stats()["requests"][verb]["services"].as_u64().unwrap_or(0);
    let (_, log) = run(&gate, &wait);
    assert!(log.contains("sendInitialEvents=true") && log.contains(" 200 OK"), "kubectl 1.{minor}:\n{log}");
    assert!(count("watchlist") >= 1 && count("list") == 0, "{}", emu.stats());
    // Refused, client-go lists instead, and still gets what it waits for.
    emu.fault(&json!({"watch_list": false}));
    let (_, log) = run(&gate, &wait);
    assert!(log.contains(" 422 "), "kubectl 1.{minor}:\n{log}");
    assert!(count("list") >= 1, "client-go did not fall back to a list: {}", emu.stats());
}
