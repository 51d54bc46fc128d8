//! Applying rulesets to the kernel: full and partial syncs through the installed `nft`,
//! stale-chain cleanup, and what was applied, kept in memory so no sync lists the table.

pub mod cleanup;
pub mod compile;
mod diff;
pub mod exec;
mod full;
pub mod guard;
pub mod netlink;
pub mod owners;
pub mod wire;

use crate::model::Family;
use crate::render::{RenderError, Ruleset, Update};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Chains no longer used are deleted only this long after they were flushed: kernels before
/// 6.2 keep a chain busy for a moment after the last map element pointing to it went.
pub const STALE_CHAIN_DELAY: Duration = Duration::from_secs(1);

/// Errors talking to nftables.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// `nft` could not be started.
    #[error("cannot run {nft}: {source}")]
    Spawn {
        /// The binary.
        nft: String,
        /// Cause.
        source: std::io::Error,
    },
    /// `nft` refused the transaction; nothing of it was applied.
    #[error("nft rejected the transaction: {message}{}", line.as_ref().map(|l| format!("\\n  failing line: {l}")).unwrap_or_default())]
    Rejected {
        /// nft's message.
        message: String,
        /// The script line the error points at, when nft names one.
        line: Option<String>,
    },
    /// `nft` ran past its time limit and was killed; nothing of it was applied.
    #[error("nft did not finish within {0:?} and was killed")]
    TimedOut(Duration),
    /// The daemon is stopping; the run was ended.
    #[error("stopped: the daemon is shutting down")]
    Stopped,
    /// I/O with `nft` or netlink failed.
    #[error("nft I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The script could not be rendered.
    #[error(transparent)]
    Render(#[from] RenderError),
}

/// What kind of transaction a sync sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// Both tables replaced.
    Full,
    /// A first full sync built without hooks, then hooks attached.
    Staged,
    /// Every rule rewritten and every map refilled in place (the periodic full sync).
    Refresh,
    /// Only changes.
    Partial,
    /// Nothing had changed; nothing was sent.
    Unchanged,
}

/// The outcome of one successful sync.
#[derive(Debug, Clone)]
pub struct SyncReport {
    /// Kind of transaction.
    pub kind: SyncKind,
    /// Sent as one netlink batch of elements rather than through `nft`.
    pub netlink: bool,
    /// The script sent (for a staged sync, both parts).
    pub script: String,
    /// Stale chains deleted before it.
    pub deleted_chains: usize,
    /// Another process committed while notifications were paused for this sync: whether it
    /// touched our tables is unknown, so they should be checked.
    pub unsure: bool,
}

/// What a sync is asked to do beyond sending the changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resync {
    /// Only the changes (still a full sync when nothing is known to be applied).
    Changes,
    /// Rewrite every rule and element in place: the periodic full sync, repairing drift that
    /// no notification reported.
    Refresh,
    /// Replace the tables: after tampering or a failure (a big table is repaired in place).
    Replace,
}

/// Process ids of our own `nft` runs, so their change notifications are not taken for tampering.
#[derive(Debug, Default)]
pub struct OwnPids(Mutex<Vec<u32>>);

impl OwnPids {
    /// Remembers a pid (the last few are kept).
    pub fn add(&self, pid: u32) {
        if let Ok(mut v) = self.0.lock() {
            if v.len() >= 64 {
                v.remove(0);
            }
            v.push(pid);
        }
    }

    /// Whether `pid` was one of ours.
    pub fn contains(&self, pid: u32) -> bool {
        self.0.lock().map(|v| v.contains(&pid)).unwrap_or(false)
    }

    /// Remembers the calling thread, which is about to commit over netlink itself (the
    /// kernel names the committing thread, not the process).
    pub fn add_current_thread(&self) {
        self.add(rustix::thread::gettid().as_raw_nonzero().get() as u32);
    }
}

/// A partial transaction: its `nft` text, a netlink batch when it is elements only, and the
/// chains it leaves stale and takes back into use.
struct Partial {
    script: String,
    batch: Option<Vec<u8>>,
    flushed: Vec<(Family, String)>,
    reused: Vec<(Family, String)>,
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

/// Applies desired rulesets and remembers whether the kernel holds the last one.
pub struct Applier {
    node: String,
    in_sync: bool,
    stale: BTreeMap<(Family, String), Instant>,
    own: Arc<OwnPids>,
    quiet: Option<Arc<guard::Quiet>>,
    sender: wire::Sender,
    limits: exec::Limits,
}

impl Applier {
    /// An applier for node `node` that knows nothing applied yet (its first sync is full).
    pub fn new(node: &str, own: Arc<OwnPids>) -> Applier {
        let sender = wire::Sender::default();
        let limits = exec::Limits::default();
        Applier { node: node.to_string(), in_sync: false, stale: BTreeMap::new(), own, quiet: None, sender, limits }
    }

    /// Bounds every `nft` run by `limits`.
    pub fn with_limits(mut self, limits: exec::Limits) -> Applier {
        self.limits = limits;
        self
    }

    /// Pauses the guard's notifications around full syncs.
    pub fn with_quiet(mut self, quiet: Arc<guard::Quiet>) -> Applier {
        self.quiet = Some(quiet);
        self
    }

    /// Forgets what was applied, so the next sync is full.
    fn invalidate(&mut self) {
        self.in_sync = false;
        self.stale.clear();
    }

