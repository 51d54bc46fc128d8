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
    std::thread::Builder::new().name("manifests".into()).spawn(move || {
        let mut watcher = Watcher::new(path, node_name, inbox);
        let mut seen = None;
        while !stop.load(Ordering::SeqCst) {
            let now = files::fingerprint(&watcher.path);
            if seen.as_ref() != Some(&now) {
                seen = Some(now);
                match watcher.load() {
                    Ok(changed) => log::debug!("manifests read: {changed} objects changed"),
                    Err(e) => log::error!("{e}; what it held stays as it was"),
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
    inbox: Arc<Inbox>,
    /// A hash of every object's JSON as last delivered (or, for an object whose new content
    /// was refused, as last delivered good).
    known: HashMap<ObjectId, u64>,
    listed: bool,
}

impl Watcher {
    /// A watcher of `path` for node `node_name`, delivering to `inbox`.
    pub fn new(path: PathBuf, node_name: String, inbox: Arc<Inbox>) -> Watcher {
        Watcher { path, node_name, inbox, known: HashMap::new(), listed: false }
    }

    /// Reads the manifests once and delivers what changed; returns how many objects did.
    /// When a file cannot be read or parsed, nothing is taken as deleted.
    pub fn load(&mut self) -> Result<usize, ManifestError> {
        let mut current: HashMap<ObjectId, u64> = HashMap::with_capacity(self.known.len());
        let mut batch = Vec::new();
        let mut delivered = 0;
        let result = read(&self.path, &mut |file, id, doc| {
            let hash = hash_of(&doc);
            let before = self.known.get(&id).copied();
            if before == Some(hash) {
                current.insert(id, hash);
                return;
            }
            let change = decode(file, doc).map_err(|bad| bad.to_string()).and_then(|obj| match obj {
                Some(obj) => ObjectChange::from_api(&obj, &self.node_name).map_err(|e| e.to_string()),
                None => Ok(None),
            });
            match change {
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
        let warnings = match result {
            Ok(warnings) => warnings,
            Err(e) => {
                for (id, hash) in self.known.drain() {
                    current.entry(id).or_insert(hash);
                }
                self.known = current;
                return Err(e);
            }
        };
        for w in warnings {
            log::warn!("{w}");
        }
        let gone: Vec<ObjectChange> =
            self.known.keys().filter(|id| !current.contains_key(*id)).map(ObjectChange::deleted).collect();
        delivered += gone.len();
        self.inbox.send_all(gone);
        self.known = current;
        if !self.listed {
            self.listed = true;
            self.inbox.listed(SOURCE);
        }
        Ok(delivered)
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
