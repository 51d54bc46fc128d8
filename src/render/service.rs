//! Renders one service port into a table: its dispatch elements, its chains and its endpoint picks.

use super::builder::{Builder, LbKey, Pick, PortId};
use super::key::Key;
use super::maps::{MapName, Scope};
use super::ruleset::{AffinityGroup, Value};
use super::templates::{AffinityEndpoint, BalanceChain, ExternalChain, ServiceChain};
use super::{RenderError, render_template};
use super::{maglev, names};
use crate::model::{Endpoint, Family, Scheduler, ServicePort};
use crate::topology::Categorized;
use ipnet::IpNet;
use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

/// Where traffic entered: a service IP and port, or a node port.
#[derive(Debug, Clone, Copy)]
enum Frontend {
    Ip(IpAddr, u16),
    NodePort(u16),
}

/// The chain that picks a frontend's endpoint, and its key when the dispatch by endpoint
/// count (`super::dispatch`) can find it from the frontend's slots, so that a ClusterIP
/// needs no `service-ips` element to reach it.
struct Picked {
    chain: String,
    by_count: Option<LbKey>,
}

/// The facts about one service port that all its frontends share.
struct Port<'s> {
    sp: &'s ServicePort,
    owner: Arc<str>,
    base: String,
    cat: &'s Categorized<'s>,
    /// The scheduler served: the Service's, else the node's; an unserved one is random.
    scheduler: Scheduler,
    /// The `mh` table of each scope, made by its first frontend: its frontends all pick
    /// among the same endpoints.
    tables: [OnceCell<Vec<(IpAddr, u16)>>; 2],
}

