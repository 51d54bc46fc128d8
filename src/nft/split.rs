//! A big partial sync cut into bounded transactions, as a packet sees it one generation or
//! the next: every change a packet to one frontend could meet goes in the same transaction.
//!
//! A packet's way through the tables reads elements keyed by one frontend only: a service
//! address (its `cluster-ips`, `service-ips`, `no-endpoint-services`, `firewall-*` and
//! endpoint-slot elements) or a node port (its `service-nodeports`, `no-endpoint-nodeports`
//! and slot elements), besides what belongs to the node (its addresses, the ServiceCIDRs,
//! the hairpin pairs, the round-robin turns). So the element changes are grouped by that
//! anchor and the groups packed whole into transactions of some thousands. New chains and
//! sets, and the dispatch's steps, go first; the node's additions too, so nothing a group
//! leads to is missing; stale chains, sets no longer used and the node's removals go last,
//! once nothing leads to them. The dispatch's steps change in the first transaction, before
//! the slots they test: the search finds the highest count in use that a frontend has slots
//! for, which it holds with its old slots as with its new ones, as long as the least count
//! in use has not risen. A sync in which it rises, or that rewrites any other chain packets
//! may be in, stays one transaction.

use super::diff::TableDiff;
use crate::render::{Key, MapName, Value, chain, dispatch_floors, is_dispatch_chain};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Element changes per transaction of a cut partial sync. A change to a big map costs the
/// kernel more than an addition to a new one (a deletion and an addition each, in a hash
/// table of 100k Services' slots): 16,384 of them kept another nftables user waiting up to
/// 65 ms at 100k Services; 8,192 keep it near 30 ms.
pub const CUT_CHANGES: usize = 8_192;

/// What a change is read with: the frontend (service address or node port) whose packets
/// meet it, or the node's own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Anchor {
    Node,
    Ip(IpAddr),
    Port(u16),
}

/// The anchor of `map`'s element `key`.
fn anchor(map: MapName, key: &Key) -> Anchor {
    match (map, key) {
        (MapName::NodeportIps | MapName::HairpinConnections | MapName::ServiceCidrs | MapName::Turns(_), _) => {
            Anchor::Node
        }
        (_, Key::IpProtoPort(ip, ..) | Key::Ip(ip) | Key::SamePair(ip) | Key::IpSlot(ip, ..)) => Anchor::Ip(*ip),
        (_, Key::Allow(a)) => Anchor::Ip(a.0),
        (_, Key::ProtoPort(_, port) | Key::PortSlot(port, _)) => Anchor::Port(*port),
        (_, Key::Turn(_) | Key::Cidr(_)) => Anchor::Node,
    }
}

/// Whether `d` may be cut: every chain it rewrites is new (nothing leads to it yet) or a step
/// of the dispatch, and the dispatch, if its entry changes, leads no frontend to fewer
/// endpoints than before (see `dispatch_keeps_floors`).
pub fn cuttable(d: &TableDiff<'_>) -> bool {
    let new: BTreeSet<&str> = d.new_chains.iter().copied().collect();
    d.rewrite.iter().filter(|(name, _)| !new.contains(name)).all(|(name, text)| match *name {
        chain::DISPATCH => d.dispatch_was.is_some_and(|was| dispatch_keeps_floors(was, text)),
        name => is_dispatch_chain(name),
    })
}

/// Whether the dispatch's entry `now` leads each endpoint map's frontends to a count no
/// higher than `was` did. The new steps go in the first transaction, so a frontend whose
/// slots a later one changes meets them with its old slots: the search finds the highest
/// count in use it has slots for, which exists only while the least count in use is no
/// higher than its own. (Every count a frontend had is at least the least count then.)
fn dispatch_keeps_floors(was: &str, now: &str) -> bool {
    let (was, now) = (dispatch_floors(was), dispatch_floors(now));
    was.iter().all(|(map, floor)| now.get(map).is_some_and(|n| n <= floor))
}

/// One element change: the table (index into the diffs), its anchor, and the value added
/// (`None`: the key deleted).
struct Op<'a> {
    table: usize,
    anchor: Anchor,
    map: MapName,
    key: &'a Key,
    add: Option<&'a Value>,
}

