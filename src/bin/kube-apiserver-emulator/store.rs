//! The object store: every object by resource and key, the global resourceVersion counter, the
//! history, and the registry of live watchers that each write fans out to.

use crate::history::{Change, Event, History, Key, Obj, TooOld};
use crate::resources::Resource;
use crate::selectors::Facts;
use crate::watchers::{Registry, WatchMsg};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist.
    #[error("{plural} \"{name}\" not found")]
    NotFound {
        /// Resource plural.
        plural: &'static str,
        /// Object name.
        name: String,
    },
    /// Creating an object that exists.
    #[error("{plural} \"{name}\" already exists")]
    AlreadyExists {
        /// Resource plural.
        plural: &'static str,
        /// Object name.
        name: String,
    },
    /// A replace carried a stale resourceVersion.
    #[error(
        "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict {
        /// Resource plural.
        plural: &'static str,
        /// Object name.
        name: String,
    },
    /// The body is not an acceptable object.
    #[error("{0}")]
    Invalid(String),
    /// A resourceVersion older than the history.
    #[error(transparent)]
    TooOld(#[from] TooOld),
}

/// Everything behind the store's lock.
pub struct Inner {
    /// The last resourceVersion handed out.
    pub rv: u64,
    /// Objects by resource plural, then key.
    pub objects: HashMap<&'static str, BTreeMap<Key, Obj>>,
    /// Past writes.
    pub history: History,
    /// Open watches.
    pub watchers: Registry,
}

/// The shared store.
pub struct Store {
    inner: Mutex<Inner>,
}

/// How a write treats an existing object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// POST: the object must not exist.
    Create,
    /// PUT: the object must exist; a set resourceVersion must match.
    Replace,
    /// Control `apply`: create or replace, unconditionally.
    Upsert,
}

impl Store {
    /// An empty store whose first write gets resourceVersion `start + 1`.
    pub fn new(start: u64, history: usize) -> Store {
        let inner = Inner {
            rv: start,
            objects: HashMap::new(),
            history: History::new(history, start),
            watchers: Registry::default(),
        };
        Store { inner: Mutex::new(inner) }
    }

    /// Locks the store; a poisoned lock is taken over, since every write leaves it consistent.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current resourceVersion and the compacted point.
    pub fn versions(&self) -> (u64, u64) {
        let g = self.lock();
        (g.rv, g.history.compacted)
    }

    /// One object by key.
    pub fn get(&self, res: &Resource, key: &Key) -> Option<Obj> {
        self.lock().objects.get(res.plural).and_then(|m| m.get(key)).cloned()
    }

    /// Creates, replaces or upserts `obj` (its metadata names it); returns the stored object.
    pub fn write(&self, res: &'static Resource, mut obj: Value, mode: Mode) -> Result<Value, StoreError> {
        let key = key_of(res, &mut obj)?;
        let mut g = self.lock();
        let prev = g.objects.get(res.plural).and_then(|m| m.get(&key)).cloned();
        let not_found = || StoreError::NotFound { plural: res.plural, name: key.1.clone() };
        match (&prev, mode) {
            (Some(_), Mode::Create) => {
                return Err(StoreError::AlreadyExists { plural: res.plural, name: key.1.clone() });
            }
            (None, Mode::Replace) => return Err(not_found()),
            (Some(p), Mode::Replace) => {
                let sent = obj["metadata"]["resourceVersion"].as_str().unwrap_or_default();
                if !sent.is_empty() && sent != p.rv.to_string() {
                    return Err(StoreError::Conflict { plural: res.plural, name: key.1.clone() });
                }
            }
            _ => {}
        }
        let meta = metadata(&mut obj)?;
        match &prev {
            Some(p) => keep_identity(meta, p),
            None => {
                meta.entry("uid").or_insert_with(|| Value::String(uid()));
                meta.entry("creationTimestamp").or_insert_with(|| Value::String(now_rfc3339()));
            }
        }
        Ok(g.commit(res, key, Some(obj)))
    }

    /// Deletes an object; returns its last state, stamped with the deletion's resourceVersion.
    pub fn delete(&self, res: &'static Resource, key: Key) -> Result<Value, StoreError> {
        let mut g = self.lock();
        if !g.objects.get(res.plural).is_some_and(|m| m.contains_key(&key)) {
            return Err(StoreError::NotFound { plural: res.plural, name: key.1 });
        }
        Ok(g.commit(res, key, None))
    }

    /// Applies a JSON merge patch to an existing object; a resourceVersion in the patch must match.
    pub fn patch(&self, res: &'static Resource, key: Key, patch: &Value) -> Result<Value, StoreError> {
        let mut g = self.lock();
        let prev = g.objects.get(res.plural).and_then(|m| m.get(&key)).cloned();
        let prev = prev.ok_or_else(|| StoreError::NotFound { plural: res.plural, name: key.1.clone() })?;
        let sent = patch["metadata"]["resourceVersion"].as_str().unwrap_or_default();
        if !sent.is_empty() && sent != prev.rv.to_string() {
            return Err(StoreError::Conflict { plural: res.plural, name: key.1 });
        }
        let mut value = parse(&prev.body);
        merge_patch(&mut value, patch);
        let meta = metadata(&mut value)?;
        // A patch cannot move or rename the object.
        meta.insert("name".into(), Value::String(key.1.clone()));
        if res.namespaced {
            meta.insert("namespace".into(), Value::String(key.0.clone()));
        }
        keep_identity(meta, &prev);
        Ok(g.commit(res, key, Some(value)))
    }

