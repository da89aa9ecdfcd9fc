//! The queue's core: its state under one lock, and the accounting every tier shares.
//!
//! `State` is everything a destination's queue holds: the memory tier's batches (waiting and
//! in flight), what the disk tier holds (as datapoint counts and positions, the records
//! themselves live in the spill log), and the hand-over buffer between them. `Core` is the
//! part shared by producers, the destination task and the spill thread: the lock, the two
//! wake-ups, the limits and the destination's books.
//!
//! ## Positions
//!
//! Every accepted datapoint gets a position: its index in the order the queue accepted
//! datapoints (datapoints recovered from a previous run's spill log come first). Memory
//! batches, in-flight tags and disk runs carry the position of their first datapoint. The
//! queue is FIFO across its tiers, so the smallest position still held —
//! `State::oldest_position` — tells how far the destination has got: every datapoint before
//! it was sent or dropped. Delivery receipts wait on it (`Core::settled`).
//!
//! This module imports nothing above the queue: the memory tier, the disk tier and the spill
//! thread all work on these types.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::destination_stats::DestinationStats;
use super::policy::{DestinationDropReason, WhenFull};
use crate::batch::Batch;

/// Bounds and policy of one destination's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most datapoints in the memory tier (waiting plus in flight).
    pub max_datapoints: usize,
    /// Most bytes in the memory tier: the heap its batches hold ([`Batch::heap_bytes`]:
    /// names plus fixed per-datapoint overhead, plus room a batch did not fill).
    pub max_bytes: usize,
    /// What to do when a push does not fit.
    pub when_full: WhenFull,
    /// With [`WhenFull::Spill`]: what to do when the spill log is full or failing
    /// (`drop_newest`, `drop_oldest` or `block`).
    pub spill_fallback: WhenFull,
    /// While the destination is connected and the memory tier is full, producers that can
    /// wait (TCP receivers, embedders, Kinesis) are held back for room; `when_full` applies
    /// to what does not fit (spill, or a drop) only once the destination has stayed behind
    /// its input for this long: over one such window its writes waited on the peer for at
    /// least half of it. A destination whose writes complete as soon as
    /// they are issued is keeping up, and when the relay itself is the bottleneck (CPU-bound
    /// routing) its producers wait however long that lasts. Once judged behind, pushes that do
    /// not fit get the policy at once until the tier drains below half (the episode's end).
    /// A destination that is not connected, or whose connection failed or timed out a write in
    /// the last minute, gets the policy at once; so does a batch larger than the whole tier.
    /// UDP never waits. Zero applies the policy at once (`block` waits regardless).
    pub full_wait: Duration,
}

impl Default for QueueLimits {
    fn default() -> Self {
        Self {
            max_datapoints: 1_000_000,
            max_bytes: DEFAULT_MAX_BYTES,
            when_full: WhenFull::DropNewest,
            spill_fallback: WhenFull::DropNewest,
            full_wait: DEFAULT_FULL_WAIT,
        }
    }
}

/// [`QueueLimits::max_bytes`] unless configured (`destinations.queue.max_bytes`): with the
/// [`full_wait`](QueueLimits::full_wait) a burst to a connected destination is held back
/// rather than buffered, so the memory tier need not hold one; 16 MiB is about 170,000–250,000
/// datapoints of 40-byte names, depending on how full their batches are (carbon-relay's
/// default queue holds 10,000).
pub(crate) const DEFAULT_MAX_BYTES: usize = 16 << 20;

/// [`QueueLimits::full_wait`] unless configured (`destinations.queue.full_wait_ms`).
pub(crate) const DEFAULT_FULL_WAIT: Duration = Duration::from_secs(2);

impl QueueLimits {
    /// True when what `s` holds in memory (waiting plus in flight) is below half of both
    /// bounds: a [`full_wait`](Self::full_wait) episode is over.
    pub(super) fn below_half(&self, s: &State) -> bool {
        (s.datapoints + s.in_flight) * 2 < self.max_datapoints
            && (s.bytes + s.in_flight_bytes) * 2 < self.max_bytes
    }
}

/// What happened to a pushed batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushOutcome {
    /// Datapoints of the batch queued (in memory or handed to the spill log).
    pub accepted: usize,
    /// Datapoints of the batch dropped by the full policy (or because the queue is closed).
    pub dropped: usize,
    /// Older queued datapoints evicted to make room (`drop_oldest`).
    pub evicted: usize,
    /// The producer waited for room (policy `block`, back-pressure, or a full hand-over
    /// buffer to the spill log).
    pub waited: bool,
    /// The position after the batch's last accepted datapoint: once the queue's oldest
    /// position reaches it, everything accepted up to this push has left the queue.
    pub mark: u64,
}

/// A batch in the memory tier: the batch, whether it is a record replayed from the spill log,
/// and the position of its first datapoint.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) batch: Batch,
    pub(super) from_disk: bool,
    pub(super) position: u64,
}

/// One in-flight batch, in pop order.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tag {
    pub(super) points: usize,
    pub(super) bytes: usize,
    pub(super) from_disk: bool,
    pub(super) position: u64,
}

