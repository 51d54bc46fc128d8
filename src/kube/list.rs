//! One list of a reflector: every object page by page at one snapshot, each page within a
//! time bound and logged while slow, replacing what the resource delivered before.

use super::client::{ApiError, Status};
use super::decode::{self, Item, JsonPage, ListMeta, NotTheList};
use super::protobuf;
use super::protobuf::stream::StreamError;
use super::reflector::{Reflector, escape};
use crate::model::{ObjectChange, ObjectKey};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long a list page may stay silent.
const LIST_IDLE: Duration = Duration::from_secs(60);

/// How long a list page may take in all, however it trickles in. The API server ends a
/// request it has not answered within its own request timeout (a minute), so a page still
/// arriving after that is only a slow or hostile peer: it is given up and listed again
/// after a backoff.
const LIST_PAGE_LIMIT: Duration = Duration::from_secs(60);

/// A list page taking longer than this is logged while it still arrives.
const SLOW_LIST_PAGE: Duration = Duration::from_secs(10);

/// Changes sent to the inbox in one go while listing.
pub(super) const BATCH: usize = 500;

/// The most a list page's body may hold: a whole first listing comes in one page (the watch
/// cache ignores the limit), about 8 MB at 30,000 Services without managed fields, many
/// times that with them; a server sending more is broken or hostile.
const MAX_LIST_BODY: u64 = 1 << 30;

/// How much of a protobuf list body is read from the connection at once.
const READ_BUFFER: usize = 64 << 10;

/// Where a listing reads from, as client-go's reflector chooses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ListFrom {
    /// The first listing: the watch cache (`resourceVersion=0`), which answers it whole.
    Cache,
    /// After a watch expired: not older than the last resourceVersion seen, unpaged (the
    /// watch cache answers it in one request).
    At(String),
    /// After a list was refused as too old (410) or too new (504): the latest state,
    /// consistently, in pages.
    Latest,
}

impl Reflector {
    /// Lists every object (page by page where `from` pages) and replaces what this resource
    /// delivered before.
    pub(super) fn list(&mut self, from: ListFrom) -> Result<(), ApiError> {
        let started = Instant::now();
        let _pass = crate::skips::pass(&format!("listing {}", self.resource.name));
        let mut seen = HashSet::with_capacity(self.known.len());
        let mut batch = Vec::with_capacity(BATCH);
        let rv = match self.pages(&from, &mut seen, &mut batch) {
            Ok(rv) => rv,
            Err(e) => {
                // What was filed before the answer broke off stays known, so that the next
                // list that succeeds removes whatever of it is gone.
                self.known.extend(seen);
                return Err(e);
            }
        };
        self.replace(seen, batch, rv, started, "");
        Ok(())
    }

    /// Replaces what this resource delivered with the state a listing begun at `started` found
    /// (`how`, for the log line): the objects in `seen` (their last changes in `batch`, the
    /// rest sent on already), the others deleted, at resourceVersion `rv`.
    pub(super) fn replace(
        &mut self,
        seen: HashSet<ObjectKey>,
        batch: Vec<ObjectChange>,
        rv: String,
        started: Instant,
        how: &str,
    ) {
        self.shared.inbox.send_all(batch);
        let kind = self.resource.kind;
        let gone: Vec<ObjectChange> = self
            .known
            .iter()
            .filter(|k| !seen.contains(*k))
            .map(|k| ObjectChange::deleted(&(kind, k.clone())))
            .collect();
        self.shared.inbox.send_all(gone);
        let (n, name) = (seen.len(), self.resource.name);
        log::info!("listed {n} {name} in {:?} (resourceVersion {rv}{how})", started.elapsed());
        self.known = seen;
        self.rv = rv;
        self.lived();
        self.mark_listed();
    }

    /// Reads every page, each object decoded, its key put in `seen` and its change sent on
    /// in batches (the last, partial one left in `batch`); the list's resourceVersion.
    fn pages(
        &self,
        from: &ListFrom,
        seen: &mut HashSet<ObjectKey>,
        batch: &mut Vec<ObjectChange>,
    ) -> Result<String, ApiError> {
        let mut cont = String::new();
        loop {
            let limit = self.shared.settings.page_size;
            // With `continue` the token carries the snapshot; a resourceVersion is refused then.
            let position = match (cont.is_empty(), from) {
                (false, _) => format!("limit={limit}&continue={}", escape(&cont)),
                (true, ListFrom::Cache) => format!("limit={limit}&resourceVersion=0"),
                // As client-go's reflector: no limit, so the watch cache answers it whole.
                (true, ListFrom::At(rv)) => format!("resourceVersion={}", escape(rv)),
                (true, ListFrom::Latest) => format!("limit={limit}"),
            };
            let query = format!("?{position}{}", self.selectors());
            // Each object is decoded and sent on as soon as it is read.
            let meta = self.page(&format!("{}{query}", self.resource.path), &mut |item| {
                let (key, change) = self.decode(item);
                seen.extend(key);
                batch.extend(change);
                if batch.len() >= BATCH {
                    self.shared.inbox.send_all(batch.drain(..));
                }
            })?;
            if meta.continue_.is_empty() {
                return Ok(meta.resource_version);
            }
            cont = meta.continue_;
        }
    }

