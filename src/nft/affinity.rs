//! The sweep of session-affinity entries. An entry names the endpoint a client was sent to;
//! when that endpoint stops serving, upstream's per-endpoint set goes with it, and a client
//! is spread anew for good. Here the entry would stay, unused, and lead the client back if
//! the endpoint returned within the timeout; so after a sync the sets holding groups that
//! lost endpoints or went (or, at the first sync over tables kept from before a restart, all
//! of them) are read, and the entries naming no serving endpoint deleted in one transaction.
//! An entry's key ends in a number hashed from its group and endpoint, so a number no
//! current group's endpoint has marks it stale.

use super::wire::Batch;
use super::{NftError, OwnPorts, SyncKind};
use crate::model::Family;
use crate::netlink::send::Sender;
use crate::netlink::{NfFamily, Socket, elements::Element};
use crate::render::{Ruleset, TABLE_NAME, affinity_map};
use std::collections::{BTreeSet, HashMap};

/// A group of a family, by id.
type Group = (Family, u32);

/// An entry this close to timing out is left to go by itself: deleting one that times out
/// before the transaction lands would have the kernel refuse the whole deletion.
const EXPIRING_MS: u64 = 5000;

/// What the last syncs left the affinity sets holding.
#[derive(Debug, Default)]
pub struct Sweeper {
    /// The endpoints each group's entries may name, as of the last sync.
    known: HashMap<Group, BTreeSet<u32>>,
    /// Sets a failed sweep left to read, whatever the next sync is.
    pending: BTreeSet<(Family, String)>,
    /// Families a sync has been seen for since the start (or since the family's last
    /// refused sync): from then on a group of theirs not known is new, so it has no entries
    /// to read.
    primed: Vec<Family>,
}

impl Sweeper {
    /// After a sync of `kind` that applied `desired`'s tables of `families`: deletes the
    /// entries of endpoints no longer serving. Returns how many went; sets not swept are read
    /// after the next sync.
    pub fn after_sync(
        &mut self,
        desired: &Ruleset,
        families: &[Family],
        kind: SyncKind,
        sender: &Sender,
        own: &OwnPorts,
    ) -> Result<usize, NftError> {
        let due = self.due(desired, families, kind);
        if due.is_empty() {
            return Ok(0);
        }
        sweep(&due, &self.known, sender, own).inspect_err(|_| self.pending.extend(due))
    }

    /// Forgets what `family`'s sets held: a sync of it was refused, so its table may hold
    /// anything; its next sync reads every set, as the first over kept tables.
    pub fn forget(&mut self, family: Family) {
        self.known.retain(|g, _| g.0 != family);
        self.pending.retain(|(f, _)| *f != family);
        self.primed.retain(|f| *f != family);
    }

    /// The sets of `families` to read after a sync of `kind` that applied `desired`: those of
    /// groups that lost endpoints or went, those a failed sweep left, and at the first sync
    /// over kept tables all of them. Notes `desired`'s groups of `families` as known.
    fn due(&mut self, desired: &Ruleset, families: &[Family], kind: SyncKind) -> BTreeSet<(Family, String)> {
        let current = groups(desired, families);
        let (mut due, other): (BTreeSet<_>, BTreeSet<_>) =
            std::mem::take(&mut self.pending).into_iter().partition(|(f, _)| families.contains(f));
        self.pending = other;
        for (group, endpoints) in &current {
            let stale = match self.known.get(group) {
                Some(old) => !old.is_subset(endpoints),
                None => !self.primed.contains(&group.0),
            };
            if stale {
                due.insert((group.0, affinity_map(group.1)));
            }
        }
        let ours = |g: &Group| families.contains(&g.0);
        for gone in self.known.keys().filter(|g| ours(g) && !current.contains_key(g)) {
            due.insert((gone.0, affinity_map(gone.1)));
        }
        if kind == SyncKind::Full {
            // The tables were made anew: every set is empty.
            due.clear();
        }
        self.known.retain(|g, _| !ours(g));
        self.known.extend(current);
        for f in families {
            if !self.primed.contains(f) {
                self.primed.push(*f);
            }
        }
        due
    }
}

/// Every group of `desired`'s tables of `families`, with its endpoints (both scopes, and groups whose ids collide,
/// pooled).
fn groups(desired: &Ruleset, families: &[Family]) -> HashMap<Group, BTreeSet<u32>> {
    let mut all: HashMap<Group, BTreeSet<u32>> = HashMap::new();
    for t in desired.tables.iter().filter(|t| families.contains(&t.family)) {
        for g in t.affinity_maps.values().flatten() {
            all.entry((t.family, g.id)).or_default().extend(g.endpoints.iter().copied());
        }
    }
    all
}

