//! The packet tracer's table (`kube-nftproxy trace`) through the in-process compiler: for both
//! families, the table as the tracer writes it and a rule for every combination of its
//! optional matches compile to the very messages `nft` 1.0.6 sends for the same text
//! (`nft --debug=mnl`, byte for byte: the table's owner flag, the protocol set, the limit,
//! the trace flag) and to the rules it prints (`--debug=netlink`); the kernel takes our batch
//! and lists the table as after `nft -f`; and an owned table goes with the socket that sent it.

use crate::common::net::in_netns;
use crate::common::{Netns, kernel_available};
use kube_nftproxy::netlink::Socket;
use kube_nftproxy::nft::compile::{Schema, compile, describe};
use kube_nftproxy::nft::wire::Batch;
use std::time::{Duration, Instant};

const TABLE: &str = "kube-nftproxy-trace";

/// The tracer's rule in `fam`'s table: each match optional, the protocols' set when no
/// protocol is given.
fn rule(fam: &str, saddr: bool, daddr: bool, proto: Option<&str>, sport: bool, dport: bool) -> String {
    let (s, d) = if fam == "ip" { ("10.0.0.1", "10.96.0.5") } else { ("fd00::1", "fd00:96::5") };
    let mut r = String::new();
    if saddr {
        r += &format!("{fam} saddr {s} ");
    }
    if daddr {
        r += &format!("{fam} daddr {d} ");
    }
    r += &format!("meta l4proto {} ", proto.unwrap_or("{ tcp, udp, sctp }"));
    if sport {
        r += "th sport 40000 ";
    }
    if dport {
        r += "th dport 80 ";
    }
    r + "ct state new limit rate 25/second burst 50 packets meta nftrace set 1"
}

/// The tracer's table of `fam` with `pre` in its prerouting chain and `out` in its output
/// chain; `owner` ties it to the socket that loads it.
fn table(fam: &str, owner: bool, pre: &[String], out: &[String]) -> String {
    let chain = |name: &str, rules: &[String]| {
        let mut c = format!("    chain {name} {{\n        type filter hook {name} priority -150; policy accept;\n");
        rules.iter().for_each(|r| c += &format!("        {r}\n"));
        c + "    }\n"
    };
    let flags = if owner { "    flags owner\n" } else { "" };
    format!(
        "table {fam} {TABLE} {{\n{flags}    comment \"kube-nftproxy trace: removed when the tracer exits\"\n{}{}}}\n",
        chain("prerouting", pre),
        chain("output", out)
    )
}

/// The table exactly as the tracer writes it: every match in prerouting, the protocols' set
/// in output.
fn tracers_table(fam: &str, owner: bool) -> String {
    let pre = rule(fam, true, true, Some("tcp"), true, true);
    let out = rule(fam, false, false, None, false, false);
    table(fam, owner, &[pre], &[out])
}

/// A table whose prerouting chain holds the rule with every combination of the matches.
fn every_combination(fam: &str) -> String {
    let mut pre = Vec::new();
    for present in 0..16u8 {
        for proto in [Some("tcp"), Some("udp"), Some("sctp"), None] {
            let has = |bit: u8| present & bit != 0;
            pre.push(rule(fam, has(1), has(2), proto, has(4), has(8)));
        }
    }
    table(fam, true, &pre, &[rule(fam, true, false, None, false, true)])
}

/// The messages between a batch's begin and end markers: type and body (nfgenmsg and
/// attributes), from our batch's bytes.
fn our_messages(script: &str) -> Vec<(u16, Vec<u8>)> {
    let mut batch = Batch::new();
    compile(script, &mut Schema::default(), &mut batch).unwrap_or_else(|e| panic!("{e}\n{script}"));
    let bytes = batch.finish();
    let mut out = Vec::new();
    let mut rest = bytes.as_slice();
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        out.push((kind, rest[16..len].to_vec()));
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    batch_only(out)
}

/// The messages between the batch markers (nfnetlink's `NFNL_MSG_BATCH_BEGIN`, 16, and
/// `_END`, 17), leaving out `nft`'s cache queries before them.
fn batch_only(messages: Vec<(u16, Vec<u8>)>) -> Vec<(u16, Vec<u8>)> {
    let begin = messages.iter().position(|m| m.0 == 16).expect("a batch begins");
    messages.into_iter().skip(begin + 1).take_while(|m| m.0 != 17).collect()
}

