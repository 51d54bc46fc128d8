//! The one transaction of a removal: rules deleted by handle, chains flushed and deleted by
//! name, tables added and deleted by name, as nf_tables messages. Each message keeps a line
//! saying what it does, so a refused transaction names the step the kernel refused.

use super::ChainRef;
use crate::netlink::NfFamily;
use crate::netlink::abi::{
    NFT_MSG_DELCHAIN, NFT_MSG_DELRULE, NFT_MSG_DELTABLE, NFT_MSG_NEWTABLE, NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE,
    NFTA_RULE_CHAIN, NFTA_RULE_HANDLE, NFTA_RULE_TABLE, NFTA_TABLE_NAME, NLM_F_ACK, NLM_F_CREATE,
};
use crate::netlink::attr;
use crate::netlink::send::Sender;
use crate::nft::NftError;
use crate::nft::wire::Batch;

/// A removal being written: the batch and, per message, what it does.
pub(super) struct Removal {
    batch: Batch,
    steps: Vec<String>,
}

impl Removal {
    /// An empty removal.
    pub(super) fn new() -> Removal {
        Removal { batch: Batch::new(), steps: Vec::new() }
    }

    /// Appends one message; every one is acknowledged, so a refusal names its sequence number.
    fn push(&mut self, kind: u16, flags: u16, family: NfFamily, step: String, f: impl FnOnce(&mut Vec<u8>)) {
        self.batch.message(kind, NLM_F_ACK | flags, family as u8, f);
        // Names come from the kernel and may hold anything: one step stays one line.
        self.steps.push(step.escape_debug().to_string());
        self.batch.label(self.steps.len());
    }

    /// Adds `family name` unless it exists, so that deleting it next cannot fail for its absence.
    pub(super) fn add_table(&mut self, family: NfFamily, name: &str) {
        let step = format!("add table {family} {name}");
        self.push(NFT_MSG_NEWTABLE, NLM_F_CREATE, family, step, |b| attr::put_str(b, NFTA_TABLE_NAME, name));
    }

    /// Deletes table `family name` with everything in it.
    pub(super) fn delete_table(&mut self, family: NfFamily, name: &str) {
        let step = format!("delete table {family} {name}");
        self.push(NFT_MSG_DELTABLE, 0, family, step, |b| attr::put_str(b, NFTA_TABLE_NAME, name));
    }

    /// Deletes the rule with `handle` in chain `c`.
    pub(super) fn delete_rule(&mut self, c: &ChainRef, handle: u64) {
        let step = format!("delete rule {c} handle {handle}");
        self.push(NFT_MSG_DELRULE, 0, c.family, step, |b| {
            attr::put_str(b, NFTA_RULE_TABLE, &c.table);
            attr::put_str(b, NFTA_RULE_CHAIN, &c.name);
            attr::put_with(b, NFTA_RULE_HANDLE, |b| b.extend_from_slice(&handle.to_be_bytes()));
        });
    }

    /// Deletes every rule of chain `c` (a rule deletion naming no rule).
    pub(super) fn flush_chain(&mut self, c: &ChainRef) {
        self.push(NFT_MSG_DELRULE, 0, c.family, format!("flush chain {c}"), |b| {
            attr::put_str(b, NFTA_RULE_TABLE, &c.table);
            attr::put_str(b, NFTA_RULE_CHAIN, &c.name);
        });
    }

    /// Deletes chain `c`, which must be empty and unreferenced by then.
    pub(super) fn delete_chain(&mut self, c: &ChainRef) {
        self.push(NFT_MSG_DELCHAIN, 0, c.family, format!("delete chain {c}"), |b| {
            attr::put_str(b, NFTA_CHAIN_TABLE, &c.table);
            attr::put_str(b, NFTA_CHAIN_NAME, &c.name);
        });
    }

    /// Sends it as one transaction: all of it is applied or, if the kernel refuses a step,
    /// nothing, and the error names that step.
    pub(super) fn send(self) -> Result<(), NftError> {
        let (bytes, lines) = self.batch.finish_with_lines();
        let steps = self.steps.join("\n");
        Sender::default().send(&bytes).map_err(|e| lines.explain(e, &steps))
    }
}
