//! The log, on stderr, one line a message: as text (env_logger's layout, control characters
//! escaped) or, with `--logging-format=json`, as klog's JSON format: an object a line with
//! `ts` (milliseconds since the epoch, a float, as component-base's encoder writes it),
//! `caller` (`dir/file.rs:line`), `msg`, and `v` (the `-v` level that shows the message; an
//! error has none, as klog's). A panic is one such line too, from the hook set here.

use std::fmt::Write as _;
use std::io::Write;
use std::time::SystemTime;

/// The `-v` level from which debug messages are shown (`-v=3` and `-v=4`).
pub const DEBUG_V: u32 = 3;

/// The `-v` level from which everything is shown.
pub const TRACE_V: u32 = 5;

/// A bad `--logging-format` / `logging.format`.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// Neither `text` nor `json`.
    #[error("logging format {0:?} is not one of text, json")]
    Format(String),
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// `[time LEVEL target] message`, as env_logger writes it.
    #[default]
    Text,
    /// klog's JSON, an object a line.
    Json,
}

impl std::str::FromStr for Format {
    type Err = LoggingError;
    fn from_str(s: &str) -> Result<Format, LoggingError> {
        match s {
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            other => Err(LoggingError::Format(other.to_string())),
        }
    }
}

/// The log level `-v N` asks for: info up to 2, debug from [`DEBUG_V`], trace from [`TRACE_V`].
pub fn level_for(v: u32) -> log::LevelFilter {
    match v {
        v if v >= TRACE_V => log::LevelFilter::Trace,
        v if v >= DEBUG_V => log::LevelFilter::Debug,
        _ => log::LevelFilter::Info,
    }
}

/// The `v` of a message at `level` (the least `-v` that shows it); `None` for an error,
/// which klog writes without one. A warning is 0, as klog's `Warning` logs at `V(0)`.
pub fn verbosity(level: log::Level) -> Option<u32> {
    match level {
        log::Level::Error => None,
        log::Level::Warn | log::Level::Info => Some(0),
        log::Level::Debug => Some(DEBUG_V),
        log::Level::Trace => Some(TRACE_V),
    }
}

/// Logs in `format` at `level` (from `-v`) for this crate, else as RUST_LOG says, else at
/// info. A message may carry names read from the kernel or the API server, and logs reach
/// terminals and aggregators that split on line breaks: the text escapes control characters,
/// JSON escapes them as JSON does. In JSON, a panic is logged as a line too.
pub fn init(format: Format, level: Option<log::LevelFilter>) {
    let mut builder = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if let Some(level) = level {
        builder.filter_module("kube_nftproxy", level);
    }
    // ureq_proto logs only below info, and its trace dumps every byte a request sends, the
    // Authorization header too: never at all, whatever RUST_LOG asks.
    builder.filter_module("ureq_proto", log::LevelFilter::Info);
    match format {
        Format::Text => builder.format(|buf, record| {
            if dropped(record) {
                return Ok(());
            }
            let style = buf.default_level_style(record.level());
            let message = record.args().to_string();
            let message = crate::text::printable(&message);
            writeln!(buf, "[{} {style}{:<5}{style:#} {}] {message}", buf.timestamp(), record.level(), record.target())
        }),
        Format::Json => {
            std::panic::set_hook(Box::new(panic_hook));
            builder.format(|buf, record| {
                if dropped(record) {
                    return Ok(());
                }
                writeln!(buf, "{}", json_line(record, SystemTime::now()))
            })
        }
    };
    builder.init();
}

/// Whether `record` is dropped whatever let it through: a more specific RUST_LOG directive
/// (`ureq_proto::util=trace`) wins over the filter `init` sets.
fn dropped(record: &log::Record) -> bool {
    record.target().starts_with("ureq_proto") && record.level() > log::Level::Info
}

/// `ts` as component-base writes it: milliseconds since the epoch, with a fraction.
fn millis(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64() * 1000.0).unwrap_or_default()
}

/// `dir/file.rs:line`, zap's short caller, from a source path.
fn caller(file: Option<&str>, line: Option<u32>) -> Option<String> {
    let file = file?;
    let short = match file.rmatch_indices('/').nth(1) {
        Some((at, _)) => &file[at + 1..],
        None => file,
    };
    Some(format!("{short}:{}", line.unwrap_or(0)))
}

