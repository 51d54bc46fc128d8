//! The first sync: what it waits for (every source's list, this node's Node, at most a while)
//! and what only it does (the takeover).

use super::*;

#[test]
fn nothing_is_applied_before_every_source_has_listed() {
    let fake = Fake::default();
    let inbox = Inbox::default();
    let mut syncer = Syncer::new(config(), periods(Duration::ZERO), fake.clone(), &["services", "endpointslices"]);
    inbox.send_all(cluster(3));
    turn(&mut syncer, &inbox);
    inbox.listed("services");
    turn(&mut syncer, &inbox);
    assert!(fake.calls().is_empty(), "a half-listed cluster must not be applied over working rules");
    inbox.listed("endpointslices");
    turn(&mut syncer, &inbox);
    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].endpoints.len(), 3);
}

/// A loop waiting up to `wait` for its Node, handed three services by the API's two
/// required sources, but no Node.
fn listed_without_node(fake: &Fake, wait: Duration) -> (Syncer<Fake>, Arc<Inbox>) {
    let inbox = Arc::new(Inbox::default());
    let syncer = Syncer::new(config(), periods(Duration::ZERO), fake.clone(), &["services", "endpointslices"])
        .wait_for_node(wait);
    inbox.send_all((0..3).flat_map(|i| [service(i), slice(i, 0)]));
    inbox.listed("services");
    inbox.listed("endpointslices");
    (syncer, inbox)
}

#[test]
fn the_first_sync_waits_for_the_node_without_spinning() {
    let fake = Fake::default();
    let (syncer, inbox) = listed_without_node(&fake, Duration::from_secs(60));
    running(syncer, &inbox, || {
        std::thread::sleep(Duration::from_millis(300));
        assert!(fake.calls().is_empty(), "nothing may be applied before this node's Node is known");
        inbox.send(node());
        let start = Instant::now();
        while fake.calls().is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    assert_eq!(fake.calls().len(), 1, "the Node's arrival starts the first sync");
    // A loop that spun while waiting would have asked for stale chains thousands of times.
    let turns = fake.with(|s| s.turns);
    assert!(turns < 50, "the loop turned {turns} times while waiting");
}

#[test]
fn without_the_node_the_first_sync_goes_ahead_after_the_wait() {
    let fake = Fake::default();
    let (syncer, inbox) = listed_without_node(&fake, Duration::from_millis(400));
    running(syncer, &inbox, || {
        std::thread::sleep(Duration::from_millis(200));
        assert!(fake.calls().is_empty(), "still waiting for the Node");
        std::thread::sleep(Duration::from_millis(600));
    });
    assert_eq!(fake.calls().len(), 1, "after the wait the proxy syncs without its Node");
}

#[test]
fn a_node_tainted_for_deletion_syncs_nothing() {
    let fake = Fake::default();
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 3);
    turn(&mut syncer, &inbox);
    inbox.send(change(json!({"kind": "Node", "metadata": {"name": "node-a"},
        "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}})));
    turn(&mut syncer, &inbox);
    assert_eq!(fake.calls().len(), 1, "only /healthz cares whether the node is eligible");
    // A real change to the Node (its zone) does sync.
    inbox.send(change(
        json!({"kind": "Node", "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "b"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}}),
    ));
    turn(&mut syncer, &inbox);
    assert_eq!(fake.calls().len(), 2);
}

#[test]
fn the_first_sync_that_goes_through_runs_the_takeover_once() {
    let fake = Fake::default();
    fake.with(|s| s.failing = 1);
    let (syncer, inbox) = listed(&fake, periods(Duration::ZERO), 3);
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (seen, kernel) = (ran.clone(), fake.clone());
    let mut syncer = syncer.after_first_sync(Box::new(move || seen.lock().unwrap().push(kernel.calls().len())));
    turn(&mut syncer, &inbox);
    assert!(ran.lock().unwrap().is_empty(), "ran after a failed sync: kube-proxy's rules would go before ours are in");
    std::thread::sleep(MIN_RETRY);
    turn(&mut syncer, &inbox);
    inbox.send(slice(1, 1));
    turn(&mut syncer, &inbox);
    assert_eq!(fake.calls().len(), 3);
    assert_eq!(*ran.lock().unwrap(), vec![2], "once, right after the second (first good) sync");
}
