//! What `trace` marks, and the tracer's own table that marks it: the flags' selection read
//! into a [`Selector`], written out by `nft-templates/trace.nft` and sent on a socket the
//! tracer keeps open. The table carries nftables' `owner` flag, so it lives exactly as long
//! as that socket: dropping [`Installed`], exiting, or being killed removes it.

use super::TraceError;
use crate::model::{Family, Protocol};
use crate::netlink::Socket;
use crate::nft::compile::{self, Schema};
use crate::nft::wire::Batch;
use askama::Template;
use std::net::{IpAddr, SocketAddr};

/// The priority the marking chains run at: after conntrack (-200), so that `ct state` is
/// known, and before the proxy's first chains (-110) and DNAT (-100).
pub const MARK_PRIORITY: i32 = -150;

/// The priority the last chains run at: after source NAT (100), where a packet's headers are
/// those it leaves or is delivered with.
pub const SEEN_PRIORITY: i32 = 500;

/// Connections marked per second, per hook and family: what a flood is cut down to.
pub const RATE: u32 = 25;

/// Connections marked at once before the rate applies.
pub const BURST: u32 = 50;

/// The packets to trace: new connections matching every part given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// `--from`: the source address, and port if given.
    pub from: Option<(IpAddr, Option<u16>)>,
    /// `--to`: the destination address, and port if given.
    pub to: Option<(IpAddr, Option<u16>)>,
    /// `--protocol`; any of TCP, UDP and SCTP when not given.
    pub protocol: Option<Protocol>,
}

impl Selector {
    /// Reads the flags; a bad one is named.
    pub fn parse(from: Option<&str>, to: Option<&str>, protocol: Option<&str>) -> Result<Selector, TraceError> {
        let from = from.map(|f| address("--from", f)).transpose()?;
        let to = to.map(|t| address("--to", t)).transpose()?;
        if let (Some((f, _)), Some((t, _))) = (from, to)
            && f.is_ipv4() != t.is_ipv4()
        {
            return Err(TraceError::Flag("--from and --to are of different address families".into()));
        }
        let protocol = protocol
            .map(|p| Protocol::parse(Some(&p.to_ascii_uppercase())))
            .transpose()
            .map_err(|e| TraceError::Flag(format!("--protocol: {e}")))?;
        Ok(Selector { from, to, protocol })
    }

    /// The families whose packets can match: the addresses' family, else both.
    pub fn families(&self) -> Vec<Family> {
        match self.from.or(self.to) {
            Some((ip, _)) if ip.is_ipv4() => vec![Family::V4],
            Some(_) => vec![Family::V6],
            None => Family::ALL.to_vec(),
        }
    }
}

/// An address flag: `IP`, `IP:PORT`, `[IPv6]:PORT` or `[IPv6]`; IPv4-mapped IPv6 is IPv4.
fn address(flag: &str, text: &str) -> Result<(IpAddr, Option<u16>), TraceError> {
    let bare = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
    let (ip, port) = match (bare.parse::<IpAddr>(), text.parse::<SocketAddr>()) {
        (Ok(ip), _) => (ip, None),
        (_, Ok(sa)) if sa.port() != 0 => (sa.ip(), Some(sa.port())),
        _ => return Err(TraceError::Flag(format!("{flag} {text:?}: not IP, IP:PORT or [IPv6]:PORT (port 1-65535)"))),
    };
    if ip.is_unspecified() {
        return Err(TraceError::Flag(format!("{flag} {text:?}: no packet carries an unspecified address")));
    }
    Ok((ip.to_canonical(), port))
}

/// `trace.nft`: one family's table of the tracer.
#[derive(Template)]
#[template(path = "trace.nft")]
struct TraceTable<'a> {
    fam: &'static str,
    table: &'a str,
    saddr: Option<IpAddr>,
    daddr: Option<IpAddr>,
    proto: Option<&'static str>,
    sport: Option<u16>,
    dport: Option<u16>,
}

/// What every tracer's table is named after: the process's id follows.
pub const TABLE_PREFIX: &str = "kube-nftproxy-trace-";

