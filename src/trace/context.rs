//! What a traced packet is read against: the proxy's rules as the kernel holds them (by
//! handle, for their text), the service port each frontend's map element names in its
//! comment, and, when the API server or manifests gave objects, the model and configuration
//! `explain` answers from. It is loaded on a thread of its own once the tracer's rules are
//! in, so that tracing starts at once whatever the cluster's size; what the kernel holds is
//! read again when a packet names what was not there, the objects when `explain` disagrees
//! (the cluster may have moved on since), each at most every [`REREAD_AFTER`].

use crate::config::Config;
use crate::explain::Prepared;
use crate::model::{Family, Model};
use crate::netlink::attr::address;
use crate::netlink::data::Data;
use crate::netlink::{NfFamily, Socket};
use crate::nft::kdiff::{HeldRule, RuleNames};
use crate::render::{self, MapName, TABLE_NAME};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often the kernel's rules and maps, or the objects, are read again at most.
const REREAD_AFTER: Duration = Duration::from_secs(1);

/// Reads the objects a one-shot command reads (the API server, the manifests, the host's
/// addresses) and says whether any source of objects was given; it may be called again.
pub type Objects = Box<dyn Fn() -> Result<(Model, bool), String> + Send>;

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
    rules: BTreeMap<(Family, u64), HeldRule>,
    owners: Owners,
    kernel_read: Instant,
    objects_read: Instant,
}

impl Context {
    /// The rule of the proxy's `family` table with `handle`, read again when not known yet.
    pub fn rule(&mut self, family: Family, handle: u64) -> Option<&HeldRule> {
        if !self.rules.contains_key(&(family, handle)) {
            self.reread_kernel();
        }
        self.rules.get(&(family, handle))
    }

    /// The service port (`namespace/name:port`) whose frontend is `addr` (or a node port,
    /// `None`), protocol `proto`, port `port`, as the kernel's maps name it.
    pub fn owner(&mut self, family: Family, addr: Option<IpAddr>, proto: u8, port: u16) -> Option<String> {
        let key = (family, addr, proto, port);
        if !self.owners.contains_key(&key) {
            self.reread_kernel();
        }
        self.owners.get(&key).cloned()
    }

    /// This node's addresses, as the objects were read with.
    pub fn host_addresses(&self) -> &[IpAddr] {
        self.from.model.host_addresses()
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
        if self.objects_read.elapsed() < REREAD_AFTER {
            return false;
        }
        self.objects_read = Instant::now();
        self.from = from_objects(&self.objects, &self.cfg);
        true
    }

    fn reread_kernel(&mut self) {
        if self.kernel_read.elapsed() >= REREAD_AFTER {
            self.kernel_read = Instant::now();
            (self.rules, self.owners) = read_kernel(self.from.names.as_ref());
        }
    }
}

/// Starts loading the context on thread `trace-context`; the receiver gets it once.
pub fn load(objects: Objects, cfg: Config) -> std::io::Result<mpsc::Receiver<Context>> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new().name("trace-context".into()).spawn(move || {
        let from = from_objects(&objects, &cfg);
        let (rules, owners) = read_kernel(from.names.as_ref());
        let now = Instant::now();
        let _ = tx.send(Context { objects, cfg, from, rules, owners, kernel_read: now, objects_read: now });
    })?;
    Ok(rx)
}

/// Reads the objects and renders their rules once, for both `explain` and the rules' names.
fn from_objects(objects: &Objects, cfg: &Config) -> FromObjects {
    let (model, given, failed) = match objects() {
        Ok((model, given)) => (model, given, None),
        Err(e) => {
            let mut model = Model::default();
            model.set_host_addresses(crate::host::interface_addresses().unwrap_or_default());
            (model, false, Some(e))
        }
    };
    let ruleset = render::render(&model, cfg).map_err(|e| format!("explain cannot run: {e}"));
    let names = ruleset
        .as_ref()
        .ok()
        .and_then(|r| RuleNames::new(r, &cfg.node_name).map_err(|e| log::warn!("naming the proxy's rules: {e}")).ok());
    let explainer = match (failed, given) {
        (Some(e), _) => Err(format!("the objects could not be read ({e})")),
        (None, false) => Err("no API server or --manifests to explain from".into()),
        (None, true) => {
            ruleset.and_then(|r| Prepared::of(&model, cfg, &r).map_err(|e| format!("explain cannot run: {e}")))
        }
    };
    FromObjects { model, explainer, names }
}

/// The kernel's rules (named by `names`) and dispatch maps; what cannot be read is logged and
/// left empty.
fn read_kernel(names: Option<&RuleNames>) -> (BTreeMap<(Family, u64), HeldRule>, Owners) {
    let rules = names.map(RuleNames::read).transpose().unwrap_or_else(|e| {
        log::warn!("reading the proxy's rules: {e}; rules are shown by handle");
        None
    });
    let owners = owners().unwrap_or_else(|e| {
        log::warn!("reading the proxy's maps: {e}; services are named by their chains only");
        Owners::new()
    });
    (rules.unwrap_or_default(), owners)
}

/// The dispatch maps' elements, by frontend.
fn owners() -> std::io::Result<Owners> {
    let mut sock = Socket::open()?;
    let mut out = Owners::new();
    for family in Family::ALL {
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
    Ok(out)
}
