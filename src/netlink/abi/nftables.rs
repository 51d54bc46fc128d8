//! nf_tables.h's numbers besides the expressions': message types, and the attributes of
//! tables, chains, rules, sets, elements, data, objects, flowtables and generations.

// nf_tables.h: message types (`enum nf_tables_msg_types`).

/// Add a table.
pub(crate) const NFT_MSG_NEWTABLE: u16 = 0;
/// Get (or dump) tables.
pub(crate) const NFT_MSG_GETTABLE: u16 = 1;
/// Delete a table.
pub(crate) const NFT_MSG_DELTABLE: u16 = 2;
/// Add a chain.
pub(crate) const NFT_MSG_NEWCHAIN: u16 = 3;
/// Get (or dump) chains.
pub(crate) const NFT_MSG_GETCHAIN: u16 = 4;
/// Delete a chain.
pub(crate) const NFT_MSG_DELCHAIN: u16 = 5;
/// Add a rule.
pub(crate) const NFT_MSG_NEWRULE: u16 = 6;
/// Get (or dump) rules.
pub(crate) const NFT_MSG_GETRULE: u16 = 7;
/// Delete a rule (or a chain's or table's rules).
pub(crate) const NFT_MSG_DELRULE: u16 = 8;
/// Add a set.
pub(crate) const NFT_MSG_NEWSET: u16 = 9;
/// Get (or dump) sets.
pub(crate) const NFT_MSG_GETSET: u16 = 10;
/// Delete a set.
pub(crate) const NFT_MSG_DELSET: u16 = 11;
/// Add set elements.
pub(crate) const NFT_MSG_NEWSETELEM: u16 = 12;
/// Dump a set's elements.
pub(crate) const NFT_MSG_GETSETELEM: u16 = 13;
/// Delete set elements (all of them without a list).
pub(crate) const NFT_MSG_DELSETELEM: u16 = 14;
/// A committed generation (notification).
pub(crate) const NFT_MSG_NEWGEN: u16 = 15;
/// Get the ruleset generation.
pub(crate) const NFT_MSG_GETGEN: u16 = 16;
/// A packet trace (notification).
pub(crate) const NFT_MSG_TRACE: u16 = 17;
/// Get (or dump) stateful objects.
pub(crate) const NFT_MSG_GETOBJ: u16 = 19;
/// Delete a stateful object.
pub(crate) const NFT_MSG_DELOBJ: u16 = 20;
/// Get (or dump) flowtables.
pub(crate) const NFT_MSG_GETFLOWTABLE: u16 = 23;
/// Delete a flowtable.
pub(crate) const NFT_MSG_DELFLOWTABLE: u16 = 24;

// Nested lists and expressions.

/// One element of a nested list (expressions, set elements, concatenation fields).
pub(crate) const NFTA_LIST_ELEM: u16 = 1;
/// An expression's name.
pub(crate) const NFTA_EXPR_NAME: u16 = 1;
/// An expression's own attributes (nested).
pub(crate) const NFTA_EXPR_DATA: u16 = 2;

// Tables.

/// Table name.
pub(crate) const NFTA_TABLE_NAME: u16 = 1;
/// Table flags.
pub(crate) const NFTA_TABLE_FLAGS: u16 = 2;
/// Table flag (`NFTA_TABLE_FLAGS`): the table belongs to the netlink socket that created it,
/// which alone may change it; the kernel removes it when that socket closes.
pub(crate) const NFT_TABLE_F_OWNER: u32 = 0x2;
/// Table user data (its comment).
pub(crate) const NFTA_TABLE_USERDATA: u16 = 6;

// Packet traces (`NFT_MSG_TRACE`).

