//! What a traced packet is read against: the proxy's rules as the kernel holds them (by
//! handle, for their text), the service port each frontend's map element names in its
//! comment, and, when the API server or manifests gave objects, the model and configuration
//! `explain` answers from. It is loaded on a thread of its own once the tracer's rules are
//! in, so that tracing starts at once whatever the cluster's size: first what the kernel
//! holds (quick), then the objects (an API server may be slow). What the kernel holds is read
//! again when a packet names a rule not read, or one of another chain (the table was made
//! anew), once its generation moved; the objects when `explain` disagrees (the cluster may
//! have moved on since); each at most every [`REREAD_AFTER`] otherwise.

use crate::config::Config;
use crate::explain::Prepared;
use crate::model::{Family, Model};
use crate::netlink::attr::address;
use crate::netlink::data::Data;
use crate::netlink::{NfFamily, Socket};
use crate::nft::element;
use crate::nft::kdiff::{HeldRule, RuleNames};
use crate::render::{self, Key, MapName, Scope, TABLE_NAME};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// How often the kernel's rules and maps, or the objects, are read again at most.
const REREAD_AFTER: Duration = Duration::from_secs(1);

/// Reads the objects a one-shot command reads (the API server, the manifests, the host's
/// addresses) and says whether any source of objects was given; it may be called again.
pub type Objects = Arc<dyn Fn() -> Result<(Model, bool), String> + Send + Sync>;

/// What the loading thread sends: the kernel's side first, then the objects.
enum Loaded {
    Kernel(Box<Context>),
    Objects(Box<FromObjects>),
}

/// The context as it loads: none yet, then the kernel's side, then the objects too.
pub struct Loader {
    rx: mpsc::Receiver<Loaded>,
    /// The context, once the kernel's side is read.
    pub ctx: Option<Context>,
}

impl Loader {
    /// Takes what the loading thread sent meanwhile, waiting up to `wait` for the first.
    pub fn poll(&mut self, wait: Duration) {
        let first = if self.ctx.is_none() { self.rx.recv_timeout(wait).ok() } else { None };
        for loaded in first.into_iter().chain(std::iter::from_fn(|| self.rx.try_recv().ok())) {
            match (loaded, &mut self.ctx) {
                (Loaded::Kernel(c), _) => self.ctx = Some(*c),
                (Loaded::Objects(from), Some(c)) => c.objects_read(*from),
                (Loaded::Objects(_), None) => {}
            }
        }
    }
}

/// Frontend → service port, from the dispatch maps' element comments: (family, address for
/// an IP frontend or `None` for a node port, protocol number, port).
type Owners = HashMap<(Family, Option<IpAddr>, u8, u16), String>;

/// The objects' side: the model, the rules it makes (compiled for `explain`), and the names
/// a full sync of it gives the kernel's rules.
struct FromObjects {
    model: Model,
    explainer: Result<Prepared, String>,
    names: Option<RuleNames>,
}

/// Everything a packet is read against.
pub struct Context {
    objects: Objects,
    cfg: Config,
    from: FromObjects,
    /// Whether `from` holds the objects (else the host's addresses alone, while they load).
    pub loaded: bool,
    kernel: Kernel,
    kernel_read: Instant,
    objects_read: Instant,
    /// The nf_tables generation the kernel was read at, and a socket to ask it on.
    generation: (Option<u32>, Option<Socket>),
}

/// What was read of the kernel: rules by handle, dispatch maps by frontend, the addresses
/// node ports are served on (`None`: every local address but loopback).
#[derive(Default)]
struct Kernel {
    rules: BTreeMap<(Family, u64), HeldRule>,
    owners: Owners,
    nodeport_ips: Option<Vec<IpAddr>>,
}

impl Context {
    /// The rule of the proxy's `family` table with `handle` in `chain`, read again when not
    /// known yet or known in another chain.
    pub fn rule(&mut self, family: Family, handle: u64, chain: &str) -> Option<&HeldRule> {
        let held = self.kernel.rules.get(&(family, handle));
        if held.is_none_or(|r| r.chain != chain) {
            self.reread_kernel();
        }
        self.kernel.rules.get(&(family, handle)).filter(|r| r.chain == chain)
    }

