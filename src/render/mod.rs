//! Rendering: from the model and configuration to the desired nftables state, and from that to scripts.
//!
//! Per-packet work does not grow with the number of services: traffic is dispatched by
//! verdict maps (`service-ips`, `service-nodeports`) to a small per-service chain, which
//! jumps to a shared `lb-*` chain that DNATs through one endpoint map per scope and protocol,
//! keyed by the frontend and a random slot. No chain holds an anonymous set, and only as
//! many rules reference an endpoint map as there are distinct endpoint counts, which keeps
//! the kernel off its super-linear paths (see `../shared/research/kernel-costs.md`).
//! A session-affinity service port adds a chain per scope, its clients kept in a few shared
//! sets, not upstream's chain and set per endpoint: every named set costs each later set
//! lookup of the transaction a walk past it, so thousands of sets grow a sync quadratically.

mod builder;
mod detect;
mod dispatch;
mod foreign;
pub mod hash;
mod key;
mod lb;
pub mod maglev;
mod maps;
mod names;
pub use names::{
    TABLE_NAME, affinity_map, chain, comment, dispatch_floors, is_dispatch_chain, is_service_chain, named_ours,
    owner_of_chain, picks_endpoints, picks_local_endpoints,
};
mod rendered;
mod ruleset;
mod service;
mod templates;

#[cfg(test)]
use crate::netlink::TableObject;
pub use builder::{Journal, PortId};
pub use detect::{Detector, node_ip};
pub use foreign::Foreign;
pub use rendered::{Rendered, Update};

pub use templates::{ElementText, FamilyWords};

pub use key::Key;
pub use maps::{
    BUILT_FOR, COPY_SUFFIX, MapName, PARTS, Scope, built_for, copied_map, copy_of, unparted_endpoint_map,
    with_built_for, without_built_for,
};
pub use ruleset::{AffinityGroup, ElementChange, Entry, Fixed, Inserted, Ruleset, Table, Value, element_changes};

use crate::config::Config;
use crate::model::{Family, Model, NodeInfo, Protocol};
use askama::Template;
use ipnet::IpNet;
use std::net::IpAddr;
use templates::{EndpointMapDecl, FullSync, Hooks, TableView};

/// Rendering failed; only a template that cannot be written out does that.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A template failed to render.
    #[error("rendering {template}: {source}")]
    Template {
        /// Which template.
        template: &'static str,
        /// Cause.
        source: askama::Error,
    },
}

/// Renders a template, naming it in the error.
pub fn render_template(t: &impl Template, template: &'static str) -> Result<String, RenderError> {
    t.render().map_err(|source| RenderError::Template { template, source })
}

/// The family words (`ip`/`ip6`, address type, loopback) templates use.
pub fn words(family: Family) -> FamilyWords {
    match family {
        Family::V4 => FamilyWords { fam: "ip", addr_type: "ipv4_addr", loopback: "127.0.0.0/8" },
        Family::V6 => FamilyWords { fam: "ip6", addr_type: "ipv6_addr", loopback: "::1" },
    }
}

/// Where NodePorts are served in one family.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NodePorts {
    /// On every local address but loopback.
    All,
    /// On these addresses (possibly none).
    Ips(Vec<IpAddr>),
}

