//! Values as kube-proxy writes them: durations in Go's form, bind addresses, names that reach
//! the ruleset's text.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The longest period a flag takes: a year; longer ones would overflow timers.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// An address to serve on, or none (the flag given empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindAddress(pub Option<std::net::SocketAddr>);

/// kube-proxy's health port, taken when `--healthz-bind-address` names an IP alone.
pub const HEALTHZ_PORT: u16 = 10256;

/// kube-proxy's metrics port, taken when `--metrics-bind-address` names an IP alone.
pub const METRICS_PORT: u16 = 10249;

/// Parses a bind address `IP:port`, or an IP alone on `default_port` (as kube-proxy appends
/// its port); empty means none.
pub fn parse_bind_address(s: &str, default_port: u16) -> Result<BindAddress, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(BindAddress(None));
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(BindAddress(Some(addr)));
    }
    let ip = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(s);
    ip.parse::<IpAddr>()
        .map(|ip| BindAddress(Some(SocketAddr::new(ip, default_port))))
        .map_err(|_| format!("{s:?} is not IP:port or an IP"))
}

/// `--healthz-bind-address`: an IP alone serves on kube-proxy's health port.
pub fn parse_healthz_bind(s: &str) -> Result<BindAddress, String> {
    parse_bind_address(s, HEALTHZ_PORT)
}

/// `--metrics-bind-address`: an IP alone serves on kube-proxy's metrics port.
pub fn parse_metrics_bind(s: &str) -> Result<BindAddress, String> {
    parse_bind_address(s, METRICS_PORT)
}

/// Where health and metrics are served when nothing says, after the family of
/// `--bind-address` as upstream's defaulting has it: `[::]:10256` and `[::1]:10249` for an
/// IPv6 address (an IPv4-mapped one counts as IPv4, as Go's `To4` says), else `0.0.0.0:10256`
/// and `127.0.0.1:10249`. An address that is not an IP is refused later, by its flag.
pub fn default_bind_addresses(bind_address: &str) -> (SocketAddr, SocketAddr) {
    let v6 = bind_address.trim().parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_ipv6());
    let (any, local): (IpAddr, IpAddr) = if v6 {
        (Ipv6Addr::UNSPECIFIED.into(), Ipv6Addr::LOCALHOST.into())
    } else {
        (Ipv4Addr::UNSPECIFIED.into(), Ipv4Addr::LOCALHOST.into())
    };
    (SocketAddr::new(any, HEALTHZ_PORT), SocketAddr::new(local, METRICS_PORT))
}

/// The modes kube-proxy takes on Linux; each runs this proxy (`iptables` and `ipvs` are served
/// with nftables).
pub const PROXY_MODES: [&str; 3] = ["iptables", "ipvs", "nftables"];

/// `--proxy-mode` and the file's `mode`: empty (kube-proxy's "best available") or one of
/// `PROXY_MODES`; what kube-proxy refuses on Linux (`kernelspace`, `userspace`) is refused.
pub fn parse_proxy_mode(s: &str) -> Result<String, String> {
    match s.trim() {
        mode if mode.is_empty() || PROXY_MODES.contains(&mode) => Ok(mode.to_string()),
        other => Err(format!("{other:?} is not a proxy mode on Linux (iptables, ipvs, nftables, or empty)")),
    }
}

/// A boolean as Go's `strconv.ParseBool` reads one (kube-proxy's flags and `--feature-gates`).
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(format!("{other:?} is not a boolean (true or false)")),
    }
}

/// The IPVS schedulers kube-proxy's validation takes (`validateIPVSSchedulerMethod`; empty
/// is its default, `rr`). Not `mh`: the kernel has it, kube-proxy refuses it.
pub const IPVS_SCHEDULERS: [&str; 11] = ["", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq"];

/// `--vmodule`: `pattern=N` pairs separated by commas (klog's syntax).
pub fn parse_vmodule(s: &str) -> Result<String, String> {
    let ok = s.split(',').filter(|p| !p.is_empty()).all(|pair| {
        pair.split_once('=').is_some_and(|(pattern, level)| !pattern.is_empty() && level.parse::<u32>().is_ok())
    });
    if ok { Ok(s.to_string()) } else { Err(format!("{s:?} is not pattern=N[,pattern=N...]")) }
}

/// A size as Kubernetes writes a quantity (`512`, `1K`, `2Ki`, `5Mi`); the log buffer flags take one.
pub fn parse_quantity(s: &str) -> Result<String, String> {
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &s[digits.len()..];
    let known = ["", "k", "K", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if !digits.is_empty() && digits.parse::<f64>().is_ok_and(|n| n >= 0.0) && known.contains(&suffix) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not a size like 512, 1K, 2Ki or 5Mi"))
    }
}

/// A duration as Go's `time.Duration.String` writes it (`0s`, `250ms`, `1m0s`, `1h30m0s`),
/// as kube-proxy writes durations into its configuration.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        let (unit, scale) = match nanos {
            n if n < 1_000 => ("ns", 1.0),
            n if n < 1_000_000 => ("µs", 1e3),
            _ => ("ms", 1e6),
        };
        return format!("{}{unit}", nanos as f64 / scale);
    }
    let secs = d.as_secs();
    let (h, m) = (secs / 3600, secs % 3600 / 60);
    let s = (secs % 60) as f64 + f64::from(d.subsec_nanos()) / 1e9;
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// Parses `500ms`, `30s`, `15m`, `1h` (or `0`), at most `MAX_DURATION`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("{s:?} is not a duration like 500ms, 30s, 15m, 1h or 1h30m0s");
    // Number-unit pairs as Go writes them (`24h0m0s`, as kube-proxy's flags and
    // configuration take them). A number without a unit is refused as Go's
    // `time.ParseDuration` refuses it, but for `0`.
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut seconds = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let split = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, tail) = rest.split_at(split);
        let n: f64 = number.parse().map_err(|_| bad())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        seconds += n * match unit {
            "" if !number.is_empty() => return Err(format!("{MISSING_UNIT} {s:?}")),
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
        };
        rest = next;
    }
    if s.is_empty() {
        return Err(bad());
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!("{s:?} is longer than the longest period allowed ({}h)", MAX_DURATION.as_secs() / 3600)),
    }
}

