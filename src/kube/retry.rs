//! Waiting after a failed request, as client-go's reflector does: from 800 ms doubling up to
//! 30 s, each wait stretched by a random part of itself so that many nodes do not retry in
//! step, starting over after two quiet minutes or once the caller says it recovered; a
//! server's `Retry-After` is waited exactly, never less (up to an hour), and does not move
//! the schedule on. And
//! logging failures without flooding: a new kind of failure is logged, repeats only now and then.

use super::client::ApiError;
use std::time::{Duration, Instant};

/// The first wait.
const INITIAL: Duration = Duration::from_millis(800);

/// The longest wait before jitter.
const CAP: Duration = Duration::from_secs(30);

/// A spell without failures after which waits start over from [`INITIAL`].
const RESET_AFTER: Duration = Duration::from_secs(120);

/// The longest `Retry-After` honoured. Up to it, a server is asked again no sooner than it
/// said (a 429 from 1.37's `ConsistentListFromCacheSkipTimeoutFallback`, or from priority and
/// fairness, says when its cache or its queue will have room). client-go waits whatever it is
/// told; a server asking for more than an hour is misconfigured, and is asked again after an
/// hour rather than leaving the node's rules unfollowed for a day on one bad header.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How often a failure that keeps recurring is logged again.
const REMIND_EVERY: Duration = Duration::from_secs(300);

/// The wait schedule of one reflector, as client-go's: jittered (many nodes retry against one
/// API server), honouring `Retry-After`, and starting over after a quiet spell. Not the sync
/// loop's `pace::RetryPace`, whose waits are exact, as its tests and its one kernel want.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    last_failure: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff { next: INITIAL, last_failure: None }
    }
}

impl Backoff {
    /// Notes a failure; returns how long to wait before the next request.
    pub fn failed(&mut self, e: &ApiError) -> Duration {
        self.failed_at(e, Instant::now())
    }

    /// Starts the waits over: what failed recovered. Failures that each recover (an API
    /// server's rolling restart: a relist, a reset stream, a few 500s) are not a storm, and
    /// must not leave the next wait at the cap.
    pub fn reset(&mut self) {
        *self = Backoff::default();
    }

    /// Notes a failure at `now`.
    fn failed_at(&mut self, e: &ApiError, now: Instant) -> Duration {
        if self.last_failure.is_some_and(|t| now.duration_since(t) >= RESET_AFTER) {
            self.next = INITIAL;
        }
        self.last_failure = Some(now);
        // The server set this wait: our own schedule stays where it was, so that a busy
        // server's one 429 does not double the wait after the next, unrelated failure.
        if let ApiError::Status { retry_after: Some(after), .. } = e {
            return (*after).min(MAX_RETRY_AFTER).max(INITIAL);
        }
        let base = self.next;
        self.next = (base * 2).min(CAP);
        base + base.mul_f64(fastrand::f64())
    }
}

/// A `Retry-After` header's wait, as client-go reads it: whole seconds (a date or a negative
/// number is not read, and the usual backoff applies); a number too large to hold is the
/// longest wait honoured.
pub(super) fn retry_after(header: &str) -> Option<Duration> {
    let v = header.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.parse().map_or(MAX_RETRY_AFTER, Duration::from_secs))
}

/// Logs failures once per kind, reminding now and then while they recur.
#[derive(Debug, Default)]
pub struct LogOnce {
    last: Option<(String, Instant)>,
}

impl LogOnce {
    /// Logs failure `e` of `what`, about to be retried after `wait`, unless the same failure
    /// was logged recently.
    pub fn report(&mut self, what: &str, e: &ApiError, wait: Duration) {
        let text = e.to_string();
        let now = Instant::now();
        let repeat = self.last.as_ref().is_some_and(|(t, at)| *t == text && now.duration_since(*at) < REMIND_EVERY);
        if repeat {
            log::debug!("{what}: {text}; retrying in {wait:.1?}");
        } else {
            log::error!("{what}: {text}; retrying in {wait:.1?}");
            self.last = Some((text, now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> ApiError {
        ApiError::Transport("connection refused".into())
    }

    #[test]
    fn waits_double_with_jitter_up_to_the_cap_and_start_over_after_quiet() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        let mut base = INITIAL;
        for i in 0..10 {
            let wait = b.failed_at(&refused(), t0 + Duration::from_secs(i));
            assert!(wait >= base && wait <= base * 2, "failure {i}: {wait:?} not in [{base:?}, {:?}]", base * 2);
            base = (base * 2).min(CAP);
        }
        assert!(base == CAP);
        let wait = b.failed_at(&refused(), t0 + Duration::from_secs(9) + RESET_AFTER);
        assert!(wait <= INITIAL * 2, "after a quiet spell the wait starts over, not {wait:?}");
    }

    #[test]
    fn a_reset_starts_the_waits_over() {
        let mut b = Backoff::default();
        for _ in 0..8 {
            b.failed(&refused());
        }
        assert!(b.failed(&refused()) >= CAP, "at the cap");
        b.reset();
        assert!(b.failed(&refused()) <= INITIAL * 2, "a recovered round starts over");
    }

    #[test]
    fn retry_after_is_waited_exactly_and_never_less_up_to_an_hour() {
        let mut b = Backoff::default();
        let busy = |secs| ApiError::Status {
            code: 429,
            reason: "TooManyRequests".into(),
            message: String::new(),
            retry_after: Some(Duration::from_secs(secs)),
        };
        assert_eq!(b.failed(&busy(7)), Duration::from_secs(7));
        // Past the backoff's own cap, and far past what was once a five-minute bound.
        for secs in [45, 600, 3599, 3600] {
            assert_eq!(b.failed(&busy(secs)), Duration::from_secs(secs), "Retry-After: {secs}");
        }
        assert_eq!(b.failed(&busy(0)), INITIAL, "a server asking for no wait still gets the floor");
        assert_eq!(b.failed(&busy(86_400)), MAX_RETRY_AFTER, "a day is a misconfigured server's");
    }

    #[test]
    fn a_server_set_wait_leaves_the_own_schedule_where_it_was() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        let first = b.failed_at(&refused(), t0);
        assert!(first <= INITIAL * 2, "{first:?}");
        let busy = ApiError::Status {
            code: 429,
            reason: "TooManyRequests".into(),
            message: String::new(),
            retry_after: Some(Duration::from_secs(1)),
        };
        for i in 1..6 {
            assert_eq!(b.failed_at(&busy, t0 + Duration::from_secs(i)), Duration::from_secs(1));
        }
        // The next failure of our own takes the second step, not the seventh.
        let next = b.failed_at(&refused(), t0 + Duration::from_secs(7));
        assert!(next >= INITIAL * 2 && next <= INITIAL * 4, "{next:?}");
    }

    #[test]
    fn retry_after_is_read_in_whole_seconds() {
        assert_eq!(retry_after(" 120 "), Some(Duration::from_secs(120)));
        assert_eq!(retry_after("0"), Some(Duration::ZERO));
        assert_eq!(retry_after("99999999999999999999999"), Some(MAX_RETRY_AFTER), "too large to hold");
        for unread in ["", "-5", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT"] {
            assert_eq!(retry_after(unread), None, "{unread:?}");
        }
    }
}
