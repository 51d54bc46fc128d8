//! The API-server emulator's protocol, against the running binary: paging at a snapshot,
//! selectors, watch replay and transitions, bookmarks, timeouts, compaction, every fault switch,
//! authentication, stats, Events written and read back, protobuf to clients that prefer it
//! (a JSON and a protobuf client delivering the same objects), WatchList served, refused and
//! cut, and (when installed) real kubectl.

use crate::common::emulator::{Emulator, Item, RawWatch, plain_agent, request, request_with, tls_agent};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

mod clients;
mod faults;
mod lists_watches;
mod watch_list;

/// The first `kubectl` on PATH (tests/run installs Debian's `kubernetes-client` where none
/// is). In CI a missing kubectl fails the test, so the emulator is always checked by a real
/// client; elsewhere the test says why it skips.
fn kubectl() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).map(|d| d.join("kubectl")).find(|k| k.is_file());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "kubectl is not installed: tests/run installs it");
        println!("kubectl not installed; skipping");
    }
    found
}

fn svc(ns: &str, name: &str, labels: Value, cluster_ip: &str) -> Value {
    json!({"apiVersion":"v1","kind":"Service","metadata":{"name":name,"namespace":ns,"labels":labels},
           "spec":{"clusterIP":cluster_ip,"ports":[{"port":80}]}})
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn started() -> Emulator {
    Emulator::start(None, "127.0.0.1:0", None, &[])
}

fn watch(emu: &Emulator, plural_path: &str) -> RawWatch {
    let mut w = RawWatch::open(&emu.control_addr(), &format!("{plural_path}?watch=true"));
    assert!(matches!(w.next(Duration::from_millis(100)), Item::Timeout));
    w
}
