//! Real sockets inside network namespaces: echo servers that say who they are and whom
//! they saw, and probes that report where a connection went or how it failed.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Runs `f` on a thread that has entered network namespace `ns`; sockets it creates live there.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(move || {
            enter(&path);
            f()
        })
        .join()
        .expect("netns thread panicked")
    })
}

/// Runs `f` on a thread of its own in namespace `ns`, not waiting for it.
pub fn spawn_in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        enter(&path);
        f()
    })
}

fn enter(path: &str) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    // SAFETY: setns on a valid namespace fd only changes this thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
}

/// What an echo server answered: its name and the source address it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Server (pod) name.
    pub name: String,
    /// The peer address the server saw.
    pub seen: IpAddr,
}

/// How a probe ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// An endpoint answered.
    Reply(Reply),
    /// Refused at once: TCP reset or ICMP port unreachable.
    Refused,
    /// Nothing came back in time (dropped).
    Timeout,
    /// The sender's own kernel refused to send (EPERM): netfilter rejected or dropped a
    /// locally generated packet in the output hook, which is how the node sees a reject.
    SendDenied,
    /// Anything else, with the error.
    Error(String),
}

impl Probe {
    /// The answering server's name, or a description of the failure.
    pub fn who(&self) -> String {
        match self {
            Probe::Reply(r) => r.name.clone(),
            other => format!("{other:?}"),
        }
    }
}

/// Transport of a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP (one-to-one style socket).
    Sctp,
}

/// A TCP, UDP (and SCTP, where the kernel has it) echo server in a namespace; stops on drop.
pub struct EchoServer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl EchoServer {
    /// Listens on `port` on every address of both families in namespace `ns`.
    pub fn start(ns: &str, name: &str, port: u16) -> EchoServer {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for any in ["0.0.0.0", "::"] {
            let addr: SocketAddr = SocketAddr::new(any.parse().unwrap(), port);
            let (tcp, udp, sctp) = in_netns(ns, move || {
                let tcp = listener(addr, libc::IPPROTO_TCP).expect("tcp listen");
                let udp = UdpSocket::from(bound(addr, libc::SOCK_DGRAM, libc::IPPROTO_UDP).expect("udp bind"));
                (tcp, udp, listener(addr, libc::IPPROTO_SCTP).ok())
            });
            threads.push(serve_stream(tcp, name, stop.clone()));
            if let Some(sctp) = sctp {
                threads.push(serve_stream(sctp, name, stop.clone()));
            }
            threads.push(serve_udp(udp, name, stop.clone()));
        }
        EchoServer { stop, threads }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A stream listener of `proto` (TCP or SCTP).
fn listener(addr: SocketAddr, proto: i32) -> std::io::Result<TcpListener> {
    let l = TcpListener::from(bound(addr, libc::SOCK_STREAM, proto)?);
    // SAFETY: listen(2) on our own bound socket.
    if unsafe { libc::listen(l.as_raw_fd(), 128) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A socket bound to `addr`; IPv6 sockets are v6-only so both families can bind one port.
fn bound(addr: SocketAddr, kind: i32, proto: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    let fd = socket(addr, kind, proto)?;
    let one: libc::c_int = 1;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let ptr = &one as *const libc::c_int as *const libc::c_void;
    // SAFETY: fd is a valid socket we own; the option values point to a live c_int.
    unsafe {
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, ptr, len);
        if addr.is_ipv6() {
            libc::setsockopt(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, ptr, len);
        }
    }
    let (ss, len) = sockaddr(addr);
    // SAFETY: ss/len describe a valid socket address for this socket's family.
    if unsafe { libc::bind(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

fn socket(addr: SocketAddr, kind: i32, proto: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    let domain = if addr.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket(2); the result is checked before it is owned.
    let fd = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn serve_stream(l: TcpListener, name: &str, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let name = name.to_string();
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            // Wait for a connection without spinning, but wake up to notice `stop`.
            let mut pfd = libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: poll on one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, 50) } <= 0 {
                continue;
            }
            if let Ok((mut s, peer)) = l.accept() {
                let _ = s.set_nonblocking(false);
                let _ = s.write_all(format!("{name} {}\n", peer.ip().to_canonical()).as_bytes());
            }
        }
    })
}

fn serve_udp(u: UdpSocket, name: &str, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let name = name.to_string();
    u.set_read_timeout(Some(Duration::from_millis(20))).expect("udp timeout");
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while !stop.load(Ordering::SeqCst) {
            if let Ok((_, peer)) = u.recv_from(&mut buf) {
                let _ = u.send_to(format!("{name} {}\n", peer.ip().to_canonical()).as_bytes(), peer);
            }
        }
    })
}

fn parse_reply(text: &str) -> Probe {
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next().and_then(|s| s.parse().ok())) {
        (Some(name), Some(seen)) => Probe::Reply(Reply { name: name.to_string(), seen }),
        _ => Probe::Error(format!("unexpected reply {text:?}")),
    }
}

fn classify(e: std::io::Error) -> Probe {
    match e.kind() {
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset => Probe::Refused,
        ErrorKind::TimedOut | ErrorKind::WouldBlock => Probe::Timeout,
        ErrorKind::PermissionDenied => Probe::SendDenied,
        _ => Probe::Error(e.to_string()),
    }
}

/// One connection (TCP/SCTP) or datagram exchange (UDP) from the calling thread's namespace,
/// optionally from source address `src`.
pub fn probe(proto: Proto, dst: SocketAddr, src: Option<IpAddr>, timeout: Duration) -> Probe {
    probe_from(proto, dst, src.map(|ip| SocketAddr::new(ip, 0)), timeout)
}

