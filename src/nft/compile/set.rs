//! Sets and maps as `nft` declares them to the kernel: key and data types folded from their
//! fields, lengths in registers, flags, timeout, the concatenation's field lengths for an
//! interval set, and the user data `nft` reads back to print the declaration (byte orders,
//! `typeof` expressions, comment): without it the kernel's set would list differently.

use super::CompileError;
use super::expr::Data;
use super::field::{Field, Kind, Load, slots};
use super::lex::Token;
use super::parse::SetDecl;
use crate::model::Family;
use crate::netlink::SetSpec;
use crate::netlink::abi::*;
use crate::netlink::udata::{put as tlv, put_comment, put_u32 as tlv_u32};

/// Bits per type in a concatenation's folded type.
const TYPE_BITS: u32 = 6;

/// One key or data field of a declaration.
#[derive(Debug, Clone)]
enum Part {
    Type(Kind),
    Verdict,
    Expr(Field),
}

impl Part {
    fn kind(&self) -> Option<Kind> {
        match self {
            Part::Type(k) => Some(*k),
            Part::Expr(f) => Some(f.kind),
            Part::Verdict => None,
        }
    }
}

fn parts(fields: &[Vec<Token>], typeof_: bool, family: Family) -> Result<Vec<Part>, CompileError> {
    fields
        .iter()
        .map(|t| match t.as_slice() {
            [Token::Word(w)] if w == "verdict" => Ok(Part::Verdict),
            [Token::Word(w)] if !typeof_ => {
                Kind::named(w).map(Part::Type).ok_or_else(|| CompileError::new(format!("type `{w}`")))
            }
            toks => match Field::parse(toks, family)?.0 {
                // nft 1.0.6 has no `typeof` form of a hash: it crashes listing such a set.
                Field { load: Load::Hash(_), .. } => Err(CompileError::new("a hash in a set's `typeof`")),
                f => Ok(Part::Expr(f)),
            },
        })
        .collect()
}

/// Folded type and register length of `parts`.
fn folded(parts: &[Part]) -> (u32, u32) {
    if let [Part::Verdict] = parts {
        return (NFT_DATA_VERDICT, 0);
    }
    let kinds: Vec<Kind> = parts.iter().filter_map(Part::kind).collect();
    if let [k] = kinds.as_slice() {
        return (*k as u32, k.len());
    }
    let ty = kinds.iter().fold(0, |t, k| (t << TYPE_BITS) | *k as u32);
    (ty, kinds.iter().map(|k| slots(k.len()) * 4).sum())
}

/// `typeof` user data of one expression: its type and what describes it.
fn expr_udata(f: &Field) -> Vec<u8> {
    let mut data = Vec::new();
    let ty = match (f.load, f.desc) {
        (Load::Numgen { inc, modulus, offset }, _) => {
            tlv_u32(&mut data, NFTNL_UDATA_NUMGEN_TYPE, if inc { NFT_NG_INCREMENTAL } else { NFT_NG_RANDOM });
            tlv_u32(&mut data, NFTNL_UDATA_NUMGEN_MOD, modulus);
            tlv_u32(&mut data, NFTNL_UDATA_NUMGEN_OFFSET, offset);
            EXPR_NUMGEN
        }
        (Load::Meta(key), _) => {
            tlv_u32(&mut data, NFTNL_UDATA_META_KEY, key);
            EXPR_META
        }
        (_, Some((desc, tmpl))) => {
            tlv_u32(&mut data, NFTNL_UDATA_SET_KEY_PAYLOAD_DESC, desc);
            tlv_u32(&mut data, NFTNL_UDATA_SET_KEY_PAYLOAD_TYPE, tmpl);
            EXPR_PAYLOAD
        }
        _ => 0,
    };
    let mut out = Vec::new();
    tlv_u32(&mut out, NFTNL_UDATA_SET_TYPEOF_EXPR, ty);
    tlv(&mut out, NFTNL_UDATA_SET_TYPEOF_DATA, &data);
    out
}

