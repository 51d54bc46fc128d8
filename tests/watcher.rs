//! The manifests source's watcher: what it delivers to the sync thread as files change, and
//! what it holds back when input is bad (nothing is lost).

mod common;

use common::Scratch;
use kube_nftproxy::inbox::Inbox;
use kube_nftproxy::manifests::{SOURCE, Watcher, watch};
use kube_nftproxy::model::{Model, ObjectChange};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
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
