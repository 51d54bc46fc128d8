//! The table under construction. Every change to it goes through here, so each service port's
//! share is recorded (to take it out again when the port changes) and, during an incremental
//! update, the old value of everything touched is journaled (so the partial sync is the
//! difference on those keys alone, never a walk over the whole table).

use super::key::Key;
use super::lb::lb_chain;
use super::maps::{MapName, Scope};
use super::ruleset::{AffinityGroup, Inserted, Table, Value};
use super::{FamilyContext, RenderError};
use crate::model::{ObjectKey, Protocol};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// One service port: its Service and its position among the Service's ports. Ordered as the
/// model is walked, so "first claimant" means the same in full renders and updates.
pub type PortId = (ObjectKey, u32);

/// How an `lb-*` chain picks one of a frontend's endpoint slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Pick {
    /// At random (`numgen random`).
    Random,
    /// In turn (`numgen inc`): a counter of the rule's own, so a chain per service port,
    /// whose turn leads through a `turns-*` map (this shard) to the chain of that slot.
    Turn(u8),
    /// Slot `n` always: the chain a round-robin turn leads to.
    Slot,
    /// By the client's address (and port) hashed (`jhash`).
    Hash {
        /// Whether the client's port is hashed too.
        port: bool,
    },
}

/// An `lb-*` chain: scope, NodePort or not, protocol, how a slot is picked, and `n`: the
/// slot count, or for [`Pick::Slot`] the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct LbKey {
    pub(super) scope: Scope,
    pub(super) nodeport: bool,
    pub(super) proto: Protocol,
    pub(super) n: usize,
    pub(super) pick: Pick,
}

/// What one service port put into the table.
#[derive(Debug, Clone, Default)]
struct PortRecord {
    owner: Arc<str>,
    chains: Vec<String>,
    sets: Vec<(String, AffinityGroup)>,
    /// Elements held, a run of consecutive endpoint slots as its first key and length, under
    /// the first part of the endpoint maps the run spreads over.
    elements: Vec<(MapName, Key, u32)>,
    lb: Vec<LbKey>,
    /// The `lb-*` chains its ClusterIPs are found by their endpoint count to reach.
    by_count: Vec<LbKey>,
    /// Frontends claimed, and whether this port won each.
    claims: Vec<(Key, bool)>,
    warnings: Vec<String>,
}

/// Who put what into one family's table, kept between syncs.
#[derive(Debug, Clone, Default)]
pub struct Index {
    ports: BTreeMap<PortId, PortRecord>,
    /// Every claimant of each frontend in model order, winner first (a sorted `Vec`: nearly
    /// every frontend has one claimant).
    claims: BTreeMap<Key, Vec<PortId>>,
    /// Users of each `lb-*` chain.
    lb: BTreeMap<LbKey, u32>,
    /// ClusterIP frontends that the dispatch by endpoint count leads to each `lb-*` chain.
    by_count: BTreeMap<LbKey, u32>,
    /// Elements one port holds while another was refused them.
    contested: HashSet<(MapName, Key)>,
    /// The ports with warnings, so finishing a table does not walk every port's record.
    warned: BTreeSet<PortId>,
}

impl Index {
    /// The ports recorded for one Service.
    pub(super) fn ports_of(&self, service: &ObjectKey) -> Vec<PortId> {
        let range = (service.clone(), 0)..=(service.clone(), u32::MAX);
        self.ports.range(range).map(|(id, _)| id.clone()).collect()
    }
}

/// The values chains, sets and elements had before an update first touched them (`None`:
/// absent). Comparing them with the table afterwards gives exactly what the update changed.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    /// Chain bodies.
    pub chains: BTreeMap<String, Option<String>>,
    /// Affinity sets' groups.
    pub sets: BTreeMap<String, Option<Vec<AffinityGroup>>>,
    /// Element values. Hashed, not ordered: an update touching every Service journals 200,000
    /// of them, and a tree's searches were a fifth of its time; readers sort what they need.
    pub elements: HashMap<(MapName, Key), Option<Value>>,
    /// The table's fixed part changed (the first port to take turns came, or the last
    /// went): only a full sync declares it anew.
    pub fixed_changed: bool,
}