/// As [`probe`], from source address and port `src` (port 0: any the kernel picks).
pub fn probe_from(proto: Proto, dst: SocketAddr, src: Option<SocketAddr>, timeout: Duration) -> Probe {
    let result = match proto {
        Proto::Udp => udp_exchange(dst, src, timeout),
        Proto::Tcp => stream_exchange(dst, src, timeout, libc::IPPROTO_TCP),
        Proto::Sctp => stream_exchange(dst, src, timeout, libc::IPPROTO_SCTP),
    };
    match result {
        Ok(text) => parse_reply(&text),
        Err(e) => classify(e),
    }
}

thread_local! {
    /// The client port of this thread's last probe, once its socket had one.
    static CLIENT_PORT: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

/// The client port this thread's last probe sent from (what a trace names it by).
pub fn last_client_port() -> Option<u16> {
    CLIENT_PORT.with(|c| c.get())
}

/// The local port of socket `fd`, kept as this thread's last client port.
fn note_client_port(fd: &impl AsRawFd) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getsockname(2) on our own socket into storage of the length given.
    let rc = unsafe { libc::getsockname(fd.as_raw_fd(), &mut ss as *mut _ as *mut libc::sockaddr, &mut len) };
    // Both sockaddr_in and sockaddr_in6 hold the port, big-endian, after the family.
    let port = (rc == 0).then(|| {
        let b = &ss as *const _ as *const u8;
        // SAFETY: the storage is at least 4 bytes long.
        unsafe { u16::from_be_bytes([*b.add(2), *b.add(3)]) }
    });
    CLIENT_PORT.with(|c| c.set(port.filter(|p| *p != 0)));
}

fn stream_exchange(dst: SocketAddr, src: Option<SocketAddr>, timeout: Duration, proto: i32) -> std::io::Result<String> {
    CLIENT_PORT.with(|c| c.set(None));
    let fd = socket(dst, libc::SOCK_STREAM, proto)?;
    if let Some(src) = src {
        let (ss, len) = sockaddr(src);
        // SAFETY: binding our own socket to a valid address.
        if unsafe { libc::bind(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let tv = libc::timeval { tv_sec: timeout.as_secs() as _, tv_usec: timeout.subsec_micros() as _ };
    let tvp = &tv as *const libc::timeval as *const libc::c_void;
    let tvl = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: SO_SNDTIMEO bounds connect(2) and SO_RCVTIMEO bounds reads on our own socket.
    unsafe {
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDTIMEO, tvp, tvl);
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, tvp, tvl);
    }
    let (ss, len) = sockaddr(dst);
    // SAFETY: connecting our own socket to a valid address.
    let rc = unsafe { libc::connect(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) };
    let failed = (rc != 0).then(std::io::Error::last_os_error);
    note_client_port(&fd);
    if let Some(e) = failed {
        let timed_out = e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == ErrorKind::WouldBlock;
        return Err(if timed_out { ErrorKind::TimedOut.into() } else { e });
    }
    let mut s = TcpStream::from(fd);
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text)
}

fn udp_exchange(dst: SocketAddr, src: Option<SocketAddr>, timeout: Duration) -> std::io::Result<String> {
    let any: IpAddr = if dst.is_ipv6() { "::".parse().unwrap() } else { "0.0.0.0".parse().unwrap() };
    CLIENT_PORT.with(|c| c.set(None));
    let u = UdpSocket::bind(src.unwrap_or(SocketAddr::new(any, 0)))?;
    note_client_port(&u);
    u.set_read_timeout(Some(timeout))?;
    u.connect(dst)?;
    u.send(b"hello")?;
    let mut buf = [0u8; 512];
    let n = u.recv(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Whether this kernel can open SCTP sockets (SCTP tests are skipped with a reason if not).
pub fn sctp_supported(ns: &str) -> Result<(), String> {
    in_netns(ns, || {
        socket("127.0.0.1:1".parse().unwrap(), libc::SOCK_STREAM, libc::IPPROTO_SCTP)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

/// A TCP connection to `addr` begun without waiting for it (a non-blocking connect), as a
/// flood opens them: the kernel completes it whenever the peer's backlog takes it.
pub fn connect_nonblocking(addr: SocketAddr) -> std::os::fd::OwnedFd {
    let fd = socket(addr, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0).expect("socket");
    let (ss, len) = sockaddr(addr);
    // SAFETY: connecting our own socket to a valid address.
    if unsafe { libc::connect(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) } != 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::EINPROGRESS), "connect {addr}: {e}");
    }
    fd
}

/// One HTTP GET from inside namespace `ns` to `addr`, as a load balancer's checker or a
/// kubelet probe sends it: status, head (names lower-cased) and body; `None` when nothing
/// answers (refused, or silent for 2 s).
pub fn http_get(ns: &str, addr: &str, path: &str) -> Option<(u16, String, String)> {
    http_get_accepting(ns, addr, path, None)
}

/// As [`http_get`], sending `accept` as the `Accept` header if given.
pub fn http_get_accepting(ns: &str, addr: &str, path: &str, accept: Option<&str>) -> Option<(u16, String, String)> {
    let addr: SocketAddr = addr.parse().unwrap_or_else(|_| panic!("bad address {addr}"));
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: checker\r\n{accept}Connection: close\r\n\r\n");
    let text = in_netns(ns, move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(request.as_bytes()).ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        Some(text)
    })?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, head.to_lowercase(), body.to_string()))
}