/// The table of the chain the event is about.
pub(crate) const NFTA_TRACE_TABLE: u16 = 1;
/// The chain the rule is in.
pub(crate) const NFTA_TRACE_CHAIN: u16 = 2;
/// The rule's handle (be64); absent at a chain's end and for a policy.
pub(crate) const NFTA_TRACE_RULE_HANDLE: u16 = 3;
/// What the event is (`NFT_TRACETYPE_*`, be32).
pub(crate) const NFTA_TRACE_TYPE: u16 = 4;
/// The verdict (nested `NFTA_VERDICT_*`).
pub(crate) const NFTA_TRACE_VERDICT: u16 = 5;
/// The packet's id, the same for every event of one packet.
pub(crate) const NFTA_TRACE_ID: u16 = 6;
/// The packet's network header (from the IP header, at most 40 bytes); first event of a
/// base chain only.
pub(crate) const NFTA_TRACE_NETWORK_HEADER: u16 = 8;
/// The packet's transport header (at most 20 bytes); first event of a base chain only.
pub(crate) const NFTA_TRACE_TRANSPORT_HEADER: u16 = 9;
/// The input interface's index (be32).
pub(crate) const NFTA_TRACE_IIF: u16 = 10;
/// The output interface's index (be32).
pub(crate) const NFTA_TRACE_OIF: u16 = 12;
/// The packet's mark (be32), when not 0.
pub(crate) const NFTA_TRACE_MARK: u16 = 14;
/// A base chain's policy (be32), for a policy event.
pub(crate) const NFTA_TRACE_POLICY: u16 = 16;
/// A trace event of a policy applied at a base chain's end.
pub(crate) const NFT_TRACETYPE_POLICY: u32 = 1;
/// A trace event of a chain's end (or an explicit `return`).
pub(crate) const NFT_TRACETYPE_RETURN: u32 = 2;
/// A trace event of a rule that matched.
pub(crate) const NFT_TRACETYPE_RULE: u32 = 3;

// Chains.

/// The chain's table.
pub(crate) const NFTA_CHAIN_TABLE: u16 = 1;
/// Chain handle.
pub(crate) const NFTA_CHAIN_HANDLE: u16 = 2;
/// Chain name.
pub(crate) const NFTA_CHAIN_NAME: u16 = 3;
/// A base chain's hook (nested `NFTA_HOOK_*`).
pub(crate) const NFTA_CHAIN_HOOK: u16 = 4;
/// A base chain's policy (a verdict code).
pub(crate) const NFTA_CHAIN_POLICY: u16 = 5;
/// A base chain's type (`filter`, `nat`…).
pub(crate) const NFTA_CHAIN_TYPE: u16 = 7;
/// Chain flags (`NFT_CHAIN_*`).
pub(crate) const NFTA_CHAIN_FLAGS: u16 = 10;
/// Hook number.
pub(crate) const NFTA_HOOK_HOOKNUM: u16 = 1;
/// Hook priority.
pub(crate) const NFTA_HOOK_PRIORITY: u16 = 2;
/// A rule's anonymous chain (`jump { … }`): it goes with its rule, and deleting it alone fails.
pub(crate) const NFT_CHAIN_BINDING: u32 = 0x4;

// Rules.

/// The rule's table.
pub(crate) const NFTA_RULE_TABLE: u16 = 1;
/// The rule's chain.
pub(crate) const NFTA_RULE_CHAIN: u16 = 2;
/// Rule handle.
pub(crate) const NFTA_RULE_HANDLE: u16 = 3;
/// The rule's expressions (a nested list).
pub(crate) const NFTA_RULE_EXPRESSIONS: u16 = 4;
/// Rule user data (its comment).
pub(crate) const NFTA_RULE_USERDATA: u16 = 7;

// Sets.

/// The set's table.
pub(crate) const NFTA_SET_TABLE: u16 = 1;
/// Set name.
pub(crate) const NFTA_SET_NAME: u16 = 2;
/// Set flags (`NFT_SET_*`).
pub(crate) const NFTA_SET_FLAGS: u16 = 3;
/// Key data type.
pub(crate) const NFTA_SET_KEY_TYPE: u16 = 4;
/// Key length.
pub(crate) const NFTA_SET_KEY_LEN: u16 = 5;
/// A map's data type.
pub(crate) const NFTA_SET_DATA_TYPE: u16 = 6;
/// A map's data length.
pub(crate) const NFTA_SET_DATA_LEN: u16 = 7;
/// Set description (nested `NFTA_SET_DESC_*`).
pub(crate) const NFTA_SET_DESC: u16 = 9;
/// The set's id within a transaction.
pub(crate) const NFTA_SET_ID: u16 = 10;
/// Default element timeout, in milliseconds.
pub(crate) const NFTA_SET_TIMEOUT: u16 = 11;
/// Set user data.
pub(crate) const NFTA_SET_USERDATA: u16 = 13;
/// Set handle.
pub(crate) const NFTA_SET_HANDLE: u16 = 16;
/// Description: number of elements.
pub(crate) const NFTA_SET_DESC_SIZE: u16 = 1;
/// Description: a concatenation's fields (a nested list).
pub(crate) const NFTA_SET_DESC_CONCAT: u16 = 2;
/// One concatenation field's length.
pub(crate) const NFTA_SET_FIELD_LEN: u16 = 1;
/// A rule's anonymous set: it goes with its rule.
pub(crate) const NFT_SET_ANONYMOUS: u32 = 0x1;
/// Elements fixed at creation.
pub(crate) const NFT_SET_CONSTANT: u32 = 0x2;
/// Elements are ranges.
pub(crate) const NFT_SET_INTERVAL: u32 = 0x4;
/// A map: elements carry data.
pub(crate) const NFT_SET_MAP: u32 = 0x8;
/// Elements time out.
pub(crate) const NFT_SET_TIMEOUT: u32 = 0x10;
/// Updated from the packet path.
pub(crate) const NFT_SET_EVAL: u32 = 0x20;
/// Keys are concatenations.
pub(crate) const NFT_SET_CONCAT: u32 = 0x80;

