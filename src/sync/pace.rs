//! When the sync loop may act: retries that back off, and the pace of syncs, which bounds the
//! share of time the sync thread spends syncing (by what syncs cost), not the count of syncs.

use super::MIN_RETRY;
use crate::config::MAX_DURATION;
use std::time::{Duration, Instant};

/// `t + d`, or as far as the longest period allows if that overflows.
pub(super) fn after(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).or_else(|| t.checked_add(MAX_DURATION)).unwrap_or(t)
}

/// A retry schedule: nothing before `at`; after each failure the wait doubles, from a floor
/// (never below `MIN_RETRY`: what fails at once must not spin) up to a cap. Exact, without
/// the jitter of the API client's `kube::Backoff`: one node retries against its own kernel.
#[derive(Debug, Clone, Copy)]
pub(super) struct RetryPace {
    at: Option<Instant>,
    wait: Duration,
    floor: Duration,
    cap: Duration,
}

impl RetryPace {
    pub(super) fn new(floor: Duration, cap: Duration) -> RetryPace {
        let floor = floor.max(MIN_RETRY);
        RetryPace { at: None, wait: floor, floor, cap: cap.max(floor) }
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

    /// Whether a retry holds syncs back at `now`.
    pub(super) fn holds(&self, now: Instant) -> bool {
        self.at.is_some_and(|at| at > now)
    }
}

/// A full sync is taken to cost at least this share of the period, so that on a small cluster,
/// whose full sync costs a millisecond, cheap syncs are not held for most of a period.
const MIN_FULL_COST_PER_PERIOD: f64 = 0.05;

/// Full syncs' worth of work banked while idle: upstream's burst of two syncs.
const BANKED_FULL_SYNCS: f64 = 2.0;

/// The longest a change is held for the changes that follow it (see [`Pace::gather`]).
const GATHER_MAX: Duration = Duration::from_millis(5);

/// How fast the estimate of a sync's fixed cost (the cheapest recent sync) rises towards a
/// dearer sync: a sixteenth of the way each time, so that a lasting rise (a grown cluster) is
/// followed within some dozens of syncs. A long burst of big syncs raises it too, but by then
/// each sync's rest under the aim, f / aim − c, is mostly spent while the sync runs, and the
/// bound paces them.
const FIXED_COST_RISE: u32 = 16;

/// Seconds of sync work that may start at `at`, earned at some share of the time, up to a bank;
/// below zero, a debt to rest off first.
#[derive(Debug, Clone, Copy)]
struct Credit {
    credit: f64,
    at: Instant,
}

impl Credit {
    /// The credit at `t`: what was banked, plus what `share` earned since, up to `bank`.
    fn value_at(&self, t: Instant, share: f64, bank: f64) -> f64 {
        let earned = t.saturating_duration_since(self.at).as_secs_f64() * share;
        (self.credit + earned).min(bank)
    }

    /// When work may start again, earning at `share`; never later than a `period` after `at`.
    fn next_allowed(&self, share: f64, period: Duration) -> Instant {
        if self.credit >= 0.0 {
            return self.at;
        }
        after(self.at, Duration::from_secs_f64(-self.credit / share).min(period))
    }

