//! The registry of open watches: a bounded channel per watch, so a write never waits for a slow
//! reader; a reader that falls too far behind is cut loose and told its version expired.

use crate::history::Event;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// How many undelivered messages a watch may have before it is cut off.
pub const BACKLOG: usize = 50_000;

/// How a dropped watch stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropMode {
    /// The terminating zero-length chunk, as at a timeout.
    Clean,
    /// The connection closes in the middle of a chunk.
    Abrupt,
    /// The connection is reset (RST).
    Reset,
}

/// What a watch receives.
#[derive(Debug, Clone)]
pub enum WatchMsg {
    /// A write to the watched resource.
    Event(Arc<Event>),
    /// End the stream this way.
    Drop(DropMode),
    /// Stop (true) or resume (false) sending.
    Stall(bool),
    /// Send a 410 ERROR event and end the stream.
    Expire,
    /// Send a MODIFIED event whose object does not decode as its kind.
    Malformed,
    /// Send a line that is not JSON.
    Garbage,
    /// Send a DELETED event whose object is a Status naming this namespace and name in its
    /// metadata: not of the watched kind, so it must delete nothing.
    Foreign(String, String),
    /// Send a line that never ends (until [`crate::watch::ENDLESS_LIMIT`] bytes), then cut
    /// the connection.
    Endless,
}

struct Slot {
    id: u64,
    plural: &'static str,
    tx: SyncSender<WatchMsg>,
    overflowed: Arc<AtomicBool>,
}

/// One registered watch, as its streaming thread holds it.
pub struct Subscription {
    /// Registry id, to unregister.
    pub id: u64,
    /// The messages.
    pub rx: Receiver<WatchMsg>,
    /// Set when the watch was cut off for falling behind.
    pub overflowed: Arc<AtomicBool>,
}

/// All open watches.
#[derive(Default)]
pub struct Registry {
    next: u64,
    slots: Vec<Slot>,
}

impl Registry {
    /// Registers a watch of `plural`.
    pub fn add(&mut self, plural: &'static str) -> Subscription {
        self.next += 1;
        let (tx, rx) = sync_channel(BACKLOG);
        let overflowed = Arc::new(AtomicBool::new(false));
        self.slots.push(Slot { id: self.next, plural, tx, overflowed: overflowed.clone() });
        Subscription { id: self.next, rx, overflowed }
    }

    /// Unregisters a watch.
    pub fn remove(&mut self, id: u64) {
        self.slots.retain(|s| s.id != id);
    }

    /// Hands an event to every watch of its resource; drops watches that are full or gone.
    pub fn fan_out(&mut self, plural: &str, ev: &Arc<Event>) {
        self.slots.retain(|s| {
            if s.plural != plural {
                return true;
            }
            match s.tx.try_send(WatchMsg::Event(ev.clone())) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    s.overflowed.store(true, Ordering::SeqCst);
                    false
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    /// Sends `msg` to the watches of `plural` (every watch when `None`).
    pub fn signal(&mut self, plural: Option<&str>, msg: &WatchMsg) {
        for s in self.slots.iter().filter(|s| plural.is_none_or(|p| p == s.plural)) {
            // A full channel means the watch is about to be cut off anyway.
            let _ = s.tx.try_send(msg.clone());
        }
    }

    /// Open watches per resource plural.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for s in &self.slots {
            *out.entry(s.plural).or_default() += 1;
        }
        out
    }
}
