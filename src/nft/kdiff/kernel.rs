//! Reading one family's table of the proxy from the kernel over netlink: chains with their
//! hooks and rules (read back into the compiler's terms), named set declarations, and the
//! elements of the proxy's maps. Affinity sets' entries are the packet path's, not a sync's:
//! they are not read. Nothing is written.

use super::chains::{KernelChain, anon_name};
use crate::model::Family;
use crate::netlink::abi::NFT_SET_ANONYMOUS;
use crate::netlink::elements::Element;
use crate::netlink::{ListedExpr, NfFamily, RuleListing, SetSpec, Socket};
use crate::nft::compile::{Expr, ReadExpr, read_back};
use crate::render::{MapName, TABLE_NAME};
use std::collections::{BTreeMap, HashMap};
use std::io;

/// One family's table as the kernel holds it.
#[derive(Debug, Clone, Default)]
pub(crate) struct KernelTable {
    /// Chains by name.
    pub chains: BTreeMap<String, KernelChain>,
    /// Named sets and maps by name.
    pub sets: BTreeMap<String, SetSpec>,
    /// The elements of the proxy's maps that the kernel holds.
    pub maps: BTreeMap<MapName, Vec<Element>>,
}

/// Reads `family`'s table; `None` when there is none.
pub(crate) fn read(sock: &mut Socket, family: Family) -> io::Result<Option<KernelTable>> {
    read_with(sock, family, true)
}

/// As [`read`], the maps' elements only when `elements` says so (a dump of a big map costs the
/// kernel time that grows with its square: it walks the map from the start for every message).
pub(crate) fn read_with(sock: &mut Socket, family: Family, elements: bool) -> io::Result<Option<KernelTable>> {
    let fam = NfFamily::from(family);
    if !sock.table_exists(fam, TABLE_NAME)? {
        return Ok(None);
    }
    let mut table = KernelTable::default();
    for c in sock.chain_listings(fam, TABLE_NAME)? {
        table.chains.insert(c.name, KernelChain { hook: c.hook, rules: Vec::new() });
    }
    let anon = anon_names(sock, fam, &mut table.sets)?;
    for rule in sock.rule_listings(fam, TABLE_NAME)? {
        let Some(chain) = table.chains.get_mut(&rule.chain) else { continue };
        chain.rules.push(rule_exprs(&rule, &anon));
    }
    for map in MapName::all().into_iter().filter(|_| elements) {
        let name = map.to_string();
        if table.sets.contains_key(&name) {
            table.maps.insert(map, sock.elements(fam, TABLE_NAME, &name)?);
        }
    }
    Ok(Some(table))
}

/// The names the anonymous sets of `fam`'s table are compared by (their elements), by their
/// kernel names; the named sets' declarations go into `named`.
pub(super) fn anon_names(
    sock: &mut Socket,
    fam: NfFamily,
    named: &mut BTreeMap<String, SetSpec>,
) -> io::Result<HashMap<String, String>> {
    let mut anon = HashMap::new();
    for s in sock.set_listings(fam, TABLE_NAME)? {
        if s.flags & NFT_SET_ANONYMOUS != 0 {
            let elements = sock.elements(fam, TABLE_NAME, &s.name)?;
            anon.insert(s.name, anon_name(elements.into_iter().map(|e| (e.key, e.flags, e.data)).collect()));
        } else {
            named.insert(s.name.clone(), s);
        }
    }
    Ok(anon)
}

/// A kernel rule read back into the compiler's terms, its anonymous sets named by `anon`.
pub(super) fn rule_exprs(rule: &RuleListing, anon: &HashMap<String, String>) -> Vec<ReadExpr> {
    let mut exprs: Vec<ReadExpr> = rule.exprs.iter().map(|e| renamed(read_back(e), anon)).collect();
    if rule.userdata {
        // No rule of the proxy's has a comment: one that does is someone else's.
        exprs.push(ReadExpr::Other(ListedExpr { name: "comment".into(), data: Vec::new() }));
    }
    exprs
}

/// A lookup of an anonymous set, named by its elements as the desired rules name theirs.
fn renamed(e: ReadExpr, anon: &HashMap<String, String>) -> ReadExpr {
    match e {
        ReadExpr::Known(Expr::Lookup { sreg, set, set_id, dreg, invert }) => {
            let set = anon.get(&set).cloned().unwrap_or(set);
            ReadExpr::Known(Expr::Lookup { sreg, set, set_id, dreg, invert })
        }
        other => other,
    }
}
