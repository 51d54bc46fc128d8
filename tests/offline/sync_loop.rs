//! The sync loop without root or kernel, through an in-memory `Kernel`: what it waits for,
//! what it coalesces, how it retries, and what one change costs on a node with addresses.

use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::conntrack::{ConntrackError, FamilyReport, Frontend, Plan, Report};
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::model::Family;
use kube_nftproxy::model::{ApiObject, ObjectChange};
use kube_nftproxy::nft::{NftError, Resync, SyncKind, SyncReport};
use kube_nftproxy::render::{Ruleset, Update};
use kube_nftproxy::sync::{Kernel, MIN_RETRY, Periods, Syncer};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
            Ok(SyncReport { kind, bytes: script.len(), script, deleted_chains: 0, unsure: false, refused })
        })
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
    Periods { min_sync, sync: Duration::from_secs(30), full_sync: Duration::from_secs(3600) }
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
fn the_loop_sleeps_when_nothing_can_be_done() {
    let fake = Fake::default();
    let inbox = Arc::new(Inbox::default());
    // A source that never lists, and a periodic full sync long overdue: nothing can be done.
    let short = Periods {
        min_sync: Duration::from_secs(1),
        sync: Duration::from_secs(30),
        full_sync: Duration::from_millis(10),
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
