//! Reading nested netlink attributes out of a reply, every length checked: the one parser that
//! the element and rule listings (and the compiler's reading of listed expressions) share, and
//! `Data`, the value or verdict an attribute carries.

use super::abi::{NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_VERDICT_CHAIN, NFTA_VERDICT_CODE, NLA_TYPE_MASK};
pub(crate) use super::dump::{be64, exact_be32, malformed};
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

/// The attributes in `data`, each `(type, payload)` with the type's flags cleared; an error if
/// one overruns it or a header is cut short.
pub(crate) fn nested(mut data: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let header = data.get(..4).ok_or_else(|| malformed("attribute header"))?;
        let len = usize::from(u16::from_ne_bytes([header[0], header[1]]));
        let kind = u16::from_ne_bytes([header[2], header[3]]) & NLA_TYPE_MASK;
        // A length under the header's own makes the range empty-backwards: `get` refuses it.
        let payload = data.get(4..len).ok_or_else(|| malformed("attribute length"))?;
        out.push((kind, payload));
        data = data.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(out)
}

/// The payload of the first attribute of type `t`.
pub(crate) fn get<'a>(attrs: &[(u16, &'a [u8])], t: u16) -> Option<&'a [u8]> {
    attrs.iter().find(|(kind, _)| *kind == t).map(|(_, payload)| *payload)
}

/// Nested data (`NFTA_DATA_*`): a value's bytes, or a verdict's code and chain.
pub(crate) fn data(wrapped: &[u8]) -> io::Result<Data> {
    let attrs = nested(wrapped)?;
    if let Some(v) = get(&attrs, NFTA_DATA_VALUE) {
        return Ok(Data::Value(v.to_vec()));
    }
    let verdict = nested(get(&attrs, NFTA_DATA_VERDICT).ok_or_else(|| malformed("data"))?)?;
    let code = get(&verdict, NFTA_VERDICT_CODE).and_then(exact_be32).ok_or_else(|| malformed("verdict code"))?;
    let chain = get(&verdict, NFTA_VERDICT_CHAIN)
        .map(|c| String::from_utf8_lossy(c.strip_suffix(&[0]).unwrap_or(c)).into_owned());
    Ok(Data::Verdict(code as i32, chain))
}
