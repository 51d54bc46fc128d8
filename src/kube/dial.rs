//! Dialling the API server: plain TCP sockets as ureq's own connector makes them, plus TCP
//! keepalive and a user timeout, so that a connection whose peer vanished without a reset
//! (a node or middlebox gone, packets dropped) fails within half a minute instead of when a
//! watch's timeout runs out. client-go gets the same from Go's dialer (keepalive) and HTTP/2
//! pings; ureq has no knob for either, so the socket is made here.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Weak};
use std::time::Duration;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, ShutdownHandle, Transport,
};
use ureq::{Error, Timeout};

/// Silence after which the kernel starts probing a connection.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);

/// Time between probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// Unanswered probes after which the connection is dead: with the idle time, a silent dead
/// peer is noticed after 15 + 3 × 5 = 30 s.
const KEEPALIVE_COUNT: u32 = 3;

/// How long sent data may stay unacknowledged before the connection is dead (a request sent
/// into a dead connection; also caps the keepalive's count, as Linux applies it to probes too).
const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens TCP connections with keepalive and a user timeout; TLS is layered on by the next
/// connector of the chain.
#[derive(Debug, Default)]
pub(super) struct KeepaliveConnector;

impl<In: Transport> Connector<In> for KeepaliveConnector {
    type Out = KeepaliveTransport;

    fn connect(&self, details: &ConnectionDetails, _chained: Option<In>) -> Result<Option<Self::Out>, Error> {
        let budget = details.timeout.not_zero().map(|t| *t);
        let mut last = None;
        for addr in details.addrs.iter() {
            match dial(*addr, budget) {
                Ok(stream) => {
                    let config = details.config;
                    let buffers = LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size());
                    let stream = Arc::new(stream);
                    (details.register_shutdown)(Arc::downgrade(&stream) as Weak<dyn ShutdownHandle>)?;
                    return Ok(Some(KeepaliveTransport { stream, buffers, read: None, write: None }));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Io(io::Error::new(io::ErrorKind::ConnectionRefused, "no address"))))
    }
}

/// Connects to `addr` within `budget` and sets the socket's liveness options.
fn dial(addr: SocketAddr, budget: Option<Duration>) -> Result<TcpStream, Error> {
    let stream = match budget {
        Some(t) => TcpStream::connect_timeout(&addr, t),
        None => TcpStream::connect(addr),
    };
    let stream = match stream {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => {
            return Err(Error::Timeout(Timeout::Connect));
        }
        Err(e) => return Err(e.into()),
    };
    stream.set_nodelay(true)?;
    keepalive(&stream)?;
    Ok(stream)
}

/// Sets keepalive and the user timeout on `stream`.
pub(super) fn keepalive(stream: &TcpStream) -> io::Result<()> {
    use rustix::net::sockopt;
    sockopt::set_socket_keepalive(stream, true)?;
    sockopt::set_tcp_keepidle(stream, KEEPALIVE_IDLE)?;
    sockopt::set_tcp_keepintvl(stream, KEEPALIVE_INTERVAL)?;
    sockopt::set_tcp_keepcnt(stream, KEEPALIVE_COUNT)?;
    sockopt::set_tcp_user_timeout(stream, USER_TIMEOUT.as_millis() as u32)?;
    Ok(())
}

/// A TCP connection as ureq's own transport drives one: blocking reads and writes with the
/// request's timeouts set on the socket.
#[derive(Debug)]
pub(super) struct KeepaliveTransport {
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
    read: Option<Duration>,
    write: Option<Duration>,
}

/// Fails when the request's time is up; the socket timeout to use otherwise.
fn socket_timeout(timeout: NextTimeout) -> Result<Option<Duration>, Error> {
    if timeout.after.is_zero() {
        return Err(Error::Timeout(timeout.reason));
    }
    Ok(timeout.not_zero().map(|t| *t))
}

/// Maps a socket call that ran out of its timeout to ureq's timeout of `reason`. (A socket
/// timeout is `EAGAIN`; `ETIMEDOUT` is the keepalive or user timeout declaring the
/// connection dead, which stays an I/O error.)
fn io_error(e: io::Error, reason: Timeout) -> Error {
    match e.kind() {
        io::ErrorKind::WouldBlock => Error::Timeout(reason),
        _ => Error::Io(e),
    }
}

impl Transport for KeepaliveTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        let t = socket_timeout(timeout)?;
        if t != self.write {
            self.stream.set_write_timeout(t)?;
            self.write = t;
        }
        let output = &self.buffers.output()[..amount];
        (&*self.stream).write_all(output).map_err(|e| io_error(e, timeout.reason))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        let t = socket_timeout(timeout)?;
        if t != self.read {
            self.stream.set_read_timeout(t)?;
            self.read = t;
        }
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match (&*self.stream).read(input) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other.map_err(|e| io_error(e, timeout.reason))?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // A pooled connection is reusable when nothing is waiting on it and it is not closed.
        let mut byte = [0u8; 1];
        use rustix::net::RecvFlags;
        matches!(
            rustix::net::recv(&*self.stream, &mut byte, RecvFlags::PEEK | RecvFlags::DONTWAIT),
            Err(rustix::io::Errno::AGAIN)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::sockopt;

    #[test]
    fn a_dialled_socket_carries_keepalive_and_a_user_timeout_that_add_up_to_under_a_minute() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = dial(listener.local_addr().unwrap(), Some(Duration::from_secs(1))).unwrap();
        assert!(sockopt::socket_keepalive(&stream).unwrap());
        assert_eq!(sockopt::tcp_keepidle(&stream).unwrap(), KEEPALIVE_IDLE);
        assert_eq!(sockopt::tcp_keepintvl(&stream).unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(sockopt::tcp_keepcnt(&stream).unwrap(), KEEPALIVE_COUNT);
        assert_eq!(u128::from(sockopt::tcp_user_timeout(&stream).unwrap()), USER_TIMEOUT.as_millis());
        let dead = KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT;
        assert!(
            dead <= USER_TIMEOUT && USER_TIMEOUT < Duration::from_secs(60),
            "a dead peer is noticed within a minute"
        );
    }
}
