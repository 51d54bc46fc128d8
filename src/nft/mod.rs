//! Applying rulesets to the kernel: full and partial syncs, each one nf_tables transaction
//! built in-process (`compile` for the templates' text, `wire` for elements), stale-chain
//! cleanup, and what was applied, kept in memory so no sync lists the table.

mod affinity;
pub mod cleanup;
pub mod compile;
mod diff;
pub(crate) mod element;
mod error;
pub mod exec;
mod families;
mod full;
pub mod guard;
pub mod kdiff;
pub mod owners;
mod read;
mod reconcile;
mod rehash;
mod report;
mod sizes;
mod split;
mod staged;
pub mod wire;

pub use error::NftError;
pub use rehash::{REHASH_STEP, REHASHED};
pub use report::{Resync, SyncKind, SyncReport};
pub use sizes::GROW_IN_PLACE;
pub use split::CUT_CHANGES;
pub use staged::STAGE_ELEMENTS;

use crate::model::Family;
use crate::netlink;
use crate::netlink::send::Sender;
use crate::render::{self, Ruleset, Update};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Chains no longer used are deleted only this long after they were flushed: kernels before
/// 6.2 keep a chain busy for a moment after the last map element pointing to it went.
pub const STALE_CHAIN_DELAY: Duration = Duration::from_secs(1);

// Here rather than in `netlink`, which knows nothing of the model: the proxy's families are
// nf_tables' `ip` and `ip6`.
impl From<Family> for netlink::NfFamily {
    fn from(family: Family) -> netlink::NfFamily {
        match family {
            Family::V4 => netlink::NfFamily::Ip,
            Family::V6 => netlink::NfFamily::Ip6,
        }
    }
}

/// The netlink port ids of the sockets the proxy commits its transactions on, so their change
/// notifications are not taken for tampering. (A notification names the committing socket's
/// port whatever PID namespace the proxy runs in; the thread id it also names is the initial
/// namespace's, which a containerized proxy cannot know.)
#[derive(Debug, Default)]
pub struct OwnPorts(Mutex<Vec<u32>>);

impl OwnPorts {
    /// Remembers a port (the last few are kept).
    pub fn add(&self, port: u32) {
        if let Ok(mut v) = self.0.lock()
            && !v.contains(&port)
        {
            if v.len() >= 64 {
                v.remove(0);
            }
            v.push(port);
        }
    }

    /// Whether `port` is one of ours.
    pub fn contains(&self, port: u32) -> bool {
        self.0.lock().map(|v| v.contains(&port)).unwrap_or(false)
    }
}

/// A partial transaction: its text, its batch (with the script lines its messages came from,
/// in `compiled`), and the chains it leaves stale and takes back into use.
struct Partial {
    script: String,
    /// Its transactions: one, or for a big one several (`split`), each with the lines of
    /// `compiled` its messages came from.
    batches: Vec<(Vec<u8>, wire::Lines)>,
    compiled: String,
    /// The families whose tables it changes.
    families: Vec<Family>,
    flushed: Vec<(Family, String)>,
    reused: Vec<(Family, String)>,
    /// The maps its first transaction declares larger.
    grown: Vec<sizes::Growth>,
    /// The maps rehashed before it (`rehash`).
    rehash: Vec<sizes::Growth>,
}

/// What a partial sync would need to send.
enum Plan {
    /// Nothing changed.
    Nothing,
    /// Only a full sync can express the change.
    Full,
    /// These changes.
    Partial(Partial),
}

/// Applies desired rulesets and remembers, per family, whether the kernel holds the last one.
pub struct Applier {
    node: String,
    /// Families whose table holds the last desired state: only these get partial syncs.
    in_sync: BTreeSet<Family>,
    /// Families whose last sync the kernel refused: their retries log their trouble quietly
    /// (the sync loop says it once).
    refused: BTreeSet<Family>,
    stale: BTreeMap<(Family, String), Instant>,
    own: Arc<OwnPorts>,
    quiet: Option<Arc<guard::Quiet>>,
    sender: Sender,
    /// The sets the kernel holds, for rules compiled between full syncs.
    schema: compile::Schema,
    sweeper: affinity::Sweeper,
    /// The sizes the kernel's maps are declared with: a partial sync that would pass one
    /// declares the map larger first.
    sizes: sizes::Sizes,
    /// The tables being read ahead of the first sync (`reading_ahead`).
    ahead: Option<read::ReadAhead>,
}

impl Applier {
    /// An applier for node `node` that knows nothing applied yet (its first sync is full).
    pub fn new(node: &str, own: Arc<OwnPorts>) -> Applier {
        let sender = Sender::default();
        let schema = compile::Schema::default();
        let (stale, sizes, sweeper) = (BTreeMap::new(), sizes::Sizes::default(), affinity::Sweeper::default());
        let (in_sync, refused) = (BTreeSet::new(), BTreeSet::new());
        let ahead = None;
        Applier {
            node: node.to_string(),
            in_sync,
            refused,
            stale,
            own,
            quiet: None,
            sender,
            schema,
            sweeper,
            sizes,
            ahead,
        }
    }

