//! Facts read from the host itself: the addresses on its interfaces, which NodePort CIDRs are
//! matched against, and which interface its routes reach an address through.

use std::net::IpAddr;

/// Addresses configured on this host's interfaces (network namespace), sorted and deduplicated.
///
/// Upstream matches `--nodeport-addresses` CIDRs against interface addresses, not only the
/// Node object, so a multi-homed node serves NodePorts on every matching interface.
pub fn interface_addresses() -> std::io::Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    each_address(|_, ip| out.push(ip))?;
    out.sort();
    out.dedup();
    Ok(out)
}

/// The addresses on interface `name` (none if there is no such interface).
pub fn addresses_of(name: &str) -> std::io::Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    each_address(|ifname, ip| {
        if ifname == name.as_bytes() {
            out.push(ip);
        }
    })?;
    Ok(out)
}

use crate::netlink::sock::each_address;

/// The interface this host's main routing table reaches `ip` through (the longest matching
/// prefix, then the lowest metric), which is where a packet from `ip` comes in; `None` when
/// no route holds it. Read from `/proc/net/route` and `/proc/net/ipv6_route`.
pub fn route_device(ip: IpAddr) -> std::io::Result<Option<String>> {
    let (file, table) = match ip {
        IpAddr::V4(_) => ("/proc/net/route", std::fs::read_to_string("/proc/net/route")?),
        IpAddr::V6(_) => ("/proc/net/ipv6_route", std::fs::read_to_string("/proc/net/ipv6_route")?),
    };
    let routes = table.lines().filter_map(|l| if file.ends_with("ipv6_route") { route6(l) } else { route4(l) });
    let matching = routes.filter(|(net, _, _)| net.contains(&ip));
    Ok(matching.max_by_key(|(net, metric, _)| (net.prefix_len(), std::cmp::Reverse(*metric))).map(|(_, _, dev)| dev))
}

/// One line of `/proc/net/route`: the network (its words are in host order), the metric and
/// the device.
fn route4(line: &str) -> Option<(ipnet::IpNet, u32, String)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let word = |i: usize| f.get(i).and_then(|w| u32::from_str_radix(w, 16).ok());
    let (dest, metric, mask) = (word(1)?, f.get(6)?.parse().ok()?, word(7)?);
    let addr = std::net::Ipv4Addr::from(dest.to_ne_bytes());
    let net = ipnet::Ipv4Net::new(addr, mask.count_ones() as u8).ok()?;
    Some((net.into(), metric, f.first()?.to_string()))
}

/// One line of `/proc/net/ipv6_route`: destination, prefix length, …, metric, …, device.
fn route6(line: &str) -> Option<(ipnet::IpNet, u32, String)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let addr = std::net::Ipv6Addr::from(u128::from_str_radix(f.first()?, 16).ok()?);
    let len = u8::from_str_radix(f.get(1)?, 16).ok()?;
    let metric = u32::from_str_radix(f.get(5)?, 16).ok()?;
    let net = ipnet::Ipv6Net::new(addr, len).ok()?;
    Some((net.into(), metric, f.get(9)?.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_is_among_the_interface_addresses() {
        let addrs = super::interface_addresses().expect("getifaddrs");
        assert!(addrs.iter().any(|ip| ip.is_loopback()), "{addrs:?}");
        let on_lo = super::addresses_of("lo").expect("getifaddrs");
        assert!(on_lo.iter().all(|ip| ip.is_loopback()) && !on_lo.is_empty(), "{on_lo:?}");
        assert!(super::addresses_of("no-such-link0").expect("getifaddrs").is_empty());
    }

    #[test]
    fn route_lines_are_read_as_the_kernel_writes_them() {
        let v4 = "eth0\t000200C0\t00000000\t0001\t0\t0\t5\t00FFFFFF\t0\t0\t0";
        let (net, metric, dev) = super::route4(v4).expect("a route");
        assert_eq!((net.to_string(), metric, dev.as_str()), ("192.0.2.0/24".to_string(), 5, "eth0"));
        let v6 = "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 \
                  00000000000000000000000000000000 00000100 00000001 00000000 00000001     pod1";
        let (net, metric, dev) = super::route6(v6).expect("a route");
        assert_eq!((net.to_string(), metric, dev.as_str()), ("fd00::/64".to_string(), 256, "pod1"));
        assert!(super::route4("Iface\tDestination\tGateway").is_none(), "the header is no route");
    }
}