/// One JSON line (without its line break) for `record` logged at `now`.
pub fn json_line(record: &log::Record, now: SystemTime) -> String {
    let mut line = serde_json::Map::new();
    line.insert("ts".into(), serde_json::json!(millis(now)));
    if let Some(at) = caller(record.file(), record.line()) {
        line.insert("caller".into(), at.into());
    }
    line.insert("msg".into(), record.args().to_string().into());
    if let Some(v) = verbosity(record.level()) {
        line.insert("v".into(), v.into());
    }
    escaped(serde_json::Value::Object(line).to_string())
}

/// `line`, serialized JSON, with each character [`crate::text::unprintable`] still raw (serde
/// escapes only C0, `"` and `\`) written as a `\uXXXX` escape: a reader decodes the same
/// strings, but no terminal or aggregator sees a C1 control, a line separator or a bidi
/// control. Sound on the serialized text because outside strings JSON is ASCII punctuation,
/// digits and words, so each such character is inside a string; each is in the BMP, one
/// escape apiece.
fn escaped(line: String) -> String {
    if !line.chars().any(crate::text::unprintable) {
        return line;
    }
    let mut out = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        if crate::text::unprintable(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// The JSON line for a panic in thread `thread` at `location` with `payload`, as upstream's
/// crash handler logs one ("Observed a panic"), with the backtrace if one was taken.
pub fn panic_line(
    payload: &str,
    location: Option<String>,
    thread: &str,
    trace: Option<String>,
    now: SystemTime,
) -> String {
    let mut line = serde_json::Map::new();
    line.insert("ts".into(), serde_json::json!(millis(now)));
    if let Some(at) = location {
        line.insert("caller".into(), at.into());
    }
    line.insert("msg".into(), "Observed a panic".into());
    line.insert("panic".into(), payload.into());
    line.insert("thread".into(), thread.into());
    if let Some(trace) = trace {
        line.insert("stacktrace".into(), trace.into());
    }
    escaped(serde_json::Value::Object(line).to_string())
}

/// Writes a panic as one JSON line on stderr, in place of the default hook's lines.
fn panic_hook(info: &std::panic::PanicHookInfo) {
    let payload = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "Box<dyn Any>".into());
    let location = info.location().and_then(|l| caller(Some(l.file()), Some(l.line())));
    let thread = std::thread::current().name().unwrap_or("<unnamed>").to_string();
    // RUST_BACKTRACE says whether to take one, as for the default hook.
    let trace = std::backtrace::Backtrace::capture();
    let trace = (trace.status() == std::backtrace::BacktraceStatus::Captured).then(|| trace.to_string());
    let line = panic_line(&payload, location, &thread, trace, SystemTime::now());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn line(level: log::Level, file: &str, message: std::fmt::Arguments) -> serde_json::Value {
        let record = log::Record::builder().level(level).file(Some(file)).line(Some(42)).args(message).build();
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_732_634_478_123);
        let text = json_line(&record, now);
        assert!(!text.contains('\n'), "one line: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    #[test]
    fn klogs_keys_one_object_a_line() {
        let l = line(log::Level::Info, "src/sync/mod.rs", format_args!("synced {} rules\nin \x1b[31m red", 3));
        let ts = l["ts"].as_f64().expect("ts a number");
        assert!((ts - 1_732_634_478_123.0).abs() < 1.0, "milliseconds: {ts}");
        assert_eq!(l["caller"], "sync/mod.rs:42");
        assert_eq!(l["msg"], "synced 3 rules\nin \x1b[31m red", "the message whole, escaped as JSON escapes it");
        assert_eq!(l["v"], 0);
        let keys: Vec<&String> = l.as_object().expect("an object").keys().collect();
        assert_eq!(keys.len(), 4, "{l}");
        assert_eq!(line(log::Level::Warn, "main.rs", format_args!("w"))["v"], 0);
        assert_eq!(line(log::Level::Debug, "/x/y/src/lib.rs", format_args!("d"))["v"], 3);
        assert_eq!(line(log::Level::Debug, "/x/y/src/lib.rs", format_args!("d"))["caller"], "src/lib.rs:42");
        assert_eq!(line(log::Level::Trace, "a.rs", format_args!("t"))["v"], 5);
        let error = line(log::Level::Error, "main.rs", format_args!("cannot serve: in use"));
        assert!(error.get("v").is_none(), "an error has no v, as klog's: {error}");
        assert_eq!(error["msg"], "cannot serve: in use");
    }

    #[test]
    fn a_panic_is_one_line_too() {
        let text = panic_line("boom\nagain", Some("sync/mod.rs:7".into()), "sync", None, SystemTime::now());
        assert!(!text.contains('\n'));
        let l: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!((l["msg"].as_str(), l["panic"].as_str()), (Some("Observed a panic"), Some("boom\nagain")));
        assert_eq!((l["caller"].as_str(), l["thread"].as_str()), (Some("sync/mod.rs:7"), Some("sync")));
        assert!(l.get("v").is_none() && l.get("stacktrace").is_none(), "{l}");
    }

    /// Issue 34: what the text format escapes, JSON escapes too, as `\uXXXX`: the decoded
    /// strings are whole, and the line holds none of those characters raw.
    #[test]
    fn separators_c1_and_bidi_controls_are_escaped_in_json() {
        let raw = "ns\u{2028}web/x\u{2029}\u{202e}gro\u{9b}31m\u{61c}\u{200f}\u{2066}\u{7f}";
        let text = json_line(&log::Record::builder().args(format_args!("skipping {raw}")).build(), SystemTime::now());
        assert!(!text.chars().any(crate::text::unprintable), "{text:?}");
        assert!(text.contains(r"ns\u2028web/x\u2029\u202egro\u009b31m\u061c\u200f\u2066\u007f"), "{text}");
        let l: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(l["msg"].as_str(), Some(format!("skipping {raw}").as_str()));
        let text = panic_line(raw, None, raw, Some(raw.into()), SystemTime::now());
        assert!(!text.chars().any(crate::text::unprintable), "{text:?}");
        let l: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!([&l["panic"], &l["thread"], &l["stacktrace"]].map(|v| v.as_str()), [Some(raw); 3]);
        assert_eq!(escaped("{\"msg\":\"ü → ok\"}".into()), "{\"msg\":\"ü → ok\"}", "the rest kept");
    }

    /// Set in the copy of this test binary that [`every_line_on_stderr_is_json_panics_too`]
    /// runs, which logs and panics there.
    const CHILD: &str = "KUBE_NFTPROXY_LOGGING_CHILD";

    #[test]
    fn every_line_on_stderr_is_json_panics_too() {
        if std::env::var_os(CHILD).is_some() {
            init(Format::Json, Some(log::LevelFilter::Debug));
            log::info!("synced\nin one line");
            log::debug!("a detail");
            log::error!("a failure");
            panic!("boom\nagain");
        }
        let me = std::env::current_exe().expect("this test binary");
        let out = std::process::Command::new(me)
            .args(["--exact", "logging::tests::every_line_on_stderr_is_json_panics_too", "--nocapture"])
            .env(CHILD, "1")
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LOG")
            .output()
            .expect("the child runs");
        assert!(!out.status.success(), "the child panics");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<serde_json::Value> = stderr
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l:?} in\n{stderr}")))
            .collect();
        let msgs: Vec<&str> = lines.iter().filter_map(|l| l["msg"].as_str()).collect();
        assert_eq!(msgs, ["synced\nin one line", "a detail", "a failure", "Observed a panic"], "{stderr}");
        let panic = &lines[3];
        assert_eq!(panic["panic"], "boom\nagain");
        assert!(panic["caller"].as_str().is_some_and(|c| c.starts_with("src/logging.rs:")), "{panic}");
        assert!(panic["thread"].as_str().is_some_and(|t| t.contains("every_line_on_stderr")), "{panic}");
        assert_eq!((lines[1]["v"].as_u64(), lines[0]["v"].as_u64()), (Some(u64::from(DEBUG_V)), Some(0)));
    }

    #[test]
    fn formats_and_levels() {
        assert_eq!("json".parse::<Format>().ok(), Some(Format::Json));
        assert_eq!("text".parse::<Format>().ok(), Some(Format::Text));
        assert!("JSON".parse::<Format>().is_err(), "klog's names are lower case");
        for (v, want) in [(0, log::LevelFilter::Info), (2, log::LevelFilter::Info), (3, log::LevelFilter::Debug)] {
            assert_eq!(level_for(v), want);
        }
        assert_eq!(level_for(4), log::LevelFilter::Debug);
        assert_eq!(level_for(9), log::LevelFilter::Trace);
        // What a level's lines say of v is what shows them.
        for level in [log::Level::Info, log::Level::Debug, log::Level::Trace] {
            let v = verbosity(level).expect("a v");
            assert!(level_for(v) >= level && (v == 0 || level_for(v - 1) < level), "{level}");
        }
    }
}
