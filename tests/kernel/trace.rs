//! Packet traces read over netlink (`kube_nftproxy::netlink::trace`): a packet marked with
//! `meta nftrace set 1` in one table is reported rule by rule in every table it passes, each
//! rule by the handle the kernel lists it with, with the packet's headers.

use crate::common::net::in_netns;
use crate::common::{Netns, kernel_available};
use kube_nftproxy::netlink::Socket;
use kube_nftproxy::netlink::trace::{TraceEvent, TraceKind, Traces, Verdict};
use std::time::{Duration, Instant};

/// A tracer's table marking output packets to 127.0.0.2, and another table counting them
/// after it, as the proxy's table would see them.
const RULES: &str = "
table ip tracer {
    chain marking { type filter hook output priority -150; ip daddr 127.0.0.2 meta nftrace set 1; }
}
table ip probe {
    chain out { type filter hook output priority 0; ip daddr 127.0.0.2 udp dport 9 counter; ip daddr 127.0.0.3 drop; }
}
";

/// The handle `nft -a` lists the first rule of `table`'s `chain` with.
fn handle(ns: &Netns, table: &str, chain: &str) -> u64 {
    let listed = ns.nft(&["-a", "list", "chain", "ip", table, chain]);
    let line = listed.lines().find(|l| l.contains("# handle") && !l.contains("chain ")).expect("a rule");
    line.rsplit("# handle ").next().and_then(|h| h.trim().parse().ok()).expect("its handle")
}

/// The events of packets sent to 127.0.0.2:9 from `ns`, read for up to two seconds.
fn traced(ns: &Netns) -> Vec<TraceEvent> {
    in_netns(&ns.name, || {
        let tracer = Socket::tracer(1 << 20).expect("subscribe to traces");
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        udp.send_to(b"traced", "127.0.0.2:9").expect("send");
        let (mut events, mut buf) = (Vec::new(), Vec::new());
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(2) {
            match tracer.traces(&mut buf, Duration::from_millis(100)).expect("read traces") {
                Traces::Events(got) => events.extend(got),
                Traces::Overrun => panic!("events lost"),
            }
            if events.iter().any(|e| e.table == "probe" && matches!(e.kind, TraceKind::Policy(_))) {
                break;
            }
        }
        events
    })
}

/// One event as compared: table, chain, rule handle, kind, verdict.
type Step<'a> = (&'a str, &'a str, Option<u64>, &'a TraceKind, Option<&'a Verdict>);

#[test]
fn a_marked_packet_is_reported_rule_by_rule_in_every_table_it_passes() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("trace");
    ns.run(&["ip", "link", "set", "lo", "up"], "");
    ns.nft_apply(RULES).expect("load the rules");
    let events = traced(&ns);
    let steps: Vec<Step> =
        events.iter().map(|e| (e.table.as_str(), e.chain.as_str(), e.handle, &e.kind, e.verdict.as_ref())).collect();
    let (mark, count) = (handle(&ns, "tracer", "marking"), handle(&ns, "probe", "out"));
    let id = events.first().expect("no event at all").id;
    assert!(events.iter().all(|e| e.id == id), "one packet, one id: {steps:?}");
    assert!(
        steps.contains(&("tracer", "marking", Some(mark), &TraceKind::Rule, Some(&Verdict::Continue))),
        "{steps:?}"
    );
    assert!(steps.contains(&("probe", "out", Some(count), &TraceKind::Rule, Some(&Verdict::Continue))), "{steps:?}");
    assert!(steps.contains(&("probe", "out", None, &TraceKind::Policy(Verdict::Accept), None)), "{steps:?}");
    assert!(!steps.iter().any(|s| s.2.is_some() && s.2 != Some(mark) && s.2 != Some(count)), "the drop did not match");
    // The first event of each base chain carries the packet: IPv4, to 127.0.0.2, UDP port 9.
    let first = events.iter().find(|e| e.table == "probe").expect("probe's events");
    assert_eq!(first.network_header.get(16..20), Some(&[127, 0, 0, 2][..]), "{first:?}");
    assert_eq!(first.transport_header.get(2..4), Some(&9u16.to_be_bytes()[..]), "{first:?}");
}
