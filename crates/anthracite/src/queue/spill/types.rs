//! The spill log's configuration, errors, outcomes and statistics.

use std::io;
use std::time::Duration;

use super::ledger::LedgerState;
use super::record::RECORD_HEADER_LEN;
use super::segment::SEGMENT_HEADER_LEN;

/// When appended data is forced to stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// `fdatasync` after every append. Nothing appended is lost even if the machine dies;
    /// costs one disk flush per batch.
    Always,
    /// `fdatasync` at most this often (checked on append and on [`super::SpillLog::tick`]).
    /// A machine crash loses at most the records appended since the last sync; a killed
    /// process loses nothing (appends are already in the kernel).
    Interval(Duration),
    /// Never `fsync`; the kernel writes back when it likes. A killed process still loses
    /// nothing; a machine crash can lose anything not yet written back.
    Never,
}

impl Default for FsyncPolicy {
    fn default() -> Self {
        FsyncPolicy::Interval(Duration::from_secs(1))
    }
}

/// Limits and durability settings of one destination's spill log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpillConfig {
    /// Upper bound on the bytes of segment files on disk. Default 1 GiB.
    pub max_bytes: u64,
    /// Size at which a segment is sealed and a new one started; also bounds one record.
    /// Default 64 MiB.
    pub segment_bytes: u64,
    /// Records older than this (by append time) are dropped when read, counted as expired.
    /// Default: no age limit.
    pub max_age: Option<Duration>,
    /// Data fsync policy. Default: every second.
    pub fsync: FsyncPolicy,
    /// Minimum time between two ledger writes on ack; bounds the at-least-once window.
    /// Default 1 s.
    pub ledger_interval: Duration,
}

impl Default for SpillConfig {
    fn default() -> Self {
        SpillConfig {
            max_bytes: 1 << 30,
            segment_bytes: 64 << 20,
            max_age: None,
            fsync: FsyncPolicy::default(),
            ledger_interval: Duration::from_secs(1),
        }
    }
}

/// Smallest allowed `segment_bytes`: room for the segment header and one small record.
pub const MIN_SEGMENT_BYTES: u64 = 64;

impl SpillConfig {
    /// Checks the cross-field rules; the error names the offending key.
    pub fn validate(&self) -> Result<(), SpillError> {
        if self.segment_bytes < MIN_SEGMENT_BYTES {
            return Err(SpillError::Config("segment_bytes must be at least 64"));
        }
        if self.segment_bytes > u64::from(u32::MAX) {
            return Err(SpillError::Config("segment_bytes must be below 4 GiB"));
        }
        if self.max_bytes < self.segment_bytes {
            return Err(SpillError::Config(
                "max_bytes must be at least segment_bytes (twice is recommended)",
            ));
        }
        Ok(())
    }

    /// Largest payload one record may carry: a segment holding only that record.
    pub fn max_payload(&self) -> u64 {
        self.segment_bytes - SEGMENT_HEADER_LEN - RECORD_HEADER_LEN as u64
    }
}

/// Which operation failed; doubles as the label of an error counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpillOp {
    /// Opening the directory, listing or scanning segments, reading the ledger.
    Open,
    /// Creating a segment or appending a record.
    Append,
    /// Reading a record.
    Read,
    /// `fsync` of a segment or the directory.
    Sync,
    /// Writing the ledger.
    Ledger,
    /// Deleting a consumed segment.
    Delete,
}

impl SpillOp {
    /// A short lowercase label.
    pub fn as_str(self) -> &'static str {
        match self {
            SpillOp::Open => "open",
            SpillOp::Append => "append",
            SpillOp::Read => "read",
            SpillOp::Sync => "sync",
            SpillOp::Ledger => "ledger",
            SpillOp::Delete => "delete",
        }
    }
}

impl std::fmt::Display for SpillOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors of the spill log. None of them leaves the log unusable: after an I/O error the
/// caller applies its fallback, counts, and may retry later.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpillError {
    /// The file system failed (disk full, permissions, a dead disk…).
    #[error("spill {op} failed: {source}")]
    Io {
        /// What the log was doing.
        op: SpillOp,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A configuration rule was broken; the message names the key.
    #[error("invalid spill config: {0}")]
    Config(&'static str),
    /// One batch encodes to more than a segment can hold; split it before spilling.
    #[error("batch encodes to {len} payload bytes, a segment holds at most {max}")]
    TooLarge {
        /// Payload bytes of the batch.
        len: u64,
        /// Largest payload allowed by `segment_bytes`.
        max: u64,
    },
}

impl SpillError {
    /// True for "no space left on device" (and quota exhaustion).
    pub fn is_disk_full(&self) -> bool {
        match self {
            SpillError::Io { source, .. } => {
                matches!(
                    source.kind(),
                    io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
                ) || source.raw_os_error() == Some(28)
            }
            _ => false,
        }
    }
}

/// Result of [`super::SpillLog::append`].
#[must_use = "a Full batch was not stored: apply the fallback policy"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The batch is in the log (durable per the fsync policy).
    Appended,
    /// The byte budget would be exceeded; nothing was written.
    Full,
}

/// What [`super::SpillLog::open`] found on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The ledger as found.
    pub ledger: LedgerState,
    /// Segments kept for replay.
    pub segments: usize,
    /// Whole, CRC-valid records to replay.
    pub records: u64,
    /// Datapoints in those records.
    pub datapoints: u64,
    /// Bytes of those records (headers included).
    pub bytes: u64,
    /// Segments whose tail was torn or corrupt (the rest of each was abandoned), plus segments
    /// with a bad file header (abandoned whole).
    pub damaged_segments: u64,
    /// Bytes abandoned in damaged segments.
    pub abandoned_bytes: u64,
    /// Segments deleted because they were already consumed or held no whole record.
    pub removed_segments: u64,
}

/// A snapshot of the log's accounting and counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// Records stored and not yet acknowledged (read or not).
    pub records: u64,
    /// Datapoints in those records.
    pub datapoints: u64,
    /// Of those, records handed out by `read_next` and awaiting `ack`.
    pub in_flight_records: u64,
    /// Datapoints in the in-flight records.
    pub in_flight_datapoints: u64,
    /// Record bytes (headers included) of unacknowledged records.
    pub queued_bytes: u64,
    /// Bytes of segment files on disk — what `max_bytes` bounds. Includes segment headers,
    /// consumed records of not-yet-deleted segments and abandoned tails; excludes the 28-byte
    /// ledger.
    pub disk_bytes: u64,
    /// Segment files on disk.
    pub segments: usize,
    /// Age of the oldest unacknowledged record; when that record has not been read yet and is
    /// not the first of its segment, the age of the record read just before it (an upper
    /// bound, off by at most one record).
    pub oldest_record_age: Option<Duration>,
    /// Records dropped at read because they were older than `max_age`.
    pub expired_records: u64,
    /// Datapoints in those records.
    pub expired_datapoints: u64,
    /// Records discarded unread by [`super::SpillLog::discard_next`] (the `drop_oldest`
    /// fallback).
    pub discarded_records: u64,
    /// Datapoints in those records.
    pub discarded_datapoints: u64,
    /// Segments found damaged while reading (after open); see [`RecoveryReport`] for open.
    pub damaged_segments: u64,
    /// Records known to be lost in those damaged segments.
    pub abandoned_records: u64,
    /// Datapoints known to be lost in those damaged segments.
    pub abandoned_datapoints: u64,
    /// I/O errors met, including those not returned to the caller (a failed background sync,
    /// segment delete or ledger write, all retried later).
    pub io_errors: u64,
}