/// The element changes of `diffs` in stages of at most `budget` changes (a group bigger than
/// that alone), each stage one diff per table holding only elements. A key deleted and
/// added again stays in one stage, its deletion first. Stage 0 is sent with the head's new
/// chains and sets, the last with the tail (see the module's comment).
pub fn element_stages<'a>(diffs: &[TableDiff<'a>], budget: usize) -> Vec<Vec<TableDiff<'a>>> {
    let (mut ops, mut last) = (Vec::new(), Vec::new());
    for (table, d) in diffs.iter().enumerate() {
        let node_adds: BTreeSet<(MapName, &Key)> = (d.add_elements.iter())
            .flat_map(|(map, entries)| entries.iter().map(move |(key, _)| (*map, *key)))
            .filter(|(map, key)| anchor(*map, key) == Anchor::Node)
            .collect();
        for (map, keys) in &d.delete_elements {
            for key in keys {
                let op = Op { table, anchor: anchor(*map, key), map: *map, key, add: None };
                // The node's removals wait for the last stage; a changed value goes with its
                // addition, and a ServiceCIDR's range with the ranges added: an interval set
                // refuses a range overlapping one it holds (a /16 widened to its /12).
                if op.anchor == Anchor::Node && !node_adds.contains(&(*map, *key)) && *map != MapName::ServiceCidrs {
                    last.push(op)
                } else {
                    ops.push(op)
                }
            }
        }
        for (map, entries) in &d.add_elements {
            ops.extend(entries.iter().map(|(key, v)| Op {
                table,
                anchor: anchor(*map, key),
                map: *map,
                key,
                add: Some(*v),
            }));
        }
    }
    // Stable: within a group the deletions stay ahead of the additions.
    ops.sort_by_key(|op| (op.table, op.anchor));
    let mut stages: Vec<Vec<Op<'a>>> = vec![Vec::new()];
    let mut rest = ops.into_iter().peekable();
    while let Some(first) = rest.next() {
        let mut group = vec![first];
        while let Some(op) = rest.next_if(|op| (op.table, op.anchor) == (group[0].table, group[0].anchor)) {
            group.push(op);
        }
        add_group(&mut stages, group, budget);
    }
    add_group(&mut stages, last, budget);
    stages.into_iter().filter(|s| !s.is_empty()).map(|s| as_diffs(diffs, s)).collect()
}

/// Appends `group` to the last stage, or to a new one when it would pass `budget`.
fn add_group<'a>(stages: &mut Vec<Vec<Op<'a>>>, group: Vec<Op<'a>>, budget: usize) {
    let Some(current) = stages.last_mut() else { return };
    if !current.is_empty() && current.len() + group.len() > budget {
        stages.push(group);
    } else {
        current.extend(group);
    }
}

