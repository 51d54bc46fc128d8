//! Correctness at scale: after a full sync of 30k services x 5 endpoints and partial syncs
//! changing 1 and then 100 services, the kernel's maps hold exactly the expected elements.
//! (The timings of the same steps are the scale benchmark's business, not this test's.)

mod common;
#[path = "../benches/scale/synth.rs"]
mod synth;
#[path = "../benches/scale/verify.rs"]
mod verify;

use clap::Parser;
use common::kernel_available;
use common::net::in_netns;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::nft::{Applier, OwnPids, SyncKind};
use kube_nftproxy::render;
use std::sync::Arc;

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
    let mut model = synth::model(&case);
    let ns = common::Netns::new("scale");
    let mut applier = Some(Applier::new("node-a", Arc::new(OwnPids::default())));
    let mut kinds = Vec::new();
    for changed in [0..0, 7..8, 100..200] {
        for i in changed {
            model.apply(&synth::slice(&case, i, 1), "node-a").unwrap();
        }
        let a = applier.take().unwrap();
        let desired = render::render_after(&model, &cfg, a.applied()).unwrap();
        let (a, kind) = in_netns(&ns.name, move || {
            let mut a = a;
            let r = a.sync(desired, false).map(|r| r.kind).map_err(|e| e.to_string());
            (a, r)
        });
        applier = Some(a);
        kinds.push(kind.unwrap());
    }
    assert_eq!(kinds, [SyncKind::Staged, SyncKind::Partial, SyncKind::Partial]);
    let applier = applier.unwrap();
    verify::verify(&ns, &render::render_after(&model, &cfg, applier.applied()).unwrap());
}
