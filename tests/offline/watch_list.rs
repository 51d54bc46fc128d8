//! The API source's reflectors listing by WatchList against the emulator (what the request
//! asks, as `/emulator/requests` saw it): the first state, in JSON and protobuf, is what a list
//! brings and takes no token of the rate limit; a relist after an expired watch streams from
//! the last resourceVersion, and one after a refusal as too old from the latest state; a
//! stream cut before its bookmark removes nothing; a server refusing WatchList is listed
//! instead, and asked for a WatchList again at the next listing.

use super::watcher::{Reflectors, api_objects};
use crate::common::emulator::Emulator;
use crate::common::follower::cluster;
use kube_nftproxy::config::ContentType;
use kube_nftproxy::kube;
use kube_nftproxy::model::{ObjectChange, ObjectId};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The sources whose first listing the inbox waits for.
const ALL: usize = 4;

/// An emulator with `flags` whose bookmarks come often enough that a reflector reading its
/// stream sees a stop within a fraction of a second.
fn emulator(flags: &[&str]) -> Emulator {
    Emulator::start(None, "127.0.0.1:0", None, &[&["--bookmark-interval", "200ms"], flags].concat())
}

/// What `r` delivered until every resource listed (within 10 s): each object's last change,
/// and how long after its client was made every resource had listed.
fn first_state(r: &Reflectors) -> (BTreeMap<ObjectId, ObjectChange>, Duration) {
    let (mut state, mut listed) = (BTreeMap::new(), 0);
    while listed < ALL {
        assert!(r.made.elapsed() < Duration::from_secs(10), "only {listed} resources listed");
        let delivery = r.inbox.wait(Instant::now() + Duration::from_millis(20));
        listed += delivery.listed.len();
        state.extend(delivery.changes.into_iter().map(|c| (c.id(), c)));
    }
    (state, r.made.elapsed())
}

/// The emulator's counter of `verb` requests of `resource`.
fn count(emu: &Emulator, verb: &str, resource: &str) -> u64 {
    emu.stats()["requests"][verb][resource].as_u64().unwrap_or(0)
}

/// Waits up to `limit` for `cond`, panicking with `what` and the emulator's stats.
fn wait(emu: &Emulator, limit: Duration, what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}: {}", emu.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_first_state_by_watch_list_is_what_a_list_brings_in_json_and_protobuf_and_takes_no_token() {
    let emu = emulator(&[]);
    emu.apply(&cluster());
    let settings = |content_type, watch_list| kube::Settings {
        content_type,
        watch_list,
        qps: 1.0,
        burst: 2,
        ..kube::Settings::default()
    };
    let listing = Reflectors::start(&emu, settings(ContentType::Protobuf, false));
    let (listed, _) = first_state(&listing);
    listing.stop();
    assert_eq!(count(&emu, "watchlist", "services"), 0, "the gate off: no WatchList");
    // 3 Services (one ExternalName), 3 slices (one FQDN), this Node, 1 ServiceCIDR.
    assert_eq!(listed.len(), 8, "{listed:#?}");
    for content_type in [ContentType::Json, ContentType::Protobuf] {
        let r = Reflectors::start(&emu, settings(content_type, true));
        let (streamed, took) = first_state(&r);
        r.stop();
        assert_eq!(streamed, listed, "{content_type:?}: the WatchList brought another state");
        // Four listings on a bucket of two a second would wait two seconds for their tokens.
        assert!(took < Duration::from_millis(1500), "{content_type:?}: {took:?}: the WatchLists waited for tokens");
    }
    for resource in ["services", "endpointslices", "nodes", "servicecidrs"] {
        assert_eq!(count(&emu, "watchlist", resource), 2, "{resource}: {}", emu.stats());
        assert_eq!(count(&emu, "list", resource), 1, "{resource}: only the gate-off run lists: {}", emu.stats());
    }
    let (_, verb, target) = emu.requests("services").pop().expect("the services' requests");
    assert_eq!(verb, "watchlist");
    let query: Vec<&str> = target.split_once('?').map_or("", |(_, q)| q).split('&').collect();
    for param in
        ["watch=true", "sendInitialEvents=true", "resourceVersionMatch=NotOlderThan", "allowWatchBookmarks=true"]
    {
        assert!(query.contains(&param), "{param} not in {target}");
    }
    assert!(!target.contains("resourceVersion="), "the first state is the latest, consistently: {target}");
    assert!(target.contains("labelSelector=") && target.contains("fieldSelector="), "the selectors apply: {target}");
}

