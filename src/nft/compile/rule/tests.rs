//! Rules compiled to the expressions `nft` 1.0.6 sends for the same text, as its
//! `--debug=netlink` printed them (the kernel tests hold the same against `nft` itself): the
//! packet tracer's forms (ports of any transport header, a protocol set, rate limits, the
//! trace flag) and the merge of adjacent header matches.

use crate::nft::compile::describe;

/// `rule` in chain `c` of table `ip x`, described; its expressions without the heading.
fn ip(rule: &str) -> String {
    let script = format!("table ip x {{\n chain c {{\n  {rule}\n }}\n}}\n");
    let text = describe(&script).unwrap_or_else(|e| panic!("{rule}: {e}"));
    text.lines().filter(|l| l.starts_with("  ")).map(|l| format!("{}\n", l.trim())).collect()
}

fn refused(rule: &str) -> String {
    let script = format!("table ip x {{\n chain c {{\n  {rule}\n }}\n}}\n");
    describe(&script).expect_err(rule).to_string()
}

const LIMIT_AND_TRACE: &str = "[ limit rate 25/second burst 50 type packets flags 0x0 ]
[ immediate reg 1 0x00000001 ]
[ meta set nftrace with reg 1 ]
";

#[test]
fn the_tracers_rule_compiles_as_nft_compiles_it() {
    let rule = "ip saddr 10.0.0.1 ip daddr 10.96.0.5 meta l4proto tcp th sport 40000 th dport 80 ct state new \
                limit rate 25/second burst 50 packets meta nftrace set 1";
    let want = "[ payload load 4b @ network header + 12 => reg 1 ]
[ cmp eq reg 1 0x0100000a ]
[ payload load 4b @ network header + 16 => reg 1 ]
[ cmp eq reg 1 0x0500600a ]
[ meta load l4proto => reg 1 ]
[ cmp eq reg 1 0x00000006 ]
[ payload load 4b @ transport header + 0 => reg 1 ]
[ cmp eq reg 1 0x5000409c ]
[ ct load state => reg 1 ]
[ bitwise reg 1 = ( reg 1 & 0x00000008 ) ^ 0x00000000 ]
[ cmp neq reg 1 0x00000000 ]
";
    assert_eq!(ip(rule), format!("{want}{LIMIT_AND_TRACE}"));
    let six =
        "table ip6 x {\n chain c {\n  ip6 saddr fd00::1 ip6 daddr fd00:96::5 th dport 80 meta nftrace set 1\n }\n}\n";
    let want = "ip6 x c
  [ payload load 16b @ network header + 8 => reg 1 ]
  [ cmp eq reg 1 0x000000fd 0x00000000 0x00000000 0x01000000 ]
  [ payload load 16b @ network header + 24 => reg 1 ]
  [ cmp eq reg 1 0x960000fd 0x00000000 0x00000000 0x05000000 ]
  [ payload load 2b @ transport header + 2 => reg 1 ]
  [ cmp eq reg 1 0x00005000 ]
  [ immediate reg 1 0x00000001 ]
  [ meta set nftrace with reg 1 ]

";
    assert_eq!(describe(six).expect("ip6"), want);
}

#[test]
fn a_protocol_set_is_a_constant_set_of_its_values_in_the_order_written() {
    let rule = "meta l4proto { udp, tcp, sctp } ct state new limit rate 25/second burst 50 packets meta nftrace set 1";
    let want = "[ meta load l4proto => reg 1 ]
[ lookup reg 1 set __set%d ]
[ ct load state => reg 1 ]
[ bitwise reg 1 = ( reg 1 & 0x00000008 ) ^ 0x00000000 ]
[ cmp neq reg 1 0x00000000 ]
";
    assert_eq!(ip(rule), format!("{want}{LIMIT_AND_TRACE}"));
    let tokens: Vec<_> = super::super::lex::tokens("meta l4proto { udp, tcp, sctp }")
        .expect("tokens")
        .into_iter()
        .map(|t| t.0)
        .filter(|t| *t != super::Token::End)
        .collect();
    let compiled = super::compile(&tokens, crate::model::Family::V4, &mut super::Schema::default()).expect("compile");
    let [set] = compiled.anon.as_slice() else { panic!("one set: {:?}", compiled.anon) };
    let keys: Vec<&[u8]> = set.elements.iter().map(|e| e.0.as_slice()).collect();
    assert_eq!(keys, [[17], [6], [132]]);
    assert_eq!((set.spec.flags, set.spec.key, set.spec.size), (3, (12, 1), Some(3)), "anonymous, constant");
    // The key's byte order (host) and its `typeof`: the meta key l4proto.
    assert_eq!(set.spec.udata, [0, 4, 1, 0, 0, 0, 3, 14, 0, 4, 9, 0, 0, 0, 1, 6, 0, 4, 16, 0, 0, 0]);
    assert!(refused("th dport { 80, 443 } accept").contains("anonymous set"), "no `typeof` record for th");
}

