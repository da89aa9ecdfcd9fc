//! A destination's queue: the memory tier, and the hand-off to the disk tier.
//!
//! ## Tiers and order
//!
//! The memory tier is a FIFO of whole batches bounded by `max_datapoints` and `max_bytes`,
//! counting both waiting and in-flight batches, so the bound is the memory the tier really
//! holds. With [`WhenFull::Spill`] a push that does not fit goes to the destination's spill
//! thread (`queue::worker`, private), which appends it to the [`SpillLog`](super::spill::SpillLog).
//! Entering *disk mode*, the batches waiting in memory go to the spill thread first (they are
//! older), except records replayed from disk that are still unacknowledged in the log. From
//! then on every push also goes to the spill thread, behind what is already on disk, until
//! the disk tier is empty again. So the order per destination is: replayed records and
//! in-flight batches in memory (oldest), then disk records, then the batches still being
//! handed over — FIFO across both tiers, and across a restart.
//!
//! ## Replay
//!
//! When the memory tier has room for at least two chunks (see below) and the disk tier holds
//! data, the consumer side asks the spill thread for records worth at most the free room minus
//! one chunk; they are appended to the memory tier tagged *from disk*. They stay unacknowledged
//! in the log until the destination acknowledges them, so a crash replays them again
//! (at-least-once). The spill thread paces replay by `replay_rate` datapoints per second.
//!
//! Batches are split into chunks of at most 1/8 of each memory bound before they go to disk,
//! so a replayed record never overshoots the memory bound.
//!
//! ## Hand-over buffer
//!
//! Batches on their way to disk (queued in the spill thread's channel, or held by the `block`
//! fallback while the disk budget is exhausted) are bounded separately by `staging_bytes`
//! (1/8 of `max_bytes`). When it is full, a TCP or embedded producer waits in
//! [`Ingestor::flush`](crate::ingest::Ingestor::flush); UDP drops, counted as `queue_full`.
//! This is the only place a producer can wait on the disk, and only when the disk is slower
//! than the input.
//!
//! ## Shutdown
//!
//! [`DestinationQueue::spill_for_shutdown`] writes whatever is still in memory to the log (a
//! batch replayed from disk is not written again: it is still in the log, unacknowledged) and
//! syncs it. In disk mode the only memory batches not from disk are those the destination
//! had in flight when the queue entered disk mode and then handed back after a failed write
//! (at most one `flush_bytes` write): they are the one case replayed after newer records on
//! the next start.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::disk_tier::SpillHandle;
use super::worker::Cmd;
use super::{DestinationDropReason, WhenFull};
use crate::batch::Batch;
use crate::telemetry::DestinationStats;

/// Bounds and policy of one destination's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most datapoints in the memory tier (waiting plus in flight).
    pub max_datapoints: usize,
    /// Most bytes in the memory tier (names plus fixed per-datapoint overhead).
    pub max_bytes: usize,
    /// What to do when a push does not fit.
    pub when_full: WhenFull,
    /// With [`WhenFull::Spill`]: what to do when the spill log is full or failing
    /// (`drop_newest`, `drop_oldest` or `block`).
    pub spill_fallback: WhenFull,
}

impl Default for QueueLimits {
    fn default() -> Self {
        Self {
            max_datapoints: 1_000_000,
            max_bytes: 256 << 20,
            when_full: WhenFull::DropNewest,
            spill_fallback: WhenFull::DropNewest,
        }
    }
}

/// What happened to a pushed batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushOutcome {
    /// Datapoints queued (in memory or handed to the spill log).
    pub accepted: usize,
    /// Datapoints dropped by the full policy (or because the queue is closed).
    pub dropped: usize,
}

/// A batch in the memory tier, and whether it is a record replayed from the spill log.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) batch: Batch,
    pub(super) from_disk: bool,
}

/// One in-flight batch, in pop order.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tag {
    pub(super) points: usize,
    pub(super) bytes: usize,
    pub(super) from_disk: bool,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) batches: VecDeque<Entry>,
    pub(super) datapoints: usize,
    pub(super) bytes: usize,
    pub(super) in_flight: usize,
    pub(super) in_flight_bytes: usize,
    pub(super) tags: VecDeque<Tag>,
    /// Datapoints handed to the spill thread and not yet back in memory (in its channel, held
    /// by the `block` fallback, or stored in the log).
    pub(super) disk_points: u64,
    /// Bytes of batches handed to the spill thread and not yet stored or dropped.
    pub(super) staged_bytes: usize,
    /// A replay request is outstanding.
    pub(super) replay_requested: bool,
    pub(super) closed: bool,
}