impl NodePorts {
    /// The NodePort addresses of one family, and warnings about addresses left out. As
    /// upstream: a family that `--nodeport-addresses` names no CIDR of, and (with `primary`)
    /// whose node IP is unknown, serves NodePorts on every local address of the family.
    /// Loopback is never among them: the kernel would take such traffic as martian, and
    /// localhost NodePorts are served in userspace (`crate::localhost`).
    fn resolve(cfg: &Config, model: &Model, family: Family) -> (NodePorts, Vec<String>) {
        let node = model.node.as_ref();
        let np = &cfg.nodeport_addresses;
        // Upstream's `primary` turns into the node IPs' /32 and /128, leaving out one that is
        // loopback (no node IP of the family).
        let primary = Some(node_ip(cfg, node, family)).filter(|ip| np.primary && !ip.is_loopback());
        let mine: Vec<&IpNet> = np.cidrs.iter().filter(|c| Family::of(&c.addr()) == family).collect();
        if (mine.is_empty() && primary.is_none()) || mine.iter().any(|c| c.prefix_len() == 0) {
            return (NodePorts::All, Vec::new());
        }
        let mut chosen: Vec<IpAddr> = primary.into_iter().collect();
        if !mine.is_empty() {
            let node_addresses = node.map(|n| n.addresses.as_slice()).unwrap_or_default();
            for ip in node_addresses.iter().chain(model.host_addresses()) {
                if Family::of(ip) == family && !chosen.contains(ip) && mine.iter().any(|c| c.contains(ip)) {
                    chosen.push(*ip);
                }
            }
        }
        let (loopback, usable): (Vec<IpAddr>, Vec<IpAddr>) = chosen.into_iter().partition(IpAddr::is_loopback);
        let warnings = match cfg.localhost_nodeports {
            true => Vec::new(),
            false => loopback
                .iter()
                .map(|ip| {
                    let gate = crate::config::features::LOCALHOST_NODE_PORTS;
                    format!("not serving NodePorts on {ip}: localhost NodePorts need --feature-gates={gate}=true")
                })
                .collect(),
        };
        (NodePorts::Ips(usable), warnings)
    }

    fn enabled(&self) -> bool {
        !matches!(self, NodePorts::Ips(ips) if ips.is_empty())
    }
}

/// Where NodePorts are served in `family`: `None` for every local address, else these
/// addresses (the health-check node ports listen where NodePorts are served, as upstream's).
pub fn nodeport_ips(cfg: &Config, model: &Model, family: Family) -> Option<Vec<IpAddr>> {
    match NodePorts::resolve(cfg, model, family).0 {
        NodePorts::All => None,
        NodePorts::Ips(ips) => Some(ips),
    }
}

/// What one family's rendering needs besides the model.
struct FamilyContext<'a> {
    family: Family,
    words: FamilyWords,
    cfg: &'a Config,
    mark: String,
    /// How traffic from this node's pods is told apart in this family.
    local: Detector,
    nodeports: NodePorts,
    node: Option<&'a NodeInfo>,
    /// Warnings found while preparing, handed to the table.
    warnings: Vec<String>,
    /// The table applied before, whose endpoint slots are kept where possible.
    previous: Option<&'a Table>,
}

/// Renders the desired state of both tables.
pub fn render(model: &Model, cfg: &Config) -> Result<Ruleset, RenderError> {
    render_after(model, cfg, None)
}

/// Renders the desired state of both tables, keeping each endpoint in the map slot it had in
/// `previous` where it still exists, so that one endpoint changing changes one slot rather
/// than shifting all the service's others (the transaction stays proportional to the change).
pub fn render_after(model: &Model, cfg: &Config, previous: Option<&Ruleset>) -> Result<Ruleset, RenderError> {
    Rendered::build(model, cfg, previous).map(Rendered::into_ruleset)
}

impl FamilyContext<'_> {
    /// The settings of the table's fixed part.
    fn fixed(&self) -> Fixed {
        Fixed {
            mark: self.cfg.masquerade_mark,
            local: self.local.clone(),
            nodeport_all: self.nodeports == NodePorts::All,
            drop_unallocated: self.cfg.service_proxy_name.is_none(),
            // Set by the builder once it knows whether any port takes turns.
            turns: false,
        }
    }
}

