//! A plain HTTP/1.1 client for the unit tests of what serves HTTP (the desk, the proxy's
//! endpoints, the z-pages): one request per connection, read to the end.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A connection to `addr` (retried for up to 2 s while the listener comes up) that has sent
/// `GET path` with the extra header lines `headers` (each ending in `\r\n`).
pub(crate) fn send_with(addr: SocketAddr, path: &str, headers: &str) -> TcpStream {
    let start = Instant::now();
    let mut s = loop {
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(e) if start.elapsed() > Duration::from_secs(2) => panic!("connect {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n").expect("request");
    s
}

/// [`send_with`] without extra headers.
pub(crate) fn send(addr: SocketAddr, path: &str) -> TcpStream {
    send_with(addr, path, "")
}

/// Everything the server sends until it closes.
pub(crate) fn read(mut s: TcpStream) -> String {
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("read the answer");
    answer
}
