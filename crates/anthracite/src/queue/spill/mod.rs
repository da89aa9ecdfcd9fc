//! # The spill log: one destination's disk tier
//!
//! When a destination's memory queue is full, its batches overflow into a [`SpillLog`]: an
//! append-only log of checksummed records in segment files, one directory per destination.
//! When the memory tier drains, the log is replayed oldest first. This module owns only that
//! directory; it knows nothing about sockets, tiers or policies — the queue decides when to
//! spill, when to replay, and what to do when the log says [`AppendOutcome::Full`].
//!
//! The API is synchronous `std` file I/O. Drive each destination's log from one dedicated
//! blocking thread (or `tokio::task::spawn_blocking` holding the log by value); it is `Send`,
//! never shared.
//!
//! ## Limits
//!
//! - `max_bytes` bounds the bytes of segment files on disk (headers, consumed-but-not-yet-
//!   deleted records and abandoned tails included). An append that would exceed it writes
//!   nothing and returns [`AppendOutcome::Full`]; the queue applies its fallback and counts.
//!   Because a segment is deleted only once fully consumed, up to one segment of consumed data
//!   can still occupy the budget: keep `max_bytes` ≥ 2 × `segment_bytes`.
//! - `segment_bytes` (default 64 MiB) is where a segment is sealed; one record must fit in one
//!   segment, so a larger batch is refused with [`SpillError::TooLarge`] (split it first).
//! - `max_age` (optional): records older than this, by append time, are dropped when they come
//!   up for reading, counted in [`SpillStats::expired_records`]. Age never refuses an append.
//!
//! ## On-disk format
//!
//! ```text
//! <dir>/00000000000000000001.seg   segment: "ANSP" u16 version u16 0, then records
//! <dir>/00000000000000000002.seg
//! <dir>/ledger                     "ANLG" u32 version, u64 segment, u64 offset, u32 crc32c
//!
//! record = u32 payload len | u32 CRC32C(len ++ append_ms ++ payload) | u64 append_ms | payload
//! payload = varint count, then per datapoint:
//!           varint name len | name bytes | u64 timestamp f64 bits | u64 value f64 bits
//! ```
//!
//! All integers are little-endian, varints are LEB128, floats are stored as raw bits (bit-exact
//! round trip). See [`record`], [`segment`] and [`ledger`] for the details.
//!
//! ## Write, read, acknowledge, delete
//!
//! - **Write**: [`SpillLog::append`] encodes a batch into one record and writes it with a single
//!   `write` to the newest segment, rolling to a new segment (id + 1) when it would pass
//!   `segment_bytes`. A sealed segment is fsynced (unless the policy is `Never`); a new segment's
//!   directory entry is fsynced. Records are in FIFO order: by segment id, then offset.
//! - **Read**: [`SpillLog::read_next`] returns the oldest record not yet read, checking its CRC
//!   again. Reading does not consume: the record stays on disk, *in flight*, until acknowledged.
//! - **Acknowledge**: [`SpillLog::ack`]`(n)` consumes the `n` oldest in-flight records (the queue
//!   acks once the destination has taken them). The acknowledged position is persisted in the
//!   ledger — temp file, fsync, rename, directory fsync — at most once per `ledger_interval`,
//!   and always on [`SpillLog::sync`] / [`SpillLog::close`].
//! - **Delete**: a segment is deleted as soon as the acknowledged position leaves it; when the
//!   log is empty the active segment is deleted too, so a drained log leaves no segment behind.
//! - **Sync**: [`FsyncPolicy`] `Always` (every append), `Interval(d)` (default 1 s, checked on
//!   append and [`SpillLog::tick`]) or `Never`. [`SpillLog::sync`] forces data and ledger.
//! - **Errors**: an I/O error that prevents storing a batch is returned by `append` (the
//!   caller applies its fallback and counts it) and seals the active segment, so later records
//!   never follow a partial one. Errors after the batch is safely stored — a failed periodic
//!   fsync, segment delete or ledger write — are not returned (the batch *is* in the log, and
//!   reporting it as failed would make the caller count it twice); they are counted in
//!   [`SpillStats::io_errors`], logged once per episode, and retried by the next sync, ack or
//!   [`SpillLog::sync`], which does return them.
//!
//! ## Crash recovery
//!
//! [`SpillLog::open`] reads the ledger, deletes segments before its position, then scans every
//! remaining segment from the ledger offset (or from its start), verifying each record's length
//! and CRC and counting records and datapoints. The first torn (partial) or corrupt record ends
//! that segment: **the rest of that segment is abandoned** — a length field cannot be trusted
//! after a bad record, so there is no resynchronisation — counted in the [`RecoveryReport`] and
//! logged once per damaged segment; later segments are still replayed. A damaged ledger is
//! treated as missing: replay starts at the oldest segment. New appends always go to a fresh
//! segment, so nothing is ever appended behind a torn tail. Damage found later while reading
//! (a disk changing under us) is handled the same way. Nothing on this path panics; decoding
//! bounds every length by the bytes present before allocating.
//!
//! ## Delivery guarantee: at-least-once
//!
//! - **Nothing fsynced is lost.** Every record appended before the last completed data sync
//!   (and not acknowledged) is replayed after a crash, in order. With `Interval(d)` a machine
//!   crash can lose the records of the last `d`; a killed *process* loses nothing, since each
//!   append is already in the kernel's page cache.
//! - **Duplicates** after a crash are the records that had been read (handed to the
//!   destination) but were not yet acknowledged *as of the last ledger write*: replay restarts
//!   at the persisted ledger position. That is the records in flight at the crash plus those
//!   acknowledged since the last ledger write (at most `ledger_interval` worth). A segment
//!   deleted after that ledger write is not replayed, so the window can only be smaller; a
//!   damaged ledger widens it to every surviving segment. Without a crash nothing is delivered
//!   twice.
//! - **Order** is FIFO, across restarts too.
//! - **Losses** are counted, never silent: `Full` appends (the caller's fallback), expired
//!   records, and abandoned torn/corrupt tails.
//!
//! ## Testing
//!
//! File access goes through [`SpillFs`]; [`MemFs`] simulates crashes (unsynced data dropped, a
//! torn prefix optionally kept) and a property test checks the log against a `VecDeque` model
//! over random append / read / ack / sync / crash-and-reopen sequences.

