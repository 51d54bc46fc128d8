//! Listing what a table holds besides rules and elements (chains, named sets, stateful objects,
//! flowtables), each with its handle, which is what deleting it takes; and the tables of every
//! family and a table's chains by name, which is what the takeover looks through.

use super::abi::{
    NFPROTO_UNSPEC, NFT_CHAIN_BINDING, NFT_MSG_GETCHAIN, NFT_MSG_GETFLOWTABLE, NFT_MSG_GETOBJ, NFT_MSG_GETRULE,
    NFT_MSG_GETSET, NFT_MSG_GETTABLE, NFT_OBJECT_CONNLIMIT, NFT_OBJECT_COUNTER, NFT_OBJECT_CT_EXPECT,
    NFT_OBJECT_CT_HELPER, NFT_OBJECT_CT_TIMEOUT, NFT_OBJECT_LIMIT, NFT_OBJECT_QUOTA, NFT_OBJECT_SECMARK,
    NFT_OBJECT_SYNPROXY, NFT_OBJECT_TUNNEL, NFT_SET_ANONYMOUS, NFTA_CHAIN_FLAGS, NFTA_CHAIN_HANDLE, NFTA_CHAIN_NAME,
    NFTA_CHAIN_TABLE, NFTA_FLOWTABLE_HANDLE, NFTA_FLOWTABLE_NAME, NFTA_FLOWTABLE_TABLE, NFTA_OBJ_HANDLE, NFTA_OBJ_NAME,
    NFTA_OBJ_TABLE, NFTA_OBJ_TYPE, NFTA_RULE_CHAIN, NFTA_RULE_HANDLE, NFTA_RULE_TABLE, NFTA_SET_FLAGS, NFTA_SET_HANDLE,
    NFTA_SET_NAME, NFTA_SET_TABLE, NFTA_TABLE_NAME, NLM_F_DUMP,
};
use super::attr::{self, Malformed, be32, be64, utf8};
use super::{NfFamily, Socket};
use std::{fmt, io};

/// What a table holds besides rules and elements. The order is the order of deletion in one
/// transaction: a set first, since its elements may refer to chains (verdict maps) and to
/// stateful objects (object maps), which the kernel refuses to delete while referred to. Named
/// apart from `model::ObjectKind`, the kinds of API objects the proxy watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TableObject {
    /// A named set or map.
    Set,
    /// A chain.
    Chain,
    /// A flowtable.
    Flowtable,
    /// A stateful object of this `NFT_OBJECT_*` type (counter, quota, ct helper…).
    Stateful(u32),
}

impl TableObject {
    /// The words `nft` 1.0.6 takes in `delete <words> <family> <table> handle <N>`; `None`
    /// for kinds it cannot delete by handle (ct helpers, timeouts and expectations have no
    /// `handle` form; connlimit and tunnel objects no syntax at all), which go over netlink.
    pub fn nft_words(self) -> Option<&'static str> {
        match self {
            TableObject::Set => Some("set"),
            TableObject::Chain => Some("chain"),
            TableObject::Flowtable => Some("flowtable"),
            TableObject::Stateful(NFT_OBJECT_COUNTER) => Some("counter"),
            TableObject::Stateful(NFT_OBJECT_QUOTA) => Some("quota"),
            TableObject::Stateful(NFT_OBJECT_LIMIT) => Some("limit"),
            TableObject::Stateful(NFT_OBJECT_SECMARK) => Some("secmark"),
            TableObject::Stateful(NFT_OBJECT_SYNPROXY) => Some("synproxy"),
            TableObject::Stateful(_) => None,
        }
    }

    /// The `NFT_OBJECT_*` type of a stateful object.
    pub fn object_type(self) -> Option<u32> {
        match self {
            TableObject::Stateful(t) => Some(t),
            TableObject::Set | TableObject::Chain | TableObject::Flowtable => None,
        }
    }
}

