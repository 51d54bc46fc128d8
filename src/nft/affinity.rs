//! The sweep of session-affinity entries. An entry names the endpoint a client was sent to;
//! when that endpoint stops serving, upstream's per-endpoint set goes with it, and a client
//! is spread anew for good. Here the entry would stay, unused, and lead the client back if
//! the endpoint returned within the timeout; so after each sync the maps holding groups that
//! lost endpoints (or that are unknown since the start, over tables that were kept) are read
//! and such entries deleted, with those of groups that went, in one transaction. An entry's
//! key ends in a number hashed from its group and endpoint, so a number no current group's
//! endpoint has marks it stale.

use super::netlink::{NfFamily, Socket, elements::Element};
use super::wire::{Batch, Sender};
use super::{NftError, OwnPorts, SyncKind};
use crate::model::Family;
use crate::render::{Ruleset, TABLE_NAME};
use std::collections::{BTreeSet, HashMap};

/// A group of a family, by id.
type Group = (Family, u32);

/// The endpoints each affinity group's entries may name, as of the last sweep or sync.
#[derive(Debug, Default)]
pub struct Sweeper {
    known: HashMap<Group, BTreeSet<u32>>,
}

impl Sweeper {
    /// After a sync of `kind` that applied `desired`: deletes the entries of endpoints no
    /// longer serving. Returns how many went; a group not swept is swept after the next sync.
    pub fn after_sync(
        &mut self,
        desired: &Ruleset,
        kind: SyncKind,
        sender: &Sender,
        own: &OwnPorts,
    ) -> Result<usize, NftError> {
        let current = groups(desired);
        let fresh = kind == SyncKind::Full;
        let due: BTreeSet<(Family, &str)> = desired
            .tables
            .iter()
            .flat_map(|t| t.affinity_maps.iter().map(move |(name, groups)| (t.family, name, groups)))
            .filter(|(family, _, groups)| {
                groups.iter().any(|g| match self.known.get(&(*family, g.id)) {
                    Some(old) => !old.iter().all(|e| current[&(*family, g.id)].contains(e)),
                    None => !fresh,
                })
            })
            .map(|(family, name, _)| (family, name.as_str()))
            .collect();
        let stale = if due.is_empty() { 0 } else { sweep(&due, &current, sender, own)? };
        self.known = current;
        Ok(stale)
    }
}

/// Every group of `desired`, with its endpoints (groups whose ids collide pooled).
fn groups(desired: &Ruleset) -> HashMap<Group, BTreeSet<u32>> {
    let mut all: HashMap<Group, BTreeSet<u32>> = HashMap::new();
    for t in &desired.tables {
        for g in t.affinity_maps.values().flatten() {
            all.entry((t.family, g.id)).or_default().extend(g.endpoints.iter().copied());
        }
    }
    all
}

/// Reads the maps `due` and deletes every entry that names an endpoint or group not in
/// `current`, in one transaction.
fn sweep(
    due: &BTreeSet<(Family, &str)>,
    current: &HashMap<Group, BTreeSet<u32>>,
    sender: &Sender,
    own: &OwnPorts,
) -> Result<usize, NftError> {
    let mut serving: HashMap<Family, BTreeSet<u32>> = HashMap::new();
    for ((family, _), endpoints) in current {
        serving.entry(*family).or_default().extend(endpoints);
    }
    let mut sock = Socket::open()?;
    let mut batch = Batch::new();
    let mut stale = 0;
    for (family, map) in due {
        let found = sock.elements(NfFamily::from(*family), TABLE_NAME, map)?;
        let valid = serving.get(family);
        let gone: Vec<&Element> = found.iter().filter(|e| !valid.is_some_and(|v| names_one_of(e, v))).collect();
        stale += gone.len();
        batch.delete_keys(*family, TABLE_NAME, map, gone.iter().map(|e| e.key.as_slice()));
    }
    if stale > 0 {
        own.add(sender.port()?);
        sender.send(&batch.finish())?;
        log::info!("deleted {stale} session-affinity entries of endpoints no longer serving");
    }
    Ok(stale)
}

/// Whether entry `e` (client address . number of its group and endpoint, in 4-byte
/// registers) names one of the endpoint numbers `valid`.
fn names_one_of(e: &Element, valid: &BTreeSet<u32>) -> bool {
    let last = e.key.len().checked_sub(4).and_then(|at| e.key.get(at..));
    last.and_then(|b| <[u8; 4]>::try_from(b).ok()).is_some_and(|b| valid.contains(&u32::from_ne_bytes(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(endpoint: u32) -> Element {
        Element { key: [[192, 168, 0, 9], endpoint.to_ne_bytes()].concat(), data: None }
    }

    #[test]
    fn an_entry_stays_only_while_it_names_a_serving_endpoint_of_its_group() {
        let valid: BTreeSet<u32> = [1, 2].into();
        assert!(names_one_of(&entry(2), &valid));
        assert!(!names_one_of(&entry(3), &valid), "its endpoint (or group) went");
        assert!(!names_one_of(&Element { key: vec![7, 0], data: None }, &valid), "malformed");
    }
}