/// Builds or updates one family's table, service port by service port.
pub(super) struct Builder<'a> {
    pub(super) ctx: &'a FamilyContext<'a>,
    pub(super) table: Table,
    index: Index,
    journal: Option<Journal>,
    current: Option<(PortId, PortRecord)>,
    /// Ports to render again: a frontend they claimed changed hands.
    pub(super) rerender: Vec<PortId>,
    /// An update touched an element two ports disagree on; only a rebuild settles it.
    pub(super) contested: bool,
    /// A count came into use by ClusterIPs or went, so the dispatch by endpoint count changes.
    counts_changed: bool,
}

impl<'a> Builder<'a> {
    /// A builder of a fresh table.
    pub(super) fn new(ctx: &'a FamilyContext<'a>) -> Builder<'a> {
        let table = Table::new(ctx.family, ctx.fixed());
        Builder {
            ctx,
            table,
            index: Index::default(),
            journal: None,
            current: None,
            rerender: vec![],
            contested: false,
            counts_changed: true,
        }
    }

    /// A builder that updates `table` in place, journaling what it changes: about `elements`
    /// of them (room made at once, not by growing the journal again and again).
    pub(super) fn resume(ctx: &'a FamilyContext<'a>, table: Table, index: Index, elements: usize) -> Builder<'a> {
        let journal = Some(Journal { elements: HashMap::with_capacity(elements), ..Journal::default() });
        Builder { ctx, table, index, journal, current: None, rerender: vec![], contested: false, counts_changed: false }
    }

    /// The recorded ports of a Service.
    pub(super) fn ports_of(&self, service: &ObjectKey) -> Vec<PortId> {
        self.index.ports_of(service)
    }

    /// Starts recording a port's share.
    pub(super) fn begin_port(&mut self, id: PortId, owner: Arc<str>) {
        self.current = Some((id, PortRecord { owner, ..PortRecord::default() }));
    }

    /// Files the current port's share.
    pub(super) fn end_port(&mut self) {
        if let Some((id, mut record)) = self.current.take() {
            // Records live as long as the port; growth headroom would be a third of the index.
            record.elements.shrink_to_fit();
            record.lb.shrink_to_fit();
            record.by_count.shrink_to_fit();
            record.claims.shrink_to_fit();
            if record.warnings.is_empty() {
                self.index.warned.remove(&id);
            } else {
                self.index.warned.insert(id.clone());
            }
            self.index.ports.insert(id, record);
        }
    }

    fn record(&mut self) -> &mut PortRecord {
        // Rendering always runs between begin_port and end_port; a stray call records into a
        // throwaway port rather than panicking.
        &mut self.current.get_or_insert_with(Default::default).1
    }

    /// Adds a warning to the current port's share.
    pub(super) fn warn(&mut self, message: String) {
        self.record().warnings.push(message);
    }

    /// Adds an element held by the current port.
    pub(super) fn element(&mut self, map: MapName, key: Key, value: Value) {
        self.journal_element(map, &key);
        let owner = self.record().owner.clone();
        match self.table.insert(map, key.clone(), value, &owner) {
            Inserted::New | Inserted::Shared => {
                let held = &mut self.record().elements;
                let runs = map.first_part();
                match held.last_mut() {
                    Some((m, first, run)) if *m == runs && first.slot_plus(*run).as_ref() == Some(&key) => *run += 1,
                    _ => held.push((runs, key, 1)),
                }
            }
            Inserted::Refused { first } => {
                if first != owner {
                    self.index.contested.insert((map, key.clone()));
                    self.contested |= self.journal.is_some();
                }
                self.warn(format!("{owner}: {map} element {key:?} is already used by {first}; keeping {first}'s"));
            }
        }
    }

    /// Adds (or rewrites) a chain of the current port.
    pub(super) fn chain(&mut self, name: &str, body: String) {
        self.journal_chain(name);
        if self.table.chains.insert(name.to_string(), body).is_none() {
            self.record().chains.push(name.to_string());
        }
    }

    /// The current port keeps the entries of affinity group `group` in set `name`.
    pub(super) fn set(&mut self, name: &str, group: AffinityGroup) {
        if let Some(j) = &mut self.journal {
            j.sets.entry(name.to_string()).or_insert_with(|| self.table.affinity_maps.get(name).cloned());
        }
        // Sorted, so a table patched in any order equals one rendered from scratch.
        let groups = self.table.affinity_maps.entry(name.to_string()).or_default();
        let at = groups.partition_point(|g| *g < group);
        groups.insert(at, group.clone());
        self.record().sets.push((name.to_string(), group));
    }

    /// The current port uses a shared `lb-*` chain; the first user creates it.
    pub(super) fn use_lb(&mut self, key: LbKey) -> Result<(), RenderError> {
        if self.record().lb.contains(&key) {
            return Ok(());
        }
        self.record().lb.push(key);
        let users = self.index.lb.entry(key).or_insert(0);
        *users += 1;
        if *users == 1 {
            let name = super::names::lb_chain(&key);
            self.journal_chain(&name);
            self.table.chains.insert(name, lb_chain(self.ctx.words, key)?);
        }
        Ok(())
    }

    /// A ClusterIP frontend of the current port is found by its endpoint count, which leads
    /// it to the `lb-*` chain `key` (`super::dispatch`).
    pub(super) fn by_count(&mut self, key: LbKey) {
        self.record().by_count.push(key);
        let users = self.index.by_count.entry(key).or_insert(0);
        *users += 1;
        self.counts_changed |= *users == 1;
    }

    /// Makes a set that no service port holds (its elements belong to the table as a whole)
    /// hold exactly `keys`, journaling what changes; `owner` names them in conflict messages.
    pub(super) fn fixed_set(&mut self, map: MapName, keys: BTreeSet<Key>, owner: &str) {
        let held: BTreeSet<Key> = self.table.elements.get(&map).into_iter().flat_map(|m| m.keys().cloned()).collect();
        for key in held.difference(&keys) {
            self.journal_element(map, key);
            self.table.release(map, key);
        }
        let owner: Arc<str> = Arc::from(owner);
        for key in keys.difference(&held) {
            self.journal_element(map, key);
            self.table.insert(map, key.clone(), Value::None, &owner);
        }
    }

    fn journal_element(&mut self, map: MapName, key: &Key) {
        if let Some(j) = &mut self.journal {
            j.elements.entry((map, key.clone())).or_insert_with(|| self.table.value(map, key).cloned());
        }
    }

    fn journal_chain(&mut self, name: &str) {
        if let Some(j) = &mut self.journal {
            j.chains.entry(name.to_string()).or_insert_with(|| self.table.chains.get(name).cloned());
        }
    }

    /// The value a slot had before this render (kept so endpoints keep their slots).
    pub(super) fn previous_value(&self, map: MapName, key: &Key) -> Option<&Value> {
        if let Some(j) = &self.journal
            && let Some(old) = j.elements.get(&(map, key.clone()))
        {
            return old.as_ref();
        }
        self.ctx.previous?.value(map, key)
    }

    /// Claims a frontend for the current port. The first claimant in model order keeps it; a
    /// later one is warned about and left out there, so two Services that collide cannot break
    /// each other. A port that takes a frontend from its holder makes the holder render again.
    pub(super) fn claim(&mut self, key: &Key) -> bool {
        let Some((id, _)) = &self.current else { return false };
        let id = id.clone();
        let claimants = self.index.claims.entry(key.clone()).or_insert_with(|| Vec::with_capacity(1));
        let holder = claimants.first().cloned();
        if let Err(at) = claimants.binary_search(&id) {
            claimants.insert(at, id.clone());
        }
        let won = claimants.first() == Some(&id);
        let owner = self.record().owner.clone();
        match holder {
            Some(h) if h != id && won => {
                // The holder loses the frontend, and the other losers' warnings name a new holder.
                let others = self.index.claims.get(key).into_iter().flatten().filter(|c| **c != id);
                self.rerender.extend(others.cloned());
            }
            Some(h) if !won => {
                let first = self.index.ports.get(&h).map_or_else(|| owner.clone(), |r| r.owner.clone());
                let what = match key {
                    Key::ProtoPort(proto, port) => format!("node port {port}/{proto}"),
                    Key::IpProtoPort(ip, proto, port) => format!("{ip} port {port}/{proto}"),
                    other => format!("{other:?}"),
                };
                self.warn(format!("skipping {what} for {owner}: already used by {first}"));
            }
            _ => {}
        }
        if !self.record().claims.iter().any(|(k, _)| k == key) {
            self.record().claims.push((key.clone(), won));
        }
        won
    }
}

