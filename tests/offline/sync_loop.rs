//! The sync loop without root or kernel, through an in-memory `Kernel`: what it waits for,
//! what it coalesces, how it retries, and what one change costs on a node with addresses.

use clap::Parser;
use kube_nftproxy::config::Periods;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::conntrack::{ConntrackError, FamilyReport, Frontend, Plan, Report};
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::model::Family;
use kube_nftproxy::model::{ApiObject, ObjectChange};
use kube_nftproxy::nft::{NftError, Resync, SyncKind, SyncReport};
use kube_nftproxy::render::{Ruleset, Update};
use kube_nftproxy::sync::{Kernel, MIN_RETRY, Syncer};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod conntrack;
mod failures;
mod first_sync;
mod metrics;
mod pace;

/// One call of `Kernel::sync`, as the fake saw it.
#[derive(Debug, Clone)]
struct Call {
    resync: Resync,
    /// `Replaced`, `Rebuilt` or `Patched`.
    update: &'static str,
    /// Endpoint map elements in the desired state (both families).
    endpoints: Vec<String>,
    /// The families the loop left out.
    hold: Vec<Family>,
}

#[derive(Default)]
struct Shared {
    calls: Vec<Call>,
    cleanups: usize,
    /// Syncs still to fail.
    failing: usize,
    /// Families whose part the kernel refuses (another process owns their table).
    refusing: Vec<Family>,
    /// While set, a sync waits for it to clear (a hung `nft`).
    blocked: bool,
    stale_at: Option<Instant>,
    /// Stale-chain deletions fail (a kernel that still holds the chains busy).
    cleanup_fails: bool,
    /// What the cheap intactness check answers.
    broken: bool,
    /// How often the loop asked when stale chains are due: once per turn of the loop.
    turns: usize,
    /// Conntrack cleanups asked for.
    plans: Vec<Plan>,
    /// Conntrack cleanups fail.
    conntrack_fails: bool,
    /// Flows each conntrack cleanup reports deleted (IPv4).
    flows_deleted: u64,
    /// The script each sync reports sending.
    script: String,
    /// What a full sync and a partial one take (the fake sleeps that long).
    costs: (Duration, Duration),
    /// Partial syncs find nothing to send.
    unchanged: bool,
    /// Syncs begun (a blocked one included).
    entered: usize,
    /// Full syncs still to report that another process committed meanwhile.
    unsure_full: usize,
}

/// An in-memory kernel: records syncs, fails or blocks on request.
#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Shared>>);

impl Fake {
    fn with<T>(&self, f: impl FnOnce(&mut Shared) -> T) -> T {
        f(&mut self.0.lock().unwrap())
    }

    fn calls(&self) -> Vec<Call> {
        self.with(|s| s.calls.clone())
    }
}

impl Kernel for Fake {
    fn sync(
        &mut self,
        desired: &Ruleset,
        update: &Update,
        resync: Resync,
        hold: &[Family],
    ) -> Result<SyncReport, NftError> {
        self.with(|s| s.entered += 1);
        while self.with(|s| s.blocked) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let (full, partial) = self.with(|s| s.costs);
        std::thread::sleep(if resync == Resync::Changes && !matches!(update, Update::Replaced) {
            partial
        } else {
            full
        });
        let endpoints = desired
            .tables
            .iter()
            .flat_map(|t| t.elements.iter())
            .filter(|(m, _)| format!("{m:?}").starts_with("Endpoints"))
            .flat_map(|(_, entries)| entries.iter().map(|(k, e)| format!("{k:?} {:?}", e.value)))
            .collect();
        let update = match update {
            Update::Replaced => "Replaced",
            Update::Rebuilt(_) => "Rebuilt",
            Update::Patched(_) => "Patched",
        };
        self.with(|s| {
            s.calls.push(Call { resync, update, endpoints, hold: hold.to_vec() });
            if s.failing > 0 {
                s.failing -= 1;
                return Err(NftError::Rejected { message: "fake failure".into(), line: None });
            }
            let tried: Vec<Family> = Family::ALL.into_iter().filter(|f| !hold.contains(f)).collect();
            let refused: Vec<(Family, NftError)> = (tried.iter().filter(|f| s.refusing.contains(f)))
                .map(|f| (*f, NftError::Kernel { errno: libc::EPERM, seq: 1 }))
                .collect();
            if !tried.is_empty() && refused.len() == tried.len() {
                return Err(NftError::Kernel { errno: libc::EPERM, seq: 1 });
            }
            let kind = match resync {
                Resync::Changes if s.unchanged => SyncKind::Unchanged,
                Resync::Changes => SyncKind::Partial,
                _ => SyncKind::Full,
            };
            let script = s.script.clone();
            let unsure = kind == SyncKind::Full && s.unsure_full > 0;
            s.unsure_full -= usize::from(unsure);
            Ok(SyncReport {
                kind,
                bytes: script.len(),
                transactions: 1,
                elements: None,
                script,
                deleted_chains: 0,
                unsure,
                refused,
            })
        })
    }

