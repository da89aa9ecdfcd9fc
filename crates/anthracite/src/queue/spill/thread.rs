//! The spill thread: one dedicated OS thread per destination owns its [`SpillLog`].
//!
//! Every disk operation of a destination happens here, so no tokio worker thread ever waits
//! on the disk. The queue talks to it through a channel, in queue order: `Append` (a batch
//! that overflowed, or any batch while the queue is in disk mode), `Replay` (the memory tier
//! has room for this much), `Ack` (this many replayed records left the queue: written, or
//! evicted by `drop_oldest`) and `Close` (shutdown: store what is left, sync, stop). The
//! thread also wakes every [`TICK`] to run the log's time-based fsync and ledger writes and to
//! retry held batches.
//!
//! When an append is refused (budget exhausted or disk full: `spill_full`; another I/O error:
//! `spill_io`) what happens depends on where the batch came from:
//!
//! - A batch *moved* from the memory tier when the queue entered disk mode is never dropped
//!   for lack of disk: it goes back to the memory tier, and so does every later batch of the
//!   same move. Records of that move already stored are read back first (they are older), so
//!   the memory tier ends up holding what it held before, in order, and the destination drains
//!   it as if there were no disk tier. The queue is told the disk refused
//!   (`State::spill_refused`) and stops moving memory batches until the log accepts again.
//!   So a full disk never loses more than a memory-only queue would.
//! - New data gets the `spill_fallback`: `drop_newest` drops that batch; `drop_oldest`
//!   discards the oldest unread records until a segment's worth of space is freed
//!   (`drop_oldest`), dropping the batch only if that frees nothing; `block` holds the batch
//!   (and everything after it, to keep FIFO) and retries after acknowledgements or every tick
//!   — the held batches fill the queue's hand-over buffer, which makes producers wait.
//!
//! Refusals are logged as an [`Episode`]: at most one line per interval, with counts, however
//! fast the log flaps between refusing and accepting.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::{AppendOutcome, SpillError, SpillLog};
use crate::batch::Batch;
use crate::episode::{Episode, Line};
use crate::queue::core::Core;
use crate::queue::policy::{DestinationDropReason, WhenFull};

/// How often the thread wakes when idle.
pub(in crate::queue) const TICK: Duration = Duration::from_millis(100);

/// A request from the queue.
pub(in crate::queue) enum Cmd {
    /// Store this batch behind everything else.
    Append(Staged),
    /// The memory tier has room for at most this much: replay it.
    Replay(Want),
    /// This many replayed records left the queue, written or evicted (oldest first).
    Ack(usize),
    /// Store what is held, sync, reply and stop.
    Close(tokio::sync::oneshot::Sender<()>),
}

/// A batch handed to the spill thread.
pub(in crate::queue) struct Staged {
    /// Queue position of its first datapoint.
    pub(in crate::queue) position: u64,
    pub(in crate::queue) batch: Batch,
    /// Moved from the memory tier when the queue entered disk mode: if the log refuses it, it
    /// goes back to memory instead of getting the fallback.
    pub(in crate::queue) moved: bool,
}

/// Room for replayed records in the memory tier.
#[derive(Clone, Copy, Debug)]
pub(in crate::queue) struct Want {
    pub(in crate::queue) points: usize,
    pub(in crate::queue) bytes: usize,
}

/// The thread's settings.
#[derive(Clone, Copy, Debug)]
pub(in crate::queue) struct WorkerConfig {
    pub(in crate::queue) fallback: WhenFull,
    pub(in crate::queue) replay_rate: Option<u64>,
}

struct Worker {
    log: SpillLog,
    core: Arc<Core>,
    config: WorkerConfig,
    held: VecDeque<(u64, Batch)>,
    want: Option<Want>,
    tokens: f64,
    refilled: Instant,
    /// The log refused data; logged at most once per interval.
    refusals: Episode,
    /// A moved batch was refused: the rest of its move goes back to memory too.
    returning: bool,
    seen_expired: u64,
    seen_abandoned: u64,
}

/// Runs the spill thread until `Close` or until the queue is dropped.
pub(in crate::queue) fn run(
    log: SpillLog,
    core: Arc<Core>,
    rx: Receiver<Cmd>,
    config: WorkerConfig,
) {
    let stats = log.stats();
    let mut w = Worker {
        log,
        core,
        config,
        held: VecDeque::new(),
        want: None,
        tokens: 0.0,
        refilled: Instant::now(),
        refusals: Episode::default(),
        returning: false,
        seen_expired: stats.expired_datapoints,
        seen_abandoned: stats.abandoned_datapoints,
    };
    w.tokens = w.burst();
    w.publish();
    loop {
        match rx.recv_timeout(w.next_wake()) {
            Ok(Cmd::Append(staged)) => w.append(staged),
            Ok(Cmd::Replay(want)) => w.want = Some(want),
            Ok(Cmd::Ack(n)) => {
                let _ = w.log.ack(n);
            }
            Ok(Cmd::Close(reply)) => {
                w.close();
                let _ = reply.send(());
                return;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                w.close();
                return;
            }
        }
        w.retry_held();
        w.serve_replay();
        let _ = w.log.tick();
        let line = w.refusals.tick(Instant::now());
        w.log_refusals(line, None);
        w.publish();
    }
}

