//! The bounded event history: replay for watches from a resourceVersion, and the undo overlay that
//! lets later list pages show the state at the first page's snapshot.

use crate::resources::Resource;
use crate::selectors::Facts;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock};

/// Store key: namespace (empty when cluster-scoped) and name; sorts as lists are ordered.
pub type Key = (String, String);

/// One stored object version: its JSON without `kind`/`apiVersion`, serialized once.
#[derive(Debug, Clone)]
pub struct Obj {
    /// The object's resourceVersion.
    pub rv: u64,
    /// The JSON text, without `kind` and `apiVersion` (list items carry neither).
    pub body: Arc<[u8]>,
    /// What selectors look at.
    pub facts: Arc<Facts>,
    /// The protobuf message, encoded for the first protobuf client that reads this version
    /// (`None` for a kind without one, or an object its type cannot read).
    pub proto: Arc<OnceLock<Option<Arc<[u8]>>>>,
}

impl Obj {
    /// The JSON text with `kind` and `apiVersion` first, as watch events and single GETs carry it.
    pub fn with_kind(&self, res: &Resource) -> Vec<u8> {
        let head = format!(r#"{{"kind":"{}","apiVersion":"{}""#, res.kind, res.api_version());
        let mut out = Vec::with_capacity(head.len() + self.body.len() + 1);
        out.extend_from_slice(head.as_bytes());
        let rest = self.body.get(1..).unwrap_or_default();
        // `{}` has nothing after the brace but `}`; any other body needs a separating comma.
        if rest.first().is_some_and(|b| *b != b'}') {
            out.push(b',');
        }
        out.extend_from_slice(rest);
        out
    }
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Created.
    Added,
    /// Replaced or patched.
    Modified,
    /// Deleted.
    Deleted,
}

/// One write, as watches and the undo overlay see it.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion this write produced.
    pub rv: u64,
    /// The object's type.
    pub res: &'static Resource,
    /// The object's key.
    pub key: Key,
    /// What happened.
    pub change: Change,
    /// The object sent with the event (for a deletion: the last state, stamped with this rv).
    pub object: Obj,
    /// The object before the write; `None` for a creation.
    pub prev: Option<Obj>,
}

/// The requested resourceVersion is older than what the history still holds.
#[derive(Debug, thiserror::Error)]
#[error("too old resource version: {requested} ({compacted})")]
pub struct TooOld {
    /// The requested resourceVersion.
    pub requested: u64,
    /// The oldest resourceVersion still answerable.
    pub compacted: u64,
}

/// The event history, oldest first, with at most `cap` events.
#[derive(Debug)]
pub struct History {
    events: VecDeque<Arc<Event>>,
    cap: usize,
    /// Events at or below this resourceVersion are gone.
    pub compacted: u64,
}

impl History {
    /// An empty history that remembers at most `cap` events, compacted at `start`.
    pub fn new(cap: usize, start: u64) -> History {
        History { events: VecDeque::new(), cap: cap.max(1), compacted: start }
    }

    /// Appends an event, dropping the oldest beyond the cap.
    pub fn push(&mut self, ev: Arc<Event>) {
        self.events.push_back(ev);
        while self.events.len() > self.cap {
            if let Some(old) = self.events.pop_front() {
                self.compacted = old.rv;
            }
        }
    }

    /// Forgets every event up to and including `rv`.
    pub fn compact(&mut self, rv: u64) {
        while self.events.front().is_some_and(|e| e.rv <= rv) {
            self.events.pop_front();
        }
        self.compacted = self.compacted.max(rv);
    }

    fn check(&self, rv: u64) -> Result<usize, TooOld> {
        if rv < self.compacted {
            return Err(TooOld { requested: rv, compacted: self.compacted });
        }
        Ok(self.events.partition_point(|e| e.rv <= rv))
    }

    /// The events of `plural` after `rv`, oldest first.
    pub fn since(&self, plural: &str, rv: u64) -> Result<Vec<Arc<Event>>, TooOld> {
        let start = self.check(rv)?;
        Ok(self.events.range(start..).filter(|e| e.res.plural == plural).cloned().collect())
    }

    /// For every `plural` key written after `rv`, its state at `rv` (`None`: it did not exist).
    pub fn undo(&self, plural: &str, rv: u64) -> Result<BTreeMap<Key, Option<Obj>>, TooOld> {
        let start = self.check(rv)?;
        let mut overlay = BTreeMap::new();
        for e in self.events.range(start..).filter(|e| e.res.plural == plural) {
            // The first write after `rv` to a key saw the state at `rv`; later ones do not matter.
            overlay.entry(e.key.clone()).or_insert_with(|| e.prev.clone());
        }
        Ok(overlay)
    }
}