    /// Brings the kernel to `desired`, which `update` says how it came from what was applied
    /// last: a full sync when `resync` asks for one, nothing is known to be applied, or the
    /// change needs one; otherwise only the differences. On error the kernel keeps its
    /// previous rules and the next sync is full.
    pub fn sync(&mut self, desired: &Ruleset, update: &Update, resync: Resync) -> Result<SyncReport, NftError> {
        let result = self.try_sync(desired, update, resync);
        match &result {
            Ok(_) => self.in_sync = true,
            Err(_) => self.invalidate(),
        }
        result
    }

    fn try_sync(&mut self, desired: &Ruleset, update: &Update, resync: Resync) -> Result<SyncReport, NftError> {
        let deleted_chains = self.delete_stale_chains().unwrap_or_else(|e| {
            log::warn!("deleting stale chains failed, will retry: {e}");
            0
        });
        let plan = match resync {
            _ if !self.in_sync => Plan::Full,
            Resync::Replace => Plan::Full,
            // Stale chains stay listed: the refresh flushed them again; they are deleted later.
            Resync::Refresh => return self.refresh(desired, deleted_chains),
            Resync::Changes => self.plan(desired, update)?,
        };
        let part = match plan {
            Plan::Full => return self.full(desired, deleted_chains),
            Plan::Nothing => {
                let script = String::new();
                return Ok(SyncReport {
                    kind: SyncKind::Unchanged,
                    netlink: false,
                    script,
                    deleted_chains,
                    unsure: false,
                });
            }
            Plan::Partial(part) => part,
        };
        let netlink = part.batch.is_some();
        match &part.batch {
            Some(batch) => {
                self.own.add_current_thread();
                self.sender.send(batch)?
            }
            None => self.apply(&part.script)?,
        }
        let now = Instant::now();
        for chain in part.flushed {
            self.stale.entry(chain).or_insert(now);
        }
        for chain in &part.reused {
            self.stale.remove(chain);
        }
        Ok(SyncReport { kind: SyncKind::Partial, netlink, script: part.script, deleted_chains, unsure: false })
    }

    /// The partial transaction for `update`.
    fn plan(&self, desired: &Ruleset, update: &Update) -> Result<Plan, NftError> {
        let stale_of = |family: Family| -> BTreeSet<String> {
            self.stale.keys().filter(|(f, _)| *f == family).map(|(_, c)| c.clone()).collect()
        };
        let tables = desired.tables.len();
        // `None`: only a full sync can express the change.
        let diffs: Option<Vec<diff::TableDiff>> = match update {
            Update::Rebuilt(old) if old.tables.len() == tables => old
                .tables
                .iter()
                .zip(&desired.tables)
                .map(|(o, n)| if diff::needs_full(o, n) { None } else { diff::diff(o, n, &stale_of(n.family)) })
                .collect(),
            Update::Patched(journals) if journals.len() == tables => desired
                .tables
                .iter()
                .zip(journals)
                .map(|(t, j)| diff::from_journal(t, j, &stale_of(t.family)))
                .collect(),
            Update::Replaced | Update::Rebuilt(_) | Update::Patched(_) => None,
        };
        let Some(diffs) = diffs else { return Ok(Plan::Full) };
        if diffs.iter().all(diff::TableDiff::is_empty) {
            return Ok(Plan::Nothing);
        }
        let families: Vec<Family> = desired.tables.iter().map(|t| t.family).collect();
        let mut flushed = Vec::new();
        let mut reused = Vec::new();
        for (d, family) in diffs.iter().zip(&families) {
            flushed.extend(d.stale.iter().map(|c| (*family, c.to_string())));
            reused.extend(d.rewrite.iter().map(|(c, _)| (*family, c.to_string())));
        }
        let batch = diffs.iter().all(diff::TableDiff::elements_only).then(|| diff::element_batch(&diffs, &families));
        let script = diff::partial_script(diffs)?;
        Ok(Plan::Partial(Partial { script, batch, flushed, reused }))
    }

    fn apply(&self, script: &str) -> Result<(), NftError> {
        exec::apply(script, &|pid| self.own.add(pid), &self.limits)
    }

    /// When the oldest stale chain may be deleted.
    fn stale_due(&self) -> Option<Instant> {
        self.stale.values().min().map(|at| *at + STALE_CHAIN_DELAY)
    }

    /// Deletes chains flushed at least `STALE_CHAIN_DELAY` ago, in their own transaction; a
    /// failure is logged and retried by a later sync.
    fn delete_stale_chains(&mut self) -> Result<usize, NftError> {
        let due: Vec<(Family, String)> =
            self.stale.iter().filter(|(_, at)| at.elapsed() >= STALE_CHAIN_DELAY).map(|(k, _)| k.clone()).collect();
        if due.is_empty() {
            return Ok(0);
        }
        diff::delete_chains_script(&due).map_err(NftError::from).and_then(|s| self.apply(&s))?;
        for k in &due {
            self.stale.remove(k);
        }
        Ok(due.len())
    }
}

impl crate::sync::Kernel for Applier {
    fn sync(&mut self, desired: &Ruleset, update: &Update, resync: Resync) -> Result<SyncReport, NftError> {
        Applier::sync(self, desired, update, resync)
    }

    fn cleanup_due(&self) -> Option<Instant> {
        self.stale_due()
    }

    fn cleanup(&mut self) -> Result<usize, NftError> {
        self.delete_stale_chains()
    }

    fn tables_look_intact(&mut self) -> bool {
        matches!(guard::tables_look_intact(), Ok(true))
    }

    fn host_addresses(&mut self) -> std::io::Result<Vec<std::net::IpAddr>> {
        crate::host::interface_addresses()
    }

    fn clear_udp_flows(
        &mut self,
        plan: &crate::conntrack::Plan,
    ) -> Result<crate::conntrack::Report, crate::conntrack::ConntrackError> {
        crate::conntrack::clear(plan)
    }
}
