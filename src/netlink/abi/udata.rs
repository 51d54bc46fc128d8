//! User data: the records (type, one-byte length, value) nftables keeps in a table's, set's
//! or element's `*_USERDATA` attribute, which the kernel stores unread and `nft` reads back to
//! print the declaration. The record types by libnftnl's names (`udata.h`, and nftables'
//! sources for an expression's records), and the numbers of nftables' own the records hold:
//! expression types, protocol descriptions, byte orders.

// libnftnl's udata.h: the record types of a table, a set, a set's `typeof` and an element.

/// A table's comment (NUL-terminated).
pub(crate) const NFTNL_UDATA_TABLE_COMMENT: u8 = 0;
/// A set's key byte order (u32, `BYTEORDER_*`).
pub(crate) const NFTNL_UDATA_SET_KEYBYTEORDER: u8 = 0;
/// A map's data byte order (u32, `BYTEORDER_*`).
pub(crate) const NFTNL_UDATA_SET_DATABYTEORDER: u8 = 1;
/// Whether `nft` merges adjacent ranges of an interval set (u32, a boolean).
pub(crate) const NFTNL_UDATA_SET_MERGE_ELEMENTS: u8 = 2;
/// A set's key as `typeof` expressions (nested records).
pub(crate) const NFTNL_UDATA_SET_KEY_TYPEOF: u8 = 3;
/// A map's data as a `typeof` expression (nested records).
pub(crate) const NFTNL_UDATA_SET_DATA_TYPEOF: u8 = 4;
/// Whether a map's data are intervals (u32, a boolean).
pub(crate) const NFTNL_UDATA_SET_DATA_INTERVAL: u8 = 6;
/// A set's comment (NUL-terminated).
pub(crate) const NFTNL_UDATA_SET_COMMENT: u8 = 7;
/// In a `typeof`: the expression's type (u32, `EXPR_*`). A concatenation's members are
/// recorded alike (nftables' `NFTNL_UDATA_SET_KEY_CONCAT_SUB_TYPE` is the same number).
pub(crate) const NFTNL_UDATA_SET_TYPEOF_EXPR: u8 = 0;
/// In a `typeof`: what describes the expression (nested records; `..._CONCAT_SUB_DATA` alike).
pub(crate) const NFTNL_UDATA_SET_TYPEOF_DATA: u8 = 1;
/// An element's comment (NUL-terminated).
pub(crate) const NFTNL_UDATA_SET_ELEM_COMMENT: u8 = 0;

// nftables' sources: what describes each kind of expression in a `typeof`.

/// A concatenation: its first member's records; member `i` is `NEST + i`.
pub(crate) const NFTNL_UDATA_SET_KEY_CONCAT_NEST: u8 = 0;
/// A header field: its protocol description (u32, `PROTO_DESC_*`).
pub(crate) const NFTNL_UDATA_SET_KEY_PAYLOAD_DESC: u8 = 0;
/// A header field: its index among the description's fields (u32).
pub(crate) const NFTNL_UDATA_SET_KEY_PAYLOAD_TYPE: u8 = 1;
/// A meta key: the key (u32, `NFT_META_*`).
pub(crate) const NFTNL_UDATA_META_KEY: u8 = 0;
/// `numgen`: its type (u32, `NFT_NG_*`).
pub(crate) const NFTNL_UDATA_NUMGEN_TYPE: u8 = 0;
/// `numgen`: its modulus (u32).
pub(crate) const NFTNL_UDATA_NUMGEN_MOD: u8 = 1;
/// `numgen`: its offset (u32).
pub(crate) const NFTNL_UDATA_NUMGEN_OFFSET: u8 = 2;

// nftables' `enum expr_types`: the expression types a `typeof` records.

/// A verdict.
pub(crate) const EXPR_VERDICT: u32 = 1;
/// A header field (payload).
pub(crate) const EXPR_PAYLOAD: u32 = 7;
/// A meta key.
pub(crate) const EXPR_META: u32 = 9;
/// A concatenation.
pub(crate) const EXPR_CONCAT: u32 = 13;
/// `numgen`.
pub(crate) const EXPR_NUMGEN: u32 = 23;

// nftables' `enum proto_desc_id`: the headers the templates read.

/// The UDP header.
pub(crate) const PROTO_DESC_UDP: u32 = 6;
/// The TCP header.
pub(crate) const PROTO_DESC_TCP: u32 = 8;
/// The SCTP header.
pub(crate) const PROTO_DESC_SCTP: u32 = 10;
/// The IPv4 header.
pub(crate) const PROTO_DESC_IP: u32 = 12;
/// The IPv6 header.
pub(crate) const PROTO_DESC_IP6: u32 = 13;

// nftables' `enum byteorder`.

/// Host order (integers, marks).
pub(crate) const BYTEORDER_HOST_ENDIAN: u32 = 1;
/// Network order (addresses, ports).
pub(crate) const BYTEORDER_BIG_ENDIAN: u32 = 2;
