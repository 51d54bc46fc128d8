//! A refresh that sends only what differs: the tables are read over netlink (dumps, which do
//! not take the kernel's commit mutex), compared with the desired state as `--dry-run --diff`
//! compares them, and the difference goes out as one partial transaction: usually nothing,
//! after a restart or a periodic refresh over tables that hold what they should. What a
//! partial transaction cannot express (our fixed chains or a set declaration changed, an
//! object someone else added, an element in a form no sync writes) is left to the rewrite in
//! place, which the caller falls back to.

use super::diff::TableDiff;
use super::kdiff::{self, KernelTable, ReadMap};
use super::read::{Held, ReadAhead, Tables, read_settled};
use super::sizes::Growths;
use super::{Applier, NftError, SyncKind, SyncReport};
use crate::model::Family;
use crate::nft::compile::{self, DeclaredTable};
use crate::render::{self, Key, MapName, Ruleset, Table, Value, words};
use std::collections::BTreeMap;

impl Applier {
    /// After a full sync during which another process committed unseen: compares the
    /// chains and sets of the tables of `scope` with the kernel's (not the elements, whose
    /// dump is what makes a refresh cost) and mends what differs; refreshes them when a
    /// partial transaction cannot.
    pub(super) fn check(
        &mut self,
        desired: &Ruleset,
        scope: &[Family],
        deleted_chains: usize,
    ) -> Result<SyncReport, NftError> {
        match self.reconcile(desired, scope, deleted_chains, false)? {
            Some(report) => Ok(report),
            None => self.refresh(desired, scope, deleted_chains),
        }
    }

    /// Brings the tables of `scope`, which exist, to `desired` by sending only what differs
    /// from what they hold (the maps' elements too when `elements` says so). `None` when the
    /// difference is not one a partial transaction can express (nothing was sent); the
    /// caller rewrites the tables in place then.
    pub(super) fn reconcile(
        &mut self,
        desired: &Ruleset,
        scope: &[Family],
        deleted_chains: usize,
        elements: bool,
    ) -> Result<Option<SyncReport>, NftError> {
        let started = std::time::Instant::now();
        let script = render::full_sync_script_of(desired, &self.node, scope)?;
        let mut schema = compile::Schema::default();
        let declared = compile::declared_with(&script, &mut schema)?;
        let compiled = started.elapsed();
        let Some(held) = self.held(scope, elements)? else { return Ok(None) };
        let read = started.elapsed() - compiled;
        let mut diffs = Vec::new();
        let mut families = Vec::new();
        let mut grow = Growths::default();
        for t in desired.tables.iter().filter(|t| scope.contains(&t.family)) {
            let (Some(decl), Some(h)) = (declared.tables.get(&t.family), held.get(&t.family)) else {
                return Ok(None);
            };
            // A map the kernel holds too small for its elements is declared larger first.
            let growing = self.sizes.growth_found(t, &h.table);
            let all = growing.in_place.iter().chain(&growing.rehash);
            let names: Vec<String> = all.map(|(_, map, _)| map.to_string()).collect();
            grow.in_place.extend(growing.in_place);
            grow.rehash.extend(growing.rehash);
            match table_diff(t, decl, h, elements, &names) {
                Ok(d) => diffs.push(d),
                Err(why) => {
                    log::info!("refresh: {why} in the {} table; rewriting it in place", words(t.family).fam);
                    return Ok(None);
                }
            }
            families.push(t.family);
        }
        log::debug!(
            "refresh: compiled in {compiled:?}, read in {read:?}, compared in {:?}",
            started.elapsed() - compiled - read
        );
        // The tables hold the desired sets now, whether or not anything is sent, with the
        // sizes found (a map grown in place keeps its larger one).
        self.schema.adopt(schema, scope);
        for family in scope {
            if let Some(h) = held.get(family) {
                self.sizes.found(*family, &h.table);
            }
        }
        self.schema.sent();
        let elements = diffs.iter().map(TableDiff::element_count).sum();
        if diffs.iter().all(TableDiff::is_empty) {
            return Ok(Some(nothing_sent(deleted_chains)));
        }
        let part = self.partial(&diffs, &families, grow)?;
        let report = self.send_partial(part, SyncKind::Refresh, deleted_chains)?;
        Ok(Some(SyncReport { elements: Some(elements), ..report }))
    }
}