impl Worker {
    fn burst(&self) -> f64 {
        self.config
            .replay_rate
            .map_or(f64::INFINITY, |r| r.max(1) as f64)
    }

    fn next_wake(&self) -> Duration {
        match (self.want, self.config.replay_rate) {
            (Some(_), Some(rate)) if self.tokens < 1.0 => {
                let missing = 1.0 - self.tokens;
                Duration::from_secs_f64(missing / rate.max(1) as f64)
                    .clamp(Duration::from_millis(1), TICK)
            }
            _ => TICK,
        }
    }

    fn append(&mut self, staged: Staged) {
        let Staged {
            position,
            batch,
            moved,
        } = staged;
        if moved {
            if self.returning || !self.held.is_empty() {
                self.core.return_staged(position, batch);
                return;
            }
            match self.try_store(position, batch) {
                Ok(()) => {}
                Err((batch, reason)) => {
                    // Older than anything new, and it fitted in memory before the move: it
                    // goes back there, after what the log already took of the same move.
                    self.read_back();
                    self.core.return_staged(position, batch);
                    self.returning = true;
                    // Nothing is lost: the refusal concerns no dropped datapoint.
                    let line = self.refusals.occurred(0, Instant::now());
                    self.log_refusals(line, Some(reason));
                }
            }
            return;
        }
        self.returning = false;
        if !self.held.is_empty() {
            self.held.push_back((position, batch));
            return;
        }
        if let Some(b) = self.store(position, batch) {
            self.held.push_back((position, b));
        }
    }

    fn retry_held(&mut self) {
        while let Some((position, b)) = self.held.pop_front() {
            if let Some(b) = self.store(position, b) {
                self.held.push_front((position, b));
                return;
            }
        }
    }

    /// Appends `batch`; on a refusal returns it with the reason.
    fn try_store(
        &mut self,
        position: u64,
        batch: Batch,
    ) -> Result<(), (Batch, DestinationDropReason)> {
        let (n, bytes) = (batch.len(), batch.size_bytes());
        let reason = match self.log.append(&batch) {
            Ok(AppendOutcome::Appended) => {
                let line = self.refusals.cleared(Instant::now());
                self.log_refusals(line, None);
                self.core.staged_done(position, n, bytes, None);
                return Ok(());
            }
            Ok(AppendOutcome::Full) => DestinationDropReason::SpillFull,
            Err(e) if e.is_disk_full() => DestinationDropReason::SpillFull,
            // I/O errors are logged per episode by the log itself.
            Err(SpillError::Io { .. }) => DestinationDropReason::SpillIo,
            Err(e) => {
                warn!(destination = self.core.stats.name(), error = %e, "cannot spill batch");
                DestinationDropReason::SpillIo
            }
        };
        self.core.note_spill_refused();
        Err((batch, reason))
    }

    /// Appends new data, applying the fallback when the log refuses it. Returns the batch
    /// when the fallback is `block` and it must be retried later.
    fn store(&mut self, position: u64, batch: Batch) -> Option<Batch> {
        let mut batch = batch;
        loop {
            let (n, bytes) = (batch.len(), batch.size_bytes());
            let reason = match self.try_store(position, batch) {
                Ok(()) => return None,
                Err((b, reason)) => {
                    batch = b;
                    reason
                }
            };
            let fallback = self.config.fallback;
            if fallback == WhenFull::DropOldest
                && reason == DestinationDropReason::SpillFull
                && self.evict_oldest()
            {
                continue;
            }
            let lost = if fallback == WhenFull::Block { 0 } else { n };
            let line = self.refusals.occurred(lost as u64, Instant::now());
            self.log_refusals(line, Some(reason));
            if fallback == WhenFull::Block {
                return Some(batch);
            }
            self.core.staged_done(position, n, bytes, Some(reason));
            return None;
        }
    }

    /// A moved batch was refused: reads back every record the log holds unread (all of them
    /// from the same move, since the queue moves only when its disk tier is empty) into the
    /// memory tier, ahead of the batches returned after them.
    fn read_back(&mut self) {
        let mut out = Vec::new();
        let (mut points, mut bytes) = (0, 0);
        while let Ok(Some(b)) = self.log.read_next() {
            points += b.len();
            bytes += b.size_bytes();
            out.push(b);
        }
        self.account_losses();
        if !out.is_empty() {
            self.core
                .stats
                .add_replayed(out.len() as u64, points as u64, bytes as u64);
            self.core.deliver_replayed(out);
        }
    }

