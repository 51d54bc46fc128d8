//! One reflector thread per resource, as client-go's reflector does it: list (by WatchList,
//! `watchlist.rs`, or paged from the watch cache with `resourceVersion=0` where the server
//! refuses it or the gate is off), then watch from the list's resourceVersion with
//! bookmarks, resuming from the last resourceVersion seen whenever a watch ends. A 410 (too
//! old, or an expired `continue`) relists and replaces what this resource delivered, so
//! whatever was deleted meanwhile goes; like every other failure, after a backoff with
//! jitter, so a server refusing every watch is not listed in a loop. Objects go to
//! the [`Inbox`] one by one; a bad one is logged and skipped, keeping its last good state.

use super::client::{ApiError, Client};
use super::decode::{self, Decoded};
use super::list::ListFrom;
use super::retry::{Backoff, LogOnce};
use crate::config::{ApiSettings, ContentType};
use crate::inbox::Inbox;
use crate::metrics::Metrics;
use crate::model::{ObjectChange, ObjectKey, ObjectKind};
use crate::skips::warn_skipped;
use prometheus::IntCounterVec;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// What a reflector follows.
#[derive(Debug, Clone)]
pub struct Resource {
    /// The resource's plural, also its source name for the inbox (`services`, …).
    pub name: &'static str,
    /// The kind of its objects.
    pub kind: ObjectKind,
    /// The collection's path (`/api/v1/services`).
    pub path: &'static str,
    /// `labelSelector`, if any.
    pub label_selector: Option<String>,
    /// `fieldSelector`, if any.
    pub field_selector: Option<String>,
    /// Whether the field selector is only an optimisation, dropped when the server refuses
    /// it (servers before 1.31 have no field selectors on Service specs).
    pub field_selector_optional: bool,
    /// Whether the server may not have this resource at all (404 ends the reflector).
    pub optional: bool,
}

/// Timing and pace of list and watch requests.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Objects per list page (`limit`).
    pub page_size: usize,
    /// The shortest watch `timeoutSeconds`; each watch asks for a random one up to twice it.
    pub watch_timeout: Duration,
    /// Requests a second of the client-side rate limit (`--kube-api-qps`): 0 means client-go's
    /// default, a negative value no limit. Each list page and the Event take a token; watches
    /// do not.
    pub qps: f32,
    /// The rate limit's burst (`--kube-api-burst`); 0 means client-go's default.
    pub burst: u32,
    /// The encoding asked for (kube-proxy's `clientConnection.contentType`); answers are read
    /// in whichever encoding the server chose.
    pub content_type: ContentType,
    /// Whether each listing is first asked for as a watch streaming the state, client-go's
    /// WatchList (gate `WatchListClient`); a server that refuses it is listed instead.
    pub watch_list: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        // client-go's page size, watch timeouts (5 to 10 minutes) and WatchList (on since
        // 1.35); kube-proxy's rate limit and content type.
        Settings {
            page_size: 500,
            watch_timeout: Duration::from_secs(300),
            qps: super::ratelimit::DEFAULT_QPS,
            burst: super::ratelimit::DEFAULT_BURST,
            content_type: ContentType::default(),
            watch_list: true,
        }
    }
}

impl From<&ApiSettings> for Settings {
    /// The list and watch figures of the flags (see `ApiSettings` for why there are two types).
    fn from(api: &ApiSettings) -> Settings {
        Settings {
            page_size: api.page_size,
            watch_timeout: api.watch_timeout,
            qps: api.qps,
            burst: api.burst,
            content_type: api.content_type,
            watch_list: api.watch_list,
        }
    }
}

/// What every reflector of one API server shares.
pub struct Shared {
    /// The client.
    pub client: Client,
    /// List and watch timing.
    pub settings: Settings,
    /// This node's name.
    pub node_name: String,
    /// `--service-proxy-name`: only Services labelled with it are served.
    pub proxy_name: Option<String>,
    /// Where objects go.
    pub inbox: Arc<Inbox>,
    /// Set when the daemon stops.
    pub stop: Arc<AtomicBool>,
    /// Failures logged lately, across reflectors: a wrong CA is one line, not one per resource.
    quiet: Mutex<LogOnce>,
    /// Where watch restarts and relists are counted, once the metrics are up.
    metrics: OnceLock<Arc<Metrics>>,
}

