//! The sizes our hash maps are declared with, and their growth: a partial sync that would
//! take a map past its size declares it again larger in its first transaction (the kernel
//! raises the limit and keeps the map, its elements and its hash table), up to four times
//! the size its table was built for; past that, or on a kernel that cannot raise a limit, the
//! map is rehashed first (`rehash`: a table built anew, in short transactions). A map never
//! shrinks: a larger limit costs nothing.

use super::kdiff::KernelTable;
use crate::model::Family;
use crate::netlink::SetSpec;
use crate::netlink::abi::NFTNL_UDATA_SET_COMMENT;
use crate::netlink::{attr, udata};
use crate::render::{MapName, Ruleset, Table, built_for, with_built_for, without_built_for};
use std::collections::BTreeMap;

/// How far past the size its hash table was built for a map grows in place. The kernel keeps
/// the buckets it gave the map when it was declared (4/3 of that size), so at this bound a
/// lookup walks chains of three elements on average; past it, the map is rehashed.
pub const GROW_IN_PLACE: u32 = 4;

/// A map to declare larger, by family: its new size.
pub(super) type Growth = (Family, MapName, u32);

/// The maps a sync takes past the sizes they are declared with.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Growths {
    /// Declared larger in place, in the sync's first transaction.
    pub(super) in_place: Vec<Growth>,
    /// Rehashed before the sync: past `GROW_IN_PLACE` times what their table was built for
    /// (or built for a size nobody noted), or on a kernel that cannot raise a limit.
    pub(super) rehash: Vec<Growth>,
}

impl Growths {
    fn add(&mut self, sizes: &Sizes, growth: Growth, built: Option<u32>) {
        if sizes.may_grow(growth.2, built) { self.in_place.push(growth) } else { self.rehash.push(growth) }
    }
}

/// A sized map as the kernel holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MapSize {
    /// The limit it was last declared with.
    declared: u32,
    /// The size its hash table was built for, when this process declared it; `None` for a
    /// map found in tables an earlier run left (which may have grown in place already).
    built: Option<u32>,
}

/// The sized maps of our tables (a map declared without a size, the kernel's resizable hash,
/// has no limit and is not here), and whether the kernel can raise a size in place.
#[derive(Debug)]
pub(super) struct Sizes {
    maps: BTreeMap<(Family, MapName), MapSize>,
    /// The kernel raises a set's size in place (Linux 6.5 and later).
    pub(super) in_place: bool,
}

impl Default for Sizes {
    fn default() -> Sizes {
        Sizes { maps: BTreeMap::new(), in_place: true }
    }
}

impl Sizes {
    /// Whether a map whose table was built for `built` may be declared `want` in place.
    fn may_grow(&self, want: u32, built: Option<u32>) -> bool {
        self.in_place && built.is_some_and(|b| want <= b.saturating_mul(GROW_IN_PLACE))
    }

    /// The maps of table `t` that `held` (the kernel's, read by a refresh) declares smaller
    /// than `t` needs, with their new sizes.
    pub(super) fn growth_found(&self, t: &Table, held: &KernelTable) -> Growths {
        let mut grow = Growths::default();
        for map in MapName::all() {
            let Some(spec) = held.sets.get(&map.to_string()) else { continue };
            let (Some(want), Some(have)) = (t.declared_size(map), spec.as_sent().size) else { continue };
            if want > have {
                grow.add(self, (t.family, map, want), built_of(spec));
            }
        }
        grow
    }

    /// A full sync declared the maps of `desired`'s tables of `scope` anew, each with the size
    /// its elements call for.
    pub(super) fn built(&mut self, desired: &Ruleset, scope: &[Family]) {
        self.maps.retain(|(f, _), _| !scope.contains(f));
        for t in desired.tables.iter().filter(|t| scope.contains(&t.family)) {
            for map in MapName::all() {
                if let Some(size) = t.declared_size(map) {
                    self.maps.insert((t.family, map), MapSize { declared: size, built: Some(size) });
                }
            }
        }
    }