impl Builder<'_> {
    /// Renders one service port as `id`, recording its share of the table.
    pub(super) fn add_port(&mut self, id: PortId, sp: &ServicePort, cat: &Categorized<'_>) -> Result<(), RenderError> {
        let owner: Arc<str> = Arc::from(sp.name.to_string());
        self.begin_port(id, owner.clone());
        let result = self.add_service_port(sp, cat, owner);
        self.end_port();
        result
    }

    /// Adds everything for one service port in this builder's family; a port without a
    /// ClusterIP of this family is not served in it.
    fn add_service_port(
        &mut self,
        sp: &ServicePort,
        cat: &Categorized<'_>,
        owner: Arc<str>,
    ) -> Result<(), RenderError> {
        let family = self.ctx.family;
        let Some(cluster_ip) = sp.cluster_ips.iter().copied().find(|ip| Family::of(ip) == family) else {
            return Ok(());
        };
        let scheduler = sp.scheduler_or(self.ctx.cfg.scheduler).served();
        let tables = Default::default();
        let p = Port { sp, owner, base: names::base(&sp.name, sp.port), cat, scheduler, tables };
        self.cluster_ip(&p, cluster_ip)?;
        let of_family = |ips: &[IpAddr]| ips.iter().copied().filter(|ip| Family::of(ip) == family).collect::<Vec<_>>();
        let mut external = of_family(&sp.external_ips);
        let lb_ips = of_family(&sp.load_balancer_ips);
        for ip in &lb_ips {
            if !external.contains(ip) {
                external.push(*ip);
            }
        }
        if external.contains(&cluster_ip) {
            // The ClusterIP has this port already; the external chain would take it over.
            self.warn(format!(
                "{owner}: its ClusterIP {cluster_ip} is also an external IP; served as the ClusterIP",
                owner = p.owner
            ));
            external.retain(|ip| *ip != cluster_ip);
        }
        let claimed = self.external_ips(&p, &external)?;
        // Source ranges guard only the LB IPs this service port really holds.
        let guarded: Vec<IpAddr> = lb_ips.into_iter().filter(|ip| claimed.contains(ip)).collect();
        self.firewall(&p, &guarded);
        if let Some(node_port) = sp.node_port.filter(|_| self.ctx.nodeports.enabled()) {
            self.node_port(&p, node_port)?;
        }
        for ep in cat.all_reachable() {
            if ep.node_name.as_deref() == Some(self.ctx.cfg.node_name.as_str()) {
                self.element(MapName::HairpinConnections, Key::SamePair(ep.ip), Value::None);
            }
        }
        Ok(())
    }

    /// ClusterIP traffic: to the chain that picks an endpoint (through a service chain that
    /// marks for masquerading under `--masquerade-all`), or dropped without local endpoints
    /// (rejected by `cluster-ips-check` without any).
    fn cluster_ip(&mut self, p: &Port, ip: IpAddr) -> Result<(), RenderError> {
        let key = Key::IpProtoPort(ip, p.sp.name.protocol, p.sp.port);
        self.element(MapName::ClusterIps, Key::Ip(ip), Value::None);
        if !self.claim(&key) {
            return Ok(());
        }
        let (scope, eps) =
            if p.sp.internal_policy_local { (Scope::Local, &p.cat.local) } else { (Scope::Cluster, &p.cat.cluster) };
        let Some(Picked { chain: pick, by_count }) = self.pick(p, scope, Frontend::Ip(ip, p.sp.port), eps)? else {
            // `cluster-ips-check` rejects every port of a ClusterIP that nothing DNATs: a reject
            // element of its own would be a jump, for which the kernel validates every jump of
            // the table when it is added (about 5 ms at 30k Services), for each new Service.
            if let drop @ Value::Drop(_) = self.no_endpoints(p) {
                self.element(MapName::NoEndpointServices, key, drop);
            }
            return Ok(());
        };
        if !self.ctx.cfg.masquerade_all {
            match by_count {
                Some(lb) => self.by_count(lb),
                // Straight to the shared chain: a chain per service would only hold this goto.
                None => self.element(MapName::ServiceIps, key, Value::Dispatch(Arc::from(pick), p.owner.clone())),
            }
            return Ok(());
        }
        let chain = names::service_chain(&p.base);
        let t = ServiceChain { mark: &self.ctx.mark, pick: &pick };
        self.chain(&chain, render_template(&t, "service.nft")?);
        self.element(MapName::ServiceIps, key, Value::Goto(chain));
        Ok(())
    }

    /// External IPs and LoadBalancer IPs share one chain; each IP has its own endpoint slots.
    /// Returns the IPs this service port holds (the others belong to an earlier service).
    fn external_ips(&mut self, p: &Port, ips: &[IpAddr]) -> Result<Vec<IpAddr>, RenderError> {
        let chain = names::external_chain(&p.base);
        let mut claimed = Vec::new();
        for ip in ips {
            let key = Key::IpProtoPort(*ip, p.sp.name.protocol, p.sp.port);
            if !self.claim(&key) {
                continue;
            }
            claimed.push(*ip);
            if self.external_chain(p, &chain, Frontend::Ip(*ip, p.sp.port))? {
                self.element(MapName::ServiceIps, key.clone(), Value::Goto(chain.clone()));
            }
            if !self.has_external_endpoints(p) {
                self.element(MapName::NoEndpointServices, key, self.no_endpoints(p));
            }
        }
        Ok(claimed)
    }

    fn node_port(&mut self, p: &Port, node_port: u16) -> Result<(), RenderError> {
        let chain = names::nodeport_chain(&p.base);
        let key = Key::ProtoPort(p.sp.name.protocol, node_port);
        if !self.claim(&key) {
            return Ok(());
        }
        if self.external_chain(p, &chain, Frontend::NodePort(node_port))? {
            self.element(MapName::ServiceNodeports, key.clone(), Value::Goto(chain));
        }
        if !self.has_external_endpoints(p) {
            self.element(MapName::NoEndpointNodeports, key, self.no_endpoints(p));
        }
        Ok(())
    }

    /// Writes an external or NodePort chain; false when the service has no endpoints at all,
    /// so there is nothing for the chain to lead to.
    fn external_chain(&mut self, p: &Port, chain: &str, frontend: Frontend) -> Result<bool, RenderError> {
        let Some(Picked { chain: cluster_pick, .. }) = self.pick(p, Scope::Cluster, frontend, &p.cat.cluster)? else {
            return Ok(false);
        };
        let local_pick = match p.sp.external_policy_local {
            true => self.pick(p, Scope::Local, frontend, &p.cat.local)?.map(|picked| picked.chain),
            false => None,
        };
        let t = ExternalChain {
            fam: self.ctx.words.fam,
            mark: &self.ctx.mark,
            local_policy: p.sp.external_policy_local,
            local: &self.ctx.local,
            cluster_pick: &cluster_pick,
            local_pick: local_pick.as_deref(),
        };
        self.chain(chain, render_template(&t, "external.nft")?);
        Ok(true)
    }

    fn has_external_endpoints(&self, p: &Port) -> bool {
        if p.sp.external_policy_local { !p.cat.local.is_empty() } else { p.cat.has_any }
    }

    /// Reject when no endpoint exists anywhere; drop when endpoints exist but policy forbids them.
    fn no_endpoints(&self, p: &Port) -> Value {
        if p.cat.has_any { Value::Drop(p.owner.clone()) } else { Value::Reject(p.owner.clone()) }
    }

    /// LoadBalancer source ranges: only LB IPs, checked before DNAT.
    fn firewall(&mut self, p: &Port, lb_ips: &[IpAddr]) {
        let family = self.ctx.family;
        let ranges: Vec<IpNet> =
            p.sp.source_ranges.iter().filter(|r| Family::of(&r.addr()) == family).copied().collect();
        if ranges.is_empty() {
            return;
        }
        // Upstream's node IP of this family, not every address the Node lists.
        let node_ip = super::node_ip(self.ctx.cfg, self.ctx.node, family);
        let node_in_range = ranges.iter().any(|r| r.contains(&node_ip));
        let (proto, port) = (p.sp.name.protocol, p.sp.port);
        for ip in lb_ips {
            self.element(MapName::FirewallIps, Key::IpProtoPort(*ip, proto, port), Value::None);
            let mut allowed = ranges.clone();
            if node_in_range {
                // Traffic from this node to its own LB IP carries the LB IP as source.
                allowed.push(IpNet::from(*ip));
            }
            for src in outermost(allowed) {
                self.element(MapName::FirewallAllow, Key::Allow(Box::new((*ip, proto, port, src))), Value::None);
            }
        }
    }

    /// Returns the chain that picks one of `eps` for traffic that entered at `frontend`,
    /// adding the endpoint map slots it needs; `None` when `eps` is empty.
    fn pick(
        &mut self,
        p: &Port,
        scope: Scope,
        frontend: Frontend,
        eps: &[&Endpoint],
    ) -> Result<Option<Picked>, RenderError> {
        if eps.is_empty() {
            return Ok(None);
        }
        if let Some(timeout) = p.sp.affinity_timeout {
            return self.affinity_pick(p, scope, eps, timeout).map(|chain| Some(Picked { chain, by_count: None }));
        }
        let proto = p.sp.name.protocol;
        let nodeport = matches!(frontend, Frontend::NodePort(_));
        let map = |slot: u32| MapName::endpoints(scope, proto, nodeport, slot as usize);
        let slot_key = |slot: u32| match frontend {
            Frontend::Ip(ip, port) => Key::IpSlot(ip, port, slot),
            Frontend::NodePort(port) => Key::PortSlot(port, slot),
        };
        let (slots, pick) = match p.scheduler {
            Scheduler::SourceHash { port } => (sorted(eps), Pick::Hash { port }),
            Scheduler::Maglev { port } => {
                let ends = || maglev::table(&eps.iter().map(|e| (e.ip, e.port)).collect::<Vec<_>>());
                (p.tables[scope as usize].get_or_init(ends).clone(), Pick::Hash { port })
            }
            other => {
                let old: Vec<(IpAddr, u16)> = (0u32..)
                    .map_while(|slot| match self.previous_value(map(slot), &slot_key(slot))? {
                        Value::Endpoint(ip, port, _) => Some((*ip, *port)),
                        _ => None,
                    })
                    .collect();
                let turn = Pick::Turn(names::turn_shard(&p.base));
                let pick = if other == Scheduler::RoundRobin { turn } else { Pick::Random };
                (stable_slots(&old, eps), pick)
            }
        };
        for (slot, (ip, port)) in (0u32..).zip(&slots) {
            let owner = (slot == 0).then(|| p.owner.clone());
            self.element(map(slot), slot_key(slot), Value::Endpoint(*ip, *port, owner));
        }
        let key = LbKey { scope, nodeport, proto, n: slots.len(), pick };
        if let Pick::Turn(shard) = pick {
            return self.turns(p, key, shard).map(|chain| Some(Picked { chain, by_count: None }));
        }
        self.use_lb(key)?;
        Ok(Some(Picked { chain: names::lb_chain(&key), by_count: (pick == Pick::Random).then_some(key) }))
    }

    /// A round-robin port's own chain, whose turn (a counter of its rule's) leads through
    /// the `turns` map to the shared chain of that slot: only those few chains read the
    /// endpoint map, for the kernel checks every rule that reads a map for each element
    /// added to it.
    fn turns(&mut self, p: &Port, key: LbKey, shard: u8) -> Result<String, RenderError> {
        let base = names::turn_base(key.scope, key.nodeport, key.proto);
        for (k, turn) in (0..key.n).zip(base..) {
            let slot = LbKey { n: k, pick: Pick::Slot, ..key };
            self.use_lb(slot)?;
            self.element(MapName::Turns(shard), Key::Turn(turn), Value::Goto(names::lb_chain(&slot)));
        }
        let chain = names::rr_chain(key.scope, key.nodeport, &p.base);
        self.chain(&chain, super::lb::lb_chain(self.ctx.words, key)?);
        Ok(chain)
    }

    /// Session affinity: one chain per scope. An entry (client . number of group and endpoint)
    /// in one of a few shared maps says where a client went; a known client is sent back
    /// there and its entry refreshed (as upstream's `update`), a new one is spread evenly and
    /// remembered as it is sent. No set or chain per endpoint or service: see the module doc.
    fn affinity_pick(
        &mut self,
        p: &Port,
        scope: Scope,
        eps: &[&Endpoint],
        timeout: u32,
    ) -> Result<String, RenderError> {
        let chain = names::balance_chain(scope, &p.base);
        if self.table.chains.contains_key(&chain) {
            return Ok(chain);
        }
        let id = names::affinity_id(&p.base);
        let map = names::affinity_map(id);
        let endpoints: Vec<AffinityEndpoint> = eps
            .iter()
            .map(|e| AffinityEndpoint { ip: e.ip, port: e.port, index: names::endpoint_index(id, e.ip, e.port) })
            .collect();
        self.set(&map, AffinityGroup { id, endpoints: endpoints.iter().map(|e| e.index).collect() });
        let t = BalanceChain {
            fam: self.ctx.words.fam,
            v6: self.ctx.family == Family::V6,
            proto: p.sp.name.protocol.as_str(),
            map: &map,
            timeout,
            endpoints: &endpoints,
        };
        self.chain(&chain, render_template(&t, "balance.nft")?);
        Ok(chain)
    }
}