impl Shared {
    /// What the reflectors of `client` for node `node_name` share; the client asks for the
    /// settings' content type, and its requests (theirs and the Event's) are paced by the rate
    /// limit of `settings`, a wait ending at `stop`.
    pub fn new(
        client: Client,
        settings: Settings,
        node_name: &str,
        inbox: Arc<Inbox>,
        stop: Arc<AtomicBool>,
    ) -> Shared {
        let node_name = node_name.to_string();
        let client =
            client.with_content_type(settings.content_type).limited(settings.qps, settings.burst, stop.clone());
        let (quiet, metrics) = (Mutex::default(), OnceLock::new());
        Shared { client, settings, node_name, proxy_name: None, inbox, stop, quiet, metrics }
    }

    /// The same, for the proxy named `proxy_name` (`--service-proxy-name`).
    pub fn with_proxy_name(self, proxy_name: Option<String>) -> Shared {
        Shared { proxy_name, ..self }
    }

    /// Counts watch restarts, relists and the client's requests in `metrics` from now on.
    pub fn set_metrics(&self, metrics: Arc<Metrics>) {
        self.client.set_metrics(metrics.clone());
        let _ = self.metrics.set(metrics);
    }
}

/// Lists and watches one resource, delivering its objects to the inbox.
pub struct Reflector {
    pub(super) shared: Arc<Shared>,
    pub(super) resource: Resource,
    /// Objects delivered and not deleted since (bad ones included: they keep their last
    /// good state), so a relist knows what went away.
    pub(super) known: HashSet<ObjectKey>,
    /// The resourceVersion to watch from; empty until the first list.
    pub(super) rv: String,
    pub(super) listed: bool,
    /// Whether a watch was opened before (the next is a restart).
    pub(super) watched: bool,
    /// Whether the server refused a WatchList before (the next refusal is not news).
    pub(super) watch_list_refused: bool,
    backoff: Backoff,
    /// The last sign of life of this resource's feed (a page listed, a watch opened, a line
    /// read): when the feed is lost, changes may be waiting unseen since then.
    pub(super) alive: SystemTime,
}

/// What to do after a step.
pub(super) enum Next {
    /// Open a watch from the last resourceVersion.
    Watch,
    /// List again.
    Relist,
    /// Follow this stream (a WatchList's, past its initial events) as the watch.
    Follow(Box<super::watch::Stream>),
}

/// What to do after a failure.
pub(super) enum Recovery {
    /// List again now (the server says what the reflector has is too old).
    Relist,
    /// List again now with changed parameters.
    Retry,
    /// The server does not have this resource; stop following it.
    Absent,
    /// Wait this long, then go on.
    Wait(Duration),
}

impl Reflector {
    /// A reflector of `resource`.
    pub fn new(shared: Arc<Shared>, resource: Resource) -> Reflector {
        Reflector {
            shared,
            resource,
            known: HashSet::new(),
            rv: String::new(),
            listed: false,
            watched: false,
            watch_list_refused: false,
            backoff: Backoff::default(),
            alive: SystemTime::now(),
        }
    }

