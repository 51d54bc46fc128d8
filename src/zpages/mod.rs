//! The z-pages on the metrics address, as upstream's component-base serves them for
//! kube-proxy: `/configz` (the configuration as kube-proxy's internal type, JSON keyed by its
//! API group: `config::internal`), `/statusz` (start, uptime, versions, the other paths) and
//! `/flagz` (the command line), the last two plain text for people, or a
//! `config.k8s.io/v1beta1` object when asked for by name (`negotiate.rs`), and each served only
//! while its gate (ComponentStatusz, ComponentFlagz) is on, as upstream installs them. Answered
//! through `crate::serve`'s handler.

pub mod flagz;
pub mod negotiate;

use crate::http::{self, Reply, Request};
use crate::{debug, metrics, version};
use negotiate::Media;
use std::time::{Duration, SystemTime};

/// The key `/configz` files the configuration under, upstream's API group.
pub const CONFIGZ_KEY: &str = "kubeproxy.config.k8s.io";

/// The pages' paths.
pub const CONFIGZ_PATH: &str = "/configz";
/// See [`CONFIGZ_PATH`].
pub const STATUSZ_PATH: &str = "/statusz";
/// See [`CONFIGZ_PATH`].
pub const FLAGZ_PATH: &str = "/flagz";

/// The component the pages name.
pub const COMPONENT: &str = "kube-nftproxy";

/// The line under every plain-text z-page's title, upstream's words.
pub const WARNING: &str = "Warning: This endpoint is not meant to be machine parseable, has no formatting \
compatibility guarantees and is for debugging purposes only.";

/// The separators upstream picks from at random, so that nobody parses the text pages.
const DELIMITERS: [&str; 4] = [":", ": ", "=", " "];

/// What the pages show, fixed at the start.
pub struct ZPages {
    started: SystemTime,
    /// `/configz`'s body, made once.
    configz: String,
    flags: Vec<(String, String)>,
    /// The separator of `/flagz`, picked once as upstream's (its page is made once).
    flag_delim: &'static str,
    /// Whether `/statusz` is served (the ComponentStatusz gate).
    statusz_on: bool,
    /// Whether `/flagz` is served (the ComponentFlagz gate).
    flagz_on: bool,
}

impl ZPages {
    /// The pages of a proxy started at `started`, whose effective configuration is `config`
    /// (`None`: none to show, `{}` as upstream with nothing registered) and whose command
    /// line's flags are `flags` (see [`flagz::from_matches`]).
    pub fn new(started: SystemTime, config: Option<serde_json::Value>, mut flags: Vec<(String, String)>) -> ZPages {
        let configz = match config {
            Some(c) => serde_json::json!({ CONFIGZ_KEY: c }),
            None => serde_json::json!({}),
        };
        flags.sort();
        let flag_delim = DELIMITERS[fastrand::usize(..DELIMITERS.len())];
        ZPages { started, configz: configz.to_string(), flags, flag_delim, statusz_on: true, flagz_on: true }
    }

    /// These pages with `/statusz` and `/flagz` served only when `statusz` and `flagz` (the
    /// ComponentStatusz and ComponentFlagz gates) are on: off, they answer 404, as upstream
    /// does not install them.
    pub fn gated(self, statusz: bool, flagz: bool) -> ZPages {
        ZPages { statusz_on: statusz, flagz_on: flagz, ..self }
    }

    /// `/statusz` as of `now`.
    fn statusz(&self, media: Media, now: SystemTime) -> Reply {
        let up = now.duration_since(self.started).unwrap_or_default();
        let paths = paths(self.flagz_on);
        match media {
            Media::Json => {
                let doc = serde_json::json!({
                    "kind": "Statusz",
                    "apiVersion": format!("{}/{}", negotiate::GROUP, negotiate::VERSION),
                    "metadata": {"name": COMPONENT},
                    "startTime": humantime::format_rfc3339_seconds(self.started).to_string(),
                    "uptimeSeconds": up.as_secs(),
                    "goVersion": version::RUSTC,
                    "binaryVersion": version::VERSION,
                    "paths": paths,
                });
                Reply::new(200, http::JSON, doc.to_string())
            }
            Media::Text => {
                let d = DELIMITERS[fastrand::usize(..DELIMITERS.len())];
                // No emulation version: this proxy emulates no Kubernetes release's API, and
                // upstream leaves the line empty without one.
                let body = format!(
                    "\n{COMPONENT} statusz\n{WARNING}\n\nStarted{d} {}\nUp{d} {}\nGo version{d} {}\nBinary version{d} {}\n\nPaths{d} {}\n",
                    unix_date(self.started),
                    uptime(up),
                    escape(version::RUSTC),
                    escape(version::VERSION),
                    paths.join(" "),
                );
                Reply::new(200, http::TEXT, body)
            }
        }
    }

    fn flagz(&self, media: Media) -> Reply {
        match media {
            Media::Json => Reply::new(200, http::JSON, flagz::json(COMPONENT, &self.flags).to_string()),
            Media::Text => Reply::new(200, http::TEXT, flagz::text(COMPONENT, &self.flags, self.flag_delim)),
        }
    }

    /// The answer to `req`; `None` when its path is not one of these pages.
    pub fn answer(&self, req: &Request<'_>) -> Option<Reply> {
        let kind = match req.path {
            CONFIGZ_PATH => return Some(Reply::new(200, http::JSON, self.configz.clone())),
            STATUSZ_PATH if self.statusz_on => "Statusz",
            FLAGZ_PATH if self.flagz_on => "Flagz",
            _ => return None,
        };
        let Some(media) = negotiate::negotiate(req.accept, kind) else {
            return Some(Reply::new(406, http::TEXT, "not acceptable\n"));
        };
        Some(if kind == "Statusz" { self.statusz(media, SystemTime::now()) } else { self.flagz(media) })
    }
}

/// The first segment of every path the metrics address serves but `/statusz`, sorted, as
/// upstream lists its mux's paths (`/flagz` only when it is served).
fn paths(flagz: bool) -> Vec<String> {
    let mut all: Vec<String> = [CONFIGZ_PATH, debug::RULESET_PATH, debug::SERVICES_PATH]
        .into_iter()
        .chain(flagz.then_some(FLAGZ_PATH))
        .chain(metrics::PATHS.iter().copied())
        .filter_map(|p| p.split('/').nth(1).map(|first| format!("/{first}")))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// `h hr mm min ss sec`, as upstream.
fn uptime(up: Duration) -> String {
    let s = up.as_secs();
    format!("{} hr {:02} min {:02} sec", s / 3600, (s / 60) % 60, s % 60)
}

/// Go's `time.UnixDate` in UTC: `Thu Nov 26 17:41:18 UTC 2026`.
fn unix_date(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil(i64::try_from(days).unwrap_or(0));
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let weekday = WEEKDAYS[usize::try_from(days % 7).unwrap_or(0)];
    let month = MONTHS[usize::try_from(month - 1).unwrap_or(0)];
    let (h, m, s) = (rem / 3600, (rem / 60) % 60, rem % 60);
    format!("{weekday} {month} {day:>2} {h:02}:{m:02}:{s:02} UTC {year}")
}

/// Year, month (1–12) and day of `days` since 1970-01-01 (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Go's `html.EscapeString`, which upstream applies to each value of `/statusz`.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('\'', "&#39;").replace('"', "&#34;")
}

#[cfg(test)]
mod tests;
