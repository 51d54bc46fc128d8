//! Fault injection: the `/emulator/faults` switches (WatchList served or refused among them),
//! and the armed "fail the next N requests" rules (an error status, a redirect, a watch that
//! opens with a 410 ERROR event, a Status answered with 200, or a list written slowly), and
//! the next WatchLists cut before their bookmark.

use crate::http::{Response, reason_for, status_body};
use crate::store::Store;
use crate::watchers::{DropMode, WatchMsg};
use serde_json::Value;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// A fault request the emulator does not understand.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// A key or value that is not a known fault.
    #[error("unknown fault {0}")]
    Unknown(String),
}

/// Answer the next `count` matching requests with `status`.
#[derive(Debug, Clone)]
struct FailRule {
    status: u16,
    count: u64,
    retry_after: Option<u64>,
    resource: Option<String>,
    verb: Option<String>,
    /// For a 3xx: where to redirect (the request's path and query are appended).
    location: Option<String>,
    /// Answer 200 with a watch stream whose only event is an ERROR carrying `status`.
    as_event: bool,
    /// Answer 200 with a Status body carrying `status` (for a list: not the list asked for).
    in_200: bool,
    /// Send the real answer (a list, or a watch stream), one byte per this many milliseconds
    /// (`status` 200).
    byte_every_ms: Option<u64>,
}

/// What an armed rule does to a request.
pub enum Failure {
    /// Answer this instead.
    Answer(Response),
    /// Answer as usual (a watch stream too), one byte at a time with this pause.
    Slow(std::time::Duration),
}

/// Cut the next `count` WatchLists (of `resource`, or any) after `after` initial objects.
#[derive(Debug, Clone)]
struct CutRule {
    resource: Option<String>,
    after: usize,
    count: u64,
}

/// The armed request failures, and the switches requests read.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<FailRule>>,
    cuts: Mutex<Vec<CutRule>>,
    /// WatchList refused (the `WatchList` gate off).
    no_watch_list: AtomicBool,
}

impl Faults {
    /// Serves WatchList (`true`) or refuses it as a server with the gate off.
    pub fn serve_watch_list(&self, on: bool) {
        self.no_watch_list.store(!on, Ordering::SeqCst);
    }

    /// Whether WatchList is served.
    pub fn serves_watch_list(&self) -> bool {
        !self.no_watch_list.load(Ordering::SeqCst)
    }

    /// If a cut is armed for WatchLists of `plural`, uses one of its count: after how many
    /// initial objects to cut.
    pub fn take_cut(&self, plural: &str) -> Option<usize> {
        let mut cuts = self.cuts.lock().unwrap_or_else(|e| e.into_inner());
        let i = cuts.iter().position(|c| c.count > 0 && c.resource.as_deref().is_none_or(|p| p == plural))?;
        cuts[i].count -= 1;
        let after = cuts[i].after;
        cuts.retain(|c| c.count > 0);
        log::info!("fault: cutting a WatchList of {plural} after {after} objects");
        Some(after)
    }

