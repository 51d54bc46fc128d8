//! The rendered desired state kept between syncs, and its update: only the service ports a
//! change touched are taken out and rendered again, so a sync's cost follows the change, not
//! the size of the cluster.

use super::builder::{Builder, Index, Journal, PortId};
use super::key::Key;
use super::maps::MapName;
use super::ruleset::{Entry, Ruleset, Value};
use super::{NodePorts, RenderError, context};
use crate::config::Config;
use crate::model::{Changes, Family, Model, ServicePort};
use crate::topology::categorize_endpoints;
use std::collections::BTreeSet;
use std::sync::Arc;

/// How the rendered state changed in an update, for the applier to turn into a transaction.
#[derive(Debug)]
pub enum Update {
    /// Rendered from scratch with nothing to compare against: replace the tables.
    Replaced,
    /// Rendered again whole (the node or the host's addresses changed, or a change set touched
    /// most Services); this was the state before.
    Rebuilt(Ruleset),
    /// Updated in place; per table (in order), the old values of what was touched.
    Patched(Vec<Journal>),
}

impl Update {
    /// How many set and map elements a sync of this update writes or deletes: those touched
    /// when patched, those that differ when rebuilt, else every element of `desired`.
    pub fn elements(&self, desired: &Ruleset) -> usize {
        match self {
            Update::Patched(journals) => journals.iter().map(|j| j.elements.len()).sum(),
            Update::Rebuilt(old) if old.tables.len() == desired.tables.len() => {
                old.tables.iter().zip(&desired.tables).map(|(o, n)| super::element_changes(o, n).len()).sum()
            }
            Update::Replaced | Update::Rebuilt(_) => desired.element_count(),
        }
    }
}

/// Both tables' desired state, with the record of which service port put what where.
#[derive(Debug, Clone)]
pub struct Rendered {
    ruleset: Ruleset,
    indexes: Vec<Index>,
}

impl Rendered {
    /// Renders `model` whole. Endpoints keep the map slots they had in `previous`.
    pub fn build(model: &Model, cfg: &Config, previous: Option<&Ruleset>) -> Result<Rendered, RenderError> {
        let mut ruleset = Ruleset { tables: Vec::new() };
        let mut indexes = Vec::new();
        for family in Family::ALL {
            let prev = previous.and_then(|r| r.tables.iter().find(|t| t.family == family));
            let ctx = context(model, cfg, family, prev);
            let mut b = Builder::new(&ctx);
            if let NodePorts::Ips(ips) = &ctx.nodeports {
                for ip in ips {
                    b.table.insert(MapName::NodeportIps, Key::Ip(*ip), Value::None, &Arc::from("node"));
                }
            }
            render_service_cidrs(&mut b, model);
            for (service, ports) in &model.services {
                // Walked as held, not looked up again by id; a port of another family only
                // (half of a single-stack cluster's ports) costs no id.
                for (i, sp) in ports.iter().enumerate().filter(|(_, sp)| serves(sp, family)) {
                    render_found(&mut b, model, (service.clone(), i as u32), sp)?;
                }
            }
            let (table, index, _) = b.finish()?;
            ruleset.tables.push(table);
            indexes.push(index);
        }
        Ok(Rendered { ruleset, indexes })
    }

    /// The desired state.
    pub fn ruleset(&self) -> &Ruleset {
        &self.ruleset
    }

    /// The desired state, without the record.
    pub fn into_ruleset(self) -> Ruleset {
        self.ruleset
    }

    /// Renders `model` again whole, endpoints keeping their slots; the state before is handed
    /// back, for the applier to send only the difference. On an error the state has lost its
    /// record and must not be updated again (the sync loop drops it and renders from scratch).
    pub fn rebuild(&mut self, model: &Model, cfg: &Config) -> Result<Update, RenderError> {
        // The old record is not needed for the difference: dropped before the new one is
        // built, so a rebuild holds one record and two rulesets at its peak, not two of each.
        self.indexes = Vec::new();
        let old = std::mem::replace(self, Rendered::build(model, cfg, Some(&self.ruleset))?);
        Ok(Update::Rebuilt(old.ruleset))
    }

    /// Brings the state up to `model` after `changes`: the touched Services' ports (and any
    /// port whose frontend claims they affect) and the ServiceCIDRs' set are rendered again in
    /// place, unless this node or the host's addresses changed, which renders everything again.
    pub fn update(&mut self, model: &Model, cfg: &Config, changes: &Changes) -> Result<Update, RenderError> {
        if changes.global {
            return self.rebuild(model, cfg);
        }
        let mut journals = Vec::new();
        for (i, family) in Family::ALL.into_iter().enumerate() {
            let ctx = context(model, cfg, family, None);
            let table = std::mem::replace(&mut self.ruleset.tables[i], super::Table::new(family, ctx.fixed()));
            let index = std::mem::take(&mut self.indexes[i]);
            // A Service's port of five endpoints touches about eight elements each time.
            let mut b = Builder::resume(&ctx, table, index, changes.services.len() * 8);
            if changes.service_cidrs {
                render_service_cidrs(&mut b, model);
            }
            let outcome = patch(&mut b, model, changes);
            let (table, index, journal) = b.finish()?;
            self.ruleset.tables[i] = table;
            self.indexes[i] = index;
            journals.push(journal.unwrap_or_default());
            if !outcome? {
                // Two ports disagree on an element; render whole so the rules' order decides,
                // from the state before this update, so endpoints keep their map slots.
                let before = undone(&self.ruleset, &journals);
                *self = Rendered::build(model, cfg, Some(&before))?;
                return Ok(Update::Replaced);
            }
        }
        Ok(Update::Patched(journals))
    }
}

