//! The metrics the loop feeds, following what it did: syncs counted, a failed sync's changes
//! reported with the next success.

use super::*;

#[test]
fn metrics_count_syncs_and_a_failed_syncs_changes_are_reported_with_the_next_success() {
    use kube_nftproxy::metrics::Metrics;
    use kube_nftproxy::observe::Observers;
    let fake = Fake::default();
    let m = Arc::new(Metrics::new().unwrap());
    let (syncer, inbox) = listed(&fake, periods(Duration::ZERO), 3);
    let mut syncer = syncer.with_observers(Observers::default().with_metrics(m.clone()));
    turn(&mut syncer, &inbox);
    assert_eq!((m.service_changes.get(), m.endpoint_changes.get()), (3, 3));
    assert_eq!(m.syncs.with_label_values(&["partial"]).get() + m.syncs.with_label_values(&["full"]).get(), 1);
    // A slice the EndpointSlice controller changes now; the sync applying it fails.
    let triggered = humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string();
    fake.with(|s| s.failing = 1);
    inbox.send(change(json!({"kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": "svc-1-a", "namespace": "ns", "labels": {"kubernetes.io/service-name": "svc-1"},
                     "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": triggered}},
        "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.1.9.2"], "nodeName": "node-b"}]})));
    turn(&mut syncer, &inbox);
    assert_eq!(m.sync_failures.with_label_values(&["IPv4"]).get(), 1);
    assert_eq!(m.endpoint_changes_pending.get(), 1, "the change is still pending");
    let programmed = |f: &str| m.network_programming.with_label_values(&[f]).get_sample_count();
    assert_eq!(programmed("IPv4"), 0, "nothing was programmed yet");
    std::thread::sleep(MIN_RETRY);
    turn(&mut syncer, &inbox);
    assert_eq!(fake.calls().len(), 3);
    assert_eq!((programmed("IPv4"), programmed("IPv6")), (1, 0), "the retry applied the IPv4 slice's change");
    let took = m.network_programming.with_label_values(&["IPv4"]).get_sample_sum();
    assert!((1.0..10.0).contains(&took), "from the trigger to the sync that applied it: {took}");
    assert_eq!(m.endpoint_changes_pending.get(), 0);
}

#[test]
fn every_metric_the_loop_feeds_follows_what_it_did() {
    use kube_nftproxy::metrics::Metrics;
    use kube_nftproxy::observe::Observers;
    let fake = Fake::default();
    fake.with(|s| {
        s.script = "x".repeat(1234);
        s.flows_deleted = 2;
    });
    let m = Arc::new(Metrics::new().unwrap());
    let (syncer, inbox) = listed(&fake, periods(Duration::ZERO), 3);
    let mut syncer = syncer.with_observers(Observers::default().with_metrics(m.clone()));
    let full = |f: &str| m.sync_full_duration.with_label_values(&[f]).get_sample_count();
    let partial = |f: &str| m.sync_partial_duration.with_label_values(&[f]).get_sample_count();
    assert!(syncer.take(inbox.wait(Instant::now())));
    assert_eq!((m.service_changes_pending.get(), m.endpoint_changes_pending.get()), (3, 3));
    let queued = m.last_queued.with_label_values(&["IPv4"]).get();
    assert!(queued > 1.7e9, "a change queued stamps the time: {queued}");
    syncer.sync_if_due();
    assert_eq!((full("IPv4"), full("IPv6"), partial("IPv4")), (1, 1, 0), "the first sync is full, in both families");
    assert_eq!(m.sync_bytes.with_label_values(&["full"]).get(), 1234);
    assert!(m.sync_elements.with_label_values(&["full"]).get() >= 6, "3 services' elements at least");
    assert!(m.last_sync.with_label_values(&["IPv6"]).get() >= queued);
    assert_eq!((m.service_changes_pending.get(), m.endpoint_changes_pending.get()), (0, 0));
    // Pending changes count Services, as upstream's trackers: a Service and its slice changed
    // twice are one of each; two slices of another Service are one.
    let svc0 = |ip: &str| {
        change(json!({"kind": "Service", "metadata": {"name": "svc-0", "namespace": "ns"},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 81, "protocol": "TCP", "name": ip}]}}))
    };
    let b_slice = change(json!({"kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": "svc-1-b", "namespace": "ns", "labels": {"kubernetes.io/service-name": "svc-1"}},
        "ports": [{"port": 8080, "protocol": "TCP"}], "endpoints": [{"addresses": ["10.1.7.7"]}]}));
    inbox.send_all([svc0("a"), slice(0, 1), slice(1, 1), b_slice]);
    assert!(syncer.take(inbox.wait(Instant::now())));
    inbox.send_all([svc0("b"), slice(0, 2)]);
    assert!(syncer.take(inbox.wait(Instant::now())));
    assert_eq!((m.service_changes_pending.get(), m.endpoint_changes_pending.get()), (1, 2));
    syncer.sync_if_due();
    assert_eq!((full("IPv4"), partial("IPv4"), partial("IPv6")), (1, 1, 1));
    assert_eq!(m.syncs.with_label_values(&["partial"]).get(), 1);
    assert_eq!(m.sync_bytes.with_label_values(&["partial"]).get(), 1234);
    // A failing stale-chain deletion, a repair, a UDP cleanup that deleted flows.
    fake.with(|s| {
        s.cleanup_fails = true;
        s.stale_at = Some(Instant::now());
    });
    syncer.sync_if_due();
    assert_eq!(m.cleanup_failures.with_label_values(&["IPv4"]).get(), 1);
    fake.with(|s| s.stale_at = None);
    fake.with(|s| s.broken = true);
    inbox.request(|r| r.unsure = true);
    inbox.send_all([udp_service(), udp_slice(&[1])]);
    turn(&mut syncer, &inbox);
    assert_eq!(m.repairs.with_label_values(&["not-intact"]).get(), 1);
    assert_eq!(full("IPv4"), 2, "the repair was a full sync");
    assert_eq!(m.conntrack_deleted.with_label_values(&["IPv4"]).get(), 2);
    assert_eq!(m.conntrack_duration.with_label_values(&["IPv4"]).get_sample_count(), 1);
    assert_eq!(m.conntrack_duration.with_label_values(&["IPv6"]).get_sample_count(), 0, "no IPv6 sweep reported");
}
