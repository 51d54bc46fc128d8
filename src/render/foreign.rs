//! Objects someone else added to our tables, which a refresh deletes by kind and handle: a name
//! read from the kernel never reaches a script, whatever characters it holds.

use std::fmt;

/// nf_tables' stateful object types (`NFT_OBJECT_*` in `linux/netfilter/nf_tables.h`).
const NFT_OBJECT_COUNTER: u32 = 1;
const NFT_OBJECT_QUOTA: u32 = 2;
const NFT_OBJECT_CT_HELPER: u32 = 3;
const NFT_OBJECT_LIMIT: u32 = 4;
const NFT_OBJECT_CONNLIMIT: u32 = 5;
const NFT_OBJECT_TUNNEL: u32 = 6;
const NFT_OBJECT_CT_TIMEOUT: u32 = 7;
const NFT_OBJECT_SECMARK: u32 = 8;
const NFT_OBJECT_CT_EXPECT: u32 = 9;
const NFT_OBJECT_SYNPROXY: u32 = 10;

/// What a table holds besides rules and elements. The order is the order of deletion in one
/// transaction: a set first, since its elements may refer to chains (verdict maps) and to
/// stateful objects (object maps), which the kernel refuses to delete while referred to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjectKind {
    /// A named set or map.
    Set,
    /// A chain.
    Chain,
    /// A flowtable.
    Flowtable,
    /// A stateful object of this `NFT_OBJECT_*` type (counter, quota, ct helper…).
    Stateful(u32),
}

impl ObjectKind {
    /// The words `nft` 1.0.6 takes in `delete <words> <family> <table> handle <N>`; `None`
    /// for kinds it cannot delete by handle (ct helpers, timeouts and expectations have no
    /// `handle` form; connlimit and tunnel objects no syntax at all), which go over netlink.
    pub fn nft_words(self) -> Option<&'static str> {
        match self {
            ObjectKind::Set => Some("set"),
            ObjectKind::Chain => Some("chain"),
            ObjectKind::Flowtable => Some("flowtable"),
            ObjectKind::Stateful(NFT_OBJECT_COUNTER) => Some("counter"),
            ObjectKind::Stateful(NFT_OBJECT_QUOTA) => Some("quota"),
            ObjectKind::Stateful(NFT_OBJECT_LIMIT) => Some("limit"),
            ObjectKind::Stateful(NFT_OBJECT_SECMARK) => Some("secmark"),
            ObjectKind::Stateful(NFT_OBJECT_SYNPROXY) => Some("synproxy"),
            ObjectKind::Stateful(_) => None,
        }
    }

    /// The `NFT_OBJECT_*` type of a stateful object.
    pub fn object_type(self) -> Option<u32> {
        match self {
            ObjectKind::Stateful(t) => Some(t),
            ObjectKind::Set | ObjectKind::Chain | ObjectKind::Flowtable => None,
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = match self {
            ObjectKind::Stateful(NFT_OBJECT_CT_HELPER) => "ct helper",
            ObjectKind::Stateful(NFT_OBJECT_CONNLIMIT) => "connlimit",
            ObjectKind::Stateful(NFT_OBJECT_TUNNEL) => "tunnel",
            ObjectKind::Stateful(NFT_OBJECT_CT_TIMEOUT) => "ct timeout",
            ObjectKind::Stateful(NFT_OBJECT_CT_EXPECT) => "ct expectation",
            other => match other.nft_words() {
                Some(words) => words,
                None => return write!(f, "object of type {}", other.object_type().unwrap_or(0)),
            },
        };
        f.write_str(word)
    }
}

/// One object someone else added to one of our tables, to be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Foreign {
    /// Its kind.
    pub kind: ObjectKind,
    /// Its handle in the table, unique per kind.
    pub handle: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_sort_before_what_their_elements_may_refer_to() {
        let mut found = [
            Foreign { kind: ObjectKind::Stateful(NFT_OBJECT_COUNTER), handle: 1 },
            Foreign { kind: ObjectKind::Chain, handle: 2 },
            Foreign { kind: ObjectKind::Set, handle: 3 },
        ];
        found.sort();
        assert_eq!(found[0].kind, ObjectKind::Set);
        assert_eq!(ObjectKind::Stateful(NFT_OBJECT_CT_HELPER).nft_words(), None);
        assert_eq!(ObjectKind::Stateful(NFT_OBJECT_CT_HELPER).to_string(), "ct helper");
        assert_eq!(ObjectKind::Stateful(42).to_string(), "object of type 42");
    }
}