    /// The service port (`namespace/name:port`) whose frontend is `addr` (or a node port,
    /// `None`), protocol `proto`, port `port`, as the kernel's maps name it.
    pub fn owner(&mut self, family: Family, addr: Option<IpAddr>, proto: u8, port: u16) -> Option<String> {
        let key = (family, addr, proto, port);
        if !self.kernel.owners.contains_key(&key) {
            self.reread_kernel();
        }
        if let (None, Some(addr)) = (self.kernel.owners.get(&key), addr) {
            // Kept with what was read, until the kernel is read again.
            let owner = self.slot_owner(family, addr, proto, port)?;
            self.kernel.owners.insert(key, owner.clone());
            return Some(owner);
        }
        self.kernel.owners.get(&key).cloned()
    }

    /// The service port a ClusterIP frontend's first endpoint slot names: one found by its
    /// endpoint count has no element in the maps read whole, and the endpoint maps are too
    /// big to read whole for one connection, so the slot is asked for by its key.
    fn slot_owner(&mut self, family: Family, addr: IpAddr, proto: u8, port: u16) -> Option<String> {
        let proto = element::proto_of(proto)?;
        let sock = self.generation.1.as_mut()?;
        let key = element::elements(&Key::IpSlot(addr, port, 0), None).into_iter().next()?.key;
        [Scope::Cluster, Scope::Local].into_iter().find_map(|scope| {
            let map = MapName::Endpoints(scope, proto, 0).to_string();
            sock.element(NfFamily::from(family), TABLE_NAME, &map, &key).ok().flatten()?.comment
        })
    }

    /// Whether node ports are served on `ip`, as the kernel's rules say.
    pub fn serves_node_ports(&self, ip: IpAddr) -> bool {
        match &self.kernel.nodeport_ips {
            Some(ips) => ips.contains(&ip),
            None => self.from.model.host_addresses().contains(&ip) && !ip.is_loopback(),
        }
    }

    /// `explain`'s side: the model, the configuration and the prepared rules, or why not.
    pub fn explainer(&self) -> Result<(&Model, &Config, &Prepared), &str> {
        match &self.from.explainer {
            Ok(p) => Ok((&self.from.model, &self.cfg, p)),
            Err(e) => Err(e),
        }
    }

    /// Reads the objects again, if they were not just read: whether they were.
    pub fn reread_objects(&mut self) -> bool {
        if !self.loaded || self.objects_read.elapsed() < REREAD_AFTER {
            return false;
        }
        self.objects_read(from_objects(&self.objects, &self.cfg));
        true
    }

    /// The objects, read: the rules are named by what they make from now on.
    fn objects_read(&mut self, from: FromObjects) {
        (self.from, self.loaded, self.objects_read) = (from, true, Instant::now());
        self.kernel = read_kernel(self.from.names.as_ref());
    }

    /// Reads the kernel again if its generation moved since it was read, or a while ago.
    fn reread_kernel(&mut self) {
        let (seen, sock) = &mut self.generation;
        let now = sock.as_mut().and_then(|s| s.generation().ok());
        if now.is_some() && now != *seen || self.kernel_read.elapsed() >= REREAD_AFTER {
            (*seen, self.kernel_read) = (now, Instant::now());
            self.kernel = read_kernel(self.from.names.as_ref());
        }
    }
}

/// Starts loading the context on thread `trace-context`: the kernel's side at once (its rules
/// named by what the host's addresses alone make), then the objects.
pub fn load(objects: Objects, cfg: Config) -> std::io::Result<Loader> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new().name("trace-context".into()).spawn(move || {
        let mut model = Model::default();
        model.set_host_addresses(crate::host::interface_addresses().unwrap_or_default());
        let from = rendered(model, Err("the objects are still being read".into()), &cfg);
        let mut sock = Socket::open().ok();
        let seen = sock.as_mut().and_then(|s| s.generation().ok());
        let kernel = read_kernel(from.names.as_ref());
        let now = Instant::now();
        let ctx = Context {
            objects: objects.clone(),
            cfg: cfg.clone(),
            from,
            loaded: false,
            kernel,
            kernel_read: now,
            objects_read: now,
            generation: (seen, sock),
        };
        if tx.send(Loaded::Kernel(Box::new(ctx))).is_ok() {
            let _ = tx.send(Loaded::Objects(Box::new(from_objects(&objects, &cfg))));
        }
    })?;
    Ok(Loader { rx, ctx: None })
}