impl Applier {
    /// What the tables of `scope` hold (their maps' elements too when `elements` says so):
    /// those read ahead of the first sync, or read now; `None` when they cannot be read as
    /// one state, for the caller to rewrite them in place. A rehash cut short is finished
    /// first (the tables read ahead held it still).
    fn held(&mut self, scope: &[Family], elements: bool) -> Result<Option<Tables>, NftError> {
        let finished = self.finish_rehashes(scope)?;
        let ahead = self.ahead.take().filter(|_| elements && scope == Family::ALL && !finished);
        if let Some(held) = ahead.and_then(ReadAhead::finish) {
            return Ok(Some(held));
        }
        match read_settled(scope, elements) {
            // Someone keeps changing our tables: rewrite them in place, as a repair.
            Err(NftError::Unsettled(n)) => {
                log::info!("refresh: our tables changed while they were read, {n} times; rewriting them in place");
                Ok(None)
            }
            other => other,
        }
    }
}

/// The report of a refresh that found nothing to send.
fn nothing_sent(deleted_chains: usize) -> SyncReport {
    let (kind, script, refused) = (SyncKind::Refresh, String::new(), Vec::new());
    SyncReport { kind, bytes: 0, elements: Some(0), transactions: 0, script, deleted_chains, unsure: false, refused }
}

/// What differs between table `t` (declared as `decl`) and what the kernel holds, as a
/// partial transaction's changes; `Err` says why no partial transaction can express it.
fn table_diff<'a>(
    t: &'a Table,
    decl: &'a DeclaredTable,
    held: &'a Held,
    elements: bool,
    growing: &[String],
) -> Result<TableDiff<'a>, String> {
    let mut d = TableDiff { fam: words(t.family).fam, ..TableDiff::default() };
    if held.stateful > 0 {
        return Err(format!("{} flowtables or stateful objects someone else added", held.stateful));
    }
    chains_diff(t, decl, &held.table, &mut d)?;
    sets_diff(t, decl, &held.table, growing, &mut d)?;
    for map in MapName::all().into_iter().filter(|_| elements) {
        let want = t.elements.get(&map);
        let have = held.maps.get(&map);
        if let Some(raw) = have.map(|h| h.raw.len()).filter(|n| *n > 0) {
            return Err(format!("{raw} elements of {map} in a form no sync writes"));
        }
        elements_diff(map, want, have, &mut d);
    }
    Ok(d)
}

/// Chains: ours that differ are rewritten, missing ones added, ours no longer used flushed
/// (deleted later, as a partial sync leaves them).
fn chains_diff<'a>(
    t: &'a Table,
    decl: &DeclaredTable,
    held: &'a KernelTable,
    d: &mut TableDiff<'a>,
) -> Result<(), String> {
    for (name, chain) in &decl.chains {
        let want = kdiff::KernelChain { hook: chain.hook.clone(), rules: kdiff::desired_rules(chain) };
        let same = held.chains.get(name) == Some(&want);
        match t.chains.get_key_value(name) {
            Some((name, _)) if held.chains.get(name).is_some_and(|c| c.hook.is_some() && chain.hook.is_none()) => {
                return Err(format!("chain {name} is hooked"));
            }
            Some((name, text)) if !same => {
                if !held.chains.contains_key(name) {
                    d.new_chains.push(name);
                }
                d.rewrite.push((name, text));
            }
            Some(_) => {}
            None if !same => return Err(format!("chain {name} differs")),
            None => {}
        }
    }
    for name in held.chains.keys().filter(|n| !decl.chains.contains_key(*n)) {
        if !render::named_ours(name) {
            return Err(format!("a chain someone else added ({name:?})"));
        }
        if held.chains[name].hook.is_some() {
            return Err(format!("chain {name} is hooked"));
        }
        d.stale.push(name);
    }
    Ok(())
}

/// Sets and maps: declarations must match (those `growing` once declared larger); affinity
/// sets come and go as a partial sync makes them.
fn sets_diff<'a>(
    t: &'a Table,
    decl: &DeclaredTable,
    held: &'a KernelTable,
    growing: &[String],
    d: &mut TableDiff<'a>,
) -> Result<(), String> {
    for (name, want) in &decl.sets {
        // A map declared larger first serves once it is, however small it is now.
        let grown = |have: &crate::netlink::SetSpec| {
            if growing.contains(name) {
                crate::netlink::SetSpec { size: want.size, ..have.clone() }
            } else {
                have.clone()
            }
        };
        match held.sets.get(name) {
            Some(have) if super::sizes::serves_as(&grown(have), want) => {}
            Some(_) => return Err(format!("set {name} is declared otherwise")),
            None => match t.affinity_maps.get_key_value(name) {
                Some((name, _)) => d.new_sets.push(name),
                None => return Err(format!("set {name} is missing")),
            },
        }
    }
    let maps: Vec<String> = MapName::all().iter().map(MapName::to_string).collect();
    for name in held.sets.keys().filter(|n| !decl.sets.contains_key(*n)) {
        if !render::named_ours(name) && !maps.contains(name) && !render::unparted_endpoint_map(name) {
            return Err(format!("a set someone else added ({name:?})"));
        }
        // Ours, no longer used (a scheduler's maps after it changed): deleted after the rules
        // that used it are gone.
        d.delete_sets.push(name);
    }
    Ok(())
}