mod config;
mod error;
mod fs;
pub(crate) mod ledger;
pub(crate) mod record;
mod recovery;
mod report;
pub(crate) mod segment;
pub(super) mod thread;
pub(super) mod tier;

#[cfg(test)]
mod model_tests;

pub use config::{FsyncPolicy, SpillConfig};
pub use error::SpillError;
pub(crate) use error::SpillOp;
pub use fs::{MemFs, SpillFs, SpillWriter};
pub(crate) use fs::{SpillReader, StdFs};
pub use ledger::LedgerState;
pub(crate) use ledger::Position;
pub use report::AppendOutcome;
pub(crate) use report::{RecoveryReport, SpillStats};

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::batch::Batch;
use crate::episode::{Episode, Line};
use record::{RECORD_HEADER_LEN, decode_batch, encode_record, payload_datapoints};
use recovery::{Recovered, Segment};
use segment::{ReadOutcome, SEGMENT_HEADER, SEGMENT_HEADER_LEN, read_record};

/// How often the active segment's file is checked to still be in the directory.
const PRESENCE_CHECK: Duration = Duration::from_secs(1);

/// A record handed out by `read_next` (or expired while others were in flight).
struct InFlight {
    end: Position,
    bytes: u64,
    datapoints: u64,
    appended_ms: u64,
    /// False for an expired record: skipped, already dropped from the accounting, acknowledged
    /// implicitly with the records around it.
    delivered: bool,
}

/// The spill log of one destination. The design is the module documentation of `queue::spill`.
pub struct SpillLog<F: SpillFs = StdFs> {
    fs: F,
    dir: PathBuf,
    config: SpillConfig,
    segments: VecDeque<Segment<F::Reader>>,
    /// Appends go to `segments.back()` while this is `Some`.
    writer: Option<F::Writer>,
    next_id: u64,
    read: Position,
    acked: Position,
    in_flight: VecDeque<InFlight>,
    last_read_ms: Option<u64>,
    stats: SpillStats,
    unsynced: bool,
    last_sync: Instant,
    ledger_dirty: bool,
    last_ledger: Instant,
    io_episode: Episode,
    /// When the active segment's file was last checked to still exist.
    last_presence_check: Instant,
    scratch: Vec<u8>,
    payload: Vec<u8>,
}

