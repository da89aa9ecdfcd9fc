//! Segment files: naming, the 8-byte file header, and reading one record at an offset.
//!
//! A segment is `<id>.seg` (twenty decimal digits, so names sort by id) holding an 8-byte
//! header — `"ANSP"`, a `u16` format version, two reserved zero bytes — followed by records
//! back to back (see [`super::record`]).

use std::io;

use super::fs::SpillReader;
use super::record::{RECORD_HEADER_LEN, RecordHeader};

/// Bytes in a segment file header.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 8;
/// The segment file header.
pub const SEGMENT_HEADER: [u8; 8] = *b"ANSP\x01\x00\x00\x00";
const SUFFIX: &str = ".seg";

/// File name of segment `id`.
pub fn file_name(id: u64) -> String {
    format!("{id:020}{SUFFIX}")
}

/// The id of a segment file name, or `None` when `name` is not a segment.
pub(crate) fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// True when the file behind `reader` starts with a valid segment header.
pub(crate) fn has_valid_header<R: SpillReader>(reader: &mut R) -> io::Result<bool> {
    let mut buf = [0u8; SEGMENT_HEADER_LEN as usize];
    Ok(reader.read_exact_at(0, &mut buf)? == buf.len() && buf == SEGMENT_HEADER)
}

/// What [`read_record`] found at an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadOutcome {
    /// A whole record whose CRC matched; its payload is in the buffer.
    Record(RecordHeader),
    /// The offset is exactly the limit: no more records.
    End,
    /// Fewer bytes than a header, or than the declared payload, remain before the limit: a
    /// torn write.
    Torn,
    /// The declared length is impossible or the CRC does not match.
    Corrupt,
}

/// Reads the record at `offset`, never past `limit`, with payloads bounded by `max_payload`.
/// The payload lands in `buf` (resized; never beyond `max_payload` bytes).
pub(crate) fn read_record<R: SpillReader>(
    reader: &mut R,
    offset: u64,
    limit: u64,
    max_payload: u64,
    buf: &mut Vec<u8>,
) -> io::Result<ReadOutcome> {
    if offset >= limit {
        return Ok(ReadOutcome::End);
    }
    let remaining = limit - offset;
    if remaining < RECORD_HEADER_LEN as u64 {
        return Ok(ReadOutcome::Torn);
    }
    let mut head = [0u8; RECORD_HEADER_LEN];
    if reader.read_exact_at(offset, &mut head)? != RECORD_HEADER_LEN {
        return Ok(ReadOutcome::Torn);
    }
    let header = RecordHeader::parse(&head);
    let len = u64::from(header.len);
    if len > max_payload {
        return Ok(ReadOutcome::Corrupt);
    }
    if len > remaining - RECORD_HEADER_LEN as u64 {
        return Ok(ReadOutcome::Torn);
    }
    // Bounded by max_payload (at most the segment size) before allocating.
    buf.resize(len as usize, 0);
    let got = reader.read_exact_at(offset + RECORD_HEADER_LEN as u64, buf)?;
    if got != buf.len() {
        return Ok(ReadOutcome::Torn);
    }
    if !header.verify(buf) {
        return Ok(ReadOutcome::Corrupt);
    }
    Ok(ReadOutcome::Record(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip_and_sort() {
        assert_eq!(parse_file_name(&file_name(42)), Some(42));
        assert_eq!(parse_file_name(&file_name(u64::MAX)), Some(u64::MAX));
        assert!(file_name(9) < file_name(10));
        assert_eq!(parse_file_name("ledger"), None);
        assert_eq!(parse_file_name("0000000000000000000a.seg"), None);
    }
}
