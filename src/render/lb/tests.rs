//! The `lb-*` chains' rules followed as the kernel would: every slot taken evenly at random,
//! exactly the slot of the client's hash, each from the part of the endpoint maps holding it.

use super::*;
use crate::model::Protocol;
use crate::render::maps::{Scope, part};

fn words() -> FamilyWords {
    FamilyWords { fam: "ip", addr_type: "ipv4_addr", loopback: "127.0.0.0/8" }
}

fn chain(n: usize, pick: Pick) -> Vec<String> {
    let key = LbKey { scope: Scope::Cluster, nodeport: false, proto: Protocol::Tcp, n, pick };
    lb_chain(words(), key).expect("render").lines().map(str::to_string).collect()
}

/// A rule's test (`None`: none), the slots its pick may give (`Err`: the client's hash), and
/// the part of the endpoint maps it reads.
struct Rule {
    guard: Option<Guard>,
    pick: Result<Vec<usize>, ()>,
    part: u8,
}

enum Guard {
    /// `numgen random mod R == 0`: one chance in R.
    OneIn(usize),
    /// `jhash … == K`.
    Hash(usize),
}

fn number(text: &str, after: &str) -> usize {
    let rest = text.split_once(after).map(|(_, r)| r).unwrap_or_else(|| panic!("{after:?} in {text:?}"));
    rest.split_whitespace().next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("a number in {text:?}"))
}

fn parse(line: &str) -> Rule {
    let (head, map) = line.split_once(" map @").expect("a dnat through a map");
    let part = map.rsplit('-').next().and_then(|p| p.parse().ok()).expect("a part");
    let (guard, dnat) = head.split_once("dnat ").expect("a dnat");
    let guard = match guard.trim() {
        "" => None,
        g if g.starts_with("numgen random mod ") && g.ends_with("== 0") => Some(Guard::OneIn(number(g, "mod "))),
        g if g.starts_with("jhash ") => Some(Guard::Hash(number(g, "== "))),
        g => panic!("a test {g:?}"),
    };
    let pick = dnat.split_once("tcp dport . ").expect("the frontend").1;
    let pick = if pick.starts_with("jhash ") {
        Err(())
    } else {
        let (modulus, offset) =
            (number(pick, "mod "), if pick.contains(" offset ") { number(pick, "offset ") } else { 0 });
        Ok((offset..offset + modulus).collect())
    };
    Rule { guard, pick, part }
}

#[test]
fn at_random_every_slot_has_the_same_chance_read_from_its_part() {
    for n in 1..=9 {
        let mut chance = vec![0.0; n];
        let mut left = 1.0;
        for rule in chain(n, Pick::Random).iter().map(|l| parse(l)) {
            let taken = match rule.guard {
                Some(Guard::OneIn(r)) => left / r as f64,
                None => left,
                Some(Guard::Hash(_)) => panic!("a hash in a random chain"),
            };
            left -= taken;
            let slots = rule.pick.expect("a random pick");
            for &s in &slots {
                assert_eq!(part(s), rule.part, "n = {n}: slot {s} read from part {}", rule.part);
                chance[s] += taken / slots.len() as f64;
            }
        }
        assert!(left.abs() < 1e-12, "n = {n}: {left} of the connections pick nothing");
        assert!(chance.iter().all(|c| (c - 1.0 / n as f64).abs() < 1e-12), "n = {n}: {chance:?}");
    }
}

#[test]
fn by_hash_each_client_gets_the_slot_of_its_hash_read_from_its_part() {
    for n in 1..=9 {
        let rules: Vec<Rule> = chain(n, Pick::Hash { port: false }).iter().map(|l| parse(l)).collect();
        for h in 0..n {
            let rule = rules.iter().find(|r| !matches!(r.guard, Some(Guard::Hash(k)) if k != h)).expect("a rule");
            let slot = match &rule.pick {
                Err(()) => h,
                Ok(slots) => {
                    assert_eq!(slots.len(), 1, "n = {n}: a random pick in a hash chain");
                    slots[0]
                }
            };
            assert_eq!(slot, h, "n = {n}: hash {h}");
            assert_eq!(part(slot), rule.part, "n = {n}: slot {slot} read from part {}", rule.part);
        }
    }
}

#[test]
fn a_fixed_slot_is_read_from_its_part() {
    for slot in 0..7 {
        let rules = chain(slot, Pick::Slot);
        assert_eq!(rules.len(), 1, "{rules:?}");
        let rule = parse(&rules[0]);
        assert!(rule.guard.is_none());
        assert_eq!((rule.pick, rule.part), (Ok(vec![slot]), part(slot)), "{rules:?}");
    }
}
