//! Crash recovery: what [`super::SpillLog::open`] does before the log is usable.
//!
//! Reads the ledger, deletes segments before its position, and scans every other segment from
//! the ledger offset (or its start), verifying each record's length and CRC and counting
//! records and datapoints. The first torn or corrupt record ends its segment: the rest of that
//! segment is abandoned (a length cannot be trusted after a bad record), counted and logged.

use std::collections::VecDeque;
use std::path::Path;

use super::fs::{SpillFs, SpillReader};
use super::ledger::{self, LedgerState, Position};
use super::record::payload_datapoints;
use super::segment::{self, ReadOutcome, SEGMENT_HEADER_LEN, read_record};
use super::{RecoveryReport, SpillError, SpillOp};

/// One segment file as the log tracks it.
pub(super) struct Segment<R> {
    pub(super) id: u64,
    /// Offset of the first record to deliver (past the ledger position for the first segment).
    pub(super) start: u64,
    /// End of the last whole, verified record: reads never go past it.
    pub(super) valid_len: u64,
    /// Bytes on disk, ≥ `valid_len` when a tail was abandoned.
    pub(super) file_len: u64,
    /// No more appends (everything but the active segment).
    pub(super) sealed: bool,
    /// Records (and their datapoints) after the read cursor, or all of them if the cursor has
    /// not reached this segment.
    pub(super) unread_records: u64,
    pub(super) unread_datapoints: u64,
    /// Append time of the record at `start`.
    pub(super) first_ms: Option<u64>,
    pub(super) reader: Option<R>,
}

/// The state found on disk.
pub(super) struct Recovered<R> {
    /// Segments holding records to replay, oldest first, all sealed.
    pub(super) segments: VecDeque<Segment<R>>,
    pub(super) report: RecoveryReport,
    /// Id for the next segment created: above every segment and the ledger's.
    pub(super) next_id: u64,
    /// Bytes of the kept segment files.
    pub(super) disk_bytes: u64,
}

fn io_err(op: SpillOp) -> impl FnOnce(std::io::Error) -> SpillError {
    move |source| SpillError::Io { op, source }
}

/// Scans `dir`, deleting consumed and empty segments; see the module docs.
pub(super) fn recover<F: SpillFs>(fs: &F, dir: &Path) -> Result<Recovered<F::Reader>, SpillError> {
    fs.create_dir_all(dir).map_err(io_err(SpillOp::Open))?;
    let ledger_state = ledger::read(fs, dir).map_err(io_err(SpillOp::Open))?;
    if ledger_state == LedgerState::Corrupt {
        tracing::warn!(dir = %dir.display(), "spill ledger damaged; replaying every segment");
    }
    let from = match ledger_state {
        LedgerState::At(pos) => pos,
        _ => Position::default(),
    };
    let mut ids = Vec::new();
    for name in fs.list(dir).map_err(io_err(SpillOp::Open))? {
        if let Some(id) = segment::parse_file_name(&name) {
            ids.push(id);
        } else if name == ledger::LEDGER_TMP_FILE {
            // A ledger write interrupted before its rename: the old ledger stands.
            let _ = fs.remove(&dir.join(name));
        }
    }
    ids.sort_unstable();

    let mut report = RecoveryReport {
        ledger: ledger_state,
        segments: 0,
        records: 0,
        datapoints: 0,
        bytes: 0,
        damaged_segments: 0,
        abandoned_bytes: 0,
        removed_segments: 0,
    };
    let mut segments = VecDeque::new();
    let mut disk_bytes = 0;
    let mut buf = Vec::new();
    for &id in &ids {
        let path = dir.join(segment::file_name(id));
        if id < from.segment {
            fs.remove(&path).map_err(io_err(SpillOp::Delete))?;
            report.removed_segments += 1;
            continue;
        }
        let mut reader = fs.open(&path).map_err(io_err(SpillOp::Open))?;
        let file_len = reader.file_len().map_err(io_err(SpillOp::Open))?;
        if !segment::has_valid_header(&mut reader).map_err(io_err(SpillOp::Open))? {
            tracing::warn!(segment = %path.display(), bytes = file_len,
                    "spill segment has no valid header; abandoned whole");
            report.damaged_segments += 1;
            report.abandoned_bytes += file_len;
            drop(reader);
            fs.remove(&path).map_err(io_err(SpillOp::Delete))?;
            continue;
        }
        let start = if id == from.segment {
            from.offset.max(SEGMENT_HEADER_LEN)
        } else {
            SEGMENT_HEADER_LEN
        };
        let mut seg = Segment {
            id,
            start,
            valid_len: start,
            file_len,
            sealed: true,
            unread_records: 0,
            unread_datapoints: 0,
            first_ms: None,
            reader: None,
        };
        loop {
            let at = seg.valid_len;
            let outcome = read_record(&mut reader, at, file_len, u64::from(u32::MAX), &mut buf)
                .map_err(io_err(SpillOp::Open))?;
            let damaged = match outcome {
                ReadOutcome::End => false,
                ReadOutcome::Record(header) => match payload_datapoints(&buf) {
                    Ok(n) => {
                        seg.valid_len += header.record_len();
                        seg.unread_records += 1;
                        seg.unread_datapoints += n;
                        seg.first_ms.get_or_insert(header.appended_ms);
                        continue;
                    }
                    Err(_) => true,
                },
                ReadOutcome::Torn | ReadOutcome::Corrupt => true,
            };
            if damaged {
                let lost = file_len - at;
                tracing::warn!(segment = %path.display(), offset = at, abandoned_bytes = lost,
                        kind = ?outcome, "spill segment has a torn or corrupt record; rest of segment abandoned");
                report.damaged_segments += 1;
                report.abandoned_bytes += lost;
            }
            break;
        }
        if seg.unread_records == 0 {
            drop(reader);
            fs.remove(&path).map_err(io_err(SpillOp::Delete))?;
            report.removed_segments += 1;
            continue;
        }
        report.records += seg.unread_records;
        report.datapoints += seg.unread_datapoints;
        report.bytes += seg.valid_len - seg.start;
        disk_bytes += file_len;
        seg.reader = Some(reader);
        segments.push_back(seg);
    }
    let next_id = ids.last().copied().unwrap_or(0).max(from.segment) + 1;
    report.segments = segments.len();
    Ok(Recovered {
        segments,
        report,
        next_id,
        disk_bytes,
    })
}