/// The part shared with the spill thread.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) state: Mutex<State>,
    /// Wakes the consumer: a push, requeue, replay or close.
    pub(super) ready: Notify,
    /// Wakes blocked producers: room freed in memory or in the hand-over buffer.
    pub(super) room: Notify,
    pub(super) limits: QueueLimits,
    pub(super) stats: Arc<DestinationStats>,
}

impl Core {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the queue inconsistent (every update is
        // a few integer adds), so a poisoned lock is still safe to use.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn publish(&self, s: &State) {
        self.stats.set_depth(s.datapoints + s.in_flight, s.bytes);
        self.stats
            .set_tiers(s.bytes + s.in_flight_bytes, s.disk_points);
    }
}

/// A bounded FIFO of batches for one destination, shared by every producer and the single
/// destination task that consumes it; optionally backed by a spill log on disk.
///
/// Locking is per batch (one lock per push or pop of a whole batch), never per datapoint.
#[derive(Debug)]
pub struct DestinationQueue {
    pub(super) core: Arc<Core>,
    pub(super) spill: Option<SpillHandle>,
}

/// Result of one attempt at a push.
enum Step {
    Done,
    /// The rest of the batch must wait for room (policy `block`, or a full hand-over buffer).
    Wait(Batch),
}

impl DestinationQueue {
    /// An empty memory-only queue reporting into `stats`. [`WhenFull::Spill`] behaves as
    /// `spill_fallback` here (there is no disk tier).
    pub fn new(limits: QueueLimits, stats: Arc<DestinationStats>) -> Self {
        Self {
            core: Arc::new(Core {
                state: Mutex::new(State::default()),
                ready: Notify::new(),
                room: Notify::new(),
                limits,
                stats,
            }),
            spill: None,
        }
    }

    /// The queue's bounds and policy.
    pub fn limits(&self) -> QueueLimits {
        self.core.limits
    }

    /// True when the queue has a disk tier.
    pub fn has_spill(&self) -> bool {
        self.spill.is_some()
    }

    /// The destination's books.
    pub fn stats(&self) -> &Arc<DestinationStats> {
        &self.core.stats
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.core.lock()
    }

    fn spilling(&self) -> Option<&SpillHandle> {
        match self.core.limits.when_full {
            WhenFull::Spill => self.spill.as_ref(),
            _ => None,
        }
    }

    /// Queues `batch` without ever waiting, for callers that cannot (UDP, tests): `block`
    /// and a full hand-over buffer drop what does not fit, counted as `queue_full`.
    pub fn push(&self, batch: Batch) -> PushOutcome {
        let mut out = PushOutcome::default();
        if batch.is_empty() {
            return out;
        }
        self.core.stats.add_routed(batch.len() as u64);
        if let Step::Wait(rest) = self.try_push(batch, false, false, &mut out) {
            self.drop_counted(rest.len(), DestinationDropReason::QueueFull, &mut out);
        }
        out
    }

    /// Queues `batch`, waiting for room when the policy is `block` or when the hand-over
    /// buffer to the spill log is full. Every datapoint is counted as routed, and the
    /// dropped ones as dropped with their reason.
    pub async fn push_wait(&self, batch: Batch) -> PushOutcome {
        self.push_waiting(batch, false).await
    }

    /// Queues `batch` for a source that can pause (Kinesis, an embedder that opted in): when the
    /// memory tier is full and the policy would drop (`drop_newest`, `drop_oldest`, or the spill
    /// fallback), it waits for room instead, as `block` does. `spill` still spills. Such a
    /// source loses nothing here: what it has not handed over stays upstream.
    pub async fn push_backpressure(&self, batch: Batch) -> PushOutcome {
        self.push_waiting(batch, true).await
    }

    async fn push_waiting(&self, batch: Batch, force_block: bool) -> PushOutcome {
        let mut out = PushOutcome::default();
        if batch.is_empty() {
            return out;
        }
        self.core.stats.add_routed(batch.len() as u64);
        let mut batch = batch;
        loop {
            let room = self.core.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.try_push(batch, true, force_block, &mut out) {
                Step::Done => return out,
                Step::Wait(rest) => batch = rest,
            }
            room.await;
        }
    }

    fn drop_counted(&self, n: usize, reason: DestinationDropReason, out: &mut PushOutcome) {
        if n > 0 {
            self.core.stats.add_dropped(reason, n as u64);
            out.dropped += n;
        }
    }

