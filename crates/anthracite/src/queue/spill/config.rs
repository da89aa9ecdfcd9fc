//! The spill log's configuration: where it lives, how large it may grow, when it syncs.

use std::time::Duration;

use super::SpillError;
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
pub(super) const MIN_SEGMENT_BYTES: u64 = 64;

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