impl fmt::Display for TableObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = match self {
            TableObject::Stateful(NFT_OBJECT_CT_HELPER) => "ct helper",
            TableObject::Stateful(NFT_OBJECT_CONNLIMIT) => "connlimit",
            TableObject::Stateful(NFT_OBJECT_TUNNEL) => "tunnel",
            TableObject::Stateful(NFT_OBJECT_CT_TIMEOUT) => "ct timeout",
            TableObject::Stateful(NFT_OBJECT_CT_EXPECT) => "ct expectation",
            other => match other.nft_words() {
                Some(words) => words,
                None => return write!(f, "object of type {}", other.object_type().unwrap_or(0)),
            },
        };
        f.write_str(word)
    }
}

/// One object listed in a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// What it is.
    pub kind: TableObject,
    /// Its handle, unique per kind in the table.
    pub handle: u64,
    /// Its name as the kernel reported it (any bytes, shown lossily): for telling our own
    /// chains and sets by name, and for logs; never written into a script.
    pub name: String,
}

/// Where one kind's dump keeps the attributes a listing reads.
pub(super) struct Dump {
    msg: u16,
    table: u16,
    name: u16,
    handle: u16,
}

pub(super) const CHAINS: Dump =
    Dump { msg: NFT_MSG_GETCHAIN, table: NFTA_CHAIN_TABLE, name: NFTA_CHAIN_NAME, handle: NFTA_CHAIN_HANDLE };
pub(super) const SETS: Dump =
    Dump { msg: NFT_MSG_GETSET, table: NFTA_SET_TABLE, name: NFTA_SET_NAME, handle: NFTA_SET_HANDLE };
const OBJECTS: Dump = Dump { msg: NFT_MSG_GETOBJ, table: NFTA_OBJ_TABLE, name: NFTA_OBJ_NAME, handle: NFTA_OBJ_HANDLE };
const RULES: Dump =
    Dump { msg: NFT_MSG_GETRULE, table: NFTA_RULE_TABLE, name: NFTA_RULE_CHAIN, handle: NFTA_RULE_HANDLE };
const FLOWTABLES: Dump = Dump {
    msg: NFT_MSG_GETFLOWTABLE,
    table: NFTA_FLOWTABLE_TABLE,
    name: NFTA_FLOWTABLE_NAME,
    handle: NFTA_FLOWTABLE_HANDLE,
};

impl Socket {
    /// Everything `table` holds besides rules and elements: its chains, named sets and maps,
    /// stateful objects of every type, and flowtables (empty if the table is missing). A rule's
    /// anonymous sets and chains are left out: they go with the rule.
    pub fn table_objects(&mut self, family: NfFamily, table: &str) -> io::Result<Vec<Listed>> {
        let mut all = Vec::new();
        for m in self.dump(&CHAINS, family, table)? {
            if flags(&m, NFTA_CHAIN_FLAGS)? & NFT_CHAIN_BINDING == 0 {
                all.push(listed(&m, &CHAINS, TableObject::Chain)?);
            }
        }
        for m in self.dump(&SETS, family, table)? {
            if flags(&m, NFTA_SET_FLAGS)? & NFT_SET_ANONYMOUS == 0 {
                all.push(listed(&m, &SETS, TableObject::Set)?);
            }
        }
        for m in self.dump(&OBJECTS, family, table)? {
            let kind = attr::top(&m, NFTA_OBJ_TYPE).and_then(be32).ok_or(Malformed("no valid object type"))?;
            all.push(listed(&m, &OBJECTS, TableObject::Stateful(kind))?);
        }
        for m in self.dump(&FLOWTABLES, family, table)? {
            all.push(listed(&m, &FLOWTABLES, TableObject::Flowtable)?);
        }
        Ok(all)
    }

