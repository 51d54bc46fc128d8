//! The sweep of session-affinity maps. An entry holds the endpoint address a client was
//! sent to; when that endpoint stops serving, upstream's per-endpoint set goes with it and
//! the client is spread anew. Here the entry would stay and lead to the gone endpoint, so
//! after each sync the maps whose endpoints may have shrunk are read and such entries
//! deleted, in one transaction. Entries still being refreshed by use cannot point at a gone
//! endpoint for longer than the sync that removed it and this sweep.

use super::netlink::{NfFamily, Socket, elements::Element};
use super::wire::{Batch, Sender};
use super::{NftError, OwnPorts, SyncKind};
use crate::model::Family;
use crate::render::{Ruleset, TABLE_NAME};
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

/// What each affinity map may hold, as of the last sync: the endpoints its entries can name.
#[derive(Debug, Default)]
pub struct Sweeper {
    known: HashMap<(Family, String), BTreeSet<IpAddr>>,
}

/// A map to read, and the endpoints its entries may name.
type Due = (Family, String, BTreeSet<IpAddr>);

impl Sweeper {
    /// After a sync of `kind` that applied `desired`: deletes the entries of endpoints no
    /// longer serving. Returns how many went. A map that could not be swept is read again
    /// after the next sync.
    pub fn after_sync(
        &mut self,
        desired: &Ruleset,
        kind: SyncKind,
        sender: &Sender,
        own: &OwnPorts,
    ) -> Result<usize, NftError> {
        let due = self.due(desired, kind == SyncKind::Full);
        if due.is_empty() {
            return Ok(0);
        }
        let mut sock = Socket::open()?;
        let mut batch = Batch::new();
        let mut stale = 0;
        for (family, map, endpoints) in &due {
            let found = sock.elements(NfFamily::from(*family), TABLE_NAME, map)?;
            let gone: Vec<&Element> = found.iter().filter(|e| !holds_one_of(e, endpoints)).collect();
            stale += gone.len();
            batch.delete_keys(*family, TABLE_NAME, map, gone.iter().map(|e| e.key.as_slice()));
        }
        if stale > 0 {
            own.add(sender.port()?);
            sender.send(&batch.finish())?;
            log::info!("deleted {stale} session-affinity entries that led to endpoints no longer serving");
        }
        for (family, map, endpoints) in due {
            self.known.insert((family, map), endpoints);
        }
        Ok(stale)
    }

    /// The maps whose entries may name an endpoint `desired` no longer has: those not seen
    /// since the start (unless the tables were just created, `fresh`), and those that lost
    /// endpoints. Maps that went are forgotten; maps that only grew are noted.
    fn due(&mut self, desired: &Ruleset, fresh: bool) -> Vec<Due> {
        let mut due = Vec::new();
        let mut current = HashMap::new();
        for t in &desired.tables {
            for (name, affinity) in &t.affinity_maps {
                let endpoints: BTreeSet<IpAddr> = affinity.endpoints.iter().copied().collect();
                let key = (t.family, name.clone());
                match self.known.get(&key) {
                    Some(old) if old.is_subset(&endpoints) => {}
                    None if fresh => {}
                    _ => due.push((t.family, name.clone(), endpoints.clone())),
                }
                current.insert(key, endpoints);
            }
        }
        // Maps being swept keep their old endpoints until the sweep succeeds.
        for (family, name, _) in &due {
            if let Some(old) = self.known.get(&(*family, name.clone())) {
                current.insert((*family, name.clone()), old.clone());
            } else {
                current.remove(&(*family, name.clone()));
            }
        }
        self.known = current;
        due
    }
}

/// Whether a map element's data is one of `endpoints` (an address of its own length).
fn holds_one_of(e: &Element, endpoints: &BTreeSet<IpAddr>) -> bool {
    let Some(data) = &e.data else { return false };
    let ip = match data.len() {
        4 => <[u8; 4]>::try_from(data.as_slice()).map(IpAddr::from).ok(),
        16 => <[u8; 16]>::try_from(data.as_slice()).map(IpAddr::from).ok(),
        _ => None,
    };
    ip.is_some_and(|ip| endpoints.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{Affinity, Fixed, Table};

    fn ruleset(endpoints: &[&str]) -> Ruleset {
        let fixed = Fixed { mark: 0x4000, local: crate::render::Detector::None, nodeport_all: false };
        let mut t = Table::new(Family::V4, fixed);
        let endpoints = endpoints.iter().map(|e| e.parse().expect("test address")).collect();
        t.affinity_maps.insert("m".into(), Affinity { timeout: 10, endpoints });
        Ruleset { tables: vec![t] }
    }

    #[test]
    fn reads_a_map_when_unknown_or_shrunk_never_when_it_grew_or_was_just_created() {
        let mut s = Sweeper::default();
        assert!(s.due(&ruleset(&["10.0.0.1", "10.0.0.2"]), true).is_empty(), "fresh tables hold no entries");
        assert!(s.due(&ruleset(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]), false).is_empty(), "it only grew");
        let due = s.due(&ruleset(&["10.0.0.3"]), false);
        assert_eq!(due.len(), 1, "it lost two endpoints");
        assert_eq!(due[0].2.len(), 1);
        assert_eq!(s.due(&ruleset(&["10.0.0.3"]), false).len(), 1, "not swept yet: still due");
        let mut restarted = Sweeper::default();
        assert_eq!(restarted.due(&ruleset(&["10.0.0.1"]), false).len(), 1, "what a refresh keeps is unknown");
    }

    #[test]
    fn an_entry_is_kept_only_when_it_names_a_serving_endpoint() {
        let serving: BTreeSet<IpAddr> = ["10.0.0.1".parse().expect("test address")].into();
        let entry = |data: Option<Vec<u8>>| Element { key: vec![192, 168, 0, 9], data };
        assert!(holds_one_of(&entry(Some(vec![10, 0, 0, 1])), &serving));
        assert!(!holds_one_of(&entry(Some(vec![10, 0, 0, 2])), &serving));
        assert!(!holds_one_of(&entry(Some(vec![10, 0, 0])), &serving), "a malformed address is stale");
        assert!(!holds_one_of(&entry(None), &serving));
    }
}
