//! nf_tables expressions' own attribute numbers (`NFTA_<EXPR>_*`) and the values some take.

/// payload: destination register.
pub(crate) const NFTA_PAYLOAD_DREG: u16 = 1;
/// payload: header base (`NFT_PAYLOAD_*_HEADER`).
pub(crate) const NFTA_PAYLOAD_BASE: u16 = 2;
/// payload: offset in the header.
pub(crate) const NFTA_PAYLOAD_OFFSET: u16 = 3;
/// payload: bytes to load.
pub(crate) const NFTA_PAYLOAD_LEN: u16 = 4;
/// meta: destination register.
pub(crate) const NFTA_META_DREG: u16 = 1;
/// meta: key (`NFT_META_*`).
pub(crate) const NFTA_META_KEY: u16 = 2;
/// meta: source register (setting a key).
pub(crate) const NFTA_META_SREG: u16 = 3;
/// ct: destination register.
pub(crate) const NFTA_CT_DREG: u16 = 1;
/// ct: key (`NFT_CT_*`).
pub(crate) const NFTA_CT_KEY: u16 = 2;
/// fib: destination register.
pub(crate) const NFTA_FIB_DREG: u16 = 1;
/// fib: result (`NFT_FIB_RESULT_*`).
pub(crate) const NFTA_FIB_RESULT: u16 = 2;
/// fib: flags (`NFTA_FIB_F_*`).
pub(crate) const NFTA_FIB_FLAGS: u16 = 3;
/// cmp: source register.
pub(crate) const NFTA_CMP_SREG: u16 = 1;
/// cmp: operator (`NFT_CMP_*`).
pub(crate) const NFTA_CMP_OP: u16 = 2;
/// cmp: data compared with (nested data).
pub(crate) const NFTA_CMP_DATA: u16 = 3;
/// bitwise: source register.
pub(crate) const NFTA_BITWISE_SREG: u16 = 1;
/// bitwise: destination register.
pub(crate) const NFTA_BITWISE_DREG: u16 = 2;
/// bitwise: length.
pub(crate) const NFTA_BITWISE_LEN: u16 = 3;
/// bitwise: mask (nested data).
pub(crate) const NFTA_BITWISE_MASK: u16 = 4;
/// bitwise: xor (nested data).
pub(crate) const NFTA_BITWISE_XOR: u16 = 5;
/// bitwise: operation (`NFT_BITWISE_*`; newer kernels list it).
pub(crate) const NFTA_BITWISE_OP: u16 = 6;
/// bitwise: mask and xor (the only operation rules here use).
pub(crate) const NFT_BITWISE_BOOL: u32 = 0;
/// byteorder: source register.
pub(crate) const NFTA_BYTEORDER_SREG: u16 = 1;
/// byteorder: destination register.
pub(crate) const NFTA_BYTEORDER_DREG: u16 = 2;
/// byteorder: operation (`NFT_BYTEORDER_*`).
pub(crate) const NFTA_BYTEORDER_OP: u16 = 3;
/// byteorder: length.
pub(crate) const NFTA_BYTEORDER_LEN: u16 = 4;
/// byteorder: size of each unit.
pub(crate) const NFTA_BYTEORDER_SIZE: u16 = 5;
/// lookup: set name.
pub(crate) const NFTA_LOOKUP_SET: u16 = 1;
/// lookup: source register.
pub(crate) const NFTA_LOOKUP_SREG: u16 = 2;
/// lookup: destination register (a map's data).
pub(crate) const NFTA_LOOKUP_DREG: u16 = 3;
/// lookup: the set's id within a transaction.
pub(crate) const NFTA_LOOKUP_SET_ID: u16 = 4;
/// lookup: flags (`NFT_LOOKUP_F_*`).
pub(crate) const NFTA_LOOKUP_FLAGS: u16 = 5;
/// lookup: match when the key is absent.
pub(crate) const NFT_LOOKUP_F_INV: u32 = 0x1;
/// immediate: destination register.
pub(crate) const NFTA_IMMEDIATE_DREG: u16 = 1;
/// immediate: data (nested data).
pub(crate) const NFTA_IMMEDIATE_DATA: u16 = 2;
/// numgen: destination register.
pub(crate) const NFTA_NG_DREG: u16 = 1;
/// numgen: modulus.
pub(crate) const NFTA_NG_MODULUS: u16 = 2;
/// numgen: type (`NFT_NG_*`).
pub(crate) const NFTA_NG_TYPE: u16 = 3;
/// numgen: offset.
pub(crate) const NFTA_NG_OFFSET: u16 = 4;
/// numgen: a counter, one more each packet (round robin).
pub(crate) const NFT_NG_INCREMENTAL: u32 = 0;
/// numgen: a random number.
pub(crate) const NFT_NG_RANDOM: u32 = 1;
/// hash: register of the bytes hashed.
pub(crate) const NFTA_HASH_SREG: u16 = 1;
/// hash: destination register.
pub(crate) const NFTA_HASH_DREG: u16 = 2;
/// hash: bytes hashed.
pub(crate) const NFTA_HASH_LEN: u16 = 3;
/// hash: modulus.
pub(crate) const NFTA_HASH_MODULUS: u16 = 4;
/// hash: seed (without one the kernel picks a random seed per rule).
pub(crate) const NFTA_HASH_SEED: u16 = 5;
/// hash: offset added to the result.
pub(crate) const NFTA_HASH_OFFSET: u16 = 6;
/// hash: type (`NFT_HASH_*`).
pub(crate) const NFTA_HASH_TYPE: u16 = 7;
/// hash: Jenkins' hash of registers (`jhash`); the other type, symhash, hashes the flow.
pub(crate) const NFT_HASH_JENKINS: u32 = 0;
/// nat: type (`NFT_NAT_*`).
pub(crate) const NFTA_NAT_TYPE: u16 = 1;
/// nat: family.
pub(crate) const NFTA_NAT_FAMILY: u16 = 2;
/// nat: register of the lowest address.
pub(crate) const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
/// nat: register of the highest address.
pub(crate) const NFTA_NAT_REG_ADDR_MAX: u16 = 4;
/// nat: register of the lowest port.
pub(crate) const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
/// nat: register of the highest port.
pub(crate) const NFTA_NAT_REG_PROTO_MAX: u16 = 6;
/// nat: flags (`NF_NAT_RANGE_*`).
pub(crate) const NFTA_NAT_FLAGS: u16 = 7;
/// Destination NAT.
pub(crate) const NFT_NAT_DNAT: u32 = 1;
/// nat flag (`NF_NAT_RANGE_MAP_IPS`, nf_nat.h): the kernel sets it when an address register is given.
pub(crate) const NF_NAT_RANGE_MAP_IPS: u32 = 0x1;
/// nat flag (`NF_NAT_RANGE_PROTO_SPECIFIED`): the kernel sets it when a port register is given.
pub(crate) const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;
/// masq: flags (`NF_NAT_RANGE_*`).
pub(crate) const NFTA_MASQ_FLAGS: u16 = 1;
/// reject: type (`NFT_REJECT_*`).
pub(crate) const NFTA_REJECT_TYPE: u16 = 1;
/// reject: ICMP code.
pub(crate) const NFTA_REJECT_ICMP_CODE: u16 = 2;
/// limit: the rate, per unit (be64).
pub(crate) const NFTA_LIMIT_RATE: u16 = 1;
/// limit: the unit, in seconds (be64).
pub(crate) const NFTA_LIMIT_UNIT: u16 = 2;
/// limit: the burst, in packets for a packet limit.
pub(crate) const NFTA_LIMIT_BURST: u16 = 3;
/// limit: what is counted (`NFT_LIMIT_*`).
pub(crate) const NFTA_LIMIT_TYPE: u16 = 4;
/// limit: flags (`NFT_LIMIT_F_*`).
pub(crate) const NFTA_LIMIT_FLAGS: u16 = 5;
/// limit type: packets.
pub(crate) const NFT_LIMIT_PKTS: u32 = 0;
/// limit flag: match what is over the rate rather than within it (`limit rate over`).
pub(crate) const NFT_LIMIT_F_INV: u32 = 0x1;
/// dynset: set name.
pub(crate) const NFTA_DYNSET_SET_NAME: u16 = 1;
/// dynset: the set's id within a transaction.
pub(crate) const NFTA_DYNSET_SET_ID: u16 = 2;
/// dynset: operation (`NFT_DYNSET_OP_*`).
pub(crate) const NFTA_DYNSET_OP: u16 = 3;
/// dynset: register of the key.
pub(crate) const NFTA_DYNSET_SREG_KEY: u16 = 4;
/// dynset: element timeout, in milliseconds.
pub(crate) const NFTA_DYNSET_TIMEOUT: u16 = 6;
/// dynset: an expression attached to the element it adds.
pub(crate) const NFTA_DYNSET_EXPR: u16 = 7;
/// dynset: flags (`NFT_DYNSET_F_*`).
pub(crate) const NFTA_DYNSET_FLAGS: u16 = 9;
/// dynset: several such expressions.
pub(crate) const NFTA_DYNSET_EXPRESSIONS: u16 = 10;
/// dynset: add the element or refresh its timeout.
pub(crate) const NFT_DYNSET_OP_UPDATE: u32 = 1;
/// The size the kernel gives a set declared without one when a rule first fills it (a
/// `dynset`; `nft_dynset.c`, no uapi name): it lists that size from then on.
pub(crate) const NFT_DYNSET_DEFAULT_SIZE: u32 = 0xffff;
/// The data length the kernel lists for a verdict map (`sizeof(struct nft_verdict)`), where
/// `nft` declares none.
pub(crate) const NFT_VERDICT_DATA_LEN: u32 = 16;
/// The data type of verdicts (`NFT_DATA_VERDICT`).
pub(crate) const NFT_DATA_VERDICT: u32 = 0xffff_ff00;

// Keys and flags some expressions take.

/// meta key: the packet mark.
pub(crate) const NFT_META_MARK: u32 = 3;
/// meta key: the input interface's name.
pub(crate) const NFT_META_IIFNAME: u32 = 6;
/// meta key: the packet's trace flag (`nftrace`): a traced packet is reported rule by rule.
pub(crate) const NFT_META_NFTRACE: u32 = 12;
/// meta key: the transport protocol.
pub(crate) const NFT_META_L4PROTO: u32 = 16;
/// ct key: the state (`new`, `established`…).
pub(crate) const NFT_CT_STATE: u32 = 0;
/// ct key: the status bits (`IPS_*`).
pub(crate) const NFT_CT_STATUS: u32 = 2;
/// fib flag: look up the source address.
pub(crate) const NFTA_FIB_F_SADDR: u32 = 1;
/// fib flag: look up the destination address.
pub(crate) const NFTA_FIB_F_DADDR: u32 = 2;
/// fib result: the address's route type (`RTN_*`).
pub(crate) const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
