//! One watch of a reflector: the stream read line by line (JSON) or frame by frame
//! (protobuf), each event delivered as it arrives; how the stream ended decides whether the
//! reflector watches again or relists.

use super::client::ApiError;
use super::decode::{self, Event, JsonEvent};
use super::protobuf::{self, Frame};
use super::reflector::{Next, Reflector, escape};
use crate::model::ObjectChange;
use std::io::BufRead;
use std::time::{Duration, Instant, SystemTime};

/// How much longer than its `timeoutSeconds` a watch may stay silent before it is taken as
/// stalled (the server closes it at the timeout, so silence past that means a dead stream).
const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(5);

/// How long a watch that asked for bookmarks may stay silent: the API server sends one about
/// every minute, so a stream silent for longer is dead even when its connection is not (a
/// proxy in between still answering keepalive). Reopening it costs a watch, not a list.
const BOOKMARK_SILENCE: Duration = Duration::from_secs(75);

/// A watch that ends this soon without an event counts as a failure, so a server that
/// closes every watch at once is not asked again in a loop.
pub(super) const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// The longest watch line or frame (one event) read. etcd stores objects of at most about
/// 1.5 MiB (its default request limit), and an event is one object plus a few dozen bytes, so ten
/// times that is room for any real event; a longer line is a broken or hostile stream, and
/// reading it on would grow the daemon without bound.
pub(super) const MAX_LINE: usize = 16 << 20;

/// A watch open this long (or, if shorter, for its whole `timeoutSeconds`) means its
/// list-and-watch round recovered: the backoff starts over. client-go keeps growing it for two
/// minutes after any failure, so a node that met a few recovered faults in a row (an API
/// server's rolling restart) waited up to a minute before its next list; a server failing
/// every watch at once never keeps one open this long.
const RECOVERED_AFTER: Duration = Duration::from_secs(3);

/// How often a watch delivering many bad objects logs how many it skipped.
const SKIPS_WINDOW: Duration = Duration::from_secs(60);

/// A line buffer grown past this by a large event is shrunk back once the event is handled.
const KEEP_CAPACITY: usize = 1 << 20;

/// What reading a line found.
enum Line {
    /// A line (the last one may lack its newline).
    Read,
    /// The end of the stream.
    End,
    /// A line longer than [`MAX_LINE`].
    TooLong,
}

/// Reads the next line into `line` (cleared first), holding at most [`MAX_LINE`] bytes.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Line> {
    line.clear();
    line.shrink_to(KEEP_CAPACITY);
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(if line.is_empty() { Line::End } else { Line::Read });
        }
        let (take, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > MAX_LINE {
            return Ok(Line::TooLong);
        }
        // Grown by doubling, but never past the bound.
        if line.capacity() < line.len() + take {
            let want = (line.capacity() * 2).clamp(line.len() + take, MAX_LINE);
            line.reserve_exact(want - line.len());
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if done {
            return Ok(Line::Read);
        }
    }
}

/// Whether a JSON line that is no event is one the stream ended inside of: no newline, and
/// JSON that breaks off (a whole object that is no event, a Status, is not cut short).
fn cut_short(line: &[u8]) -> bool {
    line.last() != Some(&b'\n') && serde_json::from_slice::<serde::de::IgnoredAny>(line).is_err_and(|e| e.is_eof())
}

/// Reads the next protobuf frame into `frame`, as [`read_line`] reads a line.
fn read_frame(reader: &mut impl BufRead, frame: &mut Vec<u8>) -> std::io::Result<Line> {
    Ok(match protobuf::read_frame(reader, frame, MAX_LINE)? {
        Frame::Read => Line::Read,
        Frame::End => Line::End,
        Frame::TooLong(_) => Line::TooLong,
    })
}

/// What reading a stream found next.
pub(super) enum Got {
    /// An event.
    Event(Event),
    /// A blank line (JSON streams may have them).
    Blank,
    /// The server ended the stream.
    End,
    /// Nothing arrived for the stream's idle bound.
    Silent,
    /// The stream broke (reset, cut, or past its deadline).
    Broken(ureq::Error),
}

/// An open watch stream, read line by line (JSON) or frame by frame (protobuf).
pub(super) struct Stream {
    reader: std::io::BufReader<Deadline<ureq::BodyReader<'static>>>,
    proto: bool,
    /// How long it may stay silent.
    idle: Duration,
    /// The `timeoutSeconds` asked for.
    timeout: Duration,
    /// When it was asked for (a server may hold the headers back until its first event).
    pub(super) started: Instant,
    /// When the server accepted it.
    pub(super) opened: Instant,
    /// Events read from it so far.
    pub(super) events: usize,
    /// The line or frame being read, kept from one to the next.
    line: Vec<u8>,
}

impl Stream {
    /// Reads from now on give up once `deadline` (if any) is past, however the bytes trickle in.
    pub(super) fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.reader.get_mut().until = deadline;
    }
}

