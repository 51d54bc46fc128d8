//! Netlink messages: the one header writer (the `nlmsghdr`, and nfnetlink's `nfgenmsg` after
//! it) and the one reader (a datagram split into its messages, an error message's code).

use super::abi::NLM_F_REQUEST;

/// Starts a request in `buf`: a netlink header of `kind`, with `flags` besides
/// `NLM_F_REQUEST`, and `seq`; the port id is left 0 for the kernel to fill in. Returns where
/// the message starts, which [`finish`] takes to set its length.
pub(crate) fn start(buf: &mut Vec<u8>, kind: u16, flags: u16, seq: u32) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    start
}

/// Appends nfnetlink's `nfgenmsg`: the family, version 0, and the resource id (big-endian;
/// nf_tables' batches carry their subsystem there, other requests 0).
pub(crate) fn nfgen(buf: &mut Vec<u8>, family: u8, res_id: u16) {
    buf.extend_from_slice(&[family, 0]);
    buf.extend_from_slice(&res_id.to_be_bytes());
}

/// Writes the length of the message that starts at `start` and ends `buf` into its header.
pub(crate) fn finish(buf: &mut [u8], start: usize) {
    let len = u32::try_from(buf.len() - start).unwrap_or(u32::MAX);
    buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

/// One message of a netlink datagram.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Msg<'a> {
    /// The message type (for nfnetlink, the subsystem in the high byte).
    pub kind: u16,
    /// `NLM_F_*` flags.
    pub flags: u16,
    /// The payload after the `nlmsghdr`.
    pub body: &'a [u8],
    /// The sequence number of the request it answers.
    pub seq: u32,
    /// The sender's port id (`nlmsg_pid`): for a generation notification, the socket that
    /// committed.
    pub port: u32,
}

/// Splits a netlink datagram into its messages, stopping at one whose length is wrong.
pub(crate) fn messages(mut data: &[u8]) -> impl Iterator<Item = Msg<'_>> {
    std::iter::from_fn(move || {
        if data.len() < 16 {
            return None;
        }
        let word = |at: usize| u32::from_ne_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let len = word(0) as usize;
        let kind = u16::from_ne_bytes([data[4], data[5]]);
        let flags = u16::from_ne_bytes([data[6], data[7]]);
        let (seq, port) = (word(8), word(12));
        if len < 16 || len > data.len() {
            return None;
        }
        let body = &data[16..len];
        data = &data[len.next_multiple_of(4).min(data.len())..];
        Some(Msg { kind, flags, body, seq, port })
    })
}

/// The code of an `NLMSG_ERROR` message's body: 0 for an acknowledgement (or a body too short
/// to hold one), else a negated errno.
pub(crate) fn error_code(body: &[u8]) -> i32 {
    body.get(..4).map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_read_back_as_written() {
        let mut buf = vec![9];
        let at = start(&mut buf, 0x0a02, 0x0300, 7);
        nfgen(&mut buf, 2, 10);
        buf.extend_from_slice(&(-2i32).to_ne_bytes());
        finish(&mut buf, at);
        let header = [
            &24u32.to_ne_bytes()[..],
            &0x0a02u16.to_ne_bytes(),
            &0x0301u16.to_ne_bytes(),
            &7u32.to_ne_bytes(),
            &[0; 4],
        ];
        assert_eq!(buf[1..17], header.concat()[..]);
        assert_eq!(buf[17..21], [2, 0, 0, 10], "nfgenmsg: family, version, big-endian resource id");
        let all: Vec<_> = messages(&buf[1..]).collect();
        assert_eq!(all.len(), 1);
        let m = all[0];
        assert_eq!((m.kind, m.flags, m.seq, m.port), (0x0a02, NLM_F_REQUEST | 0x0300, 7, 0));
        assert_eq!(error_code(&m.body[4..]), -2);
        assert_eq!((error_code(&[1, 0]), messages(&buf[1..20]).count()), (0, 0));
    }
}