    /// A refresh found `family`'s maps declared as `held` lists them: each with its limit,
    /// and the size its comment says its table was built for.
    pub(super) fn found(&mut self, family: Family, held: &KernelTable) {
        for map in MapName::all() {
            let key = (family, map);
            let spec = held.sets.get(&map.to_string());
            match spec.and_then(|s| s.as_sent().size) {
                Some(declared) => {
                    let built = spec.and_then(built_of);
                    self.maps.insert(key, MapSize { declared, built });
                }
                None => {
                    self.maps.remove(&key);
                }
            }
        }
    }

    /// The maps of `desired`'s tables of `scope` a partial sync must declare larger before
    /// it adds their elements, with their new sizes.
    pub(super) fn growth(&self, desired: &Ruleset, scope: &[Family]) -> Growths {
        let mut grow = Growths::default();
        for t in desired.tables.iter().filter(|t| scope.contains(&t.family)) {
            for map in MapName::all() {
                let (Some(want), Some(have)) = (t.declared_size(map), self.maps.get(&(t.family, map))) else {
                    continue;
                };
                if want > have.declared {
                    grow.add(self, (t.family, map, want), have.built);
                }
            }
        }
        grow
    }

    /// Map `map` of `family`'s table was rehashed: declared anew, its table built for `size`.
    pub(super) fn rehashed(&mut self, family: Family, map: MapName, size: u32) {
        self.maps.insert((family, map), MapSize { declared: size, built: Some(size) });
    }

    /// A partial sync declared the maps of `grown` larger.
    pub(super) fn grown(&mut self, grown: &[Growth]) {
        for (family, map, size) in grown {
            if let Some(s) = self.maps.get_mut(&(*family, *map)) {
                s.declared = *size;
            }
        }
    }
}

/// Listed declaration `listed`, named `name` and declared for `size`: its limit, and the
/// size its comment says its table was built for; `None` if its user data cannot be read.
pub(super) fn declared_for(listed: &SetSpec, name: &str, size: u32) -> Option<SetSpec> {
    let mut data = Vec::new();
    let mut noted = false;
    for (kind, value) in udata::records(&listed.udata)? {
        if kind == NFTNL_UDATA_SET_COMMENT {
            let text = attr::lossy(value);
            udata::put_comment(&mut data, kind, &with_built_for(without_built_for(text.trim_end_matches('\0')), size));
            noted = true;
        } else {
            udata::put(&mut data, kind, value);
        }
    }
    if !noted {
        udata::put_comment(&mut data, NFTNL_UDATA_SET_COMMENT, &with_built_for("", size));
    }
    Some(SetSpec { name: name.to_string(), size: Some(size), udata: data, ..listed.as_sent() })
}

/// The size a declaration's comment says its table was built for.
fn built_of(spec: &SetSpec) -> Option<u32> {
    let comment = udata::comment(&spec.udata, NFTNL_UDATA_SET_COMMENT)?;
    built_for(comment.trim_end_matches('\0'))
}

/// Whether the kernel's declaration `held` serves as `want`: the same, but for a limit that
/// may have grown in place past `want`'s (or be none: the kernel's resizable hash, which has
/// no limit; a limit below `want`'s cannot hold its elements), and for the size its comment
/// says its table was built for.
pub(super) fn serves_as(held: &SetSpec, want: &SetSpec) -> bool {
    let held = held.as_sent();
    let roomy = held.size.is_none_or(|have| have >= want.size.unwrap_or(0));
    let bare = |s: &SetSpec| SetSpec { size: None, udata: Vec::new(), ..s.clone() };
    roomy && bare(&held) == bare(want) && notes(&held.udata) == notes(&want.udata)
}

