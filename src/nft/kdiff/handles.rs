//! The proxy's rules as the kernel holds them, by handle: what a packet trace names a rule by.
//! Each rule is named by its chain and by the text of the desired rule that compiles to it
//! (else by its expressions), as `--dry-run --diff` names a kernel rule.

use super::DiffError;
use super::chains::ChainDiff;
use super::kernel::{anon_names, rule_exprs};
use crate::model::Family;
use crate::netlink::{NfFamily, Socket};
use crate::nft::compile::{self, Declared};
use crate::render::{self, Ruleset, TABLE_NAME};
use std::collections::BTreeMap;

/// One rule of the proxy's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRule {
    /// Its chain.
    pub chain: String,
    /// Its text: a desired rule's when one compiles to it, else its expressions.
    pub text: String,
}

/// The rules a full sync declares, compiled once, to name the kernel's rules by.
pub struct RuleNames {
    declared: Declared,
}

impl RuleNames {
    /// The names a full sync of `ruleset` (for node `node`) gives.
    pub fn new(ruleset: &Ruleset, node: &str) -> Result<RuleNames, DiffError> {
        Ok(RuleNames { declared: compile::declared(&render::full_sync_script_without_elements(ruleset, node)?)? })
    }

    /// Every rule of the proxy's `ip` and `ip6` tables as the kernel holds them now, by family
    /// and handle. Missing tables hold no rules.
    pub fn read(&self) -> Result<BTreeMap<(Family, u64), HeldRule>, DiffError> {
        let mut sock = Socket::open()?;
        let mut out = BTreeMap::new();
        let no_chains = BTreeMap::new();
        for family in Family::ALL {
            let fam = NfFamily::from(family);
            if !sock.table_exists(fam, TABLE_NAME)? {
                continue;
            }
            let anon = anon_names(&mut sock, fam, &mut BTreeMap::new())?;
            let chains = self.declared.tables.get(&family).map_or(&no_chains, |t| &t.chains);
            let mut names = ChainDiff::new(family, chains);
            for rule in sock.rule_listings(fam, TABLE_NAME)? {
                let text = names.rule_text(&rule_exprs(&rule, &anon));
                out.insert((family, rule.handle), HeldRule { chain: rule.chain, text });
            }
        }
        Ok(out)
    }
}
