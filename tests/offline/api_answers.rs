//! Answers no real API server gives, from a bare HTTP server on loopback, read by the dry run
//! (`--master`): a million objects without a name make a bounded log and leave the valid
//! Service in the ruleset; a 200 whose body is a Status is an error, not an empty list.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};

/// An empty list of `kind` at resourceVersion 1.
fn empty(kind: &str) -> String {
    format!(r#"{{"kind":"{kind}","apiVersion":"v1","metadata":{{"resourceVersion":"1"}},"items":[]}}"#)
}

/// Serves every request with `services` for the Services' list and empty lists for the rest,
/// on a thread of its own, until the test ends; returns the server's address.
fn serve(services: String) -> String {
    serve_in_turn(vec![services])
}

/// As [`serve`], the Services' lists answered with `answers` in turn (the last again and
/// again); one connection at a time, so the turns are the requests' order.
fn serve_in_turn(answers: Vec<String>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address").to_string();
    std::thread::spawn(move || {
        let mut turn = 0;
        for conn in listener.incoming().flatten() {
            let services = &answers[turn.min(answers.len() - 1)];
            if answer(conn, services) {
                turn += 1;
            }
        }
    });
    addr
}

/// Answers one request on `conn` and closes it; whether it asked for the Services.
fn answer(mut conn: TcpStream, services: &str) -> bool {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut line = String::new();
    let _ = reader.read_line(&mut line);
    let path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    let services_asked = path.starts_with("/api/v1/services");
    let body = match path.split('?').next().unwrap_or_default() {
        "/api/v1/services" => services.to_string(),
        "/apis/discovery.k8s.io/v1/endpointslices" => empty("EndpointSliceList"),
        "/api/v1/nodes" => empty("NodeList"),
        _ => empty("ServiceCIDRList"),
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(body.as_bytes()));
    services_asked
}

/// The dry run of node-a against the server at `addr`, asking for JSON; at the lowest CPU
/// priority, as a million objects take both cores for seconds and the sync loop's tests
/// beside it time windows of milliseconds.
fn dry_run(addr: &str) -> Output {
    Command::new("nice")
        .args(["-n", "19", env!("CARGO_BIN_EXE_kube-nftproxy")])
        .args(["--dry-run", "--hostname-override=node-a", "--kube-api-content-type=application/json"])
        .arg(format!("--master=http://{addr}"))
        .env("RUST_LOG", "info")
        .output()
        .expect("run the dry run")
}

/// A valid Service: 10.96.0.5:80.
const GOOD: &str =
    r#"{"metadata":{"name":"good","namespace":"default"},"spec":{"clusterIP":"10.96.0.5","ports":[{"port":80}]}}"#;

#[test]
fn a_million_nameless_objects_make_a_few_lines_and_the_valid_one_is_applied() {
    let nameless = r#"{"metadata":{}}"#;
    let mut items = vec![nameless; 1_000_000];
    items.insert(500_000, GOOD);
    let list = format!(
        r#"{{"kind":"ServiceList","apiVersion":"v1","metadata":{{"resourceVersion":"7"}},"items":[{}]}}"#,
        items.join(",")
    );
    let out = dry_run(&serve(list));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // A slow machine may also say, once, that the 16 MB page is slow to arrive: that line is
    // bounded on its own and says nothing of the objects.
    let warnings: Vec<&str> =
        stderr.lines().filter(|l| l.contains("WARN") && !l.contains("a page is taking longer")).collect();
    assert!(warnings.len() <= 12, "{} warning lines, not a bounded few:\n{}", warnings.len(), warnings.join("\n"));
    let named = warnings.iter().filter(|l| l.contains("skipping a Service without a usable name")).count();
    assert_eq!(named, 10, "the first few are named:\n{stderr}");
    let counted = format!("{} more skipped", 1_000_000 - 10);
    assert!(warnings.iter().any(|l| l.contains(&counted)), "no line counting the rest ({counted}):\n{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("10.96.0.5"), "the valid Service is not in the ruleset");
}

#[test]
fn a_status_answered_with_200_is_an_error_not_an_empty_list() {
    let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcd is down","reason":"InternalError","code":500}"#;
    let out = dry_run(&serve(status.into()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a Status in place of a list was taken as one:\n{stderr}");
    assert!(stderr.contains("a Status, not a list") && stderr.contains("etcd is down"), "{stderr}");
    let no_rv = r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[]}"#;
    let out = dry_run(&serve(no_rv.into()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("no metadata.resourceVersion"), "{stderr}");
    let other = r#"{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"3"},"items":[]}"#;
    let out = dry_run(&serve(other.into()));
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Services `svc-N` for `range`, as a list's items.
fn services(range: std::ops::Range<usize>) -> String {
    let items: Vec<String> = range
        .map(|i| {
            let ip = format!("10.97.{}.{}", i / 250, i % 250 + 1);
            format!(r#"{{"metadata":{{"name":"svc-{i}","namespace":"default"}},"spec":{{"clusterIP":"{ip}","ports":[{{"port":80}}]}}}}"#)
        })
        .collect();
    items.join(",")
}

/// A list of 600 Services cut by a Status on its second page (500 of them filed already): what
/// the broken answer held stays known, so the next list (of two) deletes the 598 that are
/// gone, not only what it names.
#[test]
fn what_a_broken_list_filed_is_removed_by_the_next_list() {
    use kube_nftproxy::inbox::Inbox;
    use kube_nftproxy::kube::{Client, ClientConfig, Reflector, Settings, Shared, resources};
    use kube_nftproxy::model::ObjectChange;
    let page1 = format!(
        r#"{{"kind":"ServiceList","metadata":{{"resourceVersion":"7","continue":"next"}},"items":[{}]}}"#,
        services(0..600)
    );
    let status = r#"{"kind":"Status","status":"Failure","message":"etcd is down","code":500}"#.to_string();
    let two = format!(r#"{{"kind":"ServiceList","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#, services(0..2));
    let addr = serve_in_turn(vec![page1, status, two]);
    let cfg = ClientConfig {
        server: format!("http://{addr}"),
        ca: None,
        insecure: false,
        tls_server_name: None,
        client_cert: None,
        token: None,
    };
    let inbox = std::sync::Arc::new(Inbox::default());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let settings = Settings { qps: -1.0, ..Settings::default() };
    let shared = Shared::new(Client::new(&cfg).expect("client"), settings, "node-a", inbox.clone(), stop);
    let services_resource = resources("node-a", None).into_iter().next().expect("services");
    let mut reflector = Reflector::new(std::sync::Arc::new(shared), services_resource);
    assert!(reflector.list_once().is_err(), "a Status on page 2 is an error");
    reflector.list_once().expect("the next list");
    let changes = inbox.wait(std::time::Instant::now()).changes;
    let deleted = changes.iter().filter(|c| matches!(c, ObjectChange::Service(_, None))).count();
    let kept = changes.iter().filter(|c| matches!(c, ObjectChange::Service(_, Some(_)))).count();
    assert_eq!((deleted, kept), (598, 2), "what the broken list held and the next one lacks is deleted");
}
