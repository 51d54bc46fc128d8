//! The sync loop: the one thread that owns the model. Sources deliver per-object changes
//! through the [`Inbox`]; the loop files them, renders only the Services they touched, and
//! applies them at once (held a moment when the loop was idle, for the changes that follow,
//! such as a Service's EndpointSlice: [`pace::Pace::gather`]) unless the pace holds them:
//! `min_sync_period` bounds the share of time spent syncing by what syncs cost ([`pace`]), so a
//! cheap change waits for nothing; a change set touching many Services is rendered from scratch
//! and sent as the difference ([`once`]). A failed sync is retried as a full one after a
//! backoff (at least [`MIN_RETRY`], doubling up to `sync_period`); the tables are rewritten in
//! place every `full_sync_period` and replaced when another process tampered with them. When
//! the kernel refuses one family's part only, the other's is applied and the refused one
//! retried on its own ([`families`]). Chains a sync left stale are deleted when their delay has
//! passed, even if no other sync comes. What applies is behind the [`Kernel`] trait, so all of
//! this is tested without root.

use crate::config::{Config, MAX_DURATION, Periods};
use crate::conntrack::Reconciler;
use crate::inbox::{Delivery, Inbox};
use crate::model::{Changes, Model};
use crate::nft::SyncKind;
use crate::observe::Observers;
use crate::render::Rendered;
use pace::{Pace, RetryPace, after};
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};
use wait::{WaitReason, Waits};

mod debug;
mod families;
mod kernel;
mod once;
mod pace;
mod wait;

pub use kernel::Kernel;

/// The shortest wait before a failed sync is retried, whatever `min_sync_period` says: a
/// sync that fails at once must not spin.
pub const MIN_RETRY: Duration = Duration::from_secs(1);

/// The sync thread's state: the model, what was rendered from it, and when to sync next.
pub struct Syncer<K: Kernel> {
    model: Model,
    /// The desired state rendered from `model` (`None` before the first sync).
    rendered: Option<Rendered>,
    kernel: K,
    cfg: Config,
    periods: Periods,
    /// Sources that have not delivered their first listing yet; nothing is applied before.
    unlisted: BTreeSet<&'static str>,
    dirty: bool,
    /// The tables must be replaced whole (first sync, tampering, a failure).
    force_full: bool,
    /// A full sync that rewrites everything in place is due.
    refresh: bool,
    /// The tables' chains and sets are to be compared with the kernel's (`Resync::Check`).
    check: bool,
    pace: Pace,
    last_full: Instant,
    /// Retries of failed syncs.
    retry: RetryPace,
    /// Families the kernel refused while the other's part went through, and their retries.
    refused: families::Refused,
    /// Rendering warnings already reported, so each is logged once, not on every sync.
    reported: BTreeSet<String>,
    /// Full syncs in a row during which another process committed.
    unsure_streak: u32,
    /// The last sync's outcome and when it ended, for the summary.
    last: Option<(SyncKind, Duration, Instant)>,
    /// Retries of failed stale-chain deletions.
    cleanup_retry: RetryPace,
    /// While this node's Node object has not arrived: until when the first sync waits for
    /// it, and when to say so again in the log.
    node_wait: Option<(Instant, Instant)>,
    /// Health, metrics and health-check node ports, as far as they are served.
    observe: Observers,
    /// Changes a failed sync took from the model, reported with the next success.
    unapplied: Option<Changes>,
    /// Runs once, after the first sync that went through (the takeover from kube-proxy).
    after_first_sync: Option<Box<dyn FnOnce() + Send>>,
    /// UDP Services between conntrack cleanups.
    conntrack: Reconciler,
    /// When each change filed since the last sync arrived, and what held it.
    waits: Waits,
    /// When the last sync attempt ended.
    busy_until: Option<Instant>,
}

/// How often the log says the proxy is still waiting for its Node.
const NODE_WAIT_LOG: Duration = Duration::from_secs(10);