/// The 4 bytes of a `| xx xx xx xx |` data line of libmnl's dump.
fn hex_word(line: &str) -> Vec<u8> {
    let inner = line.split('|').nth(1).unwrap_or_default();
    inner.split_whitespace().map(|h| u8::from_str_radix(h, 16).expect("hex")).collect()
}

/// The messages `nft --debug=mnl` printed, rebuilt byte for byte from libmnl's dump: each
/// attribute's header (`|len|flags|type|`, `N` for nested, `B` for network order) and each
/// 4-byte data line.
fn nft_messages(dump: &str) -> Vec<(u16, Vec<u8>)> {
    let mut out: Vec<(u16, Vec<u8>)> = Vec::new();
    for raw in dump.lines() {
        // Drop the colours libmnl prints attribute headers in.
        let mut line = String::new();
        let mut skipping = false;
        for c in raw.chars() {
            match c {
                '\u{1b}' => skipping = true,
                'm' if skipping => skipping = false,
                c if !skipping => line.push(c),
                _ => {}
            }
        }
        let last = out.last_mut();
        if line.contains("|  type | flags  |") {
            let kind = line.split('|').nth(1).and_then(|t| t.trim().parse().ok()).expect("a type");
            out.push((kind, Vec::new()));
        } else if line.contains("|  extra header  |") || line.contains("|      data      |") {
            last.expect("a message").1.extend(hex_word(&line));
        } else if line.contains("|len |flags| type|") {
            let f: Vec<&str> = line.split('|').collect();
            let len: u16 = f[1].parse().expect("a length");
            let mut kind: u16 = f[3].parse().expect("a type");
            kind |= if f[2].contains('N') { 0x8000 } else { 0 } | if f[2].contains('B') { 0x4000 } else { 0 };
            let body = &mut last.expect("a message").1;
            body.extend(len.to_ne_bytes());
            body.extend(kind.to_ne_bytes());
        }
    }
    batch_only(out)
}

/// The rule blocks of `nft --debug=netlink` output for the tracer's table.
fn rule_blocks(debug: &str) -> String {
    let mut out = String::new();
    let mut in_rule = false;
    for line in debug.lines() {
        in_rule |= line.starts_with(&format!("ip {TABLE} ")) || line.starts_with(&format!("ip6 {TABLE} "));
        if in_rule {
            out.push_str(line);
            out.push('\n');
        }
        in_rule &= !line.is_empty();
    }
    out
}

/// `script`'s compilation against `nft`'s, in namespace `ns`: the rules as printed, then
/// every message byte for byte.
fn compare_with_nft(ns: &Netns, script: &str) {
    let debug = ns.run(&["nft", "--debug=netlink", "-c", "-f", "-"], script);
    assert!(debug.status.success(), "nft -c: {}\n{script}", String::from_utf8_lossy(&debug.stderr));
    let want = rule_blocks(&String::from_utf8_lossy(&debug.stdout));
    assert!(want.contains("[ meta set nftrace with reg 1 ]"), "{want}");
    assert_eq!(describe(script).expect("describe"), want, "the rules as nft prints them");
    let dump = ns.run(&["nft", "--debug=mnl", "-c", "-f", "-"], script);
    assert!(dump.status.success(), "nft --debug=mnl: {}", String::from_utf8_lossy(&dump.stderr));
    let (theirs, ours) = (nft_messages(&String::from_utf8_lossy(&dump.stdout)), our_messages(script));
    assert_eq!(ours.len(), theirs.len(), "messages: ours {:?}, nft's {:?}", kinds(&ours), kinds(&theirs));
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        // Our batch names nf_tables in every message's resource id (`wire::Batch`), `nft` in
        // the batch's begin marker only; the kernel reads it there only.
        assert_eq!(o.1.get(2..4), Some(&[0, 10][..]), "message {i}: our resource id");
        assert_eq!(t.1.get(2..4), Some(&[0, 0][..]), "message {i}: nft's resource id");
        let mut o = o.clone();
        o.1[2..4].fill(0);
        assert_eq!(&o, t, "message {i} (type {}) differs from nft's:\n{script}", t.0);
    }
}

fn kinds(messages: &[(u16, Vec<u8>)]) -> Vec<u16> {
    messages.iter().map(|m| m.0).collect()
}

