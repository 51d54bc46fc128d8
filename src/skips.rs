//! Warnings about skipped input, bounded per pass: a list, a watch's minute, a sync, a reload
//! of the manifests. The first few in a pass are logged whole, naming the object; the rest are
//! counted into one line when the pass ends. A list of a million objects without a name is
//! then a dozen lines, not a million (126 MB of log).

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Warnings logged whole in one pass (or one window of a long pass).
pub const NAMED: usize = 10;

/// What the current pass on this thread has warned of.
struct Budget {
    what: String,
    named: usize,
    more: usize,
    window: Option<Duration>,
    since: Instant,
}

impl Budget {
    /// Logs the count of warnings not logged whole, if any, and starts counting again.
    fn flush(&mut self) {
        if self.more > 0 {
            log::warn!(
                "{}: {} more skipped without a line of their own (the first {NAMED} are above)",
                self.what,
                self.more
            );
        }
        self.named = 0;
        self.more = 0;
        self.since = Instant::now();
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Budget>> = const { RefCell::new(None) };
    /// A windowed pass that ended within its window: the next one of the same name on this
    /// thread goes on with its budget, so a server that closes each watch after a burst of
    /// bad objects gets ten lines a minute, not ten a watch.
    static UNFINISHED: RefCell<Option<Budget>> = const { RefCell::new(None) };
}

/// A pass on this thread, until dropped: warnings made through [`warn_skipped`] meanwhile are
/// bounded by [`NAMED`], and the rest counted into one line at the end.
#[must_use = "the pass ends when this is dropped"]
pub struct Pass {
    /// Whether this pass began the budget (an inner pass counts into the outer one).
    outer: bool,
}

/// Begins a pass named `what` (`listing services`, `this sync`) on this thread.
pub fn pass(what: &str) -> Pass {
    begin(what, None)
}

/// Begins a pass named `what` that may last long, or come again and again (a watch): every
/// `window`, the count so far is logged and the next warnings are named again. One that ends
/// within its window leaves its count to the next pass of the same name, or to the end of a
/// later one.
pub fn windowed(what: &str, window: Duration) -> Pass {
    begin(what, Some(window))
}

fn begin(what: &str, window: Option<Duration>) -> Pass {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_some() {
            return Pass { outer: false };
        }
        let unfinished = UNFINISHED.with(|u| u.borrow_mut().take()).filter(|b| b.what == what && window.is_some());
        *c = Some(unfinished.unwrap_or(Budget {
            what: what.to_string(),
            named: 0,
            more: 0,
            window,
            since: Instant::now(),
        }));
        Pass { outer: true }
    })
}

impl Drop for Pass {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        let Some(mut b) = CURRENT.with(|c| c.borrow_mut().take()) else { return };
        match b.window {
            Some(w) if b.since.elapsed() < w => UNFINISHED.with(|u| *u.borrow_mut() = Some(b)),
            _ => b.flush(),
        }
    }
}

/// Whether the next warning of this thread's pass is logged whole (`false`: it is counted);
/// always `true` outside a pass. Called by [`warn_skipped`].
pub fn admit() -> bool {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        let Some(b) = c.as_mut() else { return true };
        if b.window.is_some_and(|w| b.since.elapsed() >= w) {
            b.flush();
        }
        if b.named < NAMED {
            b.named += 1;
            true
        } else {
            b.more += 1;
            false
        }
    })
}

/// Logs each of `warnings` in one pass named `what` (inside another pass, in that one).
pub fn warn_each(what: &str, warnings: impl IntoIterator<Item = impl std::fmt::Display>) {
    let _pass = pass(what);
    for w in warnings {
        if admit() {
            log::warn!("{w}");
        }
    }
}

/// `log::warn!` for one skipped object (or a part of one), within the bound of this thread's
/// [`Pass`].
macro_rules! warn_skipped {
    ($($arg:tt)*) => {
        if $crate::skips::admit() {
            log::warn!($($arg)*);
        }
    };
}
pub(crate) use warn_skipped;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_names_the_first_few_and_counts_the_rest() {
        let admitted = |n: usize| (0..n).filter(|_| admit()).count();
        assert_eq!(admitted(3), 3, "outside a pass, every warning is logged");
        {
            let _list = pass("listing services");
            assert_eq!(admitted(1_000), NAMED);
            {
                let _inner = pass("nested");
                assert_eq!(admitted(5), 0, "an inner pass counts into the outer one");
            }
            assert_eq!(CURRENT.with(|c| c.borrow().as_ref().map(|b| b.more)), Some(1_000 - NAMED + 5));
        }
        assert!(CURRENT.with(|c| c.borrow().is_none()), "the pass ended");
        {
            let _watch = windowed("watching services", Duration::ZERO);
            assert_eq!(admitted(50), 50, "each window names its first warnings again");
        }
        for _ in 0..100 {
            let _watch = windowed("watching nodes", Duration::from_secs(60));
            admitted(50);
        }
        let pending = UNFINISHED.with(|u| u.borrow().as_ref().map(|b| (b.named, b.more)));
        assert_eq!(pending, Some((NAMED, 100 * 50 - NAMED)), "watch after watch, ten named a minute");
    }
}
