//! The pace's decisions in the running loop, with syncs that cost what the fake kernel is told:
//! cheap changes go at once, a storm coalesces within the busy share and the period, a sync
//! that sends nothing costs nothing, and each change's wait is counted under what held it.

use super::*;
use kube_nftproxy::metrics::Metrics;
use kube_nftproxy::observe::Observers;

const MS: Duration = Duration::from_millis(1);

/// Waits until `fake` has seen `n` syncs (at most 5 s); how long that took.
fn synced(fake: &Fake, n: usize) -> Duration {
    let start = Instant::now();
    while fake.calls().len() < n && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(MS);
    }
    assert!(fake.calls().len() >= n, "sync {n} never came");
    start.elapsed()
}

/// A loop over three services with a 1 s period whose syncs cost `costs` (full, partial), with
/// metrics; it has synced once and banked its whole allowance again.
fn paced(fake: &Fake, costs: (Duration, Duration)) -> (Syncer<Fake>, Arc<Inbox>, Arc<Metrics>) {
    fake.with(|s| s.costs = costs);
    let m = Arc::new(Metrics::new().unwrap());
    let (syncer, inbox) = listed(fake, periods(Duration::from_secs(1)), 3);
    (syncer.with_observers(Observers::default().with_metrics(m.clone())), inbox, m)
}

/// The first sync, then time for the bank to fill again (it earns F / (F + P) a second).
fn first_sync_and_rest(fake: &Fake) {
    synced(fake, 1);
    std::thread::sleep(Duration::from_millis(1200));
}

fn waits(m: &Metrics, reason: &str) -> prometheus::proto::Histogram {
    use prometheus::core::Collector;
    let h = m.change_wait.with_label_values(&[reason]);
    h.collect()[0].get_metric()[0].get_histogram().clone()
}

#[test]
fn cheap_changes_go_at_once_then_the_pace_holds_them_a_fraction_of_a_period() {
    let fake = Fake::default();
    // F = 100 ms: a 10 ms partial sync earns a rest of 100 ms once the 200 ms bank is spent.
    let (syncer, inbox, m) = paced(&fake, (MS * 100, MS * 10));
    running(syncer, &inbox, || {
        first_sync_and_rest(&fake);
        // A Service, then its EndpointSlice 20 ms later: neither waits.
        inbox.send(service(7));
        let took = synced(&fake, 2);
        assert!(took < MS * 80, "the Service waited {took:?}");
        std::thread::sleep(MS * 20);
        inbox.send(slice(7, 0));
        let took = synced(&fake, 3);
        assert!(took < MS * 80, "the EndpointSlice waited {took:?}");
        // Changes one after another: the bank lasts about twenty more, then each rests about
        // 100 ms, never a period.
        let mut took = Vec::new();
        for g in 1..=30 {
            inbox.send(slice(7, g));
            took.push(synced(&fake, 3 + g as usize));
        }
        assert!(took[..10].iter().all(|t| *t < MS * 80), "while banked: {took:?}");
        assert!(took[27..].iter().all(|t| *t > MS * 60 && *t < MS * 500), "paced: {took:?}");
    });
    assert!(waits(&m, "pace").get_sample_count() >= 2, "paced changes are counted as such");
}

#[test]
fn a_storm_coalesces_within_the_busy_share_and_no_change_waits_a_period() {
    let fake = Fake::default();
    // F counts as 50 ms (a twentieth of the period): the share is 50 / 1050.
    let (syncer, inbox, m) = paced(&fake, (MS, MS * 10));
    let mut storm = Duration::ZERO;
    running(syncer, &inbox, || {
        first_sync_and_rest(&fake);
        let before = fake.calls().len();
        let start = Instant::now();
        // A change every 2 ms for 2 s, round the three services.
        for k in 0..1000u32 {
            inbox.send(slice(k % 3, 1 + (k / 3) % 250));
            std::thread::sleep(MS * 2);
        }
        storm = start.elapsed();
        std::thread::sleep(Duration::from_millis(1200));
        let syncs = fake.calls().len() - before;
        // 100 ms banked and the share of the storm's time, 10 ms a sync.
        let bound = 10.0 + storm.as_secs_f64() * 50.0 / 1050.0 / 0.010 + 2.0;
        assert!((3..=bound as usize).contains(&syncs), "{syncs} syncs in {storm:?} (bound {bound})");
    });
    // Nothing lost: the last sync holds each service's last endpoint.
    let last = fake.calls().last().unwrap().endpoints.clone();
    for (i, g) in [(0, 84), (1, 83), (2, 83)] {
        let ip = format!("10.1.{g}.{}", i + 1);
        assert!(last.iter().any(|e| e.contains(&ip)), "service {i} lacks {ip}: {last:?}");
    }
    let paced = waits(&m, "pace");
    let within = |h: &prometheus::proto::Histogram, s: f64| {
        h.get_bucket().iter().find(|b| (b.upper_bound() - s).abs() < 1e-9).unwrap().cumulative_count()
    };
    assert!(paced.get_sample_count() > 100, "{storm:?}: {} paced", paced.get_sample_count());
    assert_eq!(within(&paced, 1.024), paced.get_sample_count(), "a change waited past the period");
}