/// `typeof` user data of a key or data: a concatenation lists its expressions (none for a
/// `type` declaration); one expression stands alone.
fn typeof_udata(parts: &[Part]) -> Option<Vec<u8>> {
    if let [Part::Expr(f)] = parts {
        return Some(expr_udata(f));
    }
    if parts.len() < 2 {
        return None;
    }
    let mut inner = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if let Part::Expr(f) = p {
            tlv(&mut inner, NFTNL_UDATA_SET_KEY_CONCAT_NEST + i as u8, &expr_udata(f));
        }
    }
    let mut out = Vec::new();
    tlv_u32(&mut out, NFTNL_UDATA_SET_TYPEOF_EXPR, EXPR_CONCAT);
    tlv(&mut out, NFTNL_UDATA_SET_TYPEOF_DATA, &inner);
    Some(out)
}

/// The byte order of a field of type `k` (`BYTEORDER_*`).
fn byteorder_of(k: Kind) -> u32 {
    if k.big_endian() { BYTEORDER_BIG_ENDIAN } else { BYTEORDER_HOST_ENDIAN }
}

/// The `typeof` of a map's verdict data: the verdict expression's type and nothing describing it.
fn verdict_typeof() -> Vec<u8> {
    let mut v = Vec::new();
    tlv_u32(&mut v, NFTNL_UDATA_SET_TYPEOF_EXPR, EXPR_VERDICT);
    tlv(&mut v, NFTNL_UDATA_SET_TYPEOF_DATA, &[]);
    v
}

/// A key's byte order as `nft` records it: none for a concatenation, else its type's.
fn byteorder(parts: &[Part]) -> u32 {
    match parts {
        [p] => p.kind().map_or(0, byteorder_of),
        _ => 0,
    }
}

/// The kernel's view of declaration `d` in a table of `family`.
pub fn spec(d: &SetDecl, family: Family) -> Result<SetSpec, CompileError> {
    let key = parts(&d.key, d.typeof_, family)?;
    let data = parts(&d.data, d.typeof_, family)?;
    let mut flags = if d.map { NFT_SET_MAP } else { 0 };
    for f in &d.flags {
        flags |= match f.as_str() {
            "interval" => NFT_SET_INTERVAL,
            "timeout" => NFT_SET_TIMEOUT,
            "dynamic" => NFT_SET_EVAL,
            other => return Err(CompileError::new(format!("set flag `{other}`"))),
        };
    }
    if d.timeout.is_some() {
        flags |= NFT_SET_TIMEOUT;
    }
    let concat = key.len() > 1;
    if concat && flags & NFT_SET_INTERVAL != 0 {
        flags |= NFT_SET_CONCAT;
    }
    let mut udata = Vec::new();
    tlv_u32(&mut udata, NFTNL_UDATA_SET_KEYBYTEORDER, byteorder(&key));
    if d.map {
        tlv_u32(&mut udata, NFTNL_UDATA_SET_DATABYTEORDER, byteorder(&data));
    }
    if let Some(k) = typeof_udata(&key) {
        tlv(&mut udata, NFTNL_UDATA_SET_KEY_TYPEOF, &k);
    }
    if let Some(v) = typeof_udata(&data) {
        tlv(&mut udata, NFTNL_UDATA_SET_DATA_TYPEOF, &v);
    } else if d.typeof_ && matches!(data.as_slice(), [Part::Verdict]) {
        // A `typeof` map's verdict: the verdict expression's type and no data, as `nft`
        // records it.
        tlv(&mut udata, NFTNL_UDATA_SET_DATA_TYPEOF, &verdict_typeof());
    }
    if d.map {
        tlv_u32(&mut udata, NFTNL_UDATA_SET_DATA_INTERVAL, 0);
    }
    if let Some(c) = &d.comment {
        put_comment(&mut udata, NFTNL_UDATA_SET_COMMENT, c);
    }
    // A concatenation's field lengths, or a size (the two never go together).
    let (size, concat) = match flags & NFT_SET_CONCAT {
        0 => (d.size, Vec::new()),
        _ => (None, key.iter().filter_map(Part::kind).map(Kind::len).collect()),
    };
    Ok(SetSpec {
        name: d.name.clone(),
        flags,
        key: folded(&key),
        data: d.map.then(|| folded(&data)),
        timeout_ms: d.timeout.map(|s| s * 1000),
        size,
        concat,
        udata,
    })
}