    /// `spent` seconds of work ended at `end`, from `credit` (the credit at `end`). The debt is
    /// capped at one period's rest: a sync dearer than a full one (or F measured lower since)
    /// never holds the next change back longer than upstream's pace would.
    fn spend(&mut self, credit: f64, spent: f64, end: Instant, share: f64, period: Duration) {
        self.credit = (credit - spent).max(-share * period.as_secs_f64());
        self.at = end;
    }
}

/// The pace of syncs by their cost. With `min_sync_period` P and F what the last full sync
/// cost (render and apply; at least `MIN_FULL_COST_PER_PERIOD` of P), the sync thread is busy
/// at most F / (F + P) of the time: what syncing fully once per period, counted from the end of
/// each sync, costs — upstream's bound on a cluster whose syncs are all full ones. A sync that
/// cost c earns a rest of c·P/F, never more than P, so a change never waits longer than a
/// period; up to two full syncs' worth of work is banked while idle (upstream's burst of two),
/// so cheap changes (a Service and its EndpointSlice a moment apart) go out at once, and so
/// does a large change set streaming in over a few syncs. A sync that sent nothing costs
/// nothing.
///
/// Below that bound, the aim (`--sync-share`) bounds what syncing *often* costs: each sync's
/// fixed cost (the cheapest recent sync's), whatever it carried, is charged to a credit of its
/// own earned at the aimed share. A steady stream of cheap changes then goes several to a
/// sync, the rest following the fixed cost that more changes to a sync would spare; a storm
/// of big syncs, whose cost is their changes' and would not shrink by waiting, is paced by the
/// bound alone, so its last changes do not wait a period for the aim.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    period: Duration,
    /// What a full sync costs, as far as the pace counts it.
    full: Duration,
    /// Work at the bound's share, every sync's whole cost charged.
    bound: Credit,
    /// Work at the aimed share, each sync's fixed cost charged.
    aimed: Credit,
    /// Whether F was measured: the first full sync is paid from a full bank (the proxy was idle
    /// before it).
    measured: bool,
    /// What the last partial sync that sent something cost.
    partial: Duration,
    /// A sync's fixed cost: the cheapest recent partial sync that sent something (rising a
    /// `FIXED_COST_RISE`th of the way towards each dearer one); unknown before the first, and
    /// nothing is charged to the aim until then.
    fixed: Option<Duration>,
    /// The busy share aimed for while changes keep coming (`--sync-share`), when below the
    /// period's bound.
    aim: f64,
}

impl Pace {
    pub(super) fn new(period: Duration, now: Instant) -> Pace {
        let full = period.mul_f64(MIN_FULL_COST_PER_PERIOD);
        let banked = Credit { credit: full.as_secs_f64() * BANKED_FULL_SYNCS, at: now };
        Pace {
            period,
            full,
            bound: banked,
            aimed: banked,
            measured: false,
            partial: Duration::ZERO,
            fixed: None,
            aim: 1.0,
        }
    }

    /// Aims the pace at `share` of one core for the fixed cost of syncing while changes keep
    /// coming: once the bank is spent, a sync of fixed cost f that took c earns a rest of
    /// f / share − c (none once c reaches f / share), so a steady stream of changes goes out
    /// several to a sync instead of one each, and the first changes after a quiet spell still
    /// go at once from the bank.
    pub(super) fn aiming_at(mut self, share: f64) -> Pace {
        self.aim = share.clamp(f64::MIN_POSITIVE, 1.0);
        self
    }

    /// How long a change that arrives to an idle loop may be held for the ones that follow it:
    /// half what the last partial sync cost, at most `GATHER_MAX`; nothing with the pace off.
    /// An isolated change pays at most half a sync more, and a change that costs little is
    /// held little: a ClusterIP Service alone, before its EndpointSlice, adds elements only
    /// (no jump for the kernel to validate), so it may go in a sync of its own.
    pub(super) fn gather(&self) -> Duration {
        if self.period.is_zero() { Duration::ZERO } else { (self.partial / 2).min(GATHER_MAX) }
    }

    /// The busy share the period's bound allows: F / (F + P).
    fn share(&self) -> f64 {
        let f = self.full.as_secs_f64();
        f / (f + self.period.as_secs_f64())
    }

    /// The most that can be banked, in either credit.
    fn bank(&self) -> f64 {
        self.full.as_secs_f64() * BANKED_FULL_SYNCS
    }

    /// Whether the aim is below the bound, and so holds syncs back of its own.
    fn aiming(&self) -> bool {
        self.aim < self.share()
    }