#[test]
fn a_limit_takes_its_rate_unit_burst_and_mode_as_nft_does() {
    assert_eq!(
        ip("limit rate 25/minute accept"),
        "[ limit rate 25/minute burst 5 type packets flags 0x0 ]\n[ immediate reg 0 accept ]\n"
    );
    assert_eq!(
        ip("limit rate over 25/hour burst 1 packets"),
        "[ limit rate 25/hour burst 1 type packets flags 0x1 ]\n"
    );
    assert_eq!(ip("limit rate 2/day"), "[ limit rate 2/day burst 5 type packets flags 0x0 ]\n");
    assert_eq!(ip("limit rate 2/week"), "[ limit rate 2/week burst 5 type packets flags 0x0 ]\n");
    for bad in [
        "limit rate 25/fortnight",
        "limit rate 25",
        "limit rate 25/second burst 0 packets",
        "limit rate 25/second burst 5 bytes",
        "limit rate 10 mbytes/second",
        "limit 25/second",
        "limit rate until 2/day",
    ] {
        refused(bad);
    }
}

#[test]
fn the_trace_flag_is_set_from_one_byte() {
    assert_eq!(ip("meta nftrace set 0"), "[ immediate reg 1 0x00000000 ]\n[ meta set nftrace with reg 1 ]\n");
    assert!(refused("meta nftrace set 2").contains("nftrace"));
}

#[test]
fn adjacent_port_matches_merge_as_nft_merges_them() {
    let ports = |data: &str, op: &str| {
        format!("[ payload load 4b @ transport header + 0 => reg 1 ]\n[ cmp {op} reg 1 {data} ]\n")
    };
    let accept = "[ immediate reg 0 accept ]\n";
    assert_eq!(ip("th dport 80 th sport 40000 accept"), ports("0x5000409c", "eq") + accept);
    assert_eq!(ip("th sport != 1 th dport != 2 accept"), ports("0x02000100", "neq") + accept);
    // Equal and not equal do not merge.
    assert_eq!(
        ip("th sport 1 th dport != 2"),
        "[ payload load 2b @ transport header + 0 => reg 1 ]\n[ cmp eq reg 1 0x00000100 ]\n\
         [ payload load 2b @ transport header + 2 => reg 1 ]\n[ cmp neq reg 1 0x00000200 ]\n"
    );
    // A lone match before another statement still merges with one after it, in its place.
    let limit = "[ limit rate 1/second burst 5 type packets flags 0x0 ]\n";
    assert_eq!(ip("th sport 1 limit rate 1/second th dport 2 accept"), ports("0x02000100", "eq") + limit + accept);
    // The merged match takes the place of the lower field's, after the match between.
    let ct = "[ ct load state => reg 1 ]\n[ bitwise reg 1 = ( reg 1 & 0x00000008 ) ^ 0x00000000 ]\n\
              [ cmp neq reg 1 0x00000000 ]\n";
    assert_eq!(ip("th dport 80 ct state new th sport 4 accept"), format!("{ct}{}{accept}", ports("0x50000400", "eq")));
    let proto = "[ meta load l4proto => reg 1 ]\n[ cmp eq reg 1 0x00000006 ]\n";
    assert_eq!(ip("tcp sport 1 tcp dport 2 accept"), format!("{proto}{}{accept}", ports("0x02000100", "eq")));
    // Two addresses are eight bytes: two loads, each on the kernel's fast path.
    let addrs = ip("ip daddr 10.0.0.1 ip saddr 10.0.0.2 th dport 3 accept");
    assert_eq!(addrs.matches("payload load 4b @ network").count(), 2, "{addrs}");
    // Two full runs, each merged before the statement that ends it.
    let twice = ip("th sport 1 th dport 2 limit rate 1/second th sport 3 th dport 4");
    assert_eq!(twice, ports("0x02000100", "eq") + limit + &ports("0x04000300", "eq"));
}
