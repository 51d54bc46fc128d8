//! The full sync of tables that serve no packet yet (a first start, or a staged build that
//! failed half-way), in bounded transactions: the tables with their base chains empty, then
//! the elements some thousands to a transaction, then the base chains' rules alone, which
//! lead packets into the finished tables at once. Nothing reaches the rest before that last,
//! small transaction, so a packet sees no rule of ours or all of them; meanwhile no
//! transaction holds the kernel's nf_tables commit mutex for long, and every other process
//! changing nftables (a CNI plugin, firewalld) gets its turn between two of ours.

use super::compile::compile;
use super::wire::{Batch, Lines};
use super::{Applier, NftError, SyncKind, SyncReport, guard};
use crate::model::Family;
use crate::netlink;
use crate::render::{self, MapName, Ruleset, TABLE_NAME};

/// Elements per transaction of a staged build. The kernel takes about a microsecond per
/// element it adds, under the commit mutex: 16,384 hold it some 15 ms, well under the 50 ms
/// another nftables user should wait at most.
pub const STAGE_ELEMENTS: usize = 16_384;

/// One transaction of a staged build: its batch, and the script its messages came from.
struct Stage {
    bytes: Vec<u8>,
    lines: Lines,
    script: String,
}

impl Stage {
    /// This stage cut into several, a message `alone` picks in a stage of its own.
    fn cut(self, alone: impl Fn(u16, &[u8]) -> bool) -> Vec<Stage> {
        let Stage { bytes, lines, script } = self;
        let parts = super::wire::split(&bytes, alone);
        parts.into_iter().map(|bytes| Stage { bytes, lines: lines.clone(), script: script.clone() }).collect()
    }
}

