//! Chains and set declarations compared. A chain's rules are compared as expressions: each
//! desired rule compiled as a sync would send it, each kernel rule read back from the
//! kernel's listing into the same terms (`compile::read_back`), a rule's anonymous set known
//! by its elements rather than its kernel-chosen name. A chain that differs shows the rules a
//! sync would remove and add, each removed rule as its text when some desired rule compiles
//! to it, else as its expressions.

use super::elements::Owned;
use super::report::{Change, Kind, Object};
use crate::model::Family;
use crate::netlink::abi::{NF_ACCEPT, NF_INET_HOOK_NAMES};
use crate::netlink::{Hook, NfFamily};
use crate::nft::compile::{Data, DeclaredChain, Expr, ReadExpr, SetSpec};
use crate::render;
use std::collections::{BTreeMap, HashMap};

/// A chain as the kernel holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KernelChain {
    /// Its hook, for a base chain.
    pub hook: Option<Hook>,
    /// Its rules' expressions, in order.
    pub rules: Vec<Vec<ReadExpr>>,
}

/// The service port a per-service chain belongs to, as upstream spells it
/// (`namespace/name:port`), the key the report groups changes by.
pub(crate) fn owner_of_chain(chain: &str) -> Option<String> {
    render::owner_of_chain(chain).map(|spn| spn.to_string())
}

/// The name an anonymous set is compared by: its elements, sorted.
pub(super) fn anon_name(mut elements: Vec<(Vec<u8>, u32, Option<Data>)>) -> String {
    elements.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let items: Vec<String> = elements
        .iter()
        .map(|(k, flags, data)| {
            let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
            let end = if flags & crate::netlink::abi::NFT_SET_ELEM_INTERVAL_END != 0 { " end" } else { "" };
            match data {
                Some(d) => format!("0x{hex}{end} : {d:?}"),
                None => format!("0x{hex}{end}"),
            }
        })
        .collect();
    format!("{{ {} }}", items.join(", "))
}

/// A desired chain's rules as the kernel would list them.
pub(crate) fn desired_rules(chain: &DeclaredChain) -> Vec<Vec<ReadExpr>> {
    chain
        .rules
        .iter()
        .map(|r| {
            let anon: HashMap<u32, String> = r.anon.iter().map(|a| (a.id, anon_name(a.elements.clone()))).collect();
            r.exprs.iter().map(|e| ReadExpr::Known(renamed(e.clone(), &anon).normal())).collect()
        })
        .collect()
}

/// A lookup of an anonymous set of the same rule, named by its elements.
fn renamed(mut e: Expr, anon: &HashMap<u32, String>) -> Expr {
    if let Expr::Lookup { set, set_id: Some(id), .. } = &mut e
        && let Some(name) = anon.get(id)
    {
        *set = name.clone();
    }
    e
}

/// Compares the chains of one family's table.
pub(super) struct ChainDiff<'a> {
    /// The family.
    pub family: Family,
    /// Desired chains.
    pub desired: &'a BTreeMap<String, DeclaredChain>,
    /// Texts of desired rules by their expressions, for naming kernel rules.
    texts: HashMap<String, &'a str>,
}

impl<'a> ChainDiff<'a> {
    /// A comparison against `desired`.
    pub(super) fn new(family: Family, desired: &'a BTreeMap<String, DeclaredChain>) -> ChainDiff<'a> {
        ChainDiff { family, desired, texts: HashMap::new() }
    }

    fn word(&self) -> &'static str {
        NfFamily::from(self.family).word()
    }

    /// The differences between the desired chains and the kernel's.
    pub(super) fn compare(&mut self, kernel: &BTreeMap<String, KernelChain>, out: &mut Vec<Owned>) {
        for (name, chain) in self.desired {
            let want = KernelChain { hook: chain.hook.clone(), rules: desired_rules(chain) };
            match kernel.get(name) {
                Some(held) if *held == want => {}
                Some(held) => {
                    let (removed, added) = self.rule_diff(held, &want, chain);
                    out.push(self.change(name, Kind::Changed, removed, added));
                }
                None => {
                    let added = hook_text(&want.hook).into_iter().chain(chain.rules.iter().map(|r| r.text.clone()));
                    out.push(self.change(name, Kind::Added, vec![], added.collect()));
                }
            }
        }
        for (name, held) in kernel.iter().filter(|(n, _)| !self.desired.contains_key(*n)) {
            let mut removed: Vec<String> = hook_text(&held.hook).into_iter().collect();
            removed.extend(held.rules.iter().map(|r| self.rule_text(r)));
            out.push(self.change(name, Kind::Removed, removed, vec![]));
        }
    }

    fn change(&self, name: &str, change: Kind, removed: Vec<String>, added: Vec<String>) -> Owned {
        let c = Change { family: self.word(), object: Object::Chain, name: name.to_string(), change, removed, added };
        (owner_of_chain(name), c)
    }

