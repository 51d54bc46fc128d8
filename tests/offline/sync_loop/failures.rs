//! Failed syncs and broken state: retries with backoff, stale chains deleted when due, repairs
//! after lost notifications, and a family the kernel refuses retried alone.

use super::*;

#[test]
fn failed_syncs_are_retried_fully_after_a_backoff_with_a_floor() {
    let fake = Fake::default();
    fake.with(|s| s.failing = usize::MAX);
    // Even with no minimum between syncs, a failing sync must not spin.
    let (syncer, inbox) = listed(&fake, periods(Duration::ZERO), 2);
    running(syncer, &inbox, || std::thread::sleep(MIN_RETRY * 2 + MIN_RETRY / 2));
    let calls = fake.calls();
    // At 0 s, after 1 s, then after 2 s more (3 s): two within 2.5 s.
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1].resync, Resync::Replace, "a retry is a full sync");
}

#[test]
fn stale_chains_are_deleted_when_due_without_another_sync() {
    let fake = Fake::default();
    let (syncer, inbox) = listed(&fake, periods(Duration::ZERO), 1);
    fake.with(|s| s.stale_at = Some(Instant::now() + Duration::from_millis(200)));
    running(syncer, &inbox, || std::thread::sleep(Duration::from_millis(600)));
    assert_eq!(fake.calls().len(), 1);
    assert_eq!(fake.with(|s| s.cleanups), 1, "the flushed chains must be deleted on schedule");
}

#[test]
fn a_failing_stale_chain_deletion_is_retried_with_backoff_not_in_a_loop() {
    let fake = Fake::default();
    let (syncer, inbox) = listed(&fake, periods(Duration::ZERO), 1);
    fake.with(|s| {
        s.stale_at = Some(Instant::now());
        s.cleanup_fails = true;
    });
    running(syncer, &inbox, || std::thread::sleep(MIN_RETRY * 2 + MIN_RETRY / 2));
    // At about 0 s, 1 s and 3 s: two within 2.5 s.
    assert_eq!(fake.with(|s| s.cleanups), 2);
}

#[test]
fn lost_notifications_and_broken_tables_mean_a_repair() {
    let fake = Fake::default();
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 2);
    turn(&mut syncer, &inbox);
    fake.with(|s| s.broken = true);
    inbox.request(|r| r.unsure = true);
    turn(&mut syncer, &inbox);
    let kinds: Vec<Resync> = fake.calls().iter().map(|c| c.resync).collect();
    assert_eq!(kinds, [Resync::Replace, Resync::Replace]);
}

#[test]
fn a_family_the_kernel_refuses_is_retried_alone_while_the_other_keeps_syncing() {
    use kube_nftproxy::health::{Health, answer};
    use kube_nftproxy::metrics::Metrics;
    use kube_nftproxy::observe::Observers;
    use std::time::SystemTime;
    let fake = Fake::default();
    // Another process owns IPv4's table from the start; IPv6's takes every sync.
    fake.with(|s| s.refusing = vec![Family::V4]);
    let (m, h) = (Arc::new(Metrics::new().unwrap()), Arc::new(Health::new(Duration::from_millis(500))));
    let (syncer, inbox) = listed(&fake, periods(Duration::ZERO), 3);
    let ran = Arc::new(Mutex::new(0));
    let seen = ran.clone();
    let mut syncer = syncer
        .with_observers(Observers::default().with_metrics(m.clone()).with_health(h.clone()))
        .after_first_sync(Box::new(move || *seen.lock().unwrap() += 1));
    let failures = |f: &str| m.sync_failures.with_label_values(&[f]).get();
    let status = |after: Duration| {
        let (code, body) = answer(&h, "/healthz", SystemTime::now() + after).unwrap();
        (code, serde_json::from_str::<Value>(&body).unwrap()["status"].clone())
    };
    turn(&mut syncer, &inbox);
    assert_eq!((failures("IPv4"), failures("IPv6")), (1, 0), "counted for the refused family only");
    assert_eq!(*ran.lock().unwrap(), 0, "no takeover of kube-proxy's rules while one of ours is refused");
    let (code, s) = status(Duration::from_secs(5));
    assert_eq!((code, s["IPv4"].is_null(), s["IPv6"]["healthy"].clone()), (200, true, json!(true)), "{s}");
    // A change meanwhile is synced at once, to IPv6 alone, as a partial sync: IPv4 waits
    // for its retry (the loop's backoff), and the loop wakes for that retry.
    inbox.send(slice(1, 1));
    turn(&mut syncer, &inbox);
    let calls = fake.calls();
    assert_eq!(calls.iter().map(|c| c.hold.clone()).collect::<Vec<_>>(), [vec![], vec![Family::V4]]);
    assert_eq!(calls[1].resync, Resync::Changes, "IPv6's sync stays partial");
    assert!(syncer.next_wake() <= Instant::now() + MIN_RETRY, "the loop must wake for the retry");
    // The table is freed: the retry, with nothing else to sync, applies IPv4.
    fake.with(|s| s.refusing.clear());
    std::thread::sleep(MIN_RETRY);
    turn(&mut syncer, &inbox);
    assert_eq!(fake.calls().len(), 3, "{:?}", fake.calls());
    assert!(fake.calls()[2].hold.is_empty());
    assert_eq!(*ran.lock().unwrap(), 1, "the takeover once both families are in");
    assert_eq!(failures("IPv4"), 1, "the retry went through");
    let (code, s) = status(Duration::ZERO);
    assert_eq!((code, s["IPv4"]["healthy"].clone()), (200, json!(true)), "{s}");
    // Refused again, after both had synced: past the timeout IPv4 is unhealthy, IPv6 not.
    fake.with(|s| s.refusing = vec![Family::V4]);
    inbox.send(slice(2, 1));
    turn(&mut syncer, &inbox);
    let (code, s) = status(Duration::from_secs(1));
    assert_eq!((code, s["IPv4"]["healthy"].clone(), s["IPv6"]["healthy"].clone()), (503, json!(false), json!(true)));
    assert_eq!((failures("IPv4"), failures("IPv6")), (2, 0));
    assert!(syncer.summary().contains("the kernel refuses the rules of IPv4 (1 attempts)"), "{}", syncer.summary());
    assert!(m.last_sync.with_label_values(&["IPv4"]).get() < m.last_sync.with_label_values(&["IPv6"]).get());
}
