//! Incremental rendering: after any sequence of changes to any golden case, the state updated
//! in place equals a render from scratch that had the same slot history, frontend hand-overs
//! between colliding Services included.

use clap::Parser;
use kube_nftproxy::config::{Config, Flags};
use kube_nftproxy::model::{ApiObject, Model};
use kube_nftproxy::render::{MapName, Rendered, Ruleset, Update, render_after};

/// A small deterministic generator, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// One random change to the objects: remove, restore, copy a Service under a name sorting
/// before or after it (same IPs, so frontends collide), change endpoints, move a ClusterIP,
/// or change this node's pod CIDRs or addresses.
fn mutate(objects: &mut Vec<ApiObject>, removed: &mut Vec<ApiObject>, rng: &mut Rng, step: usize) {
    let i = rng.below(objects.len());
    if let Some(ApiObject::Node(node)) = objects.get_mut(i)
        && rng.below(2) == 0
    {
        change_node(node, rng.below(3));
        return;
    }
    match rng.below(6) {
        0 if !objects.is_empty() => removed.push(objects.remove(i)),
        1 if !removed.is_empty() => {
            let back = removed.remove(rng.below(removed.len()));
            objects.push(back);
        }
        2 => {
            if let Some(ApiObject::Service(svc)) = objects.get(i) {
                let mut copy = svc.clone();
                let name = copy.metadata.name.clone().unwrap_or_default();
                let prefix = if rng.below(2) == 0 { "a" } else { "z" };
                copy.metadata.name = Some(format!("{prefix}{step}-{name}"));
                objects.push(ApiObject::Service(copy));
            }
        }
        3 | 4 => {
            if let Some(ApiObject::EndpointSlice(slice)) = objects.get_mut(i) {
                let n = slice.endpoints.len();
                if n > 1 && rng.below(2) == 0 {
                    slice.endpoints.remove(rng.below(n));
                } else if let Some(first) = slice.endpoints.first().cloned() {
                    let mut ep = first;
                    ep.addresses = ep.addresses.iter().map(|a| bump(a, step)).collect();
                    slice.endpoints.push(ep);
                }
            }
        }
        _ => {
            let ips: Vec<String> = objects
                .iter()
                .filter_map(|o| match o {
                    ApiObject::Service(s) => s.spec.as_ref()?.cluster_ip.clone(),
                    _ => None,
                })
                .collect();
            if let (Some(ApiObject::Service(svc)), false) = (objects.get_mut(i), ips.is_empty()) {
                let ip = ips[rng.below(ips.len())].clone();
                if let Some(spec) = svc.spec.as_mut() {
                    spec.cluster_ips = Some(vec![ip.clone()]);
                    spec.cluster_ip = Some(ip);
                }
            }
        }
    }
}

/// Changes what the rules take from the Node: its pod CIDRs (what `NodeCIDR` detects), or its
/// IPv6 or IPv4 addresses (NodePort addresses, the source-range node IP).
fn change_node(node: &mut k8s_openapi::api::core::v1::Node, what: usize) {
    use k8s_openapi::api::core::v1::NodeAddress;
    match what {
        0 => {
            let spec = node.spec.get_or_insert_with(Default::default);
            spec.pod_cidrs = match spec.pod_cidrs.as_deref() {
                Some([first, ..]) if first == "10.9.0.0/16" => None,
                Some(_) => Some(vec!["10.9.0.0/16".into()]),
                None => Some(vec!["10.1.0.0/24".into(), "fd00:10:1::/64".into()]),
            };
            spec.pod_cidr = None;
        }
        _ => {
            let v6 = what == 1;
            let addresses = node.status.get_or_insert_with(Default::default).addresses.get_or_insert_with(Vec::new);
            let before = addresses.len();
            addresses.retain(|a| a.address.contains(':') != v6);
            if addresses.len() == before {
                let address = if v6 { "fd00:192:168::9" } else { "192.168.0.9" };
                addresses.push(NodeAddress { address: address.into(), type_: "InternalIP".into() });
            }
        }
    }
}