impl Builder<'_> {
    /// Takes a port's share out of the table. Whoever claimed a frontend it held renders
    /// again, since it may hold that frontend now.
    pub(super) fn remove_port(&mut self, id: &PortId) {
        let Some(record) = self.index.ports.remove(id) else { return };
        self.index.warned.remove(id);
        for name in &record.chains {
            self.journal_chain(name);
            self.table.chains.remove(name);
        }
        for (name, group) in &record.sets {
            if let Some(j) = &mut self.journal {
                j.sets.entry(name.clone()).or_insert_with(|| self.table.affinity_maps.get(name).cloned());
            }
            if let Some(groups) = self.table.affinity_maps.get_mut(name) {
                if let Some(at) = groups.iter().position(|g| g == group) {
                    groups.remove(at);
                }
                if groups.is_empty() {
                    self.table.affinity_maps.remove(name);
                }
            }
        }
        for (runs, first, run) in record.elements {
            // Only slot keys have runs longer than one.
            for key in (0..run).map(|i| first.slot_plus(i).unwrap_or_else(|| first.clone())) {
                let map = runs.holding(&key);
                self.journal_element(map, &key);
                self.contested |= self.index.contested.contains(&(map, key.clone()));
                self.table.release(map, &key);
            }
        }
        for key in record.lb {
            let users = self.index.lb.entry(key).or_insert(1);
            *users -= 1;
            if *users == 0 {
                self.index.lb.remove(&key);
                let name = super::names::lb_chain(&key);
                self.journal_chain(&name);
                self.table.chains.remove(&name);
            }
        }
        for key in record.by_count {
            let users = self.index.by_count.entry(key).or_insert(1);
            *users -= 1;
            if *users == 0 {
                self.counts_changed = true;
                self.index.by_count.remove(&key);
            }
        }
        for (key, won) in record.claims {
            let Some(claimants) = self.index.claims.get_mut(&key) else { continue };
            claimants.retain(|c| c != id);
            if won {
                // The next claimant takes the frontend; the rest name it in their warnings.
                self.rerender.extend(claimants.iter().cloned());
            }
            if claimants.is_empty() {
                self.index.claims.remove(&key);
            }
        }
    }

    /// Brings the dispatch by endpoint count (`super::dispatch`) up to the counts that
    /// ClusterIPs are found by, journaling the chains that change.
    fn dispatch(&mut self) -> Result<(), RenderError> {
        if !self.counts_changed {
            return Ok(());
        }
        let wanted = super::dispatch::chains(self.ctx.words, self.index.by_count.keys().copied())?;
        let from = std::ops::Bound::Included(super::names::chain::DISPATCH);
        let ours = self.table.chains.range::<str, _>((from, std::ops::Bound::Unbounded)).map(|(name, _)| name);
        let stale: Vec<String> = ours
            .take_while(|name| name.starts_with(super::names::chain::DISPATCH))
            .filter(|name| super::names::is_dispatch_chain(name) && !wanted.contains_key(*name))
            .cloned()
            .collect();
        for name in stale {
            self.journal_chain(&name);
            self.table.chains.remove(&name);
        }
        for (name, body) in wanted {
            if self.table.chains.get(&name) != Some(&body) {
                self.journal_chain(&name);
                self.table.chains.insert(name, body);
            }
        }
        Ok(())
    }

    /// The finished table (its warnings: the context's, then each port's in model order), the
    /// index to update it by later, and the journal of an update.
    pub(super) fn finish(mut self) -> Result<(Table, Index, Option<Journal>), RenderError> {
        self.dispatch()?;
        let turns = self.table.elements.keys().any(|m| matches!(m, MapName::Turns(_)));
        if let Some(j) = self.journal.as_mut().filter(|_| self.table.fixed.turns != turns) {
            j.fixed_changed = true;
        }
        self.table.fixed.turns = turns;
        let mut warnings = self.ctx.warnings.clone();
        let warned = self.index.warned.iter().filter_map(|id| self.index.ports.get(id));
        warnings.extend(warned.flat_map(|r| r.warnings.iter().cloned()));
        self.table.warnings = warnings;
        Ok((self.table, self.index, self.journal))
    }
}