    /// A kernel rule's text: a desired rule's, if one compiles to it.
    pub(super) fn rule_text(&mut self, rule: &[ReadExpr]) -> String {
        if self.texts.is_empty() {
            for chain in self.desired.values() {
                for (r, exprs) in chain.rules.iter().zip(desired_rules(chain)) {
                    self.texts.insert(format!("{exprs:?}"), &r.text);
                }
            }
        }
        match (rule, self.texts.get(&format!("{rule:?}"))) {
            (_, Some(t)) => t.to_string(),
            // A verdict alone (a frontend's chain before its endpoints changed) reads back.
            ([ReadExpr::Known(Expr::Immediate { dreg: 0, data: Data::Verdict(code, chain) })], None) => {
                verdict_text(*code, chain.as_deref())
            }
            _ => rule.iter().map(ToString::to_string).collect::<Vec<_>>().join(" "),
        }
    }

    /// The rules a sync would remove and add, kept rules left out (a longest common run).
    fn rule_diff(
        &mut self,
        held: &KernelChain,
        want: &KernelChain,
        chain: &DeclaredChain,
    ) -> (Vec<String>, Vec<String>) {
        let (mut removed, mut added) = (Vec::new(), Vec::new());
        if held.hook != want.hook {
            removed.extend(hook_text(&held.hook));
            added.extend(hook_text(&want.hook));
        }
        let keep = common(&held.rules, &want.rules);
        let (kept_held, kept_want): (Vec<usize>, Vec<usize>) = keep.into_iter().unzip();
        for (_, r) in held.rules.iter().enumerate().filter(|(i, _)| !kept_held.contains(i)) {
            removed.push(self.rule_text(r));
        }
        for (_, r) in chain.rules.iter().enumerate().filter(|(j, _)| !kept_want.contains(j)) {
            added.push(r.text.clone());
        }
        (removed, added)
    }
}

/// Index pairs of a longest common subsequence of two rule lists; none when the lists are
/// too long to compare that way (every rule is then shown as removed and added).
fn common(a: &[Vec<ReadExpr>], b: &[Vec<ReadExpr>]) -> Vec<(usize, usize)> {
    if a.len().saturating_mul(b.len()) > 4_000_000 {
        return Vec::new();
    }
    let mut len = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            len[i][j] = if a[i] == b[j] { len[i + 1][j + 1] + 1 } else { len[i + 1][j].max(len[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push((i, j));
            (i, j) = (i + 1, j + 1);
        } else if len[i + 1][j] >= len[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

fn hook_text(hook: &Option<Hook>) -> Option<String> {
    let h = hook.as_ref()?;
    let name = NF_INET_HOOK_NAMES.get(h.hooknum as usize).unwrap_or(&"?");
    let policy = if h.policy == NF_ACCEPT as u32 { "accept" } else { "drop" };
    Some(format!("type {} hook {name} priority {}; policy {policy};", h.kind, h.priority))
}

/// A set's declaration as the report shows it (its name aside).
struct Decl<'a>(&'a SetSpec);

impl std::fmt::Display for Decl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0;
        write!(f, "flags 0x{:x} key type 0x{:x} length {}", s.flags, s.key.0, s.key.1)?;
        if let Some((ty, len)) = s.data {
            write!(f, " data type 0x{ty:x} length {len}")?;
        }
        if let Some(ms) = s.timeout_ms {
            write!(f, " timeout {ms}ms")?;
        }
        if let Some(n) = s.size {
            write!(f, " size {n}")?;
        }
        if !s.concat.is_empty() {
            write!(f, " fields {:?}", s.concat)?;
        }
        let udata: String = s.udata.iter().map(|b| format!("{b:02x}")).collect();
        write!(f, " userdata 0x{udata}")
    }
}

/// The differences between the desired named sets and the kernel's.
pub(super) fn compare_sets(
    family: Family,
    desired: &BTreeMap<String, SetSpec>,
    kernel: &BTreeMap<String, SetSpec>,
    out: &mut Vec<Owned>,
) {
    let family = NfFamily::from(family).word();
    let change = |name: &str, change, removed: Option<&SetSpec>, added: Option<&SetSpec>| {
        let (removed, added) = (removed.map(|d| Decl(d).to_string()), added.map(|d| Decl(d).to_string()));
        let c = Change {
            family,
            object: Object::Set,
            name: name.to_string(),
            change,
            removed: removed.into_iter().collect(),
            added: added.into_iter().collect(),
        };
        (None, c)
    };
    for (name, want) in desired {
        match kernel.get(name) {
            Some(held) if crate::nft::sizes::serves_as(held, want) => {}
            Some(held) => out.push(change(name, Kind::Changed, Some(&held.as_sent()), Some(want))),
            None => out.push(change(name, Kind::Added, None, Some(want))),
        }
    }
    for (name, held) in kernel.iter().filter(|(n, _)| !desired.contains_key(*n)) {
        out.push(change(name, Kind::Removed, Some(&held.as_sent()), None));
    }
}

/// A verdict as `nft` writes it.
pub(super) fn verdict_text(code: i32, chain: Option<&str>) -> String {
    use crate::netlink::abi::{NF_ACCEPT, NF_DROP, NFT_GOTO, NFT_JUMP, NFT_RETURN};
    match (code, chain) {
        (NF_ACCEPT, _) => "accept".into(),
        (NF_DROP, _) => "drop".into(),
        (NFT_RETURN, _) => "return".into(),
        (NFT_JUMP, Some(c)) => format!("jump {c}"),
        (NFT_GOTO, Some(c)) => format!("goto {c}"),
        (code, _) => format!("[ verdict {code} ]"),
    }
}
