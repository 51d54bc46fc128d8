//! The system calls behind every netlink socket of the proxy (nf_tables, ctnetlink,
//! rtnetlink), the host's address list, and the signal dispositions a helper command starts
//! with: the one file of the crate that holds `unsafe`, each block with what makes it sound.
//! Everything above works on byte buffers.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Opens a netlink socket of `protocol`, close-on-exec (an `nft` child must not inherit it),
/// with every receive bounded by `timeout`.
pub fn open(protocol: i32, timeout: Duration) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) has no memory preconditions; the result is checked before being owned.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_receive_timeout(&fd, timeout)?;
    Ok(fd)
}

/// The kernel's netlink address, with `groups` (a bit per multicast group) for binding.
fn kernel_address(groups: u32) -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain old data; all-zero is a valid value (pid 0: the kernel).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = groups;
    addr
}

const ADDRESS_LEN: libc::socklen_t = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;

/// Subscribes `fd` to the multicast `groups` (a bit per group); the kernel picks the port id.
pub fn bind_groups(fd: &OwnedFd, groups: u32) -> io::Result<()> {
    let addr = kernel_address(groups);
    // SAFETY: binding our own socket to a sockaddr_nl of the stated length.
    if unsafe { libc::bind(fd.as_raw_fd(), (&addr as *const libc::sockaddr_nl).cast(), ADDRESS_LEN) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The port id the kernel gave `fd` (bound, or after its first send).
pub fn port_id(fd: &OwnedFd) -> io::Result<u32> {
    let mut addr = kernel_address(0);
    let mut len = ADDRESS_LEN;
    // SAFETY: getsockname writes at most `len` bytes into our sockaddr_nl and updates `len`.
    if unsafe { libc::getsockname(fd.as_raw_fd(), (&mut addr as *mut libc::sockaddr_nl).cast(), &mut len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(addr.nl_pid)
}

/// Sends `buf` (one or more whole netlink messages) to the kernel.
pub fn send(fd: &OwnedFd, buf: &[u8]) -> io::Result<()> {
    let addr = kernel_address(0);
    // SAFETY: `buf` is a live slice of the stated length; `addr` a sockaddr_nl of its length.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            0,
            (&addr as *const libc::sockaddr_nl).cast(),
            ADDRESS_LEN,
        )
    };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Receives one datagram into `buf`; its length. Bounded by the socket's receive timeout.
pub fn recv(fd: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: receiving into our own buffer of the stated length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        // A receive with a timeout is not restarted after a signal: ask again.
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Waits up to `timeout` for `fd` to have something to read.
pub fn readable(fd: &impl AsRawFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: poll on one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
    ready > 0
}

/// Sets the integer socket option `name` at `level` on `fd`.
pub fn set_option(fd: RawFd, level: i32, name: i32, value: libc::c_int) -> io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: setsockopt with a pointer to a live c_int of the stated length.
    if unsafe { libc::setsockopt(fd, level, name, (&value as *const libc::c_int).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bounds every receive on `fd` by `timeout`.
pub fn set_receive_timeout(fd: &impl AsRawFd, timeout: Duration) -> io::Result<()> {
    // The field types are left to `timeval` (libc deprecates naming them on musl).
    let tv = libc::timeval {
        tv_sec: timeout.as_secs().try_into().unwrap_or(i64::MAX),
        tv_usec: timeout.subsec_micros().into(),
    };
    let len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: setsockopt with a pointer to a live timeval of the stated length.
    let rc = unsafe {
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&tv as *const libc::timeval).cast(), len)
    };
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Calls `f` with each IP address on this network namespace's interfaces and the interface's
/// name (`getifaddrs`, which asks rtnetlink).
pub fn each_address(mut f: impl FnMut(&[u8], IpAddr)) -> io::Result<()> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned and has not been freed.
        let ifa = unsafe { &*cur };
        if let Some(ip) = address(ifa.ifa_addr) {
            // SAFETY: a node's ifa_name is a NUL-terminated string that lives as long as the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            f(name.to_bytes(), ip);
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(())
}

fn address(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its real type.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

/// Makes every child `cmd` starts begin with each signal at its default disposition, whatever
/// this process inherited: a script's background job starts with SIGINT and SIGQUIT ignored,
/// nohup adds SIGHUP, and exec keeps a signal ignored, so a helper would shrug off the
/// signals its operator or a stopping daemon sends. This process keeps what it inherited.
pub fn default_signals_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // Read before the fork: the hook below calls nothing but sigaction.
    let last = libc::SIGRTMAX();
    let hook = move || {
        for signal in (1..=last).filter(|s| ![libc::SIGKILL, libc::SIGSTOP].contains(s)) {
            // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask and no flags; the
            // kernel only reads it. Signals the C library keeps for itself are refused
            // (EINVAL), which leaves them as they are: never ignored.
            unsafe {
                let default: libc::sigaction = std::mem::zeroed();
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec, where only async-signal-safe
    // functions may be called: it calls sigaction alone (async-signal-safe in POSIX), on a
    // value on its own stack, and allocates nothing, takes no lock and touches no shared state.
    unsafe {
        cmd.pre_exec(hook);
    }
}
