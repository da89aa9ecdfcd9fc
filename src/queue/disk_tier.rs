//! The disk tier's side of a [`DestinationQueue`]: opening the spill log and its thread,
//! handing batches over in chunks, asking for replay, and the shutdown spill. The design is
//! described in [`super::memory`]; the thread itself is `queue::worker`.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::DestinationDropReason;
use super::memory::{Core, DestinationQueue, Entry, QueueLimits, State};
use super::spill::{SpillConfig, SpillError, SpillLog};
use super::worker::{self, Cmd};
use crate::batch::Batch;
use crate::telemetry::DestinationStats;

/// The disk tier of one destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpillSettings {
    /// The destination's own directory (created if needed).
    pub dir: PathBuf,
    /// The log's limits and durability.
    pub log: SpillConfig,
    /// Most datapoints per second replayed from disk (`None`: unlimited).
    pub replay_rate: Option<u64>,
}

/// The spill thread's end of a queue.
#[derive(Debug)]
pub(super) struct SpillHandle {
    pub(super) tx: mpsc::Sender<Cmd>,
    pub(super) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub(super) chunk_points: usize,
    pub(super) chunk_bytes: usize,
    pub(super) staging_bytes: usize,
}

impl Core {
    /// The spill thread stored (`dropped == None`) or dropped a staged batch.
    pub(super) fn staged_done(
        &self,
        points: usize,
        bytes: usize,
        dropped: Option<DestinationDropReason>,
    ) {
        let mut s = self.lock();
        s.staged_bytes = s.staged_bytes.saturating_sub(bytes);
        if dropped.is_some() {
            s.disk_points = s.disk_points.saturating_sub(points as u64);
        }
        self.publish(&s);
        drop(s);
        if let Some(reason) = dropped {
            self.stats.add_dropped(reason, points as u64);
        }
        self.room.notify_waiters();
        self.ready.notify_one();
    }

    /// Records left the disk tier without reaching memory (expired, corrupt, evicted).
    pub(super) fn disk_lost(&self, points: u64, reason: DestinationDropReason) {
        if points == 0 {
            return;
        }
        let mut s = self.lock();
        s.disk_points = s.disk_points.saturating_sub(points);
        self.publish(&s);
        drop(s);
        self.stats.add_dropped(reason, points);
        self.ready.notify_one();
    }

    /// Replayed records join the memory tier; ends the outstanding replay request.
    pub(super) fn deliver_replayed(&self, batches: Vec<Batch>) {
        let mut s = self.lock();
        for b in batches {
            s.disk_points = s.disk_points.saturating_sub(b.len() as u64);
            s.datapoints += b.len();
            s.bytes += b.size_bytes();
            s.batches.push_back(Entry {
                batch: b,
                from_disk: true,
            });
        }
        s.replay_requested = false;
        self.publish(&s);
        drop(s);
        self.ready.notify_one();
    }
}

