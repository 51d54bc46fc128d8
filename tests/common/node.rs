//! A network namespace that looks like a Kubernetes node to the proxy: loopback up and an
//! uplink carrying primary and secondary addresses of both families, towards a gateway, with
//! default and extra routes. Performance tests sync into one, because a real node's
//! addresses reach the model before every sync and an empty namespace would hide what they
//! cost.

use super::Netns;
use std::io::Write;
use std::process::{Command, Stdio};

/// The uplink's name.
pub const UPLINK: &str = "eth0";

/// The uplink's addresses: the node's primary (the InternalIP of the benchmark's Node object)
/// and a secondary of each family.
pub const ADDRESSES: [&str; 4] = ["192.168.1.1/24", "172.16.0.1/24", "fd00:1::1/64", "fd00:2::1/64"];

/// The gateway's addresses on the other end of the uplink.
const GATEWAY: [&str; 4] = ["192.168.1.254/24", "172.16.0.254/24", "fd00:1::fffe/64", "fd00:2::fffe/64"];

/// Routes as a node has them: a default per family through the gateway, and routes to other
/// nodes' pod ranges. (Prefixes rather than `default` tell `ip -batch` the family.)
const ROUTES: [&str; 5] = [
    "route add 0.0.0.0/0 via 192.168.1.254",
    "route add ::/0 via fd00:1::fffe",
    "route add 10.2.0.0/16 via 192.168.1.2",
    "route add 10.3.0.0/16 via 172.16.0.2",
    "route add fd00:10:2::/64 via fd00:1::2",
];

impl Netns {
    /// A fresh namespace set up as a node (see the module's doc), with its gateway in a second
    /// namespace; both are removed on drop.
    pub fn node_like(tag: &str) -> Netns {
        let mut node = Netns::new(tag);
        let gateway = Netns::new(&format!("{tag}-gw"));
        for ns in [&node, &gateway] {
            // Without DAD the IPv6 addresses, the link-local ones included, are final at once,
            // so the addresses the proxy reads do not change between its syncs.
            let out =
                ns.run(&["sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"], "");
            assert!(out.status.success(), "sysctl in {}: {}", ns.name, String::from_utf8_lossy(&out.stderr));
        }
        let mut uplink = vec!["link set lo up".to_string()];
        uplink.push(format!("link add {UPLINK} type veth peer name uplink netns {}", gateway.name));
        uplink.extend(ADDRESSES.iter().map(|a| format!("addr add {a} dev {UPLINK}")));
        uplink.push(format!("link set {UPLINK} up"));
        ip_batch(&node, &uplink);
        let mut far_end: Vec<String> = GATEWAY.iter().map(|a| format!("addr add {a} dev uplink")).collect();
        far_end.push("link set uplink up".into());
        ip_batch(&gateway, &far_end);
        // The routes last: a gateway must be reachable on an up link to be accepted.
        ip_batch(&node, &ROUTES.map(String::from));
        node.attached.push(gateway);
        node
    }
}

impl Netns {
    /// A node-like namespace's gateway (the far end of its uplink).
    pub fn gateway(&self) -> &Netns {
        self.attached.first().expect("a node-like namespace has a gateway")
    }
}

/// Runs `ip -n NS -batch -` over `lines`, asserting success.
fn ip_batch(ns: &Netns, lines: &[String]) {
    let mut child = Command::new("ip")
        .args(["-n", &ns.name, "-batch", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ip -batch");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all((lines.join("\n") + "\n").as_bytes()).expect("write ip batch");
    drop(stdin);
    let out = child.wait_with_output().expect("wait ip -batch");
    assert!(out.status.success(), "ip -n {} -batch: {}", ns.name, String::from_utf8_lossy(&out.stderr));
}
