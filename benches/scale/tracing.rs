//! What `kube-nftproxy trace` costs a live node (`-- --tracing-only`; once per full run), at
//! 30k services (1k with `--smoke`), in the latency rig's node: how long the binary takes to
//! say `tracing`; the first-packet latency of connections it does not trace, with a tracer
//! running for another address, against none in alternating rounds of the same run; and how
//! soon after a traced connection's first packet its report is written.

use super::common::net::{Proto, connect_nonblocking, in_netns, probe, spawn_in_netns};
use super::latency::latency_rig_with_model;
use super::synth::{self, Case};
use kube_nftproxy::model::Model;
use kube_nftproxy::trace::{self, Options, Selector};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Rounds of untraced connections, alternating without and with a tracer.
const ROUNDS: usize = 10;
/// Connections per round.
const PER_ROUND: usize = 50;
/// Traced connections whose report delay is measured.
const TRACED: usize = 20;

/// The median and the spread (lowest, highest) of `v`, in milliseconds.
fn stats(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"median": r(v[v.len() / 2]), "min": r(v[0]), "max": r(v[v.len() - 1])})
}

/// Milliseconds from starting the binary to its `tracing` line, five times.
fn start_to_tracing(node: &str, other: &str) -> Vec<f64> {
    (0..5)
        .map(|_| {
            let started = Instant::now();
            let mut child = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    node,
                    env!("CARGO_BIN_EXE_kube-nftproxy"),
                    "trace",
                    "--hostname-override=node-a",
                ])
                .args(["--to", other])
                .stderr(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .expect("kube-nftproxy trace");
            let stderr = BufReader::new(child.stderr.take().expect("stderr"));
            let said = stderr.lines().map_while(Result::ok).any(|l| l.contains("tracing"));
            let took = started.elapsed().as_secs_f64() * 1e3;
            assert!(said, "the tracer never said `tracing`");
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
            let _ = child.wait();
            took
        })
        .collect()
}

/// A writer that notes when each report was written.
struct Stamps(Arc<Mutex<Vec<Instant>>>);

impl Write for Stamps {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("stamps").push(Instant::now());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The library's tracer for `to` in namespace `node` on a thread, until `stop`; reports
/// stamped into `stamps`; `explain` asked of `model` when given.
fn tracer(
    node: &str,
    to: (std::net::IpAddr, Option<u16>),
    model: Option<Model>,
    stop: Arc<AtomicBool>,
    stamps: Arc<Mutex<Vec<Instant>>>,
) -> std::thread::JoinHandle<()> {
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let handle = spawn_in_netns(node, move || {
        let select = Selector { to: Some(to), ..Selector::default() };
        let t = trace::start(&select).expect("start the tracer");
        let _ = ready_tx.send(());
        let opts = Options { select, ..Options::default() };
        let objects: trace::Objects = std::sync::Arc::new(move || {
            let mut m = model.clone().unwrap_or_default();
            m.set_host_addresses(kube_nftproxy::host::interface_addresses().map_err(|e| e.to_string())?);
            Ok((m, model.is_some()))
        });
        t.follow(&opts, objects, super::config(), &stop, &mut Stamps(stamps)).expect("trace");
    });
    ready.recv_timeout(Duration::from_secs(10)).expect("the tracer started");
    handle
}

/// Waits (up to 30 s) for the `n`th report; when it was written.
fn wait_for_reports(stamps: &Mutex<Vec<Instant>>, n: usize) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    while stamps.lock().expect("stamps").len() < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    *stamps.lock().expect("stamps").get(n - 1).expect("a report for each traced connection")
}