impl SpillLog<StdFs> {
    /// Opens (creating if needed) the spill log in `dir` on the real file system, replaying
    /// what a previous run left.
    pub fn open(dir: &Path, config: SpillConfig) -> Result<(Self, RecoveryReport), SpillError> {
        Self::open_with(StdFs, dir, config)
    }
}

impl<F: SpillFs> SpillLog<F> {
    /// Opens the spill log in `dir` through `fs`; see [crash recovery](self#crash-recovery).
    pub fn open_with(
        fs: F,
        dir: &Path,
        config: SpillConfig,
    ) -> Result<(Self, RecoveryReport), SpillError> {
        config.validate()?;
        let Recovered {
            segments,
            report,
            next_id,
            disk_bytes,
        } = recovery::recover(&fs, dir)?;
        let read = segments.front().map_or(
            Position {
                segment: next_id,
                offset: SEGMENT_HEADER_LEN,
            },
            |s| Position {
                segment: s.id,
                offset: s.start,
            },
        );
        let now = Instant::now();
        let log = SpillLog {
            fs,
            dir: dir.to_path_buf(),
            config,
            segments,
            writer: None,
            next_id,
            read,
            acked: read,
            in_flight: VecDeque::new(),
            last_read_ms: None,
            stats: SpillStats {
                records: report.records,
                datapoints: report.datapoints,
                queued_bytes: report.bytes,
                disk_bytes,
                ..SpillStats::default()
            },
            unsynced: false,
            last_sync: now,
            ledger_dirty: false,
            last_ledger: now,
            io_episode: Episode::default(),
            last_presence_check: now,
            scratch: Vec::new(),
            payload: Vec::new(),
        };
        if report.records > 0 {
            tracing::info!(dir = %dir.display(), records = report.records,
                datapoints = report.datapoints, segments = report.segments, "spill log replaying");
        }
        Ok((log, report))
    }

    /// The configuration the log was opened with.
    pub fn config(&self) -> &SpillConfig {
        &self.config
    }

    /// The directory the log owns.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Accounting and counters.
    pub fn stats(&self) -> SpillStats {
        let mut stats = self.stats;
        stats.segments = self.segments.len();
        stats.oldest_record_age = self
            .oldest_ms()
            .map(|ms| Duration::from_millis(self.fs.now_millis().saturating_sub(ms)));
        stats
    }

    /// True when no unacknowledged record is stored.
    pub fn is_empty(&self) -> bool {
        self.stats.records == 0
    }

    fn oldest_ms(&self) -> Option<u64> {
        if self.stats.records == 0 {
            return None;
        }
        if let Some(f) = self.in_flight.iter().find(|f| f.delivered) {
            return Some(f.appended_ms);
        }
        match self.segment_index(self.read.segment) {
            Some(i) if self.segments[i].start == self.read.offset => self.segments[i].first_ms,
            _ => self.last_read_ms,
        }
        .or(self.last_read_ms)
    }

    fn segment_index(&self, id: u64) -> Option<usize> {
        self.segments.binary_search_by_key(&id, |s| s.id).ok()
    }

    fn note_io(&mut self, op: SpillOp, source: io::Error) -> SpillError {
        self.stats.io_errors += 1;
        match self.io_episode.occurred(1, Instant::now()) {
            Some(Line::Started(_)) => tracing::warn!(dir = %self.dir.display(), %op,
                error = %source, "spill log I/O error"),
            Some(Line::Ongoing(c)) => tracing::warn!(dir = %self.dir.display(), %op,
                error = %source, errors = c.occurrences, over = ?c.over,
                "spill log I/O errors continue"),
            _ => {}
        }
        SpillError::Io { op, source }
    }

    fn note_ok(&mut self) {
        let line = self.io_episode.cleared(Instant::now());
        self.log_recovered(line);
    }

    fn log_recovered(&self, line: Option<Line>) {
        if let Some(Line::Ended(c)) = line {
            tracing::info!(dir = %self.dir.display(), errors = c.occurrences, over = ?c.over,
                "spill log I/O recovered");
        }
    }

