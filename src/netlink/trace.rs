//! nf_tables' packet traces: a packet marked `meta nftrace set 1` is reported, rule by rule,
//! in every table and chain it passes, as `NFT_MSG_TRACE` messages to every listener of the
//! `NFNLGRP_NFTRACE` group of its network namespace. Here: the listening socket, and each
//! message read into a [`TraceEvent`].

use super::abi::*;
use super::attr::{self, be32, be64, get, lossy};
use super::data::{Data, read_verdict};
use super::{Socket, msg, sock};
use std::io;
use std::time::Duration;

/// What a trace event reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceKind {
    /// A rule matched (its verdict may be to go on).
    Rule,
    /// A chain ended (or a rule returned): back to the chain that jumped to it.
    Return,
    /// A base chain ended: its policy (accept or drop) applies.
    Policy(Verdict),
}

/// A verdict, in nftables' words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The packet goes on to the next rule (`continue`).
    Continue,
    /// Accepted: this hook is done with it (a NAT rule's verdict too).
    Accept,
    /// Dropped.
    Drop,
    /// To this chain, then back.
    Jump(String),
    /// To this chain, not back.
    Goto(String),
    /// Back to the calling chain.
    Return,
    /// Another code (queue, stolen).
    Other(i32),
}

impl Verdict {
    fn from_code(code: i32, chain: Option<String>) -> Verdict {
        // A drop or queue verdict carries an errno or queue number above its low byte.
        let low = if code >= 0 { code & 0xff } else { code };
        match (low, chain) {
            (NF_ACCEPT, _) => Verdict::Accept,
            (NF_DROP, _) => Verdict::Drop,
            (NFT_CONTINUE, _) => Verdict::Continue,
            (NFT_RETURN, _) => Verdict::Return,
            (NFT_JUMP, Some(c)) => Verdict::Jump(c),
            (NFT_GOTO, Some(c)) => Verdict::Goto(c),
            (other, _) => Verdict::Other(other),
        }
    }
}

impl std::fmt::Display for Verdict {
    /// As nftables writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Continue => f.write_str("continue"),
            Verdict::Accept => f.write_str("accept"),
            Verdict::Drop => f.write_str("drop"),
            Verdict::Jump(c) => write!(f, "jump {c}"),
            Verdict::Goto(c) => write!(f, "goto {c}"),
            Verdict::Return => f.write_str("return"),
            Verdict::Other(code) => write!(f, "verdict {code}"),
        }
    }
}

/// One step of a traced packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// The packet's id: the same for each of its events (and possibly for a later packet).
    pub id: u32,
    /// The family of the table (`nfgenmsg`): 2 ip, 10 ip6, 1 inet.
    pub family: u8,
    /// The table.
    pub table: String,
    /// The chain.
    pub chain: String,
    /// The rule's handle, for a rule that matched.
    pub handle: Option<u64>,
    /// What happened.
    pub kind: TraceKind,
    /// The rule's verdict, for a rule or a return.
    pub verdict: Option<Verdict>,
    /// The packet's network header (from its IP header) as this base chain saw it: in the
    /// first event of each base chain only.
    pub network_header: Vec<u8>,
    /// Its transport header, likewise.
    pub transport_header: Vec<u8>,
    /// The input and output interfaces' indexes, where known.
    pub iif: Option<u32>,
    /// See `iif`.
    pub oif: Option<u32>,
    /// The packet's mark after the rule, when not 0.
    pub mark: Option<u32>,
}

