//! The disk tier of a queue: the spill log's thread, the hand-over of batches in chunks, replay
//! requests, and the shutdown spill. The design (when a queue spills, FIFO across tiers,
//! replay, the hand-over buffer) is described in the [queue module](super); the thread is
//! `queue::worker`.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::thread::{self, Cmd, Staged};
use super::{SpillConfig, SpillError, SpillLog, SpillOp};
use crate::batch::{Batch, POINT_OVERHEAD};
use crate::queue::core::{Core, Entry, QueueLimits, Run, State};
use crate::queue::policy::DestinationDropReason;

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

/// The queue's end of its spill thread.
#[derive(Debug)]
pub(in crate::queue) struct DiskTier {
    tx: mpsc::Sender<Cmd>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    chunk_points: usize,
    chunk_bytes: usize,
    /// Most bytes handed over and not yet stored (the hand-over buffer).
    pub(in crate::queue) staging_bytes: usize,
    /// The spill log's byte budget (`max_bytes`).
    budget: u64,
}

impl DiskTier {
    /// Opens (and recovers) the spill log in `spill.dir` and starts its thread. Datapoints
    /// recovered from a previous run are counted as routed and queued (disk), at the first
    /// positions, so they are replayed before anything pushed now.
    pub(in crate::queue) fn open(
        core: &Arc<Core>,
        limits: QueueLimits,
        spill: SpillSettings,
    ) -> Result<Self, SpillError> {
        let (log, report) = SpillLog::open(&spill.dir, spill.log.clone())?;
        let chunk_points = (limits.max_datapoints / 8).max(1);
        let seg_room = (spill.log.max_payload() / 2) as usize;
        let chunk_bytes = (limits.max_bytes / 8).min(seg_room).max(1);
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
            if report.datapoints > 0 {
                let position = s.take_positions(report.datapoints as usize);
                s.disk_runs.push_back(Run {
                    position,
                    points: report.datapoints,
                });
            }
            core.publish(&s);
        }
        let (tx, rx) = mpsc::channel();
        let name = format!("spill-{}", core.stats.name());
        let config = thread::WorkerConfig {
            fallback: limits.spill_fallback,
            replay_rate: spill.replay_rate,
        };
        let thread_core = core.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || thread::run(log, thread_core, rx, config))
            .map_err(|source| SpillError::Io {
                op: SpillOp::Open,
                source,
            })?;
        Ok(Self {
            tx,
            thread: Mutex::new(Some(thread)),
            chunk_points,
            chunk_bytes,
            staging_bytes: (limits.max_bytes / 8).max(chunk_bytes),
            budget: spill.log.max_bytes,
        })
    }

    /// True when the log's budget looks big enough for `bytes` more (measured like the memory
    /// bound) on top of what is already on disk or on its way there. An estimate with a
    /// margin for record and segment headers: a wrong "yes" costs only a round trip (moved
    /// batches the log refuses come back to memory).
    pub(in crate::queue) fn can_take(&self, core: &Core, s: &State, bytes: usize) -> bool {
        let bytes = bytes as u64;
        let needed = bytes + bytes / 16 + 4096 + s.staged_bytes as u64;
        core.disk_bytes().saturating_add(needed) <= self.budget
    }

    /// Hands `batch`, whose first datapoint has `position`, to the spill thread in chunks
    /// (under the lock, so the channel order is the queue order). `moved`: the batch comes
    /// from the memory tier (see `queue::worker`). Returns the datapoints handed over (fewer
    /// only if the thread is gone). The hand-over buffer counts what the datapoints hold
    /// (`size_bytes`), so a batch gives back the room it did not fill first.
    pub(in crate::queue) fn stage(
        &self,
        s: &mut State,
        mut batch: Batch,
        mut position: u64,
        moved: bool,
    ) -> usize {
        batch.shrink_to_fit();
        let mut stored = 0;
        while !batch.is_empty() {
            let chunk = self.chunk_len(&batch);
            let rest = batch.split_off(chunk);
            let (n, bytes) = (batch.len(), batch.size_bytes());
            let staged = Staged {
                position,
                batch,
                moved,
            };
            if self.tx.send(Cmd::Append(staged)).is_err() {
                break;
            }
            stored += n;
            s.disk_points += n as u64;
            s.disk_runs.push_back(Run {
                position,
                points: n as u64,
            });
            s.staged_bytes += bytes;
            position += n as u64;
            batch = rest;
        }
        stored
    }

    /// How many leading datapoints of `batch` make one chunk for the disk tier.
    fn chunk_len(&self, batch: &Batch) -> usize {
        if batch.len() <= self.chunk_points && batch.size_bytes() <= self.chunk_bytes {
            return batch.len();
        }
        let mut bytes = 0;
        let mut n = 0;
        for dp in batch.iter().take(self.chunk_points) {
            let b = dp.name.len() + POINT_OVERHEAD;
            if n > 0 && bytes + b > self.chunk_bytes {
                break;
            }
            bytes += b;
            n += 1;
        }
        n.max(1)
    }

    /// Asks the spill thread for more records when the memory tier has room for them.
    pub(in crate::queue) fn maybe_replay(&self, limits: &QueueLimits, s: &mut State) {
        if s.disk_points == 0 || s.replay_requested {
            return;
        }
        let used_points = s.datapoints + s.in_flight;
        let used_bytes = s.bytes + s.in_flight_bytes;
        if used_points + 2 * self.chunk_points > limits.max_datapoints
            || used_bytes + 2 * self.chunk_bytes > limits.max_bytes
        {
            return;
        }
        let want = thread::Want {
            points: limits.max_datapoints - used_points - self.chunk_points,
            bytes: limits.max_bytes - used_bytes - self.chunk_bytes,
        };
        if self.tx.send(Cmd::Replay(want)).is_ok() {
            s.replay_requested = true;
        }
    }

    /// `records` replayed records left the queue (written, or evicted by `drop_oldest`):
    /// acknowledge them in the log.
    pub(in crate::queue) fn ack(&self, records: usize) {
        if records > 0 {
            let _ = self.tx.send(Cmd::Ack(records));
        }
    }

    /// Writes everything still in memory to the spill log, syncs it and stops the spill
    /// thread; returns the datapoints left on disk for the next run. The queue must be
    /// closed and its destination task stopped.
    pub(in crate::queue) async fn shutdown(&self, core: &Core) -> u64 {
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut s = core.lock();
            let entries: Vec<Entry> = crate::queue::memory::drain_waiting(&mut s);
            // Anything still tagged in flight was never handed back: treat it like waiting.
            for t in std::mem::take(&mut s.tags) {
                s.in_flight = s.in_flight.saturating_sub(t.points);
                s.in_flight_bytes = s.in_flight_bytes.saturating_sub(t.bytes);
                if t.from_disk {
                    s.disk_points += t.points as u64;
                } else {
                    core.stats
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
                    lost += n - self.stage(&mut s, e.batch, e.position, false);
                }
            }
            // Records in `disk_left` were counted as dropped but stay unacknowledged behind
            // the older ones kept above: the log acknowledges only its oldest records, so the
            // next run replays them too.
            if lost > 0 {
                core.stats
                    .add_dropped(DestinationDropReason::SpillIo, lost as u64);
            }
            let _ = self.tx.send(Cmd::Close(tx));
            core.publish(&s);
        }
        let _ = rx.await;
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
        core.lock().disk_points
    }
}
