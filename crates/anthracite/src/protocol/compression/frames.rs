//! Where a unit of compressed input ends, read from its headers before any of it is decoded:
//! a gzip member's header, an LZ4 frame, a raw snappy block. Each answers
//! `Ok(None)` while the unit is still incomplete, so a unit split across reads waits for the
//! rest instead of being lost (carbon-c-relay 3.7.3's LZ4 reader drops such a frame).

use super::DecompressError;

/// The LZ4 frame format's magic number (little-endian on the wire).
const LZ4_MAGIC: u32 = 0x184D_2204;
/// Skippable frames: magic `0x184D2A50`–`0x184D2A5F`, a length, then that many bytes.
const LZ4_SKIPPABLE: u32 = 0x184D_2A50;

/// What the head of an LZ4 stream holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Lz4Unit {
    /// A frame of this many bytes.
    Frame(usize),
    /// A skippable frame of this many bytes: ignored.
    Skip(usize),
}

fn u32_le(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// The extent of the LZ4 frame at the start of `b` (`Ok(None)`: incomplete). A frame whose
/// compressed bytes pass `budget`, or whose block size passes it, is refused before it is
/// buffered whole.
pub(super) fn lz4_unit(b: &[u8], budget: usize) -> Result<Option<Lz4Unit>, DecompressError> {
    let Some(magic) = u32_le(b, 0) else {
        return Ok(None);
    };
    if magic & 0xFFFF_FFF0 == LZ4_SKIPPABLE {
        let Some(len) = u32_le(b, 4) else {
            return Ok(None);
        };
        let len = len as usize;
        if len > budget {
            return Err(DecompressError::TooLarge);
        }
        return Ok(Some(Lz4Unit::Skip(8 + len)).filter(|_| b.len() >= 8 + len));
    }
    if magic != LZ4_MAGIC {
        return Err(DecompressError::Corrupt);
    }
    let (Some(&flg), Some(&bd)) = (b.get(4), b.get(5)) else {
        return Ok(None);
    };
    if flg >> 6 != 0b01 {
        return Err(DecompressError::Corrupt);
    }
    let block_max = match (bd >> 4) & 7 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        _ => return Err(DecompressError::Corrupt),
    };
    if block_max > budget.max(64 << 10) {
        return Err(DecompressError::TooLarge);
    }
    let block_checksum = flg & 0x10 != 0;
    let content_size = flg & 0x08 != 0;
    let content_checksum = flg & 0x04 != 0;
    let dict_id = flg & 0x01 != 0;
    // Magic, FLG, BD, the optional content size and dictionary id, the header checksum.
    let mut at = 6 + if content_size { 8 } else { 0 } + if dict_id { 4 } else { 0 } + 1;
    loop {
        if at > budget.saturating_add(64) {
            return Err(DecompressError::TooLarge);
        }
        let Some(word) = u32_le(b, at) else {
            return Ok(None);
        };
        at += 4;
        if word == 0 {
            if content_checksum {
                at += 4;
            }
            return Ok((b.len() >= at).then_some(Lz4Unit::Frame(at)));
        }
        let size = (word & 0x7FFF_FFFF) as usize;
        if size > block_max {
            return Err(DecompressError::Corrupt);
        }
        at += size + if block_checksum { 4 } else { 0 };
    }
}

/// A raw snappy block at the start of `b`: its decoded length (refused past `budget`) and,
/// once all of it is there, its extent. The format has no length of its own: the block's
/// elements are walked until they add up to the decoded length.
pub(super) fn snappy_block(
    b: &[u8],
    budget: usize,
) -> Result<Option<(usize, usize)>, DecompressError> {
    // The decoded length, a little-endian base-128 varint of at most 5 bytes.
    let mut len: u64 = 0;
    let mut at = 0;
    loop {
        let Some(&byte) = b.get(at) else {
            return Ok(None);
        };
        len |= u64::from(byte & 0x7F) << (7 * at);
        at += 1;
        if byte & 0x80 == 0 {
            break;
        }
        if at == 5 {
            return Err(DecompressError::Corrupt);
        }
    }
    let len = usize::try_from(len).map_err(|_| DecompressError::TooLarge)?;
    if len > budget {
        return Err(DecompressError::TooLarge);
    }
    let mut produced = 0usize;
    while produced < len {
        let Some(&tag) = b.get(at) else {
            return Ok(None);
        };
        at += 1;
        // What follows the tag (a literal's bytes, a copy's offset) and what it produces.
        let (skip, out) = match tag & 3 {
            0 => {
                let short = usize::from(tag >> 2);
                let len = if short < 60 {
                    short + 1
                } else {
                    // 60..=63: the literal's length minus one in the next 1–4 bytes.
                    let width = short - 59;
                    let Some(bytes) = b.get(at..at + width) else {
                        return Ok(None);
                    };
                    at += width;
                    let v = bytes
                        .iter()
                        .enumerate()
                        .fold(0usize, |v, (i, &x)| v | usize::from(x) << (8 * i));
                    v.saturating_add(1)
                };
                (len, len)
            }
            1 => (1, 4 + usize::from((tag >> 2) & 7)),
            2 => (2, 1 + usize::from(tag >> 2)),
            _ => (4, 1 + usize::from(tag >> 2)),
        };
        at = at.saturating_add(skip);
        produced = produced.saturating_add(out);
    }
    if produced != len {
        return Err(DecompressError::Corrupt);
    }
    Ok((b.len() >= at).then_some((len, at)))
}

/// The length of the gzip member header at the start of `b` (RFC 1952: ten bytes, then the
/// optional extra field, name, comment and header CRC its flags announce).
pub(super) fn gzip_header(b: &[u8]) -> Result<Option<usize>, DecompressError> {
    if b.len() < 10 {
        if b.first().is_some_and(|&x| x != 0x1F) || b.get(1).is_some_and(|&x| x != 0x8B) {
            return Err(DecompressError::Corrupt);
        }
        return Ok(None);
    }
    if b[0] != 0x1F || b[1] != 0x8B || b[2] != 8 {
        return Err(DecompressError::Corrupt);
    }
    let flags = b[3];
    let mut at = 10;
    if flags & 0x04 != 0 {
        let (Some(&lo), Some(&hi)) = (b.get(at), b.get(at + 1)) else {
            return Ok(None);
        };
        at += 2 + usize::from(u16::from_le_bytes([lo, hi]));
    }
    for flag in [0x08, 0x10] {
        if flags & flag != 0 {
            let Some(nul) = b.get(at..).and_then(|r| memchr::memchr(0, r)) else {
                // The name or comment has no end yet; a header never needs more than this.
                if b.len() > 64 << 10 {
                    return Err(DecompressError::Corrupt);
                }
                return Ok(None);
            };
            at += nul + 1;
        }
    }
    if flags & 0x02 != 0 {
        at += 2;
    }
    Ok((b.len() >= at).then_some(at))
}