/// A reader that fails once its deadline is past, so that a server trickling bytes cannot
/// hold a read (each of which the idle bound ends) for ever.
struct Deadline<R> {
    inner: R,
    until: Option<Instant>,
}

impl<R: std::io::Read> std::io::Read for Deadline<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.until.is_some_and(|t| Instant::now() >= t) {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "past the stream's deadline"));
        }
        self.inner.read(buf)
    }
}

impl Reflector {
    /// Follows `stream` (the WatchList's, past its initial events), or a watch opened from the
    /// last resourceVersion, until the stream ends; what ends it decides whether the next step
    /// watches again or relists. Until the next watch opens or list completes, the resource
    /// counts as stale since its last sign of life.
    pub(super) fn watch(&mut self, stream: Option<Stream>) -> Result<Next, ApiError> {
        let mut opened = stream.as_ref().map(|s| (s.opened, s.timeout));
        let result = match stream {
            Some(s) => self.follow(s),
            None => self.open_watch(&mut opened),
        };
        self.shared.inbox.stale(self.resource.name, self.alive);
        if opened.is_some_and(|(at, timeout): (Instant, Duration)| at.elapsed() >= RECOVERED_AFTER.min(timeout)) {
            self.recovered();
        }
        result
    }

    /// Opens a watch from the last resourceVersion and follows it; `opened` is when the server
    /// accepted it, and the `timeoutSeconds` it asked for.
    fn open_watch(&mut self, opened: &mut Option<(Instant, Duration)>) -> Result<Next, ApiError> {
        if std::mem::replace(&mut self.watched, true) {
            self.count(|m| &m.watch_restarts);
        }
        let query =
            format!("?watch=true&allowWatchBookmarks=true&resourceVersion={}{}", escape(&self.rv), self.selectors());
        let stream = self.open(&query)?;
        *opened = Some((stream.opened, stream.timeout));
        // A watch opened is a sign of life (a WatchList's is its bookmark, as a list's is its
        // last page).
        self.lived();
        self.follow(stream)
    }

    /// Opens the watch of `query` (`?watch=true&…`, without its `timeoutSeconds`): a random
    /// timeout between the settings' and twice it, as client-go's reflector asks.
    pub(super) fn open(&mut self, query: &str) -> Result<Stream, ApiError> {
        let base = self.shared.settings.watch_timeout.as_secs().max(1);
        let timeout = Duration::from_secs(base + fastrand::u64(0..base));
        let idle = (timeout + WATCH_IDLE_MARGIN).min(BOOKMARK_SILENCE);
        let path = format!("{}{query}&timeoutSeconds={}", self.resource.path, timeout.as_secs());
        let started = Instant::now();
        let body = self.shared.client.watch(&path, idle)?;
        let proto = protobuf::is_protobuf(body.mime_type());
        let reader = std::io::BufReader::new(Deadline { inner: body.into_reader(), until: None });
        Ok(Stream { reader, proto, idle, timeout, started, opened: Instant::now(), events: 0, line: Vec::new() })
    }

