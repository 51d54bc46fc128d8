//! First-packet connect latency through a small and a large table (`--latency SMALL LARGE`):
//! the same rig and the same service at both sizes, so the table's size is all that differs.

use super::common::{proxy::Proxy, synth};
use super::{config, measure};
use kube_nftproxy::nft::Resync;
use serde_json::{Value, json};
use synth::Case;

/// A latency rig whose node holds a table of `services` services (service 0 has one endpoint,
/// the rig's pod).
pub fn latency_rig(services: u32) -> measure::LatencyRig {
    latency_rig_with_model(services).0
}

/// As [`latency_rig`], with the model its node's table was synced from.
pub fn latency_rig_with_model(services: u32) -> (measure::LatencyRig, kube_nftproxy::model::Model) {
    let case = Case { name: format!("{services} x 5"), services, endpoints: 5, mix: false };
    let mut model = synth::model(&case);
    let single = Case { endpoints: 1, ..case.clone() };
    model.apply(&synth::slice(&single, 0, 0), "node-a").expect("slice");
    let rig = measure::LatencyRig::new();
    let mut proxy = Proxy::with_model(config(), model.clone());
    proxy.sync(&rig.node.name, Resync::Changes).expect("sync");
    (rig, model)
}

/// First-packet connect latency through a small and a large table, measured in alternating
/// rounds so drift on the machine hits both alike.
pub fn run(small: u32, large: u32) -> Value {
    let rigs = [latency_rig(small), latency_rig(large)];
    let dst = format!("{}:80", synth::cluster_ip(0));
    let mut samples: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _round in 0..10 {
        for (rig, out) in rigs.iter().zip(samples.iter_mut()) {
            out.extend(rig.connect_latencies(&dst, 50));
        }
    }
    let stats = |mut v: Vec<f64>, services: u32| {
        v.sort_by(f64::total_cmp);
        let (median, p99) = (v[v.len() / 2], v[v.len() * 99 / 100]);
        json!({"services": services, "median_us": (median * 10.0).round() / 10.0, "p99_us": (p99 * 10.0).round() / 10.0})
    };
    let [a, b] = samples;
    json!([stats(a, small), stats(b, large)])
}
