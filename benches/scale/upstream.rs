//! Upstream kube-proxy's two nftables rule shapes for the same services, written by the
//! benchmark itself from the description in `../shared/research/` (not from upstream's code).
//!
//! - GA (1.31-1.33): a chain per service with an anonymous `numgen … vmap` to a chain per
//!   endpoint, each with a hairpin masquerade jump and a DNAT.
//! - Newest (1.36+): a chain per service with an anonymous `numgen … map` inside the DNAT,
//!   no endpoint chains.

use super::synth::{Case, cluster_ip, endpoint_ip};
use std::fmt::Write;

/// Which upstream shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Per-service anonymous vmap to per-endpoint chains.
    Ga,
    /// Per-service anonymous map in the DNAT.
    Newest,
}

/// The whole table in `shape` for `case` (ClusterIP traffic of every service).
pub fn script(case: &Case, shape: Shape) -> String {
    let mut s = String::with_capacity(case.services as usize * 400);
    s.push_str("add table ip kube-proxy\ndelete table ip kube-proxy\ntable ip kube-proxy {\n");
    s.push_str("\tmap service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }\n");
    s.push_str("\tchain mark-for-masquerade { meta mark set meta mark or 0x4000 ; }\n");
    s.push_str("\tchain services { ip daddr . meta l4proto . th dport vmap @service-ips ; }\n");
    s.push_str("\tchain nat-prerouting { type nat hook prerouting priority -100; policy accept; jump services ; }\n");
    for i in 0..case.services {
        service(&mut s, case, i, shape);
    }
    s.push_str("}\nadd element ip kube-proxy service-ips {\n");
    for i in 0..case.services {
        let _ = writeln!(s, "\t{} . tcp . 80 : goto service-bench/svc-{i}/tcp/http,", cluster_ip(i));
    }
    s.push_str("}\n");
    s
}

fn service(s: &mut String, case: &Case, i: u32, shape: Shape) {
    let n = case.endpoints;
    let eps: Vec<String> = (0..n).map(|e| endpoint_ip(i, e, n, 0)).collect();
    let masq = format!("ip daddr {} tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade", cluster_ip(i));
    let _ = write!(s, "\tchain service-bench/svc-{i}/tcp/http {{\n\t\t{masq}\n\t\t");
    match shape {
        Shape::Ga => {
            let arms: Vec<String> = eps
                .iter()
                .enumerate()
                .map(|(k, ep)| format!("{k} : goto endpoint-bench/svc-{i}/tcp/http__{ep}/8080"))
                .collect();
            let _ = writeln!(s, "numgen random mod {n} vmap {{ {} }}\n\t}}", arms.join(", "));
            for ep in &eps {
                let _ = writeln!(
                    s,
                    "\tchain endpoint-bench/svc-{i}/tcp/http__{ep}/8080 {{\n\t\tip saddr {ep} jump mark-for-masquerade\n\t\tmeta l4proto tcp dnat ip to {ep}:8080\n\t}}"
                );
            }
        }
        Shape::Newest => {
            let arms: Vec<String> = eps.iter().enumerate().map(|(k, ep)| format!("{k} : {ep} . 8080")).collect();
            let _ = writeln!(
                s,
                "meta l4proto tcp dnat ip addr . port to numgen random mod {n} map {{ {} }}\n\t}}",
                arms.join(", ")
            );
        }
    }
}