/// An address shifted by `step` in its last part, of the same family.
fn bump(addr: &str, step: usize) -> String {
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.{}", 100 + step % 150)
        }
        Ok(std::net::IpAddr::V6(v6)) => {
            let mut seg = v6.segments();
            seg[7] = 0x100 + step as u16;
            std::net::Ipv6Addr::from(seg).to_string()
        }
        Err(_) => addr.to_string(),
    }
}

fn config(case: &crate::common::Case) -> Config {
    let mut argv = vec!["kube-nftproxy".to_string(), "--hostname-override=node-a".to_string()];
    argv.extend(case.args.iter().cloned());
    Config::from_flags(&Flags::parse_from(argv)).unwrap()
}

/// Names what differs between two rulesets, for a readable failure.
fn difference(a: &Ruleset, b: &Ruleset) -> String {
    let mut out = Vec::new();
    for (x, y) in a.tables.iter().zip(&b.tables) {
        for (name, body) in &x.chains {
            if y.chains.get(name) != Some(body) {
                out.push(format!("chain {name}: {body:?} vs {:?}", y.chains.get(name)));
            }
        }
        out.extend(y.chains.keys().filter(|n| !x.chains.contains_key(*n)).map(|n| format!("missing chain {n}")));
        for (map, entries) in &x.elements {
            for (key, e) in entries {
                let other = y.elements.get(map).and_then(|m| m.get(key));
                if other != Some(e) {
                    out.push(format!("{map} {key:?}: {e:?} vs {other:?}"));
                }
            }
        }
        for (map, entries) in &y.elements {
            for key in entries.keys().filter(|k| x.elements.get(map).is_none_or(|m| !m.contains_key(*k))) {
                out.push(format!("{map} {key:?}: missing"));
            }
        }
        if x.warnings != y.warnings {
            out.push(format!("warnings {:?} vs {:?}", x.warnings, y.warnings));
        }
        if x.affinity_maps != y.affinity_maps {
            out.push("affinity sets differ".into());
        }
    }
    out.join("\n")
}

#[test]
fn updates_in_place_equal_renders_from_scratch() {
    let mut patched = 0;
    for case in crate::common::golden_cases() {
        let cfg = config(&case);
        let mut objects = kube_nftproxy::manifests::load(&case.dir.join("manifests.yaml")).unwrap().objects;
        let mut removed = Vec::new();
        let mut model = Model::from_objects(&objects, "node-a").0;
        model.take_changes();
        let mut rendered = Rendered::build(&model, &cfg, None).unwrap();
        let mut rng = Rng(case.name.len() as u64);
        for step in 0..120 {
            mutate(&mut objects, &mut removed, &mut rng, step);
            model.replace(Model::from_objects(&objects, "node-a").0);
            let changes = model.take_changes();
            let before = rendered.ruleset().clone();
            let update = rendered.update(&model, &cfg, &changes).unwrap();
            patched += usize::from(matches!(update, Update::Patched(_)));
            let fresh = render_after(&model, &cfg, Some(&before)).unwrap();
            assert!(
                rendered.ruleset() == &fresh,
                "{} step {step}: the updated state differs from a fresh render:\n{}",
                case.name,
                difference(rendered.ruleset(), &fresh)
            );
        }
    }
    assert!(patched > 1000, "only {patched} updates went the incremental way");
}

#[test]
fn an_unchanged_model_updates_nothing() {
    let case = crate::common::golden_cases().into_iter().find(|c| c.name == "loadbalancer").unwrap();
    let cfg = config(&case);
    let objects = kube_nftproxy::manifests::load(&case.dir.join("manifests.yaml")).unwrap().objects;
    let mut model = Model::from_objects(&objects, "node-a").0;
    model.take_changes();
    let mut rendered = Rendered::build(&model, &cfg, None).unwrap();
    model.replace(Model::from_objects(&objects, "node-a").0);
    let changes = model.take_changes();
    assert!(changes.services.is_empty() && !changes.global, "{changes:?}");
    match rendered.update(&model, &cfg, &changes).unwrap() {
        Update::Patched(journals) => assert!(journals.iter().all(|j| j.elements.is_empty() && j.chains.is_empty())),
        other => panic!("expected an empty patch, got {other:?}"),
    }
}

