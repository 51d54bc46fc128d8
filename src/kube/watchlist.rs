//! A reflector's listing streamed as a watch, client-go's WatchList (KEP-3157, gate
//! `WatchListClient`): the server sends every object as an `ADDED` event, then a bookmark
//! annotated `k8s.io/initial-events-end: "true"` at the state's resourceVersion, and the same
//! stream goes on as the watch. The API server streams it from its watch cache instead of
//! building one list response per client, which is what a fleet of proxies restarting at once
//! asks of it. The objects replace what the resource delivered as a list's do, and only once
//! the bookmark came: a stream cut before it removes nothing. Where the server refuses it (one
//! before 1.27, or with its `WatchList` gate off, answers 422), the reflector lists instead,
//! as client-go's does, and asks for a WatchList again at its next listing, as client-go's.

use super::client::ApiError;
use super::decode::{self, Event};
use super::list::{BATCH, ListFrom};
use super::reflector::{Next, Reflector, escape};
use super::watch::{Got, Stream, VERY_SHORT_WATCH};
use crate::model::{ObjectChange, ObjectKey};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long the initial events may take in all, as a list page (`list::LIST_PAGE_LIMIT`): the
/// same state a list would bring in one page. A server that ignores `sendInitialEvents` (and
/// so never sends the bookmark) is listed after this long instead of waited for.
const INITIAL_EVENTS_LIMIT: Duration = Duration::from_secs(60);

/// The query of a WatchList (its `timeoutSeconds` is added when it is opened).
const WATCH_LIST: &str =
    "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

/// Why a WatchList brought no state.
#[derive(Debug)]
pub(super) enum Unstreamed {
    /// The server does not stream this listing (it refused it, or answered what no
    /// WatchList is): it is listed instead, at once.
    Refused(ApiError),
    /// A failure recovered from as any other (a wait, or a listing of the latest state),
    /// after which a WatchList is asked for again.
    Failed(ApiError),
}

/// Whether a WatchList's failure `e` says to ask for it again rather than list: too many
/// requests (429), a resourceVersion too old (410) or too new (504), as client-go's reflector
/// retries them; and no answer at all (refused, reset, timed out), which says nothing of
/// whether the server streams lists, and which a list, the very request WatchList spares a
/// server coming back, would meet as well (client-go lists at once after a timeout; it waits
/// and asks again only after a refused connection).
fn asks_again(e: &ApiError) -> bool {
    match e {
        ApiError::Status { .. } => e.is_gone() || matches!(e.code(), Some(429 | 504)),
        ApiError::Decode(_) => false,
        ApiError::Transport(_) | ApiError::Credentials(_) | ApiError::Stopped => true,
    }
}

/// `e` as why a WatchList brought no state.
fn unstreamed(e: ApiError) -> Unstreamed {
    if asks_again(&e) { Unstreamed::Failed(e) } else { Unstreamed::Refused(e) }
}

/// The query of a WatchList from `from`, with `selectors`: the latest state, consistently
/// (no resourceVersion), or what is not older than the last resourceVersion seen.
fn query(from: &ListFrom, selectors: &str) -> String {
    match from {
        ListFrom::At(rv) => format!("{WATCH_LIST}&resourceVersion={}{selectors}", escape(rv)),
        ListFrom::Cache | ListFrom::Latest => format!("{WATCH_LIST}{selectors}"),
    }
}

impl Reflector {
    /// Lists from `from`: by WatchList where enabled (the stream, past its initial events, is
    /// the next step to follow), else, or where the server refuses it, by a list.
    pub(super) fn relist(&mut self, from: &ListFrom) -> Result<Next, ApiError> {
        // One relist, whichever way it goes.
        if self.listed {
            self.count(|m| &m.relists);
        }
        if self.shared.settings.watch_list {
            match self.watch_list(from) {
                Ok(stream) => return Ok(Next::Follow(Box::new(stream))),
                Err(Unstreamed::Failed(e)) => return Err(e),
                Err(Unstreamed::Refused(e)) => {
                    let name = self.resource.name;
                    if std::mem::replace(&mut self.watch_list_refused, true) {
                        log::debug!("{name}: WatchList refused again ({e}); listing instead");
                    } else {
                        log::info!("{name}: the server does not stream the listing ({e}); listing instead");
                    }
                }
            }
        }
        self.list(from.clone()).map(|()| Next::Watch)
    }

    /// Streams the state from `from` and replaces what the resource delivered with it; the
    /// stream, to follow as the watch.
    fn watch_list(&mut self, from: &ListFrom) -> Result<Stream, Unstreamed> {
        let started = Instant::now();
        let _pass = crate::skips::pass(&format!("listing {}", self.resource.name));
        let mut stream = self.open(&query(from, &self.selectors())).map_err(unstreamed)?;
        let deadline = started + INITIAL_EVENTS_LIMIT;
        stream.set_deadline(Some(deadline));
        let mut seen = HashSet::with_capacity(self.known.len());
        let mut batch = Vec::with_capacity(BATCH);
        let rv = match self.initial_events(&mut stream, deadline, &mut seen, &mut batch) {
            Ok(rv) => rv,
            Err(e) => {
                // As after a list that broke off: what was filed stays known, so that the
                // listing that succeeds removes whatever of it is gone; nothing else goes.
                self.known.extend(seen);
                return Err(e);
            }
        };
        stream.set_deadline(None);
        self.replace(seen, batch, rv, started, ", by WatchList");
        // The stream goes on as the watch: the next watch opened is a restart.
        self.watched = true;
        Ok(stream)
    }

