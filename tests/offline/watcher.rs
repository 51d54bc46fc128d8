//! The sources' watchers. The manifests source's: what it delivers to the sync thread as files
//! change, and what it holds back when input is bad (nothing is lost). The API source's
//! reflectors against the emulator, listing by LIST (the `WatchListClient` gate off; WatchList
//! is in `watch_list.rs`): paced by the client-side rate limit (lists, relists), never slowed
//! on a watch stream, and stopped promptly while they wait for a token.

use crate::common::Scratch;
use crate::common::emulator::Emulator;
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::kube;
use kube_nftproxy::manifests::{SOURCE, Watcher, watch};
use kube_nftproxy::model::{Model, ObjectChange};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn service(name: &str, ip: &str) -> String {
    format!(
        "kind: Service\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{clusterIP: {ip}, ports: [{{port: 80}}]}}\n"
    )
}

const NODE: &str =
    "kind: Node\nmetadata: {name: node-a}\nstatus: {addresses: [{type: InternalIP, address: 192.168.1.1}]}\n";

/// A watcher of `dir` and its inbox; `load` delivers, `take` files what arrived into a model.
struct Rig {
    watcher: Watcher,
    inbox: Arc<Inbox>,
    model: Model,
}

impl Rig {
    fn new(dir: &Path) -> Rig {
        let inbox = Arc::new(Inbox::default());
        Rig { watcher: Watcher::new(dir.to_path_buf(), "node-a".into(), inbox.clone()), inbox, model: Model::default() }
    }

    /// Loads, then files what was delivered; returns the changes.
    fn load(&mut self) -> Vec<ObjectChange> {
        self.watcher.load().expect("load");
        self.take()
    }

    fn take(&mut self) -> Vec<ObjectChange> {
        let changes = self.inbox.wait(Instant::now()).changes;
        for c in changes.clone() {
            self.model.file(c);
        }
        changes
    }

    fn ip_of(&self, name: &str) -> Option<String> {
        let ports = self.model.services.get(&("shop".to_string(), name.to_string()))?;
        Some(ports[0].cluster_ips[0].to_string())
    }
}

#[test]
fn only_changed_objects_are_delivered_and_moves_change_nothing() {
    let dir = Scratch::new("moves");
    dir.write("a.yaml", &service("web", "10.96.0.1"));
    dir.write("b.yaml", &service("db", "10.96.0.2"));
    let mut rig = Rig::new(&dir.0);
    assert_eq!(rig.load().len(), 2);
    dir.write("b.yaml", &service("db", "10.96.0.3"));
    assert_eq!(rig.load().len(), 1, "only db changed");
    dir.remove("a.yaml");
    dir.write("c.yaml", &service("web", "10.96.0.1"));
    assert!(rig.load().is_empty(), "an object moved to another file is the same object");
    dir.remove("c.yaml");
    let changes = rig.load();
    assert_eq!(changes, [ObjectChange::Service(("shop".into(), "web".into()), None)]);
}

#[test]
fn bad_input_loses_nothing() {
    let dir = Scratch::new("bad");
    dir.write("a.yaml", &service("web", "10.96.0.1"));
    dir.write("b.yaml", &service("db", "10.96.0.2"));
    let mut rig = Rig::new(&dir.0);
    rig.load();
    // A malformed update keeps the last good state.
    dir.write("a.yaml", &service("web", "10.96.0.300"));
    assert!(rig.load().is_empty());
    assert_eq!(rig.ip_of("web").as_deref(), Some("10.96.0.1"));
    // A misspelt name cannot be matched with what it was: nothing is taken as deleted.
    dir.write("a.yaml", &service("web", "10.96.0.1").replace("name:", "nmae:"));
    assert!(rig.load().is_empty());
    assert_eq!(rig.ip_of("web").as_deref(), Some("10.96.0.1"));
    // A file that does not parse deletes nothing, from it or elsewhere.
    dir.write("a.yaml", "kind: Service\nmetadata: [unclosed\n");
    assert!(rig.watcher.load().is_err());
    assert!(rig.take().is_empty());
    // Fixed again, the object is as before (no change), and the other one still there.
    dir.write("a.yaml", &service("web", "10.96.0.1"));
    assert!(rig.load().is_empty());
    assert!(rig.ip_of("web").is_some() && rig.ip_of("db").is_some());
}

#[test]
fn when_the_first_of_two_copies_goes_the_second_takes_over() {
    let dir = Scratch::new("dups");
    dir.write("a.yaml", &service("web", "10.96.0.1"));
    dir.write("b.yaml", &service("web", "10.96.0.2"));
    let mut rig = Rig::new(&dir.0);
    rig.load();
    assert_eq!(rig.ip_of("web").as_deref(), Some("10.96.0.1"));
    dir.remove("a.yaml");
    rig.load();
    assert_eq!(rig.ip_of("web").as_deref(), Some("10.96.0.2"));
}