    /// Sends a fault message to the open watches of `plural` (all when `None`).
    pub fn signal(&self, plural: Option<&str>, msg: &WatchMsg) {
        self.lock().watchers.signal(plural, msg);
    }

    /// Forgets all history up to the current resourceVersion.
    pub fn compact(&self) {
        let mut g = self.lock();
        let rv = g.rv;
        g.history.compact(rv);
    }
}

impl Inner {
    /// Applies one write (`None`: delete) with the next resourceVersion, records it and fans it
    /// out; returns the object as the response shows it.
    fn commit(&mut self, res: &'static Resource, key: Key, new: Option<Value>) -> Value {
        self.rv += 1;
        let rv = self.rv;
        let map = self.objects.entry(res.plural).or_default();
        let prev = map.get(&key).cloned();
        let (change, mut value) = match new {
            Some(v) => (if prev.is_some() { Change::Modified } else { Change::Added }, v),
            None => (Change::Deleted, prev.as_ref().map(|p| parse(&p.body)).unwrap_or_else(|| json!({}))),
        };
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let object = stored(res, rv, &value);
        match change {
            Change::Deleted => map.remove(&key),
            _ => map.insert(key.clone(), object.clone()),
        };
        let event = Arc::new(Event { rv, res, key, change, object, prev });
        self.history.push(event.clone());
        self.watchers.fan_out(res.plural, &event);
        with_kind(res, &mut value);
        value
    }
}

/// Serializes `value` for storage, without `kind` and `apiVersion`.
pub fn stored(res: &Resource, rv: u64, value: &Value) -> Obj {
    let facts = Arc::new(Facts::of(res, value));
    let body = match value.as_object() {
        Some(m) => {
            let bare: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| *k != "kind" && *k != "apiVersion")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            serde_json::to_vec(&bare).unwrap_or_default()
        }
        None => b"{}".to_vec(),
    };
    Obj { rv, body: body.into(), facts, proto: Arc::default() }
}

/// Parses stored JSON (which the store itself wrote).
pub fn parse(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|_| json!({}))
}

/// Puts `kind` and `apiVersion` into an object.
pub fn with_kind(res: &Resource, value: &mut Value) {
    if let Some(m) = value.as_object_mut() {
        m.insert("kind".into(), Value::String(res.kind.into()));
        m.insert("apiVersion".into(), Value::String(res.api_version()));
    }
}

fn metadata(obj: &mut Value) -> Result<&mut Map<String, Value>, StoreError> {
    obj.get_mut("metadata").and_then(Value::as_object_mut).ok_or_else(|| StoreError::Invalid("metadata missing".into()))
}

/// The key named by `obj`'s metadata; fills in `generateName` and the default namespace.
pub fn key_of(res: &Resource, obj: &mut Value) -> Result<Key, StoreError> {
    if !obj.is_object() {
        return Err(StoreError::Invalid("the body is not a JSON object".into()));
    }
    let obj_map = obj.as_object_mut().ok_or_else(|| StoreError::Invalid("not an object".into()))?;
    let meta = obj_map.entry("metadata").or_insert_with(|| json!({}));
    let meta = meta.as_object_mut().ok_or_else(|| StoreError::Invalid("metadata is not an object".into()))?;
    if meta.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
        let prefix = meta.get("generateName").and_then(Value::as_str).unwrap_or_default().to_string();
        if prefix.is_empty() {
            return Err(StoreError::Invalid("name or generateName is required".into()));
        }
        let suffix: String =
            (0..5).map(|_| fastrand::choice(b"bcdfghjklmnpqrstvwxz2456789").map_or('x', |c| *c as char)).collect();
        meta.insert("name".into(), Value::String(prefix + &suffix));
    }
    let name = meta.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
    let ns = if res.namespaced {
        let ns =
            meta.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or("default").to_string();
        meta.insert("namespace".into(), Value::String(ns.clone()));
        ns
    } else {
        meta.remove("namespace");
        String::new()
    };
    Ok((ns, name))
}

/// RFC 7386 JSON merge patch: objects merge recursively, `null` removes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Some(t) = target.as_object_mut() {
        for (k, v) in fields {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Keeps uid and creationTimestamp of the object being replaced.
fn keep_identity(meta: &mut Map<String, Value>, prev: &Obj) {
    let old = parse(&prev.body);
    for field in ["uid", "creationTimestamp"] {
        if let Some(v) = old["metadata"].get(field) {
            meta.insert(field.into(), v.clone());
        }
    }
}

/// A random RFC 4122 version-4 UUID.
fn uid() -> String {
    let b: [u8; 16] = std::array::from_fn(|i| match i {
        6 => 0x40 | (fastrand::u8(..) & 0x0f),
        8 => 0x80 | (fastrand::u8(..) & 0x3f),
        _ => fastrand::u8(..),
    });
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}