/// Consecutive positions held by the disk tier (one chunk handed to the spill thread, or
/// everything recovered at startup).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) position: u64,
    pub(super) points: u64,
}

/// One window of a [full wait](QueueLimits::full_wait) episode: when it began, and the
/// destination's books then, to judge at its end whether the destination kept up.
#[derive(Clone, Copy, Debug)]
pub(super) struct FullWindow {
    pub(super) start: Instant,
    /// [`DestinationStats::peer_waited`] at `start`.
    pub(super) peer_waited: Duration,
}

/// Everything a queue holds, under its lock.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Memory tier: waiting batches, oldest first.
    pub(super) batches: VecDeque<Entry>,
    /// Datapoints waiting in memory.
    pub(super) datapoints: usize,
    /// Bytes waiting in memory (the heap the batches hold, [`Batch::heap_bytes`]).
    pub(super) bytes: usize,
    /// Datapoints popped and not yet acknowledged or handed back.
    pub(super) in_flight: usize,
    /// Bytes of those.
    pub(super) in_flight_bytes: usize,
    /// One tag per in-flight batch, in pop order.
    pub(super) tags: VecDeque<Tag>,
    /// Positions of records replayed from the spill log that left the memory tier before an
    /// older replayed record (evicted by `drop_oldest` while it was in flight), oldest first.
    /// The log acknowledges only its oldest records, so these wait for the older ones
    /// (`memory::disk_records_done`).
    pub(super) disk_left: VecDeque<u64>,
    /// Datapoints handed to the spill thread and not yet back in memory (in its channel, held
    /// by the `block` fallback, or stored in the log).
    pub(super) disk_points: u64,
    /// Positions of the disk tier's datapoints, oldest first.
    pub(super) disk_runs: VecDeque<Run>,
    /// Bytes of batches handed to the spill thread and not yet stored or dropped.
    pub(super) staged_bytes: usize,
    /// A replay request is outstanding.
    pub(super) replay_requested: bool,
    /// The spill log refused data and has not accepted any since: memory batches are not
    /// moved to disk (they would only come back), only new overflow is offered to the log.
    pub(super) spill_refused: bool,
    /// The position the next accepted datapoint gets.
    pub(super) next_position: u64,
    /// The current window of the [`full_wait`](QueueLimits::full_wait) episode: `None` until
    /// the memory tier is found full, and again once it has drained below half.
    pub(super) full_window: Option<FullWindow>,
    /// The destination was judged behind its input in the current
    /// [`full_wait`](QueueLimits::full_wait) episode (from the tier being found full until it
    /// drains below half): pushes that do not fit get the policy at once.
    pub(super) behind: bool,
    /// No more pushes are taken.
    pub(super) closed: bool,
    /// Shut down: what is left stays where it is (spill log) or was counted as dropped.
    pub(super) stopped: bool,
}

impl State {
    /// Takes `n` consecutive positions for newly accepted datapoints; returns the first.
    pub(super) fn take_positions(&mut self, n: usize) -> u64 {
        let first = self.next_position;
        self.next_position += n as u64;
        first
    }

    /// The smallest position still queued (in flight, waiting, or on disk); `next_position`
    /// when the queue is empty. Each of the three is in position order.
    pub(super) fn oldest_position(&self) -> u64 {
        [
            self.tags.front().map(|t| t.position),
            self.batches.front().map(|e| e.position),
            self.disk_runs.front().map(|r| r.position),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(self.next_position)
    }

    /// The disk tier gave up its `points` oldest datapoints (replayed into memory, or lost);
    /// returns the position of the first of them.
    pub(super) fn disk_front_consumed(&mut self, mut points: u64) -> u64 {
        let first = self
            .disk_runs
            .front()
            .map_or(self.next_position, |r| r.position);
        while points > 0 {
            let Some(run) = self.disk_runs.front_mut() else {
                break;
            };
            let take = points.min(run.points);
            run.position += take;
            run.points -= take;
            points -= take;
            if run.points == 0 {
                self.disk_runs.pop_front();
            }
        }
        first
    }

    /// A staged chunk never reached the log (dropped by the spill thread): forget its run.
    pub(super) fn disk_run_dropped(&mut self, position: u64) {
        if let Some(i) = self.disk_runs.iter().rposition(|r| r.position == position) {
            self.disk_runs.remove(i);
        }
    }
}

/// The part of a queue shared by producers, the destination task and the spill thread.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) state: Mutex<State>,
    /// Wakes the consumer: a push, requeue, replay or close.
    pub(super) ready: Notify,
    /// Wakes blocked producers. Room made (written, moved to disk) wakes one
    /// ([`room_made`](Core::room_made)), and each that then gets its batch in wakes the next,
    /// so room for a few batches wakes a few producers, not every one of a thousand waiting
    /// connections; a change of what applies (connection lost, close) wakes them all.
    pub(super) room: Notify,
    /// Wakes delivery receipts: the oldest position may have moved, or the queue stopped.
    pub(super) settled: Notify,
    pub(super) limits: QueueLimits,
    pub(super) stats: Arc<DestinationStats>,
    /// Bytes of the spill log's segment files, as its thread last saw them.
    disk_bytes: AtomicU64,
}

