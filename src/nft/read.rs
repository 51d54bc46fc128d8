//! Our tables read back from the kernel over netlink (dumps, which do not take the nf_tables
//! commit mutex): a read that counts only when no notification named our tables meanwhile
//! (a neighbour changing its own table does not unsettle it), and the read ahead of a
//! restart's first sync, made while the daemon lists the cluster.

use super::NftError;
use super::kdiff::{self, KernelTable, ReadMap};
use crate::model::Family;
use crate::netlink::{Event, NfFamily, Socket, TableObject};
use crate::render::{self, MapName, Ruleset, TABLE_NAME, Table};
use std::collections::BTreeMap;
use std::time::Duration;

/// Reads of the tables begun again because another process changed them meanwhile.
const READ_ATTEMPTS: u32 = 4;

/// One family's table as the kernel holds it: chains, sets, and its maps' elements read
/// back into the desired state's terms.
pub(super) struct Held {
    /// Chains, sets and the elements as read.
    pub table: KernelTable,
    /// The maps' elements in the desired state's terms.
    pub maps: BTreeMap<MapName, ReadMap>,
    /// Flowtables and stateful objects (counters, quotas, ct helpers…) in the table: never
    /// ours, so someone else's.
    pub stateful: usize,
}

/// Our tables as the kernel holds them, by family.
pub(super) type Tables = BTreeMap<Family, Held>;

/// Both tables as the kernel held them, and the endpoint slots they hold.
type ReadWhole = (Tables, Ruleset);

/// Both tables as the kernel held them, read on a thread of their own while the daemon lists
/// the cluster: a restart's first render keeps the endpoint slots they hold, and its first
/// sync compares against them instead of reading them then (at 30k Services the read ends
/// about half a second after the listing, the kernel's dump of the endpoint map most of it). A monitor socket opened before the read tells whether our tables
/// changed since.
pub(super) struct ReadAhead {
    monitor: Socket,
    read: Option<std::thread::JoinHandle<Result<Option<ReadWhole>, NftError>>>,
    held: Option<Tables>,
    slots: Option<Ruleset>,
}

impl ReadAhead {
    /// Starts reading both tables, elements included.
    pub(super) fn start() -> std::io::Result<ReadAhead> {
        let monitor = Socket::monitor()?;
        let read = std::thread::Builder::new().name("nft-read-ahead".into()).spawn(|| {
            let began = std::time::Instant::now();
            let Some(tables) = read_settled(&Family::ALL, true)? else { return Ok(None) };
            // Here rather than on the sync thread, which waits for it.
            let slots = slots(&tables);
            let elements: usize = tables.values().flat_map(|h| h.maps.values()).map(|m| m.known.len()).sum();
            log::debug!("read our tables ahead: {elements} elements in {:?}", began.elapsed());
            Ok(Some((tables, slots)))
        })?;
        Ok(ReadAhead { monitor, read: Some(read), held: None, slots: None })
    }

    /// Waits for the read to end; what it read, if it read both tables whole.
    fn wait(&mut self) -> Option<&Tables> {
        if let Some(read) = self.read.take() {
            let (held, slots) = match read.join() {
                Ok(Ok(read)) => read.unzip(),
                Ok(Err(e)) => {
                    log::debug!("reading the tables ahead failed: {e}");
                    (None, None)
                }
                Err(_) => (None, None),
            };
            (self.held, self.slots) = (held, slots);
        }
        self.held.as_ref()
    }

    /// The endpoint slots the tables held, as a ruleset of endpoint maps alone: what a first
    /// render keeps, so that it differs from the tables only by what changed meanwhile.
    pub(super) fn slots(&mut self) -> Option<Ruleset> {
        self.wait();
        self.slots.take()
    }

    /// What was read, if it was read whole and our tables did not change since.
    pub(super) fn finish(mut self) -> Option<Tables> {
        self.wait();
        match ours_changed(&self.monitor) {
            Ok(false) => self.held,
            _ => None,
        }
    }
}

/// The endpoint slots `tables` hold (see [`ReadAhead::slots`]).
fn slots(tables: &Tables) -> Ruleset {
    let owner: std::sync::Arc<str> = std::sync::Arc::from("");
    let mut out = Vec::new();
    for (family, held) in tables {
        let mut t = Table::new(*family, render::Fixed::default());
        for (map, read) in
            held.maps.iter().filter(|(m, _)| matches!(m, MapName::Endpoints(..) | MapName::NodeportEndpoints(..)))
        {
            let entries = read
                .known
                .iter()
                .map(|(k, v)| (k.clone(), render::Entry { value: v.clone(), owner: owner.clone(), refs: 1 }));
            t.elements.insert(*map, entries.collect());
        }
        out.push(t);
    }
    Ruleset { tables: out }
}

/// The tables of `scope` as the kernel holds them, read while no other process changed
/// them (a change to another table, a neighbour's, does not count); `None` when one is
/// missing.
pub(super) fn read_settled(scope: &[Family], elements: bool) -> Result<Option<Tables>, NftError> {
    let mut sock = Socket::open()?;
    for _ in 0..READ_ATTEMPTS {
        let monitor = Socket::monitor()?;
        let mut held = BTreeMap::new();
        for family in scope {
            let Some(mut table) = kdiff::read_table(&mut sock, *family, elements)? else { return Ok(None) };
            let read = std::mem::take(&mut table.maps);
            let maps = read.into_iter().map(|(m, e)| (m, kdiff::read_map(*family, m, e))).collect();
            let objects = sock.table_objects(NfFamily::from(*family), TABLE_NAME)?;
            let stateful =
                objects.iter().filter(|o| matches!(o.kind, TableObject::Flowtable | TableObject::Stateful(_))).count();
            held.insert(*family, Held { table, maps, stateful });
        }
        if !ours_changed(&monitor)? {
            return Ok(Some(held));
        }
        log::debug!("our tables changed while they were read; reading them again");
    }
    Err(NftError::Unsettled(READ_ATTEMPTS))
}

/// Whether the notifications `monitor` queued name one of our tables (or were lost).
fn ours_changed(monitor: &Socket) -> Result<bool, NftError> {
    loop {
        let events = monitor.events(Duration::ZERO)?;
        if events.is_empty() {
            return Ok(false);
        }
        for event in events {
            match event {
                Event::Object { family, table, .. } if super::guard::is_ours(family, &table) => return Ok(true),
                Event::Overrun => return Ok(true),
                Event::Object { .. } | Event::Generation { .. } => {}
            }
        }
    }
}
