//! How long each change waited for the sync that applied it, and why: so an operator sees
//! when the pace bites (`kube_nftproxy_change_wait_seconds{reason}` and the sync's log line).

use std::time::{Duration, Instant};

/// Why a change waited, from least to most telling: a change held by several reasons is
/// counted under the last of them in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WaitReason {
    /// Applied by the next sync as soon as it arrived.
    None,
    /// Held a moment for the changes that follow it (a Service's EndpointSlice), so one sync
    /// applies them together ([`super::pace::Pace::gather`]).
    Gather,
    /// Arrived while a sync ran, and waited for it to end: the cost of the sync ahead.
    Cost,
    /// Held by the pace, which bounds the sync thread's busy share.
    Pace,
    /// Held by the backoff after a failed sync.
    Retry,
}

impl WaitReason {
    /// The metric's `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            WaitReason::None => "none",
            WaitReason::Gather => "gather",
            WaitReason::Cost => "cost",
            WaitReason::Pace => "pace",
            WaitReason::Retry => "retry",
        }
    }
}

/// Changes counted individually between two syncs; past this (a relist of a huge cluster)
/// the rest are left out of the histogram rather than held in memory.
const MAX_COUNTED: usize = 1 << 17;

/// The changes filed since the last successful sync: when each arrived, and why it has waited.
/// A hold marks everything pending at once, so it only notes how far the pending list reached
/// (a loop turn per arriving change must not walk them all).
#[derive(Debug, Default)]
pub(super) struct Waits {
    pending: Vec<(Instant, WaitReason)>,
    /// Per reason (by its order), how many of `pending` it held.
    held: [usize; 5],
    /// When the first and the last change pending arrived, counted or not.
    first: Option<Instant>,
    last: Option<Instant>,
    /// Whether a pending change arrived while the loop was busy (it has waited already).
    waited: bool,
}

impl Waits {
    /// A change that arrived at `at` was filed; `busy_until` is when the loop last finished
    /// work (a change that arrived before then waited for it).
    pub(super) fn filed(&mut self, at: Instant, busy_until: Option<Instant>) {
        let reason = if busy_until.is_some_and(|end| at < end) { WaitReason::Cost } else { WaitReason::None };
        if self.pending.len() < MAX_COUNTED {
            self.pending.push((at, reason));
        }
        self.first = Some(self.first.map_or(at, |t| t.min(at)));
        self.last = Some(self.last.map_or(at, |t| t.max(at)));
        self.waited |= reason == WaitReason::Cost;
    }

    /// Until when a sync of the pending changes is held for more to arrive, given the pace's
    /// gather window: until the changes have been quiet for half the window, at most the
    /// window after the first. `None` when nothing is to be held: no window, nothing pending,
    /// or a change that already waited for a sync.
    pub(super) fn gather_until(&self, window: Duration) -> Option<Instant> {
        if window.is_zero() || self.waited {
            return None;
        }
        let (first, last) = (self.first?, self.last?);
        Some((last + window / 2).min(first + window))
    }

    /// Everything waiting now is held for `reason`.
    pub(super) fn held(&mut self, reason: WaitReason) {
        self.held[reason as usize] = self.pending.len();
    }

    /// The changes a sync that started at `start` applied: how long each waited, and why.
    pub(super) fn applied(&mut self, start: Instant) -> Vec<(Duration, WaitReason)> {
        let held = std::mem::take(&mut self.held);
        let reasons = [WaitReason::None, WaitReason::Gather, WaitReason::Cost, WaitReason::Pace, WaitReason::Retry];
        let out = self.pending.iter().enumerate().map(|(i, (at, own))| {
            let most = reasons.iter().filter(|r| held[**r as usize] > i).max().copied();
            (start.saturating_duration_since(*at), most.map_or(*own, |r| r.max(*own)))
        });
        let out = out.collect();
        *self = Waits::default();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_counted_under_the_most_telling_reason_that_held_it() {
        let t = Instant::now();
        let ms = Duration::from_millis(1);
        let mut w = Waits::default();
        w.filed(t, Some(t + ms));
        w.filed(t + ms * 2, Some(t + ms));
        w.held(WaitReason::Pace);
        w.filed(t + ms * 3, Some(t + ms));
        w.held(WaitReason::Retry);
        w.held(WaitReason::Pace);
        w.filed(t + ms * 4, Some(t + ms * 5));
        let got = w.applied(t + ms * 10);
        assert_eq!(
            got,
            vec![
                (ms * 10, WaitReason::Retry),
                (ms * 8, WaitReason::Retry),
                (ms * 7, WaitReason::Retry),
                (ms * 6, WaitReason::Cost)
            ]
        );
        assert!(w.applied(t).is_empty());
    }

    #[test]
    fn a_gather_holds_until_the_changes_are_quiet_and_never_past_its_window() {
        let t = Instant::now();
        let ms = Duration::from_millis(1);
        let window = ms * 4;
        let mut w = Waits::default();
        assert_eq!(w.gather_until(window), None, "nothing pending");
        w.filed(t, Some(t - ms));
        assert_eq!(w.gather_until(window), Some(t + ms * 2), "quiet for half the window");
        w.filed(t + ms, None);
        assert_eq!(w.gather_until(window), Some(t + ms * 3));
        w.filed(t + ms * 3, None);
        assert_eq!(w.gather_until(window), Some(t + window), "never past the window");
        assert_eq!(w.gather_until(Duration::ZERO), None, "no window, no gather");
        w.held(WaitReason::Gather);
        let got = w.applied(t + window);
        assert!(got.iter().all(|(_, r)| *r == WaitReason::Gather), "{got:?}");
        assert_eq!(w.gather_until(window), None, "a sync took them");
        w.filed(t + ms * 10, Some(t + ms * 11));
        w.filed(t + ms * 12, None);
        assert_eq!(w.gather_until(window), None, "a change that waited for a sync is not held again");
    }
}
