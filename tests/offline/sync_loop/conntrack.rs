//! The conntrack cleanups the loop plans with a sync: for UDP endpoints that go, never failing
//! the sync, kept across a failed one.

use super::*;

/// The plan for dns's two frontends, each allowing endpoints `pods`.
fn dns_plan(pods: &[u8]) -> Plan {
    let allowed: std::collections::BTreeSet<std::net::SocketAddr> =
        pods.iter().map(|i| format!("10.2.0.{i}:5353").parse().unwrap()).collect();
    let mut plan = Plan::default();
    plan.frontends.insert(Frontend::Address("10.96.200.1:53".parse().unwrap()), allowed.clone());
    plan.frontends.insert(Frontend::NodePort(Family::V4, 30053), allowed);
    plan
}

#[test]
fn udp_endpoint_changes_scale_to_zero_and_deletion_plan_conntrack_cleanups_tcp_changes_do_not() {
    let fake = Fake::default();
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 3);
    inbox.send_all([udp_service(), udp_slice(&[1])]);
    turn(&mut syncer, &inbox);
    let plans = || fake.with(|s| s.plans.clone());
    assert_eq!(plans(), [dns_plan(&[1])], "the first sync cleans every UDP service, and only those");
    inbox.send(slice(1, 1));
    turn(&mut syncer, &inbox);
    assert_eq!(fake.calls().len(), 2);
    assert_eq!(plans().len(), 1, "a TCP endpoint change cleans nothing");
    inbox.send(udp_slice(&[2, 3]));
    turn(&mut syncer, &inbox);
    assert_eq!(plans()[1], dns_plan(&[2, 3]), "an endpoint replaced");
    inbox.send(udp_slice(&[]));
    turn(&mut syncer, &inbox);
    assert_eq!(plans()[2], dns_plan(&[]), "scaled to zero: every flow goes");
    inbox.send(udp_slice(&[4]));
    turn(&mut syncer, &inbox);
    inbox.send(ObjectChange::Service(("ns".into(), "dns".into()), None));
    turn(&mut syncer, &inbox);
    assert_eq!(plans()[4], dns_plan(&[]), "deleted: every flow goes");
    assert_eq!((fake.calls().len(), plans().len()), (6, 5));
}

#[test]
fn a_failed_cleanup_never_fails_the_sync_and_a_failed_sync_keeps_its_cleanup() {
    let fake = Fake::default();
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 1);
    inbox.send_all([udp_service(), udp_slice(&[1])]);
    fake.with(|s| s.conntrack_fails = true);
    turn(&mut syncer, &inbox);
    inbox.send(slice(0, 1));
    turn(&mut syncer, &inbox);
    let resyncs: Vec<Resync> = fake.calls().iter().map(|c| c.resync).collect();
    assert_eq!(resyncs, [Resync::Replace, Resync::Changes], "the sync after a failed cleanup is an ordinary one");
    assert_eq!(fake.with(|s| s.plans.clone()), [dns_plan(&[1]), dns_plan(&[1])], "tried again after the next sync");
    fake.with(|s| {
        s.conntrack_fails = false;
        s.failing = 1;
    });
    inbox.send(udp_slice(&[2]));
    turn(&mut syncer, &inbox);
    assert_eq!(fake.with(|s| s.plans.len()), 2, "no cleanup after a failed sync");
    std::thread::sleep(MIN_RETRY);
    turn(&mut syncer, &inbox);
    assert_eq!(fake.with(|s| s.plans.last().cloned()), Some(dns_plan(&[2])), "the retried sync's cleanup");
}