impl<K: Kernel> Syncer<K> {
    /// A sync loop that applies through `kernel` once every source in `sources` has listed.
    pub fn new(cfg: Config, periods: Periods, kernel: K, sources: &[&'static str]) -> Syncer<K> {
        let now = Instant::now();
        let mut model = Model::default();
        model.set_external_ips(cfg.external_ips);
        Syncer {
            model,
            rendered: None,
            kernel,
            cfg,
            periods,
            unlisted: sources.iter().copied().collect(),
            dirty: true,
            force_full: true,
            refresh: false,
            check: false,
            pace: Pace::new(periods.min_sync, now).aiming_at(periods.share),
            last_full: now,
            retry: RetryPace::new(periods.min_sync, periods.sync),
            refused: families::Refused::new(periods.min_sync, periods.sync),
            reported: BTreeSet::new(),
            unsure_streak: 0,
            last: None,
            cleanup_retry: RetryPace::new(MIN_RETRY, periods.sync),
            node_wait: None,
            observe: Observers::default(),
            unapplied: None,
            after_first_sync: None,
            conntrack: Reconciler::default(),
            waits: Waits::default(),
            busy_until: None,
        }
    }

    /// Runs `then` once, right after the first sync that went through: the proxy's own rules
    /// are in the kernel by then, so what it does cannot leave traffic without a path.
    pub fn after_first_sync(mut self, then: Box<dyn FnOnce() + Send>) -> Syncer<K> {
        self.after_first_sync = Some(then);
        self
    }

    /// Reports changes queued and applied, syncs and this node's eligibility to `observe`.
    pub fn with_observers(mut self, observe: Observers) -> Syncer<K> {
        self.observe = observe;
        self
    }

    /// Makes the first sync wait up to `up_to` for this node's Node object, whose addresses
    /// and labels the rules depend on (as kube-proxy does); after that it syncs without.
    pub fn wait_for_node(mut self, up_to: Duration) -> Syncer<K> {
        let now = Instant::now();
        self.node_wait = Some((after(now, up_to), now));
        self
    }

    /// Whether the first sync still waits for the Node; logs about it now and then.
    fn waiting_for_node(&mut self, now: Instant) -> bool {
        let Some((deadline, log_at)) = self.node_wait else { return false };
        if self.model.node.is_some() {
            self.node_wait = None;
            return false;
        }
        if now >= deadline {
            log::warn!("Node {:?} did not appear; syncing without its addresses and labels", self.cfg.node_name);
            self.node_wait = None;
            return false;
        }
        if now >= log_at && self.unlisted.is_empty() {
            log::info!("waiting for Node {:?} before the first sync", self.cfg.node_name);
            self.node_wait = Some((deadline, after(now, NODE_WAIT_LOG)));
        }
        true
    }

    /// Runs until a shutdown request arrives.
    pub fn run(mut self, inbox: &Inbox) {
        loop {
            let delivery = inbox.wait(self.next_wake());
            if !self.take(delivery) {
                log::info!("shutting down; the rules stay in place");
                return;
            }
            self.sync_if_due();
        }
    }

    /// When the loop has something to do next: the next allowed sync when one is due (the
    /// periodic full sync included), else the periodic full sync; nothing before every source
    /// has listed but what arrives; and stale chains coming due. Never a time already past
    /// unless something can be done then, so the loop cannot spin.
    pub fn next_wake(&self) -> Instant {
        let now = Instant::now();
        let periodic = after(self.last_full, self.periods.full_sync);
        let node_wait = self.node_wait.filter(|_| self.model.node.is_none());
        let mut wake = if self.unlisted.is_empty() {
            let due = self.dirty || self.force_full || self.refresh || now >= periodic;
            let allowed = self.retry.not_before(self.pace.next_allowed());
            let allowed = self.gather_until(now).map_or(allowed, |until| allowed.max(until));
            let wake = match node_wait {
                // Until the Node arrives (a delivery wakes the loop), only the log line and
                // the end of the wait are due.
                Some((deadline, log_at)) if due => log_at.min(deadline).max(allowed),
                _ if due => allowed,
                _ => periodic,
            };
            // A refused family's retry, once a sync is allowed.
            self.refused.retry_at(now).map_or(wake, |at| wake.min(at.max(allowed)))
        } else {
            after(now, MAX_DURATION)
        };
        if let Some(due) = self.cleanup_due() {
            wake = wake.min(due);
        }
        wake
    }

    /// Until when a partial sync waits for more changes to gather (see `Pace::gather`); `None`
    /// for any other sync, which has reasons of its own to go now.
    fn gather_until(&self, now: Instant) -> Option<Instant> {
        let partial = !(self.force_full || self.refresh || self.refused.due(now)) && self.rendered.is_some();
        partial.then(|| self.waits.gather_until(self.pace.gather())).flatten()
    }

    /// When stale chains are to be deleted: when the kernel says, but not before a retry is due.
    fn cleanup_due(&self) -> Option<Instant> {
        let due = self.kernel.cleanup_due()?;
        Some(self.cleanup_retry.not_before(due))
    }

    /// Takes in what the inbox delivered; false means stop.
    pub fn take(&mut self, d: Delivery) -> bool {
        for source in d.listed {
            if self.unlisted.remove(source) && self.unlisted.is_empty() {
                log::info!("every source has listed; syncing");
            }
        }
        let mut changed = false;
        let now = SystemTime::now();
        // The first sync's wait is the listing's, not a change's.
        let counted = self.last.is_some();
        // A delivery made without arrival times counts its changes as arriving now.
        let arrived = d.arrived.into_iter().chain(std::iter::repeat(Instant::now()));
        for (change, arrived) in d.changes.into_iter().zip(arrived) {
            let kind = change.kind();
            let service = change.service(&self.model);
            let detail = log::log_enabled!(log::Level::Debug).then(|| change.describe());
            let this = self.model.file(change);
            if let Some(detail) = detail {
                log::debug!("{detail}{}", if this { "" } else { " (no change to the rules)" });
            }
            self.observe.delivered(kind, service, this, now);
            if this && counted {
                self.waits.filed(arrived, self.busy_until);
            }
            changed |= this;
        }
        self.dirty |= changed;
        self.observe.queued(changed, self.model.node.as_ref().map(|n| n.eligible), now);
        let r = d.requests;
        if let Some(why) = r.tampered {
            log::warn!("{why}; restoring the tables with a full sync");
            self.observe.repair("tampered");
            self.force_full = true;
        }
        if r.unsure && !self.kernel.tables_look_intact() {
            log::warn!("the tables are not intact; restoring them with a full sync");
            self.observe.repair("not-intact");
            self.force_full = true;
        }
        if r.refresh {
            self.refresh = true;
        }
        if r.summary {
            for line in self.summary_lines() {
                log::info!("summary: {line}");
            }
        }
        for ask in d.asks {
            self.answer(ask);
        }
        !r.shutdown
    }

    /// Syncs if something is due and allowed now; deletes stale chains whose time has come.
    pub fn sync_if_due(&mut self) {
        let now = Instant::now();
        if self.last_full.elapsed() >= self.periods.full_sync {
            self.refresh = true;
        }
        let due = self.dirty || self.force_full || self.refresh || self.refused.due(now);
        if self.unlisted.is_empty() && due {
            if self.retry.holds(now) {
                self.waits.held(WaitReason::Retry);
            } else if self.pace.next_allowed() > now {
                self.waits.held(WaitReason::Pace);
            } else if self.gather_until(now).is_some_and(|until| until > now) {
                self.waits.held(WaitReason::Gather);
            } else if !self.waiting_for_node(now) {
                return self.sync_once();
            }
        }
        if self.cleanup_due().is_some_and(|at| now >= at) {
            self.cleanup();
        }
    }

    /// Deletes the stale chains that are due; a failure (a kernel before 6.2 may still hold a
    /// chain busy) is retried after a backoff, never in a loop.
    fn cleanup(&mut self) {
        match self.kernel.cleanup() {
            Ok(n) => {
                log::debug!("deleted {n} stale chains");
                self.cleanup_retry.succeeded();
            }
            Err(e) => {
                self.observe.cleanup_failed();
                let wait = self.cleanup_retry.failed(Instant::now());
                log::warn!("deleting stale chains failed, retrying in {wait:?}: {e}");
            }
        }
        self.busy_until = Some(Instant::now());
    }
}