/// One map's elements: those the kernel lacks or holds with another value are added (after
/// the other value's deletion), those it holds beyond the desired ones deleted. Both sides are
/// walked in key order, once (at 30k Services a refresh compares 216,000 elements).
fn elements_diff<'a>(
    map: MapName,
    want: Option<&'a BTreeMap<Key, render::Entry>>,
    have: Option<&'a ReadMap>,
    d: &mut TableDiff<'a>,
) {
    let mut held: Vec<&(Key, Value)> = have.map(|h| h.known.iter().collect()).unwrap_or_default();
    held.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut held = held.into_iter().peekable();
    let add = |d: &mut TableDiff<'a>, key: &'a Key, value: &'a Value| {
        d.add_elements.entry(map).or_default().push((key, value))
    };
    for (key, entry) in want.into_iter().flatten() {
        while let Some((k, _)) = held.next_if(|(k, _)| k < key) {
            d.delete_elements.entry(map).or_default().push(k);
        }
        match held.next_if(|(k, _)| k == key) {
            Some((_, v)) if held_as(&entry.value, v) => {}
            Some((k, _)) => {
                d.delete_elements.entry(map).or_default().push(k);
                add(d, key, &entry.value);
            }
            None => add(d, key, &entry.value),
        }
    }
    for (k, _) in held {
        d.delete_elements.entry(map).or_default().push(k);
    }
}

/// Whether the kernel's `held` is `want` as the kernel keeps it: its comment cut to the
/// length the kernel stores.
fn held_as(want: &Value, held: &Value) -> bool {
    let cut = |w: &str, h: &str| render::comment(w) == h;
    match (want, held) {
        (Value::Dispatch(c, w), Value::Dispatch(hc, h)) => c == hc && cut(w, h),
        (Value::Drop(w), Value::Drop(h)) | (Value::Reject(w), Value::Reject(h)) => cut(w, h),
        (Value::Endpoint(ip, port, w), Value::Endpoint(hip, hport, h)) => {
            (ip, port) == (hip, hport) && w.as_deref().map(render::comment) == h.as_deref()
        }
        _ => want == held,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    fn ip(n: u8) -> Key {
        Key::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
    }

    #[test]
    fn elements_are_compared_in_key_order_values_as_the_kernel_keeps_them() {
        let owner: Arc<str> = Arc::from(format!("ns/{}:p", "n".repeat(300)));
        let entry = |value: Value| render::Entry { value, owner: owner.clone(), refs: 1 };
        let drop = |o: &str| Value::Drop(Arc::from(o));
        let want: BTreeMap<Key, render::Entry> = [
            (ip(1), entry(Value::None)),
            (ip(2), entry(drop("a"))),
            (ip(3), entry(Value::Drop(owner.clone()))),
            (ip(5), entry(Value::None)),
        ]
        .into_iter()
        .collect();
        // The kernel: 2 with another value, 3 with its comment cut, 4 extra, 1 and 5 missing
        // (listed out of order, as a dump lists them).
        let cut = Value::Drop(Arc::from(render::comment(&owner)));
        let have = ReadMap { known: vec![(ip(4), Value::None), (ip(3), cut), (ip(2), drop("b"))], raw: vec![] };
        let mut d = TableDiff::default();
        elements_diff(MapName::ClusterIps, Some(&want), Some(&have), &mut d);
        let deleted: Vec<&Key> = d.delete_elements[&MapName::ClusterIps].clone();
        let added: Vec<&Key> = d.add_elements[&MapName::ClusterIps].iter().map(|(k, _)| *k).collect();
        assert_eq!(deleted, [&ip(2), &ip(4)]);
        assert_eq!(added, [&ip(1), &ip(2), &ip(5)]);
        assert!(held_as(&Value::Drop(owner.clone()), &Value::Drop(Arc::from(render::comment(&owner)))));
        assert!(!held_as(&drop("a"), &drop("b")));
    }
}
