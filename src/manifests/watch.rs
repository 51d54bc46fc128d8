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
    /// Every object as last delivered (or, for an object whose new content was refused, as
    /// last delivered good), marked in place by each load that finds it: a second map of a
    /// 30k-service cluster's ids, rebuilt on every rewrite, would double what this costs.
    known: HashMap<ObjectId, Known>,
    /// Loads so far; the mark of the current one.
    loads: u64,
    listed: bool,
}

/// What the watcher remembers of one object.
#[derive(Debug, Clone, Copy)]
struct Known {
    /// A hash of its JSON.
    hash: u64,
    /// The last load that found it.
    load: u64,
}

impl Watcher {
    /// A watcher of `path` for node `node_name`, delivering to `inbox`.
    pub fn new(path: PathBuf, node_name: String, inbox: Arc<Inbox>) -> Watcher {
        Watcher { path, node_name, proxy_name: None, inbox, known: HashMap::new(), loads: 0, listed: false }
    }

    /// The same, for the proxy named `proxy_name` (`--service-proxy-name`).
    pub fn for_proxy(self, proxy_name: Option<String>) -> Watcher {
        Watcher { proxy_name, ..self }
    }

    /// Reads the manifests once and delivers what changed; returns how many objects did.
    /// When a file cannot be read or parsed, nothing is taken as deleted.
    pub fn load(&mut self) -> Result<usize, ManifestError> {
        self.loads += 1;
        let load = self.loads;
        let Watcher { path, node_name, proxy_name, inbox, known, .. } = self;
        let mut batch = Vec::new();
        let mut delivered = 0;
        let mut unidentified = false;
        let _pass = crate::skips::pass("reading the manifests");
        let result = read(path, &mut |file, id, doc| {
            unidentified |= id.1.1.is_empty();
            let hash = hash_of(&doc);
            if let Some(k) = known.get_mut(&id) {
                k.load = load;
                if k.hash == hash {
                    return;
                }
            }
            match validate(file, doc, node_name, proxy_name.as_deref()) {
                Ok(Some(change)) => {
                    known.insert(id, Known { hash, load });
                    batch.push(change);
                }
                // Not followed (any more): unmarked, so taken as deleted if it was known.
                Ok(None) => {
                    if let Some(k) = known.get_mut(&id) {
                        k.load = 0;
                    }
                }
                // Bad input loses nothing: the object keeps its last good state (and mark).
                Err(why) => crate::skips::warn_skipped!("{why}"),
            }
            if batch.len() >= BATCH {
                delivered += batch.len();
                inbox.send_all(batch.drain(..));
            }
        });
        delivered += batch.len();
        self.inbox.send_all(batch);
        // Without every object identified, what is missing may only be misnamed: nothing is
        // taken as deleted then (the object keeps its last good state); nor after a failure.
        let gone = if result.is_err() || unidentified { Vec::new() } else { self.forget_unmarked() };
        for w in result? {
            crate::skips::warn_skipped!("{w}");
        }
        if unidentified {
            log::warn!("an object without a usable name was skipped; until it is fixed, nothing is taken as deleted");
        }
        delivered += gone.len();
        self.inbox.send_all(gone);
        self.mark_listed();
        Ok(delivered)
    }

    /// Forgets what the current load did not find; returns their deletions.
    fn forget_unmarked(&mut self) -> Vec<ObjectChange> {
        let mut gone = Vec::new();
        let load = self.loads;
        self.known.retain(|id, k| {
            let found = k.load == load;
            if !found {
                gone.push(ObjectChange::deleted(id));
            }
            found
        });
        gone
    }

    fn mark_listed(&mut self) {
        if !self.listed {
            self.listed = true;
            self.inbox.listed(SOURCE);
        }
    }
}

/// Decodes and validates one object.
fn validate(
    file: &std::path::Path,
    doc: Value,
    node_name: &str,
    proxy_name: Option<&str>,
) -> Result<Option<ObjectChange>, String> {
    match decode(file, doc).map_err(|bad| bad.to_string())? {
        Some(obj) => ObjectChange::from_api_for(&obj, node_name, proxy_name).map_err(|e| e.to_string()),
        None => Ok(None),
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