/// A stage's changes as one diff per table of `diffs`, in their order.
fn as_diffs<'a>(diffs: &[TableDiff<'a>], ops: Vec<Op<'a>>) -> Vec<TableDiff<'a>> {
    let mut out: Vec<TableDiff<'a>> = diffs.iter().map(|d| TableDiff { fam: d.fam, ..TableDiff::default() }).collect();
    for op in ops {
        let d = &mut out[op.table];
        match op.add {
            Some(v) => d.add_elements.entry(op.map).or_default().push((op.key, v)),
            None => d.delete_elements.entry(op.map).or_default().push(op.key),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use crate::render::Scope;
    use std::net::Ipv4Addr;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n))
    }

    /// Where each change went: (stage, map, key, added).
    fn placed<'a>(stages: &[Vec<TableDiff<'a>>]) -> Vec<(usize, MapName, &'a Key, bool)> {
        let mut out = Vec::new();
        for (i, stage) in stages.iter().enumerate() {
            for d in stage {
                out.extend(d.delete_elements.iter().flat_map(|(m, ks)| ks.iter().map(move |k| (i, *m, *k, false))));
                out.extend(d.add_elements.iter().flat_map(|(m, es)| es.iter().map(move |(k, _)| (i, *m, *k, true))));
            }
        }
        out
    }

    #[test]
    fn each_frontends_changes_go_whole_into_one_stage_the_nodes_removals_last() {
        let slots = MapName::Endpoints(Scope::Cluster, Protocol::Tcp, 0);
        // 40 frontends moving all three slots (a deletion and an addition each), a node port
        // doing the same, a node address coming and one going, a hairpin pair changing value.
        let keys: Vec<Key> = (0..40).flat_map(|f| (0..3).map(move |s| Key::IpSlot(ip(f), 80, s))).collect();
        let port: Vec<Key> = (0..3).map(|s| Key::PortSlot(30080, s)).collect();
        let (new_node, old_node, pair) = (Key::Ip(ip(900)), Key::Ip(ip(901)), Key::SamePair(ip(7)));
        let value = Value::None;
        let mut d = TableDiff { fam: "ip", ..TableDiff::default() };
        // Each slot in the part of the endpoint maps that holds it.
        let ports = MapName::NodeportEndpoints(Scope::Cluster, Protocol::Tcp, 0);
        for (map, k) in keys.iter().map(|k| (slots, k)).chain(port.iter().map(|k| (ports, k))) {
            d.delete_elements.entry(map.holding(k)).or_default().push(k);
            d.add_elements.entry(map.holding(k)).or_default().push((k, &value));
        }
        d.delete_elements.insert(MapName::NodeportIps, vec![&old_node]);
        d.add_elements.insert(MapName::NodeportIps, vec![(&new_node, &value)]);
        d.delete_elements.insert(MapName::HairpinConnections, vec![&pair]);
        d.add_elements.insert(MapName::HairpinConnections, vec![(&pair, &value)]);
        let diffs = [d];
        let stages = element_stages(&diffs, 50);
        let placed = placed(&stages);
        assert_eq!(placed.len(), diffs[0].element_count(), "every change once");
        assert!(stages.len() >= 6, "{} stages", stages.len());
        for stage in &stages {
            let n: usize = stage.iter().map(TableDiff::element_count).sum();
            assert!(n <= 50, "a stage of {n}");
        }
        let stage_of = |key: &Key, added: bool| placed.iter().find(|p| p.2 == key && p.3 == added).map(|p| p.0);
        for f in 0..40 {
            let mine: Vec<usize> =
                placed.iter().filter(|p| matches!(p.2, Key::IpSlot(a, ..) if *a == ip(f))).map(|p| p.0).collect();
            assert_eq!(mine.len(), 6);
            assert!(mine.iter().all(|s| *s == mine[0]), "frontend {f} cut across stages {mine:?}");
        }
        assert!(port.iter().all(|k| stage_of(k, false) == stage_of(&port[0], true)), "the node port is cut");
        assert_eq!(stage_of(&new_node, true), Some(0), "the node's additions come first");
        assert_eq!(stage_of(&pair, false), Some(0), "a changed value goes with its addition");
        assert_eq!(stage_of(&pair, true), Some(0));
        assert_eq!(stage_of(&old_node, false), Some(stages.len() - 1), "the node's removals come last");
        // Within a stage a key's deletion is sent before its addition (`element_ops` sends
        // each stage's deletions first).
        let first = &stages[0][0];
        assert!(first.delete_elements.contains_key(&MapName::HairpinConnections));
    }

    /// The dispatch's entry for `targets`, one rule per endpoint map, as `dispatch.nft`
    /// writes it.
    fn entry(targets: &[(&str, &str)]) -> String {
        let rule = |(map, to): &(&str, &str)| format!("ip daddr . tcp dport . numgen random mod 1 @{map} goto {to}\n");
        targets.iter().map(rule).collect()
    }

    #[test]
    fn the_dispatch_may_change_first_unless_the_least_count_in_use_rises() {
        let was =
            entry(&[("cluster-endpoints-tcp", "dispatch-cluster-tcp-2-7"), ("local-endpoints-tcp", "lb-local-tcp-1")]);
        let cut = |now: &str| {
            let mut d = TableDiff { fam: "ip", dispatch_was: Some(&was), ..TableDiff::default() };
            d.rewrite.push((chain::DISPATCH, now));
            cuttable(&d)
        };
        let lower =
            entry(&[("cluster-endpoints-tcp", "dispatch-cluster-tcp-1-9"), ("local-endpoints-tcp", "lb-local-tcp-1")]);
        assert!(cut(&lower), "counts added below and above");
        let single = entry(&[("cluster-endpoints-tcp", "lb-cluster-tcp-2"), ("local-endpoints-tcp", "lb-local-tcp-1")]);
        assert!(cut(&single), "the least count kept");
        let risen =
            entry(&[("cluster-endpoints-tcp", "dispatch-cluster-tcp-3-7"), ("local-endpoints-tcp", "lb-local-tcp-1")]);
        assert!(!cut(&risen), "frontends of 2 endpoints not yet moved would be led to 3");
        let gone = entry(&[("cluster-endpoints-tcp", "dispatch-cluster-tcp-2-7")]);
        assert!(!cut(&gone), "local frontends not yet moved would lose their entry");
        let mut unknown = TableDiff { fam: "ip", ..TableDiff::default() };
        unknown.rewrite.push((chain::DISPATCH, &lower));
        assert!(!cuttable(&unknown), "an entry rewritten from what the kernel held (a refresh) is not compared");
    }

    #[test]
    fn a_servicecidr_widened_goes_in_the_first_stage_with_its_removal() {
        let (old, new) =
            (Key::Cidr("10.96.0.0/16".parse().expect("cidr")), Key::Cidr("10.96.0.0/12".parse().expect("cidr")));
        let keys: Vec<Key> = (0..40).map(|f| Key::IpSlot(ip(f), 80, 0)).collect();
        let value = Value::None;
        let mut d = TableDiff { fam: "ip", ..TableDiff::default() };
        d.add_elements
            .insert(MapName::Endpoints(Scope::Cluster, Protocol::Tcp, 0), keys.iter().map(|k| (k, &value)).collect());
        d.delete_elements.insert(MapName::ServiceCidrs, vec![&old]);
        d.add_elements.insert(MapName::ServiceCidrs, vec![(&new, &value)]);
        let stages = element_stages(std::slice::from_ref(&d), 10);
        assert!(stages.len() >= 4);
        let first = &stages[0][0];
        assert_eq!(first.delete_elements.get(&MapName::ServiceCidrs), Some(&vec![&old]));
        assert!(first.add_elements.contains_key(&MapName::ServiceCidrs));
    }

    #[test]
    fn a_rewrite_of_a_chain_packets_may_be_in_keeps_the_sync_whole() {
        let body = "goto lb-cluster-tcp-3";
        let mut d = TableDiff { fam: "ip", ..TableDiff::default() };
        d.new_chains.push("svc-ns/a/tcp/80");
        d.rewrite.push(("svc-ns/a/tcp/80", body));
        d.rewrite.push(("dispatch-cluster-tcp-2-7", body));
        assert!(cuttable(&d), "new chains and the dispatch's steps");
        d.rewrite.push(("svc-ns/b/tcp/80", body));
        assert!(!cuttable(&d), "a chain in use");
    }
}