/// Reads the objects and renders their rules once, for both `explain` and the rules' names.
fn from_objects(objects: &Objects, cfg: &Config) -> FromObjects {
    match objects() {
        Ok((model, true)) => rendered(model, Ok(()), cfg),
        Ok((model, false)) => rendered(model, Err("no API server or --manifests to explain from".into()), cfg),
        Err(e) => {
            let mut model = Model::default();
            model.set_host_addresses(crate::host::interface_addresses().unwrap_or_default());
            rendered(model, Err(format!("the objects could not be read ({e})")), cfg)
        }
    }
}

/// `model`'s rules rendered once, named, and prepared for `explain` unless `explain` says why not.
fn rendered(model: Model, explain: Result<(), String>, cfg: &Config) -> FromObjects {
    let ruleset = render::render(&model, cfg).map_err(|e| format!("explain cannot run: {e}"));
    let names = ruleset
        .as_ref()
        .ok()
        .and_then(|r| RuleNames::new(r, &cfg.node_name).map_err(|e| log::warn!("naming the proxy's rules: {e}")).ok());
    let explainer = explain.and_then(|()| {
        ruleset.and_then(|r| Prepared::of(&model, cfg, &r).map_err(|e| format!("explain cannot run: {e}")))
    });
    FromObjects { model, explainer, names }
}

/// The kernel's rules (named by `names`), dispatch maps and node-port addresses; what cannot
/// be read is logged and left empty.
fn read_kernel(names: Option<&RuleNames>) -> Kernel {
    let rules = names.map(RuleNames::read).transpose().unwrap_or_else(|e| {
        log::warn!("reading the proxy's rules: {e}; rules are shown by handle");
        None
    });
    let (owners, nodeport_ips) = owners().unwrap_or_else(|e| {
        log::warn!("reading the proxy's maps: {e}; services are named by their chains only");
        (Owners::new(), None)
    });
    Kernel { rules: rules.unwrap_or_default(), owners, nodeport_ips }
}

/// The dispatch maps' elements, by frontend, and the addresses in the node-port address set
/// (`None` where the rules take every local address instead, and there is no such set).
fn owners() -> std::io::Result<(Owners, Option<Vec<IpAddr>>)> {
    let mut sock = Socket::open()?;
    let mut out = Owners::new();
    let (mut nodeport_ips, set) = (None::<Vec<IpAddr>>, MapName::NodeportIps.to_string());
    for family in Family::ALL {
        let fam = NfFamily::from(family);
        if sock.table_exists(fam, TABLE_NAME)? && sock.set_listings(fam, TABLE_NAME)?.iter().any(|s| s.name == set) {
            let ips = sock.elements(fam, TABLE_NAME, &set)?.into_iter().filter_map(|e| address(&e.key));
            nodeport_ips.get_or_insert_default().extend(ips);
        }
        let addr_len = if family == Family::V4 { 4 } else { 16 };
        for (map, by_addr) in [
            (MapName::ServiceIps, true),
            (MapName::NoEndpointServices, true),
            (MapName::ServiceNodeports, false),
            (MapName::NoEndpointNodeports, false),
        ] {
            for e in sock.elements(NfFamily::from(family), TABLE_NAME, &map.to_string())? {
                // A frontend with a chain of its own is named by the chain, not a comment.
                let chain = match &e.data {
                    Some(Data::Verdict(_, Some(chain))) => render::owner_of_chain(chain).map(|spn| spn.to_string()),
                    _ => None,
                };
                let Some(owner) = e.comment.or(chain) else { continue };
                // Each field of a concatenation takes whole 32-bit registers.
                let at = if by_addr { addr_len } else { 0 };
                let addr = e.key.get(..addr_len).and_then(address).filter(|_| by_addr);
                let (Some(proto), Some(port)) = (e.key.get(at), e.key.get(at + 4..at + 6)) else { continue };
                if by_addr && addr.is_none() {
                    continue;
                }
                out.insert((family, addr, *proto, u16::from_be_bytes([port[0], port[1]])), owner);
            }
        }
    }
    Ok((out, nodeport_ips))
}