#[test]
fn an_expired_watch_streams_from_its_last_resource_version_and_a_refused_one_from_the_latest() {
    let emu = emulator(&[]);
    emu.apply(&api_objects(20));
    let r = Reflectors::start(&emu, kube::Settings::default());
    first_state(&r);
    let open = || emu.stats()["openWatches"]["services"].as_u64() == Some(1);
    wait(&emu, Duration::from_secs(5), "the services' stream open", open);
    let rv = emu.rv();
    // Its stream (the WatchList's, followed as the watch) expires: streamed again from the
    // last resourceVersion it saw, after the backoff.
    emu.fault(&json!({"resource": "services", "expire": true}));
    wait(&emu, Duration::from_secs(10), "a second WatchList", || count(&emu, "watchlist", "services") == 2 && open());
    let seen = emu.requests("services");
    let targets: Vec<&str> = seen.iter().map(|(_, _, t)| t.as_str()).collect();
    assert!(seen.iter().all(|(_, verb, _)| verb == "watchlist"), "{seen:?}");
    assert!(!targets[0].contains("resourceVersion="), "{targets:?}");
    assert!(targets[1].contains(&format!("&resourceVersion={rv}")), "not older than {rv}: {targets:?}");
    // The next one is refused as too old (410): then the latest state.
    emu.fault(&json!({"fail": {"status": 410, "verb": "watchlist", "resource": "services", "count": 1}}));
    emu.fault(&json!({"resource": "services", "expire": true}));
    wait(&emu, Duration::from_secs(15), "a fourth WatchList", || count(&emu, "watchlist", "services") == 4 && open());
    let seen = emu.requests("services");
    assert!(seen[2].2.contains("&resourceVersion="), "{seen:?}");
    assert!(!seen[3].2.contains("resourceVersion="), "after a 410, the latest state: {seen:?}");
    assert_eq!(count(&emu, "list", "services"), 0, "{}", emu.stats());
    r.stop();
}

#[test]
fn a_watch_list_cut_before_its_bookmark_removes_nothing() {
    let emu = emulator(&[]);
    emu.apply(&api_objects(30));
    let r = Reflectors::start(&emu, kube::Settings::default());
    let (state, _) = first_state(&r);
    assert_eq!(state.keys().filter(|id| format!("{id:?}").contains("Service")).count(), 30, "{state:?}");
    let open = || emu.stats()["openWatches"]["services"].as_u64() == Some(1);
    wait(&emu, Duration::from_secs(5), "the services' stream open", open);
    // svc-0 goes where the stream cannot show it; the relist the expired stream calls for is
    // cut after 10 of the 29 Services, twice: nothing may be removed until one reaches its
    // bookmark, neither the 19 not yet sent again nor svc-0.
    emu.fault(&json!({"resource": "services", "stall": true}));
    emu.delete(&api_objects(1)[1]);
    emu.fault(&json!({"cut_watch_list": {"resource": "services", "after": 10, "count": 2}}));
    emu.fault(&json!({"resource": "services", "expire": true}));
    let deletions = |r: &Reflectors, into: &mut Vec<ObjectChange>| {
        let changes = r.inbox.wait(Instant::now() + Duration::from_millis(20)).changes;
        into.extend(changes.into_iter().filter(|c| matches!(c, ObjectChange::Service(_, None))));
    };
    let mut deleted = Vec::new();
    // Both cut: the third WatchList is the second cut, and the next waits out the backoff.
    wait(&emu, Duration::from_secs(10), "two cut WatchLists", || count(&emu, "watchlist", "services") >= 3);
    for _ in 0..10 {
        deletions(&r, &mut deleted);
    }
    assert!(deleted.is_empty(), "a cut WatchList removed {deleted:?}");
    let start = Instant::now();
    while deleted.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(15), "svc-0 was never removed: {}", emu.stats());
        deletions(&r, &mut deleted);
    }
    std::thread::sleep(Duration::from_millis(200));
    deletions(&r, &mut deleted);
    assert_eq!(deleted, [ObjectChange::Service(("shop".into(), "svc-0".into()), None)]);
    assert_eq!(count(&emu, "watchlist", "services"), 4, "two cut, then one whole: {}", emu.stats());
    assert_eq!(count(&emu, "list", "services"), 0, "a cut stream is streamed again, not listed");
    r.stop();
}

#[test]
fn a_refused_watch_list_is_listed_instead_and_asked_for_again_at_the_next_listing() {
    let emu = emulator(&["--no-watch-list"]);
    emu.apply(&api_objects(5));
    let r = Reflectors::start(&emu, kube::Settings::default());
    let (state, _) = first_state(&r);
    assert_eq!(state.len(), 11, "5 Services, 5 slices, the Node: {state:?}");
    for resource in ["services", "endpointslices", "nodes", "servicecidrs"] {
        assert_eq!(count(&emu, "watchlist", resource), 1, "{resource}: {}", emu.stats());
        assert_eq!(count(&emu, "list", resource), 1, "{resource}: {}", emu.stats());
    }
    assert_eq!(emu.stats()["status"]["422"], 4, "each refused as the gate off refuses it: {}", emu.stats());
    // The server turns WatchList on; the next listing asks for it again, and gets it.
    emu.fault(&json!({"watch_list": true}));
    emu.fault(&json!({"resource": "services", "expire": true}));
    wait(&emu, Duration::from_secs(10), "a WatchList served", || count(&emu, "watchlist", "services") == 2);
    let open = || emu.stats()["openWatches"]["services"].as_u64() == Some(1);
    wait(&emu, Duration::from_secs(5), "its stream open", open);
    assert_eq!(count(&emu, "list", "services"), 1, "{}", emu.stats());
    assert_eq!(emu.stats()["status"]["422"], 4, "{}", emu.stats());
    r.stop();
}
