//! What a sync is asked to do and what it reports back (used by `sync`, `observe` and the
//! tests as well as by the applier).

use super::NftError;
use crate::model::Family;

/// What kind of transaction a sync sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncKind {
    /// Both tables replaced.
    Full,
    /// Every rule rewritten and every map refilled in place (the periodic full sync).
    Refresh,
    /// Only changes.
    Partial,
    /// Nothing had changed; nothing was sent.
    Unchanged,
}

/// The outcome of one successful sync.
#[derive(Debug)]
pub struct SyncReport {
    /// Kind of transaction.
    pub kind: SyncKind,
    /// The batch's size (all of them, for a staged build).
    pub bytes: usize,
    /// The elements it sent, when the applier counted them: a refresh that sent only what
    /// differed. Otherwise every element for a full sync, the update's for a partial one.
    pub elements: Option<usize>,
    /// The transactions it took: one, or none when nothing was sent; a staged build's stages.
    pub transactions: u32,
    /// The script compiled into it: a partial sync's with its elements, a full sync's without
    /// (they go from the ruleset straight into the batch).
    pub script: String,
    /// Stale chains deleted before it.
    pub deleted_chains: usize,
    /// Another process committed while notifications were paused for this sync: whether it
    /// touched our tables is unknown, so they should be checked.
    pub unsure: bool,
    /// Families whose part the kernel refused, with why; the others' went through. Their
    /// tables keep what they held; the next sync of each is a full one.
    pub refused: Vec<(Family, NftError)>,
}

/// What a sync is asked to do beyond sending the changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resync {
    /// Only the changes (still a full sync when nothing is known to be applied).
    Changes,
    /// Rewrite every rule and element in place: the periodic full sync, repairing drift that
    /// no notification reported.
    Refresh,
    /// Compare the tables' chains and sets (not their elements) with the kernel's and mend
    /// what differs: after a full sync during which another process committed, unseen.
    Check,
    /// Bring the tables back whatever they hold, after tampering or a failure: a refresh in
    /// place where they exist (everything someone else added goes), else a replacement.
    Replace,
}