    /// Starts reading the tables now, on a thread of its own, for the first sync to compare
    /// against: over the tables an earlier run left, that read overlaps listing the cluster.
    pub fn reading_ahead(mut self) -> Applier {
        match read::ReadAhead::start() {
            Ok(ahead) => self.ahead = Some(ahead),
            Err(e) => log::debug!("cannot read the tables ahead: {e}"),
        }
        self
    }

    /// Whether a partial sync may declare a map larger in place (the kernel's
    /// `requirements::SET_SIZE_UPDATE`): without it, a map past its size takes a full sync.
    pub fn growing_maps(mut self, yes: bool) -> Applier {
        self.sizes.in_place = yes;
        self
    }

    /// Pauses the guard's notifications around full syncs.
    pub fn with_quiet(mut self, quiet: Arc<guard::Quiet>) -> Applier {
        self.quiet = Some(quiet);
        self
    }

    fn try_sync(
        &mut self,
        desired: &Ruleset,
        update: &Update,
        resync: Resync,
        scope: &[Family],
    ) -> Result<SyncReport, NftError> {
        let deleted_chains = self.delete_stale_chains(scope).unwrap_or_else(|e| {
            log::warn!("deleting stale chains failed, will retry: {e}");
            0
        });
        let plan = match resync {
            _ if !scope.iter().all(|f| self.in_sync.contains(f)) => Plan::Full,
            Resync::Replace => Plan::Full,
            // Stale chains stay listed: the refresh flushed them again; they are deleted later.
            Resync::Refresh => return self.refresh(desired, scope, deleted_chains),
            Resync::Check => {
                // The changes the sync carries go as a partial sync would send them; the check
                // reads no element, so it cannot.
                let changes = self.try_sync(desired, update, Resync::Changes, scope)?;
                let checked = self.check(desired, scope, 0)?;
                return Ok(families::merge(changes, checked));
            }
            Resync::Changes => self.plan(desired, update, scope)?,
        };
        let part = match plan {
            Plan::Full => return self.full(desired, scope, deleted_chains),
            Plan::Nothing => {
                let report = SyncReport {
                    kind: SyncKind::Unchanged,
                    bytes: 0,
                    transactions: 0,
                    elements: None,
                    script: String::new(),
                    deleted_chains,
                    unsure: false,
                    refused: Vec::new(),
                };
                return Ok(report);
            }
            Plan::Partial(part) => part,
        };
        self.send_partial(part, SyncKind::Partial, deleted_chains)
    }

    /// Sends `part`'s transactions in order, and notes the chains it left stale or took back.
    /// One the kernel refuses ends the sync with an error. Those before it stay (each
    /// frontend as one generation or the next); the tables then hold neither what was applied
    /// nor what was asked, so their families are forgotten, and their next sync (which
    /// `sync_families` tries at once, each family alone) is full: it compares with what the
    /// kernel holds and sends the rest.
    fn send_partial(&mut self, part: Partial, kind: SyncKind, deleted_chains: usize) -> Result<SyncReport, NftError> {
        let (rehashed, unsure) = match self.rehash(&part.rehash) {
            Ok(done) => done,
            Err(e) => {
                self.invalidate(&part.families);
                return Err(e);
            }
        };
        self.own.add(self.sender.port()?);
        for (i, (batch, lines)) in part.batches.iter().enumerate() {
            if let Err(e) = self.sender.send(batch) {
                if i > 0 {
                    self.invalidate(&part.families);
                }
                return Err(lines.explain(e, &part.compiled));
            }
        }
        self.schema.sent();
        self.sizes.grown(&part.grown);
        let now = Instant::now();
        for chain in part.flushed {
            self.stale.entry(chain).or_insert(now);
        }
        for chain in &part.reused {
            self.stale.remove(chain);
        }
        let bytes = part.batches.iter().map(|(b, _)| b.len()).sum();
        let (script, transactions) = (part.script, part.batches.len() as u32 + rehashed);
        Ok(SyncReport {
            kind,
            bytes,
            elements: None,
            transactions,
            script,
            deleted_chains,
            unsure,
            refused: Vec::new(),
        })
    }

