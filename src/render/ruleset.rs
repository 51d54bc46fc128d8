//! The desired state of one node's tables as data: chains with their rule text, affinity sets, and map elements.
//!
//! Rendering fills a `Ruleset`; scripts (full now, partial later) are written from it by the
//! templates, and two rulesets can be compared to find what changed.

use super::key::Key;
use super::maps::MapName;
use crate::model::Family;
use std::collections::{BTreeMap, btree_map};
use std::net::IpAddr;
use std::sync::Arc;

/// What a map element maps to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// Set element: no value.
    None,
    /// `goto chain`.
    Goto(String),
    /// `goto chain` to a chain shared by many services, with the service it belongs to as
    /// element comment (so `nft list` still tells whose frontend it is).
    Dispatch(Arc<str>, Arc<str>),
    /// `drop`, with the service it belongs to as element comment.
    Drop(Arc<str>),
    /// `goto reject-chain`, with the service it belongs to as element comment.
    Reject(Arc<str>),
    /// `ip . port`: a DNAT destination. A frontend's slot 0 names its service port in the
    /// element's comment, as a `service-ips` element would: a ClusterIP found by its
    /// endpoint count has none (`render::dispatch`), and `trace` and `nft list` name it so.
    Endpoint(IpAddr, u16, Option<Arc<str>>),
}

/// One element, the service port that put it there (for conflict messages), and how many
/// service ports put it there (a ClusterIP shared by a Service's ports is one element).
#[derive(Debug, Clone)]
pub struct Entry {
    /// Element value.
    pub value: Value,
    /// `namespace/name:port` of the first owner (shared by all of a service port's elements).
    pub owner: Arc<str>,
    /// Service ports holding the element; it leaves the table when the last one lets go.
    pub refs: u32,
}

/// Entries are equal when they hold the same value for as many ports. The owner is left out:
/// it names whoever added a shared element first, and stays when that port lets go while
/// others still hold it (only exclusive elements, whose owner is exact, appear in conflicts).
impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.value == other.value && self.refs == other.refs
    }
}

impl Eq for Entry {}

/// What `Table::insert` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inserted {
    /// The element is new.
    New,
    /// Another service port had added the same element; it is now shared.
    Shared,
    /// Another service port holds the key with a different value, which is kept.
    Refused {
        /// Who holds it.
        first: Arc<str>,
    },
}

/// Settings the fixed part of a table (base chains, `services`, `masquerading`) is written from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    /// The masquerade mark.
    pub mark: u32,
    /// How traffic from this node's pods is told apart.
    pub local: super::Detector,
    /// NodePorts are served on every local address rather than on `@nodeport-ips`.
    pub nodeport_all: bool,
    /// Traffic to an address of the ServiceCIDRs that no Service holds is dropped; not beside
    /// kube-proxy (`--service-proxy-name`), where such an address may be one of its Services'.
    pub drop_unallocated: bool,
    /// Some service port takes turns (`rr`), so the `turns-*` maps are declared: a table
    /// without one is spared their empty declarations, and a change of this is a full sync.
    pub turns: bool,
}

/// Nothing set: no mark, no detector, NodePorts on `@nodeport-ips`, no ServiceCIDR drop, no
/// turns (a table read back for its elements alone, whose fixed part is not compared).
impl Default for Fixed {
    fn default() -> Fixed {
        Fixed { mark: 0, local: super::Detector::None, nodeport_all: false, drop_unallocated: false, turns: false }
    }
}

/// A session-affinity group (one scope of a service port) as its entries name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AffinityGroup {
    /// Its id (`names::affinity_id`).
    pub id: u32,
    /// Its endpoints' numbers (`names::endpoint_index`); an entry with another is stale.
    pub endpoints: Vec<u32>,
}