/// The name an anonymous set is declared with: the kernel numbers it in place of `%d`.
pub const ANON_NAME: &str = "__set%d";

/// An anonymous set a rule declares, with its elements: (key, `NFT_SET_ELEM_*` flags, data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnonSet {
    /// How it is declared.
    pub spec: SetSpec,
    /// Its id in the batch.
    pub id: u32,
    /// Its elements.
    pub elements: Vec<(Vec<u8>, u32, Option<Data>)>,
}

/// The anonymous interval set of `prefixes` (address bytes, prefix length) matched by `f`:
/// merged ranges, each a start and an end element, after an end element at zero when the
/// first range starts above it (as `nft` writes an interval set).
pub fn anon_interval(f: Field, prefixes: &[(Vec<u8>, u32)], id: u32) -> AnonSet {
    let width = f.kind.len() as usize;
    let bits = width as u32 * 8;
    let as_int = |b: &[u8]| b.iter().fold(0u128, |n, x| (n << 8) | u128::from(*x));
    // A range's end is the first address past it; `None` when it runs to the top.
    let mut ranges: Vec<(u128, Option<u128>)> = prefixes
        .iter()
        .map(|(b, len)| {
            let host = bits - len.min(&bits);
            let start = as_int(b).checked_shr(host).unwrap_or(0).checked_shl(host).unwrap_or(0);
            let size = 1u128.checked_shl(host).filter(|_| host < bits || bits < 128);
            let end = size.and_then(|n| start.checked_add(n)).filter(|e| bits == 128 || *e < 1u128 << bits);
            (start, end)
        })
        .collect();
    ranges.sort();
    let mut merged: Vec<(u128, Option<u128>)> = Vec::new();
    for (s, e) in ranges {
        match merged.last_mut() {
            Some(last) if last.1.is_none_or(|end| s <= end) => {
                last.1 = match (last.1, e) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                }
            }
            _ => merged.push((s, e)),
        }
    }
    let bytes = |n: u128| n.to_be_bytes()[16 - width..].to_vec();
    let mut elements = Vec::new();
    if merged.first().is_some_and(|r| r.0 > 0) {
        elements.push((bytes(0), NFT_SET_ELEM_INTERVAL_END, None));
    }
    for (s, e) in merged {
        elements.push((bytes(s), 0, None));
        if let Some(e) = e {
            elements.push((bytes(e), NFT_SET_ELEM_INTERVAL_END, None));
        }
    }
    let mut udata = Vec::new();
    tlv_u32(&mut udata, NFTNL_UDATA_SET_KEYBYTEORDER, byteorder_of(f.kind));
    tlv_u32(&mut udata, NFTNL_UDATA_SET_MERGE_ELEMENTS, 1);
    tlv(&mut udata, NFTNL_UDATA_SET_KEY_TYPEOF, &expr_udata(&f));
    let spec = SetSpec {
        name: ANON_NAME.into(),
        flags: NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_INTERVAL,
        key: (f.kind as u32, f.kind.len()),
        data: None,
        timeout_ms: None,
        size: Some(elements.len() as u32),
        concat: Vec::new(),
        udata,
    };
    AnonSet { spec, id, elements }
}