    /// Logs a refusal episode's line (`reason`: the latest refusal's).
    fn log_refusals(&self, line: Option<Line>, reason: Option<DestinationDropReason>) {
        let destination = self.core.stats.name();
        let reason = reason.map_or("", DestinationDropReason::as_str);
        let fallback = self.config.fallback.as_str();
        match line {
            Some(Line::Started(_)) => warn!(
                destination,
                reason,
                fallback,
                "spill log cannot take data: batches waiting in memory stay there, the fallback applies to new data"
            ),
            Some(Line::Ongoing(c)) => warn!(
                destination,
                reason,
                fallback,
                refusals = c.occurrences,
                dropped_datapoints = c.amount,
                over = ?c.over,
                "spill log still refusing data"
            ),
            Some(Line::Ended(c)) => info!(
                destination,
                refusals = c.occurrences,
                dropped_datapoints = c.amount,
                over = ?c.over,
                "spill log accepting again"
            ),
            None => {}
        }
    }

    /// Discards the oldest unread records until disk space is freed (at most a segment's
    /// worth). True if space was freed.
    fn evict_oldest(&mut self) -> bool {
        let start = self.log.stats();
        let limit = self.log.config().segment_bytes;
        loop {
            match self.log.discard_next() {
                Ok(Some(points)) => {
                    self.core
                        .disk_lost(points, DestinationDropReason::DropOldest);
                    self.account_losses();
                    let now = self.log.stats();
                    if now.disk_bytes < start.disk_bytes {
                        return true;
                    }
                    if start.queued_bytes.saturating_sub(now.queued_bytes) > limit {
                        return false;
                    }
                }
                Ok(None) | Err(_) => {
                    self.account_losses();
                    return self.log.stats().disk_bytes < start.disk_bytes;
                }
            }
        }
    }

    /// Counts records that left the log without being delivered (expired, corrupt).
    fn account_losses(&mut self) {
        let st = self.log.stats();
        let expired = st.expired_datapoints - self.seen_expired;
        let abandoned = st.abandoned_datapoints - self.seen_abandoned;
        self.seen_expired = st.expired_datapoints;
        self.seen_abandoned = st.abandoned_datapoints;
        self.core
            .disk_lost(expired, DestinationDropReason::SpillExpired);
        self.core
            .disk_lost(abandoned, DestinationDropReason::SpillCorrupt);
        if abandoned > 0 {
            self.core.stats.add_spill_damage(1, 0);
        }
    }

    fn serve_replay(&mut self) {
        let Some(want) = self.want else {
            return;
        };
        if let Some(rate) = self.config.replay_rate {
            let now = Instant::now();
            let elapsed = now.duration_since(self.refilled).as_secs_f64();
            self.refilled = now;
            self.tokens = (self.tokens + elapsed * rate as f64).min(self.burst());
        }
        let mut out = Vec::new();
        let (mut points, mut bytes) = (0, 0);
        while points < want.points && bytes < want.bytes && self.tokens >= 1.0 {
            match self.log.read_next() {
                Ok(Some(b)) => {
                    points += b.len();
                    bytes += b.size_bytes();
                    if self.config.replay_rate.is_some() {
                        self.tokens -= b.len() as f64;
                    }
                    out.push(b);
                }
                Ok(None) | Err(_) => break,
            }
        }
        self.account_losses();
        if out.is_empty() {
            let mut s = self.core.lock();
            if s.disk_points == 0 {
                s.replay_requested = false;
                self.want = None;
            }
            return;
        }
        self.core
            .stats
            .add_replayed(out.len() as u64, points as u64, bytes as u64);
        self.want = None;
        self.core.deliver_replayed(out);
    }

    fn close(&mut self) {
        while let Some((position, b)) = self.held.pop_front() {
            let (n, bytes) = (b.len(), b.size_bytes());
            let reason = match self.log.append(&b) {
                Ok(AppendOutcome::Appended) => None,
                Ok(AppendOutcome::Full) => Some(DestinationDropReason::SpillFull),
                Err(_) => Some(DestinationDropReason::SpillIo),
            };
            self.core.staged_done(position, n, bytes, reason);
        }
        if let Err(e) = self.log.sync() {
            warn!(destination = self.core.stats.name(), error = %e, "spill log sync at shutdown failed");
        }
        self.publish();
    }

    fn publish(&self) {
        let st = self.log.stats();
        self.core.set_disk_bytes(st.disk_bytes);
        self.core.stats.set_spill_gauges(
            st.disk_bytes,
            st.oldest_record_age.map_or(0.0, |d| d.as_secs_f64()),
            st.io_errors,
        );
    }
}
