//! `kube-nftproxy trace`, the command: its table lives exactly as long as the tracer (after
//! a normal exit, `--timeout`, `--count`, Ctrl-C and SIGKILL it is gone), the proxy's tables
//! are only read, its JSON names what happened, and a flood is cut down by the kernel's rate
//! limit. That every data-plane probe is traced and agrees is checked by `common::traced`.

use crate::common::check::{LONG, send, web_on, who};
use crate::common::cluster::Cluster;
use crate::common::daemon::{Daemon, wait_for, write_manifests};
use crate::common::kernel_available;
use crate::common::net::{Proto, in_netns};
use serde_json::Value;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The flags the node's rules were made with.
const CIDRS: &str = "--cluster-cidr=10.0.0.0/8,fd00:10::/32";

/// `kube-nftproxy trace ARGS` in the node's namespace, once it said `tracing`.
fn tracer(c: &Cluster, args: &[&str]) -> Child {
    tracer_over(c, &c.applied(), args)
}

/// As [`tracer`], reading the objects from `manifests`.
fn tracer_over(c: &Cluster, manifests: &std::path::Path, args: &[&str]) -> Child {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &c.node.name, env!("CARGO_BIN_EXE_kube-nftproxy"), "trace"])
        .args(["--hostname-override=node-a", CIDRS, "--manifests"])
        .arg(manifests)
        .args(args)
        .env("RUST_LOG", "info");
    crate::common::traced::started(&mut cmd)
}

/// The tracer tables in the node's namespace.
fn tracer_tables(c: &Cluster) -> Vec<String> {
    c.node.nft(&["list", "tables"]).lines().filter(|l| l.contains("kube-nftproxy-trace")).map(String::from).collect()
}

/// The proxy's tables as `nft -j` lists them, handles left out.
fn proxy_tables(c: &Cluster) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(o) => {
                o.remove("handle");
                o.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut both = Vec::new();
    for fam in ["ip", "ip6"] {
        let mut v: Value =
            serde_json::from_str(&c.node.nft(&["-j", "list", "table", fam, "kube-nftproxy"])).expect("nft -j");
        strip(&mut v);
        both.push(v);
    }
    Value::Array(both)
}