    /// Reads one list page, within [`LIST_PAGE_LIMIT`], warning while it is slow; `item` gets
    /// each object in order. A protobuf page is decoded as it arrives (a first listing comes
    /// whole: its objects are filed while the rest of it is still on the way); a JSON page
    /// once read.
    fn page(&self, path: &str, item: &mut dyn FnMut(&Item)) -> Result<ListMeta, ApiError> {
        let (name, want) = (self.resource.name, decode::list_kind(self.resource.kind));
        let started = Instant::now();
        let body = self.shared.client.get(path, LIST_IDLE, Some(LIST_PAGE_LIMIT))?;
        let proto = protobuf::is_protobuf(body.mime_type());
        let mut reader = SlowWarning { inner: body.into_reader(), name, started, warned: false, read: 0 };
        if proto {
            let mut held = Vec::new();
            let mut reader = std::io::BufReader::with_capacity(READ_BUFFER, reader);
            let tail =
                protobuf::stream::read_list(&mut reader, &want, |raw| decode::proto_item(&mut held, raw, &mut *item));
            return match tail {
                Ok(t) if t.resource_version.is_empty() => Err(no_resource_version(name)),
                Ok(t) => Ok(ListMeta { resource_version: t.resource_version, continue_: t.continue_ }),
                Err(StreamError::Io(e)) => Err(read_error(name, started, e)),
                Err(StreamError::Malformed(e)) => Err(ApiError::Decode(format!("listing {name}: {e}"))),
                Err(StreamError::NotTheList { kind, raw }) => {
                    let (code, reason, message) = protobuf::status(&raw).unwrap_or_default();
                    Err(NotTheList { kind, status: Status { code, reason, message } }.into_error(name))
                }
            };
        }
        let page: Result<JsonPage, _> = serde_json::from_reader(std::io::BufReader::new(&mut reader));
        let page = page.map_err(|e| match e.is_io() {
            true => read_error(name, started, e.into()),
            false => ApiError::Decode(format!("listing {name}: {e}")),
        })?;
        let (meta, items) = page.into_parts(&want).map_err(|e| e.into_error(name))?;
        if meta.resource_version.is_empty() {
            return Err(no_resource_version(name));
        }
        for raw in items {
            item(&Item::Json(raw));
        }
        Ok(meta)
    }
}

/// A list page without a resourceVersion: no server answers so, and watching from an empty
/// one would start from "now", losing whatever changed since.
fn no_resource_version(name: &str) -> ApiError {
    ApiError::Decode(format!("listing {name}: the answer has no metadata.resourceVersion"))
}

/// A list page's body that broke off or took too long, as an error.
fn read_error(name: &str, started: Instant, e: std::io::Error) -> ApiError {
    if started.elapsed() >= LIST_PAGE_LIMIT {
        ApiError::Transport(format!("listing {name}: a page took longer than {LIST_PAGE_LIMIT:?} ({e})"))
    } else {
        ApiError::Transport(format!("listing {name}: {e}"))
    }
}

/// A list page's body, logging once when it is slow to arrive (a first sync waiting on it
/// would otherwise wait without a word).
/// Past [`MAX_LIST_BODY`] it is an error.
struct SlowWarning<R> {
    inner: R,
    name: &'static str,
    started: Instant,
    warned: bool,
    read: u64,
}

impl<R: std::io::Read> std::io::Read for SlowWarning<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > MAX_LIST_BODY {
            let what = format!("a list page longer than {} MiB", MAX_LIST_BODY >> 20);
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, what));
        }
        if !self.warned && self.started.elapsed() >= SLOW_LIST_PAGE {
            self.warned = true;
            log::warn!(
                "listing {}: a page is taking longer than {SLOW_LIST_PAGE:?} to arrive; it is given up at {LIST_PAGE_LIMIT:?}",
                self.name
            );
        }
        Ok(n)
    }
}
