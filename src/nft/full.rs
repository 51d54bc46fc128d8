//! Full syncs: replacing small tables in one transaction, building big ones in steps on a node
//! that has none, and refreshing them in place, with the guard's notifications paused throughout.

use super::{Applier, NftError, SyncKind, SyncReport, netlink, wire};
use crate::model::Family;
use crate::render::{self, Foreign, MapName, ObjectKind, Ruleset, TABLE_NAME};

/// A first sync with more map elements than this is staged: tables first, hooks last.
const STAGED_FIRST_SYNC_ELEMENTS: usize = 10_000;

/// Elements per netlink transaction when several may share one: a few hundred kB of batch, so
/// the proxy never holds the encoding of a whole big table at once.
const ELEMENTS_PER_BATCH: usize = 8192;

/// One step of a full sync.
enum Step<'a> {
    /// An `nft` script: one transaction.
    Nft(String),
    /// Every element but interval sets', in transactions of at most `ELEMENTS_PER_BATCH`
    /// (only before the hooks are attached, where nothing sees a half-filled map).
    Fill(&'a Ruleset),
    /// Every map but interval sets flushed and filled again, each map in one transaction so
    /// traffic never meets it half-filled.
    Refill(&'a Ruleset),
    /// Foreign stateful objects `nft` cannot delete by handle, as (family, `NFT_OBJECT_*`
    /// type, handle), in one transaction.
    DeleteObjects(Vec<(Family, u32, u64)>),
}

impl Applier {
    /// Replaces both tables. A small ruleset is replaced in one `nft` transaction. A big one
    /// is repaired in place when the tables exist (in one transaction `nft` would parse every
    /// element: 391 MB at 30k services), and rebuilt if that fails; on a node without the
    /// tables it is built without hooks, filled over netlink, then hooked.
    pub(super) fn full(&mut self, desired: &Ruleset, deleted_chains: usize) -> Result<SyncReport, NftError> {
        let elements: usize = desired.tables.iter().flat_map(|t| t.elements.values()).map(|m| m.len()).sum();
        if elements <= STAGED_FIRST_SYNC_ELEMENTS {
            let steps = vec![Step::Nft(render::full_sync_script(desired, &self.node)?)];
            self.stale.clear();
            return self.run_steps(SyncKind::Full, steps, deleted_chains);
        }
        if self.tables_exist()? {
            match self.refresh(desired, deleted_chains) {
                Ok(report) => return Ok(report),
                Err(e) => log::warn!("repairing the tables in place failed, rebuilding them: {e}"),
            }
        }
        let (build, attach) = render::staged_full_sync_scripts(desired, &self.node)?;
        self.stale.clear();
        self.run_steps(SyncKind::Staged, vec![Step::Nft(build), Step::Fill(desired), Step::Nft(attach)], deleted_chains)
    }

    /// Rewrites every rule in place, deletes whatever someone else added to the tables, and
    /// refills every map, without `nft` parsing a single map element: the periodic full sync,
    /// and the repair of a big table.
    pub(super) fn refresh(&mut self, desired: &Ruleset, deleted_chains: usize) -> Result<SyncReport, NftError> {
        let foreign = self.foreign(desired)?;
        let mut steps = vec![Step::Nft(render::refresh_script(desired, &self.node, &foreign)?)];
        // What the script cannot delete goes next, once the script has dropped the rules and
        // sets that used it.
        let rest: Vec<(Family, u32, u64)> = (desired.tables.iter().zip(&foreign))
            .flat_map(|(t, found)| found.iter().map(move |f| (t.family, f)))
            .filter(|(_, f)| f.kind.nft_words().is_none())
            .filter_map(|(family, f)| Some((family, f.kind.object_type()?, f.handle)))
            .collect();
        if !rest.is_empty() {
            steps.push(Step::DeleteObjects(rest));
        }
        steps.push(Step::Refill(desired));
        self.run_steps(SyncKind::Refresh, steps, deleted_chains)
    }

    /// What someone else added to each of our tables: everything but the chains and sets
    /// `desired` declares and our own stale chains (deleted later, when the kernel no longer
    /// holds them busy). Only names of ours are compared; the others are only logged.
    fn foreign(&self, desired: &Ruleset) -> Result<Vec<Vec<Foreign>>, NftError> {
        let mut sock = netlink::Socket::open()?;
        let mut all = Vec::new();
        for t in &desired.tables {
            let ours = |o: &netlink::Listed| match o.kind {
                ObjectKind::Chain => t.declares_chain(&o.name) || self.stale.contains_key(&(t.family, o.name.clone())),
                ObjectKind::Set => t.declares_set(&o.name),
                ObjectKind::Flowtable | ObjectKind::Stateful(_) => false,
            };
            let listed = sock.table_objects(netlink::NfFamily::from(t.family), TABLE_NAME)?;
            let found = listed.into_iter().filter(|o| !ours(o)).map(|o| {
                let fam = render::words(t.family).fam;
                log::warn!("deleting {} {:?} (handle {}) from {fam} {TABLE_NAME}: not ours", o.kind, o.name, o.handle);
                Foreign { kind: o.kind, handle: o.handle }
            });
            all.push(found.collect());
        }
        Ok(all)
    }

    fn run_steps(&self, kind: SyncKind, steps: Vec<Step>, deleted_chains: usize) -> Result<SyncReport, NftError> {
        let unsure = self.quietly(&steps)?;
        let netlink = steps.iter().any(|s| !matches!(s, Step::Nft(_)));
        let script = steps.into_iter().filter_map(|s| if let Step::Nft(t) = s { Some(t) } else { None }).collect();
        Ok(SyncReport { kind, netlink, script, deleted_chains, unsure })
    }

    /// Runs `steps` in order with the guard's notifications paused; true when another process
    /// committed meanwhile (the generation moved by more than our transactions).
    fn quietly(&self, steps: &[Step]) -> Result<bool, NftError> {
        let run = || steps.iter().try_fold(0u32, |n, s| Ok::<_, NftError>(n + self.step(s)?));
        let Some(quiet) = &self.quiet else {
            run()?;
            return Ok(false);
        };
        let mut sock = netlink::Socket::open()?;
        let before = sock.generation()?;
        let ours = quiet.during(run)?;
        let after = sock.generation()?;
        Ok(after.wrapping_sub(before) != ours)
    }

    /// Runs one step; returns the transactions it committed.
    fn step(&self, step: &Step) -> Result<u32, NftError> {
        match step {
            Step::Nft(script) => self.apply(script).map(|()| 1),
            Step::Fill(desired) => {
                self.own.add_current_thread();
                send_maps(&self.sender, desired, false)
            }
            Step::Refill(desired) => {
                self.own.add_current_thread();
                send_maps(&self.sender, desired, true)
            }
            Step::DeleteObjects(found) => {
                let mut batch = wire::Batch::new();
                for &(family, kind, handle) in found {
                    batch.delete_object(family, TABLE_NAME, kind, handle);
                }
                self.own.add_current_thread();
                self.sender.send(&batch.finish())?;
                Ok(1)
            }
        }
    }

    fn tables_exist(&self) -> Result<bool, NftError> {
        let mut sock = netlink::Socket::open()?;
        Ok(sock.table_exists(netlink::NfFamily::Ip, TABLE_NAME)?
            || sock.table_exists(netlink::NfFamily::Ip6, TABLE_NAME)?)
    }
}

/// Sends the elements of every map but interval sets; with `flush`, each map is emptied first
/// in the same transaction (a map never spans two; small maps share one). Returns the
/// transactions sent.
fn send_maps(sender: &wire::Sender, desired: &Ruleset, flush: bool) -> Result<u32, NftError> {
    let mut out = Batches { sender, batch: wire::Batch::new(), elements: 0, sent: 0 };
    let mut maps: Vec<MapName> = MapName::all().into_iter().filter(wire::encodable).collect();
    // Endpoint maps first, so a dispatch element never leads to slots not filled yet.
    maps.sort_by_key(|m| !matches!(m, MapName::Endpoints(..) | MapName::NodeportEndpoints(..)));
    for t in &desired.tables {
        for map in &maps {
            let entries = t.elements.get(map);
            let count = entries.map_or(0, |e| e.len());
            let mut elems = entries.into_iter().flatten().map(|(k, e)| (k, &e.value));
            if flush {
                out.make_room(count)?;
                out.batch.flush(t.family, TABLE_NAME, map);
                out.batch.elements(t.family, TABLE_NAME, map, true, elems);
                out.elements += count.max(1);
                continue;
            }
            let mut left = count;
            while left > 0 {
                let part = left.min(ELEMENTS_PER_BATCH);
                out.make_room(part)?;
                out.batch.elements(t.family, TABLE_NAME, map, true, elems.by_ref().take(part));
                out.elements += part;
                left -= part;
            }
        }
    }
    out.make_room(usize::MAX)?;
    Ok(out.sent)
}

/// Netlink transactions sent one after another, each of about `ELEMENTS_PER_BATCH` elements.
struct Batches<'a> {
    sender: &'a wire::Sender,
    batch: wire::Batch,
    elements: usize,
    sent: u32,
}

impl Batches<'_> {
    /// Sends the batch being built if `more` elements would overfill it.
    fn make_room(&mut self, more: usize) -> Result<(), NftError> {
        if self.elements > 0 && self.elements.saturating_add(more) > ELEMENTS_PER_BATCH {
            self.sender.send(&std::mem::take(&mut self.batch).finish())?;
            self.sent += 1;
            self.elements = 0;
        }
        Ok(())
    }
}