/// Waits up to `within` for `child` to end; its exit status's code and its stdout.
fn ended(child: Child, within: Duration) -> (Option<i32>, String) {
    let pid = child.id();
    let started = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while started.elapsed() < within {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Still running past its time: ended so that the test fails rather than hangs.
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let out = child.wait_with_output().expect("wait");
    drop(watchdog);
    assert!(started.elapsed() < within, "the tracer did not end within {within:?}");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_tracers_table_goes_however_it_ends_and_the_proxys_tables_are_untouched() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    c.apply(web_on(&c, &["pod-1"]), &[]);
    let before = proxy_tables(&c);

    let t = tracer(&c, &["--timeout=1s"]);
    assert_eq!(tracer_tables(&c).len(), 2, "one table per family while it runs");
    assert_eq!(ended(t, Duration::from_secs(5)).0, Some(0), "--timeout ends it with success");
    assert!(tracer_tables(&c).is_empty(), "gone after --timeout: {:?}", tracer_tables(&c));

    let t = tracer(&c, &["--count=1", "--output=json", "--to=172.30.0.40:80"]);
    let checked = crate::common::traced::traced();
    send(&c.client, Proto::Tcp, "172.30.0.40:80", None, LONG);
    assert_eq!(crate::common::traced::traced(), checked + 1, "the probe itself was traced and checked too");
    let (code, out) = ended(t, Duration::from_secs(5));
    assert_eq!(code, Some(0), "{out}");
    let line: Value = serde_json::from_str(out.lines().next().expect("one connection")).expect("JSON");
    let pod = c.pod_named("pod-1").ip4;
    assert_eq!(line["service"], "test/web", "{line:#}");
    assert_eq!(line["port"], "http", "{line:#}");
    assert_eq!(line["verdict"], "dnat", "{line:#}");
    assert!(line["endpoint"].as_str().is_some_and(|e| e.starts_with(&format!("{pod}:"))), "{line:#}");
    assert!(line["source"].as_str().is_some_and(|s| s.starts_with("172.16.0.2:")), "{line:#}");
    assert_eq!(line["explain"], "agrees", "{line:#}");
    let chains = line["chains"].as_array().cloned().unwrap_or_default();
    assert!(!chains.is_empty(), "{line:#}");
    // Another tracer ran for the same probe (`send` traces it too): neither table is on its way.
    assert!(chains.iter().all(|h| h["table"] == "kube-nftproxy"), "{line:#}");
    assert!(tracer_tables(&c).is_empty(), "gone after --count");

    // For people: aligned fields, the rules by their text.
    let t = tracer(&c, &["--count=1", "--from=172.16.0.2", "--protocol=tcp"]);
    send(&c.client, Proto::Tcp, "172.30.0.40:80", None, LONG);
    let (code, text) = ended(t, Duration::from_secs(5));
    eprintln!("{text}");
    assert_eq!(code, Some(0), "{text}");
    for field in ["  service  test/web:http", &format!("  result   dnat to {pod}:"), "  explain  agrees", "  rules    "]
    {
        assert!(text.lines().any(|l| l.starts_with(field)), "no line starting {field:?}:\n{text}");
    }
    assert!(
        text.lines().next().is_some_and(|l| l.starts_with("172.16.0.2:") && l.contains("> 172.30.0.40:80 tcp")),
        "{text}"
    );
    for signal in ["-INT", "-KILL"] {
        let t = tracer(&c, &[]);
        let killed = Command::new("kill").args([signal, &t.id().to_string()]).status().expect("kill");
        assert!(killed.success());
        let (code, _) = ended(t, Duration::from_secs(5));
        if signal == "-INT" {
            assert_eq!(code, Some(0), "Ctrl-C is a normal end");
        }
        assert!(tracer_tables(&c).is_empty(), "gone after kill {signal}: {:?}", tracer_tables(&c));
    }
    assert_eq!(proxy_tables(&c), before, "the proxy's tables changed");
}

#[test]
fn a_flood_is_reported_at_the_rate_limit_and_the_tracer_stays_small() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    c.apply(web_on(&c, &["pod-1"]), &[]);
    let t = tracer(&c, &["--output=json", "--timeout=4s", "--to=172.30.0.40"]);
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap_or("VmRSS: 0 kB").to_string();
        line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    // 2,000 new UDP flows in well under a second, each its own connection; twice, the memory
    // read after each: the second flood must not grow what the first left.
    let flood = || {
        in_netns(&c.client.name, || {
            for _ in 0..2000 {
                let u = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
                let _ = u.send_to(b"x", "172.30.0.40:80");
            }
        })
    };
    let mut after = Vec::new();
    for _ in 0..2 {
        flood();
        std::thread::sleep(Duration::from_millis(1500));
        after.push(rss(t.id()));
    }
    let (code, out) = ended(t, Duration::from_secs(8));
    assert_eq!(code, Some(0));
    let lines = out.lines().count() as u32;
    let most = kube_nftproxy::trace::table::BURST + kube_nftproxy::trace::table::RATE * 5;
    assert!((10..=most).contains(&lines), "{lines} connections reported of 4,000; the limit allows {most}");
    assert!(after[1].saturating_sub(after[0]) < 1024, "the tracer grew from {} kB to {} kB", after[0], after[1]);
}

