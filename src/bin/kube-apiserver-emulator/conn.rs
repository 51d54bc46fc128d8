//! One accepted connection, plain or TLS, with the raw socket kept for closing tricks (reset,
//! half-close) and for noticing a peer that went away while nothing is being sent.

use rustix::net::RecvFlags;
use rustls::{ServerConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The byte stream of a connection, counting what is written to it (before TLS: the HTTP
/// bytes a client reads).
pub struct Io {
    stream: Stream,
    sent: Option<Arc<AtomicU64>>,
}

/// The stream under [`Io`].
enum Stream {
    /// Plain HTTP.
    Plain(TcpStream),
    /// HTTPS.
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl Read for Io {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.stream {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Io {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.stream {
            Stream::Plain(s) => s.write(buf)?,
            Stream::Tls(s) => s.write(buf)?,
        };
        if let Some(sent) = &self.sent {
            sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.stream {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A connection: its stream and a second handle on its socket.
pub struct Conn {
    /// The stream requests are read from and responses written to.
    pub io: Io,
    /// The same socket, for socket options and shutdown.
    pub tcp: TcpStream,
}

impl Conn {
    /// Wraps an accepted socket; `tls` makes it HTTPS; what is written to it is added to
    /// `sent`, if given.
    pub fn new(tcp: TcpStream, tls: Option<ServerConnection>, sent: Option<Arc<AtomicU64>>) -> io::Result<Conn> {
        let raw = tcp.try_clone()?;
        let stream = match tls {
            Some(server) => Stream::Tls(Box::new(StreamOwned::new(server, tcp))),
            None => Stream::Plain(tcp),
        };
        Ok(Conn { io: Io { stream, sent }, tcp: raw })
    }

    /// Whether the client presented a certificate the verifier accepted (chained to the CA).
    pub fn has_client_cert(&self) -> bool {
        match &self.io.stream {
            Stream::Tls(s) => s.conn.peer_certificates().is_some_and(|c| !c.is_empty()),
            Stream::Plain(_) => false,
        }
    }

    /// Whether the peer is still there: a watch client sends nothing, so readable data or EOF
    /// means it closed (or began closing) the connection.
    pub fn peer_alive(&self) -> bool {
        let mut byte = [0u8; 1];
        match rustix::net::recv(&self.tcp, &mut byte, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
            Ok(_) => false,
            Err(e) => e == rustix::io::Errno::AGAIN,
        }
    }

    /// Makes the coming close send RST instead of FIN.
    pub fn arm_reset(&self) {
        if let Err(e) = rustix::net::sockopt::set_socket_linger(&self.tcp, Some(Duration::ZERO)) {
            log::warn!("SO_LINGER: {e}");
        }
    }

    /// Closes the socket at once, without a TLS close_notify.
    pub fn shutdown(&self) {
        let _ = self.tcp.shutdown(Shutdown::Both);
    }
}
