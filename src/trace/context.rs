//! What a traced packet is read against: the proxy's rules as the kernel holds them (by
//! handle, for their text), the service port each frontend's map element names in its
//! comment, and, when the API server or manifests gave objects, the model and configuration
//! `explain` answers from. It is loaded on a thread of its own once the tracer's rules are
//! in, so that tracing starts at once whatever the cluster's size.

use super::follow::address;
use crate::config::Config;
use crate::explain::Prepared;
use crate::model::{Family, Model};
use crate::netlink::{NfFamily, Socket};
use crate::nft::kdiff::{HeldRule, held_rules};
use crate::render::{self, MapName, TABLE_NAME};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often the kernel's rules are read again when a packet names a rule not yet read.
const REREAD_AFTER: Duration = Duration::from_secs(1);

/// The objects a one-shot command reads (the API server, the manifests, the host's
/// addresses), and whether any source of objects was given.
pub type Objects = Box<dyn FnOnce() -> Result<(Model, bool), String> + Send>;

/// Frontend → service port, from the dispatch maps' element comments: (family, address for
/// an IP frontend or `None` for a node port, protocol number, port).
type Owners = HashMap<(Family, Option<IpAddr>, u8, u16), String>;

/// Everything a packet is read against.
pub struct Context {
    /// The cluster's objects (none when no source was given or it failed).
    pub model: Model,
    /// The configuration the daemon runs with, as this command's flags say.
    pub cfg: Config,
    /// The rules `model` makes, compiled for `explain`; or why it cannot answer.
    pub explainer: Result<Prepared, String>,
    rules: BTreeMap<(Family, u64), HeldRule>,
    owners: Owners,
    read_at: Instant,
}

impl Context {
    /// The rule of the proxy's `family` table with `handle`: read again (at most once a
    /// second) when it is not known yet, as the daemon may have synced since.
    pub fn rule(&mut self, family: Family, handle: u64) -> Option<&HeldRule> {
        if !self.rules.contains_key(&(family, handle)) && self.read_at.elapsed() >= REREAD_AFTER {
            self.read_at = Instant::now();
            (self.rules, self.owners) = read_kernel(&self.model, &self.cfg);
        }
        self.rules.get(&(family, handle))
    }

    /// The service port (`namespace/name:port`) whose frontend is `addr` (or a node port,
    /// `None`), protocol `proto`, port `port`, as the kernel's maps name it.
    pub fn owner(&self, family: Family, addr: Option<IpAddr>, proto: u8, port: u16) -> Option<&str> {
        self.owners.get(&(family, addr, proto, port)).map(String::as_str)
    }
}

/// Starts loading the context on thread `trace-context`; the receiver gets it once.
pub fn load(objects: Objects, cfg: Config) -> std::io::Result<mpsc::Receiver<Context>> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new().name("trace-context".into()).spawn(move || {
        let (model, explainer) = match objects() {
            Ok((model, true)) => {
                let prepared = Prepared::new(&model, &cfg).map_err(|e| format!("explain cannot run: {e}"));
                (model, prepared)
            }
            Ok((model, false)) => (model, Err("no API server or --manifests to explain from".into())),
            Err(e) => (Model::default(), Err(format!("the objects could not be read ({e})"))),
        };
        let (rules, owners) = read_kernel(&model, &cfg);
        let _ = tx.send(Context { model, cfg, explainer, rules, owners, read_at: Instant::now() });
    })?;
    Ok(rx)
}

/// The kernel's rules and dispatch maps; what cannot be read is logged and left empty.
fn read_kernel(model: &Model, cfg: &Config) -> (BTreeMap<(Family, u64), HeldRule>, Owners) {
    let rules = render::render(model, cfg)
        .map_err(|e| e.to_string())
        .and_then(|ruleset| held_rules(&ruleset, &cfg.node_name).map_err(|e| e.to_string()))
        .unwrap_or_else(|e| {
            log::warn!("reading the proxy's rules: {e}; rules are shown by handle");
            BTreeMap::new()
        });
    let owners = owners().unwrap_or_else(|e| {
        log::warn!("reading the proxy's maps: {e}; services are named by their chains only");
        Owners::new()
    });
    (rules, owners)
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
                let Some(owner) = e.comment else { continue };
                // Each field of a concatenation takes whole 32-bit registers.
                let at = if by_addr { addr_len } else { 0 };
                let addr = by_addr.then(|| e.key.get(..addr_len).and_then(address)).flatten();
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