#[test]
fn a_sync_that_sends_nothing_costs_the_next_change_nothing() {
    let fake = Fake::default();
    // Syncs that send nothing take 200 ms (rendering, say); charged, one would empty the 100 ms
    // bank and leave a debt, a rest of a second.
    let (syncer, inbox, _) = paced(&fake, (MS * 20, MS * 200));
    fake.with(|s| s.unchanged = true);
    running(syncer, &inbox, || {
        first_sync_and_rest(&fake);
        inbox.send(slice(0, 5));
        synced(&fake, 2);
        inbox.send(slice(1, 5));
        let took = synced(&fake, 3);
        assert!(took < MS * 700, "the change after a sync that sent nothing waited {took:?}");
    });
}

#[test]
fn each_change_is_counted_under_what_held_it() {
    let fake = Fake::default();
    // F = 200 ms: the 400 ms bank outlasts a sync hung for 100 ms, so what waited for it goes
    // at once.
    let (syncer, inbox, m) = paced(&fake, (MS * 200, MS * 5));
    running(syncer, &inbox, || {
        first_sync_and_rest(&fake);
        // Went at once.
        inbox.send(slice(0, 1));
        synced(&fake, 2);
        // The fake records a sync before the loop has finished it, and a change sent before
        // the loop is done counts as having waited for that sync. The wait is counted near
        // the end of the sync: after that, a moment for the rest (a loaded machine can hold
        // the loop's thread for tens of milliseconds).
        let start = std::time::Instant::now();
        while waits(&m, "none").get_sample_count() < 1 && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(MS);
        }
        std::thread::sleep(MS * 100);
        // Arrived during a sync that hung for 100 ms.
        fake.with(|s| s.blocked = true);
        inbox.send(slice(0, 2));
        while fake.with(|s| s.entered) < 3 {
            std::thread::sleep(MS);
        }
        inbox.send(slice(1, 2));
        std::thread::sleep(MS * 100);
        fake.with(|s| s.blocked = false);
        synced(&fake, 4);
        // Behind a failed sync's retry (at least a second).
        fake.with(|s| s.failing = 1);
        inbox.send(slice(2, 3));
        synced(&fake, 6);
    });
    let count = |r: &str| waits(&m, r).get_sample_count();
    // The second change came to an idle loop after a partial sync was measured: gathered, or,
    // when a loaded machine held the loop's thread past the few milliseconds of the gather
    // window, taken at once (`a_service_and_its_slice_a_moment_apart_take_one_sync` tests the
    // gathering itself).
    let counts = (count("none") + count("gather"), count("cost"), count("retry"), count("pace"));
    assert_eq!(counts, (2, 1, 1, 0), "none {}, gather {}", count("none"), count("gather"));
    assert!(waits(&m, "cost").get_sample_sum() >= 0.09, "{:?}", waits(&m, "cost"));
    assert!(waits(&m, "retry").get_sample_sum() >= 0.99, "{:?}", waits(&m, "retry"));
}

