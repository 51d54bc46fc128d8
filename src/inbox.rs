//! The sync thread's inbox: the one way in for every source and alarm. It keeps the latest
//! state per object rather than a queue of events, so however fast objects change and however
//! long a sync blocks, what waits is at most one entry per object.

use crate::debug::Ask;
use crate::model::{ObjectChange, ObjectId, ObjectKind};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

/// Requests that are not about one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// Another process changed our tables (the reason names it): replace them.
    pub tampered: Option<String>,
    /// Change notifications were lost: check the tables.
    pub unsure: bool,
    /// Rewrite everything in place now (SIGHUP).
    pub refresh: bool,
    /// Log a summary of the state (SIGUSR1).
    pub summary: bool,
    /// Stop; the rules stay in place.
    pub shutdown: bool,
}

/// What the sync thread takes out of the inbox at once.
#[derive(Debug, Default)]
pub struct Delivery {
    /// The latest state of every object that changed since the last delivery, in id order.
    pub changes: Vec<ObjectChange>,
    /// When each of `changes` first arrived (a later state of the same object keeps the time
    /// of the first it replaced): what the sync loop counts a change's wait from.
    pub arrived: Vec<Instant>,
    /// Sources that have delivered their first complete listing since the last delivery.
    pub listed: Vec<&'static str>,
    /// Other requests.
    pub requests: Requests,
    /// Debug views asked for, each to be answered (at most one: see `Inbox::ask`).
    pub asks: Vec<Ask>,
}

impl Delivery {
    /// Whether nothing arrived.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
            && self.listed.is_empty()
            && self.requests == Requests::default()
            && self.asks.is_empty()
    }
}

#[derive(Debug, Default)]
struct Pending {
    objects: BTreeMap<ObjectId, (ObjectChange, Instant)>,
    /// When the oldest Service or EndpointSlice change still here arrived.
    oldest: Option<SystemTime>,
    listed: BTreeSet<&'static str>,
    requests: Requests,
    asks: Vec<Ask>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.objects.is_empty()
            && self.listed.is_empty()
            && self.requests == Requests::default()
            && self.asks.is_empty()
    }
}