    fn held_slots(&mut self) -> Option<Ruleset> {
        None
    }

    fn cleanup_due(&self) -> Option<Instant> {
        self.with(|s| {
            s.turns += 1;
            s.stale_at
        })
    }

    fn cleanup(&mut self) -> Result<usize, NftError> {
        self.with(|s| {
            s.cleanups += 1;
            if s.cleanup_fails {
                return Err(NftError::Rejected { message: "chain busy".into(), line: None });
            }
            s.stale_at = None;
            Ok(1)
        })
    }

    fn tables_look_intact(&mut self) -> bool {
        !self.with(|s| s.broken)
    }

    /// A node's addresses: an uplink with a primary and a secondary address per family.
    fn host_addresses(&mut self) -> std::io::Result<Vec<IpAddr>> {
        Ok(["127.0.0.1", "192.168.1.1", "172.16.0.1", "::1", "fd00:1::1"].iter().map(|a| a.parse().unwrap()).collect())
    }

    fn clear_udp_flows(&mut self, plan: &Plan) -> Result<Report, ConntrackError> {
        self.with(|s| {
            s.plans.push(plan.clone());
            if s.conntrack_fails {
                let source = std::io::Error::from_raw_os_error(libc::EPERM);
                return Err(ConntrackError::Netlink { family: Family::V4, source });
            }
            let took = Duration::from_millis(3);
            let family =
                FamilyReport { family: Family::V4, deleted: s.flows_deleted, scanned: 10, partial: false, took };
            Ok(Report { families: vec![family] })
        })
    }
}

fn config() -> Config {
    Config::from_flags(&Flags::parse_from(["kube-nftproxy", "--hostname-override=node-a", "--cluster-cidr=10.0.0.0/8"]))
        .unwrap()
}

fn periods(min_sync: Duration) -> Periods {
    Periods { min_sync, sync: Duration::from_secs(30), full_sync: Duration::from_secs(3600), share: 1.0 }
}

fn change(v: Value) -> ObjectChange {
    let obj = ApiObject::from_json(v).unwrap().unwrap();
    ObjectChange::from_api(&obj, "node-a").unwrap().unwrap()
}