/// A new tracer table's name: the process's and its own number in it, so that tracers side
/// by side never meet.
pub fn table_name() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    match NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
        0 => format!("{TABLE_PREFIX}{}", std::process::id()),
        n => format!("{TABLE_PREFIX}{}-{n}", std::process::id()),
    }
}

/// The script that creates the tracer's tables for `select`.
pub fn script(select: &Selector, table: &str) -> Result<String, TraceError> {
    let mut out = String::new();
    for family in select.families() {
        let t = TraceTable {
            fam: crate::netlink::NfFamily::from(family).word(),
            table,
            saddr: select.from.map(|(ip, _)| ip),
            daddr: select.to.map(|(ip, _)| ip),
            proto: select.protocol.map(|p| p.as_str()),
            sport: select.from.and_then(|(_, p)| p),
            dport: select.to.and_then(|(_, p)| p),
        };
        out.push_str(&t.render().map_err(|e| TraceError::Table(format!("writing the tracer's table: {e}")))?);
        out.push('\n');
    }
    Ok(out)
}

/// The tracer's tables, in the kernel while this lives.
pub struct Installed {
    /// The socket that created them: they go when it closes.
    _owner: Socket,
    /// Their name.
    pub table: String,
}

/// Creates the tracer's tables for `select` in this thread's network namespace.
pub fn install(select: &Selector) -> Result<Installed, TraceError> {
    let table = table_name();
    let script = script(select, &table)?;
    let mut batch = Batch::new();
    compile::compile(&script, &mut Schema::default(), &mut batch).map_err(|e| TraceError::Table(e.to_string()))?;
    let (bytes, lines) = batch.finish_with_lines();
    let owner = Socket::open().map_err(|e| TraceError::Table(format!("opening a netlink socket: {e}")))?;
    owner.send_batch(&bytes).map_err(|e| TraceError::Table(lines.explain(e, &script).to_string()))?;
    Ok(Installed { _owner: owner, table })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_into_a_selection_and_bad_ones_are_named() {
        let s = Selector::parse(Some("10.0.0.1"), Some("10.96.0.5:80"), Some("tcp")).expect("a selection");
        assert_eq!(s.from, Some(("10.0.0.1".parse().unwrap(), None)));
        assert_eq!(s.to, Some(("10.96.0.5".parse().unwrap(), Some(80))));
        assert_eq!(s.families(), vec![Family::V4]);
        let v6 = Selector::parse(None, Some("[fd00::5]:443"), None).expect("IPv6");
        assert_eq!((v6.families(), v6.protocol), (vec![Family::V6], None));
        assert_eq!(Selector::parse(None, Some("[fd00::5]"), None).map(|s| s.to.map(|t| t.1)).ok(), Some(Some(None)));
        assert_eq!(Selector::parse(None, None, None).map(|s| s.families()).ok(), Some(Family::ALL.to_vec()));
        for (from, to, proto, flag) in [
            (Some("pod-a"), None, None, "--from"),
            (None, Some("10.0.0.1:0"), None, "--to"),
            (None, Some("[::]:80"), None, "--to"),
            (None, None, Some("icmp"), "--protocol"),
            (Some("10.0.0.1"), Some("[fd00::1]:80"), None, "different address families"),
        ] {
            let e = Selector::parse(from, to, proto).expect_err("refused").to_string();
            assert!(e.contains(flag), "{e}");
        }
    }

    #[test]
    fn the_script_marks_what_was_selected_in_each_family_and_sees_packets_last() {
        let s = Selector::parse(Some("[fd00::1]:40000"), None, Some("udp")).expect("a selection");
        let text = script(&s, "t").expect("a script");
        assert!(text.contains("table ip6 t {") && !text.contains("table ip t {"), "{text}");
        assert!(text.contains("ip6 saddr fd00::1 meta l4proto udp th sport 40000 ct state new limit rate"), "{text}");
        assert!(text.contains("flags owner") && text.contains("hook postrouting priority 500"), "{text}");
        let any = script(&Selector::default(), "t").expect("a script");
        assert!(any.contains("table ip t {") && any.contains("meta l4proto { tcp, udp, sctp } ct state new"), "{any}");
    }
}
