//! `Data`, the value or verdict an nf_tables data attribute carries, and its reading (on top of
//! the one attribute reader, `attr`), shared by the element and rule listings and the
//! compiler's reading of listed expressions.

use super::abi::{NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_VERDICT_CHAIN, NFTA_VERDICT_CODE};
use super::attr::{all, be32, get, lossy};
use super::dump::malformed;
use std::io;

/// Immediate data: a value, or a verdict (`NF_DROP`, `NF_ACCEPT`, `NFT_JUMP`, `NFT_GOTO`)
/// with its chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// Bytes, as the register holds them.
    Value(Vec<u8>),
    /// A verdict code and, for jump and goto, the chain.
    Verdict(i32, Option<String>),
}

/// Nested data (`NFTA_DATA_*`): a value's bytes, or a verdict's code and chain.
pub(crate) fn read_data(wrapped: &[u8]) -> io::Result<Data> {
    let attrs = all(wrapped)?;
    if let Some(v) = get(&attrs, NFTA_DATA_VALUE) {
        return Ok(Data::Value(v.to_vec()));
    }
    let verdict = all(get(&attrs, NFTA_DATA_VERDICT).ok_or_else(|| malformed("data"))?)?;
    let code = get(&verdict, NFTA_VERDICT_CODE).and_then(be32).ok_or_else(|| malformed("verdict code"))?;
    let chain = get(&verdict, NFTA_VERDICT_CHAIN).map(lossy);
    Ok(Data::Verdict(code as i32, chain))
}
