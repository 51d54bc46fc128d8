//! Facts read from the host itself: the addresses on its interfaces, which NodePort CIDRs are matched against.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// Calls `f` with each IP address on the host's interfaces and the interface's name.
fn each_address(mut f: impl FnMut(&[u8], IpAddr)) -> std::io::Result<()> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
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
