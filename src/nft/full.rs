//! Full syncs, each one kernel transaction built in-process: where the tables exist, every
//! rule and map written anew in place (the affinity sets, with their entries, stay), and
//! otherwise, or when that fails, both tables replaced. Elements go from the ruleset itself
//! into the same batch as the compiled rules; the guard's notifications are paused meanwhile.

use super::compile::compile;
use super::wire::Batch;
use super::{Applier, NftError, SyncKind, SyncReport};
use crate::model::Family;
use crate::netlink;
use crate::netlink::TableObject;
use crate::render::{self, Foreign, Found, MapName, Ruleset, TABLE_NAME};

impl Applier {
    /// Brings the tables of `scope` to `desired` whatever they hold: builds them in stages
    /// when none serves packets yet (`staged`), refreshes them in place when they do
    /// (tampering included: whatever someone else added goes), replaces them in one
    /// transaction when the refresh fails.
    pub(super) fn full(
        &mut self,
        desired: &Ruleset,
        scope: &[Family],
        deleted_chains: usize,
    ) -> Result<SyncReport, NftError> {
        if !self.serving(scope)? {
            return self.staged(desired, scope, deleted_chains);
        }
        match self.refresh(desired, scope, deleted_chains) {
            Ok(report) => return Ok(report),
            // A family refused before is retried quietly: the sync loop said it once.
            Err(e) if scope.iter().all(|f| self.refused.contains(f)) => {
                log::debug!("rewriting the tables in place failed again, replacing them: {e}")
            }
            Err(e) => log::warn!("rewriting the tables in place failed, replacing them: {e}"),
        }
        let script = render::full_sync_script_of(desired, &self.node, scope)?;
        let mut batch = Batch::new();
        self.forget(scope);
        compile(&script, &mut self.schema, &mut batch)?;
        add_elements(&mut batch, desired, scope);
        self.stale.retain(|(f, _), _| !scope.contains(f));
        let report = self.send_whole(SyncKind::Full, batch, script, deleted_chains)?;
        self.sizes.built(desired, scope);
        Ok(report)
    }

    /// Forgets the sets of `scope`'s tables, which a full sync declares anew.
    pub(super) fn forget(&mut self, scope: &[Family]) {
        for family in scope {
            self.schema.forget(*family);
        }
    }

    /// Brings the tables of `scope`, which serve packets, to `desired`: sends what differs
    /// from what they hold (`reconcile`), or, when that cannot be told as changes, rewrites
    /// them in place. The periodic full sync, a restart over our own tables, and the repair
    /// of the tables.
    pub(super) fn refresh(
        &mut self,
        desired: &Ruleset,
        scope: &[Family],
        deleted_chains: usize,
    ) -> Result<SyncReport, NftError> {
        match self.reconcile(desired, scope, deleted_chains, true)? {
            Some(report) => Ok(report),
            None => self.rewrite(desired, scope, deleted_chains),
        }
    }

    /// Rewrites every rule in place, deletes whatever someone else added to the tables, and
    /// declares every map of ours anew (sized for its elements) and fills it; the affinity
    /// sets stay, with their entries. Only the tables of `scope` are touched.
    fn rewrite(&mut self, desired: &Ruleset, scope: &[Family], deleted_chains: usize) -> Result<SyncReport, NftError> {
        let found = self.found(desired, scope)?;
        let script = render::refresh_script(desired, &self.node, scope, &found)?;
        let mut batch = Batch::new();
        self.forget(scope);
        compile(&script, &mut self.schema, &mut batch)?;
        // What the script cannot delete goes next, once the script has dropped the rules and
        // sets that used it.
        for (t, found) in desired.tables.iter().filter(|t| scope.contains(&t.family)).zip(&found) {
            for f in found.foreign.iter().filter(|f| f.kind.nft_words().is_none()) {
                if let Some(kind) = f.kind.object_type() {
                    batch.delete_object(t.family, TABLE_NAME, kind, f.handle);
                }
            }
        }
        add_elements(&mut batch, desired, scope);
        let report = self.send_whole(SyncKind::Refresh, batch, script, deleted_chains)?;
        self.sizes.built(desired, scope);
        // A chain flushed as stale and declared again by this refresh is in use once more.
        self.stale.retain(|(family, chain), _| {
            !scope.contains(family) || !desired.tables.iter().any(|t| t.family == *family && t.declares_chain(chain))
        });
        Ok(report)
    }

