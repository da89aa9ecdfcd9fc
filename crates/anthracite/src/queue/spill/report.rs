//! What the spill log reports: an append's outcome, what recovery found, its statistics.

use super::ledger::LedgerState;
use std::time::Duration;

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