    fn try_push(
        &self,
        mut batch: Batch,
        can_wait: bool,
        force_block: bool,
        out: &mut PushOutcome,
    ) -> Step {
        let total = batch.len();
        let mut s = self.lock();
        if s.closed {
            drop(s);
            self.drop_counted(total, DestinationDropReason::Shutdown, out);
            return Step::Done;
        }
        if let Some(sp) = self.spilling() {
            let fits = s.disk_points == 0 && self.fitting_prefix(&s, &batch) == total;
            if !fits {
                if s.staged_bytes > 0 && s.staged_bytes + batch.size_bytes() > sp.staging_bytes {
                    drop(s);
                    if can_wait {
                        return Step::Wait(batch);
                    }
                    self.drop_counted(total, DestinationDropReason::QueueFull, out);
                    return Step::Done;
                }
                let mut moved_lost = 0;
                if s.disk_points == 0 {
                    // Entering disk mode: what waits in memory is older than this batch, so it
                    // goes to disk first; only records replayed from disk (still in the log,
                    // and older than anything) stay in memory.
                    let first_new = s
                        .batches
                        .iter()
                        .position(|e| !e.from_disk)
                        .unwrap_or(s.batches.len());
                    let older: Vec<Entry> = s.batches.drain(first_new..).collect();
                    for e in older {
                        let (n, bytes) = (e.batch.len(), e.batch.size_bytes());
                        s.datapoints -= n;
                        s.bytes -= bytes;
                        moved_lost += n - self.stage(&mut s, sp, e.batch);
                    }
                }
                let stored = self.stage(&mut s, sp, batch);
                self.core.publish(&s);
                drop(s);
                out.accepted += stored;
                self.drop_counted(total - stored, DestinationDropReason::SpillIo, out);
                if moved_lost > 0 {
                    self.core
                        .stats
                        .add_dropped(DestinationDropReason::SpillIo, moved_lost as u64);
                }
                return Step::Done;
            }
            self.enqueue(&mut s, batch, out);
            return Step::Done;
        }
        let policy = match self.core.limits.when_full {
            _ if force_block => WhenFull::Block,
            WhenFull::Spill => self.core.limits.spill_fallback,
            p => p,
        };
        let mut fits = self.fitting_prefix(&s, &batch);
        let mut evicted = 0;
        if fits < total && policy == WhenFull::DropOldest {
            while fits < total {
                let Some(old) = s.batches.pop_front() else {
                    break;
                };
                s.datapoints -= old.batch.len();
                s.bytes -= old.batch.size_bytes();
                evicted += old.batch.len();
                fits = self.fitting_prefix(&s, &batch);
            }
            if fits < total {
                // Larger than the whole bound: keep its newest datapoints.
                let tail = batch.split_off(total - fits);
                evicted += batch.len();
                batch = tail;
                fits = batch.len();
            }
        }
        if fits == 0 && policy == WhenFull::Block && s.datapoints + s.in_flight == 0 {
            // A single datapoint larger than the byte bound must not wait forever.
            fits = 1;
        }
        let rest = (fits < batch.len()).then(|| batch.split_off(fits));
        self.enqueue(&mut s, batch, out);
        drop(s);
        self.drop_counted(evicted, DestinationDropReason::DropOldest, out);
        match rest {
            Some(rest) if policy == WhenFull::Block && can_wait => Step::Wait(rest),
            Some(rest) => {
                self.drop_counted(rest.len(), DestinationDropReason::QueueFull, out);
                Step::Done
            }
            None => Step::Done,
        }
    }

    /// Appends to the memory tier (under the lock) and wakes the consumer.
    fn enqueue(&self, s: &mut State, batch: Batch, out: &mut PushOutcome) {
        let n = batch.len();
        if n > 0 {
            s.datapoints += n;
            s.bytes += batch.size_bytes();
            s.batches.push_back(Entry {
                batch,
                from_disk: false,
            });
            out.accepted += n;
        }
        self.core.publish(s);
        if n > 0 {
            self.core.ready.notify_one();
        }
    }

    /// How many leading datapoints of `batch` fit under both bounds of the memory tier.
    fn fitting_prefix(&self, s: &State, batch: &Batch) -> usize {
        let limits = &self.core.limits;
        let room_points = limits
            .max_datapoints
            .saturating_sub(s.datapoints + s.in_flight);
        let room_bytes = limits.max_bytes.saturating_sub(s.bytes + s.in_flight_bytes);
        if batch.len() <= room_points && batch.size_bytes() <= room_bytes {
            return batch.len();
        }
        let mut bytes = 0;
        let mut n = 0;
        for dp in batch.iter().take(room_points) {
            let b = dp.name.len() + crate::batch::POINT_OVERHEAD;
            if bytes + b > room_bytes {
                break;
            }
            bytes += b;
            n += 1;
        }
        n
    }

    /// Takes the oldest batch without waiting; it is in flight until [`ack`](Self::ack)ed or
    /// [`requeue`](Self::requeue)d.
    pub fn try_pop(&self) -> Option<Batch> {
        let mut s = self.lock();
        let popped = s.batches.pop_front();
        if let Some(e) = &popped {
            let (n, bytes) = (e.batch.len(), e.batch.size_bytes());
            s.datapoints -= n;
            s.bytes -= bytes;
            s.in_flight += n;
            s.in_flight_bytes += bytes;
            s.tags.push_back(Tag {
                points: n,
                bytes,
                from_disk: e.from_disk,
            });
        }
        self.maybe_replay(&mut s);
        self.core.publish(&s);
        popped.map(|e| e.batch)
    }