    /// Sends a full sync's batch as one transaction with the guard's notifications paused.
    fn send_whole(
        &mut self,
        kind: SyncKind,
        batch: Batch,
        script: String,
        deleted_chains: usize,
    ) -> Result<SyncReport, NftError> {
        let (bytes, lines) = batch.finish_with_lines();
        let unsure = self.quietly(&bytes).map_err(|e| lines.explain(e, &script))?;
        self.schema.sent();
        let transactions = 1;
        Ok(SyncReport {
            kind,
            bytes: bytes.len(),
            elements: None,
            transactions,
            script,
            deleted_chains,
            unsure,
            refused: Vec::new(),
        })
    }

    /// Sends `batch` with the guard's notifications paused; true when another process
    /// committed meanwhile (the generation moved by more than our one transaction).
    fn quietly(&self, batch: &[u8]) -> Result<bool, NftError> {
        super::staged::counting(self.quiet.as_deref(), || {
            self.own.add(self.sender.port()?);
            self.sender.send(batch)?;
            Ok(1)
        })
    }

    /// What each of our tables holds that a refresh must know of: what someone else added
    /// (everything but the chains and sets `desired` declares and our own stale chains, which
    /// are deleted later, when the kernel no longer holds them busy), and which of our maps
    /// are there to be declared anew. Only names of ours are compared; the others are only
    /// logged.
    fn found(&self, desired: &Ruleset, scope: &[Family]) -> Result<Vec<Found>, NftError> {
        let mut sock = netlink::Socket::open()?;
        let mut all = Vec::new();
        let ours_static: Vec<String> = MapName::all().iter().map(MapName::to_string).collect();
        for t in desired.tables.iter().filter(|t| scope.contains(&t.family)) {
            let ours = |o: &netlink::Listed| match o.kind {
                TableObject::Chain => t.declares_chain(&o.name) || self.stale.contains_key(&(t.family, o.name.clone())),
                TableObject::Set => t.declares_set(&o.name),
                TableObject::Flowtable | TableObject::Stateful(_) => false,
            };
            let mut found = Found::default();
            for o in sock.table_objects(netlink::NfFamily::from(t.family), TABLE_NAME)? {
                if o.kind == TableObject::Set && ours_static.contains(&o.name) {
                    found.maps.push(o.name);
                } else if !ours(&o) {
                    let fam = render::words(t.family).fam;
                    let earlier_map = o.kind == TableObject::Set && render::unparted_endpoint_map(&o.name);
                    if render::named_ours(&o.name) || earlier_map {
                        log::debug!("deleting {} {:?} from {fam} {TABLE_NAME}: ours, no longer used", o.kind, o.name);
                    } else {
                        log::warn!(
                            "deleting {} {:?} (handle {}) from {fam} {TABLE_NAME}: not ours",
                            o.kind,
                            o.name,
                            o.handle
                        );
                    }
                    found.foreign.push(Foreign { kind: o.kind, handle: o.handle });
                }
            }
            all.push(found);
        }
        Ok(all)
    }
}

/// Adds every element of `desired`'s tables of `scope` to `batch`, endpoint maps first, so a
/// dispatch element never leads to slots not filled yet.
fn add_elements(batch: &mut Batch, desired: &Ruleset, scope: &[Family]) {
    let mut maps: Vec<MapName> = MapName::all();
    maps.sort_by_key(|m| !matches!(m, MapName::Endpoints(..) | MapName::NodeportEndpoints(..)));
    for t in desired.tables.iter().filter(|t| scope.contains(&t.family)) {
        for map in &maps {
            if let Some(entries) = t.elements.get(map) {
                batch.elements(t.family, TABLE_NAME, map, true, entries.iter().map(|(k, e)| (k, &e.value)));
            }
        }
    }
}