    /// Reads the initial events of `s` up to the bookmark that ends them, by `deadline`: each
    /// object's key put in `seen` and its change sent on in batches (the last, partial one
    /// left in `batch`); the bookmark's resourceVersion.
    fn initial_events(
        &mut self,
        s: &mut Stream,
        deadline: Instant,
        seen: &mut HashSet<ObjectKey>,
        batch: &mut Vec<ObjectChange>,
    ) -> Result<String, Unstreamed> {
        let name = self.resource.name;
        let err = |what: &str| ApiError::Transport(format!("listing {name} by WatchList: {what}"));
        loop {
            // A stream that is not one of events is no WatchList (client-go lists then).
            let got = self.next_event(s).map_err(Unstreamed::Refused)?;
            let event = match got {
                Got::Event(event) => event,
                Got::Blank => continue,
                _ if Instant::now() >= deadline => {
                    let what = format!("no end of the initial events within {INITIAL_EVENTS_LIMIT:?}");
                    return Err(Unstreamed::Refused(err(&what)));
                }
                Got::End | Got::Broken(_) if s.events == 0 && s.started.elapsed() < VERY_SHORT_WATCH => {
                    return Err(Unstreamed::Refused(err("the server ended the stream at once")));
                }
                Got::End => return Err(Unstreamed::Failed(err("the stream ended before its bookmark"))),
                Got::Silent => return Err(Unstreamed::Failed(err("the stream went silent before its bookmark"))),
                Got::Broken(e) => {
                    return Err(Unstreamed::Failed(err(&format!("the stream broke before its bookmark ({e})"))));
                }
            };
            if let Some(rv) = self.initial_event(event, seen, batch)? {
                return Ok(rv);
            }
            if self.stopped() {
                return Err(Unstreamed::Failed(ApiError::Stopped));
            }
        }
    }

    /// Files one initial event; the resourceVersion of the bookmark that ends them.
    fn initial_event(
        &mut self,
        event: Event,
        seen: &mut HashSet<ObjectKey>,
        batch: &mut Vec<ObjectChange>,
    ) -> Result<Option<String>, Unstreamed> {
        let name = self.resource.name;
        if event.foreign(self.resource.kind) {
            let what = format!("a {:?} event whose object is a {:?}", event.kind, event.object_kind);
            return Err(Unstreamed::Refused(ApiError::Decode(format!("listing {name} by WatchList: {what}"))));
        }
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" => {
                let (key, change) = self.decode(&event.object);
                seen.extend(key);
                batch.extend(change);
                if batch.len() >= BATCH {
                    self.shared.inbox.send_all(batch.drain(..));
                }
            }
            "DELETED" => {
                let meta = decode::meta(&event.object);
                let key = (meta.namespace, meta.name);
                seen.remove(&key);
                if self.known.remove(&key) {
                    // After the changes before it, so that an object added and deleted ends deleted.
                    self.shared.inbox.send_all(batch.drain(..));
                    self.shared.inbox.send(ObjectChange::deleted(&(self.resource.kind, key)));
                }
            }
            "BOOKMARK" if decode::initial_events_end(&event.object) => {
                let rv = decode::meta(&event.object).resource_version;
                if rv.is_empty() {
                    let what = "the bookmark ending the initial events has no resourceVersion";
                    return Err(Unstreamed::Refused(ApiError::Decode(format!("listing {name} by WatchList: {what}"))));
                }
                return Ok(Some(rv));
            }
            "BOOKMARK" => {}
            "ERROR" => return Err(unstreamed(decode::status(&event.object).into_error(None))),
            other => crate::skips::warn_skipped!("{name}: ignoring a watch event of type {other:?}"),
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str) -> ApiError {
        ApiError::Status { code, reason: reason.into(), message: String::new(), retry_after: None }
    }

    #[test]
    fn a_watch_list_asks_for_the_whole_state_in_one_stream() {
        let selectors = "&labelSelector=%21service.kubernetes.io%2Fheadless";
        assert_eq!(
            query(&ListFrom::Cache, selectors),
            "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true\
             &labelSelector=%21service.kubernetes.io%2Fheadless",
            "the first state: the latest, consistently (no resourceVersion)"
        );
        assert_eq!(query(&ListFrom::Latest, ""), WATCH_LIST);
        assert_eq!(
            query(&ListFrom::At("1234".into()), ""),
            format!("{WATCH_LIST}&resourceVersion=1234"),
            "after a watch expired: not older than what was seen"
        );
    }

    #[test]
    fn refusals_list_instead_and_what_may_pass_asks_again() {
        for refused in [status(422, "Invalid"), status(400, "BadRequest"), status(403, "Forbidden"), status(500, "")] {
            assert!(matches!(unstreamed(refused.clone()), Unstreamed::Refused(_)), "{refused}");
        }
        assert!(matches!(unstreamed(ApiError::Decode("not an event".into())), Unstreamed::Refused(_)));
        for again in [
            status(429, "TooManyRequests"),
            status(410, "Expired"),
            status(0, "Gone"),
            status(504, "Timeout"),
            ApiError::Transport("connection refused".into()),
        ] {
            assert!(matches!(unstreamed(again.clone()), Unstreamed::Failed(_)), "{again}");
        }
    }
}
