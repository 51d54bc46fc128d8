//! The length-delimited framing of a protobuf watch stream: each frame is a 4-byte big-endian
//! length and that many bytes. A frame longer than the bound is refused from its length alone,
//! before any of it is read, so a broken or hostile stream cannot grow the reader.

use std::io::Read;

/// What reading a frame found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A whole frame.
    Read,
    /// The end of the stream, between frames.
    End,
    /// A frame announcing more bytes than the bound; nothing of it was read.
    TooLong(u32),
}

/// Reads the next frame into `buf` (replaced), holding at most `max` bytes; a stream ending
/// inside a frame is an `UnexpectedEof` error.
pub(crate) fn read_frame(reader: &mut impl Read, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Frame> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        match reader.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(Frame::End),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_be_bytes(head);
    let Ok(size) = usize::try_from(len) else { return Ok(Frame::TooLong(len)) };
    if size > max {
        return Ok(Frame::TooLong(len));
    }
    read_growing(reader, buf, size)?;
    Ok(Frame::Read)
}

/// What room a buffer starts with for a length read off the wire, however long it says.
const FIRST_ROOM: usize = 64 << 10;

/// Reads exactly `n` bytes into `buf` (replaced), growing it as they arrive: a length is only
/// what the peer says, so a header announcing 15 MiB costs memory only once 15 MiB came. A
/// big message's room is not kept for the small ones after it; a stream ending early is an
/// `UnexpectedEof` error.
pub(crate) fn read_growing(reader: &mut impl Read, buf: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    buf.clear();
    if buf.capacity() > (1 << 20) && n < (1 << 20) {
        buf.shrink_to(1 << 20);
    }
    buf.reserve(n.min(FIRST_ROOM));
    let got = reader.take(n as u64).read_to_end(buf)?;
    if got < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// `data` with its length prefix.
pub(super) fn framed(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + data.len());
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_read_whole_and_an_oversize_one_is_refused_unread() {
        let mut stream = framed(b"one");
        stream.extend(framed(b""));
        stream.extend(framed(&[7u8; 100]));
        let mut reader = &stream[..];
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut reader, &mut buf, 100).unwrap(), Frame::Read);
        assert_eq!(buf, b"one");
        assert_eq!(read_frame(&mut reader, &mut buf, 100).unwrap(), Frame::Read);
        assert!(buf.is_empty());
        assert_eq!(read_frame(&mut reader, &mut buf, 99).unwrap(), Frame::TooLong(100));
        assert_eq!(reader.len(), 100, "nothing of the oversize frame is read");
        let mut endless = std::io::Read::chain(&[0xffu8, 0xff, 0xff, 0xff][..], std::io::repeat(0));
        assert_eq!(read_frame(&mut endless, &mut buf, 16 << 20).unwrap(), Frame::TooLong(u32::MAX));
        assert!(buf.capacity() <= 100, "the buffer never grew for it: {}", buf.capacity());
        let mut cut = &[0u8, 0, 0, 9, b'a'][..];
        assert_eq!(read_frame(&mut cut, &mut buf, 100).unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        // A header announcing 15 MiB followed by a trickle: room grows with what came.
        let mut trickle = std::io::Read::chain(&[0x00u8, 0xf0, 0, 0][..], &[1u8; 1000][..]);
        assert!(read_frame(&mut trickle, &mut buf, 16 << 20).is_err(), "cut short");
        assert!(buf.capacity() < 1 << 20, "reserved {} bytes for 1,000 that came", buf.capacity());
        let mut half_head = &[0u8, 0][..];
        assert!(read_frame(&mut half_head, &mut buf, 100).is_err());
        assert_eq!(read_frame(&mut &[][..], &mut buf, 100).unwrap(), Frame::End);
    }
}