impl Core {
    /// Room was made in the memory tier: wakes the producer waiting the longest. A producer
    /// whose push then completes wakes the next one (see
    /// [`DestinationQueue::push_with`](super::DestinationQueue::push_with)); one that still
    /// does not fit waits again without waking anyone, until room is made again.
    pub(super) fn room_made(&self) {
        self.room.notify_one();
    }

    pub(super) fn new(limits: QueueLimits, stats: Arc<DestinationStats>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            room: Notify::new(),
            settled: Notify::new(),
            limits,
            stats,
            disk_bytes: AtomicU64::new(0),
        }
    }

    /// The spill thread's latest figure of the log's bytes on disk.
    pub(super) fn set_disk_bytes(&self, bytes: u64) {
        self.disk_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Bytes of the spill log's segment files, as its thread last published them.
    pub(super) fn disk_bytes(&self) -> u64 {
        self.disk_bytes.load(Ordering::Relaxed)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the queue inconsistent (every update is
        // a few integer adds), so a poisoned lock is still safe to use.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the depth gauges (under the lock, once per batch).
    pub(super) fn publish(&self, s: &State) {
        self.stats.set_depth(s.datapoints + s.in_flight, s.bytes);
        self.stats
            .set_tiers(s.bytes + s.in_flight_bytes, s.disk_points);
    }

    /// Counts `n` datapoints of a batch as dropped with `reason`.
    pub(super) fn drop_counted(
        &self,
        n: usize,
        reason: DestinationDropReason,
        out: &mut PushOutcome,
    ) {
        if n > 0 {
            self.stats.add_dropped(reason, n as u64);
            out.dropped += n;
        }
    }

    /// The spill thread stored (`dropped == None`) or dropped the staged chunk at `position`,
    /// and counts it spilled or dropped. A stored chunk is counted spilled only here, after
    /// the lock (so after the staging caller published it in the disk tier's gauge): a
    /// snapshot that counts it spilled finds it queued too.
    pub(super) fn staged_done(
        &self,
        position: u64,
        points: usize,
        bytes: usize,
        dropped: Option<DestinationDropReason>,
    ) {
        let mut s = self.lock();
        s.staged_bytes = s.staged_bytes.saturating_sub(bytes);
        if dropped.is_none() {
            s.spill_refused = false;
        } else {
            s.disk_points = s.disk_points.saturating_sub(points as u64);
            s.disk_run_dropped(position);
        }
        self.publish(&s);
        drop(s);
        match dropped {
            Some(reason) => {
                self.stats.add_dropped(reason, points as u64);
                self.settled.notify_waiters();
            }
            None => self.stats.add_spilled(points as u64, bytes as u64),
        }
        self.room_made();
        self.ready.notify_one();
    }

    /// The spill log refused a batch: stop moving memory batches to it until it accepts one.
    pub(super) fn note_spill_refused(&self) {
        self.lock().spill_refused = true;
    }

    /// A batch moved from the memory tier to the spill thread could not be stored: it goes
    /// back to the memory tier at its place in position order (it fitted there before the
    /// move, so the memory bound still holds).
    pub(super) fn return_staged(&self, position: u64, batch: Batch) {
        let (n, staged, bytes) = (batch.len(), batch.size_bytes(), batch.heap_bytes());
        let mut s = self.lock();
        s.staged_bytes = s.staged_bytes.saturating_sub(staged);
        s.disk_points = s.disk_points.saturating_sub(n as u64);
        s.disk_run_dropped(position);
        let at = s
            .batches
            .iter()
            .position(|e| e.position > position)
            .unwrap_or(s.batches.len());
        s.datapoints += n;
        s.bytes += bytes;
        s.batches.insert(
            at,
            Entry {
                batch,
                from_disk: false,
                position,
            },
        );
        self.publish(&s);
        drop(s);
        self.room_made();
        self.ready.notify_one();
    }

    /// The disk tier's oldest records left without reaching memory (expired, corrupt,
    /// evicted).
    pub(super) fn disk_lost(&self, points: u64, reason: DestinationDropReason) {
        if points == 0 {
            return;
        }
        let mut s = self.lock();
        s.disk_points = s.disk_points.saturating_sub(points);
        s.disk_front_consumed(points);
        self.publish(&s);
        drop(s);
        self.stats.add_dropped(reason, points);
        self.settled.notify_waiters();
        self.ready.notify_one();
    }

    /// Replayed records join the memory tier; ends the outstanding replay request.
    pub(super) fn deliver_replayed(&self, batches: Vec<Batch>) {
        let mut s = self.lock();
        for mut batch in batches {
            // The replay was sized by what the records hold: they keep no spare room.
            batch.shrink_to_fit();
            let n = batch.len();
            s.disk_points = s.disk_points.saturating_sub(n as u64);
            let position = s.disk_front_consumed(n as u64);
            s.datapoints += n;
            s.bytes += batch.heap_bytes();
            s.batches.push_back(Entry {
                batch,
                from_disk: true,
                position,
            });
        }
        s.replay_requested = false;
        self.publish(&s);
        drop(s);
        self.ready.notify_one();
    }
}
