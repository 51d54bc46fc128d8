//! What the sync loop needs of the node, as a trait: the real one applies through nftables
//! and netlink (`nft::Applier`, implemented here so `nft` needs nothing of `sync`), the
//! tests' is in memory.

use crate::conntrack;
use crate::model::Family;
use crate::nft::{Applier, NftError, Resync, SyncReport, guard};
use crate::render::{Ruleset, Update};
use std::net::IpAddr;
use std::time::Instant;

/// What the sync loop needs of the node: applying rulesets and reading the host's addresses.
/// `nft::Applier` is the real one; tests use an in-memory fake.
pub trait Kernel {
    /// Brings the kernel to `desired` (see `nft::Applier::sync`), leaving the tables of the
    /// families in `hold` as they are; the report names the families the kernel refused.
    fn sync(
        &mut self,
        desired: &Ruleset,
        update: &Update,
        resync: Resync,
        hold: &[Family],
    ) -> Result<SyncReport, NftError>;
    /// What the tables an earlier run left held, as far as a first render keeps it (the
    /// endpoint slots), so that the first sync over them sends only what changed; `None`
    /// when nothing was read.
    fn held_slots(&mut self) -> Option<Ruleset>;
    /// When chains left stale by earlier syncs may be deleted; `None` when none wait.
    fn cleanup_due(&self) -> Option<Instant>;
    /// Deletes the stale chains whose delay has passed; returns how many.
    fn cleanup(&mut self) -> Result<usize, NftError>;
    /// The cheap check after lost notifications: whether the tables look intact.
    fn tables_look_intact(&mut self) -> bool;
    /// The addresses on the host's interfaces.
    fn host_addresses(&mut self) -> std::io::Result<Vec<IpAddr>>;
    /// Deletes the UDP conntrack entries `plan` names (see `conntrack::clear`).
    fn clear_udp_flows(&mut self, plan: &conntrack::Plan) -> Result<conntrack::Report, conntrack::ConntrackError>;
}

impl Kernel for Applier {
    fn sync(
        &mut self,
        desired: &Ruleset,
        update: &Update,
        resync: Resync,
        hold: &[Family],
    ) -> Result<SyncReport, NftError> {
        self.sync_families(desired, update, resync, hold)
    }

    fn held_slots(&mut self) -> Option<Ruleset> {
        Applier::held_slots(self)
    }

    fn cleanup_due(&self) -> Option<Instant> {
        self.stale_due()
    }

    fn cleanup(&mut self) -> Result<usize, NftError> {
        self.delete_stale_chains(&Family::ALL)
    }

    fn tables_look_intact(&mut self) -> bool {
        matches!(guard::tables_look_intact(), Ok(true))
    }

    fn host_addresses(&mut self) -> std::io::Result<Vec<IpAddr>> {
        crate::host::interface_addresses()
    }

    fn clear_udp_flows(&mut self, plan: &conntrack::Plan) -> Result<conntrack::Report, conntrack::ConntrackError> {
        conntrack::clear(plan)
    }
}
