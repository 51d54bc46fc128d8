//! Facts read from the host itself: the addresses on its interfaces, which NodePort CIDRs are matched against.

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

use crate::nft::netlink::sock::each_address;

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
}