fn context<'a>(model: &'a Model, cfg: &'a Config, family: Family, previous: Option<&'a Table>) -> FamilyContext<'a> {
    let (nodeports, mut warnings) = NodePorts::resolve(cfg, model, family);
    if model.node.is_none() && family == Family::V4 {
        warnings.insert(0, format!("Node {:?} not found: no node IPs and no zone for topology", cfg.node_name));
    }
    let (local, warning) = Detector::of(cfg, model.node.as_ref(), family);
    warnings.extend(warning);
    FamilyContext {
        family,
        words: words(family),
        cfg,
        mark: format!("{:#x}", cfg.masquerade_mark),
        local,
        nodeports,
        node: model.node.as_ref(),
        warnings,
        previous,
    }
}

/// The `turns-*` maps `table` declares: all of them when some port takes turns.
fn turn_maps(table: &Table) -> Vec<MapName> {
    let all = MapName::all().into_iter().filter(|m| matches!(m, MapName::Turns(_)));
    all.filter(|_| table.fixed.turns).collect()
}

fn endpoint_maps() -> Vec<EndpointMapDecl> {
    let decl = |map: MapName, proto: Protocol, nodeport| EndpointMapDecl { name: map, proto: proto.as_str(), nodeport };
    MapName::all()
        .into_iter()
        .filter_map(|map| match map {
            MapName::Endpoints(_, proto, _) => Some(decl(map, proto, false)),
            MapName::NodeportEndpoints(_, proto, _) => Some(decl(map, proto, true)),
            _ => None,
        })
        .collect()
}

/// Writes the full-sync script: both tables created or replaced in one transaction, with
/// every element (what `--dry-run` prints).
pub fn full_sync_script(ruleset: &Ruleset, node: &str) -> Result<String, RenderError> {
    let sync = FullSync { node, refresh: false, tables: table_views(ruleset, false, &Family::ALL) };
    render_template(&sync, "full-sync.nft")
}

/// Writes the full-sync script (as [`full_sync_script`]) to `out` as it is made, so a caller
/// that keeps it in pieces never holds it in one growing buffer.
pub fn write_full_sync_script(
    ruleset: &Ruleset,
    node: &str,
    out: &mut impl std::fmt::Write,
) -> Result<(), RenderError> {
    let sync = FullSync { node, refresh: false, tables: table_views(ruleset, false, &Family::ALL) };
    sync.render_into(out).map_err(|source| RenderError::Template { template: "full-sync.nft", source })
}

/// The full-sync script without elements, which the daemon sends from `ruleset` itself in
/// the same transaction (`nft::wire`): what it compiles.
pub fn full_sync_script_without_elements(ruleset: &Ruleset, node: &str) -> Result<String, RenderError> {
    full_sync_script_of(ruleset, node, &Family::ALL)
}

/// As [`full_sync_script_without_elements`], for the tables of `families` only (a family
/// the kernel refused is synced alone).
pub fn full_sync_script_of(ruleset: &Ruleset, node: &str, families: &[Family]) -> Result<String, RenderError> {
    let sync = FullSync { node, refresh: false, tables: table_views(ruleset, true, families) };
    render_template(&sync, "full-sync.nft")
}

/// A first sync in stages (`nft::Applier`'s staged build), as two scripts without elements:
/// the tables of `families` replaced with their base chains empty, so that nothing reaches
/// the rest yet, and then the base chains' rules alone, which hook the finished tables in
/// at once.
pub fn staged_scripts(ruleset: &Ruleset, node: &str, families: &[Family]) -> Result<(String, String), RenderError> {
    let mut tables = table_views(ruleset, true, families);
    for t in &mut tables {
        t.hooks = false;
    }
    let body = render_template(&FullSync { node, refresh: false, tables }, "full-sync.nft")?;
    let hooks = render_template(&Hooks { node, tables: table_views(ruleset, true, families) }, "hooks.nft")?;
    Ok((body, hooks))
}

/// What a refresh finds in one of our tables: what someone else added, and which of our
/// maps (`MapName`s) are there.
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// Objects that are not ours.
    pub foreign: Vec<Foreign>,
    /// Our maps the table holds.
    pub maps: Vec<String>,
}

