//! One family's trouble does not stop the other's. Both tables go in one transaction while
//! the kernel takes it; when it refuses one (another process owns that table, `flags
//! owner`), each family is tried alone and what the kernel takes is applied, as upstream's
//! proxier per family would. A refused family is retried when the sync loop says (until
//! then it is held: left out of the transaction), each time with a full sync of its own
//! table, since what that table holds is not known then.

use super::{Applier, NftError, Resync, SyncKind, SyncReport};
use crate::model::Family;
use crate::render::{Ruleset, Update};

impl Applier {
    /// Brings the kernel to `desired`, which `update` says how it came from what was applied
    /// last: a full sync when `resync` asks for one, nothing is known to be applied, or the
    /// change needs one; otherwise only the differences. A family the kernel refuses keeps
    /// its previous rules and is named in the report's `refused`, the other family's part
    /// going through alone; an error means nothing was applied. A refused family's next sync
    /// is full.
    pub fn sync(&mut self, desired: &Ruleset, update: &Update, resync: Resync) -> Result<SyncReport, NftError> {
        self.sync_families(desired, update, resync, &[])
    }

    /// As [`Applier::sync`], leaving the tables of the families in `hold` as they are (the
    /// sync loop's refused families whose retry is not due yet).
    pub fn sync_families(
        &mut self,
        desired: &Ruleset,
        update: &Update,
        resync: Resync,
        hold: &[Family],
    ) -> Result<SyncReport, NftError> {
        let scope: Vec<Family> = desired.tables.iter().map(|t| t.family).filter(|f| !hold.contains(f)).collect();
        let behind = scope.iter().filter(|f| !self.in_sync.contains(f)).count();
        // One transaction while the families need the same kind of sync: always, unless one
        // was refused and the other was not.
        let combined = if resync != Resync::Changes || behind == 0 || behind == scope.len() {
            match self.sync_scope(desired, update, resync, &scope) {
                Ok(report) => {
                    self.refused.retain(|f| !scope.contains(f));
                    return Ok(report);
                }
                Err(e) if scope.len() < 2 || !from_kernel(&e) => {
                    self.invalidate(&scope);
                    if from_kernel(&e) {
                        self.refused.extend(&scope);
                    }
                    return Err(e);
                }
                // Nothing of it was applied (or, of a cut partial sync, its families were
                // forgotten, to be synced fully), so each family is tried alone as it would have
                // been: what the other family's table holds is still known.
                Err(e) => {
                    log::debug!("the kernel refused the transaction of both families; trying each alone: {e}");
                    // Each family's own attempt logs a failed refresh quietly: the attempt
                    // of both logged it.
                    self.refused.extend(&scope);
                    Some(e)
                }
            }
        } else {
            None
        };
        self.one_by_one(desired, update, resync, &scope, combined)
    }

    /// Syncs each family of `scope` in a transaction of its own: a refused one keeps its
    /// rules (and its next sync is full), the others go through. `combined` is the error of
    /// the transaction of all of them, if one was tried; it is the error when every family
    /// is refused.
    fn one_by_one(
        &mut self,
        desired: &Ruleset,
        update: &Update,
        resync: Resync,
        scope: &[Family],
        combined: Option<NftError>,
    ) -> Result<SyncReport, NftError> {
        let mut applied: Option<SyncReport> = None;
        let mut refused = Vec::new();
        for family in scope {
            match self.sync_scope(desired, update, resync, &[*family]) {
                Ok(report) => {
                    self.refused.remove(family);
                    applied = Some(match applied {
                        Some(earlier) => merge(earlier, report),
                        None => report,
                    });
                }
                Err(e) => {
                    self.invalidate(&[*family]);
                    self.refused.insert(*family);
                    refused.push((*family, e));
                }
            }
        }
        match applied {
            Some(mut report) => {
                report.refused = refused;
                Ok(report)
            }
            None => match (combined, refused.into_iter().next()) {
                (Some(e), _) | (None, Some((_, e))) => Err(e),
                (None, None) => Ok(nothing()),
            },
        }
    }

    /// Forgets what was applied to the tables of `scope`, so their next sync is full: after a
    /// refused transaction what they hold is not known (another process may own one).
    pub(super) fn invalidate(&mut self, scope: &[Family]) {
        self.in_sync.retain(|f| !scope.contains(f));
        self.stale.retain(|(f, _), _| !scope.contains(f));
        for family in scope {
            self.sweeper.forget(*family);
        }
    }

    /// Brings the tables of `scope` to `desired` in one transaction (see `sync`). On error
    /// the kernel applied none of it; the caller decides what is known then.
    fn sync_scope(
        &mut self,
        desired: &Ruleset,
        update: &Update,
        resync: Resync,
        scope: &[Family],
    ) -> Result<SyncReport, NftError> {
        let report = self.try_sync(desired, update, resync, scope)?;
        self.in_sync.extend(scope);
        if let Err(e) = self.sweeper.after_sync(desired, scope, report.kind, &self.sender, &self.own) {
            log::warn!("sweeping session-affinity entries of gone endpoints failed, will retry: {e}");
        }
        Ok(report)
    }
}

/// Whether `e` came from the kernel (or from talking to it) rather than from building the
/// transaction: only then may a family's part fare differently alone.
fn from_kernel(e: &NftError) -> bool {
    !matches!(e, NftError::Render(_) | NftError::Compile(_) | NftError::Stopped)
}

/// One report for two transactions: of the kind of the one that sent something, or of both
/// kinds, the lesser (full only if both were).
pub(super) fn merge(a: SyncReport, b: SyncReport) -> SyncReport {
    let full = |k: SyncKind| matches!(k, SyncKind::Full | SyncKind::Refresh);
    let kind = match (a.kind, b.kind) {
        (x, y) if x == y => x,
        (SyncKind::Unchanged, x) | (x, SyncKind::Unchanged) => x,
        (x, y) if full(x) && full(y) => SyncKind::Full,
        _ => SyncKind::Partial,
    };
    let script = match (a.script.is_empty(), b.script.is_empty()) {
        (_, true) => a.script,
        (true, false) => b.script,
        (false, false) => format!("{}\n{}", a.script, b.script),
    };
    SyncReport {
        kind,
        bytes: a.bytes + b.bytes,
        transactions: a.transactions + b.transactions,
        elements: a.elements.zip(b.elements).map(|(x, y)| x + y),
        script,
        deleted_chains: a.deleted_chains + b.deleted_chains,
        unsure: a.unsure || b.unsure,
        refused: Vec::new(),
    }
}

/// The report of a sync that had nothing to do.
fn nothing() -> SyncReport {
    SyncReport {
        kind: SyncKind::Unchanged,
        bytes: 0,
        transactions: 0,
        elements: None,
        script: String::new(),
        deleted_chains: 0,
        unsure: false,
        refused: Vec::new(),
    }
}
