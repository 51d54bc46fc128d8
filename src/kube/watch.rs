//! One watch of a reflector: the stream read line by line, each event delivered as it
//! arrives; how the stream ended decides whether the reflector watches again or relists.

use super::client::{ApiError, Status};
use super::decode::{Event, Meta};
use super::reflector::{Next, Reflector, escape};
use crate::model::ObjectChange;
use std::io::BufRead;
use std::time::{Duration, Instant};

/// How much longer than its `timeoutSeconds` a watch may stay silent before it is taken as
/// stalled (the server closes it at the timeout, so silence past that means a dead stream).
const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(5);

/// A watch that ends this soon without an event counts as a failure, so a server that
/// closes every watch at once is not asked again in a loop.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

impl Reflector {
    /// Watches from the last resourceVersion until the stream ends; what ends it decides
    /// whether the next step watches again or relists.
    pub(super) fn watch(&mut self) -> Result<Next, ApiError> {
        if std::mem::replace(&mut self.watched, true) {
            self.count(|m| &m.watch_restarts);
        }
        let base = self.shared.settings.watch_timeout.as_secs().max(1);
        let timeout = base + fastrand::u64(0..base);
        let query = format!(
            "?watch=true&allowWatchBookmarks=true&timeoutSeconds={timeout}&resourceVersion={}{}",
            escape(&self.rv),
            self.selectors()
        );
        let idle = Duration::from_secs(timeout) + WATCH_IDLE_MARGIN;
        let started = Instant::now();
        let body = self.shared.client.get(&format!("{}{query}", self.resource.path), idle)?;
        let mut reader = std::io::BufReader::new(body.into_reader());
        let mut line = Vec::new();
        let mut events = 0usize;
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    let e = ureq::Error::from(e);
                    if matches!(e, ureq::Error::Timeout(_)) {
                        log::warn!("{}: the watch stayed silent for {idle:?}; reopening it", self.resource.name);
                        return Ok(Next::Watch);
                    }
                    // A stream that served a while and then broke (reset, cut) is a watch that
                    // ended, as client-go takes it: watch again at once. One that breaks at
                    // once is a failure, so a server that always does it is not asked in a loop.
                    if events > 0 || started.elapsed() >= VERY_SHORT_WATCH {
                        log::info!("{}: the watch broke ({e}); watching again", self.resource.name);
                        return Ok(Next::Watch);
                    }
                    return Err(ApiError::Transport(format!("watching {}: {e}", self.resource.name)));
                }
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let event: Event = serde_json::from_slice(&line).map_err(|e| {
                ApiError::Decode(format!(
                    "watching {}: a line that is not an event ({e}); watching again",
                    self.resource.name
                ))
            })?;
            self.event(event)?;
            events += 1;
            if self.stopped() {
                break;
            }
        }
        if events == 0 && started.elapsed() < VERY_SHORT_WATCH && !self.stopped() {
            return Err(ApiError::Transport(format!(
                "watching {}: the server ended the watch at once",
                self.resource.name
            )));
        }
        Ok(Next::Watch)
    }

    /// Handles one watch event.
    fn event(&mut self, event: Event) -> Result<(), ApiError> {
        let rv = || serde_json::from_str::<Meta>(event.object.get()).map(|m| m.metadata).unwrap_or_default();
        match event.kind.as_str() {
            "ADDED" | "MODIFIED" => {
                let (key, change) = self.decode(&event.object);
                self.known.extend(key);
                if let Some(change) = change {
                    self.shared.inbox.send(change);
                }
                self.advance(rv().resource_version);
            }
            "DELETED" => {
                let meta = rv();
                let key = (meta.namespace, meta.name);
                if self.known.remove(&key) {
                    self.shared.inbox.send(ObjectChange::deleted(&(self.resource.kind, key)));
                }
                self.advance(meta.resource_version);
            }
            "BOOKMARK" => self.advance(rv().resource_version),
            "ERROR" => {
                let status: Status = serde_json::from_str(event.object.get()).unwrap_or_default();
                return Err(status.into_error(None));
            }
            other => log::warn!("{}: ignoring a watch event of type {other:?}", self.resource.name),
        }
        Ok(())
    }

    fn advance(&mut self, rv: String) {
        if !rv.is_empty() {
            self.rv = rv;
        }
    }
}