/// Assigns `eps` to slots `0..eps.len()`: an endpoint keeps its slot from `old` when it is
/// still there and the slot still exists; the others fill the free slots in sorted order.
fn stable_slots(old: &[(IpAddr, u16)], eps: &[&Endpoint]) -> Vec<(IpAddr, u16)> {
    let wanted: Vec<(IpAddr, u16)> = eps.iter().map(|e| (e.ip, e.port)).collect();
    let wanted_set: BTreeSet<(IpAddr, u16)> = wanted.iter().copied().collect();
    let mut placed = BTreeSet::new();
    let mut slots: Vec<Option<(IpAddr, u16)>> = vec![None; wanted.len()];
    for (slot, ep) in old.iter().enumerate().take(wanted.len()) {
        if wanted_set.contains(ep) && placed.insert(*ep) {
            slots[slot] = Some(*ep);
        }
    }
    let mut rest = wanted.iter().filter(|ep| !placed.contains(*ep));
    slots.into_iter().filter_map(|s| s.or_else(|| rest.next().copied())).collect()
}

/// The endpoints in address order: what `sh` numbers its slots by, so every node agrees.
fn sorted(eps: &[&Endpoint]) -> Vec<(IpAddr, u16)> {
    let mut v: Vec<(IpAddr, u16)> = eps.iter().map(|e| (e.ip, e.port)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Drops ranges contained in another, since an interval set may not hold overlapping ranges.
fn outermost(mut ranges: Vec<IpNet>) -> Vec<IpNet> {
    ranges.sort_by_key(|r| r.prefix_len());
    let mut kept: Vec<IpNet> = Vec::new();
    for r in ranges {
        if !kept.iter().any(|k| k.contains(&r)) {
            kept.push(r);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::super::{Config, MapName, Model, render};
    use super::names;
    use clap::Parser;

    #[test]
    fn round_robin_ports_read_the_turns_map_and_only_slot_chains_read_endpoint_maps() {
        // The kernel checks every rule that reads a map for each element added to it: rules
        // reading the endpoint map must stay as few as the slots, not one per port.
        let mut objects = Vec::new();
        for i in 0..300u32 {
            let name = format!("s{i}");
            objects.push(crate::model::ApiObject::from_json(serde_json::json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": "ns", "annotations": {"kube-nftproxy.io/scheduler": "rr"}},
                "spec": {"clusterIP": format!("172.30.{}.{}", i / 200, i % 200 + 1), "ports": [{"port": 80}]}})));
            let eps: Vec<_> =
                (0..=i % 4).map(|e| serde_json::json!({"addresses": [format!("10.1.{}.{e}", i % 250)]})).collect();
            objects.push(crate::model::ApiObject::from_json(serde_json::json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                "metadata": {"name": format!("{name}-1"), "namespace": "ns", "labels": {"kubernetes.io/service-name": name}},
                "ports": [{"port": 8080}], "endpoints": eps})));
        }
        let objects: Vec<_> = objects.into_iter().map(|o| o.expect("JSON").expect("a kind")).collect();
        let (model, refused) = Model::from_objects(&objects, "n");
        assert!(refused.is_empty(), "{refused:?}");
        let flags = crate::config::Flags::parse_from(["kube-nftproxy", "--hostname-override=n"]);
        let ruleset = render(&model, &Config::from_flags(&flags).expect("config")).expect("render");
        let table = &ruleset.tables[0];
        let reading = |map: &str| table.chains.values().filter(|body| body.contains(&format!("map @{map}"))).count();
        assert_eq!(reading("cluster-endpoints-tcp"), 4, "slot chains 0 to 3 alone");
        assert_eq!(reading("turns-"), 300, "each port's own turn");
        // Spread over the shards, each holding the turns its ports take (slots 0 to 3).
        let shards: Vec<usize> =
            (0..names::TURN_SHARDS).filter_map(|s| table.elements.get(&MapName::Turns(s)).map(|t| t.len())).collect();
        assert!(shards.len() > 50 && shards.iter().all(|n| *n <= 4), "{shards:?}");
        let busiest = (0..names::TURN_SHARDS)
            .map(|s| {
                let reads = |b: &&String| b.lines().any(|l| l.ends_with(&format!("@{}", MapName::Turns(s))));
                table.chains.values().filter(reads).count()
            })
            .max();
        assert!(busiest < Some(20), "no shard read by more than a few ports: {busiest:?}");
        assert!(table.fixed.turns);
        assert!(
            !render(&Model::default(), &Config::from_flags(&flags).expect("config")).expect("render").tables[0]
                .fixed
                .turns
        );
    }
}