#[test]
fn this_node_comes_and_goes_even_between_two_syncs() {
    let dir = Scratch::new("node");
    dir.write("svc.yaml", &service("web", "10.96.0.1"));
    let mut rig = Rig::new(&dir.0);
    rig.load();
    assert!(rig.model.node.is_none());
    dir.write("node.yaml", NODE);
    rig.load();
    assert_eq!(rig.model.node.as_ref().map(|n| n.name.as_str()), Some("node-a"));
    dir.remove("node.yaml");
    rig.load();
    assert!(rig.model.node.is_none());
    // Added and removed again before the sync thread takes anything: the removal stands.
    dir.write("node.yaml", NODE);
    rig.watcher.load().unwrap();
    dir.remove("node.yaml");
    rig.watcher.load().unwrap();
    rig.take();
    assert!(rig.model.node.is_none());
}

#[test]
fn a_path_that_appears_after_start_is_read() {
    let dir = Scratch::new("late");
    let late = dir.0.join("manifests");
    let inbox = Arc::new(Inbox::default());
    let stop = Arc::new(AtomicBool::new(false));
    let thread = watch(late.clone(), "node-a".into(), Duration::from_millis(20), stop.clone(), inbox.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    std::fs::create_dir_all(&late).unwrap();
    std::fs::write(late.join("svc.yaml"), service("web", "10.96.0.1")).unwrap();
    let start = Instant::now();
    let mut listed = false;
    let mut changes = Vec::new();
    while start.elapsed() < Duration::from_secs(5) && (changes.is_empty() || !listed) {
        let d = inbox.wait(Instant::now() + Duration::from_millis(50));
        listed |= d.listed.contains(&SOURCE);
        changes.extend(d.changes);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    thread.join().unwrap();
    assert!(listed, "the source must count as listed once its path could be read");
    assert_eq!(changes.len(), 1, "{changes:?}");
}

/// `n` Services with a slice each (one endpoint), and this Node, as one array for the emulator.
pub(crate) fn api_objects(n: usize) -> serde_json::Value {
    let mut items = vec![serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.1"}]}})];
    for i in 0..n {
        let name = format!("svc-{i}");
        items.push(serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"clusterIP": format!("10.96.{}.{}", i / 250, i % 250 + 1), "ports": [{"port": 80}]}}));
        items.push(serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "addressType": "IPv4", "metadata": {"name": format!("{name}-a"), "namespace": "shop",
            "labels": {"kubernetes.io/service-name": name}}, "ports": [{"port": 8080}],
            "endpoints": [{"addresses": [format!("10.2.{}.{}", i / 250, i % 250 + 1)]}]}));
    }
    serde_json::Value::Array(items)
}

/// The reflectors of node-a following `emu` with `settings`: their shared state, threads and
/// inbox, and when the client (and so its rate limit's bucket) was made.
pub(crate) struct Reflectors {
    pub(crate) shared: Arc<kube::Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) made: Instant,
}

impl Reflectors {
    pub(crate) fn start(emu: &Emulator, settings: kube::Settings) -> Reflectors {
        let cfg = kube::from_kubeconfig(&emu.kubeconfig(), None).expect("kubeconfig");
        let inbox = Arc::new(Inbox::default());
        let made = Instant::now();
        let client = kube::Client::new(&cfg).expect("client");
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(kube::Shared::new(client, settings, "node-a", inbox.clone(), stop));
        let threads = kube::start(&shared).expect("reflector threads");
        Reflectors { shared, threads, inbox, made }
    }

    /// Sets the stop flag; how long until every reflector thread ended (panics past 5 s).
    pub(crate) fn stop(self) -> Duration {
        let asked = Instant::now();
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            while !t.is_finished() {
                assert!(asked.elapsed() < Duration::from_secs(5), "a reflector still runs 5 s after stop");
                std::thread::sleep(Duration::from_millis(10));
            }
            t.join().expect("reflector thread");
        }
        asked.elapsed()
    }
}

/// List requests (pages) the emulator answered, over every resource; and watches opened.
pub(crate) fn requests(emu: &Emulator) -> (u64, u64) {
    let stats = emu.stats();
    let sum = |verb: &str| {
        stats["requests"][verb].as_object().map_or(0, |m| m.values().filter_map(serde_json::Value::as_u64).sum())
    };
    (sum("list"), sum("watch"))
}

