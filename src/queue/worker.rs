//! The spill thread: one dedicated OS thread per destination owns its [`SpillLog`].
//!
//! Every disk operation of a destination happens here, so no tokio worker thread ever waits
//! on the disk. The queue talks to it through a channel, in queue order: `Append` (a batch
//! that overflowed, or any batch while the queue is in disk mode), `Replay` (the memory tier
//! has room for this much), `Ack` (the destination took this many replayed records) and
//! `Close` (shutdown: store what is left, sync, stop). The thread also wakes every
//! [`TICK`] to run the log's time-based fsync and ledger writes and to retry held batches.
//!
//! When an append is refused (budget exhausted, or an I/O error) the `spill_fallback` applies:
//! `drop_newest` drops that batch (`spill_full` / `spill_io`); `drop_oldest` discards the
//! oldest unread records until a segment's worth of space is freed (`drop_oldest`), dropping
//! the batch only if that frees nothing; `block` holds the batch (and everything after it, to
//! keep FIFO) and retries after acknowledgements or every tick — the held batches fill the
//! queue's hand-over buffer, which makes producers wait. Each episode is logged once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::core::Core;
use super::policy::{DestinationDropReason, WhenFull};
use super::spill::{AppendOutcome, SpillError, SpillLog};
use crate::batch::Batch;

/// How often the thread wakes when idle.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// A request from the queue.
pub(super) enum Cmd {
    /// Store this batch, whose first datapoint has this queue position, behind everything
    /// else.
    Append(u64, Batch),
    /// The memory tier has room for at most this much: replay it.
    Replay(Want),
    /// The destination took this many replayed records (oldest first).
    Ack(usize),
    /// Store what is held, sync, reply and stop.
    Close(tokio::sync::oneshot::Sender<()>),
}

/// Room for replayed records in the memory tier.
#[derive(Clone, Copy, Debug)]
pub(super) struct Want {
    pub(super) points: usize,
    pub(super) bytes: usize,
}

/// The thread's settings.
#[derive(Clone, Copy, Debug)]
pub(super) struct WorkerConfig {
    pub(super) fallback: WhenFull,
    pub(super) replay_rate: Option<u64>,
}

struct Worker {
    log: SpillLog,
    core: Arc<Core>,
    config: WorkerConfig,
    held: VecDeque<(u64, Batch)>,
    want: Option<Want>,
    tokens: f64,
    refilled: Instant,
    full_episode: bool,
    seen_expired: u64,
    seen_abandoned: u64,
}

/// Runs the spill thread until `Close` or until the queue is dropped.
pub(super) fn run(log: SpillLog, core: Arc<Core>, rx: Receiver<Cmd>, config: WorkerConfig) {
    let stats = log.stats();
    let mut w = Worker {
        log,
        core,
        config,
        held: VecDeque::new(),
        want: None,
        tokens: 0.0,
        refilled: Instant::now(),
        full_episode: false,
        seen_expired: stats.expired_datapoints,
        seen_abandoned: stats.abandoned_datapoints,
    };
    w.tokens = w.burst();
    w.publish();
    loop {
        match rx.recv_timeout(w.next_wake()) {
            Ok(Cmd::Append(position, b)) => w.append(position, b),
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

    fn append(&mut self, position: u64, batch: Batch) {
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

    /// Appends `batch`, applying the fallback when the log refuses it. Returns the batch when
    /// the fallback is `block` and it must be retried later.
    fn store(&mut self, position: u64, batch: Batch) -> Option<Batch> {
        let (n, bytes) = (batch.len(), batch.size_bytes());
        loop {
            let reason = match self.log.append(&batch) {
                Ok(AppendOutcome::Appended) => {
                    if self.full_episode {
                        self.full_episode = false;
                        info!(
                            destination = self.core.stats.name(),
                            "spill log accepting again"
                        );
                    }
                    self.core.stats.add_spilled(n as u64, bytes as u64);
                    self.core.staged_done(position, n, bytes, None);
                    return None;
                }
                Ok(AppendOutcome::Full) => DestinationDropReason::SpillFull,
                // I/O errors are logged once per episode by the log itself.
                Err(SpillError::Io { .. }) => DestinationDropReason::SpillIo,
                Err(e) => {
                    warn!(destination = self.core.stats.name(), error = %e, "cannot spill batch");
                    DestinationDropReason::SpillIo
                }
            };
            if reason == DestinationDropReason::SpillFull && !self.full_episode {
                self.full_episode = true;
                warn!(
                    destination = self.core.stats.name(),
                    fallback = self.config.fallback.as_str(),
                    "spill budget exhausted; applying the fallback (further occurrences not logged)"
                );
            }
            let fallback = self.config.fallback;
            if fallback == WhenFull::Block {
                return Some(batch);
            }
            if fallback == WhenFull::DropOldest
                && reason == DestinationDropReason::SpillFull
                && self.evict_oldest()
            {
                continue;
            }
            self.core.staged_done(position, n, bytes, Some(reason));
            return None;
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
            if reason.is_none() {
                self.core.stats.add_spilled(n as u64, bytes as u64);
            }
            self.core.staged_done(position, n, bytes, reason);
        }
        if let Err(e) = self.log.sync() {
            warn!(destination = self.core.stats.name(), error = %e, "spill log sync at shutdown failed");
        }
        self.publish();
    }

    fn publish(&self) {
        let st = self.log.stats();
        self.core.stats.set_spill_gauges(
            st.disk_bytes,
            st.oldest_record_age.map_or(0.0, |d| d.as_secs_f64()),
            st.io_errors,
        );
    }
}
