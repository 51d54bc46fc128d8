//! Map and set elements compared: per map, what the kernel holds against what the desired
//! state holds, each difference under the service port it belongs to. An endpoint map's
//! frontend equals when it has the same endpoints in the same slots up to their order: the
//! slot order is the sync's own choice (a partial sync keeps slots), not a difference.

use super::read_map::ReadMap;
use super::report::{Change, Kind, Object};
use crate::model::{Family, Protocol};
use crate::netlink::elements::Element;
use crate::render::{Entry, Key, MapName, Value, comment};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

/// A difference and the service port it belongs to.
pub(super) type Owned = (Option<String>, Change);

/// Who owns a frontend, from the elements that name their owner (desired first, then the
/// kernel's): for kernel elements with no comment, such as endpoint slots.
#[derive(Debug, Default)]
pub(super) struct Owners {
    frontends: HashMap<(IpAddr, Protocol, u16), String>,
    nodeports: HashMap<(Protocol, u16), String>,
    ips: HashMap<IpAddr, String>,
    /// Desired owners by their comment, which the kernel holds cut to 128 bytes, so that a
    /// long name read from the kernel is grouped under the same service as the desired one
    /// (`None` where two long names cut to the same comment).
    full: HashMap<String, Option<String>>,
}

impl Owners {
    fn learn(&mut self, map: MapName, key: &Key, owner: &str) {
        let (frontend, nodeport) = match (key, proto_of(map)) {
            (Key::IpProtoPort(ip, p, port), _) => (Some((*ip, *p, *port)), None),
            (Key::IpSlot(ip, port, _), Some(p)) => (Some((*ip, p, *port)), None),
            (Key::ProtoPort(p, port), _) => (None, Some((*p, *port))),
            (Key::PortSlot(port, _), Some(p)) => (None, Some((p, *port))),
            _ => (None, None),
        };
        if let Some(f) = frontend {
            self.frontends.entry(f).or_insert_with(|| owner.to_string());
            self.ips.entry(f.0).or_insert_with(|| owner.to_string());
        }
        if let Some(n) = nodeport {
            self.nodeports.entry(n).or_insert_with(|| owner.to_string());
        }
    }

    /// Learns the owners of the elements that name a frontend (`MapName::names_frontend`),
    /// desired ones first.
    pub(super) fn new(
        desired: &BTreeMap<MapName, BTreeMap<Key, Entry>>,
        kernel: &BTreeMap<MapName, ReadMap>,
    ) -> Owners {
        let mut owners = Owners::default();
        let dispatching: Vec<MapName> = MapName::all().into_iter().filter(|m| m.names_frontend()).collect();
        for &map in &dispatching {
            for (key, entry) in desired.get(&map).into_iter().flatten() {
                if matches!(entry.value, Value::Endpoint(_, _, None)) {
                    continue;
                }
                owners.learn(map, key, &entry.owner);
                let name = Some(entry.owner.to_string());
                let seen = owners.full.entry(comment(&entry.owner).to_string()).or_insert_with(|| name.clone());
                if *seen != name {
                    *seen = None;
                }
            }
        }
        for map in dispatching {
            for (key, value) in kernel.get(&map).map(|r| r.known.as_slice()).unwrap_or_default() {
                if let Some(o) = owners.named(value) {
                    owners.learn(map, key, &o);
                }
            }
        }
        owners
    }

    /// The owner `value` names, by its full name where a desired element has it alone.
    fn named(&self, value: &Value) -> Option<String> {
        named_owner(value).map(|o| self.full.get(&o).cloned().flatten().unwrap_or(o))
    }

    /// The service port an element belongs to, if it can be told: the one whose frontend its
    /// key is, when that one's comment is what the element names (a cut comment can name
    /// two), else the one it names, else the frontend's.
    fn of(&self, map: MapName, key: &Key, value: &Value) -> Option<String> {
        let by_key = self.by_key(map, key);
        match (self.named(value), by_key) {
            (Some(named), Some(k)) if comment(&k) == comment(&named) => Some(k),
            (Some(named), _) => Some(named),
            (None, k) => k,
        }
    }

    fn by_key(&self, map: MapName, key: &Key) -> Option<String> {
        match (key, proto_of(map)) {
            (Key::IpProtoPort(ip, p, port), _) => self.frontends.get(&(*ip, *p, *port)).cloned(),
            (Key::Allow(a), _) => self.frontends.get(&(a.0, a.1, a.2)).cloned(),
            (Key::ProtoPort(p, port), _) => self.nodeports.get(&(*p, *port)).cloned(),
            (Key::Ip(ip), _) if map == MapName::ClusterIps => self.ips.get(ip).cloned(),
            (Key::IpSlot(ip, port, _), Some(p)) => self.frontends.get(&(*ip, p, *port)).cloned(),
            (Key::PortSlot(port, _), Some(p)) => self.nodeports.get(&(p, *port)).cloned(),
            _ => None,
        }
    }
}