impl DestinationQueue {
    /// A queue with a disk tier: opens (and recovers) the spill log in `spill.dir` and starts
    /// its thread. Datapoints recovered from a previous run are counted as routed and queued
    /// (disk), and are replayed before anything pushed now.
    pub fn with_spill(
        limits: QueueLimits,
        stats: Arc<DestinationStats>,
        spill: SpillSettings,
    ) -> Result<Self, SpillError> {
        let (log, report) = SpillLog::open(&spill.dir, spill.log.clone())?;
        let mut queue = Self::new(limits, stats);
        let chunk_points = (limits.max_datapoints / 8).max(1);
        let seg_room = (spill.log.max_payload() / 2) as usize;
        let chunk_bytes = (limits.max_bytes / 8).min(seg_room).max(1);
        let core = queue.core.clone();
        if report.datapoints > 0 {
            core.stats.add_routed(report.datapoints);
            core.stats.add_recovered(report.datapoints);
        }
        if report.damaged_segments > 0 {
            core.stats
                .add_spill_damage(report.damaged_segments, report.abandoned_bytes);
        }
        {
            let mut s = core.lock();
            s.disk_points = report.datapoints;
            core.publish(&s);
        }
        let (tx, rx) = mpsc::channel();
        let name = format!("spill-{}", core.stats.name());
        let config = worker::WorkerConfig {
            fallback: limits.spill_fallback,
            replay_rate: spill.replay_rate,
        };
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || worker::run(log, core, rx, config))
            .map_err(|source| SpillError::Io {
                op: super::spill::SpillOp::Open,
                source,
            })?;
        queue.spill = Some(SpillHandle {
            tx,
            thread: Mutex::new(Some(thread)),
            chunk_points,
            chunk_bytes,
            staging_bytes: (limits.max_bytes / 8).max(chunk_bytes),
        });
        Ok(queue)
    }

    /// Hands `batch` to the spill thread in chunks (under the lock, so the channel order is
    /// the queue order). Returns the datapoints handed over (fewer only if the thread is gone).
    pub(super) fn stage(&self, s: &mut State, sp: &SpillHandle, mut batch: Batch) -> usize {
        let mut stored = 0;
        while !batch.is_empty() {
            let chunk = self.chunk_len(sp, &batch);
            let rest = batch.split_off(chunk);
            let (n, bytes) = (batch.len(), batch.size_bytes());
            if sp.tx.send(Cmd::Append(batch)).is_err() {
                break;
            }
            stored += n;
            s.disk_points += n as u64;
            s.staged_bytes += bytes;
            batch = rest;
        }
        stored
    }

    /// How many leading datapoints of `batch` make one chunk for the disk tier.
    pub(super) fn chunk_len(&self, sp: &SpillHandle, batch: &Batch) -> usize {
        if batch.len() <= sp.chunk_points && batch.size_bytes() <= sp.chunk_bytes {
            return batch.len();
        }
        let mut bytes = 0;
        let mut n = 0;
        for dp in batch.iter().take(sp.chunk_points) {
            let b = dp.name.len() + crate::batch::POINT_OVERHEAD;
            if n > 0 && bytes + b > sp.chunk_bytes {
                break;
            }
            bytes += b;
            n += 1;
        }
        n.max(1)
    }

    /// Asks the spill thread for more records when the memory tier has room for them.
    pub(super) fn maybe_replay(&self, s: &mut State) {
        let Some(sp) = self.spill.as_ref() else {
            return;
        };
        if s.disk_points == 0 || s.replay_requested {
            return;
        }
        let limits = &self.core.limits;
        let used_points = s.datapoints + s.in_flight;
        let used_bytes = s.bytes + s.in_flight_bytes;
        if used_points + 2 * sp.chunk_points > limits.max_datapoints
            || used_bytes + 2 * sp.chunk_bytes > limits.max_bytes
        {
            return;
        }
        let want = worker::Want {
            points: limits.max_datapoints - used_points - sp.chunk_points,
            bytes: limits.max_bytes - used_bytes - sp.chunk_bytes,
        };
        if sp.tx.send(Cmd::Replay(want)).is_ok() {
            s.replay_requested = true;
        }
    }

    /// Closes the queue, writes everything still in memory to the spill log, syncs it and
    /// stops the spill thread. Returns the datapoints left on disk for the next run, or `None`
    /// for a memory-only queue. Call after the destination task has stopped.
    pub async fn spill_for_shutdown(&self) -> Option<u64> {
        let sp = self.spill.as_ref()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut s = self.lock();
            s.closed = true;
            let entries: Vec<Entry> = s.batches.drain(..).collect();
            s.datapoints = 0;
            s.bytes = 0;
            // Anything still tagged in flight was never handed back: treat it like waiting.
            for t in std::mem::take(&mut s.tags) {
                s.in_flight = s.in_flight.saturating_sub(t.points);
                s.in_flight_bytes = s.in_flight_bytes.saturating_sub(t.bytes);
                if t.from_disk {
                    s.disk_points += t.points as u64;
                } else {
                    self.core
                        .stats
                        .add_dropped(DestinationDropReason::Shutdown, t.points as u64);
                }
            }
            let mut lost = 0;
            for e in entries {
                if e.from_disk {
                    // Still in the log, unacknowledged: the next run replays it.
                    s.disk_points += e.batch.len() as u64;
                } else {
                    let n = e.batch.len();
                    lost += n - self.stage(&mut s, sp, e.batch);
                }
            }
            if lost > 0 {
                self.core
                    .stats
                    .add_dropped(DestinationDropReason::SpillIo, lost as u64);
            }
            let _ = sp.tx.send(Cmd::Close(tx));
            self.core.publish(&s);
        }
        let _ = rx.await;
        let handle = sp.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
        Some(self.lock().disk_points)
    }

    /// Datapoints in the disk tier (handed to the spill thread, not yet replayed).
    pub fn queued_disk(&self) -> u64 {
        self.lock().disk_points
    }
}