    /// The partial transaction for `update`, for the tables of `scope`.
    fn plan(&mut self, desired: &Ruleset, update: &Update, scope: &[Family]) -> Result<Plan, NftError> {
        let stale_of = |family: Family| -> BTreeSet<String> {
            self.stale.keys().filter(|(f, _)| *f == family).map(|(_, c)| c.clone()).collect()
        };
        let tables = desired.tables.len();
        let ours = |t: &&render::Table| scope.contains(&t.family);
        // `None`: only a full sync can express the change.
        let diffs: Option<Vec<diff::TableDiff>> = match update {
            Update::Rebuilt(old) if old.tables.len() == tables => old
                .tables
                .iter()
                .zip(desired.tables.iter())
                .filter(|(_, n)| ours(n))
                .map(|(o, n)| if diff::needs_full(o, n) { None } else { diff::diff(o, n, &stale_of(n.family)) })
                .collect(),
            Update::Patched(journals) if journals.len() == tables => desired
                .tables
                .iter()
                .zip(journals)
                .filter(|(t, _)| ours(t))
                .map(|(t, j)| diff::from_journal(t, j, &stale_of(t.family)))
                .collect(),
            Update::Replaced | Update::Rebuilt(_) | Update::Patched(_) => None,
        };
        let Some(diffs) = diffs else { return Ok(Plan::Full) };
        if diffs.iter().all(diff::TableDiff::is_empty) {
            return Ok(Plan::Nothing);
        }
        let grow = self.sizes.growth(desired, scope);
        let families: Vec<Family> = desired.tables.iter().filter(ours).map(|t| t.family).collect();
        Ok(Plan::Partial(self.partial(&diffs, &families, grow)?))
    }

    /// The transactions that make the changes `diffs` (of the tables of `families`): one, or
    /// several of at most `CUT_CHANGES` element changes each when there are more and
    /// `split` may cut them.
    fn partial(
        &mut self,
        diffs: &[diff::TableDiff<'_>],
        families: &[Family],
        grow: sizes::Growths,
    ) -> Result<Partial, NftError> {
        let sizes::Growths { in_place: grown, rehash } = grow;
        let mut flushed = Vec::new();
        let mut reused = Vec::new();
        for (d, family) in diffs.iter().zip(families) {
            flushed.extend(d.stale.iter().map(|c| (*family, c.to_string())));
            reused.extend(d.rewrite.iter().map(|(c, _)| (*family, c.to_string())));
        }
        let (head, tail) = diff::partial_scripts(diffs)?;
        let elements: usize = diffs.iter().map(diff::TableDiff::element_count).sum();
        let stages = if elements > CUT_CHANGES && diffs.iter().all(split::cuttable) {
            split::element_stages(diffs, CUT_CHANGES)
        } else {
            vec![]
        };
        let last = stages.len().saturating_sub(1);
        let mut batch = wire::Batch::new();
        let mut batches = Vec::new();
        compile::compile(&head, &mut self.schema, &mut batch)?;
        for (family, map, size) in &grown {
            compile::grow(&mut self.schema, &mut batch, *family, &map.to_string(), *size)?;
            log::info!("declaring the {} {map} map larger, for {size} elements", render::words(*family).fam);
        }
        if stages.is_empty() {
            diff::element_ops(&mut batch, diffs, families);
        }
        for (i, stage) in stages.iter().enumerate() {
            diff::element_ops(&mut batch, stage, families);
            if i < last {
                batches.push(std::mem::take(&mut batch).finish_with_lines());
            }
        }
        compile::compile_after(&tail, head.lines().count(), &mut self.schema, &mut batch)?;
        batches.push(batch.finish_with_lines());
        let script = diff::partial_script(diffs)?;
        let compiled = head.lines().chain(tail.lines()).collect::<Vec<_>>().join("\n");
        Ok(Partial { script, batches, compiled, families: families.to_vec(), flushed, reused, grown, rehash })
    }

    /// The endpoint slots the tables held when they were read ahead of the first sync (see
    /// `reading_ahead`), for the first render to keep.
    pub fn held_slots(&mut self) -> Option<Ruleset> {
        self.ahead.as_mut()?.slots()
    }

    /// When the oldest stale chain may be deleted.
    pub fn stale_due(&self) -> Option<Instant> {
        self.stale.values().min().map(|at| *at + STALE_CHAIN_DELAY)
    }

    /// Deletes chains of `scope`'s tables flushed at least `STALE_CHAIN_DELAY` ago, in their
    /// own transaction; a failure is logged and retried by a later sync.
    pub fn delete_stale_chains(&mut self, scope: &[Family]) -> Result<usize, NftError> {
        let due: Vec<(Family, String)> = self
            .stale
            .iter()
            .filter(|((f, _), at)| scope.contains(f) && at.elapsed() >= STALE_CHAIN_DELAY)
            .map(|(k, _)| k.clone())
            .collect();
        if due.is_empty() {
            return Ok(0);
        }
        let script = diff::delete_chains_script(&due)?;
        let mut batch = wire::Batch::new();
        compile::compile(&script, &mut self.schema, &mut batch)?;
        let (batch, lines) = batch.finish_with_lines();
        self.own.add(self.sender.port()?);
        self.sender.send(&batch).map_err(|e| lines.explain(e, &script))?;
        for k in &due {
            self.stale.remove(k);
        }
        Ok(due.len())
    }
}