/// Runs the three measurements at `case`'s size.
pub fn run(case: &Case) -> Value {
    let (rig, model) = latency_rig_with_model(case.services);
    let ip = |i| synth::cluster_ip(i).parse::<std::net::IpAddr>().expect("a ClusterIP");
    let (traced_ip, other_ip) = (ip(0), ip(1));
    let dst = format!("{traced_ip}:80");
    let start_ms = start_to_tracing(&rig.node.name, &other_ip.to_string());
    // Untraced connections with and without a tracer for another address, alternating.
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        without.extend(rig.connect_latencies(&dst, PER_ROUND));
        let (stop, stamps) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let t = tracer(&rig.node.name, (other_ip, None), None, stop.clone(), stamps.clone());
        // A running tracer is measured, not one starting: once it has reported a connection
        // of its own, what it reads at start (the node's rules and maps) is behind it.
        let other = SocketAddr::new(other_ip, 80);
        let _pending = in_netns(&rig.client.name, move || connect_nonblocking(other));
        wait_for_reports(&stamps, 1);
        with.extend(rig.connect_latencies(&dst, PER_ROUND));
        stop.store(true, Ordering::SeqCst);
        t.join().expect("tracer");
    }
    // Traced connections: from the client's connect to the report, one at a time.
    let (stop, stamps) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    // With the objects: each report names the rules and is checked against explain, as on a node.
    let t = tracer(&rig.node.name, (traced_ip, Some(80)), Some(model), stop.clone(), stamps.clone());
    let target: std::net::SocketAddr = dst.parse().expect("address");
    let delays: Vec<f64> = in_netns(&rig.client.name, move || {
        (0..=TRACED)
            .filter_map(|i| {
                let sent = Instant::now();
                probe(Proto::Tcp, target, None, Duration::from_secs(2));
                let at = wait_for_reports(&stamps, i + 1);
                // The first waits for the tracer to read the node's rules: shown apart.
                (i > 0).then(|| (at - sent).as_secs_f64() * 1e3)
            })
            .collect()
    });
    stop.store(true, Ordering::SeqCst);
    t.join().expect("tracer");
    let us = |v: Vec<f64>| stats(v.into_iter().map(|x| x / 1e3).collect());
    let r = json!({"case": case.name, "start_to_tracing_ms": stats(start_ms),
        "untraced_connect_ms": {"no_tracer": us(without), "tracer_for_another_address": us(with)},
        "traced_report_ms": stats(delays)});
    eprintln!("{}", line(&r));
    r
}

fn line(r: &Value) -> String {
    let m = |v: &Value| v["median"].as_f64().unwrap_or(f64::NAN);
    let (none, with) =
        (&r["untraced_connect_ms"]["no_tracer"], &r["untraced_connect_ms"]["tracer_for_another_address"]);
    format!(
        "trace at {}: `tracing` {} ms after start; untraced first packets {:.3} ms with a tracer for another \
         address against {:.3} ms with none ({:+.1} %); traced connections reported {} ms after their first packet",
        r["case"].as_str().unwrap_or("?"),
        m(&r["start_to_tracing_ms"]),
        m(with),
        m(none),
        (m(with) / m(none) - 1.0) * 100.0,
        m(&r["traced_report_ms"]),
    )
}

/// Prints the runs' figures, one line each, then each figure's median over the runs with
/// the runs' spread.
pub fn print(runs: &[Value]) {
    for (i, r) in runs.iter().enumerate() {
        println!("run {}: {}", i + 1, line(r));
    }
    let over = |path: &[&str]| {
        let v: Vec<f64> = runs.iter().filter_map(|r| path.iter().fold(r, |v, k| &v[*k])["median"].as_f64()).collect();
        let s = stats(v);
        format!("{} ms ({} to {})", s["median"], s["min"], s["max"])
    };
    println!(
        "trace over {} runs (median, spread): `tracing` after {}; untraced connect {} with a tracer, {} without; \
         reported {} after the packet",
        runs.len(),
        over(&["start_to_tracing_ms"]),
        over(&["untraced_connect_ms", "tracer_for_another_address"]),
        over(&["untraced_connect_ms", "no_tracer"]),
        over(&["traced_report_ms"]),
    );
}
