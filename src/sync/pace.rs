//! When the sync loop may act: retries that back off, and the pace of syncs (a burst of two,
//! then one per `min_sync_period`).

use super::MIN_RETRY;
use crate::config::MAX_DURATION;
use std::time::{Duration, Instant};

/// `t + d`, or as far as the longest period allows if that overflows.
pub(super) fn after(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).or_else(|| t.checked_add(MAX_DURATION)).unwrap_or(t)
}

/// A retry schedule: nothing before `at`; after each failure the wait doubles, from a floor
/// (never below `MIN_RETRY`: what fails at once must not spin) up to a cap.
#[derive(Debug, Clone, Copy)]
pub(super) struct Backoff {
    at: Option<Instant>,
    wait: Duration,
    floor: Duration,
    cap: Duration,
}

impl Backoff {
    pub(super) fn new(floor: Duration, cap: Duration) -> Backoff {
        let floor = floor.max(MIN_RETRY);
        Backoff { at: None, wait: floor, floor, cap: cap.max(floor) }
    }

    /// Notes a failure at `now`; returns how long until the retry.
    pub(super) fn failed(&mut self, now: Instant) -> Duration {
        let wait = self.wait;
        self.at = Some(after(now, wait));
        self.wait = (wait * 2).min(self.cap);
        wait
    }

    pub(super) fn succeeded(&mut self) {
        self.at = None;
        self.wait = self.floor;
    }

    /// `t`, or the retry time if that is later.
    pub(super) fn not_before(&self, t: Instant) -> Instant {
        self.at.map_or(t, |at| at.max(t))
    }
}

/// Syncs a moment apart allowed before the pace applies.
const BURST: f64 = 2.0;

/// At most one sync per `min_sync_period` on average, with a burst of two (as upstream's
/// runner had): a Service and its EndpointSlice created a moment apart are both applied at
/// once, while a steady stream of changes still syncs once per period. Counted from the end
/// of each sync.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    min: Duration,
    /// Syncs allowed at `at`.
    tokens: f64,
    at: Instant,
}

impl Pace {
    pub(super) fn new(min: Duration, now: Instant) -> Pace {
        Pace { min, tokens: BURST, at: now }
    }

    /// When the next sync may start.
    pub(super) fn next_allowed(&self) -> Instant {
        if self.tokens >= 1.0 || self.min.is_zero() {
            self.at
        } else {
            after(self.at, self.min.mul_f64(1.0 - self.tokens))
        }
    }

    /// Notes a sync that ended at `end`.
    pub(super) fn take(&mut self, end: Instant) {
        let earned = if self.min.is_zero() {
            BURST
        } else {
            end.saturating_duration_since(self.at).as_secs_f64() / self.min.as_secs_f64()
        };
        self.tokens = ((self.tokens + earned).min(BURST) - 1.0).max(0.0);
        self.at = end;
    }
}