/// A trace message's body (after the netlink header) read into an event; `None` for another
/// message or one without its table, chain, type or id.
pub fn decode(kind: u16, body: &[u8]) -> Option<TraceEvent> {
    if kind != (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_TRACE {
        return None;
    }
    let family = *body.first()?;
    let attrs = attr::all(body.get(4..)?).ok()?;
    let verdict = match get(&attrs, NFTA_TRACE_VERDICT).map(read_verdict) {
        Some(Ok(Data::Verdict(code, chain))) => Some(Verdict::from_code(code, chain)),
        _ => None,
    };
    let kind = match get(&attrs, NFTA_TRACE_TYPE).and_then(be32)? {
        NFT_TRACETYPE_RULE => TraceKind::Rule,
        NFT_TRACETYPE_RETURN => TraceKind::Return,
        NFT_TRACETYPE_POLICY => {
            let policy = get(&attrs, NFTA_TRACE_POLICY).and_then(be32).unwrap_or(NF_ACCEPT as u32);
            TraceKind::Policy(Verdict::from_code(policy as i32, None))
        }
        _ => return None,
    };
    let bytes = |t| get(&attrs, t).map(<[u8]>::to_vec).unwrap_or_default();
    Some(TraceEvent {
        id: get(&attrs, NFTA_TRACE_ID).and_then(be32)?,
        family,
        table: lossy(get(&attrs, NFTA_TRACE_TABLE)?),
        chain: lossy(get(&attrs, NFTA_TRACE_CHAIN)?),
        handle: get(&attrs, NFTA_TRACE_RULE_HANDLE).and_then(be64),
        kind,
        verdict,
        network_header: bytes(NFTA_TRACE_NETWORK_HEADER),
        transport_header: bytes(NFTA_TRACE_TRANSPORT_HEADER),
        iif: get(&attrs, NFTA_TRACE_IIF).and_then(be32),
        oif: get(&attrs, NFTA_TRACE_OIF).and_then(be32),
        mark: get(&attrs, NFTA_TRACE_MARK).and_then(be32),
    })
}

/// What one read of the trace socket brought.
#[derive(Debug)]
pub enum Traces {
    /// The events read (none when the wait ended first).
    Events(Vec<TraceEvent>),
    /// The kernel dropped events: the socket's buffer was full.
    Overrun,
}

impl Socket {
    /// A socket that receives the packet traces of this network namespace (CAP_NET_ADMIN),
    /// with a receive buffer of `buffer` bytes: what a burst may queue before events are lost.
    pub fn tracer(buffer: usize) -> io::Result<Socket> {
        let s = Socket::open()?;
        sock::bind_groups(&s.fd, 1 << (NFNLGRP_NFTRACE - 1))?;
        let size = libc::c_int::try_from(buffer).unwrap_or(libc::c_int::MAX);
        if s.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err() {
            s.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUF, size)?;
        }
        Ok(s)
    }

    /// The trace events that arrive within `timeout` (one read's worth), read into `buf`
    /// (kept by the caller from read to read).
    pub fn traces(&self, buf: &mut Vec<u8>, timeout: Duration) -> io::Result<Traces> {
        if !sock::readable(&self.fd, timeout) {
            return Ok(Traces::Events(Vec::new()));
        }
        buf.resize(1 << 16, 0);
        match self.recv(buf) {
            Ok(n) => Ok(Traces::Events(msg::messages(&buf[..n]).filter_map(|m| decode(m.kind, m.body)).collect())),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(Traces::Overrun),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attr::{put, put_be32, put_be64, put_str, put_with};

    fn message(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut body = vec![NFPROTO_IPV4, 0, 0, 0];
        f(&mut body);
        body
    }

    #[test]
    fn a_rule_event_reads_whole_and_other_messages_are_not_traces() {
        let kind = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_TRACE;
        let body = message(|b| {
            put_str(b, NFTA_TRACE_TABLE, "kube-nftproxy");
            put_str(b, NFTA_TRACE_CHAIN, "services");
            put_be64(b, NFTA_TRACE_RULE_HANDLE, 42);
            put_be32(b, NFTA_TRACE_TYPE, NFT_TRACETYPE_RULE);
            put_with(b, NFTA_TRACE_VERDICT, |v| {
                put(v, NFTA_VERDICT_CODE, &NFT_GOTO.to_be_bytes());
                put_str(v, NFTA_VERDICT_CHAIN, "service-ns/web/tcp/http");
            });
            put_be32(b, NFTA_TRACE_ID, 7);
            put(b, NFTA_TRACE_NETWORK_HEADER, &[0x45, 0, 0, 60]);
            put_be32(b, NFTA_TRACE_IIF, 3);
        });
        let e = decode(kind, &body).expect("a trace event");
        assert_eq!(
            (e.id, e.family, e.table.as_str(), e.chain.as_str()),
            (7, NFPROTO_IPV4, "kube-nftproxy", "services")
        );
        assert_eq!((e.handle, &e.kind, e.iif, e.oif), (Some(42), &TraceKind::Rule, Some(3), None));
        assert_eq!(e.verdict, Some(Verdict::Goto("service-ns/web/tcp/http".into())));
        assert_eq!(e.network_header, [0x45, 0, 0, 60]);
        let policy = message(|b| {
            put_str(b, NFTA_TRACE_TABLE, "t");
            put_str(b, NFTA_TRACE_CHAIN, "c");
            put_be32(b, NFTA_TRACE_TYPE, NFT_TRACETYPE_POLICY);
            put_be32(b, NFTA_TRACE_POLICY, 0);
            put_be32(b, NFTA_TRACE_ID, 7);
        });
        assert_eq!(decode(kind, &policy).map(|e| e.kind), Some(TraceKind::Policy(Verdict::Drop)));
        assert_eq!(decode((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN, &policy), None, "not a trace");
        // A drop carrying an errno in its upper bits is still a drop.
        assert_eq!(Verdict::from_code(NF_DROP | (1 << 16), None), Verdict::Drop);
    }
}
