//! Objects someone else added to our tables, which a refresh deletes by kind and handle: a name
//! read from the kernel never reaches a script, whatever characters it holds.

use crate::netlink::TableObject;

/// One object someone else added to one of our tables, to be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Foreign {
    /// Its kind.
    pub kind: TableObject,
    /// Its handle in the table, unique per kind.
    pub handle: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::abi::{NFT_OBJECT_COUNTER, NFT_OBJECT_CT_HELPER};

    #[test]
    fn sets_sort_before_what_their_elements_may_refer_to() {
        let mut found = [
            Foreign { kind: TableObject::Stateful(NFT_OBJECT_COUNTER), handle: 1 },
            Foreign { kind: TableObject::Chain, handle: 2 },
            Foreign { kind: TableObject::Set, handle: 3 },
        ];
        found.sort();
        assert_eq!(found[0].kind, TableObject::Set);
        assert_eq!(TableObject::Stateful(NFT_OBJECT_CT_HELPER).nft_words(), None);
        assert_eq!(TableObject::Stateful(NFT_OBJECT_CT_HELPER).to_string(), "ct helper");
        assert_eq!(TableObject::Stateful(42).to_string(), "object of type 42");
    }
}