/// A mailbox that coalesces per object; senders never block for long and never queue.
#[derive(Debug, Default)]
pub struct Inbox {
    pending: Mutex<Pending>,
    arrived: Condvar,
    /// Sources that lost their feed, each since its last sign of life: changes made since
    /// then may be waiting unseen, so health counts them as waiting from then.
    stale: Mutex<BTreeMap<&'static str, SystemTime>>,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panicking sender cannot leave `Pending` half-updated: every update is one insert.
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut Pending)) {
        f(&mut self.lock());
        self.arrived.notify_all();
    }

    /// Delivers one object's latest state, replacing any not yet taken for the same object.
    pub fn send(&self, change: ObjectChange) {
        self.send_all([change]);
    }

    /// Delivers several objects' states under one lock.
    pub fn send_all(&self, changes: impl IntoIterator<Item = ObjectChange>) {
        let now = Instant::now();
        self.update(|p| {
            for change in changes {
                if matches!(change.kind(), ObjectKind::Service | ObjectKind::EndpointSlice) {
                    p.oldest = p.oldest.or_else(|| Some(SystemTime::now()));
                }
                match p.objects.entry(change.id()) {
                    Entry::Occupied(mut e) => e.get_mut().0 = change,
                    Entry::Vacant(e) => {
                        e.insert((change, now));
                    }
                }
            }
        });
    }

    /// A source has delivered everything it had at start (nothing is applied before every
    /// source has, so a restart never syncs a half-known cluster over working rules).
    pub fn listed(&self, source: &'static str) {
        self.update(|p| {
            p.listed.insert(source);
        });
    }

    /// Adds a request.
    pub fn request(&self, f: impl FnOnce(&mut Requests)) {
        self.update(|p| f(&mut p.requests));
    }

    /// Asks for a debug view. The `http` thread waits on one ask at a time, so an ask still
    /// here when another comes is one whose client gave up or went: it is dropped, not made
    /// (a sync that blocks long must not find a view to make for every client that waited).
    pub fn ask(&self, ask: Ask) {
        self.update(|p| p.asks = vec![ask]);
    }

    /// Waits until something arrives or `deadline` passes, then takes everything.
    pub fn wait(&self, deadline: Instant) -> Delivery {
        let mut pending = self.lock();
        loop {
            let now = Instant::now();
            if !pending.is_empty() || now >= deadline {
                break;
            }
            pending = match self.arrived.wait_timeout(pending, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        let taken = std::mem::take(&mut *pending);
        let (changes, arrived) = taken.objects.into_values().unzip();
        Delivery {
            changes,
            arrived,
            listed: taken.listed.into_iter().collect(),
            requests: taken.requests,
            asks: taken.asks,
        }
    }

    /// Objects waiting to be taken.
    pub fn waiting(&self) -> usize {
        self.lock().objects.len()
    }

    /// When the oldest Service or EndpointSlice change not yet taken arrived: health counts a
    /// change as queued from here, as upstream's event handlers do, so a sync thread stuck in
    /// the kernel still turns the proxy unhealthy while changes pile up behind it.
    pub fn oldest_waiting(&self) -> Option<SystemTime> {
        self.lock().oldest
    }

    /// Since when the longest-lost source has been without its feed (its last sign of life):
    /// changes made since may be waiting unseen. `None` while every source is fed.
    pub fn stale_since(&self) -> Option<SystemTime> {
        self.stale_marks().values().min().copied()
    }

    fn stale_marks(&self) -> MutexGuard<'_, BTreeMap<&'static str, SystemTime>> {
        self.stale.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `source` lost its feed; it last heard from it at `since` (an earlier mark stays).
    pub fn stale(&self, source: &'static str, since: SystemTime) {
        self.stale_marks().entry(source).or_insert(since);
    }

    /// `source` has its feed again.
    pub fn fresh(&self, source: &'static str) {
        self.stale_marks().remove(source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectChange;
    use std::time::Duration;

    fn svc(name: &str) -> ObjectChange {
        ObjectChange::Service(("ns".into(), name.into()), None)
    }

    #[test]
    fn keeps_one_entry_per_object_however_many_changes_arrive() {
        let inbox = Inbox::default();
        for _ in 0..10_000 {
            inbox.send(svc("a"));
            inbox.send(svc("b"));
        }
        assert_eq!(inbox.waiting(), 2);
        let d = inbox.wait(Instant::now());
        assert_eq!(d.changes, vec![svc("a"), svc("b")]);
        assert!(inbox.wait(Instant::now()).is_empty());
    }

    #[test]
    fn a_change_counts_its_wait_from_the_first_state_that_arrived() {
        let inbox = Inbox::default();
        let first = Instant::now();
        inbox.send(svc("a"));
        std::thread::sleep(Duration::from_millis(20));
        inbox.send(svc("a"));
        inbox.send(svc("b"));
        let d = inbox.wait(Instant::now());
        assert_eq!(d.changes, vec![svc("a"), svc("b")]);
        assert!(d.arrived[0] >= first && d.arrived[0] + Duration::from_millis(20) <= d.arrived[1], "{:?}", d.arrived);
    }

    #[test]
    fn the_last_word_on_this_node_wins() {
        let inbox = Inbox::default();
        let node = crate::model::NodeInfo { name: "node-a".into(), ..Default::default() };
        inbox.send(ObjectChange::Node(Some(node)));
        inbox.send(ObjectChange::Node(None));
        assert_eq!(inbox.wait(Instant::now()).changes, vec![ObjectChange::Node(None)]);
    }

    #[test]
    fn a_waiter_wakes_when_something_arrives() {
        let inbox = std::sync::Arc::new(Inbox::default());
        let sender = inbox.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            sender.request(|r| r.shutdown = true);
        });
        let start = Instant::now();
        let d = inbox.wait(start + Duration::from_secs(10));
        assert!(d.requests.shutdown);
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().expect("sender");
    }

    #[test]
    fn a_stale_source_counts_as_waiting_until_fresh_again() {
        let inbox = Inbox::default();
        let then = SystemTime::now() - Duration::from_secs(90);
        inbox.stale("services", then);
        inbox.stale("services", SystemTime::now());
        inbox.send(svc("a"));
        assert_eq!(inbox.stale_since(), Some(then), "the earliest sign of life counts, and survives a take");
        assert!(inbox.oldest_waiting().is_some_and(|t| t > then), "queued changes are apart");
        inbox.wait(Instant::now());
        assert_eq!((inbox.stale_since(), inbox.oldest_waiting()), (Some(then), None));
        inbox.fresh("services");
        assert_eq!(inbox.stale_since(), None);
    }

    #[test]
    fn an_empty_wait_returns_at_the_deadline() {
        let inbox = Inbox::default();
        let start = Instant::now();
        assert!(inbox.wait(start + Duration::from_millis(30)).is_empty());
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
}
