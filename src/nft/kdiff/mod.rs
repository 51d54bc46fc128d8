//! `--dry-run --diff`: what a sync would change in the kernel's tables. The kernel's
//! `ip` and `ip6` tables of the proxy are read over netlink (nothing is written) and compared
//! with the desired state: chains and set declarations as the compiled full-sync script
//! declares them, elements as the desired state holds them, each difference under the
//! service port it belongs to.

mod chains;
mod elements;
mod handles;
mod kernel;
mod read_map;
mod report;
#[cfg(test)]
mod tests;

pub(crate) use chains::{KernelChain, desired_rules};
pub use handles::{HeldRule, RuleNames};
pub(crate) use kernel::{KernelTable, read_with as read_table};
pub(crate) use read_map::{ReadMap, read_map};
pub use report::{Change, Kind, Object, Report, ServiceChanges, Summary};

use crate::model::Family;
use crate::netlink::Socket;
use crate::nft::compile::{self, CompileError, Declared, DeclaredTable};
use crate::render::{self, RenderError, Ruleset, Table};
use chains::ChainDiff;
use elements::{MapDiff, Owned, Owners};
use std::collections::BTreeMap;

/// How many times the tables are read again when another process changed them meanwhile.
const READ_ATTEMPTS: u32 = 6;

/// The pause before the second read; each further one waits as much more (0.1 s to 0.5 s).
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Why the comparison could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// The kernel's tables could not be read (no permission, no nf_tables…).
    #[error("reading the kernel's nftables tables: {0}")]
    Read(#[from] std::io::Error),
    /// Another process kept changing the ruleset while it was read.
    #[error("the ruleset changed while it was read, {READ_ATTEMPTS} times; try again")]
    Unsettled,
    /// The desired state could not be written out.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The desired state could not be compiled.
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// What a sync of `ruleset` (for node `node`) would change in the kernel's tables.
pub fn against_kernel(ruleset: &Ruleset, node: &str) -> Result<Report, DiffError> {
    let declared = compile::declared(&render::full_sync_script_without_elements(ruleset, node)?)?;
    let mut sock = Socket::open()?;
    for attempt in 0..READ_ATTEMPTS {
        // A daemon syncing meanwhile commits every min-sync-period at most: waiting a little
        // longer each time lets a read fall between two of its syncs.
        std::thread::sleep(RETRY_PAUSE * attempt);
        let before = sock.generation()?;
        let mut kernel = BTreeMap::new();
        for family in Family::ALL {
            kernel.insert(family, kernel::read(&mut sock, family)?);
        }
        // The listings are several dumps: they agree only if no transaction came between.
        if sock.generation()? == before {
            return Ok(compare(ruleset, &declared, kernel));
        }
    }
    Err(DiffError::Unsettled)
}

/// Compares the desired state (and its compiled declarations) with the kernel's tables.
fn compare(ruleset: &Ruleset, declared: &Declared, kernel: BTreeMap<Family, Option<KernelTable>>) -> Report {
    let mut out = Vec::new();
    for (family, held) in kernel {
        let desired = ruleset.tables.iter().find(|t| t.family == family);
        let empty = DeclaredTable::default();
        let declared = declared.tables.get(&family).unwrap_or(&empty);
        if desired.is_some() != held.is_some() {
            let kind = if held.is_none() { Kind::Added } else { Kind::Removed };
            let word = crate::netlink::NfFamily::from(family).word();
            let c = Change {
                family: word,
                object: Object::Table,
                name: render::TABLE_NAME.into(),
                change: kind,
                removed: vec![],
                added: vec![],
            };
            out.push((None, c));
        }
        let held = held.unwrap_or_default();
        ChainDiff::new(family, &declared.chains).compare(&held.chains, &mut out);
        chains::compare_sets(family, &declared.sets, &held.sets, &mut out);
        compare_elements(family, desired, held.maps, &mut out);
    }
    Report::from_changes(out)
}

fn compare_elements(
    family: Family,
    desired: Option<&Table>,
    held: BTreeMap<crate::render::MapName, Vec<crate::netlink::elements::Element>>,
    out: &mut Vec<Owned>,
) {
    let empty = BTreeMap::new();
    let desired = desired.map_or(&empty, |t| &t.elements);
    let read: BTreeMap<_, _> = held.into_iter().map(|(m, e)| (m, read_map::read_map(family, m, e))).collect();
    let owners = Owners::new(desired, &read);
    let mut read = read;
    let all = render::MapName::all();
    // An endpoint map's parts are compared as one, so that an endpoint moved to another slot
    // of its frontend in another part is no difference either.
    for map in all.iter().copied().filter(|m| m.first_part() == *m) {
        let parts: Vec<_> = all.iter().copied().filter(|p| p.first_part() == map).collect();
        let mut known = Vec::new();
        let diff = MapDiff { family, map, owners: &owners };
        for part in &parts {
            let held = read.remove(part).unwrap_or_default();
            known.extend(held.known);
            diff.raw(*part, held.raw, out);
        }
        diff.compare(parts.iter().filter_map(|p| desired.get(p)).flatten(), &known, out);
    }
}