/// Reads the sets `due` and deletes every entry that names no endpoint of `current`, in one
/// transaction.
fn sweep(
    due: &BTreeSet<(Family, String)>,
    current: &HashMap<Group, BTreeSet<u32>>,
    sender: &Sender,
    own: &OwnPorts,
) -> Result<usize, NftError> {
    let mut serving: HashMap<Family, BTreeSet<u32>> = HashMap::new();
    for ((family, _), endpoints) in current {
        serving.entry(*family).or_default().extend(endpoints);
    }
    let none = BTreeSet::new();
    let mut sock = Socket::open()?;
    let mut batch = Batch::new();
    let mut stale = 0;
    for (family, set) in due {
        let found = sock.elements(NfFamily::from(*family), TABLE_NAME, set)?;
        let valid = serving.get(family).unwrap_or(&none);
        let gone: Vec<&Element> = found.iter().filter(|e| is_stale(e, valid)).collect();
        stale += gone.len();
        batch.delete_keys(*family, TABLE_NAME, set, gone.iter().map(|e| e.key.as_slice()));
    }
    if stale > 0 {
        own.add(sender.port()?);
        sender.send(&batch.finish())?;
        log::info!("deleted {stale} session-affinity entries of endpoints no longer serving");
    }
    Ok(stale)
}

/// Whether entry `e` (client address . number of its group and endpoint, in 4-byte
/// registers) names none of the endpoint numbers `valid`. An entry about to time out, or
/// one that is not of this shape (the kernel would refuse its deletion again and again),
/// is left alone.
fn is_stale(e: &Element, valid: &BTreeSet<u32>) -> bool {
    if e.key.len() < 8 || e.expires_ms.is_some_and(|ms| ms < EXPIRING_MS) {
        return false;
    }
    let last = <[u8; 4]>::try_from(&e.key[e.key.len() - 4..]).map(u32::from_ne_bytes);
    last.is_ok_and(|n| !valid.contains(&n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{AffinityGroup, Fixed, Table};

    fn entry(endpoint: u32, expires_ms: Option<u64>) -> Element {
        Element { key: [[192, 168, 0, 9], endpoint.to_ne_bytes()].concat(), expires_ms, ..Element::default() }
    }

    #[test]
    fn an_entry_goes_when_it_names_no_serving_endpoint_unless_about_to_time_out() {
        let valid: BTreeSet<u32> = [1, 2].into();
        assert!(!is_stale(&entry(2, Some(60_000)), &valid));
        assert!(is_stale(&entry(3, Some(60_000)), &valid), "its endpoint (or group) went");
        assert!(!is_stale(&entry(3, Some(1000)), &valid), "about to time out by itself");
        assert!(!is_stale(&Element { key: vec![7, 0], ..Element::default() }, &valid), "malformed");
    }

    fn ruleset(groups: &[(u32, &[u32])]) -> Ruleset {
        let fixed = Fixed {
            mark: 0x4000,
            local: crate::render::Detector::None,
            nodeport_all: false,
            drop_unallocated: true,
            turns: false,
        };
        let mut t = Table::new(Family::V4, fixed);
        for (id, eps) in groups {
            let g = AffinityGroup { id: *id, endpoints: eps.to_vec() };
            t.affinity_maps.entry(affinity_map(*id)).or_default().push(g);
        }
        Ruleset { tables: vec![t] }
    }

    #[test]
    fn reads_sets_of_groups_that_lost_endpoints_or_went_never_of_new_or_grown_ones() {
        let set = |id: u32| (Family::V4, affinity_map(id));
        let mut s = Sweeper::default();
        assert_eq!(
            s.due(&ruleset(&[(7, &[1, 2])]), &Family::ALL, SyncKind::Refresh),
            [set(7)].into(),
            "kept tables: unknown"
        );
        assert!(s.due(&ruleset(&[(7, &[1, 2]), (8, &[5])]), &Family::ALL, SyncKind::Partial).is_empty(), "a new group");
        assert!(
            s.due(&ruleset(&[(7, &[1, 2, 3]), (8, &[5])]), &Family::ALL, SyncKind::Partial).is_empty(),
            "it only grew"
        );
        assert_eq!(
            s.due(&ruleset(&[(7, &[3]), (8, &[5])]), &Family::ALL, SyncKind::Partial),
            [set(7)].into(),
            "it lost two"
        );
        assert_eq!(s.due(&ruleset(&[(7, &[3])]), &Family::ALL, SyncKind::Partial), [set(8)].into(), "group 8 went");
        s.pending = [set(9)].into();
        assert_eq!(
            s.due(&ruleset(&[(7, &[3])]), &Family::ALL, SyncKind::Unchanged),
            [set(9)].into(),
            "a failed sweep's sets"
        );
        assert!(
            s.due(&ruleset(&[(7, &[])]), &Family::ALL, SyncKind::Full).is_empty(),
            "tables made anew hold no entries"
        );
    }

    #[test]
    fn a_sync_of_one_family_leaves_the_others_groups_and_a_refused_family_is_read_anew() {
        let set = |id: u32| (Family::V4, affinity_map(id));
        let mut s = Sweeper::default();
        assert_eq!(s.due(&ruleset(&[(7, &[1, 2])]), &Family::ALL, SyncKind::Refresh), [set(7)].into());
        // IPv6 synced alone (its IPv4 part refused): IPv4's group is neither gone nor read.
        let v6 = [Family::V6];
        assert!(s.due(&ruleset(&[(7, &[2])]), &v6, SyncKind::Partial).is_empty(), "IPv4 was not synced");
        assert!(s.known.contains_key(&(Family::V4, 7)), "IPv4's group is still known");
        // IPv4's sync refused: its table may hold anything, so its next sync reads every set.
        s.forget(Family::V4);
        assert_eq!(s.due(&ruleset(&[(7, &[1, 2])]), &Family::ALL, SyncKind::Refresh), [set(7)].into());
    }
}
