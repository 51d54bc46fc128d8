//! Request and status counters of the API listener, reported by `/emulator/stats`.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
struct Counts {
    requests: BTreeMap<String, BTreeMap<String, u64>>,
    writes: u64,
    status: BTreeMap<u16, u64>,
    media: BTreeMap<String, u64>,
}

/// Counters; only requests on the API listener count, so a test's own control traffic does not.
#[derive(Debug, Default)]
pub struct Stats {
    counts: Mutex<Counts>,
}

impl Stats {
    fn with<T>(&self, f: impl FnOnce(&mut Counts) -> T) -> T {
        f(&mut self.counts.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Counts a request of `verb` (list, watch, get, or a write) on `plural`; writes are
    /// counted per verb and resource too, so a test can tell how often Events were posted.
    pub fn request(&self, verb: &str, plural: &str) {
        self.with(|c| {
            *c.requests.entry(verb.into()).or_default().entry(plural.into()).or_default() += 1;
            if !matches!(verb, "list" | "watch" | "get") {
                c.writes += 1;
            }
        });
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
            let mut requests = json!({"list": {}, "watch": {}, "get": {}, "write": c.writes});
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
            })
        })
    }
}