    /// Waits for the oldest batch. `None` once the queue is closed and both tiers are empty.
    pub async fn pop(&self) -> Option<Batch> {
        loop {
            let notified = self.core.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.lock();
                if s.batches.is_empty() && s.closed && s.disk_points == 0 {
                    return None;
                }
            }
            if let Some(b) = self.try_pop() {
                return Some(b);
            }
            notified.await;
        }
    }

    /// In-flight datapoints were written: they count as sent (and replayed records are
    /// acknowledged in the spill log).
    pub fn ack(&self, datapoints: usize, messages: usize) {
        self.settle(datapoints, messages, &[]);
    }

    /// Like [`ack`](Self::ack) for the oldest in-flight batches, of whose datapoints `sent` were
    /// delivered in `messages` messages and the rest dropped for the reasons given (a UDP send
    /// the kernel refused, a datapoint the wire format cannot carry). `sent` plus the drops
    /// must cover whole in-flight batches.
    pub fn settle(&self, sent: usize, messages: usize, dropped: &[(DestinationDropReason, usize)]) {
        let datapoints = sent;
        let lost: usize = dropped.iter().map(|&(_, n)| n).sum();
        let mut s = self.lock();
        let mut left = sent + lost;
        let mut disk_records = 0;
        while left > 0 {
            let Some(t) = s.tags.pop_front() else {
                break;
            };
            left = left.saturating_sub(t.points);
            s.in_flight -= t.points;
            s.in_flight_bytes -= t.bytes;
            disk_records += usize::from(t.from_disk);
        }
        if disk_records > 0
            && let Some(sp) = &self.spill
        {
            let _ = sp.tx.send(Cmd::Ack(disk_records));
        }
        self.maybe_replay(&mut s);
        self.core.publish(&s);
        drop(s);
        self.core.stats.add_sent(datapoints as u64, messages as u64);
        for &(reason, n) in dropped {
            if n > 0 {
                self.core.stats.add_dropped(reason, n as u64);
            }
        }
        self.core.room.notify_waiters();
    }

    /// In-flight batches whose write failed go back to the front, oldest first, ahead of
    /// everything queued since. They are already counted in the memory bound. `batches` must
    /// be the most recently popped in-flight batches, in pop order (requeue newer groups
    /// first when handing back more than one group).
    pub fn requeue(&self, batches: Vec<Batch>) {
        let mut s = self.lock();
        for b in batches.into_iter().rev() {
            let tag = s.tags.pop_back().unwrap_or(Tag {
                points: b.len(),
                bytes: b.size_bytes(),
                from_disk: false,
            });
            s.in_flight = s.in_flight.saturating_sub(tag.points);
            s.in_flight_bytes = s.in_flight_bytes.saturating_sub(tag.bytes);
            s.datapoints += b.len();
            s.bytes += b.size_bytes();
            s.batches.push_front(Entry {
                batch: b,
                from_disk: tag.from_disk,
            });
        }
        self.core.publish(&s);
        drop(s);
        self.core.ready.notify_one();
    }

    /// No more pushes will come; [`pop`](Self::pop) returns `None` once drained.
    pub fn close(&self) {
        self.lock().closed = true;
        self.core.ready.notify_one();
        self.core.room.notify_waiters();
    }

    /// True once [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Resolves after the next push, requeue, replay or close (or at once if one happened
    /// since the last wait). Meant for the single consumer.
    pub async fn changed(&self) {
        self.core.ready.notified().await;
    }

    /// Takes everything still waiting in memory (for shutdown accounting of a memory-only
    /// queue; a queue with a disk tier uses [`spill_for_shutdown`](Self::spill_for_shutdown)).
    pub fn drain_all(&self) -> Vec<Batch> {
        let mut s = self.lock();
        let out: Vec<Batch> = s.batches.drain(..).map(|e| e.batch).collect();
        s.datapoints = 0;
        s.bytes = 0;
        self.core.publish(&s);
        drop(s);
        self.core.room.notify_waiters();
        out
    }

    /// Datapoints waiting in memory (not in flight).
    pub fn len(&self) -> usize {
        self.lock().datapoints
    }

    /// True when nothing waits in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Datapoints queued: waiting plus in flight in memory, plus the disk tier.
    pub fn queued(&self) -> usize {
        let s = self.lock();
        s.datapoints + s.in_flight + s.disk_points as usize
    }
}

#[cfg(test)]
mod tests;