/// Desired state of one family's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Address family.
    pub family: Family,
    /// Settings of the fixed part.
    pub fixed: Fixed,
    /// Service, external, balancing, endpoint and `lb-` chains: name → rule lines.
    pub chains: BTreeMap<String, String>,
    /// Session-affinity sets in use (entries of client address . number of group and
    /// endpoint): name → the groups whose entries it holds, sorted.
    pub affinity_maps: BTreeMap<String, Vec<AffinityGroup>>,
    /// Elements of the named sets and maps.
    pub elements: BTreeMap<MapName, BTreeMap<Key, Entry>>,
    /// What rendering had to leave out, and why (for the caller to report).
    pub warnings: Vec<String>,
}

impl Table {
    /// An empty table of a family.
    pub fn new(family: Family, fixed: Fixed) -> Table {
        Table {
            family,
            fixed,
            chains: BTreeMap::new(),
            affinity_maps: BTreeMap::new(),
            elements: BTreeMap::new(),
            warnings: Vec::new(),
        }
    }

    /// Adds an element. If another service port already holds the key with a different value,
    /// the first one is kept (the caller warns), so one bad Service cannot break the rest.
    pub fn insert(&mut self, map: MapName, key: Key, value: Value, owner: &Arc<str>) -> Inserted {
        // One search of the map (an entry), not a lookup and then an insert: this is most of
        // a full render's time.
        match self.elements.entry(map).or_default().entry(key) {
            btree_map::Entry::Vacant(v) => {
                v.insert(Entry { value, owner: Arc::clone(owner), refs: 1 });
                Inserted::New
            }
            btree_map::Entry::Occupied(mut o) if o.get().value == value => {
                o.get_mut().refs += 1;
                Inserted::Shared
            }
            btree_map::Entry::Occupied(o) => Inserted::Refused { first: o.get().owner.clone() },
        }
    }

    /// Lets go of one holder's element; true when it left the table.
    pub fn release(&mut self, map: MapName, key: &Key) -> bool {
        let Some(entries) = self.elements.get_mut(&map) else { return false };
        let Some(e) = entries.get_mut(key) else { return false };
        e.refs = e.refs.saturating_sub(1);
        if e.refs > 0 {
            return false;
        }
        entries.remove(key);
        if entries.is_empty() {
            self.elements.remove(&map);
        }
        true
    }

    /// Whether the table declares chain `name` (fixed or rendered).
    pub fn declares_chain(&self, name: &str) -> bool {
        super::chain::ALL.contains(&name) || self.chains.contains_key(name)
    }

    /// Whether the table declares set or map `name`.
    pub fn declares_set(&self, name: &str) -> bool {
        self.affinity_maps.contains_key(name) || MapName::all().iter().any(|m| m.to_string() == name)
    }

    /// The size map `map` is declared with at a full sync (see `MapName::size_for`).
    pub fn declared_size(&self, map: MapName) -> Option<u32> {
        map.size_for(self.elements.get(&map).map_or(0, BTreeMap::len))
    }

    /// The value an element has, if it is in the table.
    pub fn value(&self, map: MapName, key: &Key) -> Option<&Value> {
        self.elements.get(&map)?.get(key).map(|e| &e.value)
    }
}

/// A map without elements, for a table that lacks one.
static NO_ELEMENTS: BTreeMap<Key, Entry> = BTreeMap::new();

/// One element that differs between two tables: its map, its key, and its value in each
/// (`None`: absent).
pub type ElementChange<'a> = (MapName, &'a Key, Option<&'a Value>, Option<&'a Value>);