/// Whether a message declares a named map or set with a size: the kernel allocates and zeroes
/// its whole hash table in the transaction (at 100k Services, the endpoint map's is 8 MB,
/// some 35 ms), so each goes in a transaction of its own.
fn sized_map(kind: u16, body: &[u8]) -> bool {
    use crate::netlink::abi::{
        NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWSET, NFT_SET_ANONYMOUS, NFTA_SET_DESC, NFTA_SET_DESC_SIZE, NFTA_SET_FLAGS,
    };
    use crate::netlink::attr::{all, get};
    if kind != (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSET || body.len() < 4 {
        return false;
    }
    let Ok(attrs) = all(&body[4..]) else { return false };
    let flags = get(&attrs, NFTA_SET_FLAGS)
        .and_then(|f| f.get(..4))
        .map_or(0, |f| u32::from_be_bytes([f[0], f[1], f[2], f[3]]));
    let sized =
        get(&attrs, NFTA_SET_DESC).and_then(|d| all(d).ok()).is_some_and(|d| get(&d, NFTA_SET_DESC_SIZE).is_some());
    flags & NFT_SET_ANONYMOUS == 0 && sized
}

impl Applier {
    /// Whether a table of `scope` serves packets: has a base chain with a rule. One that does
    /// not (a staged build cut short) is built again in stages.
    pub(super) fn serving(&self, scope: &[Family]) -> Result<bool, NftError> {
        let mut sock = netlink::Socket::open()?;
        for family in scope {
            let fam = netlink::NfFamily::from(*family);
            if !sock.table_exists(fam, TABLE_NAME)? {
                continue;
            }
            for chain in sock.chain_listings(fam, TABLE_NAME)?.into_iter().filter(|c| c.hook.is_some()) {
                if sock.rule_count(fam, TABLE_NAME, &chain.name)?.unwrap_or(0) > 0 {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Builds the tables of `scope` in stages (the module's comment says how), with the
    /// guard's notifications paused throughout. A failed stage leaves the tables unhooked:
    /// whatever served packets before (nothing of ours) still does, and the next full sync
    /// builds them again from the start.
    pub(super) fn staged(
        &mut self,
        desired: &Ruleset,
        scope: &[Family],
        deleted_chains: usize,
    ) -> Result<SyncReport, NftError> {
        // Nothing of ours to compare with; its monitor would make the kernel describe every
        // element of the build to it.
        self.ahead = None;
        let (body, hooks) = render::staged_scripts(desired, &self.node, scope)?;
        self.forget(scope);
        let mut stages = self.compiled(body.clone())?.cut(sized_map);
        for batch in element_batches(desired, scope, STAGE_ELEMENTS) {
            let (bytes, lines) = batch.finish_with_lines();
            stages.push(Stage { bytes, lines, script: String::new() });
        }
        stages.push(self.compiled(hooks.clone())?);
        let sizes: Vec<usize> = stages.iter().map(|s| s.bytes.len()).collect();
        let unsure = self.quietly_each(&stages)?;
        self.schema.sent();
        self.sizes.built(desired, scope);
        self.stale.retain(|(f, _), _| !scope.contains(f));
        let script = format!("{body}\n{hooks}");
        log::debug!("staged build: {} transactions, {} bytes", sizes.len(), sizes.iter().sum::<usize>());
        let (bytes, transactions) = (sizes.iter().sum(), sizes.len() as u32);
        Ok(SyncReport {
            kind: SyncKind::Full,
            bytes,
            transactions,
            elements: None,
            script,
            deleted_chains,
            unsure,
            refused: Vec::new(),
        })
    }

    /// `script` compiled into a stage of its own.
    fn compiled(&mut self, script: String) -> Result<Stage, NftError> {
        let mut batch = Batch::new();
        compile(&script, &mut self.schema, &mut batch)?;
        let (bytes, lines) = batch.finish_with_lines();
        Ok(Stage { bytes, lines, script })
    }

    /// Sends `stages` in order, each its own transaction, with the guard's notifications
    /// paused; stops at the first the kernel refuses. True when another process committed
    /// meanwhile (the generation moved by more than our transactions).
    fn quietly_each(&self, stages: &[Stage]) -> Result<bool, NftError> {
        let mut refused = None;
        let send = || -> Result<u32, NftError> {
            self.own.add(self.sender.port()?);
            let mut sent = 0;
            for stage in stages {
                let t = std::time::Instant::now();
                if let Err(e) = self.sender.send(&stage.bytes) {
                    refused = Some(stage.lines.explain(e, &stage.script));
                    break;
                }
                log::trace!("staged build: transaction {sent} of {} bytes took {:?}", stage.bytes.len(), t.elapsed());
                sent += 1;
            }
            Ok(sent)
        };
        let unsure = counting(self.quiet.as_deref(), send)?;
        match refused {
            Some(e) => Err(e),
            None => Ok(unsure),
        }
    }
}

/// Runs `send` (which returns how many transactions it committed) with the guard's
/// notifications paused (`quiet`, when there is a guard); true when the ruleset generation
/// moved by more than that: another process committed meanwhile.
pub(super) fn counting(
    quiet: Option<&guard::Quiet>,
    send: impl FnOnce() -> Result<u32, NftError>,
) -> Result<bool, NftError> {
    let Some(quiet) = quiet else {
        send()?;
        return Ok(false);
    };
    let mut sock = netlink::Socket::open()?;
    let before = sock.generation()?;
    let ours = quiet.during(send)?;
    let after = sock.generation()?;
    Ok(after.wrapping_sub(before) != ours)
}

/// The elements of `desired`'s tables of `scope`, in batches of at most `budget` elements,
/// endpoint maps first (as a full sync orders them).
fn element_batches(desired: &Ruleset, scope: &[Family], budget: usize) -> Vec<Batch> {
    let mut maps: Vec<MapName> = MapName::all();
    maps.sort_by_key(|m| !matches!(m, MapName::Endpoints(..) | MapName::NodeportEndpoints(..)));
    let (mut out, mut batch, mut room) = (Vec::new(), Batch::new(), budget);
    for t in desired.tables.iter().filter(|t| scope.contains(&t.family)) {
        for map in &maps {
            let Some(entries) = t.elements.get(map) else { continue };
            let mut entries = entries.iter().map(|(k, e)| (k, &e.value)).peekable();
            while entries.peek().is_some() {
                let take = entries.by_ref().take(room);
                let before = room;
                let mut counted = 0;
                batch.elements(t.family, TABLE_NAME, map, true, take.inspect(|_| counted += 1));
                room = before - counted;
                if room == 0 {
                    out.push(std::mem::take(&mut batch));
                    room = budget;
                }
            }
        }
    }
    if room < budget {
        out.push(batch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Model, Protocol};
    use crate::render::{Key, Value};
    use std::net::{IpAddr, Ipv4Addr};

    /// An empty cluster's ruleset, its IPv4 table given `n` ClusterIPs (two elements each).
    fn ruleset(n: u32) -> Ruleset {
        let flags = <crate::config::Flags as clap::Parser>::parse_from(["kube-nftproxy", "--hostname-override=n"]);
        let cfg = crate::config::Config::from_flags(&flags).expect("config");
        let mut r = render::render(&Model::default(), &cfg).expect("render");
        let owner = std::sync::Arc::from("ns/svc:p");
        let t = r.tables.iter_mut().find(|t| t.family == Family::V4).expect("an IPv4 table");
        for i in 0..n {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            t.insert(MapName::ClusterIps, Key::Ip(ip), Value::None, &owner);
            t.insert(MapName::ServiceIps, Key::IpProtoPort(ip, Protocol::Tcp, 80), Value::Goto("c".into()), &owner);
        }
        r
    }

    /// The messages of a finished batch: (type, body).
    fn messages(bytes: &[u8]) -> Vec<(u16, Vec<u8>)> {
        crate::netlink::msg::messages(bytes).map(|m| (m.kind, m.body.to_vec())).collect()
    }

    #[test]
    fn each_sized_map_is_declared_in_a_transaction_of_its_own() {
        // 5,000 ClusterIPs: `cluster-ips` and `service-ips` are declared with a size.
        let r = ruleset(5000);
        let (body, _) = render::staged_scripts(&r, "n", &[Family::V4]).expect("scripts");
        let mut batch = Batch::new();
        compile(&body, &mut crate::nft::compile::Schema::default(), &mut batch).expect("compiles");
        let whole = batch.finish();
        let parts = super::super::wire::split(&whole, sized_map);
        let alone: Vec<&Vec<u8>> = parts.iter().filter(|p| messages(p).iter().any(|(k, b)| sized_map(*k, b))).collect();
        assert_eq!(alone.len(), 2, "two sized maps");
        assert!(alone.iter().all(|p| messages(p).len() == 3), "begin, the declaration, end");
        // Every message once, in order, between markers of each part's own.
        let inner = |b: &[u8]| {
            let m = messages(b);
            m[1..m.len() - 1].to_vec()
        };
        assert_eq!(parts.iter().flat_map(|p| inner(p)).collect::<Vec<_>>(), inner(&whole));
        assert!(parts.len() >= 4, "before, each map, after: {}", parts.len());
    }

    fn counts(batches: Vec<Batch>) -> Vec<usize> {
        batches.into_iter().map(|b| crate::nft::wire::element_count(&b.finish()).0).collect()
    }

    #[test]
    fn elements_go_in_batches_of_the_budget_across_maps() {
        let r = ruleset(25);
        let v4 = [Family::V4];
        assert_eq!(counts(element_batches(&r, &v4, 20)), vec![20, 20, 10]);
        assert_eq!(counts(element_batches(&r, &v4, 50)), vec![50]);
        let small = counts(element_batches(&r, &v4, 7));
        assert_eq!(small.iter().sum::<usize>(), 50);
        assert!(small.iter().all(|n| *n <= 7), "{small:?}");
        assert!(counts(element_batches(&r, &[Family::V6], 20)).iter().all(|n| *n == 0));
    }
}
