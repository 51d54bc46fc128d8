//! One sync: render what changed, apply it through the [`Kernel`], and note the outcome (the
//! pace's charge, the changes' waits, metrics, the log line, the takeover and stale flows).

use super::wait::WaitReason;
use super::{Kernel, Syncer};
use crate::config::Config;
use crate::model::{Changes, Family, Model};
use crate::nft::{NftError, Resync, SyncKind, SyncReport};
use crate::observe::Synced;
use crate::render::{Rendered, Update};
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

/// A change set touching more than one Service in this many is rendered from scratch, and
/// only the difference from the state before is sent. At 30k Services a patch of every one
/// measured twice a render from scratch (a patch journals old values and takes each port out
/// first), so past half the Services rendering everything is the cheaper way. (A rewrite in
/// place, which sends all 216,000 elements, cost 0.5 to 1.8 s in the kernel; the difference of
/// every EndpointSlice changed is about a third of them.)
const REWRITE_SHARE: usize = 2;

/// Below this many Services a partial sync costs a few milliseconds whatever the share.
const MIN_REWRITE: usize = 256;

/// Full syncs repeated because another process committed during one, before settling for
/// the cheap intactness check.
const MAX_UNSURE_RESYNCS: u32 = 3;

impl<K: Kernel> Syncer<K> {
    /// After a sync: deletes UDP flows that still lead to endpoints the changed Services no
    /// longer serve from. A failure is logged and counted (`Reconciler::totals`), and the
    /// cleanup is tried again after the next sync; the sync itself stands.
    fn clear_stale_flows(&mut self) {
        if let Some(plan) = self.conntrack.plan(&self.model) {
            let result = self.kernel.clear_udp_flows(&plan);
            if let Ok(report) = &result {
                self.observe.conntrack(report);
            }
            self.conntrack.finish(result);
        }
    }

    /// Renders what changed and applies it; notes the outcome and charges the pace.
    pub(super) fn sync_once(&mut self) {
        let started = Instant::now();
        match self.kernel.host_addresses() {
            Ok(addrs) => self.model.set_host_addresses(addrs),
            Err(e) => log::warn!("reading interface addresses: {e}"),
        }
        let mut rendered_at = started;
        let mut applied = None;
        let hold = self.refused.hold(started);
        // Taken before rendering, so a sync that fails (in rendering or in the kernel) hands
        // them on to the next one that succeeds.
        let mut changes = self.model.take_changes();
        if let Some(earlier) = self.unapplied.take() {
            changes.absorb(earlier);
        }
        let (resync, rebuild) = self.resync(&changes);
        // The first render keeps the endpoint slots of tables an earlier run left.
        let held = if self.rendered.is_none() { self.kernel.held_slots() } else { None };
        let result = render_changes(&self.model, &mut self.rendered, &self.cfg, &changes, rebuild, held.as_ref())
            .and_then(|(rendered, update)| {
                rendered_at = Instant::now();
                let now: BTreeSet<String> = rendered.ruleset().warnings().cloned().collect();
                crate::skips::warn_each("this sync", now.difference(&self.reported));
                self.reported = now;
                let result = self.kernel.sync(rendered.ruleset(), &update, resync, &hold);
                // What the kernel was sent: every element when it synced fully, whatever
                // the update was.
                let elements = match &result {
                    Ok(SyncReport { elements: Some(n), .. }) => *n,
                    Ok(r) if matches!(r.kind, SyncKind::Full | SyncKind::Refresh) => rendered.ruleset().element_count(),
                    _ => update.elements(rendered.ruleset()),
                };
                applied = Some((matches!(update, Update::Replaced | Update::Rebuilt(_)), elements));
                result
            });
        let end = Instant::now();
        let (full, sent) = match &result {
            Ok(r) => (matches!(r.kind, SyncKind::Full | SyncKind::Refresh), r.kind != SyncKind::Unchanged),
            Err(_) => (false, true),
        };
        let (all, elements) = applied.unwrap_or_default();
        let tried: Vec<Family> = Family::ALL.into_iter().filter(|f| !hold.contains(f)).collect();
        match result {
            Ok(report) => {
                let families = self.refused.note(&tried, &report.refused, end);
                let refused: Vec<Family> = report.refused.iter().map(|(f, _)| *f).collect();
                self.observe.failed(end - started, &refused);
                let s = Synced { kind: report.kind, took: end - started, bytes: report.bytes, elements };
                let waited = self.waits.applied(started);
                self.observe.waited(waited.iter().map(|(d, r)| (*d, r.label())));
                self.succeeded(&report, &s, (rendered_at - started, end - rendered_at), &waited, end);
                self.observe.synced(&s, &changes, SystemTime::now(), &families);
                self.observe.local(&self.model, &self.cfg, &changes, all);
                self.conntrack.touch(&changes.services);
                self.clear_stale_flows();
            }
            Err(e) => {
                self.unapplied = Some(changes);
                self.waits.held(WaitReason::Retry);
                self.observe.failed(end - started, &tried);
                let wait = self.retry.failed(end);
                log::error!(
                    "sync failed, the rules stay as the kernel last took them; retrying in {wait:?} with a full sync: {e}"
                );
                self.force_full = true;
            }
        }
        // Charged with what followed the kernel's part (the conntrack cleanup, the takeover):
        // the loop was busy with this sync until now.
        let done = Instant::now();
        self.pace.charge(started, done, full, sent);
        self.busy_until = Some(done);
    }