/// Go's `time.ParseDuration` error for a number without a unit, before the quoted value.
pub const MISSING_UNIT: &str = "time: missing unit in duration";

/// A period that must not be zero (a zero full-sync period would sync fully without pause, a
/// zero timeout would fail every sync).
pub fn parse_period(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: must be longer than zero")),
        d => Ok(d),
    }
}

/// A share of one core: above zero, at most one (`0.08`, or `8%`).
pub fn parse_share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let value = match t.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().map(|p| p / 100.0),
        None => t.parse::<f64>(),
    };
    match value {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("{s:?}: a share of one core above 0 and at most 1 (0.08, or 8%)")),
    }
}

/// Whether `name` is a DNS-1123 subdomain, as Kubernetes requires of node names.
pub fn valid_node_name(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(crate::model::is_dns_label)
}

/// Whether `name` can be an interface name (it is written into the ruleset's text).
pub fn valid_interface_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@' | b':'))
}

/// `--service-proxy-name`: a label value as the API server takes one (at most 63 of
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric), and not empty: an
/// empty value would claim Services no proxy serves by name.
pub fn parse_service_proxy_name(s: &str) -> Result<String, String> {
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let valid = s.len() <= 63
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && edge_ok(s.chars().next())
        && edge_ok(s.chars().last());
    if valid {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a label value (1 to 63 of A-Z a-z 0-9 - _ ., starting and ending with a letter or digit)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kube_proxy_writes_them() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs_f64());
        for (text, want) in [
            ("0", 0.0),
            ("500ms", 0.5),
            ("15m", 900.0),
            ("24h0m0s", 86400.0),
            ("1h30m", 5400.0),
            ("1m30.5s", 90.5),
            ("250us", 0.00025),
        ] {
            assert_eq!(secs(text), Ok(want), "{text}");
        }
        for text in ["", "s", "-1s", "1d", "1h30", "inf", "1 s"] {
            assert!(parse_duration(text).is_err(), "{text:?} must be refused");
        }
        assert!(parse_period("0s").is_err());
        // As Go's time.ParseDuration: a unit is needed but for "0".
        for text in ["30", "1.5", "00", "0.0", "1h30"] {
            assert_eq!(parse_duration(text), Err(format!("time: missing unit in duration {text:?}")), "{text}");
        }
    }

    #[test]
    fn default_serving_addresses_follow_the_bind_address_family() {
        let v4 = ("0.0.0.0:10256".parse().unwrap(), "127.0.0.1:10249".parse().unwrap());
        let v6 = ("[::]:10256".parse().unwrap(), "[::1]:10249".parse().unwrap());
        for (bind, want) in
            [("0.0.0.0", v4), ("192.0.2.7", v4), ("::ffff:192.0.2.7", v4), ("", v4), ("::", v6), (" 2001:db8::7 ", v6)]
        {
            assert_eq!(default_bind_addresses(bind), want, "{bind:?}");
        }
    }

    #[test]
    fn the_linux_modes_are_taken() {
        for mode in ["nftables", " iptables ", "ipvs", ""] {
            assert_eq!(parse_proxy_mode(mode), Ok(mode.trim().to_string()));
        }
        for mode in ["kernelspace", "userspace", "NFTables"] {
            assert!(parse_proxy_mode(mode).unwrap_err().contains(mode), "{mode}");
        }
    }

    #[test]
    fn durations_are_written_as_go_writes_them() {
        for (secs, want) in [(0.0, "0s"), (0.25, "250ms"), (1.5, "1.5s"), (60.0, "1m0s"), (5400.0, "1h30m0s")] {
            assert_eq!(go_duration(Duration::from_secs_f64(secs)), want);
            assert_eq!(parse_duration(want), Ok(Duration::from_secs_f64(secs)), "{want} reads back");
        }
        assert_eq!(go_duration(Duration::from_secs(86400)), "24h0m0s");
    }
}