/// Writes a refresh: every chain's rules rewritten in place (`flush table` keeps sets, maps
/// and their elements) and every map deleted and declared anew, with the size its elements
/// call for; the caller adds the elements again in the same transaction. Affinity maps stay,
/// with their entries. What is not ours (per table) is deleted by handle, in kind order, after
/// the flush has dropped the rules that referred to it; kinds `nft` cannot delete by handle
/// are left to the caller. Only the tables of `families` are written; `found` is theirs.
pub fn refresh_script(
    ruleset: &Ruleset,
    node: &str,
    families: &[Family],
    found: &[Found],
) -> Result<String, RenderError> {
    let mut tables = table_views(ruleset, true, families);
    for (view, found) in tables.iter_mut().zip(found) {
        let mut foreign = found.foreign.clone();
        foreign.sort_unstable();
        view.foreign = foreign.iter().filter_map(|f| Some((f.kind.nft_words()?, f.handle))).collect();
        view.recreate = found.maps.clone();
    }
    render_template(&FullSync { node, refresh: true, tables }, "full-sync.nft")
}

fn table_views<'a>(ruleset: &'a Ruleset, without_elements: bool, families: &[Family]) -> Vec<TableView<'a>> {
    ruleset
        .tables
        .iter()
        .filter(|t| families.contains(&t.family))
        .map(|table| {
            let w = words(table.family);
            TableView {
                fam: w.fam,
                addr_type: w.addr_type,
                loopback: w.loopback,
                mark: format!("{:#x}", table.fixed.mark),
                local: table.fixed.local.clone(),
                nodeport_all: table.fixed.nodeport_all,
                drop_unallocated: table.fixed.drop_unallocated,
                endpoint_maps: endpoint_maps(),
                turn_maps: turn_maps(table),
                table,
                without_elements,
                foreign: Vec::new(),
                recreate: Vec::new(),
                hooks: true,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn fixed_chains_are_the_chains_the_templates_declare() {
        let flags = crate::config::Flags::parse_from(["kube-nftproxy", "--hostname-override=n"]);
        let cfg = Config::from_flags(&flags).expect("config");
        let ruleset = render(&Model::default(), &cfg).expect("render");
        let script = full_sync_script(&ruleset, "n").expect("script");
        let mut declared: Vec<&str> =
            script.lines().filter_map(|l| l.trim().strip_prefix("chain ")?.strip_suffix(" {")).collect();
        declared.sort_unstable();
        declared.dedup();
        // The dispatch's entry chain is in every table, with no rules while no Service is.
        let mut fixed = chain::ALL.to_vec();
        fixed.push(chain::DISPATCH);
        fixed.sort_unstable();
        assert_eq!(declared, fixed);
    }

    #[test]
    fn a_refresh_deletes_foreign_objects_by_handle_sets_first() {
        let flags = crate::config::Flags::parse_from(["kube-nftproxy", "--hostname-override=n"]);
        let cfg = Config::from_flags(&flags).expect("config");
        let ruleset = render(&Model::default(), &cfg).expect("render");
        let found = |kind, handle| Foreign { kind, handle };
        let ip = vec![
            found(TableObject::Flowtable, 9),
            found(TableObject::Stateful(3), 8),
            found(TableObject::Chain, 7),
            found(TableObject::Stateful(1), 6),
            found(TableObject::Set, 5),
        ];
        let found = [Found { foreign: ip, maps: vec![] }, Found::default()];
        let script = refresh_script(&ruleset, "n", &Family::ALL, &found).expect("script");
        let deletes: Vec<&str> = script.lines().filter(|l| l.starts_with("delete ")).collect();
        assert_eq!(
            deletes,
            [
                "delete set ip kube-nftproxy handle 5",
                "delete chain ip kube-nftproxy handle 7",
                "delete flowtable ip kube-nftproxy handle 9",
                "delete counter ip kube-nftproxy handle 6",
            ],
            "a ct helper (type 3) has no `handle` form in nft 1.0.6: it is left to the caller"
        );
    }
}