fn node() -> ObjectChange {
    change(json!({"kind": "Node", "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}}))
}

fn service(i: u32) -> ObjectChange {
    change(json!({"kind": "Service", "metadata": {"name": format!("svc-{i}"), "namespace": "ns"},
        "spec": {"clusterIP": format!("10.96.{}.{}", i / 250, i % 250 + 1), "ports": [{"port": 80, "protocol": "TCP"}]}}))
}

/// Service `i`'s slice with one endpoint, pod address `10.1.gen.i`.
fn slice(i: u32, generation: u32) -> ObjectChange {
    change(json!({"kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": format!("svc-{i}-a"), "namespace": "ns", "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [format!("10.1.{generation}.{}", i + 1)], "nodeName": "node-b"}]}))
}

/// A cluster of `n` services with one endpoint each, and this node.
fn cluster(n: u32) -> Vec<ObjectChange> {
    std::iter::once(node()).chain((0..n).flat_map(|i| [service(i), slice(i, 0)])).collect()
}

/// A loop for `fake` that has been handed `cluster(services)` by its one source, and its inbox.
fn listed(fake: &Fake, periods: Periods, services: u32) -> (Syncer<Fake>, Arc<Inbox>) {
    let inbox = Arc::new(Inbox::default());
    let syncer = Syncer::new(config(), periods, fake.clone(), &["manifests"]);
    inbox.send_all(cluster(services));
    inbox.listed("manifests");
    (syncer, inbox)
}

/// Runs the loop on a thread of its own while `meanwhile` runs, then stops it.
fn running(syncer: Syncer<Fake>, inbox: &Arc<Inbox>, meanwhile: impl FnOnce()) {
    let loop_inbox = inbox.clone();
    let thread = std::thread::spawn(move || syncer.run(&loop_inbox));
    meanwhile();
    inbox.request(|r| r.shutdown = true);
    thread.join().unwrap();
}

/// Delivers what the inbox holds and syncs if due, as one turn of the loop.
fn turn(syncer: &mut Syncer<Fake>, inbox: &Inbox) {
    assert!(syncer.take(inbox.wait(Instant::now())));
    syncer.sync_if_due();
}

#[test]
fn one_endpoint_change_on_a_node_with_addresses_renders_one_service() {
    let fake = Fake::default();
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 50);
    turn(&mut syncer, &inbox);
    inbox.send(slice(7, 1));
    turn(&mut syncer, &inbox);
    let calls = fake.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].resync, Resync::Changes);
    // The host's addresses did not change: only the changed Service is rendered again, not
    // the whole cluster (which a `Rebuilt` update would mean).
    assert_eq!(calls[1].update, "Patched");
    assert!(calls[1].endpoints.iter().any(|e| e.contains("10.1.1.8")), "{:?}", calls[1].endpoints);
}

#[test]
fn an_update_that_changes_nothing_syncs_nothing() {
    let fake = Fake::default();
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 5);
    turn(&mut syncer, &inbox);
    inbox.send_all(cluster(5));
    turn(&mut syncer, &inbox);
    assert_eq!(fake.calls().len(), 1, "identical objects must not trigger a sync");
}

#[test]
fn changes_arriving_during_a_blocked_sync_coalesce_in_bounded_memory() {
    let fake = Fake::default();
    let inbox = Arc::new(Inbox::default());
    let syncer = Syncer::new(config(), periods(Duration::from_millis(10)), fake.clone(), &["manifests"]);
    inbox.send_all(cluster(200));
    fake.with(|s| s.blocked = true);
    inbox.listed("manifests");
    let loop_inbox = inbox.clone();
    let thread = std::thread::spawn(move || syncer.run(&loop_inbox));
    while fake.calls().is_empty() && inbox.waiting() > 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The sync thread is stuck in its first sync; every slice changes 50 times meanwhile.
    std::thread::sleep(Duration::from_millis(50));
    for generation in 1..=50 {
        inbox.send_all((0..200).map(|i| slice(i, generation)));
    }
    fake.with(|s| s.blocked = false);
    let start = Instant::now();
    while fake.calls().len() < 2 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    inbox.request(|r| r.shutdown = true);
    thread.join().unwrap();
    let calls = fake.calls();
    assert_eq!(calls.len(), 2, "the 10,000 changes are one sync");
    assert!(calls[1].endpoints.iter().all(|e| e.contains("10.1.50.")), "{:?}", &calls[1].endpoints[..3]);
}

#[test]
fn the_loop_sleeps_when_nothing_can_be_done() {
    let fake = Fake::default();
    let inbox = Arc::new(Inbox::default());
    // A source that never lists, and a periodic full sync long overdue: nothing can be done.
    let short = Periods {
        min_sync: Duration::from_secs(1),
        sync: Duration::from_secs(30),
        full_sync: Duration::from_millis(10),
        share: 1.0,
    };
    // Each full sync costs 20 ms: the share of a 1 s period is 50 / 1050 (a full sync counts as
    // at least 50 ms), so one earns a rest of 400 ms.
    fake.with(|s| s.costs = (Duration::from_millis(20), Duration::ZERO));
    let syncer = Syncer::new(config(), short, fake.clone(), &["manifests"]);
    running(syncer, &inbox, || {
        std::thread::sleep(Duration::from_millis(300));
        // Listed; the first sync and the overdue full syncs go while the 100 ms bank lasts
        // (five of 20 ms), then the ever-overdue full sync rests off its debt, not spins.
        inbox.send_all(cluster(1));
        inbox.listed("manifests");
        std::thread::sleep(Duration::from_millis(300));
    });
    let turns = fake.with(|s| s.turns);
    assert!(turns < 20, "the loop turned {turns} times in 0.6 s");
    let syncs = fake.calls().len();
    assert!((2..=7).contains(&syncs), "{syncs} syncs in 0.3 s");
}

#[test]
fn a_full_sync_another_process_committed_during_is_checked_not_replaced_and_a_busy_neighbour_is_not_chased() {
    let fake = Fake::default();
    fake.with(|s| s.unsure_full = 1);
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 2);
    turn(&mut syncer, &inbox);
    for _ in 0..3 {
        syncer.sync_if_due();
    }
    let kinds: Vec<Resync> = fake.calls().iter().map(|c| c.resync).collect();
    // The check compares the tables' chains and sets with the kernel's and mends what
    // differs: not a replacement, and once sure, nothing more.
    assert_eq!(kinds, [Resync::Replace, Resync::Check], "after an unsure full sync");
    // Every full sync unsure (refreshes that had to rewrite in place, notifications paused,
    // beside a neighbour committing all the time): a few checks, then the cheap one settles.
    fake.with(|s| s.unsure_full = usize::MAX);
    inbox.request(|r| r.refresh = true);
    turn(&mut syncer, &inbox);
    for _ in 0..10 {
        syncer.sync_if_due();
    }
    let kinds: Vec<Resync> = fake.calls().iter().skip(2).map(|c| c.resync).collect();
    let checks = [Resync::Check; 3];
    assert_eq!(kinds, [&[Resync::Refresh][..], &checks].concat(), "the requested refresh and three checks");
}

#[test]
fn requests_steer_the_next_sync() {
    let fake = Fake::default();
    let (mut syncer, inbox) = listed(&fake, periods(Duration::ZERO), 2);
    turn(&mut syncer, &inbox);
    inbox.request(|r| r.refresh = true);
    turn(&mut syncer, &inbox);
    inbox.request(|r| r.tampered = Some("process 1 (nft) changed a table".into()));
    turn(&mut syncer, &inbox);
    inbox.request(|r| r.unsure = true);
    turn(&mut syncer, &inbox);
    let kinds: Vec<Resync> = fake.calls().iter().map(|c| c.resync).collect();
    assert_eq!(kinds, [Resync::Replace, Resync::Refresh, Resync::Replace], "intact tables need no sync when unsure");
    assert!(syncer.summary().starts_with("2 services with 2 ports; last sync"), "{}", syncer.summary());
    inbox.request(|r| r.shutdown = true);
    assert!(!syncer.take(inbox.wait(Instant::now())));
}

/// A UDP DNS service at 10.96.200.1:53 with NodePort 30053.
fn udp_service() -> ObjectChange {
    change(json!({"kind": "Service", "metadata": {"name": "dns", "namespace": "ns"},
        "spec": {"clusterIP": "10.96.200.1", "type": "NodePort",
                 "ports": [{"port": 53, "protocol": "UDP", "nodePort": 30053}]}}))
}

/// Its slice with endpoints `10.2.0.N:5353`.
fn udp_slice(pods: &[u8]) -> ObjectChange {
    let eps: Vec<Value> = pods.iter().map(|i| json!({"addresses": [format!("10.2.0.{i}")]})).collect();
    change(json!({"kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": "dns-a", "namespace": "ns", "labels": {"kubernetes.io/service-name": "dns"}},
        "ports": [{"port": 5353, "protocol": "UDP"}], "endpoints": eps}))
}
