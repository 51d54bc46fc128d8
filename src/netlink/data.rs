//! `Data`, the value or verdict an nf_tables data attribute carries: its one writer (batches'
//! elements and immediates, the compiler's anonymous sets) and its one reader (on top of the
//! attribute reader, `attr`), shared by the element and rule listings and the compiler's
//! reading of listed expressions.

use super::abi::{NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_VERDICT_CHAIN, NFTA_VERDICT_CODE, NLA_F_NESTED};
use super::attr::{Malformed, all, be32, get, lossy, pick, put, put_str, put_with};
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

/// `Data` borrowed: what a batch writes for an element without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataRef<'a> {
    /// Bytes, as the register holds them.
    Value(&'a [u8]),
    /// A verdict code and, for jump and goto, the chain.
    Verdict(i32, Option<&'a str>),
}

impl Data {
    /// The data borrowed.
    pub(crate) fn as_data_ref(&self) -> DataRef<'_> {
        match self {
            Data::Value(v) => DataRef::Value(v),
            Data::Verdict(code, chain) => DataRef::Verdict(*code, chain.as_deref()),
        }
    }

    /// Writes the data as nested attribute `kind` (see [`DataRef::put`]).
    pub(crate) fn put(&self, b: &mut Vec<u8>, kind: u16) {
        self.as_data_ref().put(b, kind);
    }
}

impl DataRef<'_> {
    /// The data owned.
    pub(crate) fn to_data(self) -> Data {
        match self {
            DataRef::Value(v) => Data::Value(v.to_vec()),
            DataRef::Verdict(code, chain) => Data::Verdict(code, chain.map(str::to_string)),
        }
    }

    /// Writes the data as nested attribute `kind` (`NFTA_SET_ELEM_KEY`, `NFTA_SET_ELEM_DATA`,
    /// `NFTA_IMMEDIATE_DATA`…): `NFTA_DATA_VALUE` with the bytes, or `NFTA_DATA_VERDICT` with
    /// the code and, if there is one, the chain.
    pub(crate) fn put(self, b: &mut Vec<u8>, kind: u16) {
        put_with(b, kind | NLA_F_NESTED, |b| match self {
            DataRef::Value(v) => put(b, NFTA_DATA_VALUE, v),
            DataRef::Verdict(code, chain) => put_with(b, NFTA_DATA_VERDICT | NLA_F_NESTED, |b| {
                put(b, NFTA_VERDICT_CODE, &code.to_be_bytes());
                if let Some(chain) = chain {
                    put_str(b, NFTA_VERDICT_CHAIN, chain);
                }
            }),
        });
    }
}

/// Nested data (`NFTA_DATA_*`): a value's bytes, or a verdict's code and chain.
pub(crate) fn read_data(wrapped: &[u8]) -> io::Result<Data> {
    let [value, verdict] = pick(wrapped, [NFTA_DATA_VALUE, NFTA_DATA_VERDICT])?;
    if let Some(v) = value {
        return Ok(Data::Value(v.to_vec()));
    }
    read_verdict(verdict.ok_or(Malformed("data with neither value nor verdict"))?)
}

/// A verdict's nested attributes (`NFTA_VERDICT_*`): its code and, for a jump or goto, the
/// chain.
pub(crate) fn read_verdict(nested: &[u8]) -> io::Result<Data> {
    let verdict = all(nested)?;
    let code = get(&verdict, NFTA_VERDICT_CODE).and_then(be32).ok_or(Malformed("a verdict with no valid code"))?;
    let chain = get(&verdict, NFTA_VERDICT_CHAIN).map(lossy);
    Ok(Data::Verdict(code as i32, chain))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::abi::{NFT_GOTO, NFTA_IMMEDIATE_DATA};

    #[test]
    fn data_written_reads_back_and_is_laid_out_as_nft_lays_it() {
        for data in
            [Data::Value(vec![10, 0, 0, 1]), Data::Verdict(NFT_GOTO, Some("svc".into())), Data::Verdict(0, None)]
        {
            let mut b = Vec::new();
            data.put(&mut b, NFTA_IMMEDIATE_DATA);
            let attrs = all(&b).expect("one attribute");
            assert_eq!(attrs.len(), 1);
            assert_eq!(u16::from_ne_bytes([b[2], b[3]]), NFTA_IMMEDIATE_DATA | NLA_F_NESTED);
            assert_eq!(read_data(attrs[0].1).expect("well-formed"), data);
        }
        let mut b = Vec::new();
        DataRef::Verdict(NFT_GOTO, Some("c")).put(&mut b, 2);
        #[rustfmt::skip]
        let want = [
            24, 0, 2, 0x80,
            20, 0, 2, 0x80,
            8, 0, 1, 0, 0xff, 0xff, 0xff, 0xfc,
            6, 0, 2, 0, b'c', 0, 0, 0,
        ];
        assert_eq!(b, want);
    }
}