/// A declaration's user data records, its comment without the size its table was built for
/// (and gone when that was all it said).
fn notes(data: &[u8]) -> Option<Vec<(u8, Vec<u8>)>> {
    let value = |k: u8, v: &[u8]| match k {
        NFTNL_UDATA_SET_COMMENT => without_built_for(attr::lossy(v).trim_end_matches('\0')).as_bytes().to_vec(),
        _ => v.to_vec(),
    };
    let records = udata::records(data)?.into_iter().map(|(k, v)| (k, value(k, v)));
    Some(records.filter(|(k, v)| *k != NFTNL_UDATA_SET_COMMENT || !v.is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::SetSpec;
    use crate::render::{Entry, Key, Value};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    fn none() -> Growths {
        Growths::default()
    }

    fn in_place(in_place: Vec<Growth>) -> Growths {
        Growths { in_place, rehash: vec![] }
    }

    fn rehashed(rehash: Vec<Growth>) -> Growths {
        Growths { in_place: vec![], rehash }
    }

    /// A table whose cluster-ips set holds `n` addresses.
    fn ruleset(n: u32) -> Ruleset {
        let mut t = Table::new(Family::V4, crate::render::Fixed::default());
        let owner: Arc<str> = Arc::from("ns/svc:p");
        let ips = (0..n).map(|i| {
            let key = Key::Ip(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)));
            (key, Entry { value: Value::None, owner: owner.clone(), refs: 1 })
        });
        t.elements.insert(MapName::ClusterIps, ips.collect());
        Ruleset { tables: vec![t] }
    }

    #[test]
    fn a_map_grows_in_place_up_to_its_bound_then_is_rehashed_and_never_shrinks() {
        let (v4, map) = (Family::V4, MapName::ClusterIps);
        let built = MapName::ClusterIps.size_for(5_000).expect("sized");
        let mut sizes = Sizes::default();
        sizes.built(&ruleset(5_000), &[v4]);
        assert_eq!(sizes.growth(&ruleset(5_000), &[v4]), none(), "it fits");
        assert_eq!(sizes.growth(&ruleset(1_000), &[v4]), none(), "shrinking keeps the size");
        let twice = map.size_for(10_000).expect("sized");
        assert_eq!(sizes.growth(&ruleset(10_000), &[v4]), in_place(vec![(v4, map, twice)]));
        sizes.grown(&[(v4, map, twice)]);
        assert_eq!(sizes.growth(&ruleset(10_000), &[v4]), none(), "declared larger now");
        let bound = built * GROW_IN_PLACE;
        let last = (1..).map(|k| 5_000 * k).take_while(|n| map.size_for(*n as usize).is_some_and(|s| s <= bound));
        let last = last.last().expect("some growth in bound") as u32;
        let within = sizes.growth(&ruleset(last), &[v4]);
        assert!(within.in_place.len() == 1 && within.rehash.is_empty(), "{last} is within the bound");
        let past = map.size_for(last as usize * 2).expect("sized");
        assert_eq!(sizes.growth(&ruleset(last * 2), &[v4]), rehashed(vec![(v4, map, past)]), "past the bound");
        sizes.rehashed(v4, map, past);
        let again = map.size_for(last as usize * 3).expect("sized");
        assert_eq!(sizes.growth(&ruleset(last * 3), &[v4]), in_place(vec![(v4, map, again)]), "its new table");
        assert_eq!(sizes.growth(&ruleset(100_000), &[Family::V6]), none(), "another family's");
        sizes.in_place = false;
        sizes.built(&ruleset(5_000), &[v4]);
        let want = map.size_for(last as usize).expect("sized");
        assert_eq!(sizes.growth(&ruleset(last), &[v4]), rehashed(vec![(v4, map, want)]), "a kernel before 6.5");
    }

    #[test]
    fn a_turns_map_declared_without_a_size_is_never_grown_however_many_turns_it_holds() {
        let v4 = Family::V4;
        let turns = |n: u32| {
            let mut r = ruleset(0);
            let owner: Arc<str> = Arc::from("ns/rr:p");
            let entries = (0..n).map(|k| (Key::Turn(k), Entry { value: Value::None, owner: owner.clone(), refs: 1 }));
            r.tables[0].elements.insert(MapName::Turns(3), entries.collect());
            r
        };
        let mut sizes = Sizes::default();
        sizes.built(&turns(5_000), &[v4]);
        assert_eq!(sizes.growth(&turns(50_000), &[v4]), none(), "no size to raise, no rehash");
    }

    #[test]
    fn maps_found_are_known_by_their_comment_and_a_larger_limit_or_none_serves() {
        let (v4, map) = (Family::V4, MapName::ClusterIps);
        let built = map.size_for(5_000).expect("sized");
        let spec = |size: Option<u32>, comment: &str| {
            let mut data = Vec::new();
            udata::put_comment(&mut data, NFTNL_UDATA_SET_COMMENT, comment);
            SetSpec {
                name: map.to_string(),
                flags: 0,
                key: (7, 4),
                data: None,
                timeout_ms: None,
                size,
                concat: vec![],
                udata: data,
            }
        };
        let noted = |n: u32| format!("Active ClusterIPs; {}{n}", crate::render::BUILT_FOR);
        let held = |s: SetSpec| {
            let mut t = KernelTable::default();
            t.sets.insert(map.to_string(), s);
            t
        };
        // Grown in place by an earlier run to twice its table: it may grow twice as far again.
        let mut sizes = Sizes::default();
        sizes.found(v4, &held(spec(Some(built * 2), &noted(built))));
        assert_eq!(sizes.growth(&ruleset(20_000), &[v4]).in_place.len(), 1, "within four times");
        assert_eq!(sizes.growth(&ruleset(40_000), &[v4]).rehash.len(), 1, "past four times its table");
        sizes.found(v4, &held(spec(Some(built), "Active ClusterIPs")));
        assert_eq!(sizes.growth(&ruleset(10_000), &[v4]).rehash.len(), 1, "no note: built for what?");
        sizes.found(v4, &held(spec(None, "Active ClusterIPs")));
        assert_eq!(sizes.growth(&ruleset(100_000), &[v4]), none(), "a resizable hash has no limit");

        let want = spec(Some(built), &noted(built));
        assert!(serves_as(&spec(Some(built * 2), &noted(built / 2)), &want), "a larger limit serves");
        assert!(serves_as(&spec(None, "Active ClusterIPs"), &want), "no limit serves");
        assert!(!serves_as(&spec(Some(built / 2), &noted(built / 2)), &want), "a smaller one cannot hold them");
        assert!(!serves_as(&spec(Some(built), &noted(built).replace("Active", "Idle")), &want), "another comment");
        let bare = |size: Option<u32>| SetSpec { udata: Vec::new(), ..spec(size, "") };
        let mut noted_only = bare(Some(built));
        udata::put_comment(
            &mut noted_only.udata,
            NFTNL_UDATA_SET_COMMENT,
            &format!("{}{built}", crate::render::BUILT_FOR),
        );
        assert!(serves_as(&bare(None), &noted_only), "a map whose comment is the note alone, held without a size");
    }

    #[test]
    fn a_rehashed_map_is_declared_as_listed_but_for_its_name_limit_and_the_size_its_table_is_built_for() {
        let mut data = Vec::new();
        udata::put_u32(&mut data, 1, 7);
        udata::put_comment(&mut data, NFTNL_UDATA_SET_COMMENT, &with_built_for("Active ClusterIPs", 6144));
        let listed = SetSpec {
            name: "cluster-ips".into(),
            flags: 0x4,
            key: (7, 4),
            data: None,
            timeout_ms: None,
            size: Some(12_288),
            concat: vec![],
            udata: data,
        };
        let spec = declared_for(&listed, "cluster-ips-copy", 24_576).expect("readable");
        assert_eq!(
            (spec.name.as_str(), spec.size, spec.flags, spec.key),
            ("cluster-ips-copy", Some(24_576), 0x4, (7, 4))
        );
        let records = udata::records(&spec.udata).expect("records");
        assert_eq!(records[0], (1, &7u32.to_ne_bytes()[..]), "other records kept, in order");
        let comment = udata::comment(&spec.udata, NFTNL_UDATA_SET_COMMENT).expect("comment");
        assert_eq!(comment.trim_end_matches('\0'), "Active ClusterIPs; hash table built for 24576");
        assert_eq!(built_of(&spec), Some(24_576));
        // A map whose comment said nothing gets the note alone.
        let bare = SetSpec { udata: Vec::new(), ..listed };
        assert_eq!(built_of(&declared_for(&bare, "cluster-ips", 49_152).expect("readable")), Some(49_152));
        let torn = SetSpec { udata: vec![NFTNL_UDATA_SET_COMMENT, 9, b'x'], ..bare };
        assert_eq!(declared_for(&torn, "cluster-ips", 49_152), None, "a record past its end");
    }
}