    /// Every table of every family this proxy knows, as `(family, name)`. A name that is not
    /// UTF-8 is left out: no table of kube-proxy's or this proxy's has one, and what is read
    /// back lossily could not be named again.
    pub fn tables(&mut self) -> io::Result<Vec<(NfFamily, String)>> {
        let mut out = Vec::new();
        for m in self.request(NFT_MSG_GETTABLE, NFPROTO_UNSPEC, NLM_F_DUMP, &[])? {
            let number = *m.first().ok_or(Malformed("no valid family"))?;
            let name = attr::top(&m, NFTA_TABLE_NAME).ok_or(Malformed("no valid table name"))?;
            if let (Some(family), Some(name)) = (NfFamily::from_number(number), utf8(name)) {
                out.push((family, name));
            }
        }
        Ok(out)
    }

    /// The names of `table`'s chains (empty if the table is missing), a rule's anonymous
    /// chains and names that are not UTF-8 left out, as by [`Socket::tables`].
    pub fn chains(&mut self, family: NfFamily, table: &str) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for m in self.dump(&CHAINS, family, table)? {
            if flags(&m, NFTA_CHAIN_FLAGS)? & NFT_CHAIN_BINDING != 0 {
                continue;
            }
            let name = attr::top(&m, NFTA_CHAIN_NAME).ok_or(Malformed("no valid chain name"))?;
            out.extend(utf8(name));
        }
        Ok(out)
    }

    /// The replies of a dump of `table`'s rules (empty if the table is missing).
    pub(super) fn rule_replies(&mut self, family: NfFamily, table: &str) -> io::Result<Vec<Vec<u8>>> {
        self.dump(&RULES, family, table)
    }

    /// The replies of one dump that belong to `table`: not every kernel filters every dump
    /// by table, but each reply names its table.
    pub(super) fn dump(&mut self, dump: &Dump, family: NfFamily, table: &str) -> io::Result<Vec<Vec<u8>>> {
        let ours = |m: &Vec<u8>| {
            attr::top(m, dump.table).is_some_and(|t| t.strip_suffix(&[0]).unwrap_or(t) == table.as_bytes())
        };
        match self.request(dump.msg, family as u8, NLM_F_DUMP, &[(dump.table, table)]) {
            Ok(replies) => Ok(replies.into_iter().filter(ours).collect()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

/// The listing of one reply; an error if it lacks a well-formed handle, since what cannot be
/// named by handle cannot be deleted.
fn listed(m: &[u8], dump: &Dump, kind: TableObject) -> io::Result<Listed> {
    let handle = attr::top(m, dump.handle).and_then(be64).ok_or(Malformed("no valid handle"))?;
    let name = attr::top(m, dump.name).map(attr::lossy);
    Ok(Listed { kind, handle, name: name.unwrap_or_default() })
}

/// A flags attribute, zero when absent (the kernel leaves out flags that are all clear).
fn flags(m: &[u8], t: u16) -> io::Result<u32> {
    attr::top(m, t).map_or(Ok(0), |f| be32(f).ok_or_else(|| Malformed("no valid flags").into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attr::put;

    #[test]
    fn reads_handles_and_refuses_replies_without_one() {
        let mut body = vec![2u8, 0, 0, 0];
        put(&mut body, NFTA_CHAIN_TABLE, b"kube-nftproxy\0");
        put(&mut body, NFTA_CHAIN_HANDLE, &7u64.to_be_bytes());
        put(&mut body, NFTA_CHAIN_NAME, b"x; y\n\0");
        let found = listed(&body, &CHAINS, TableObject::Chain).expect("a well-formed reply");
        assert_eq!((found.handle, found.name.as_str()), (7, "x; y\n"));

        let mut short = vec![2u8, 0, 0, 0];
        put(&mut short, NFTA_CHAIN_HANDLE, &7u32.to_be_bytes());
        assert!(listed(&short, &CHAINS, TableObject::Chain).is_err(), "a 4-byte handle is malformed");
        assert!(listed(&[2, 0], &CHAINS, TableObject::Chain).is_err(), "a truncated body has no handle");
        assert!(flags(&short, NFTA_CHAIN_FLAGS).is_ok_and(|f| f == 0), "absent flags are clear");
    }
}
