//! HTTP/1.1 on a byte stream: reading requests (Content-Length bodies), writing responses and
//! chunks, and the metav1.Status error body.

use serde_json::json;
use std::io::{self, Read, Write};

/// Largest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The socket failed or closed mid-request.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// The bytes are not an HTTP/1.1 request this server accepts.
    #[error("bad request: {0}")]
    Bad(&'static str),
}

/// One parsed request.
#[derive(Debug, Default)]
pub struct Request {
    /// Method, e.g. `GET`.
    pub method: String,
    /// The request target as sent (path and query, not decoded).
    pub target: String,
    /// The decoded path, without the query.
    pub path: String,
    /// Decoded query parameters, in order.
    pub query: Vec<(String, String)>,
    /// Headers with lowercased names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// The first header named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The first query parameter named `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Whether the client asked to close the connection after this request.
    pub fn wants_close(&self) -> bool {
        self.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// Reads the next request; `Ok(None)` when the peer closed the connection between requests.
/// `buf` keeps bytes read past the request for the next call.
pub fn read_request(io: &mut impl Read, buf: &mut Vec<u8>) -> Result<Option<Request>, HttpError> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(HttpError::Bad("request head too large"));
        }
        if fill(io, buf)? == 0 {
            return if buf.is_empty() { Ok(None) } else { Err(HttpError::Bad("truncated request")) };
        }
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| HttpError::Bad("request head is not UTF-8"))?;
    let mut req = parse_head(head)?;
    let len: usize = match req.header("content-length") {
        Some(v) => v.trim().parse().map_err(|_| HttpError::Bad("bad Content-Length"))?,
        None => 0,
    };
    if req.header("transfer-encoding").is_some() {
        return Err(HttpError::Bad("chunked request bodies are not supported"));
    }
    if len > MAX_BODY {
        return Err(HttpError::Bad("request body too large"));
    }
    let start = head_end + 4;
    while buf.len() < start + len {
        if fill(io, buf)? == 0 {
            return Err(HttpError::Bad("truncated body"));
        }
    }
    req.body = buf[start..start + len].to_vec();
    buf.drain(..start + len);
    Ok(Some(req))
}

fn fill(io: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut chunk = [0u8; 16 * 1024];
    let n = io.read(&mut chunk)?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

fn parse_head(head: &str) -> Result<Request, HttpError> {
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (method, target, version) = (first.next(), first.next(), first.next());
    let (Some(method), Some(target), Some(version)) = (method, target, version) else {
        return Err(HttpError::Bad("malformed request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Bad("only HTTP/1.x is spoken"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k, true), decode(v, true))
        })
        .collect();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let (method, target) = (method.to_string(), target.to_string());
    Ok(Request { method, target, path: decode(path, false), query, headers, body: Vec::new() })
}

/// Percent-decoding; in queries `+` is a space, as Go's url.Values encodes it.
fn decode(s: &str, query: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
        match b[i] {
            b'%' if hex(i + 1).is_some() && hex(i + 2).is_some() => {
                out.push((hex(i + 1).unwrap_or(0) * 16 + hex(i + 2).unwrap_or(0)) as u8);
                i += 3;
                continue;
            }
            b'+' if query => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A complete (non-streaming) response.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Its media type.
    pub content_type: &'static str,
    /// Write the body one byte at a time with this pause (a slow-list fault).
    pub pace: Option<std::time::Duration>,
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, body: Vec<u8>) -> Response {
        Response { status, headers: Vec::new(), body, content_type: "application/json", pace: None }
    }

    /// A metav1.Status failure.
    pub fn status(code: u16, reason: &str, message: &str) -> Response {
        Response::json(code, status_body(code, reason, message).into_bytes())
    }
}

/// The metav1.Status JSON for a failure.
pub fn status_body(code: u16, reason: &str, message: &str) -> String {
    json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":message,"reason":reason,"code":code})
        .to_string()
}

/// The reason Kubernetes gives for a status code.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

fn phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Writes a whole response with a Content-Length body.
pub fn write_response(io: &mut impl Write, resp: &Response, close: bool) -> io::Result<()> {
    let mut head =
        format!("HTTP/1.1 {} {}\r\nContent-Type: {}\r\n", resp.status, phrase(resp.status), resp.content_type);
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n", resp.body.len()));
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    io.write_all(head.as_bytes())?;
    let Some(pace) = resp.pace else {
        io.write_all(&resp.body)?;
        return io.flush();
    };
    for byte in &resp.body {
        io.write_all(std::slice::from_ref(byte))?;
        io.flush()?;
        std::thread::sleep(pace);
    }
    Ok(())
}

/// Writes the head of a chunked streaming response of media type `content_type`.
pub fn write_stream_head(io: &mut impl Write, content_type: &str) -> io::Result<()> {
    let head = format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n");
    io.write_all(head.as_bytes())?;
    io.flush()
}

/// Appends one chunk holding `data` to `out`.
pub fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The terminating zero-length chunk.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pipelined_requests() {
        let raw = b"GET /api/v1/services?labelSelector=%21a%2Fb,c+in+(x)&watch=1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        let mut io = &raw[..];
        let mut buf = Vec::new();
        let a = read_request(&mut io, &mut buf).expect("reads").expect("one");
        assert_eq!(a.param("labelSelector"), Some("!a/b,c in (x)"));
        let b = read_request(&mut io, &mut buf).expect("reads").expect("two");
        assert_eq!((b.method.as_str(), b.body.as_slice()), ("POST", &b"{}"[..]));
        assert!(read_request(&mut io, &mut buf).expect("eof").is_none());
    }
}