/// What the command is most useful for: when the kernel does something else than the objects
/// say (here an element deleted by hand), the trace says so in one line.
#[test]
fn a_kernel_that_disagrees_with_the_objects_is_reported_as_such() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    c.apply(web_on(&c, &["pod-1"]), &[]);
    let deleted = c.node.run(
        &["nft", "delete", "element", "ip", "kube-nftproxy", "cluster-endpoints-tcp-0", "{ 172.30.0.40 . 80 . 0 }"],
        "",
    );
    assert!(deleted.status.success(), "{}", String::from_utf8_lossy(&deleted.stderr));
    let t = tracer(&c, &["--count=1", "--output=json", "--to=172.30.0.40:80"]);
    let probe = in_netns(&c.client.name, || {
        crate::common::net::probe(Proto::Tcp, "172.30.0.40:80".parse().expect("address"), None, LONG)
    });
    let (code, out) = ended(t, Duration::from_secs(8));
    assert_eq!(code, Some(0), "{out}");
    let line: Value = serde_json::from_str(out.lines().next().expect("one connection")).expect("JSON");
    assert_eq!(line["verdict"], "reject", "the probe saw {}: {line:#}", probe.who());
    let said = line["explain"].as_str().unwrap_or_default();
    let pod = c.pod_named("pod-1").ip4;
    assert!(
        said.starts_with(&format!("explain allows dnat to {pod}:")) && said.ends_with("the kernel did reject"),
        "{line:#}"
    );
    assert!(line["chains"].as_array().is_some_and(|c| c.iter().any(|h| h["chain"] == "cluster-ips-check")), "{line:#}");
}

/// Beside a running daemon: the daemon sees nothing of the tracer's (no repair, nothing
/// foreign, its tables byte for byte as they were) and the tracer names the daemon's rules.
#[test]
fn beside_the_daemon_nothing_is_repaired_and_its_rules_are_named() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    let manifests = write_manifests(&c, web_on(&c, &["pod-1"]));
    let d = Daemon::start(&c.node, &manifests, &[CIDRS], &[]);
    let served = wait_for(Duration::from_secs(10), || who(&c.client, "172.30.0.40:80") == "pod-1");
    assert!(served.is_some(), "{}", d.logged());
    let before = proxy_tables(&c);
    for _ in 0..3 {
        let t = tracer_over(&c, &manifests, &["--count=1", "--output=json", "--to=172.30.0.40:80"]);
        let p = in_netns(&c.client.name, || {
            crate::common::net::probe(Proto::Tcp, "172.30.0.40:80".parse().expect("address"), None, LONG)
        });
        let (code, out) = ended(t, Duration::from_secs(8));
        assert_eq!(code, Some(0), "{out}");
        let line: Value = serde_json::from_str(out.lines().next().expect("one connection")).expect("JSON");
        assert_eq!(
            (line["verdict"].as_str(), line["explain"].as_str()),
            (Some("dnat"), Some("agrees")),
            "{} {line:#}",
            p.who()
        );
        let texts: Vec<&str> =
            line["chains"].as_array().into_iter().flatten().filter_map(|h| h["rule"].as_str()).collect();
        assert!(texts.contains(&"ip daddr @cluster-ips jump dispatch"), "the daemon's rules by their text: {texts:?}");
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(proxy_tables(&c), before, "the daemon's tables changed");
    let log = d.logged();
    for word in ["restoring the tables", "tamper", "foreign", "changed a kube-nftproxy table"] {
        assert!(!log.contains(word), "the daemon saw the tracer ({word}):\n{log}");
    }
}

/// Traffic that is no Service's passes through untouched, and says so.
#[test]
fn traffic_that_is_no_services_is_reported_as_left_alone() {
    if !kernel_available() {
        return;
    }
    let c = Cluster::new(1, 0);
    c.apply(web_on(&c, &["pod-1"]), &[]);
    let pod = c.pod_named("pod-1").ip4;
    let to = format!("{pod}:{}", crate::common::cluster::ECHO_PORT);
    let t = tracer(&c, &["--count=1", "--output=json", &format!("--to={to}")]);
    crate::common::check::reached(send(&c.client, Proto::Tcp, &to, None, LONG), "straight to the pod", &["pod-1"]);
    let (code, out) = ended(t, Duration::from_secs(8));
    assert_eq!(code, Some(0), "{out}");
    let line: Value = serde_json::from_str(out.lines().next().expect("one connection")).expect("JSON");
    assert_eq!((line["verdict"].as_str(), line["service"].as_str()), (Some("accept"), None), "{line:#}");
    assert_eq!((line["endpoint"].as_str(), line["masquerade"].as_bool()), (None, Some(false)), "{line:#}");
    assert_eq!(line["explain"], "agrees", "{line:#}");
    assert!(line["why"][0].as_str().is_some_and(|w| w.contains("no Service")), "{line:#}");
}
