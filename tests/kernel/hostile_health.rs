//! A hostile round against the health-check node ports, `/healthz` and `/metrics` through
//! the real daemon in network namespaces: odd clients, odd Services and node changes. Each
//! test holds the proxy to what upstream kube-proxy does (each finding of the round was
//! mended and its test kept). The in-memory half is `tests/offline/local_view.rs`.

use crate::common::checker::{NODE_IP, check_at, expect, expect_at, local_lb};
use crate::common::cluster::{Cluster, endpoint, service, slice};
use crate::common::daemon::{Daemon, wait_for, write_manifests};
use crate::common::kernel_available;
use crate::common::net::{http_get, in_netns};
use crate::common::owner::TableOwner;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

mod clients;
mod ports;

/// One local pod, one Local Service with health-check port `hcnp`, and the daemon with
/// `flags`, the port answering 200.
fn one_port(hcnp: u16, flags: &[&str]) -> (Cluster, Daemon) {
    let c = Cluster::new(1, 0);
    let path = write_manifests(&c, local_lb(&c, "web", 60, hcnp, &["pod-1"]));
    let d = Daemon::start(&c.node, &path, flags, &[]);
    expect(&c, &d, hcnp, Some((200, "1")), "served");
    (c, d)
}

/// Connects from the client to `addr`, sends `chunks` `gap` apart, half-closes when
/// `half_close`, and returns all it reads within 3 s.
fn exchange(c: &Cluster, addr: &str, chunks: Vec<Vec<u8>>, gap: Duration, half_close: bool) -> String {
    let addr: SocketAddr = addr.parse().unwrap();
    in_netns(&c.client.name, move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        for chunk in chunks {
            if s.write_all(&chunk).is_err() {
                break;
            }
            std::thread::sleep(gap);
        }
        if half_close {
            s.shutdown(Shutdown::Write).unwrap();
        }
        read_all(s)
    })
}

/// Everything `s` reads within its timeout, as text.
fn read_all(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn request(method: &str, extra: &str) -> Vec<u8> {
    format!("{method} /healthz HTTP/1.1\r\nHost: lb\r\nUser-Agent: checker\r\n{extra}\r\n").into_bytes()
}