#[test]
fn a_relist_storm_is_paced_by_the_rate_limit_and_a_stop_ends_the_wait_at_once() {
    let emu = Emulator::start(None, "127.0.0.1:0", None, &[]);
    emu.apply(&api_objects(30));
    // Every watch refused with 410: each resource lists again and again (after the backoff),
    // and in pages of 5 one round is some 16 requests.
    emu.fault(&serde_json::json!({"fail": {"status": 410, "verb": "watch", "count": 1_000_000}}));
    let before = requests(&emu).0;
    let settings = kube::Settings { page_size: 5, qps: 1.0, burst: 2, watch_list: false, ..kube::Settings::default() };
    let r = Reflectors::start(&emu, settings);
    std::thread::sleep(Duration::from_secs(5));
    let (lists, t) = (requests(&emu).0 - before, r.made.elapsed().as_secs_f64());
    // A token bucket of 2 refilled at 1 a second allows at most 2 + t requests in t seconds
    // (one more for the request in flight when counted); and that many do go out.
    let most = 2.0 + t + 1.0;
    assert!((lists as f64) <= most, "{lists} list requests in {t:.1} s at 1 a second, burst 2 (at most {most:.0})");
    assert!(lists as f64 >= t, "only {lists} list requests in {t:.1} s: the limit starves requests");
    // Every reflector now waits for a token (the next are seconds away): a stop ends that at once.
    let took = r.stop();
    assert!(took < Duration::from_millis(600), "the reflectors took {took:?} to stop while waiting for tokens");
}

#[test]
fn a_watch_that_expired_lists_once_at_its_last_resource_version_and_a_refused_list_in_pages() {
    let emu = Emulator::start(None, "127.0.0.1:0", None, &[]);
    emu.apply(&api_objects(30));
    let lists = |emu: &Emulator| emu.stats()["requests"]["list"]["services"].as_u64().unwrap_or(0);
    let watches = |emu: &Emulator| emu.stats()["requests"]["watch"]["services"].as_u64().unwrap_or(0);
    // The first watch of Services expires (410): as client-go's reflector, the list after it
    // asks for what is not older than the last resourceVersion seen, unpaged (a watch cache
    // answers it in one request), not the latest state in pages of 5 (six requests here).
    emu.fault(&serde_json::json!({"fail": {"status": 410, "verb": "watch", "resource": "services", "count": 1}}));
    let settings = kube::Settings { page_size: 5, watch_list: false, ..kube::Settings::default() };
    let r = Reflectors::start(&emu, settings);
    let rewatched = Instant::now();
    while watches(&emu) < 2 {
        assert!(rewatched.elapsed() < Duration::from_secs(10), "no second watch: {}", emu.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lists(&emu), 2, "the first listing and one after the expired watch: {}", emu.stats());
    // The open watch expires too, and the list after it is refused as too old (410): then
    // the latest state, in pages.
    emu.fault(&serde_json::json!({"fail": {"status": 410, "verb": "list", "resource": "services", "count": 1}}));
    emu.fault(&serde_json::json!({"resource": "services", "expire": true}));
    let relisted = Instant::now();
    while watches(&emu) < 3 {
        assert!(relisted.elapsed() < Duration::from_secs(15), "no third watch: {}", emu.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lists(&emu), 2 + 1 + 6, "the refused list, then 30 Services in pages of 5: {}", emu.stats());
    // The watches are open (a stop ends them at their next line): not waited for.
    r.shared.stop.store(true, Ordering::SeqCst);
}

#[test]
fn a_watch_stream_is_not_slowed_by_the_rate_limit() {
    let emu = Emulator::start(None, "127.0.0.1:0", None, &[]);
    emu.apply(&api_objects(0));
    let settings = kube::Settings { qps: 1.0, burst: 2, watch_list: false, ..kube::Settings::default() };
    let r = Reflectors::start(&emu, settings);
    // Four first lists on a bucket of two: the last waits two seconds for its token.
    let mut listed = 0;
    while listed < 4 {
        assert!(r.made.elapsed() < Duration::from_secs(10), "only {listed} resources listed");
        listed += r.inbox.wait(Instant::now() + Duration::from_millis(50)).listed.len();
    }
    let all_listed = r.made.elapsed();
    assert!(all_listed >= Duration::from_millis(1800), "four lists in {all_listed:?}: no rate limit at burst 2");
    let open = || emu.stats()["openWatches"]["services"].as_u64().unwrap_or(0) > 0;
    while !open() {
        assert!(r.made.elapsed() < Duration::from_secs(10), "the services watch never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
    // 500 Services created at once arrive on the open watch, far faster than 1 a second.
    let sent = Instant::now();
    emu.apply(&api_objects(500));
    let mut services = std::collections::HashSet::new();
    while services.len() < 500 {
        assert!(sent.elapsed() < Duration::from_secs(5), "{} of 500 Services in 5 s", services.len());
        for c in r.inbox.wait(Instant::now() + Duration::from_millis(50)).changes {
            if let ObjectChange::Service(key, Some(_)) = c {
                services.insert(key);
            }
        }
    }
    let took = sent.elapsed();
    let (lists, watches) = requests(&emu);
    assert!(took < Duration::from_secs(3), "500 watch events took {took:?}");
    assert_eq!(lists, 4, "the events came by watch ({watches} watches), not by lists");
    // The threads read their watches until the emulator goes; they are not waited for.
    r.shared.stop.store(true, Ordering::SeqCst);
}
