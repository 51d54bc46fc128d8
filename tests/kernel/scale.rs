//! Correctness at scale: after a full sync of 30k services x 5 endpoints and partial syncs
//! changing 1 and then 100 services, the kernel's maps hold exactly the expected elements.
//! It runs on a node-like namespace, with the host's addresses read before every sync as the
//! daemon does. (The timings of the same steps are the scale benchmark's business.)

use crate::common::synth;
use crate::common::verify;

use crate::common::kernel_available;
use crate::common::proxy::Proxy;
use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::nft::{Resync, SyncKind};
use kube_nftproxy::render;

#[test]
fn thirty_thousand_services_then_partial_syncs_leave_exactly_the_expected_elements() {
    if !kernel_available() {
        return;
    }
    let case = synth::Case { name: "30k x 5".into(), services: 30_000, endpoints: 5, mix: false };
    let cfg = Config::from_flags(&Flags::parse_from([
        "kube-nftproxy",
        "--hostname-override=node-a",
        "--cluster-cidr=10.0.0.0/8",
    ]))
    .unwrap();
    let ns = crate::common::Netns::node_like("scale");
    let mut proxy = Proxy::with_model(cfg.clone(), synth::model(&case)).reading_host_addresses();
    let mut kinds = Vec::new();
    for changed in [0..0, 7..8, 100..200] {
        for i in changed {
            proxy.model.apply(&synth::slice(&case, i, 1), "node-a").unwrap();
        }
        kinds.push(proxy.sync(&ns.name, Resync::Changes).unwrap().kind);
    }
    assert_eq!(kinds, [SyncKind::Full, SyncKind::Partial, SyncKind::Partial]);
    let seen: Vec<String> = proxy.model.host_addresses().iter().map(ToString::to_string).collect();
    for want in crate::common::node::ADDRESSES.map(|a| a.split('/').next().unwrap()) {
        assert!(seen.iter().any(|s| s == want), "{want} not among the host's addresses {seen:?}");
    }
    // What was updated in place is what a render from scratch gives, and the kernel holds it.
    let fresh = render::render_after(&proxy.model, &cfg, Some(proxy.ruleset())).unwrap();
    assert!(&fresh == proxy.ruleset(), "the updated state differs from a fresh render");
    verify::verify(&ns, &fresh);
}