/// The anonymous set of single `keys` matched by `f` (`meta l4proto { tcp, udp }`): constant,
/// no intervals, its elements in the order written, as `nft` declares a set of values. Only a
/// field whose `typeof` record `nft` writes is taken (a meta key, a described header field):
/// another's set would list differently.
pub fn anon_values(f: Field, keys: Vec<Vec<u8>>, id: u32) -> Result<AnonSet, CompileError> {
    if !matches!(f.load, Load::Meta(_)) && f.desc.is_none() {
        return Err(CompileError::new(format!("an anonymous set of {:?} values", f.kind)));
    }
    let mut udata = Vec::new();
    tlv_u32(&mut udata, NFTNL_UDATA_SET_KEYBYTEORDER, byteorder_of(f.kind));
    tlv(&mut udata, NFTNL_UDATA_SET_KEY_TYPEOF, &expr_udata(&f));
    let spec = SetSpec {
        name: ANON_NAME.into(),
        flags: NFT_SET_ANONYMOUS | NFT_SET_CONSTANT,
        key: (f.kind as u32, f.kind.len()),
        data: None,
        timeout_ms: None,
        size: Some(keys.len() as u32),
        concat: Vec::new(),
        udata,
    };
    let elements = keys.into_iter().map(|k| (k, 0, None)).collect();
    Ok(AnonSet { spec, id, elements })
}

/// The anonymous verdict map `numgen … vmap { k : verdict, … }`.
pub fn anon_vmap(entries: Vec<(u32, Data)>, id: u32) -> AnonSet {
    let mut udata = Vec::new();
    tlv_u32(&mut udata, NFTNL_UDATA_SET_KEYBYTEORDER, BYTEORDER_HOST_ENDIAN);
    tlv_u32(&mut udata, NFTNL_UDATA_SET_DATABYTEORDER, 0);
    tlv(&mut udata, NFTNL_UDATA_SET_DATA_TYPEOF, &verdict_typeof());
    tlv_u32(&mut udata, NFTNL_UDATA_SET_DATA_INTERVAL, 0);
    let spec = SetSpec {
        name: "__map%d".into(),
        flags: NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_MAP,
        key: (Kind::Integer as u32, 4),
        data: Some((NFT_DATA_VERDICT, 0)),
        timeout_ms: None,
        size: Some(entries.len() as u32),
        concat: Vec::new(),
        udata,
    };
    let elements = entries.into_iter().map(|(k, v)| (k.to_ne_bytes().to_vec(), 0, Some(v))).collect();
    AnonSet { spec, id, elements }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saddr(family: Family) -> Field {
        let t = match family {
            Family::V4 => [Token::Word("ip".into()), Token::Word("saddr".into())],
            Family::V6 => [Token::Word("ip6".into()), Token::Word("saddr".into())],
        };
        Field::parse(&t, family).unwrap().0
    }

    fn flags(set: &AnonSet) -> Vec<u32> {
        set.elements.iter().map(|e| e.1).collect()
    }

    #[test]
    fn interval_ends_stop_at_the_top_of_the_address_space() {
        let all = anon_interval(saddr(Family::V4), &[(vec![0, 0, 0, 0], 0)], 1);
        assert_eq!(all.elements, [(vec![0, 0, 0, 0], 0, None)], "everything: one start, no end");
        let top = anon_interval(saddr(Family::V4), &[(vec![255, 255, 255, 0], 24), (vec![10, 0, 0, 0], 8)], 1);
        assert_eq!(
            flags(&top),
            [NFT_SET_ELEM_INTERVAL_END, 0, NFT_SET_ELEM_INTERVAL_END, 0],
            "a gap at zero, the last runs to the top"
        );
        let v6 = anon_interval(saddr(Family::V6), &[(vec![0; 16], 0)], 1);
        assert_eq!(v6.elements.len(), 1);
        let mut high = vec![0xff; 16];
        high[15] = 0;
        let v6 = anon_interval(saddr(Family::V6), &[(high.clone(), 120), (high, 121)], 1);
        assert_eq!(flags(&v6), [NFT_SET_ELEM_INTERVAL_END, 0], "nested prefixes merge; the top has no end");
    }
}