#[test]
fn the_tracers_table_compiles_to_the_messages_nft_sends() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("compile-trace");
    for fam in ["ip", "ip6"] {
        let exact = tracers_table(fam, true);
        assert!(exact.contains("th sport 40000 th dport 80 ct state new limit rate 25/second burst 50 packets"));
        compare_with_nft(&ns, &exact);
        compare_with_nft(&ns, &every_combination(fam));
    }
}

/// `nft list ruleset` in `ns` while `script` is loaded there by our batch, sent on a socket
/// of its own (which owns the table when the script says `flags owner`).
fn listed_while_loaded(ns: &Netns, script: &str) -> String {
    in_netns(&ns.name, || {
        let mut batch = Batch::new();
        compile(script, &mut Schema::default(), &mut batch).expect("compile");
        let socket = Socket::open().expect("a netlink socket");
        socket.send_batch(&batch.finish()).unwrap_or_else(|e| panic!("the kernel refused our batch: {e}"));
        ns.nft(&["list", "ruleset"])
    })
}

/// A listing's chains: from the first chain's line on.
fn chains(listing: &str) -> &str {
    listing.find("\tchain ").map_or(listing, |at| &listing[at..])
}

#[test]
fn the_tracers_table_loaded_by_our_batch_lists_as_nft_loads_it() {
    if !kernel_available() {
        return;
    }
    let (ours, theirs) = (Netns::new("trace-ours"), Netns::new("trace-nft"));
    for (fam, script) in
        ["ip", "ip6"].into_iter().flat_map(|f| [(f, tracers_table(f, true)), (f, every_combination(f))])
    {
        // `nft -f` would take an owned table away with it when it exits: it loads the table
        // unowned, and so does our batch first.
        let unowned = script.replace("    flags owner\n", "");
        assert_ne!(unowned, script);
        theirs.nft(&["flush", "ruleset"]);
        theirs.nft_apply(&unowned).unwrap_or_else(|e| panic!("nft -f: {e}"));
        let want = theirs.nft(&["list", "ruleset"]);
        assert!(
            want.contains("meta nftrace set 1") && want.contains("limit rate 25/second burst 50 packets"),
            "{want}"
        );
        ours.nft(&["flush", "ruleset"]);
        assert_eq!(listed_while_loaded(&ours, &unowned), want, "{fam}: the table lists differently from nft's");
        ours.nft(&["flush", "ruleset"]);
        // Owned, `nft` lists the owner's name on the table's line (not `flags owner`), and
        // the same chains.
        let owned = listed_while_loaded(&ours, &script);
        let head = owned.lines().next().unwrap_or_default();
        assert!(head.starts_with(&format!("table {fam} {TABLE} {{ # progname ")), "{owned}");
        assert_eq!(chains(&owned), chains(&want), "{fam}: the owned table's chains");
        assert!(!ours.nft(&["list", "ruleset"]).contains(TABLE), "gone with the socket");
    }
}

/// Whether `ns` lists a table of the tracer's name, within two seconds of `want` becoming true.
fn listed_within(ns: &Netns, want: bool) -> bool {
    let started = Instant::now();
    loop {
        let listed = ns.nft(&["list", "tables"]).contains(TABLE);
        if listed == want || started.elapsed() > Duration::from_secs(2) {
            return listed;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_owned_table_goes_with_the_socket_that_sent_it() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("trace-owner");
    for owner in [true, false] {
        let script = tracers_table("ip", owner);
        in_netns(&ns.name, || {
            let mut batch = Batch::new();
            compile(&script, &mut Schema::default(), &mut batch).expect("compile");
            let socket = Socket::open().expect("a netlink socket");
            socket.send_batch(&batch.finish()).unwrap_or_else(|e| panic!("the kernel refused our batch: {e}"));
            assert!(listed_within(&ns, true), "loaded");
            if owner {
                // Another socket (here `nft`'s) may read the table but not change it.
                let deleted = ns.run(&["nft", "delete", "table", "ip", TABLE], "");
                assert!(!deleted.status.success(), "only its owner may delete it");
                assert!(String::from_utf8_lossy(&deleted.stderr).contains("Operation not permitted"));
            }
            drop(socket);
        });
        // The kernel removes an owned table as its socket closes; an unowned one stays.
        assert_eq!(listed_within(&ns, !owner), !owner, "owner {owner}");
    }
}