    /// What the sync is to do beyond sending the changes: replace the tables after tampering or
    /// a failure; rewrite them in place when the periodic full sync is due. And whether to
    /// render everything again rather than patch: when `changes` touch so many Services that
    /// rendering from scratch costs less (`REWRITE_SHARE`).
    fn resync(&self, changes: &Changes) -> (Resync, bool) {
        if self.force_full {
            return (Resync::Replace, false);
        }
        let touched = changes.services.len();
        let many =
            self.rendered.is_some() && touched >= MIN_REWRITE && touched > self.model.services.len() / REWRITE_SHARE;
        if many {
            log::debug!("{touched} of {} services changed: rendering them all again", self.model.services.len());
        }
        let resync = if self.refresh {
            Resync::Refresh
        } else if self.check {
            Resync::Check
        } else {
            Resync::Changes
        };
        (resync, many)
    }

    /// Notes a sync that went through, in one info line; `(render, apply)` is how long each
    /// part took, `waited` how long the changes it applied had waited.
    fn succeeded(
        &mut self,
        report: &SyncReport,
        s: &Synced,
        (render, apply): (Duration, Duration),
        waited: &[(Duration, WaitReason)],
        end: Instant,
    ) {
        let took = render + apply;
        if report.kind != SyncKind::Unchanged {
            let (services, endpoints) = (self.model.services.len(), self.model.endpoint_count());
            log::info!(
                "{:?} sync: {services} services, {endpoints} endpoints; sent {} elements, {} bytes{} in {took:?} (render {render:?}, apply {apply:?}){}",
                s.kind,
                s.elements,
                s.bytes,
                staged_note(report.transactions),
                wait_note(waited) + held_note(report)
            );
        }
        self.last = Some((report.kind, took, end));
        let full = matches!(report.kind, SyncKind::Full | SyncKind::Refresh);
        if full {
            self.last_full = end;
        }
        self.retry.succeeded();
        // The takeover removes kube-proxy's rules of both families: not while one of ours is
        // refused.
        if self.refused.is_empty()
            && let Some(then) = self.after_first_sync.take()
        {
            then();
        }
        // Another process committed while notifications were paused (a full sync, a rehash):
        // most often a neighbour changing its own table. The next sync compares our tables'
        // chains and sets with the kernel's (`Resync::Check`: cheap, no lock held) and mends
        // what differs. After a few such collisions in a row (checks that had to rewrite in
        // place, notifications paused again, beside a busy neighbour), settle for the cheap
        // intactness check.
        if report.unsure {
            self.unsure_streak += 1;
            if self.unsure_streak <= MAX_UNSURE_RESYNCS || !self.kernel.tables_look_intact() {
                log::info!(
                    "another process committed to nftables during the full sync or rehash; checking our tables' chains and sets"
                );
                self.dirty = true;
                (self.force_full, self.refresh, self.check) = (false, false, true);
                return;
            }
        } else if full {
            self.unsure_streak = 0;
        }
        self.dirty = false;
        self.force_full = false;
        self.refresh = false;
        self.check = false;
    }
}

/// The log line's note of a sync sent in several transactions (a staged build).
fn staged_note(transactions: u32) -> String {
    if transactions > 1 { format!(" ({transactions} transactions)") } else { String::new() }
}

/// The log line's note of a refresh that found nothing to send.
fn held_note(report: &SyncReport) -> &'static str {
    if report.kind == SyncKind::Refresh && report.transactions == 0 {
        "; the tables held what they should, nothing sent"
    } else {
        ""
    }
}

/// The log line's note of the longest wait among the changes a sync applied, and why.
fn wait_note(waited: &[(Duration, WaitReason)]) -> String {
    match waited.iter().max() {
        Some((d, r)) => format!("; {} changes, the longest waited {d:?} ({})", waited.len(), r.label()),
        None => String::new(),
    }
}

/// Brings the rendered state up to the model: the Services in `changes` are rendered again,
/// or everything when `rebuild` says so or nothing was rendered yet (or rendering failed;
/// then endpoints keep the slots `held` gives them).
fn render_changes<'s>(
    model: &Model,
    slot: &'s mut Option<Rendered>,
    cfg: &Config,
    changes: &Changes,
    rebuild: bool,
    held: Option<&crate::render::Ruleset>,
) -> Result<(&'s Rendered, Update), NftError> {
    let (rendered, update) = match slot.take() {
        Some(mut r) if rebuild => r.rebuild(model, cfg).map(|u| (r, u))?,
        Some(mut r) => r.update(model, cfg, changes).map(|u| (r, u))?,
        None => (Rendered::build(model, cfg, held)?, Update::Replaced),
    };
    Ok((slot.insert(rendered), update))
}
