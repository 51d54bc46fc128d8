//! Families whose part of a sync the kernel refused while the other's went through (another
//! process owns that family's table): the loop keeps syncing the other family as usual and
//! retries the refused one after the loop's backoff (at least [`super::MIN_RETRY`], doubling
//! up to `--sync-period`), leaving it out of the syncs between. A refusal is logged when it
//! starts and when it ends; the retries between are logged at debug level only.

use super::pace::RetryPace;
use crate::model::Family;
use crate::nft::NftError;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The refused families and when to try them again.
#[derive(Debug)]
pub(super) struct Refused {
    /// Each refused family, with its refused attempts in a row.
    families: BTreeMap<Family, u32>,
    retry: RetryPace,
}

impl Refused {
    /// Retries waiting from `floor` doubling to `cap`, as the loop's own.
    pub(super) fn new(floor: Duration, cap: Duration) -> Refused {
        Refused { families: BTreeMap::new(), retry: RetryPace::new(floor, cap) }
    }

    /// When a refused family is to be tried again; `None` while none is refused.
    pub(super) fn retry_at(&self, now: Instant) -> Option<Instant> {
        (!self.families.is_empty()).then(|| self.retry.not_before(now))
    }

    /// Whether a refused family's retry is due at `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.retry_at(now).is_some_and(|at| at <= now)
    }

    /// The families a sync at `now` leaves alone: every refused one, until its retry is due.
    pub(super) fn hold(&self, now: Instant) -> Vec<Family> {
        if self.due(now) { Vec::new() } else { self.families.keys().copied().collect() }
    }

    /// Whether no family is refused.
    pub(super) fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// The refused families, for the summary.
    pub(super) fn describe(&self) -> Option<String> {
        let each: Vec<String> = self.families.iter().map(|(f, n)| format!("{} ({n} attempts)", f.label())).collect();
        (!each.is_empty()).then(|| format!("the kernel refuses the rules of {}", each.join(", ")))
    }

    /// Notes a sync at `now` that went through for the families of `tried` but those in
    /// `refused`; returns the families applied.
    pub(super) fn note(&mut self, tried: &[Family], refused: &[(Family, NftError)], now: Instant) -> Vec<Family> {
        let applied: Vec<Family> = tried.iter().copied().filter(|f| refused.iter().all(|(r, _)| r != f)).collect();
        for family in &applied {
            if let Some(n) = self.families.remove(family) {
                log::info!("the {} rules went through again after {n} refused attempts", family.label());
            }
        }
        if refused.is_empty() {
            if self.families.is_empty() {
                self.retry.succeeded();
            }
            return applied;
        }
        let wait = self.retry.failed(now);
        let others: Vec<&str> = applied.iter().map(|f| f.label()).collect();
        for (family, e) in refused {
            let n = self.families.entry(*family).or_default();
            *n += 1;
            let name = family.label();
            if *n == 1 {
                log::error!(
                    "the kernel refused the {name} rules, which stay as it last took them; {} applied alone; retrying {name} \
                     in {wait:?} with a full sync of its table (retries logged at debug level): {e}",
                    if others.is_empty() { "nothing else was".to_string() } else { others.join(", ") }
                );
            } else {
                log::debug!("the kernel refused the {name} rules again ({n} attempts); retrying in {wait:?}: {e}");
            }
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal() -> NftError {
        NftError::Kernel { errno: libc::EPERM, seq: 1 }
    }

    #[test]
    fn a_refused_family_is_held_until_its_retry_which_backs_off_and_ends_when_it_goes_through() {
        let mut r = Refused::new(Duration::ZERO, Duration::from_secs(30));
        let t0 = Instant::now();
        assert_eq!(r.note(&Family::ALL, &[(Family::V6, refusal())], t0), [Family::V4]);
        assert_eq!(r.hold(t0), [Family::V6], "left out of the syncs before its retry");
        assert_eq!(r.retry_at(t0), Some(t0 + Duration::from_secs(1)), "the loop's floor");
        let t1 = t0 + Duration::from_secs(1);
        assert!(r.due(t1) && r.hold(t1).is_empty(), "tried again when due");
        assert_eq!(r.note(&Family::ALL, &[(Family::V6, refusal())], t1), [Family::V4]);
        assert_eq!(r.retry_at(t1), Some(t1 + Duration::from_secs(2)), "doubling");
        // A sync of IPv4 alone in between changes nothing for IPv6.
        assert_eq!(r.note(&[Family::V4], &[], t1), [Family::V4]);
        assert_eq!(r.hold(t1), [Family::V6]);
        assert!(r.describe().is_some_and(|d| d.contains("IPv6 (2 attempts)")), "{:?}", r.describe());
        let t3 = t1 + Duration::from_secs(2);
        assert_eq!(r.note(&Family::ALL, &[], t3), Family::ALL);
        assert_eq!((r.retry_at(t3), r.describe()), (None, None), "nothing refused any more");
    }
}
