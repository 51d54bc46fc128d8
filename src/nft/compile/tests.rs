//! A table's declaration as the batch carries it: its flags (`flags owner`, which ties the
//! table to the socket that sends the batch) and what the parser refuses among them.

use super::{Schema, compile};
use crate::netlink::abi::{NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWTABLE, NFT_TABLE_F_OWNER, NFTA_TABLE_FLAGS};
use crate::netlink::attr::{be32, top};
use crate::netlink::msg::messages;
use crate::nft::wire::Batch;

/// The flags word of each table `script` creates.
fn table_flags(script: &str) -> Result<Vec<u32>, String> {
    let mut batch = Batch::new();
    compile(script, &mut Schema::default(), &mut batch).map_err(|e| e.to_string())?;
    let bytes = batch.finish();
    let tables = messages(&bytes).filter(|m| m.kind == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE);
    Ok(tables.map(|m| top(m.body, NFTA_TABLE_FLAGS).and_then(be32).expect("a flags word")).collect())
}

#[test]
fn flags_owner_is_the_owner_flag_and_no_flags_are_none() {
    let owned = "table ip t {\n\tflags owner\n\tcomment \"c\"\n\tchain c {\n\t}\n}\n";
    assert_eq!(table_flags(owned), Ok(vec![NFT_TABLE_F_OWNER]));
    let semicolon = "table ip6 t {\n\tflags owner;\n}\n";
    assert_eq!(table_flags(semicolon), Ok(vec![NFT_TABLE_F_OWNER]));
    assert_eq!(table_flags("table ip t {\n}\nadd table ip6 t\n"), Ok(vec![0, 0]));
    let dormant = table_flags("table ip t {\n\tflags dormant\n}\n").expect_err("a dormant table");
    assert!(dormant.contains("table flag `dormant`"), "{dormant}");
    assert!(table_flags("table ip t {\n\tflags\n}\n").is_err(), "no flag at all");
}