// Set elements.

/// The elements' table.
pub(crate) const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
/// The elements' set.
pub(crate) const NFTA_SET_ELEM_LIST_SET: u16 = 2;
/// The elements (a nested list).
pub(crate) const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
/// The set's id, for a set added in the same transaction.
pub(crate) const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;
/// Element key (nested data).
pub(crate) const NFTA_SET_ELEM_KEY: u16 = 1;
/// A map element's data (nested data).
pub(crate) const NFTA_SET_ELEM_DATA: u16 = 2;
/// Element flags (`NFT_SET_ELEM_*`).
pub(crate) const NFTA_SET_ELEM_FLAGS: u16 = 3;
/// Milliseconds until the element times out.
pub(crate) const NFTA_SET_ELEM_EXPIRATION: u16 = 5;
/// Element user data (its comment).
pub(crate) const NFTA_SET_ELEM_USERDATA: u16 = 6;
/// The last key of a range (nested data).
pub(crate) const NFTA_SET_ELEM_KEY_END: u16 = 10;
/// The element that ends a range of an interval set.
pub(crate) const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;

// Data and verdicts.

/// A value.
pub(crate) const NFTA_DATA_VALUE: u16 = 1;
/// A verdict (nested `NFTA_VERDICT_*`).
pub(crate) const NFTA_DATA_VERDICT: u16 = 2;
/// Verdict code.
pub(crate) const NFTA_VERDICT_CODE: u16 = 1;
/// A jump's or goto's chain.
pub(crate) const NFTA_VERDICT_CHAIN: u16 = 2;
/// Drop the packet.
pub(crate) const NF_DROP: i32 = 0;
/// Accept the packet.
pub(crate) const NF_ACCEPT: i32 = 1;
/// Go on to the next rule.
pub(crate) const NFT_CONTINUE: i32 = -1;
/// Jump to a chain.
pub(crate) const NFT_JUMP: i32 = -3;
/// Go to a chain.
pub(crate) const NFT_GOTO: i32 = -4;
/// Return to the calling chain.
pub(crate) const NFT_RETURN: i32 = -5;

// Stateful objects and flowtables.

/// The object's table.
pub(crate) const NFTA_OBJ_TABLE: u16 = 1;
/// Object name.
pub(crate) const NFTA_OBJ_NAME: u16 = 2;
/// Object type (`NFT_OBJECT_*`).
pub(crate) const NFTA_OBJ_TYPE: u16 = 3;
/// Object handle.
pub(crate) const NFTA_OBJ_HANDLE: u16 = 6;
/// A counter.
pub(crate) const NFT_OBJECT_COUNTER: u32 = 1;
/// A quota.
pub(crate) const NFT_OBJECT_QUOTA: u32 = 2;
/// A conntrack helper.
pub(crate) const NFT_OBJECT_CT_HELPER: u32 = 3;
/// A limit.
pub(crate) const NFT_OBJECT_LIMIT: u32 = 4;
/// A connection limit.
pub(crate) const NFT_OBJECT_CONNLIMIT: u32 = 5;
/// A tunnel.
pub(crate) const NFT_OBJECT_TUNNEL: u32 = 6;
/// A conntrack timeout policy.
pub(crate) const NFT_OBJECT_CT_TIMEOUT: u32 = 7;
/// A secmark.
pub(crate) const NFT_OBJECT_SECMARK: u32 = 8;
/// A conntrack expectation.
pub(crate) const NFT_OBJECT_CT_EXPECT: u32 = 9;
/// A synproxy.
pub(crate) const NFT_OBJECT_SYNPROXY: u32 = 10;
/// The flowtable's table.
pub(crate) const NFTA_FLOWTABLE_TABLE: u16 = 1;
/// Flowtable name.
pub(crate) const NFTA_FLOWTABLE_NAME: u16 = 2;
/// Flowtable handle.
pub(crate) const NFTA_FLOWTABLE_HANDLE: u16 = 5;

// Generations.

/// Generation id.
pub(crate) const NFTA_GEN_ID: u16 = 1;
/// The committing process.
pub(crate) const NFTA_GEN_PROC_PID: u16 = 2;
