//! Real clients against the emulator: kubectl, write verbs, events, a listener inside a network
//! namespace, and protobuf beside JSON.

use super::*;

#[test]
fn kubectl_works_against_the_emulator() {
    let Some(kubectl) = kubectl() else { return };
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
    use kube_nftproxy::config::ContentType;
    use kube_nftproxy::config::content_type::PROTOBUF;
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
    // Both were answered in their own encoding, WatchLists and watches alike: four WatchLists
    // each (the first state, streamed, then followed as the watch) and the watches reopened
    // every 2 to 4 s since.
    let stats = emu.stats();
    let media = &stats["media"];
    assert_eq!(stats["requests"]["watchlist"]["services"], 2, "{stats}");
    assert_eq!(media.as_object().map(|m| m.len()), Some(2), "{media}");
    assert!(media[PROTOBUF].as_u64() >= Some(5), "{media}");
    assert!(media["application/json"].as_u64() >= Some(5), "{media}");
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
