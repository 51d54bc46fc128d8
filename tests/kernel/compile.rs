//! The in-process compiler against `nft` itself, for every golden case (and the schedulers'
//! endpoint picks in place of `numgen random`): each rule compiles to the expressions `nft`
//! 1.0.6 sends for the same text (`nft --debug=netlink`), and the kernel's tables after our
//! batch list exactly as after `nft -f` of the same script. `trace`: the packet tracer's
//! table, message by message against `nft`'s, and its owner flag.

mod trace;

use crate::common::net::in_netns;
use crate::common::{Netns, SCHEDULER_PICKS, golden_cases, kernel_available, with_pick};
use kube_nftproxy::netlink::send::Sender;
use kube_nftproxy::nft::compile::{Schema, compile, describe};
use kube_nftproxy::nft::wire::Batch;

/// `script` without its element commands (`add element … { … }` over one or more lines):
/// elements reach the kernel from the desired state, never through the compiler.
fn without_elements(script: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in script.lines() {
        if line.starts_with("add element ") {
            skipping = !line.trim_end().ends_with('}');
            continue;
        }
        if skipping {
            skipping = line.trim() != "}";
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The rule blocks of `nft --debug=netlink` output (anonymous sets' lines left out).
fn rule_blocks(debug: &str) -> String {
    let mut out = String::new();
    let mut in_rule = false;
    for line in debug.lines() {
        if line.starts_with("ip kube-nftproxy ") || line.starts_with("ip6 kube-nftproxy ") {
            in_rule = true;
        }
        if in_rule {
            out.push_str(line);
            out.push('\n');
        }
        if line.is_empty() {
            in_rule = false;
        }
    }
    out
}

/// Every golden case's script without elements, then those of the cases with both families,
/// node ports and three protocols with each scheduler's pick in the dnat rules.
fn scripts() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for case in golden_cases() {
        let script = without_elements(&std::fs::read_to_string(case.dir.join("expected.nft")).unwrap());
        if ["dual-stack", "clusterip"].contains(&case.name.as_str()) {
            for pick in SCHEDULER_PICKS {
                let picked = with_pick(&script, pick);
                let changed = picked.lines().zip(script.lines()).filter(|(a, b)| a != b).count();
                assert!(changed >= 2, "{}: few picks of {pick}:\n{picked}", case.name);
                out.push((format!("{} with {pick}", case.name), picked));
            }
        }
        out.push((case.name, script));
    }
    out
}

#[test]
fn every_golden_rule_compiles_to_the_expressions_nft_sends() {
    if !kernel_available() {
        return;
    }
    let ns = Netns::new("compile-dbg");
    let mut failed = Vec::new();
    let cases = scripts();
    assert!(cases.len() >= 35, "golden cases: {}", cases.len());
    for (name, script) in cases {
        let out = ns.run(&["nft", "--debug=netlink", "-c", "-f", "-"], &script);
        assert!(out.status.success(), "{name}: nft -c: {}", String::from_utf8_lossy(&out.stderr));
        let want = rule_blocks(&String::from_utf8_lossy(&out.stdout));
        let got = describe(&script).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(want.matches("\n\n").count() >= 20, "{name}: nft described too few rules:\n{want}");
        if got != want {
            let first = got.lines().zip(want.lines()).position(|(a, b)| a != b).unwrap_or(0);
            let around = |t: &str| t.lines().skip(first.saturating_sub(6)).take(12).collect::<Vec<_>>().join("\n");
            eprintln!("--- {name}: ours\n{}\n--- nft's\n{}", around(&got), around(&want));
            failed.push(name);
        }
    }
    assert!(failed.is_empty(), "rules compile differently from nft's: {failed:?}");
}

#[test]
fn every_golden_table_loaded_by_our_batch_lists_as_nft_loads_it() {
    if !kernel_available() {
        return;
    }
    let (ours, theirs) = (Netns::new("compile-ours"), Netns::new("compile-nft"));
    let mut failed = Vec::new();
    for (name, script) in scripts() {
        for ns in [&ours, &theirs] {
            ns.nft(&["flush", "ruleset"]);
        }
        theirs.nft_apply(&script).unwrap_or_else(|e| panic!("{name}: nft -f: {e}"));
        let sent = in_netns(&ours.name, || {
            let mut batch = Batch::new();
            compile(&script, &mut Schema::default(), &mut batch).map_err(|e| e.to_string())?;
            Sender::default().send(&batch.finish()).map_err(|e| e.to_string())
        });
        if let Err(e) = sent {
            eprintln!("--- {name}: the kernel refused our batch: {e}");
            failed.push(name);
            continue;
        }
        let (got, want) = (ours.nft(&["list", "ruleset"]), theirs.nft(&["list", "ruleset"]));
        assert!(want.contains("chain services {") && want.contains("map service-ips {"), "{name}: {want}");
        if got != want {
            eprintln!("--- {name}: ours\n{got}\n--- nft's\n{want}");
            failed.push(name);
        }
    }
    assert!(failed.is_empty(), "tables differ from nft's: {failed:?}");
}

#[test]
fn a_declared_size_loads_as_nft_loads_it() {
    if !kernel_available() {
        return;
    }
    // Maps of thousands of elements are declared with a size (`MapName::size_for`), which no
    // golden case is big enough for: one is given a size here, a plain map and a typeof one.
    let case = golden_cases().into_iter().find(|c| c.name == "affinity").expect("the affinity case");
    let script = without_elements(&std::fs::read_to_string(case.dir.join("expected.nft")).unwrap())
        .replace("inet_service : verdict\n", "inet_service : verdict\n\t\tsize 8192\n")
        .replace(": ip daddr . tcp dport\n", ": ip daddr . tcp dport\n\t\tsize 262144\n");
    assert!(script.matches("size 8192").count() >= 2 && script.contains("size 262144"), "{script}");
    let (ours, theirs) = (Netns::new("size-ours"), Netns::new("size-nft"));
    theirs.nft_apply(&script).unwrap_or_else(|e| panic!("nft -f: {e}"));
    in_netns(&ours.name, || {
        let mut batch = Batch::new();
        compile(&script, &mut Schema::default(), &mut batch).map_err(|e| e.to_string())?;
        Sender::default().send(&batch.finish()).map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| panic!("the kernel refused our batch: {e}"));
    let (got, want) = (ours.nft(&["list", "ruleset"]), theirs.nft(&["list", "ruleset"]));
    assert!(want.contains("size 8192") && want.contains("size 262144"), "{want}");
    assert_eq!(got, want, "a sized table lists differently from nft's");
}

#[test]
fn a_hash_or_a_counter_wherever_a_key_goes_compiles_as_nft_compiles_it() {
    if !kernel_available() {
        return;
    }
    // Outside a dnat no register is taken before the key: a hash's fields go right after a
    // concatenation, or after the 16-byte register of a value alone.
    let script = "table ip kube-nftproxy {
	set s {
		typeof ip daddr . numgen random mod 1
		flags dynamic
	}
	chain a {
	}
	chain c {
		ip daddr . jhash ip saddr mod 61 seed 0x6b6e7078 @s goto a
		jhash ip saddr . udp sport mod 2 seed 0x6b6e7078 vmap { 0 : goto a, 1 : goto a }
		update @s { ip daddr . jhash ip saddr . sctp sport mod 61 seed 7 offset 9 }
		jhash ip saddr mod 2 seed 7 == 1 accept
		numgen inc mod 2 vmap { 0 : goto a, 1 : goto a }
	}
}
";
    let ns = Netns::new("compile-hash");
    let out = ns.run(&["nft", "--debug=netlink", "-c", "-f", "-"], script);
    assert!(out.status.success(), "nft -c: {}", String::from_utf8_lossy(&out.stderr));
    let want = rule_blocks(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(want.matches("jhash(").count(), 4, "{want}");
    assert_eq!(describe(script).expect("compile"), want);
    let theirs = Netns::new("compile-hash-nft");
    theirs.nft_apply(script).unwrap_or_else(|e| panic!("nft -f: {e}"));
    in_netns(&ns.name, || {
        let mut batch = Batch::new();
        compile(script, &mut Schema::default(), &mut batch).map_err(|e| e.to_string())?;
        Sender::default().send(&batch.finish()).map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| panic!("the kernel refused our batch: {e}"));
    let (got, want) = (ns.nft(&["list", "ruleset"]), theirs.nft(&["list", "ruleset"]));
    assert!(want.contains("jhash ip saddr . sctp sport mod 61 seed 0x7 offset 9"), "{want}");
    assert_eq!(got, want, "the table lists differently from nft's");
}
