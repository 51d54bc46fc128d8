//! Request and status counters of the API listener and the bytes it sent, reported by
//! `/emulator/stats`; and its latest requests, when each came and what it asked
//! (`/emulator/requests`).

use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// How many requests `/emulator/requests` keeps, the latest.
const RECENT: usize = 2000;

#[derive(Debug, Default)]
struct Counts {
    requests: BTreeMap<String, BTreeMap<String, u64>>,
    writes: u64,
    status: BTreeMap<u16, u64>,
    media: BTreeMap<String, u64>,
    recent: VecDeque<Value>,
}

/// Counters; only requests on the API listener count, so a test's own control traffic does not.
#[derive(Debug, Default)]
pub struct Stats {
    counts: Mutex<Counts>,
    /// Bytes the API listener wrote (HTTP, before TLS), added to by its connections.
    pub sent: Arc<AtomicU64>,
}

impl Stats {
    fn with<T>(&self, f: impl FnOnce(&mut Counts) -> T) -> T {
        f(&mut self.counts.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Counts a request of `verb` (list, watch, get, or a write) on `plural`, `target` its
    /// path and query; writes are counted per verb and resource too, so a test can tell how
    /// often Events were posted; a watch that is a WatchList counts under `watchlist` as well.
    pub fn request(&self, verb: &str, plural: &str, target: &str, watch_list: bool) {
        let at_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        self.with(|c| {
            *c.requests.entry(verb.into()).or_default().entry(plural.into()).or_default() += 1;
            if watch_list {
                *c.requests.entry("watchlist".into()).or_default().entry(plural.into()).or_default() += 1;
            }
            if !matches!(verb, "list" | "watch" | "get") {
                c.writes += 1;
            }
            if c.recent.len() == RECENT {
                c.recent.pop_front();
            }
            let verb = if watch_list { "watchlist" } else { verb };
            c.recent.push_back(json!({"atMs": at_ms, "verb": verb, "resource": plural, "target": target}));
        });
    }

    /// The latest requests, oldest first: when each came (ms since the epoch), its verb
    /// (`watchlist` for a WatchList), resource, and path and query.
    pub fn recent(&self) -> Value {
        self.with(|c| Value::Array(c.recent.iter().cloned().collect()))
    }

    /// Counts a response status.
    pub fn status(&self, code: u16) {
        self.with(|c| *c.status.entry(code).or_default() += 1);
    }

    /// Counts an answer (a watch stream included) of media type `media`, parameters dropped.
    pub fn media(&self, media: &str) {
        let media = media.split(';').next().unwrap_or_default().to_string();
        self.with(|c| *c.media.entry(media).or_default() += 1);
    }

    /// The `/emulator/stats` document.
    pub fn report(&self, rv: u64, compacted: u64, open: BTreeMap<&'static str, usize>) -> Value {
        self.with(|c| {
            let mut requests = json!({"list": {}, "watch": {}, "watchlist": {}, "get": {}, "write": c.writes});
            for (verb, per) in &c.requests {
                requests[verb.as_str()] = json!(per);
            }
            let status: BTreeMap<String, u64> = c.status.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            json!({
                "resourceVersion": rv.to_string(),
                "compacted": compacted.to_string(),
                "requests": requests,
                "status": status,
                "media": c.media,
                "openWatches": open,
                "bytesSent": self.sent.load(Ordering::Relaxed),
            })
        })
    }
}