    /// When the next sync may start.
    pub(super) fn next_allowed(&self) -> Instant {
        if self.period.is_zero() {
            return self.bound.at;
        }
        let bound = self.bound.next_allowed(self.share(), self.period);
        if !self.aiming() {
            return bound;
        }
        bound.max(self.aimed.next_allowed(self.aim, self.period))
    }

    /// Notes a sync that ran from `start` to `end`; `full` when it rewrote everything, which
    /// measures F again; `sent` false when it sent nothing, which is not charged.
    pub(super) fn charge(&mut self, start: Instant, end: Instant, full: bool, sent: bool) {
        if self.period.is_zero() {
            return;
        }
        let (share, bank) = (self.share(), self.bank());
        let mut credits = [self.bound.value_at(end, share, bank), self.aimed.value_at(end, self.aim.min(share), bank)];
        let cost = end.saturating_duration_since(start);
        if full {
            self.full = cost.max(self.period.mul_f64(MIN_FULL_COST_PER_PERIOD));
            if !self.measured {
                credits = [self.bank(); 2];
            }
            self.measured = true;
        }
        let fixed = self.fixed.map_or(Duration::ZERO, |f| f.min(cost));
        if sent && !full {
            self.partial = cost;
            self.fixed = Some(match self.fixed {
                Some(f) if f < cost => f + (cost - f) / FIXED_COST_RISE,
                _ => cost,
            });
        }
        let (whole, fixed) = if sent { (cost.as_secs_f64(), fixed.as_secs_f64()) } else { (0.0, 0.0) };
        let (share, bank) = (self.share(), self.bank());
        self.bound.spend(credits[0].min(bank), whole, end, share, self.period);
        self.aimed.spend(credits[1].min(bank), fixed, end, self.aim.min(share), self.period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    /// Whether `a` and `b` are within a microsecond (the pace computes in floating point).
    fn close(a: Instant, b: Instant) -> bool {
        a.max(b) - a.min(b) < Duration::from_micros(1)
    }

    /// A pace that has measured a first full sync of `full`, then idled ten periods.
    fn measured(full: Duration) -> (Pace, Instant) {
        let t0 = Instant::now();
        let mut pace = Pace::new(P, t0);
        pace.charge(t0, t0 + full, true, true);
        assert!(close(pace.next_allowed(), t0 + full), "the first full sync is paid from a full bank");
        (pace, t0 + full + P * 10)
    }

    #[test]
    fn cheap_syncs_go_at_once_until_two_full_syncs_worth_is_spent() {
        let (mut pace, mut t) = measured(MS * 200);
        assert!((pace.share() - 0.2 / 1.2).abs() < 1e-9);
        let mut at_once = 0;
        while pace.next_allowed() <= t {
            pace.charge(t, t + MS * 5, false, true);
            t += MS * 5;
            at_once += 1;
            assert!(at_once < 1000, "the bank never ran out");
        }
        // 400 ms banked, plus what the share earned meanwhile.
        assert!((80..120).contains(&at_once), "{at_once} syncs went at once");
        // Then one 5 ms sync earns a rest of at most 5 ms × P / F = 25 ms, not a period.
        let rest = pace.next_allowed() - t;
        assert!(rest <= MS * 25, "rest {rest:?}");
    }

    #[test]
    fn under_a_storm_the_busy_share_stays_within_its_bound() {
        let (mut pace, start) = measured(MS * 200);
        let mut t = start;
        let mut busy = Duration::ZERO;
        let mut syncs = 0;
        // A sync as soon as allowed, each costing 8 ms, for a minute.
        while t < start + P * 60 {
            t = t.max(pace.next_allowed());
            pace.charge(t, t + MS * 8, false, true);
            t += MS * 8;
            busy += MS * 8;
            syncs += 1;
        }
        let share = busy.as_secs_f64() / (t - start).as_secs_f64();
        // The bound, plus the 400 ms banked at the start spread over the minute.
        assert!(share <= pace.share() + 0.4 / 60.0 + 1e-3, "share {share}");
        assert!(syncs <= 1320, "{syncs} syncs");
    }

    /// Changes one every 10 ms for a minute, each sync as soon as the pace allows and costing
    /// 4 ms plus 0.1 ms a change: the busy share, the syncs, and the longest a change waited.
    fn steady_stream(pace: &mut Pace, start: Instant) -> (f64, usize, Duration) {
        let arrivals: Vec<Instant> = (0..6000).map(|i| start + MS * 10 * i).collect();
        let (mut t, mut next, mut busy, mut syncs, mut longest) = (start, 0, Duration::ZERO, 0, Duration::ZERO);
        while next < arrivals.len() {
            t = t.max(arrivals[next]).max(pace.next_allowed());
            let taken = arrivals[next..].iter().take_while(|a| **a <= t).count();
            longest = longest.max(t - arrivals[next]);
            let cost = MS * 4 + Duration::from_micros(100) * taken as u32;
            pace.charge(t, t + cost, false, true);
            (t, next, busy, syncs) = (t + cost, next + taken, busy + cost, syncs + 1);
        }
        (busy.as_secs_f64() / (t - start).as_secs_f64(), syncs, longest)
    }

    #[test]
    fn a_steady_stream_of_changes_is_coalesced_to_the_share_aimed_at() {
        // At 30k services a full sync costs about 350 ms: the period's bound alone lets syncs
        // take 26 % of the time, one sync a change.
        let (mut unaimed, start) = measured(MS * 350);
        let (share, syncs, _) = steady_stream(&mut unaimed, start);
        assert!(share > 0.25 && syncs > 3000, "without an aim: {share} busy, {syncs} syncs");
        let (pace, start) = measured(MS * 350);
        let mut aimed = pace.aiming_at(0.08);
        let (share, syncs, longest) = steady_stream(&mut aimed, start);
        // The aim for each sync's fixed cost, the changes' own cost (0.1 ms each, 100 a
        // second: 1 % of a core, which no rest would spare), and the 700 ms bank spent at the
        // start.
        assert!(share <= 0.08 + 0.01 + 0.7 / 60.0 + 1e-3, "busy {share}");
        assert!(syncs < 1500, "{syncs} syncs for 6,000 changes");
        assert!(longest <= MS * 60, "a change waited {longest:?}");
    }

    /// Changes arriving at `arrivals`, each sync as soon as the pace allows, taking every
    /// change arrived, and costing `cost(changes)`: how long the last change waited.
    fn last_wait(pace: &mut Pace, arrivals: &[Instant], cost: impl Fn(usize) -> Duration) -> Duration {
        let (mut t, mut next, mut last) = (arrivals[0], 0, Duration::ZERO);
        while next < arrivals.len() {
            t = t.max(arrivals[next]).max(pace.next_allowed());
            let taken = arrivals[next..].iter().take_while(|a| **a <= t).count();
            last = t - arrivals[next + taken - 1];
            pace.charge(t, t + cost(taken), false, true);
            (t, next) = (t + cost(taken), next + taken);
        }
        last
    }

    #[test]
    fn a_burst_of_dear_syncs_is_paced_by_the_bound_not_held_a_period_by_the_aim() {
        // Every EndpointSlice of 30k Services changed at once, after a while of cheap syncs:
        // the events stream in over 1.3 s, each change costing the sync 25 µs besides its
        // fixed 0.5 ms. The bank (two full syncs, 520 ms) does not cover the burst's 750 ms.
        let cost = |n: usize| Duration::from_micros(500 + 25 * n as u64);
        let burst = |start: Instant| -> Vec<Instant> {
            let cheap = (0..100).map(|i| start + MS * 10 * i);
            let burst =
                (0..30_000u32).map(|i| start + P * 2 + Duration::from_micros(1300 * 1000 / 30_000 * u64::from(i)));
            cheap.chain(burst).collect()
        };
        let (mut unaimed, start) = measured(MS * 260);
        let bound = last_wait(&mut unaimed, &burst(start), cost);
        let (pace, start) = measured(MS * 260);
        let mut aimed = pace.aiming_at(0.08);
        let waited = last_wait(&mut aimed, &burst(start), cost);
        assert!(waited <= bound + MS * 10, "the aim held the last change {waited:?}, the bound {bound:?}");
        assert!(waited < P / 2, "the last change waited {waited:?}");
    }

    #[test]
    fn no_rest_is_longer_than_the_period_even_after_a_sync_dearer_than_a_full_one() {
        let (mut pace, t) = measured(MS * 200);
        pace.charge(t, t + P * 3, false, true);
        assert!(close(pace.next_allowed(), t + P * 3 + P));
    }

    #[test]
    fn full_syncs_that_cost_seconds_keep_the_share_and_rest_at_most_a_period() {
        let t0 = Instant::now();
        let mut pace = Pace::new(P, t0);
        let mut t = t0;
        for _ in 0..20 {
            let start = t.max(pace.next_allowed());
            assert!(start - t <= P, "a rest of {:?}", start - t);
            pace.charge(start, start + P * 4, true, true);
            t = start + P * 4;
        }
        // 4 / (4 + 1) of the time, plus the first bank of 8 s spread over the run.
        let share = 80.0 / (t - t0).as_secs_f64();
        assert!(share <= 0.8 + 8.0 / (t - t0).as_secs_f64() + 1e-6, "share {share}");
        assert!(share > 0.8, "share {share}");
    }

    #[test]
    fn a_sync_that_sends_nothing_costs_a_change_nothing() {
        let (mut pace, t) = measured(MS * 200);
        // 500 ms of work from a 400 ms bank: a debt of 100 ms, rested off in 600 ms.
        pace.charge(t, t + MS * 500, false, true);
        let at = pace.next_allowed();
        assert!(close(at, t + MS * 1100));
        pace.charge(at, at + MS * 50, false, false);
        assert!(close(pace.next_allowed(), at + MS * 50), "the next real change goes as soon as it could before");
    }

    #[test]
    fn a_small_clusters_cheap_syncs_are_not_held_for_a_period() {
        // A full sync of 1 ms counts as 50 ms: 120 ms of syncs past the 100 ms bank rest
        // 420 ms, not a period.
        let (mut pace, t) = measured(MS);
        pace.charge(t, t + MS * 120, false, true);
        let rest = pace.next_allowed() - (t + MS * 120);
        assert!(rest > MS * 400 && rest <= MS * 440, "rest {rest:?}");
    }

    #[test]
    fn without_a_period_nothing_waits() {
        let t0 = Instant::now();
        let mut pace = Pace::new(Duration::ZERO, t0);
        pace.charge(t0, t0 + P, true, true);
        assert!(pace.next_allowed() <= t0 + P);
        pace.charge(t0 + P, t0 + P + MS * 6, false, true);
        assert_eq!(pace.gather(), Duration::ZERO, "no gather with the pace off");
    }

    #[test]
    fn a_gather_is_half_the_last_partial_sync_that_sent_something() {
        let (mut pace, t) = measured(MS * 200);
        assert_eq!(pace.gather(), Duration::ZERO, "no partial sync measured yet");
        pace.charge(t, t + MS * 6, false, true);
        assert_eq!(pace.gather(), MS * 3);
        pace.charge(t + MS * 7, t + MS * 8, false, true);
        assert_eq!(pace.gather(), MS / 2, "a cheap sync, a short hold");
        pace.charge(t + MS * 9, t + MS * 15, false, true);
        pace.charge(t + MS * 10, t + MS * 11, false, false);
        assert_eq!(pace.gather(), MS * 3, "a sync that sent nothing measures nothing");
        pace.charge(t + MS * 20, t + MS * 520, true, true);
        assert_eq!(pace.gather(), MS * 3, "a full sync is not a partial one");
        pace.charge(t + MS * 600, t + MS * 640, false, true);
        assert_eq!(pace.gather(), GATHER_MAX, "never more than GATHER_MAX");
    }
}