    /// If a rule matches this request (`target`: its path and query as sent; a rule for verb
    /// `watchlist` matches only the watches that are WatchLists, one for `watch` every watch),
    /// uses one of its count and returns what to do instead of answering as usual.
    pub fn take(&self, plural: &str, verb: &str, watch_list: bool, target: &str) -> Option<Failure> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let i = rules.iter().position(|r| {
            r.count > 0
                && r.resource.as_deref().is_none_or(|p| p == plural)
                && r.verb.as_deref().is_none_or(|v| v == verb || (v == "watchlist" && watch_list))
        })?;
        let rule = &mut rules[i];
        rule.count -= 1;
        let rule = rule.clone();
        rules.retain(|r| r.count > 0);
        drop(rules);
        log::info!("fault: answered {verb} {plural} with {}", rule.status);
        if let Some(ms) = rule.byte_every_ms {
            return Some(Failure::Slow(std::time::Duration::from_millis(ms)));
        }
        let message = format!("injected failure {} for {verb} {plural}", rule.status);
        let status = status_body(rule.status, reason_for(rule.status), &message);
        let mut resp = if rule.as_event {
            Response::json(200, format!("{{\"type\":\"ERROR\",\"object\":{status}}}\n").into_bytes())
        } else if rule.in_200 {
            Response::json(200, status.into_bytes())
        } else {
            Response::json(rule.status, status.into_bytes())
        };
        if let Some(s) = rule.retry_after {
            resp.headers.push(("Retry-After".into(), s.to_string()));
        }
        if let Some(base) = &rule.location {
            resp.headers.push(("Location".into(), format!("{base}{target}")));
        }
        Some(Failure::Answer(resp))
    }

    /// Applies every switch in a `/emulator/faults` body.
    pub fn apply(&self, body: &Value, store: &Store) -> Result<(), FaultError> {
        let fields = body.as_object().ok_or_else(|| FaultError::Unknown(body.to_string()))?;
        let resource = body["resource"].as_str();
        for (key, value) in fields {
            match key.as_str() {
                "resource" => {}
                "drop" => store.signal(resource, &WatchMsg::Drop(drop_mode(value)?)),
                "stall" => store.signal(resource, &WatchMsg::Stall(value.as_bool().unwrap_or(true))),
                "expire" if value.as_bool() == Some(true) => store.signal(resource, &WatchMsg::Expire),
                "compact" if value.as_bool() == Some(true) => store.compact(),
                "malformed" => store.signal(Some(plural(value)?), &WatchMsg::Malformed),
                "garbage" => store.signal(Some(plural(value)?), &WatchMsg::Garbage),
                "foreign" => {
                    let named = |k: &str| value[k].as_str().unwrap_or_default().to_string();
                    store.signal(
                        Some(plural(&value["resource"])?),
                        &WatchMsg::Foreign(named("namespace"), named("name")),
                    )
                }
                "endless" => store.signal(Some(plural(value)?), &WatchMsg::Endless),
                "fail" => self.arm(value)?,
                "watch_list" => self.serve_watch_list(value.as_bool().unwrap_or(true)),
                "cut_watch_list" => {
                    let after = value["after"].as_u64().ok_or_else(|| FaultError::Unknown(value.to_string()))?;
                    let cut = CutRule {
                        resource: value["resource"].as_str().map(str::to_string),
                        after: usize::try_from(after).unwrap_or(usize::MAX),
                        count: value["count"].as_u64().unwrap_or(1),
                    };
                    self.cuts.lock().unwrap_or_else(|e| e.into_inner()).push(cut);
                }
                "clear" if value.as_bool() == Some(true) => {
                    self.rules.lock().unwrap_or_else(|e| e.into_inner()).clear();
                    self.cuts.lock().unwrap_or_else(|e| e.into_inner()).clear();
                }
                _ => return Err(FaultError::Unknown(format!("{key}: {value}"))),
            }
        }
        log::info!("fault applied: {body}");
        Ok(())
    }

    fn arm(&self, v: &Value) -> Result<(), FaultError> {
        let status = v["status"].as_u64().and_then(|s| u16::try_from(s).ok());
        let byte_every_ms = v["byte_every_ms"].as_u64();
        let location = v["location"].as_str().map(str::to_string);
        let usable = |s: &u16| {
            (400..600).contains(s)
                || (*s == 200 && byte_every_ms.is_some())
                || ((300..400).contains(s) && location.is_some())
        };
        let status = status.filter(usable).ok_or_else(|| FaultError::Unknown(v.to_string()))?;
        let rule = FailRule {
            status,
            count: v["count"].as_u64().unwrap_or(1),
            retry_after: v["retry_after"].as_u64(),
            resource: v["resource"].as_str().map(str::to_string),
            verb: v["verb"].as_str().map(str::to_string),
            location,
            as_event: v["as_event"].as_bool() == Some(true),
            in_200: v["in_200"].as_bool() == Some(true),
            byte_every_ms,
        };
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).push(rule);
        Ok(())
    }
}

fn drop_mode(v: &Value) -> Result<DropMode, FaultError> {
    match v.as_str() {
        Some("clean") => Ok(DropMode::Clean),
        Some("abrupt") => Ok(DropMode::Abrupt),
        Some("reset") => Ok(DropMode::Reset),
        _ => Err(FaultError::Unknown(format!("drop: {v}"))),
    }
}

fn plural(v: &Value) -> Result<&str, FaultError> {
    v.as_str().ok_or_else(|| FaultError::Unknown(v.to_string()))
}
