//! Every probe a data-plane test sends (`check::send`) is also traced: a tracer is started in
//! the node's namespace before the probe, selecting its destination, protocol and source,
//! and what it reports must be what the probe saw: the connection of the probe's client port,
//! the endpoint that answered, the Service `explain` names, and `explain` agreeing with the
//! kernel. Rules a cluster made with the binary are traced with the binary
//! (`kube-nftproxy trace`); rules a `Proxy` synced in-process, with the library.

use super::Netns;
use super::explained::{self, Cluster, Rules, holds};
use super::net::{Probe, Proto, spawn_in_netns};
use kube_nftproxy::trace::{self, Options, Selector};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::Duration;

thread_local! {
    static TRACED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many probes of this thread were traced and checked.
pub fn traced() -> usize {
    TRACED.with(|t| t.get())
}

/// How long a tracer waits for the probe's connection.
const TRACE_FOR: Duration = Duration::from_secs(6);

/// A tracer started for one probe.
pub enum Tracing {
    /// `kube-nftproxy trace`, running.
    Binary(Child),
    /// The library's tracer on a thread: its JSON lines.
    InProcess(std::thread::JoinHandle<Vec<u8>>),
}

fn proto_word(p: Proto) -> &'static str {
    match p {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
        Proto::Sctp => "sctp",
    }
}

/// Starts tracing the probe `ns` is about to send to `dst` (from `src`, if given), once its
/// rules are in place; `None` when this thread's probes are not checked.
pub fn start(ns: &Netns, proto: Proto, dst: SocketAddr, src: Option<SocketAddr>) -> Option<Tracing> {
    let (cluster, rules) = explained::current()?;
    let source = cluster.sources.get(&ns.name)?;
    let from: Option<IpAddr> = match (src, source) {
        (Some(a), _) => Some(a.ip()),
        (None, Some((v4, v6))) => Some(if dst.is_ipv4() { *v4 } else { *v6 }),
        (None, None) => None,
    };
    Some(match rules {
        Rules::Binary { manifests, args } => binary(&cluster, &manifests, &args, from, dst, proto),
        Rules::InProcess(made) => in_process(&cluster, *made, from, dst, proto),
    })
}

fn binary(
    cluster: &Cluster,
    manifests: &std::path::Path,
    args: &[String],
    from: Option<IpAddr>,
    dst: SocketAddr,
    proto: Proto,
) -> Tracing {
    let mut cmd = Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        &cluster.node,
        env!("CARGO_BIN_EXE_kube-nftproxy"),
        "trace",
        "--output=json",
        "--count=1",
    ])
    .arg(format!("--timeout={}s", TRACE_FOR.as_secs()))
    .arg("--manifests")
    .arg(manifests)
    .arg("--hostname-override=node-a")
    .args(args)
    .args(["--to", &dst.to_string(), "--protocol", proto_word(proto)]);
    if let Some(ip) = from {
        cmd.args(["--from", &ip.to_string()]);
    }
    Tracing::Binary(started(cmd.env("RUST_LOG", "warn").env_remove("NODE_NAME")))
}

/// `cmd`, a `kube-nftproxy trace`, started (stdout piped), once it said `tracing` on stderr;
/// its stderr is read to its end on a thread of its own, so the tracer never writes to a
/// closed pipe.
pub fn started(cmd: &mut Command) -> Child {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run kube-nftproxy trace");
    let stderr = child.stderr.take().expect("its stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let said = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(10)).ok()).any(|l| l.contains("tracing"));
    assert!(said, "kube-nftproxy trace never said `tracing`: {:?}", child.wait_with_output());
    child
}

fn in_process(
    cluster: &Cluster,
    made: (kube_nftproxy::model::Model, kube_nftproxy::config::Config),
    from: Option<IpAddr>,
    dst: SocketAddr,
    proto: Proto,
) -> Tracing {
    let select = Selector {
        from: from.map(|ip| (ip, None)),
        to: Some((dst.ip(), Some(dst.port()))),
        protocol: kube_nftproxy::model::Protocol::parse(Some(&proto_word(proto).to_ascii_uppercase())).ok(),
    };
    let (ready_tx, ready) = mpsc::channel();
    let handle = spawn_in_netns(&cluster.node, move || {
        let tracer = trace::start(&select).expect("start the tracer");
        let _ = ready_tx.send(());
        let (model, cfg) = made;
        let objects: trace::Objects = std::sync::Arc::new(move || {
            let mut model = model.clone();
            model.set_host_addresses(kube_nftproxy::host::interface_addresses().map_err(|e| e.to_string())?);
            Ok((model, true))
        });
        let opts = Options { select, count: Some(1), timeout: Some(TRACE_FOR), json: true };
        let mut out = Vec::new();
        tracer.follow(&opts, objects, cfg, &Arc::new(AtomicBool::new(false)), &mut out).expect("trace");
        out
    });
    ready.recv_timeout(Duration::from_secs(10)).expect("the tracer started");
    Tracing::InProcess(handle)
}

/// The traced connections' JSON objects.
fn finish(t: Tracing) -> Vec<Value> {
    let out = match t {
        Tracing::Binary(child) => {
            let out = child.wait_with_output().expect("wait for kube-nftproxy trace");
            assert!(out.status.success(), "kube-nftproxy trace failed: {out:?}");
            out.stdout
        }
        Tracing::InProcess(handle) => handle.join().expect("the tracer thread"),
    };
    out.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("a JSON line"))
        .collect()
}

/// Asserts that the trace of the probe that saw `probe` from client port `port` says what
/// happened, and agrees with `explain`'s `answer`.
pub fn check(t: Tracing, probe: &Probe, port: Option<u16>, answer: Option<&Value>) {
    let traced = finish(t);
    let Some((cluster, _)) = explained::current() else { return };
    let c = traced
        .iter()
        .find(|c| {
            port.is_none_or(|p| {
                c["source"].as_str().and_then(|s| s.parse::<SocketAddr>().ok()).map(|s| s.port()) == Some(p)
            })
        })
        .unwrap_or_else(|| {
            panic!("no traced connection from client port {port:?} (probe: {}): {traced:?}", probe.who())
        });
    let verdict = c["verdict"].as_str().unwrap_or_default();
    let fits = match probe {
        Probe::Reply(r) => {
            let at = if verdict == "dnat" { &c["endpoint"] } else { &c["destination"] };
            let ip = at.as_str().and_then(|a| a.parse::<SocketAddr>().ok()).map(|a| a.ip());
            matches!(verdict, "dnat" | "accept") && holds(&cluster, &r.name, ip)
        }
        Probe::Refused => matches!(verdict, "reject" | "accept"),
        Probe::SendDenied => matches!(verdict, "reject" | "drop"),
        Probe::Timeout | Probe::Error(_) => matches!(verdict, "drop" | "accept" | "dnat"),
    };
    assert!(fits, "the probe went to {}, but the trace says:\n{c:#}", probe.who());
    assert_eq!(c["explain"], "agrees", "the trace and explain disagree:\n{c:#}");
    if let Some(spn) = answer.and_then(|a| a["service"].as_str()) {
        let named = match (c["service"].as_str(), c["port"].as_str()) {
            (Some(s), Some(p)) if !p.is_empty() => format!("{s}:{p}"),
            (Some(s), _) => s.to_string(),
            _ => String::new(),
        };
        assert_eq!(named, spn, "the trace names another service port than explain:\n{c:#}");
    }
    TRACED.with(|t| t.set(t.get() + 1));
}