    /// Reads the next event of `s` (or what ended it). A line or frame past [`MAX_LINE`], or
    /// one that is not an event, is an error.
    pub(super) fn next_event(&mut self, s: &mut Stream) -> Result<Got, ApiError> {
        let read = if s.proto { read_frame(&mut s.reader, &mut s.line) } else { read_line(&mut s.reader, &mut s.line) };
        let unit = if s.proto { "frame" } else { "line" };
        match read {
            Ok(Line::End) => {
                // The server closing the stream cleanly is a sign of life too.
                self.alive = SystemTime::now();
                Ok(Got::End)
            }
            Ok(Line::TooLong) => Err(ApiError::Decode(format!(
                "watching {}: a {unit} longer than {} MiB, taken as a broken stream",
                self.resource.name,
                MAX_LINE >> 20
            ))),
            Err(e) => match ureq::Error::from(e) {
                ureq::Error::Timeout(_) => Ok(Got::Silent),
                e => Ok(Got::Broken(e)),
            },
            Ok(Line::Read) => {
                self.alive = SystemTime::now();
                match self.parse(s.proto, &s.line) {
                    Ok(Some(event)) => {
                        s.events += 1;
                        Ok(Got::Event(event))
                    }
                    Ok(None) => Ok(Got::Blank),
                    // The stream ended inside an event (a connection cut mid-line): a broken
                    // stream, as client-go's decoder takes an unexpected end, not a line that
                    // is no event (a protobuf frame cut short is already an error).
                    Err(_) if !s.proto && cut_short(&s.line) => {
                        let cut =
                            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the stream ended inside an event");
                        Ok(Got::Broken(ureq::Error::Io(cut)))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Follows `s` until it ends, delivering each event as it arrives.
    fn follow(&mut self, mut s: Stream) -> Result<Next, ApiError> {
        let _pass = crate::skips::windowed(&format!("watching {}", self.resource.name), SKIPS_WINDOW);
        let name = self.resource.name;
        loop {
            match self.next_event(&mut s)? {
                Got::Event(event) => self.event(event)?,
                Got::Blank => {}
                Got::End => break,
                Got::Silent => {
                    log::warn!("{name}: the watch stayed silent for {:?}; reopening it", s.idle);
                    return Ok(Next::Watch);
                }
                // A stream that served a while and then broke (reset, cut) is a watch that
                // ended, as client-go takes it: watch again at once. One that breaks at once
                // is a failure, so a server that always does it is not asked in a loop.
                Got::Broken(e) if s.events > 0 || s.started.elapsed() >= VERY_SHORT_WATCH => {
                    log::info!("{name}: the watch broke ({e}); watching again");
                    return Ok(Next::Watch);
                }
                Got::Broken(e) => return Err(ApiError::Transport(format!("watching {name}: {e}"))),
            }
            if self.stopped() {
                break;
            }
        }
        if s.events == 0 && s.started.elapsed() < VERY_SHORT_WATCH && !self.stopped() {
            return Err(ApiError::Transport(format!("watching {name}: the server ended the watch at once")));
        }
        Ok(Next::Watch)
    }

    /// The event a line (JSON) or frame (protobuf) holds; `None` for a blank line.
    fn parse(&self, proto: bool, line: &[u8]) -> Result<Option<Event>, ApiError> {
        if !proto && line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let event = match proto {
            true => Event::from_protobuf(line).map_err(|e| e.to_string()),
            false => serde_json::from_slice::<JsonEvent>(line).map(Event::from).map_err(|e| e.to_string()),
        };
        let (name, unit) = (self.resource.name, if proto { "frame" } else { "line" });
        event.map(Some).map_err(|e| {
            ApiError::Decode(format!("watching {name}: a {unit} that is not an event ({e}); watching again"))
        })
    }

    /// Handles one watch event. One whose object is not of the watched kind (a Status in an
    /// `ADDED`, say) changes nothing: the stream is taken as broken, and watched again after
    /// a backoff from the last good resourceVersion.
    pub(super) fn event(&mut self, event: Event) -> Result<(), ApiError> {
        if event.foreign(self.resource.kind) {
            return Err(ApiError::Decode(format!(
                "watching {}: a {:?} event whose object is a {:?}, not a {}; watching again",
                self.resource.name,
                event.kind,
                event.object_kind,
                self.resource.kind.as_str()
            )));
        }
        let rv = || decode::meta(&event.object);
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
                return Err(decode::status(&event.object).into_error(None));
            }
            other => crate::skips::warn_skipped!("{}: ignoring a watch event of type {other:?}", self.resource.name),
        }
        Ok(())
    }

    pub(super) fn advance(&mut self, rv: String) {
        if !rv.is_empty() {
            self.rv = rv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_read_whole_up_to_the_bound_and_never_buffered_past_it() {
        let text = b"{\"a\":1}\n\n{\"b\":2}";
        let mut reader = std::io::BufReader::with_capacity(3, &text[..]);
        let mut line = Vec::new();
        let mut lines = Vec::new();
        while let Line::Read = read_line(&mut reader, &mut line).unwrap() {
            lines.push(String::from_utf8(line.clone()).unwrap());
        }
        assert_eq!(lines, ["{\"a\":1}\n", "\n", "{\"b\":2}"], "the last line may lack its newline");
        let endless = std::io::Read::take(std::io::repeat(b'a'), 3 * MAX_LINE as u64);
        let mut reader = std::io::BufReader::new(endless);
        assert!(matches!(read_line(&mut reader, &mut line).unwrap(), Line::TooLong));
        assert!(line.capacity() <= MAX_LINE, "grew to {} bytes", line.capacity());
        let mut exact = vec![b'a'; MAX_LINE - 1];
        exact.push(b'\n');
        let mut reader = std::io::BufReader::new(&exact[..]);
        assert!(matches!(read_line(&mut reader, &mut line).unwrap(), Line::Read), "a line of the bound is read");
        assert_eq!(line.len(), MAX_LINE);
        read_line(&mut reader, &mut line).unwrap();
        assert!(line.capacity() <= KEEP_CAPACITY, "the buffer is shrunk after a large line");
    }

    #[test]
    fn only_a_line_that_breaks_off_is_a_cut_stream() {
        assert!(cut_short(br#"{"type":"MODIFIED","obj"#));
        assert!(!cut_short(br#"{"kind":"Status","code":500}"#), "whole, though no event");
        assert!(!cut_short(b"this is not JSON {\n"), "garbage with its newline");
        assert!(!cut_short(b"garbage"), "not JSON at all");
    }
}