    /// Starts the reflector on a thread named after its resource.
    pub fn spawn(self) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name(format!("watch-{}", self.resource.name)).spawn(move || self.run())
    }

    /// Lists, then watches, until the stop flag is set or the server lacks an optional resource.
    pub fn run(mut self) {
        let mut next = Next::Relist;
        let mut from = ListFrom::Cache;
        while !self.stopped() {
            let step = std::mem::replace(&mut next, Next::Watch);
            let failed_list = matches!(step, Next::Relist);
            let result = match step {
                Next::Relist => self.relist(&from),
                Next::Watch => self.watch(None),
                Next::Follow(stream) => self.watch(Some(*stream)),
            };
            let e = match result {
                Ok(n) => {
                    next = n;
                    continue;
                }
                // Stopping while waiting for a token is no failure to report.
                Err(ApiError::Stopped) => return,
                Err(e) => e,
            };
            // After a wait, the step that failed is taken again.
            next = if failed_list { Next::Relist } else { Next::Watch };
            match self.recover(&e) {
                Recovery::Relist => {
                    // As client-go's: a watch that expired lists at the last resourceVersion
                    // (what it has is not lost); a list refused as too old or too new lists
                    // the latest state.
                    from = match (failed_list, self.rv.is_empty()) {
                        (false, false) => ListFrom::At(self.rv.clone()),
                        _ => ListFrom::Latest,
                    };
                    next = Next::Relist;
                    // As client-go's reflector runs each list-and-watch round under its backoff
                    // manager: the list a 410 calls for comes after a wait, so a server
                    // answering 410 (or 504) to every watch or list is not asked in a loop.
                    let wait = self.backoff.failed(&e);
                    if failed_list {
                        self.wait_after(&e, wait);
                    } else {
                        log::debug!("{}: listing again in {wait:.1?}", self.resource.name);
                        self.sleep(wait);
                    }
                }
                Recovery::Retry => next = Next::Relist,
                Recovery::Absent => return,
                Recovery::Wait(wait) => self.wait_after(&e, wait),
            }
        }
    }

    /// Lists once (for a dry run): `Ok` when listed or when the server lacks an optional
    /// resource, the error when the server refuses.
    pub fn list_once(&mut self) -> Result<(), ApiError> {
        let mut from = ListFrom::Cache;
        for _ in 0..3 {
            let Err(e) = self.list(from.clone()) else { return Ok(()) };
            match self.recover(&e) {
                Recovery::Relist => from = ListFrom::Latest,
                Recovery::Retry => {}
                Recovery::Absent => return Ok(()),
                Recovery::Wait(_) => return Err(e),
            }
        }
        Err(ApiError::Transport(format!("listing {}: the server keeps asking for a new list", self.resource.name)))
    }

    /// The round recovered (listed, and its watch stayed open a while): the next failure
    /// waits from the start again, as a new one.
    pub(super) fn recovered(&mut self) {
        self.backoff.reset();
    }

    /// Decides what follows failure `e` (logging all but the failures to wait after).
    fn recover(&mut self, e: &ApiError) -> Recovery {
        let name = self.resource.name;
        if e.is_gone() || e.code() == Some(504) {
            log::info!("{name}: {e}; listing again");
            return Recovery::Relist;
        }
        if self.resource.optional && e.code() == Some(404) {
            log::info!("the API server has no {name}; not following them");
            self.shared.inbox.fresh(name);
            self.mark_listed();
            return Recovery::Absent;
        }
        if e.code() == Some(400) && self.resource.field_selector_optional && self.resource.field_selector.is_some() {
            log::info!("{name}: the server refuses the field selector ({e}); filtering here instead");
            self.resource.field_selector = None;
            return Recovery::Retry;
        }
        Recovery::Wait(self.backoff.failed(e))
    }

    pub(super) fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    /// Logs failure `e` (quietly when it repeats) and waits `wait` before the next request.
    fn wait_after(&self, e: &ApiError, wait: Duration) {
        self.shared.quiet.lock().unwrap_or_else(|p| p.into_inner()).report(self.resource.name, e, wait);
        self.sleep(wait);
    }

    /// Sleeps up to `d`, waking early on stop.
    fn sleep(&self, d: Duration) {
        let now = Instant::now();
        let until = now.checked_add(d).unwrap_or(now + super::retry::MAX_RETRY_AFTER);
        while !self.stopped() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }

    /// The selectors as query parameters.
    pub(super) fn selectors(&self) -> String {
        let mut q = String::new();
        if let Some(s) = &self.resource.label_selector {
            q.push_str(&format!("&labelSelector={}", escape(s)));
        }
        if let Some(s) = &self.resource.field_selector {
            q.push_str(&format!("&fieldSelector={}", escape(s)));
        }
        q
    }

    /// The feed just showed a sign of life: it is not stale.
    pub(super) fn lived(&mut self) {
        self.alive = SystemTime::now();
        self.shared.inbox.fresh(self.resource.name);
    }

    /// Adds one to this resource's series of a counter, if metrics are kept.
    pub(super) fn count(&self, which: fn(&Metrics) -> &IntCounterVec) {
        if let Some(m) = self.shared.metrics.get() {
            which(m).with_label_values(&[self.resource.name]).inc();
        }
    }

    pub(super) fn mark_listed(&mut self) {
        if !self.listed {
            self.listed = true;
            self.shared.inbox.listed(self.resource.name);
        }
    }

    /// Decodes one object: its key (`None` when it has no usable name) and its change, if it
    /// is one to deliver. A bad object is logged and keeps its key, so its last good state stays.
    pub(super) fn decode(&self, item: &decode::Item) -> (Option<ObjectKey>, Option<ObjectChange>) {
        let kind = self.resource.kind.as_str();
        match decode::object(self.resource.kind, item, &self.shared.node_name, self.shared.proxy_name.as_deref()) {
            Decoded::Good(key, change) => (Some(key), change),
            Decoded::Bad(key, why) => {
                warn_skipped!("skipping {kind} {}: {why} (it keeps its last good state)", decode::describe(&key));
                (Some(key), None)
            }
            Decoded::Nameless(why) => {
                warn_skipped!("skipping a {kind} without a usable name: {why}");
                (None, None)
            }
        }
    }
}

/// Percent-encodes a query value.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
