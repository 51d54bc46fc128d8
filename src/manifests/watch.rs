//! The manifests source's thread: re-reads the files when they change and delivers to the
//! sync thread only the objects whose content changed, and the deletion of those gone.

use super::{ManifestError, decode, files, read};
use crate::inbox::Inbox;
use crate::model::{ObjectChange, ObjectId};
use serde_json::Value;
use std::collections::HashMap;
use std::hash::Hasher;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The name this source goes by in the inbox's "listed" accounting.
pub const SOURCE: &str = "manifests";

/// Changes are handed over in batches of this many, so the sync thread takes them in while
/// a big first load is still being read and the reader never holds them all.
const BATCH: usize = 1024;

/// Starts the `manifests` thread: loads `path` now and again whenever its files change
/// (checked every `interval`, without reading them), handing changed objects to `inbox`.
/// A load that fails is reported; what it could not read stays as it was.
pub fn watch(
    path: PathBuf,
    node_name: String,
    interval: Duration,
    stop: Arc<AtomicBool>,
    inbox: Arc<Inbox>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    watch_for(path, node_name, None, interval, stop, inbox)
}

/// As [`watch`], for the proxy named `proxy_name` (`--service-proxy-name`).
pub fn watch_for(
    path: PathBuf,
    node_name: String,
    proxy_name: Option<String>,
    interval: Duration,
    stop: Arc<AtomicBool>,
    inbox: Arc<Inbox>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("manifests".into()).spawn(move || {
        let mut watcher = Watcher::new(path, node_name, inbox).for_proxy(proxy_name);
        let mut seen = None;
        let mut last_error = None;
        while !stop.load(Ordering::SeqCst) {
            let now = files::fingerprint(&watcher.path);
            if seen.as_ref() != Some(&now) {
                // A file changed within the change time's granularity of now may change again
                // unnoticed (same size, same times): read it again on the next check too.
                seen = files::settled(&now).then_some(now);
                match watcher.load() {
                    Ok(changed) => {
                        log::debug!("manifests read: {changed} objects changed");
                        last_error = None;
                    }
                    Err(e) => {
                        // What cannot be read now (a path not there yet, an I/O error) is
                        // tried again on the next check; a file that does not parse, when it
                        // changes. Each error is logged once.
                        if matches!(e, ManifestError::Io { .. }) {
                            seen = None;
                        }
                        let text = e.to_string();
                        if last_error.as_ref() != Some(&text) {
                            log::error!("{text}; what it held stays as it was");
                        }
                        last_error = Some(text);
                    }
                }
            }
            std::thread::sleep(interval);
        }
    })
}

/// Follows one manifests path.
pub struct Watcher {
    path: PathBuf,
    node_name: String,
    /// `--service-proxy-name`: only Services labelled with it are served.
    proxy_name: Option<String>,
    inbox: Arc<Inbox>,
    /// A hash of every object's JSON as last delivered (or, for an object whose new content
    /// was refused, as last delivered good).
    known: HashMap<ObjectId, u64>,
    listed: bool,
}

impl Watcher {
    /// A watcher of `path` for node `node_name`, delivering to `inbox`.
    pub fn new(path: PathBuf, node_name: String, inbox: Arc<Inbox>) -> Watcher {
        Watcher { path, node_name, proxy_name: None, inbox, known: HashMap::new(), listed: false }
    }

    /// The same, for the proxy named `proxy_name` (`--service-proxy-name`).
    pub fn for_proxy(self, proxy_name: Option<String>) -> Watcher {
        Watcher { proxy_name, ..self }
    }

    /// Reads the manifests once and delivers what changed; returns how many objects did.
    /// When a file cannot be read or parsed, nothing is taken as deleted.
    pub fn load(&mut self) -> Result<usize, ManifestError> {
        let mut current: HashMap<ObjectId, u64> = HashMap::with_capacity(self.known.len());
        let mut batch = Vec::new();
        let mut delivered = 0;
        let mut unidentified = false;
        let result = read(&self.path, &mut |file, id, doc| {
            unidentified |= id.1.1.is_empty();
            let hash = hash_of(&doc);
            let before = self.known.get(&id).copied();
            if before == Some(hash) {
                current.insert(id, hash);
                return;
            }
            match self.validate(file, doc) {
                Ok(Some(change)) => {
                    current.insert(id, hash);
                    batch.push(change);
                }
                Ok(None) => {}
                // Bad input loses nothing: the object keeps its last good state.
                Err(why) => {
                    log::warn!("{why}");
                    if let Some(before) = before {
                        current.insert(id, before);
                    }
                }
            }
            if batch.len() >= BATCH {
                delivered += batch.len();
                self.inbox.send_all(batch.drain(..));
            }
        });
        delivered += batch.len();
        self.inbox.send_all(batch);
        // Without every object identified, what is missing may only be misnamed: nothing is
        // taken as deleted then (the object keeps its last good state); nor after a failure.
        let gone = self.settle(current, result.is_err() || unidentified);
        for w in result? {
            log::warn!("{w}");
        }
        if unidentified {
            log::warn!("an object without a usable name was skipped; until it is fixed, nothing is taken as deleted");
        }
        delivered += gone.len();
        self.inbox.send_all(gone);
        self.mark_listed();
        Ok(delivered)
    }

    /// Decodes and validates one object.
    fn validate(&self, file: &std::path::Path, doc: Value) -> Result<Option<ObjectChange>, String> {
        match decode(file, doc).map_err(|bad| bad.to_string())? {
            Some(obj) => {
                ObjectChange::from_api_for(&obj, &self.node_name, self.proxy_name.as_deref()).map_err(|e| e.to_string())
            }
            None => Ok(None),
        }
    }

    /// Makes `current` what is known; returns the deletions of what it lacks, or none when
    /// `keep_all` (what it lacks stays known).
    fn settle(&mut self, mut current: HashMap<ObjectId, u64>, keep_all: bool) -> Vec<ObjectChange> {
        if keep_all {
            for (id, hash) in self.known.drain() {
                current.entry(id).or_insert(hash);
            }
        }
        let gone = self.known.keys().filter(|id| !current.contains_key(*id)).map(ObjectChange::deleted).collect();
        self.known = current;
        gone
    }

    fn mark_listed(&mut self) {
        if !self.listed {
            self.listed = true;
            self.inbox.listed(SOURCE);
        }
    }
}

/// Feeds serialized JSON straight into a hasher, so no copy of the text is made.
struct HashWriter<'a>(&'a mut std::collections::hash_map::DefaultHasher);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A hash of an object's content (its keys are sorted, so equal objects hash alike).
fn hash_of(doc: &Value) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    // Writing JSON into a hasher cannot fail.
    let _ = serde_json::to_writer(HashWriter(&mut hasher), doc);
    hasher.finish()
}