/// The owner an element's value names: its comment, or the per-service chain it goes to.
fn named_owner(value: &Value) -> Option<String> {
    match value {
        Value::Dispatch(_, o) | Value::Drop(o) | Value::Reject(o) | Value::Endpoint(_, _, Some(o)) => {
            Some(o.to_string())
        }
        Value::Goto(chain) => super::chains::owner_of_chain(chain),
        Value::None | Value::Endpoint(_, _, None) => None,
    }
}

/// A desired value as the kernel holds it: its owner cut to a comment's length.
fn as_held(value: &Value) -> Value {
    let cut = |o: &Arc<str>| Arc::from(comment(o));
    match value {
        Value::Dispatch(c, o) => Value::Dispatch(c.clone(), cut(o)),
        Value::Drop(o) => Value::Drop(cut(o)),
        Value::Reject(o) => Value::Reject(cut(o)),
        Value::Endpoint(ip, port, o) => Value::Endpoint(*ip, *port, o.as_ref().map(cut)),
        other => other.clone(),
    }
}

/// What one map's comparison needs.
pub(super) struct MapDiff<'a> {
    /// The table's family.
    pub family: Family,
    /// The map (an endpoint map's first part, standing for all of its parts).
    pub map: MapName,
    /// Who owns what.
    pub owners: &'a Owners,
}

impl MapDiff<'_> {
    fn change(&self, map: MapName, kind: Kind, text: String) -> Change {
        let (removed, added) = if kind == Kind::Removed { (vec![text], vec![]) } else { (vec![], vec![text]) };
        let family = crate::netlink::NfFamily::from(self.family).word();
        Change { family, object: Object::Element, name: map.to_string(), change: kind, removed, added }
    }

    /// The elements of `part` (the map or one of its parts) that no sync writes in that form:
    /// each a difference.
    pub(super) fn raw(&self, part: MapName, raw: Vec<Element>, out: &mut Vec<Owned>) {
        for e in raw {
            out.push((None, self.change(part, Kind::Removed, raw_text(&e))));
        }
    }

    /// The differences of the map (of all its parts): `desired` against the elements the
    /// kernel holds in the forms a sync writes (`ReadMap::known`; the others are [`Self::raw`]).
    pub(super) fn compare<'d>(
        &self,
        desired: impl Iterator<Item = (&'d Key, &'d Entry)>,
        known: &[(Key, Value)],
        out: &mut Vec<Owned>,
    ) {
        let want: BTreeMap<&Key, (Value, &str)> = desired.map(|(k, e)| (k, (as_held(&e.value), &*e.owner))).collect();
        let held: BTreeMap<&Key, &Value> = known.iter().map(|(k, v)| (k, v)).collect();
        let (mut gone, mut new) = (Vec::new(), Vec::new());
        for (k, v) in &held {
            if want.get(k).is_none_or(|(w, _)| w != *v) {
                gone.push((*k, (*v).clone()));
            }
        }
        for (k, (v, o)) in &want {
            if held.get(k).is_none_or(|h| *h != v) {
                new.push((*k, v.clone(), *o));
            }
        }
        if matches!(self.map, MapName::Endpoints(..) | MapName::NodeportEndpoints(..)) {
            same_endpoints_any_order(&mut gone, &mut new, &want, &held);
        }
        for (k, v) in gone {
            out.push((self.owners.of(self.map, k, &v), self.change(self.map.holding(k), Kind::Removed, text(k, &v))));
        }
        // The node's addresses and the ServiceCIDRs belong to no service port.
        let of_service = !matches!(self.map, MapName::NodeportIps | MapName::ServiceCidrs);
        for (k, v, o) in new {
            out.push((of_service.then(|| o.to_string()), self.change(self.map.holding(k), Kind::Added, text(k, &v))));
        }
    }
}

/// An endpoint map's protocol; `None` for any other map.
fn proto_of(map: MapName) -> Option<Protocol> {
    match map {
        MapName::Endpoints(_, p, _) | MapName::NodeportEndpoints(_, p, _) => Some(p),
        _ => None,
    }
}

/// A frontend (an endpoint key without its slot).
fn frontend(k: &Key) -> Option<(Option<IpAddr>, u16)> {
    match k {
        Key::IpSlot(ip, port, _) => Some((Some(*ip), *port)),
        Key::PortSlot(port, _) => Some((None, *port)),
        _ => None,
    }
}

/// Each frontend's slot numbers.
fn slots<'k>(keys: impl Iterator<Item = &'k Key>) -> BTreeMap<(Option<IpAddr>, u16), Vec<u32>> {
    let mut out: BTreeMap<_, Vec<u32>> = BTreeMap::new();
    for k in keys {
        if let (Some(f), Some(s)) = (frontend(k), slot(k)) {
            out.entry(f).or_default().push(s);
        }
    }
    out
}