/// Every element whose value differs between `old` and `new`, map by map in key order. Both
/// maps are walked side by side, once: at 30k Services a rebuild compares 216,000 elements.
pub fn element_changes<'a>(old: &'a Table, new: &'a Table) -> Vec<ElementChange<'a>> {
    let maps: std::collections::BTreeSet<MapName> = old.elements.keys().chain(new.elements.keys()).copied().collect();
    let mut out = Vec::new();
    for map in maps {
        let mut before = old.elements.get(&map).unwrap_or(&NO_ELEMENTS).iter().peekable();
        let mut after = new.elements.get(&map).unwrap_or(&NO_ELEMENTS).iter().peekable();
        loop {
            let order = match (before.peek(), after.peek()) {
                (None, None) => break,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some((a, _)), Some((b, _))) => a.cmp(b),
            };
            match order {
                std::cmp::Ordering::Less => {
                    let Some((key, e)) = before.next() else { break };
                    out.push((map, key, Some(&e.value), None));
                }
                std::cmp::Ordering::Greater => {
                    let Some((key, e)) = after.next() else { break };
                    out.push((map, key, None, Some(&e.value)));
                }
                std::cmp::Ordering::Equal => {
                    let (Some((_, a)), Some((key, b))) = (before.next(), after.next()) else { break };
                    if a.value != b.value {
                        out.push((map, key, Some(&a.value), Some(&b.value)));
                    }
                }
            }
        }
    }
    out
}

/// The desired state of the node: one table per family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    /// Tables, IPv4 first.
    pub tables: Vec<Table>,
}

impl Ruleset {
    /// How many set and map elements the tables hold.
    pub fn element_count(&self) -> usize {
        self.tables.iter().flat_map(|t| t.elements.values()).map(BTreeMap::len).sum()
    }

    /// Everything rendering left out, with the reason, in table order.
    pub fn warnings(&self) -> impl Iterator<Item = &String> {
        self.tables.iter().flat_map(|t| t.warnings.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use crate::render::Scope;
    use std::net::Ipv4Addr;

    fn table(elements: &[(MapName, u8, Option<u16>)]) -> Table {
        let fixed = Fixed {
            mark: 0x4000,
            local: super::super::Detector::None,
            nodeport_all: true,
            drop_unallocated: true,
            turns: false,
        };
        let mut t = Table::new(Family::V4, fixed);
        let owner: Arc<str> = Arc::from("ns/svc:p");
        for (map, last, port) in elements {
            let key = Key::Ip(Ipv4Addr::new(10, 0, 0, *last).into());
            let value = port.map_or(Value::None, |p| Value::Endpoint(Ipv4Addr::new(10, 1, 0, 1).into(), p, None));
            t.insert(*map, key, value, &owner);
        }
        t
    }

    #[test]
    fn element_changes_are_what_differs_map_by_map_in_key_order() {
        let eps = MapName::Endpoints(Scope::Cluster, Protocol::Tcp, 0);
        let old = table(&[
            (MapName::ClusterIps, 1, None),
            (MapName::ClusterIps, 2, None),
            (eps, 1, Some(80)),
            (eps, 2, Some(80)),
            (MapName::NodeportIps, 9, None),
        ]);
        let new = table(&[
            (MapName::ClusterIps, 2, None),
            (MapName::ClusterIps, 3, None),
            (eps, 1, Some(80)),
            (eps, 2, Some(81)),
            (MapName::HairpinConnections, 4, None),
        ]);
        let got: Vec<(MapName, String, Option<&Value>, Option<&Value>)> =
            element_changes(&old, &new).into_iter().map(|(m, k, a, b)| (m, format!("{k:?}"), a, b)).collect();
        // The same found the slow way: every key of either table, looked up in both.
        let mut want = Vec::new();
        let maps: std::collections::BTreeSet<&MapName> = old.elements.keys().chain(new.elements.keys()).collect();
        for map in maps {
            let keys: std::collections::BTreeSet<&Key> =
                [&old, &new].into_iter().filter_map(|t| t.elements.get(map)).flat_map(|m| m.keys()).collect();
            for key in keys {
                let (a, b) = (old.value(*map, key), new.value(*map, key));
                if a != b {
                    want.push((*map, format!("{key:?}"), a, b));
                }
            }
        }
        assert_eq!(got, want);
        assert_eq!(got.len(), 5, "{got:?}");
        assert!(element_changes(&new, &new).is_empty());
    }
}