#[test]
fn a_service_and_its_slice_a_moment_apart_take_one_sync() {
    let fake = Fake::default();
    // Partial syncs cost 8 ms: a change to an idle loop is gathered for up to 4 ms.
    let (syncer, inbox, m) = paced(&fake, (MS * 100, MS * 8));
    running(syncer, &inbox, || {
        first_sync_and_rest(&fake);
        // The first partial sync measures what one costs; before it, a change goes at once.
        inbox.send(slice(0, 1));
        synced(&fake, 2);
        std::thread::sleep(MS * 50);
        inbox.send(service(7));
        std::thread::sleep(MS);
        inbox.send(slice(7, 0));
        let took = synced(&fake, 3);
        std::thread::sleep(MS * 100);
        assert_eq!(fake.calls().len(), 3, "the Service and its slice took two syncs");
        assert!(fake.calls()[2].endpoints.iter().any(|e| e.contains("10.1.0.8")), "{:?}", fake.calls()[2]);
        assert!(took < MS * 40, "gathered for {took:?}");
        // An isolated change is held at most the window, then goes.
        let start = Instant::now();
        inbox.send(slice(1, 1));
        synced(&fake, 4);
        assert!(start.elapsed() < MS * 40, "an isolated change waited {:?}", start.elapsed());
    });
    let gathered = waits(&m, "gather");
    assert_eq!(gathered.get_sample_count(), 3, "the pair and the isolated change were gathered, not the first change");
    assert!(gathered.get_sample_sum() < 0.015, "gathered {} s in all", gathered.get_sample_sum());
}

/// Service `i`'s slice with one endpoint, pod address `10.(100 + generation).(i / 250).(i % 250)`:
/// for thousands of services.
fn wide_slice(i: u32, generation: u32) -> ObjectChange {
    change(json!({"kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": format!("svc-{i}-a"), "namespace": "ns", "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [format!("10.{}.{}.{}", 100 + generation, i / 250, i % 250)], "nodeName": "node-b"}]}))
}

#[test]
fn a_change_set_touching_many_services_is_rendered_from_scratch_and_sent_as_the_difference() {
    let fake = Fake::default();
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 2400);
    turn(&mut syncer, &inbox);
    // 1,200 of 2,400 (one in two): patched.
    inbox.send_all((0..1200).map(|i| wide_slice(i, 1)));
    turn(&mut syncer, &inbox);
    // 1,300 of 2,400: rendered from scratch, the difference from before sent.
    inbox.send_all((0..1300).map(|i| wide_slice(i, 2)));
    turn(&mut syncer, &inbox);
    let calls = fake.calls();
    let shape: Vec<(Resync, &str)> = calls.iter().map(|c| (c.resync, c.update)).collect();
    assert_eq!(shape, [(Resync::Replace, "Replaced"), (Resync::Changes, "Patched"), (Resync::Changes, "Rebuilt")]);
    assert_eq!(calls[2].endpoints.iter().filter(|e| e.contains("10.102.")).count(), 1300, "every change applied");
}

/// Changes one every 10 ms for 3 s to a loop whose full sync costs 200 ms and partial ones
/// 4 ms, aiming at `share` of a core: the syncs of the last second (the bank of two full
/// syncs is spent by then), and how long after it was sent the last change was applied.
fn steady_stream(share: f64) -> (usize, Duration) {
    let fake = Fake::default();
    fake.with(|s| s.costs = (MS * 200, MS * 4));
    let (syncer, inbox) = listed(&fake, Periods { share, ..periods(Duration::from_secs(1)) }, 3);
    let mut result = (0, Duration::ZERO);
    running(syncer, &inbox, || {
        first_sync_and_rest(&fake);
        let start = Instant::now();
        let mut at_two_seconds = 0;
        for g in 1..=300u32 {
            std::thread::sleep((start + MS * 10 * g).saturating_duration_since(Instant::now()));
            // Endpoint 10.1.(g % 200 + 1).(g % 3 + 1): the last is 10.1.101.1.
            inbox.send(slice(g % 3, g % 200 + 1));
            if g == 200 {
                at_two_seconds = fake.calls().len();
            }
        }
        let last = Instant::now();
        let applied = || fake.calls().last().is_some_and(|c| c.endpoints.iter().any(|e| e.contains("10.1.101.1")));
        while !applied() {
            assert!(last.elapsed() < Duration::from_secs(5), "the last change was never applied");
            std::thread::sleep(MS);
        }
        result = (fake.calls().len() - at_two_seconds, last.elapsed());
    });
    result
}

#[test]
fn a_steady_stream_of_changes_one_by_one_is_coalesced_to_the_share_aimed_at() {
    // The bound alone, F / (F + P) = 17 %: a 4 ms sync rests 20 ms, about 40 syncs a second.
    let (unaimed, _) = steady_stream(1.0);
    // Aimed at 5 %: it rests 76 ms, about 12 a second.
    let (aimed, drained) = steady_stream(0.05);
    assert!(unaimed >= 25, "{unaimed} syncs in the last second without an aim");
    assert!(aimed * 2 < unaimed, "{aimed} syncs aimed, {unaimed} not, in the last second");
    assert!(drained < MS * 300, "the last change was applied {drained:?} after it was sent");
}
