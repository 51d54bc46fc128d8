//! The reasons given for endpoints passed over, and over many random cases the same selection
//! as the reference written before reasons were given.

use super::*;

#[test]
fn each_endpoint_passed_over_has_its_reason() {
    use Choice::{Chosen, NotNeeded, Passed};
    let me = "node-a";
    /// Name, policy, zone, endpoints, and per endpoint what (Cluster, Local) traffic does with it.
    type Row = (&'static str, &'static str, Option<&'static str>, Vec<Endpoint>, Vec<(Choice, Choice)>);
    let cases: Vec<Row> = vec![
        (
            "not ready; terminating behind a ready one",
            "",
            None,
            vec![e(1, "R", me, &[], &[]), e(2, "-", me, &[], &[]), e(3, "ST", me, &[], &[]), e(4, "T", me, &[], &[])],
            vec![
                (Chosen, NotNeeded),
                (Passed(Unused::NotReady), NotNeeded),
                (Passed(Unused::Terminating), NotNeeded),
                (Passed(Unused::NotReady), NotNeeded),
            ],
        ),
        (
            "zone hints",
            "",
            Some("z1"),
            vec![e(1, "R", me, &["z1"], &[]), e(2, "R", "node-b", &["z2"], &[])],
            vec![(Chosen, NotNeeded), (Passed(Unused::Topology(Hints::Zone)), NotNeeded)],
        ),
        (
            "node hints",
            "",
            Some("z1"),
            vec![e(1, "R", "node-b", &["z1"], &[me]), e(2, "R", me, &["z1"], &["node-b"])],
            vec![(Chosen, NotNeeded), (Passed(Unused::Topology(Hints::Node)), NotNeeded)],
        ),
        (
            "internal Local",
            "itp",
            None,
            vec![e(1, "R", me, &[], &[]), e(2, "R", "node-b", &[], &[]), e(3, "ST", me, &[], &[])],
            vec![(NotNeeded, Chosen), (NotNeeded, Passed(Unused::OtherNode)), (NotNeeded, Passed(Unused::Terminating))],
        ),
        (
            "external Local: a remote ready endpoint serves Cluster traffic only",
            "etp",
            None,
            vec![e(1, "R", "node-b", &[], &[]), e(2, "ST", me, &[], &[])],
            vec![(Chosen, Passed(Unused::OtherNode)), (Passed(Unused::Terminating), Chosen)],
        ),
    ];
    for (name, policy, zone, endpoints, want) in cases {
        let got: Vec<(Choice, Choice)> =
            endpoint_uses(&endpoints, &sp(policy), me, zone).iter().map(|u| (u.cluster, u.local)).collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn an_endpoint_is_unused_only_when_no_scope_chooses_it() {
    let eps = vec![e(1, "R", "node-b", &[], &[]), e(2, "-", "node-b", &[], &[]), e(3, "R", "node-b", &["z2"], &[])];
    let uses = endpoint_uses(&eps, &sp("etp"), "node-a", None);
    assert_eq!(uses[0].unused(), None, "Cluster traffic (from pods) uses it, though external traffic does not");
    assert_eq!(uses[1].unused(), Some(Unused::NotReady), "the Cluster scope's reason, the wider one");
    let uses = endpoint_uses(&eps[..1], &sp("itp"), "node-a", None);
    assert_eq!(uses[0].unused(), Some(Unused::OtherNode));
    let names: Vec<&str> = [Unused::NotReady, Unused::Terminating, Unused::Topology(Hints::Zone), Unused::OtherNode]
        .iter()
        .map(|u| u.name())
        .collect();
    assert_eq!(names, ["not-ready", "terminating", "topology", "other-node"], "the JSON's names are stable");
}

/// Endpoint selection as it was written before reasons were given (one pass per rule), kept
/// as the reference the shared rules must match.
fn reference<'a>(
    endpoints: &'a [Endpoint],
    sp: &ServicePort,
    node: &str,
    zone: Option<&str>,
) -> (Vec<&'a Endpoint>, Vec<&'a Endpoint>, bool) {
    let pick =
        |keep: &dyn Fn(&Endpoint) -> bool| -> Vec<&'a Endpoint> { endpoints.iter().filter(|e| keep(e)).collect() };
    let (mut cluster, mut local, mut has_any) = (Vec::new(), Vec::new(), false);
    if sp.uses_cluster_endpoints() {
        let ready: Vec<&Endpoint> = endpoints.iter().filter(|e| e.ready).collect();
        let hinted = |f: &dyn Fn(&Endpoint) -> &[String], name: Option<&str>| {
            !ready.is_empty()
                && ready.iter().all(|e| !f(e).is_empty())
                && name.is_some_and(|n| ready.iter().any(|e| f(e).iter().any(|h| h == n)))
        };
        let by_node = hinted(&|e| &e.node_hints, Some(node));
        let by_zone = !by_node && hinted(&|e| &e.zone_hints, zone);
        let allowed = |e: &Endpoint| {
            (!by_node || e.node_hints.iter().any(|n| n == node))
                && (!by_zone || zone.is_some_and(|z| e.zone_hints.iter().any(|h| h == z)))
        };
        cluster = pick(&|e| e.ready && allowed(e));
        if cluster.is_empty() {
            cluster = pick(&|e| e.serving && e.terminating);
        }
        has_any = !cluster.is_empty();
    }
    if sp.uses_local_endpoints() {
        has_any |= endpoints.iter().any(|e| e.ready || (e.serving && e.terminating));
        let mine = |e: &Endpoint| e.node_name.as_deref() == Some(node);
        local = pick(&|e| mine(e) && e.ready);
        if local.is_empty() {
            local = pick(&|e| mine(e) && e.serving && e.terminating);
        }
    }
    (cluster, local, has_any)
}

/// A random endpoint `n` drawn from the states, nodes and hints that matter to selection.
fn random_endpoint(rng: &mut fastrand::Rng, n: u8) -> Endpoint {
    let flags = ["R", "ST", "T", "-"][rng.usize(..4)];
    let node = ["node-a", "node-b", ""][rng.usize(..3)];
    let zones: &[&[&str]] = &[&[], &["z1"], &["z2"], &["z1", "z2"]];
    let nodes: &[&[&str]] = &[&[], &["node-a"], &["node-b"]];
    let mut ep = e(n, flags, node, zones[rng.usize(..4)], nodes[rng.usize(..3)]);
    // Not-ready but serving (the API allows it) must be read as not ready too.
    if flags == "-" && rng.bool() {
        ep.serving = true;
    }
    ep
}

#[test]
fn reasons_and_selection_agree_over_many_random_cases() {
    let mut rng = fastrand::Rng::with_seed(14);
    let me = "node-a";
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20_000 {
        let policy = ["", "itp", "etp", "both"][rng.usize(..4)];
        let zone = [None, Some("z1"), Some("z3")][rng.usize(..3)];
        let endpoints: Vec<Endpoint> = (0..rng.u8(..6)).map(|n| random_endpoint(&mut rng, n)).collect();
        let port = sp(policy);
        let got = categorize_endpoints(&endpoints, &port, me, zone);
        let (cluster, local, has_any) = reference(&endpoints, &port, me, zone);
        let case = format!("policy {policy:?}, zone {zone:?}, endpoints {endpoints:#?}");
        assert_eq!((&got.cluster, &got.local, got.has_any), (&cluster, &local, has_any), "{case}");
        let uses = endpoint_uses(&endpoints, &port, me, zone);
        let chosen = |scope: fn(&kube_nftproxy::topology::EndpointUse) -> Choice| -> Vec<&Endpoint> {
            uses.iter().filter(|u| scope(u).chosen()).map(|u| u.endpoint).collect()
        };
        assert_eq!(chosen(|u| u.cluster), got.cluster, "cluster: {case}");
        assert_eq!(chosen(|u| u.local), got.local, "local: {case}");
        for u in &uses {
            let ep = u.endpoint;
            assert_eq!(u.cluster == Choice::NotNeeded, !port.uses_cluster_endpoints(), "{case}");
            assert_eq!(u.local == Choice::NotNeeded, !port.uses_local_endpoints(), "{case}");
            for (scope, choice, of_scope) in [("cluster", u.cluster, &got.cluster), ("local", u.local, &got.local)] {
                let Some(why) = choice.passed() else { continue };
                seen.insert(why);
                let holds = match why {
                    Unused::NotReady => !(ep.ready || ep.serving && ep.terminating),
                    Unused::Terminating => {
                        !ep.ready && ep.serving && ep.terminating && of_scope.iter().all(|c| c.ready)
                    }
                    Unused::Topology(Hints::Node) => ep.ready && !ep.node_hints.iter().any(|n| n == me),
                    Unused::Topology(Hints::Zone) => {
                        ep.ready && zone.is_some_and(|z| !ep.zone_hints.iter().any(|h| h == z))
                    }
                    Unused::OtherNode => ep.node_name.as_deref() != Some(me),
                };
                assert!(holds, "{scope} passes over {ep:?} as {why:?}, which is not so: {case}");
            }
        }
    }
    assert_eq!(seen.len(), 5, "every reason comes up: {seen:?}");
}
