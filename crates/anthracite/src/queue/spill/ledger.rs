//! The ledger: one small file holding the read position that has been acknowledged.
//!
//! ```text
//! "ANLG"  magic
//! u32     format version (1)
//! u64     segment id
//! u64     byte offset in that segment of the first unacknowledged record
//! u32     CRC32C of the 24 bytes above
//! ```
//!
//! It is replaced atomically: written to `ledger.tmp`, synced, renamed over `ledger`, and the
//! directory synced — so after a crash the ledger is either the old or the new position, never a
//! mix. A ledger that fails its CRC is treated as missing (replay starts at the oldest segment).

use std::io;
use std::path::Path;

use super::fs::{SpillFs, SpillReader, SpillWriter};

/// File name of the ledger inside a spill directory.
pub(crate) const LEDGER_FILE: &str = "ledger";
/// File name the ledger is written to before being renamed into place.
pub(crate) const LEDGER_TMP_FILE: &str = "ledger.tmp";

const MAGIC: &[u8; 4] = b"ANLG";
const VERSION: u32 = 1;
const LEN: usize = 28;

/// A position in the log: a segment and a byte offset inside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// Segment id.
    pub segment: u64,
    /// Byte offset inside the segment.
    pub offset: u64,
}

/// What was found in the ledger file at open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerState {
    /// No ledger: nothing was ever acknowledged (or the directory is new).
    Missing,
    /// The ledger exists but is damaged; replay starts from the oldest segment.
    Corrupt,
    /// The acknowledged position.
    At(Position),
}

fn encode(pos: Position) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[0..4].copy_from_slice(MAGIC);
    out[4..8].copy_from_slice(&VERSION.to_le_bytes());
    out[8..16].copy_from_slice(&pos.segment.to_le_bytes());
    out[16..24].copy_from_slice(&pos.offset.to_le_bytes());
    let crc = crc32c::crc32c(&out[..24]);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode(bytes: &[u8; LEN]) -> LedgerState {
    let word = |r: std::ops::Range<usize>| -> u64 {
        bytes[r]
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
    };
    if &bytes[0..4] != MAGIC
        || word(4..8) != u64::from(VERSION)
        || word(24..28) != u64::from(crc32c::crc32c(&bytes[..24]))
    {
        return LedgerState::Corrupt;
    }
    LedgerState::At(Position {
        segment: word(8..16),
        offset: word(16..24),
    })
}

/// Reads the ledger in `dir`.
pub(crate) fn read<F: SpillFs>(fs: &F, dir: &Path) -> io::Result<LedgerState> {
    let mut reader = match fs.open(&dir.join(LEDGER_FILE)) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LedgerState::Missing),
        Err(e) => return Err(e),
    };
    if reader.file_len()? != LEN as u64 {
        return Ok(LedgerState::Corrupt);
    }
    let mut buf = [0u8; LEN];
    if reader.read_exact_at(0, &mut buf)? != LEN {
        return Ok(LedgerState::Corrupt);
    }
    Ok(decode(&buf))
}

/// Atomically replaces the ledger in `dir` with `pos`; `durable` adds the fsyncs.
pub(crate) fn write<F: SpillFs>(
    fs: &F,
    dir: &Path,
    pos: Position,
    durable: bool,
) -> io::Result<()> {
    let tmp = dir.join(LEDGER_TMP_FILE);
    let mut w = fs.create(&tmp)?;
    w.append(&encode(pos))?;
    if durable {
        w.sync()?;
    }
    drop(w);
    fs.rename(&tmp, &dir.join(LEDGER_FILE))?;
    if durable {
        fs.sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::spill::fs::MemFs;

    #[test]
    fn ledger_roundtrips_and_detects_damage() -> io::Result<()> {
        let fs = MemFs::new();
        let dir = Path::new("/q");
        assert_eq!(read(&fs, dir)?, LedgerState::Missing);
        let pos = Position {
            segment: 7,
            offset: 1234,
        };
        write(&fs, dir, pos, true)?;
        assert_eq!(read(&fs, dir)?, LedgerState::At(pos));
        fs.with_file(&dir.join(LEDGER_FILE), |d| d[10] ^= 1);
        assert_eq!(read(&fs, dir)?, LedgerState::Corrupt);
        Ok(())
    }
}