    /// Appends `batch` as one record. Returns [`AppendOutcome::Full`] (writing nothing) when the
    /// byte budget would be exceeded. Durable according to the fsync policy.
    pub fn append(&mut self, batch: &Batch) -> Result<AppendOutcome, SpillError> {
        let now_ms = self.fs.now_millis();
        encode_record(batch, now_ms, &mut self.scratch);
        let rec_len = self.scratch.len() as u64;
        let payload = rec_len - RECORD_HEADER_LEN as u64;
        if payload > self.config.max_payload() {
            return Err(SpillError::TooLarge {
                len: payload,
                max: self.config.max_payload(),
            });
        }
        let need_segment = match (&self.writer, self.segments.back()) {
            (Some(_), Some(seg)) => seg.file_len + rec_len > self.config.segment_bytes,
            _ => true,
        };
        let needed = rec_len + if need_segment { SEGMENT_HEADER_LEN } else { 0 };
        if self.stats.disk_bytes + needed > self.config.max_bytes {
            return Ok(AppendOutcome::Full);
        }
        if need_segment {
            self.roll()?;
        }
        let (Some(writer), Some(seg)) = (self.writer.as_mut(), self.segments.back_mut()) else {
            return Err(SpillError::Io {
                op: SpillOp::Append,
                source: io::Error::other("no active segment"),
            });
        };
        if let Err(e) = writer.append(&self.scratch) {
            // The file may now end in a partial record: seal the segment at its last whole
            // record so nothing is appended behind the torn bytes; the next append rolls.
            self.writer = None;
            seg.sealed = true;
            let path = self.dir.join(segment::file_name(seg.id));
            if let Ok(len) = self.fs.open(&path).and_then(|mut r| r.file_len()) {
                self.stats.disk_bytes += len.saturating_sub(seg.file_len);
                seg.file_len = seg.file_len.max(len);
            }
            return Err(self.note_io(SpillOp::Append, e));
        }
        let n = batch.len() as u64;
        if seg.unread_records == 0
            && self.read.segment == seg.id
            && self.read.offset == seg.valid_len
        {
            // The reader is caught up: this record is the next it will see.
            seg.start = seg.valid_len;
            seg.first_ms = Some(now_ms);
        }
        seg.first_ms.get_or_insert(now_ms);
        seg.valid_len += rec_len;
        seg.file_len += rec_len;
        seg.unread_records += 1;
        seg.unread_datapoints += n;
        self.stats.records += 1;
        self.stats.datapoints += n;
        self.stats.queued_bytes += rec_len;
        self.stats.disk_bytes += rec_len;
        self.unsynced = true;
        self.note_ok();
        // The record is stored and accounted from here on: a failing sync is counted in
        // `SpillStats::io_errors` (and logged once per episode) rather than returned, so the
        // caller never applies its fallback to a batch the log will still replay.
        let _ = match self.config.fsync {
            FsyncPolicy::Always => self.sync_data(),
            FsyncPolicy::Interval(_) => self.tick(),
            FsyncPolicy::Never => Ok(()),
        };
        Ok(AppendOutcome::Appended)
    }

