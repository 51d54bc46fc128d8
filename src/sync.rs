//! The sync loop: the one thread that owns the model. Sources send it changes over a
//! channel; it coalesces them, renders, and applies at most once per `min_sync_period`,
//! retries failures with backoff (a failed sync is retried as a full one within
//! `sync_period`), rewrites the tables in place every `full_sync_period`, and replaces them
//! whole when another process tampered with them.

use crate::config::Config;
use crate::model::Model;
use crate::nft::{Applier, NftError, Resync, SyncKind, guard};
use crate::render::{Rendered, Update};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Messages to the sync loop.
#[derive(Debug)]
pub enum Msg {
    /// The whole cluster as a snapshot source (manifests) read it, already validated into a
    /// model of its own; it replaces the sync thread's model, which notes what differs.
    Snapshot(Box<Model>),
    /// Another process changed our tables: replace them.
    Tampered(String),
    /// Change notifications were lost: check the tables, replace them if they look wrong.
    Unsure,
    /// Stop (SIGTERM/SIGINT); the rules stay in place.
    Shutdown,
}

/// Timing of the loop.
#[derive(Debug, Clone, Copy)]
pub struct Periods {
    /// Minimum time between the end of one sync and the start of the next.
    pub min_sync: Duration,
    /// Longest wait before a failed sync is retried.
    pub sync: Duration,
    /// Interval of full syncs that repair drift.
    pub full_sync: Duration,
}

struct State {
    model: Model,
    /// The desired state rendered from `model` (`None` before the first sync).
    rendered: Option<Rendered>,
    have_input: bool,
    dirty: bool,
    /// The tables must be replaced whole (first sync, tampering, a failure).
    force_full: bool,
    /// The periodic full sync is due: rewrite everything in place.
    refresh: bool,
    next_allowed: Instant,
    last_full: Instant,
    retry_at: Option<Instant>,
    backoff: Duration,
    /// Rendering warnings already reported, so each is logged once, not on every sync.
    reported: std::collections::BTreeSet<String>,
    /// Full syncs in a row during which another process committed.
    unsure_streak: u32,
}

/// Full syncs repeated because another process committed during one, before settling for
/// the cheap intactness check.
const MAX_UNSURE_RESYNCS: u32 = 3;

/// Runs until `Shutdown` arrives or every sender is gone.
pub fn run(rx: Receiver<Msg>, cfg: &Config, periods: Periods, mut applier: Applier) {
    let now = Instant::now();
    let mut st = State {
        model: Model::default(),
        rendered: None,
        have_input: false,
        dirty: true,
        force_full: true,
        refresh: false,
        next_allowed: now,
        last_full: now,
        retry_at: None,
        backoff: periods.min_sync,
        reported: std::collections::BTreeSet::new(),
        unsure_streak: 0,
    };
    loop {
        let wait = next_wake(&st, &periods).saturating_duration_since(Instant::now());
        let first = match rx.recv_timeout(wait) {
            Ok(msg) => Some(msg),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        // Coalesce everything that queued up while we waited or synced.
        for msg in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
            if !handle(msg, &mut st) {
                log::info!("shutting down; the rules stay in place");
                return;
            }
        }
        if st.last_full.elapsed() >= periods.full_sync {
            st.refresh = true;
        }
        let now = Instant::now();
        let due = st.dirty || st.force_full || st.refresh;
        if st.have_input && due && now >= st.next_allowed && st.retry_at.is_none_or(|r| now >= r) {
            sync_once(&mut st, cfg, &periods, &mut applier);
        }
    }
}

fn next_wake(st: &State, periods: &Periods) -> Instant {
    let periodic = st.last_full + periods.full_sync;
    if !st.have_input || !(st.dirty || st.force_full || st.refresh) {
        return periodic;
    }
    st.next_allowed.max(st.retry_at.unwrap_or(st.next_allowed))
}

/// Applies one message to the state; false means stop.
fn handle(msg: Msg, st: &mut State) -> bool {
    match msg {
        Msg::Snapshot(model) => {
            st.model.replace(*model);
            st.have_input = true;
            st.dirty = true;
        }
        Msg::Tampered(why) => {
            log::warn!("{why}; restoring the tables with a full sync");
            st.force_full = true;
        }
        Msg::Unsure => match guard::tables_look_intact() {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                log::warn!("the tables are not intact; restoring them with a full sync");
                st.force_full = true;
            }
        },
        Msg::Shutdown => return false,
    }
    true
}

/// Brings the rendered state up to the model: the Services changed since the last sync are
/// rendered again, or everything when nothing was rendered yet (or rendering failed).
fn render_changes<'s>(
    model: &mut Model,
    slot: &'s mut Option<Rendered>,
    cfg: &Config,
) -> Result<(&'s Rendered, Update), NftError> {
    let changes = model.take_changes();
    let update = match slot.take() {
        Some(mut r) => r.update(model, cfg, &changes).map(|u| (r, u)),
        None => Rendered::build(model, cfg, None).map(|r| (r, Update::Replaced)),
    };
    let (rendered, update) = update?;
    Ok((slot.insert(rendered), update))
}

fn sync_once(st: &mut State, cfg: &Config, periods: &Periods, applier: &mut Applier) {
    let started = Instant::now();
    match crate::host::interface_addresses() {
        Ok(addrs) => st.model.set_host_addresses(addrs),
        Err(e) => log::warn!("reading interface addresses: {e}"),
    }
    let result = render_changes(&mut st.model, &mut st.rendered, cfg).and_then(|(rendered, update)| {
        let now: std::collections::BTreeSet<String> = rendered.ruleset().warnings().cloned().collect();
        for w in now.difference(&st.reported) {
            log::warn!("{w}");
        }
        st.reported = now;
        let resync = match (st.force_full, st.refresh) {
            (true, _) => Resync::Replace,
            (false, true) => Resync::Refresh,
            (false, false) => Resync::Changes,
        };
        applier.sync(rendered.ruleset(), &update, resync)
    });
    let end = Instant::now();
    st.next_allowed = end + periods.min_sync;
    match result {
        Ok(report) => {
            let lines = report.script.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count();
            if report.kind != SyncKind::Unchanged {
                let via = if report.netlink { " (netlink)" } else { "" };
                log::info!("{:?} sync{via}: {lines} lines in {:?}", report.kind, end - started);
            }
            if matches!(report.kind, SyncKind::Full | SyncKind::Staged | SyncKind::Refresh) {
                st.last_full = end;
            }
            // Another process committed while notifications were paused: what it changed is
            // unknown, so sync fully again; after a few such collisions in a row (a busy
            // neighbour), settle for the cheap check instead of syncing fully forever.
            if report.unsure {
                st.unsure_streak += 1;
                let again = st.unsure_streak <= MAX_UNSURE_RESYNCS || !matches!(guard::tables_look_intact(), Ok(true));
                if again {
                    log::info!("another process changed nftables during the full sync; syncing fully again");
                    st.dirty = true;
                    st.force_full = true;
                    return;
                }
            } else if matches!(report.kind, SyncKind::Full | SyncKind::Staged | SyncKind::Refresh) {
                st.unsure_streak = 0;
            }
            st.dirty = false;
            st.force_full = false;
            st.refresh = false;
            st.retry_at = None;
            st.backoff = periods.min_sync;
        }
        Err(e) => {
            log::error!("sync failed, old rules stay in place; retrying in {:?} with a full sync: {e}", st.backoff);
            st.force_full = true;
            st.retry_at = Some(end + st.backoff);
            st.backoff = (st.backoff * 2).min(periods.sync);
        }
    }
}