/// `ruleset` as it was before the updates `journals` (per table, in order) recorded: the old
/// chain bodies, affinity sets and element values put back. Owners are not kept (a rebuild
/// reads only values from it).
fn undone(ruleset: &Ruleset, journals: &[Journal]) -> Ruleset {
    let mut before = ruleset.clone();
    let nobody: Arc<str> = Arc::from("");
    for (table, journal) in before.tables.iter_mut().zip(journals) {
        for (name, body) in &journal.chains {
            match body {
                Some(b) => table.chains.insert(name.clone(), b.clone()),
                None => table.chains.remove(name),
            };
        }
        for (name, groups) in &journal.sets {
            match groups {
                Some(g) => table.affinity_maps.insert(name.clone(), g.clone()),
                None => table.affinity_maps.remove(name),
            };
        }
        for ((map, key), value) in &journal.elements {
            let entries = table.elements.entry(*map).or_default();
            match value {
                Some(v) => {
                    entries.insert(key.clone(), Entry { value: v.clone(), owner: nobody.clone(), refs: 1 });
                }
                None => {
                    entries.remove(key);
                }
            }
        }
    }
    before
}

/// Renders the changed Services' ports again, then every port a frontend hand-over touched,
/// until none is left; false when an element conflict (or a hand-over
/// that does not settle) needs a rebuild.
fn patch(b: &mut Builder, model: &Model, changes: &Changes) -> Result<bool, RenderError> {
    // The changed Services' ports, in order (the Services come sorted): a list, since a tree of
    // 30,000 ports compared by name was a tenth of a patch of every Service.
    let mut todo: Vec<PortId> = Vec::new();
    for service in &changes.services {
        let now = model.services.get(service).map_or(0, Vec::len) as u32;
        let recorded = b.ports_of(service).into_iter().map(|(_, i)| i).filter(|i| *i >= now);
        let mut ports: Vec<u32> = (0..now).chain(recorded).collect();
        ports.sort_unstable();
        ports.dedup();
        todo.extend(ports.into_iter().map(|i| (service.clone(), i)));
    }
    // Ports a hand-over made to render again, taken in the same order as the list.
    let mut again: BTreeSet<PortId> = BTreeSet::new();
    let mut todo = todo.into_iter().peekable();
    // Hand-overs settle quickly; a bound guards against a cycle nobody foresaw.
    let mut budget = 4 * todo.len() + 64;
    loop {
        let id = match (todo.peek(), again.first()) {
            (Some(next), Some(first)) if first <= next => {
                let id = again.pop_first();
                if id.as_ref() == Some(next) {
                    todo.next();
                }
                id
            }
            (Some(_), _) => todo.next(),
            (None, _) => again.pop_first(),
        };
        let Some(id) = id else { return Ok(true) };
        budget = match budget.checked_sub(1) {
            Some(left) => left,
            None => return Ok(false),
        };
        b.remove_port(&id);
        render_port(b, model, id)?;
        again.extend(b.rerender.drain(..));
        if b.contested {
            return Ok(false);
        }
    }
}

/// Makes `service-cidrs` hold the model's ranges of the builder's family. They are elements of
/// an interval set, which the rule in `cluster-ips-check` matches, so a ServiceCIDR coming or
/// going changes elements alone: a partial sync, through `nft` (interval elements are written
/// as text, which `nft` splits into the interval ends the kernel stores), with no chain touched.
fn render_service_cidrs(b: &mut Builder, model: &Model) {
    let keys = model.service_cidrs(b.ctx.family).into_iter().map(Key::Cidr).collect();
    b.fixed_set(MapName::ServiceCidrs, keys, "ServiceCIDR");
}

/// Renders one port of the model, if it exists.
fn render_port(b: &mut Builder, model: &Model, id: PortId) -> Result<(), RenderError> {
    match model.services.get(&id.0).and_then(|ports| ports.get(id.1 as usize)) {
        Some(sp) if serves(sp, b.ctx.family) => render_found(b, model, id, sp),
        _ => Ok(()),
    }
}

/// Whether `sp` has a ClusterIP of `family`: a port without one puts nothing in that
/// family's table, not worth its endpoints' lookup, nor a record (half of a single-stack
/// cluster's render).
fn serves(sp: &ServicePort, family: Family) -> bool {
    sp.cluster_ips.iter().any(|ip| Family::of(ip) == family)
}

/// Renders port `id` of the model, `sp`, served in the builder's family.
fn render_found(b: &mut Builder, model: &Model, id: PortId, sp: &ServicePort) -> Result<(), RenderError> {
    let endpoints = model.endpoints(&sp.name, b.ctx.family);
    let zone = b.ctx.node.and_then(|n| n.zone.as_deref());
    let cat = categorize_endpoints(&endpoints, sp, &b.ctx.cfg.node_name, zone);
    b.add_port(id, sp, &cat)
}
