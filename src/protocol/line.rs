//! Graphite plaintext: `path value timestamp\n`. (Stub: implemented by the protocol work.)

use bytes::BytesMut;

use super::DropReason;
use crate::batch::Datapoint;

/// Splits a byte stream into lines, enforcing the maximum line length.
#[derive(Debug)]
pub struct LineFramer {
    max_len: usize,
}

impl LineFramer {
    /// A framer that drops (and reports) lines longer than `max_len` bytes.
    pub fn new(max_len: usize) -> Self {
        Self { max_len }
    }

    /// Calls `on_line` for every complete line in `buf` (without `\n`), or with
    /// `Err(DropReason::TooLong)` once per over-long line, and removes what it consumed.
    pub fn feed(&mut self, buf: &mut BytesMut, on_line: impl FnMut(Result<&[u8], DropReason>)) {
        let _ = (buf, on_line, self.max_len);
        todo!("protocol work")
    }

    /// At end of stream: reports `Unterminated` when unterminated bytes remain, and clears them.
    pub fn finish(&mut self, buf: &mut BytesMut) -> Option<DropReason> {
        let _ = buf;
        todo!("protocol work")
    }
}

/// Parses one line (no `\n`; a trailing `\r` is allowed) into `(name, timestamp, value)`,
/// before [`super::normalize`].
pub fn parse_line(line: &[u8]) -> Result<(&[u8], f64, f64), DropReason> {
    let _ = line;
    todo!("protocol work")
}

/// Appends `name value timestamp\n` formatted as carbon's line sender does.
pub fn encode_line(dp: Datapoint<'_>, out: &mut BytesMut) {
    let _ = (dp, out);
    todo!("protocol work")
}