    /// Seals the active segment (fsynced unless the policy is `Never`) and starts a new one.
    fn roll(&mut self) -> Result<(), SpillError> {
        let durable = self.config.fsync != FsyncPolicy::Never;
        if let Some(mut writer) = self.writer.take() {
            if let Some(seg) = self.segments.back_mut() {
                seg.sealed = true;
            }
            if durable && self.unsynced {
                writer.sync().map_err(|e| self.note_io(SpillOp::Sync, e))?;
                self.unsynced = false;
            }
        }
        let id = self.next_id;
        let path = self.dir.join(segment::file_name(id));
        let create = || {
            self.fs.create(&path).and_then(|mut w| {
                w.append(&SEGMENT_HEADER)?;
                if durable {
                    self.fs.sync_dir(&self.dir)?;
                }
                Ok(w)
            })
        };
        let created = match create() {
            // The directory was removed under the log (`rm -rf` of the spill dir): make it
            // again and go on spilling.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.fs.create_dir_all(&self.dir).and_then(|()| create())
            }
            other => other,
        };
        let writer = match created {
            Ok(w) => w,
            Err(e) => {
                let _ = self.fs.remove(&path);
                return Err(self.note_io(SpillOp::Append, e));
            }
        };
        self.next_id += 1;
        self.segments.push_back(Segment {
            id,
            start: SEGMENT_HEADER_LEN,
            valid_len: SEGMENT_HEADER_LEN,
            file_len: SEGMENT_HEADER_LEN,
            sealed: false,
            unread_records: 0,
            unread_datapoints: 0,
            first_ms: None,
            reader: None,
        });
        self.stats.disk_bytes += SEGMENT_HEADER_LEN;
        self.writer = Some(writer);
        Ok(())
    }

    /// Returns the oldest record not yet read, or `None` when every stored record has been read.
    /// The record stays stored (in flight) until [`SpillLog::ack`]. Expired records are skipped
    /// and counted; a torn or corrupt record abandons the rest of its segment (counted, logged).
    pub fn read_next(&mut self) -> Result<Option<Batch>, SpillError> {
        self.read_inner(false).map(|r| r.and_then(|(b, _)| b))
    }

    /// Discards the oldest record not yet read (the `drop_oldest` fallback): it is consumed
    /// without being delivered, counted in [`SpillStats::discarded_records`], and its space is
    /// freed once the acknowledged position passes it. Returns its datapoints, or `None` when
    /// every stored record has been read.
    pub fn discard_next(&mut self) -> Result<Option<u64>, SpillError> {
        self.read_inner(true).map(|r| r.map(|(_, n)| n))
    }

    fn read_inner(&mut self, discard: bool) -> Result<Option<(Option<Batch>, u64)>, SpillError> {
        loop {
            if self.stats.records == self.stats.in_flight_records {
                return Ok(None);
            }
            // Find the cursor's segment, skipping to the next one at the end of a sealed segment.
            let idx = match self.segments.iter().position(|s| s.id >= self.read.segment) {
                Some(i) => i,
                None => return Ok(None),
            };
            let seg = &mut self.segments[idx];
            if seg.id != self.read.segment {
                self.read = Position {
                    segment: seg.id,
                    offset: seg.start,
                };
            }
            if self.read.offset >= seg.valid_len {
                if !seg.sealed {
                    return Ok(None);
                }
                match self.segments.get(idx + 1) {
                    Some(next) => {
                        self.read = Position {
                            segment: next.id,
                            offset: next.start,
                        };
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let reader = match seg.reader.as_mut() {
                Some(r) => r,
                None => {
                    let path = self.dir.join(segment::file_name(seg.id));
                    match self.fs.open(&path) {
                        Ok(r) => seg.reader.insert(r),
                        // Removed under the log: its records are lost, counted, and the
                        // replay goes on with the next segment instead of retrying forever.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            let _ = self.note_io(SpillOp::Read, e);
                            self.drop_vanished(idx);
                            continue;
                        }
                        Err(e) => return Err(self.note_io(SpillOp::Read, e)),
                    }
                }
            };
            let outcome = read_record(
                reader,
                self.read.offset,
                seg.valid_len,
                self.config.max_payload().max(seg.valid_len),
                &mut self.payload,
            );
            let header = match outcome {
                Ok(ReadOutcome::Record(h)) => h,
                Ok(other) => {
                    self.abandon_rest(idx, other);
                    continue;
                }
                Err(e) => return Err(self.note_io(SpillOp::Read, e)),
            };
            let Ok(n) = payload_datapoints(&self.payload) else {
                self.abandon_rest(idx, ReadOutcome::Corrupt);
                continue;
            };
            let expired = discard
                || self.config.max_age.is_some_and(|age| {
                    self.fs.now_millis().saturating_sub(header.appended_ms) > age.as_millis() as u64
                });
            let batch = if expired {
                None
            } else {
                match decode_batch(&self.payload) {
                    Ok(b) => Some(b),
                    Err(_) => {
                        self.abandon_rest(idx, ReadOutcome::Corrupt);
                        continue;
                    }
                }
            };
            let seg = &mut self.segments[idx];
            let bytes = header.record_len();
            self.read.offset += bytes;
            seg.unread_records -= 1;
            seg.unread_datapoints -= n;
            self.last_read_ms = Some(header.appended_ms);
            let entry = InFlight {
                end: self.read,
                bytes,
                datapoints: n,
                appended_ms: header.appended_ms,
                delivered: batch.is_some(),
            };
            self.note_ok();
            match batch {
                Some(batch) => {
                    self.stats.in_flight_records += 1;
                    self.stats.in_flight_datapoints += n;
                    self.in_flight.push_back(entry);
                    return Ok(Some((Some(batch), n)));
                }
                None => {
                    self.stats.records -= 1;
                    self.stats.datapoints -= n;
                    self.stats.queued_bytes -= bytes;
                    if discard {
                        self.stats.discarded_records += 1;
                        self.stats.discarded_datapoints += n;
                    } else {
                        self.stats.expired_records += 1;
                        self.stats.expired_datapoints += n;
                    }
                    if self.in_flight.is_empty() {
                        self.advance_ack(self.read);
                    } else {
                        self.in_flight.push_back(entry);
                    }
                    if discard {
                        return Ok(Some((None, n)));
                    }
                }
            }
        }
    }

    /// Drops the unread rest of segment `idx` after a torn or corrupt record at the cursor.
    fn abandon_rest(&mut self, idx: usize, outcome: ReadOutcome) {
        let seg = &self.segments[idx];
        tracing::warn!(segment = seg.id, offset = self.read.offset,
            abandoned_bytes = seg.valid_len - self.read.offset,
            records = seg.unread_records, kind = ?outcome,
            "spill record failed verification on read; rest of segment abandoned");
        self.drop_unread(idx);
    }

    /// A segment file that is gone from the directory: its unread records are counted as
    /// abandoned (with the damaged segments) and the log goes on with the next one.
    fn drop_vanished(&mut self, idx: usize) {
        let seg = &self.segments[idx];
        tracing::warn!(dir = %self.dir.display(), segment = seg.id,
            records = seg.unread_records, datapoints = seg.unread_datapoints,
            "spill segment removed from the directory; its records are lost");
        self.drop_unread(idx);
    }

    /// Counts the unread rest of segment `idx` as abandoned and seals it where reading stands.
    fn drop_unread(&mut self, idx: usize) {
        let is_active = idx + 1 == self.segments.len() && self.writer.is_some();
        let seg = &mut self.segments[idx];
        let lost_bytes = seg.valid_len - self.read.offset;
        self.stats.records -= seg.unread_records;
        self.stats.datapoints -= seg.unread_datapoints;
        self.stats.queued_bytes -= lost_bytes;
        self.stats.abandoned_records += seg.unread_records;
        self.stats.abandoned_datapoints += seg.unread_datapoints;
        self.stats.damaged_segments += 1;
        seg.unread_records = 0;
        seg.unread_datapoints = 0;
        seg.valid_len = self.read.offset;
        seg.sealed = true;
        if is_active && let Some(mut writer) = self.writer.take() {
            // Best effort: the records before the damage stay valid.
            let _ = writer.sync();
        }
    }

    /// Acknowledges the `records` oldest in-flight records: they are consumed and will not be
    /// replayed after a restart once the ledger is written. Returns how many were acknowledged
    /// (fewer than asked if fewer were in flight). Deletes segments left fully consumed.
    pub fn ack(&mut self, records: usize) -> Result<usize, SpillError> {
        let mut acked = 0;
        let mut end = None;
        while let Some(front) = self.in_flight.front() {
            if front.delivered {
                if acked == records {
                    break;
                }
                acked += 1;
                self.stats.records -= 1;
                self.stats.datapoints -= front.datapoints;
                self.stats.queued_bytes -= front.bytes;
                self.stats.in_flight_records -= 1;
                self.stats.in_flight_datapoints -= front.datapoints;
            }
            end = Some(front.end);
            self.in_flight.pop_front();
        }
        if let Some(end) = end {
            self.advance_ack(end);
        }
        Ok(acked)
    }

    /// Moves the acknowledged position to `pos`, deleting consumed segments. Infallible for the
    /// caller: the acknowledgement itself is in memory; a failed delete or ledger write is
    /// counted in `io_errors`, logged once per episode, and retried on the next ack or sync.
    fn advance_ack(&mut self, pos: Position) {
        self.acked = pos;
        self.ledger_dirty = true;
        let drained = self.stats.records == 0;
        while let Some(front) = self.segments.front() {
            let consumed = front.id < pos.segment
                || (front.id == pos.segment && front.sealed && pos.offset >= front.valid_len);
            if !consumed && !drained {
                break;
            }
            let (id, file_len) = (front.id, front.file_len);
            if self.writer.is_some() && self.segments.len() == 1 {
                self.writer = None;
                self.unsynced = false;
            }
            match self.fs.remove(&self.dir.join(segment::file_name(id))) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.note_io(SpillOp::Delete, e);
                    break;
                }
            }
            self.segments.pop_front();
            self.stats.disk_bytes -= file_len;
        }
        if drained {
            self.in_flight.clear();
            self.read = Position {
                segment: self.next_id,
                offset: SEGMENT_HEADER_LEN,
            };
            self.acked = self.read;
        }
        let _ = self.tick();
    }

    /// Performs whatever is due by time: a data sync under `FsyncPolicy::Interval`, a ledger
    /// write after `ledger_interval`. Call it now and then when the log is otherwise idle.
    pub fn tick(&mut self) -> Result<(), SpillError> {
        let line = self.io_episode.tick(Instant::now());
        self.log_recovered(line);
        self.check_active_segment();
        if let FsyncPolicy::Interval(every) = self.config.fsync
            && self.unsynced
            && self.last_sync.elapsed() >= every
        {
            self.sync_data()?;
        }
        if self.ledger_dirty && self.last_ledger.elapsed() >= self.config.ledger_interval {
            self.write_ledger()?;
        }
        Ok(())
    }

    /// At most once per [`PRESENCE_CHECK`]: if the active segment's file was removed (the
    /// spill directory deleted under the relay), appends would go on into a file no reader can
    /// open again. The segment is sealed instead (its unread records are counted as lost when
    /// replay reaches it) and the next append starts a segment in a directory made again.
    fn check_active_segment(&mut self) {
        if self.writer.is_none() || self.last_presence_check.elapsed() < PRESENCE_CHECK {
            return;
        }
        self.last_presence_check = Instant::now();
        let Some(seg) = self.segments.back() else {
            return;
        };
        let path = self.dir.join(segment::file_name(seg.id));
        if let Err(e) = self.fs.open(&path)
            && e.kind() == io::ErrorKind::NotFound
        {
            self.writer = None;
            self.unsynced = false;
            if let Some(seg) = self.segments.back_mut() {
                seg.sealed = true;
            }
            let _ = self.note_io(SpillOp::Append, e);
        }
    }

    fn sync_data(&mut self) -> Result<(), SpillError> {
        if let Some(writer) = self.writer.as_mut()
            && self.unsynced
            && let Err(e) = writer.sync()
        {
            return Err(self.note_io(SpillOp::Sync, e));
        }
        self.unsynced = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    fn write_ledger(&mut self) -> Result<(), SpillError> {
        let durable = self.config.fsync != FsyncPolicy::Never;
        let written = match ledger::write(&self.fs, &self.dir, self.acked, durable) {
            // The directory was removed under the log: make it again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => self
                .fs
                .create_dir_all(&self.dir)
                .and_then(|()| ledger::write(&self.fs, &self.dir, self.acked, durable)),
            other => other,
        };
        if let Err(e) = written {
            return Err(self.note_io(SpillOp::Ledger, e));
        }
        self.ledger_dirty = false;
        self.last_ledger = Instant::now();
        Ok(())
    }

    /// Forces appended data to disk and persists the acknowledged position now, whatever the
    /// policy (`Never` still skips the fsyncs but writes the ledger).
    pub fn sync(&mut self) -> Result<(), SpillError> {
        if self.config.fsync == FsyncPolicy::Never {
            self.unsynced = false;
        } else {
            self.sync_data()?;
        }
        if self.ledger_dirty {
            self.write_ledger()?;
        }
        Ok(())
    }

    /// Syncs and closes the log (for shutdown); a later [`SpillLog::open`] replays the rest.
    pub fn close(mut self) -> Result<(), SpillError> {
        self.sync()
    }
}