#[test]
fn a_service_cidr_change_patches_its_set_alone() {
    let case = crate::common::golden_cases().into_iter().find(|c| c.name == "service-cidrs").unwrap();
    let cfg = config(&case);
    let objects = kube_nftproxy::manifests::load(&case.dir.join("manifests.yaml")).unwrap().objects;
    let mut model = Model::from_objects(&objects, "node-a").0;
    model.take_changes();
    let mut rendered = Rendered::build(&model, &cfg, None).unwrap();
    let without: Vec<ApiObject> = objects
        .iter()
        .filter(|o| !matches!(o, ApiObject::ServiceCidr(s) if s.metadata.name.as_deref() == Some("kubernetes")))
        .cloned()
        .collect();
    model.replace(Model::from_objects(&without, "node-a").0);
    let changes = model.take_changes();
    assert!(changes.service_cidrs && changes.services.is_empty() && !changes.global, "{changes:?}");
    let before = rendered.ruleset().clone();
    let Update::Patched(journals) = rendered.update(&model, &cfg, &changes).unwrap() else {
        panic!("a ServiceCIDR change must patch in place");
    };
    for j in &journals {
        assert!(j.chains.is_empty() && j.sets.is_empty(), "chains or sets touched: {j:?}");
        assert!(j.elements.keys().all(|(map, _)| *map == MapName::ServiceCidrs), "{j:?}");
    }
    let touched: Vec<String> = journals.iter().flat_map(|j| j.elements.keys().map(|(_, k)| format!("{k:?}"))).collect();
    // `kubernetes` held 172.30.0.0/16, which covered `inner`'s 172.30.128.0/17; the IPv6 range
    // of `inner` (fd00:172:30::/112) now shows instead of `kubernetes`'s /108.
    assert_eq!(touched.len(), 4, "{touched:?}");
    assert_eq!(rendered.ruleset(), &render_after(&model, &cfg, Some(&before)).unwrap());
    let v4 = &rendered.ruleset().tables[0];
    let left: Vec<String> = v4.elements[&MapName::ServiceCidrs].keys().map(|k| format!("{k:?}")).collect();
    assert_eq!(left, ["Cidr(172.30.128.0/17)", "Cidr(172.31.0.0/24)", "Cidr(172.31.1.0/24)"]);
}

#[test]
fn a_node_pod_cidr_change_renders_the_detector_again() {
    let case = crate::common::golden_cases().into_iter().find(|c| c.name == "detect-local-node-cidr").unwrap();
    let cfg = config(&case);
    let mut objects = kube_nftproxy::manifests::load(&case.dir.join("manifests.yaml")).unwrap().objects;
    let mut model = Model::from_objects(&objects, "node-a").0;
    model.take_changes();
    let mut rendered = Rendered::build(&model, &cfg, None).unwrap();
    let Some(ApiObject::Node(node)) = objects.iter_mut().find(|o| matches!(o, ApiObject::Node(_))) else {
        panic!("the case has a Node");
    };
    change_node(node, 0);
    model.replace(Model::from_objects(&objects, "node-a").0);
    let changes = model.take_changes();
    assert!(changes.global, "a pod CIDR change must re-render everything: {changes:?}");
    let before = rendered.ruleset().clone();
    let Update::Rebuilt(old) = rendered.update(&model, &cfg, &changes).unwrap() else {
        panic!("a Node change rebuilds");
    };
    assert_eq!(old, before);
    assert_eq!(rendered.ruleset(), &render_after(&model, &cfg, Some(&before)).unwrap());
    let v4 = &rendered.ruleset().tables[0];
    let want = kube_nftproxy::render::Detector::Cidrs(vec!["10.9.0.0/16".parse().unwrap()]);
    assert_eq!(v4.fixed.local, want);
    assert_eq!(rendered.ruleset().tables[1].fixed.local, kube_nftproxy::render::Detector::None);
}
