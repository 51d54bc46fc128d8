//! The client-side rate limit, as client-go's: a token bucket refilled at `qps` tokens a second,
//! holding at most `burst`, full at the start. Each request the client sends (every list page,
//! the Event) takes one token first; a watch does not (client-go leaves watches unthrottled,
//! so a long-lived stream reopening is never queued behind a relist). A request without a
//! token waits its turn; the wait ends early when the daemon stops. It is bounded: each
//! thread (four reflectors and the Event's) holds at most one turn, so none waits longer
//! than five turns, 5 / qps.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// client-go's `DefaultQPS`, also kube-proxy's default `clientConnection.qps`.
pub const DEFAULT_QPS: f32 = 5.0;

/// client-go's `DefaultBurst`, also kube-proxy's default `clientConnection.burst`.
pub const DEFAULT_BURST: u32 = 10;

/// How often a waiting request looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// A token bucket shared by every thread of one client.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens left (below zero: owed to requests already told to wait) as of the instant.
    state: Mutex<(f64, Instant)>,
}

/// The daemon stopped while a request waited for its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

impl TokenBucket {
    /// The bucket for `qps` and `burst` as client-go reads them: 0 means the default (5 a
    /// second, burst 10); a negative (or infinite) `qps` turns the limit off (`None`).
    pub fn new(qps: f32, burst: u32) -> Option<TokenBucket> {
        let qps = if qps == 0.0 || qps.is_nan() { DEFAULT_QPS } else { qps };
        if qps < 0.0 || qps.is_infinite() {
            return None;
        }
        let burst = if burst == 0 { DEFAULT_BURST } else { burst };
        let burst = f64::from(burst);
        Some(TokenBucket { qps: f64::from(qps), burst, state: Mutex::new((burst, Instant::now())) })
    }

    /// Tokens a second.
    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// The bucket's size.
    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// Takes a token at `now`: how long the request must wait before it may be sent. Tokens
    /// are handed out in the order asked for, each waiter owing the bucket one.
    pub fn reserve(&self, now: Instant) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = *state;
        let refilled = (tokens + now.saturating_duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now.max(last));
        // A tiny qps (upstream takes 1e-30) makes a wait no Duration holds: forever, then.
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-left / self.qps).unwrap_or(Duration::MAX)
        }
    }

    /// Takes a token, sleeping until it is due: how long that took, or [`Stopped`] as soon
    /// as `stop` is set (within a tenth of a second).
    pub fn wait(&self, stop: &AtomicBool) -> Result<Duration, Stopped> {
        let started = Instant::now();
        // None: a wait past what an Instant holds, which only a stop ends.
        let until = started.checked_add(self.reserve(started));
        loop {
            if stop.load(Ordering::SeqCst) {
                return Err(Stopped);
            }
            let left = until.map_or(STOP_CHECK, |until| until.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Ok(started.elapsed());
            }
            std::thread::sleep(left.min(STOP_CHECK));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_client_gos_defaults_and_a_negative_qps_no_limit() {
        let b = TokenBucket::new(0.0, 0).expect("a limit");
        assert_eq!((b.qps(), b.burst()), (5.0, 10.0));
        let b = TokenBucket::new(1.5, 3).expect("a limit");
        assert_eq!((b.qps(), b.burst()), (1.5, 3.0));
        assert!(TokenBucket::new(-1.0, 10).is_none());
        assert!(TokenBucket::new(f32::INFINITY, 10).is_none());
    }

    #[test]
    fn the_bucket_starts_full_then_hands_out_qps_tokens_a_second_in_order() {
        let b = TokenBucket::new(2.0, 3).expect("a limit");
        let t0 = Instant::now();
        for i in 0..3 {
            assert_eq!(b.reserve(t0), Duration::ZERO, "token {i} of the full bucket");
        }
        // Three more at once wait half a second more each: they queue.
        let waits: Vec<Duration> = (0..3).map(|_| b.reserve(t0)).collect();
        assert_eq!(waits, [500, 1000, 1500].map(Duration::from_millis));
        // Two seconds later the debt (1.5 s) is paid and half a second refilled one token.
        assert_eq!(b.reserve(t0 + Duration::from_secs(2)), Duration::ZERO);
        assert_eq!(b.reserve(t0 + Duration::from_secs(2)), Duration::from_millis(500));
        // A long quiet spell fills the bucket to its size, no more.
        let later = t0 + Duration::from_secs(3600);
        let free = (0..10).take_while(|_| b.reserve(later).is_zero()).count();
        assert_eq!(free, 3);
    }

    #[test]
    fn a_wait_ends_at_stop() {
        let b = TokenBucket::new(0.01, 1).expect("a limit");
        let stop = AtomicBool::new(false);
        assert_eq!(b.wait(&stop).map(|_| ()), Ok(()), "the first token is free");
        let stop = std::sync::Arc::new(stop);
        let flag = stop.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            flag.store(true, Ordering::SeqCst);
        });
        let started = Instant::now();
        assert_eq!(b.wait(&stop), Err(Stopped), "the next is 100 s away");
        assert!(started.elapsed() < Duration::from_secs(1), "stopped after {:?}", started.elapsed());
        setter.join().unwrap();
    }

    #[test]
    fn a_qps_too_small_for_a_duration_waits_until_stop_without_a_panic() {
        let b = TokenBucket::new(1e-30, 1).expect("a limit");
        let t0 = Instant::now();
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::MAX, "the next token is 1e30 s away");
        let stop = AtomicBool::new(true);
        assert_eq!(b.wait(&stop), Err(Stopped));
    }
}