/// Of the endpoints that differ, drops those that only moved to another slot of the same
/// frontend, when both sides number its slots from 0 without a gap (the chain picks among
/// as many slots as there are endpoints, whatever their order).
fn same_endpoints_any_order<'k>(
    gone: &mut Vec<(&'k Key, Value)>,
    new: &mut Vec<(&'k Key, Value, &'k str)>,
    want: &BTreeMap<&'k Key, (Value, &'k str)>,
    held: &BTreeMap<&'k Key, &Value>,
) {
    let dense = |s: Option<&Vec<u32>>| {
        let mut s = s.cloned().unwrap_or_default();
        s.sort_unstable();
        s.iter().enumerate().all(|(i, n)| *n == i as u32)
    };
    let (held_slots, want_slots) = (slots(held.keys().copied()), slots(want.keys().copied()));
    // Slot 0's comment names the service port; an endpoint moved off slot 0 leaves it behind.
    let bare = |v: &Value| match v {
        Value::Endpoint(ip, port, _) => Value::Endpoint(*ip, *port, None),
        other => other.clone(),
    };
    let mut moved: BTreeMap<_, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for (k, v) in gone.iter() {
        moved.entry(frontend(k)).or_default().0.push(bare(v));
    }
    for (k, v, _) in new.iter() {
        moved.entry(frontend(k)).or_default().1.push(bare(v));
    }
    for (f, (mut g, mut n)) in moved {
        let Some(f) = f else { continue };
        if g.is_empty() || n.is_empty() || !dense(held_slots.get(&f)) || !dense(want_slots.get(&f)) {
            continue;
        }
        g.sort();
        n.sort();
        let (mut from_gone, mut from_new) = multiset_common(&g, &n);
        gone.retain(|(key, v)| frontend(key) != Some(f) || !take(&mut from_gone, &bare(v)));
        new.retain(|(key, v, _)| frontend(key) != Some(f) || !take(&mut from_new, &bare(v)));
        renamed_first_slot(f, gone, new, want, held);
    }
}

/// Slot 0 names its frontend's service port: when the endpoints only moved, a comment that
/// differs (none, in a table an earlier version wrote) is still a difference of slot 0.
fn renamed_first_slot<'k>(
    f: (Option<IpAddr>, u16),
    gone: &mut Vec<(&'k Key, Value)>,
    new: &mut Vec<(&'k Key, Value, &'k str)>,
    want: &BTreeMap<&'k Key, (Value, &'k str)>,
    held: &BTreeMap<&'k Key, &Value>,
) {
    let first = match f {
        (Some(ip), port) => Key::IpSlot(ip, port, 0),
        (None, port) => Key::PortSlot(port, 0),
    };
    let comment = |v: &Value| match v {
        Value::Endpoint(_, _, c) => c.clone(),
        _ => None,
    };
    let (Some((key, (w, owner))), Some(h)) = (want.get_key_value(&first), held.get(&first)) else { return };
    if comment(w) != comment(h) && !gone.iter().any(|(g, _)| g == key) {
        gone.push((key, (*h).clone()));
        new.push((key, w.clone(), owner));
    }
}

fn slot(k: &Key) -> Option<u32> {
    match k {
        Key::IpSlot(_, _, s) | Key::PortSlot(_, s) => Some(*s),
        _ => None,
    }
}

/// The values both sorted lists hold, once per side, as many times as both hold them.
fn multiset_common(a: &[Value], b: &[Value]) -> (Vec<Value>, Vec<Value>) {
    let (mut i, mut j, mut both) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                both.push(a[i].clone());
                i += 1;
                j += 1;
            }
        }
    }
    (both.clone(), both)
}

/// Takes one `v` out of `pool`, if it is there.
fn take(pool: &mut Vec<Value>, v: &Value) -> bool {
    match pool.iter().position(|p| p == v) {
        Some(i) => {
            pool.swap_remove(i);
            true
        }
        None => false,
    }
}

/// An element as `nft` writes it (the templates' own element text).
pub(super) fn text(key: &Key, value: &Value) -> String {
    let t = crate::render::ElementText { k: key, v: value };
    // Writing into a String fails only if a value's Display does, which none of these does.
    crate::render::render_template(&t, "element.nft")
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|e| format!("{key:?} : {value:?} ({e})"))
}

/// An element no sync writes in this form, as its bytes.
fn raw_text(e: &Element) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut s = format!("key 0x{}", hex(&e.key));
    if let Some(end) = &e.key_end {
        s += &format!(" - 0x{}", hex(end));
    }
    if e.flags != 0 {
        s += &format!(" flags 0x{:x}", e.flags);
    }
    match &e.data {
        Some(crate::nft::compile::Data::Value(v)) => s += &format!(" : 0x{}", hex(v)),
        Some(crate::nft::compile::Data::Verdict(code, chain)) => {
            s += &format!(" : verdict {code}{}", chain.as_ref().map(|c| format!(" {c}")).unwrap_or_default())
        }
        None => {}
    }
    if let Some(c) = &e.comment {
        s += &format!(" comment \"{c}\"");
    }
    s + " (not written by kube-nftproxy)"
}
