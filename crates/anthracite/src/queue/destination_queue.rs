//! [`DestinationQueue`]: one destination's queue, as producers and its destination task see
//! it. It owns the [core](super::core) and, with a spill directory, the
//! [disk tier](super::spill::tier); the policies decide here which tier a batch goes to.

use std::sync::Arc;
use std::time::Instant;

use super::core::{Core, FullWindow, PushOutcome, QueueLimits, State};
use super::destination_stats::DestinationStats;
use super::memory;
use super::policy::{DestinationDropReason, OverflowCause, PushMode, WhenFull};
use super::spares::Spares;
use super::spill::SpillError;
use super::spill::tier::{DiskTier, SpillSettings};
use crate::batch::Batch;

/// A bounded FIFO of batches for one destination, shared by every producer and the single
/// destination task that consumes it; optionally backed by a spill log on disk.
///
/// Locking is per batch (one lock per push or pop of a whole batch), never per datapoint.
#[derive(Debug)]
pub struct DestinationQueue {
    pub(super) core: Arc<Core>,
    pub(super) disk: Option<DiskTier>,
    spares: Spares,
}

/// A destination whose connection failed, was lost or timed out a write less than this long ago
/// gets no [`QueueLimits::full_wait`]: a hung peer the kernel still accepts connections for
/// would otherwise drain a little into each new connection and hold producers back again and
/// again.
const HEALTHY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Result of one attempt at a push.
enum Step {
    Done,
    /// The rest of the batch must wait for room (policy `block`, back-pressure, or a full
    /// hand-over buffer).
    Wait(Batch),
    /// The batch waits for room under the full wait until the end of its current window,
    /// when the destination's progress is judged again.
    WaitUntil(Batch, Instant),
}

/// Whether a push that does not fit waits under the full wait.
enum Hold {
    /// Wait for room, at most until this instant (the end of the window), then judge again.
    Until(Instant),
    /// Apply the policy now, for this cause.
    Apply(OverflowCause),
}

/// How a wait for delivery ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Everything up to the mark left the queue: written to the destination (and the
    /// connection seen alive afterwards), or dropped and counted.
    Done,
    /// The queue shut down first; what was left is in the spill log for the next run, or was
    /// counted as dropped (`shutdown`).
    Stopped,
}

impl DestinationQueue {
    /// An empty memory-only queue reporting into `stats`. [`WhenFull::Spill`] behaves as
    /// `spill_fallback` here (there is no disk tier).
    pub fn new(limits: QueueLimits, stats: Arc<DestinationStats>) -> Self {
        Self {
            core: Arc::new(Core::new(limits, stats)),
            disk: None,
            spares: Spares::new(limits.max_bytes),
        }
    }

    /// A queue with a disk tier: opens (and recovers) the spill log in `spill.dir` and starts
    /// its thread. Datapoints recovered from a previous run are counted as routed and queued
    /// (disk), and are replayed before anything pushed now.
    pub fn with_spill(
        limits: QueueLimits,
        stats: Arc<DestinationStats>,
        spill: SpillSettings,
    ) -> Result<Self, SpillError> {
        let core = Arc::new(Core::new(limits, stats));
        let disk = DiskTier::open(&core, limits, spill)?;
        Ok(Self {
            core,
            disk: Some(disk),
            spares: Spares::new(limits.max_bytes),
        })
    }

    /// An empty batch for a producer to fill, with the memory of one this queue's destination
    /// has written where it kept one (see [`recycle`](Self::recycle)); at most a quarter of
    /// its room stays unused once handed back ([`Batch::take`]).
    pub fn spare(&self) -> Batch {
        self.spares.take()
    }

    /// Notes what a batch a producer filled for this destination held, once per batch: a
    /// producer's first batch makes room for as much ([`filled_hint`](Self::filled_hint))
    /// instead of growing from nothing.
    pub fn note_filled(&self, points: usize, name_bytes: usize) {
        self.spares.note_filled(points, name_bytes);
    }

    /// The datapoints and name bytes of the last batch a producer filled for this
    /// destination ([`note_filled`](Self::note_filled)); zero before the first.
    pub fn filled_hint(&self) -> (usize, usize) {
        self.spares.filled_hint()
    }

    /// Batches the destination has written (or dropped): their memory is kept for
    /// [`spare`](Self::spare), within the spares' bound, and the rest freed.
    pub fn recycle(&self, batches: impl IntoIterator<Item = Batch>) {
        self.spares.keep(batches);
    }

    /// The queue's bounds and policy.
    pub fn limits(&self) -> QueueLimits {
        self.core.limits
    }

    /// True when the queue has a disk tier.
    pub fn has_spill(&self) -> bool {
        self.disk.is_some()
    }

    /// The destination's books.
    pub fn stats(&self) -> &Arc<DestinationStats> {
        &self.core.stats
    }

    fn spilling(&self) -> Option<&DiskTier> {
        match self.core.limits.when_full {
            WhenFull::Spill => self.disk.as_ref(),
            _ => None,
        }
    }

    /// Queues `batch` without ever waiting ([`PushMode::NoWait`]).
    pub fn push(&self, batch: Batch) -> PushOutcome {
        let mut out = PushOutcome::default();
        if batch.is_empty() {
            return out;
        }
        self.core.stats.add_routed(batch.len() as u64);
        if let Step::Wait(rest) = self.try_push(batch, PushMode::NoWait, &mut out) {
            self.core
                .drop_counted(rest.len(), DestinationDropReason::QueueFull, &mut out);
        }
        out
    }

    /// Queues `batch`, waiting for room where `mode` allows (see [`PushMode`]). Every
    /// datapoint is counted as routed, and the dropped ones as dropped with their reason.
    pub async fn push_with(&self, batch: Batch, mode: PushMode) -> PushOutcome {
        if mode == PushMode::NoWait {
            return self.push(batch);
        }
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
            match self.try_push(batch, mode, &mut out) {
                Step::Done => {
                    // Woken for room that this push took part of: the next waiter may fit
                    // in what is left (if not, it waits again without waking another).
                    if out.waited {
                        self.core.room_made();
                    }
                    return out;
                }
                Step::Wait(rest) => {
                    batch = rest;
                    out.waited = true;
                    room.await;
                }
                Step::WaitUntil(rest, deadline) => {
                    batch = rest;
                    if !out.waited {
                        self.core.stats.add_full_wait();
                    }
                    out.waited = true;
                    let _ = tokio::time::timeout_at(deadline.into(), room).await;
                }
            }
        }
    }

    /// The destination's connection was lost or timed out (recorded in its stats): producers
    /// held by the full wait look again now, find it no longer applies, and their policy
    /// takes effect at once instead of at the end of their window (up to `full_wait_ms`
    /// later).
    pub fn connection_lost(&self) {
        self.core.room.notify_waiters();
    }

    /// [`push_with`](Self::push_with) in [`PushMode::Wait`].
    pub async fn push_wait(&self, batch: Batch) -> PushOutcome {
        self.push_with(batch, PushMode::Wait).await
    }

    /// One attempt.
    fn try_push(&self, mut batch: Batch, mode: PushMode, out: &mut PushOutcome) -> Step {
        let total = batch.len();
        let mut s = self.core.lock();
        if s.closed {
            drop(s);
            self.core
                .drop_counted(total, DestinationDropReason::Shutdown, out);
            return Step::Done;
        }
        // The episode of the full wait ends once the memory tier is below half, however it
        // got there (written, moved to disk, evicted); only a push reads it.
        if s.full_window.is_some() && self.core.limits.below_half(&s) {
            s.full_window = None;
            s.behind = false;
        }
        if let Some(disk) = self.spilling() {
            if s.disk_points == 0 {
                if memory::fitting_prefix(&self.core.limits, &s, &mut batch) == total {
                    memory::enqueue(&self.core, &mut s, batch, out);
                    return Step::Done;
                }
                match self.full_hold(&mut s, &batch, mode) {
                    Hold::Until(deadline) => return Step::WaitUntil(batch, deadline),
                    Hold::Apply(cause) => self.core.stats.add_overflow(cause),
                }
            }
            return self.spill(s, disk, batch, mode, out);
        }
        self.push_memory(s, batch, mode, out)
    }

    /// With the memory tier full (and, with spill, nothing on disk): whether a producer that
    /// can wait is held back for room, and until when, or why the policy applies now (see
    /// [`QueueLimits::full_wait`]).
    ///
    /// The wait runs in windows of `full_wait`, shared by every producer of the episode (from
    /// the tier first found full until it drains below half). At the end of each, the
    /// destination is judged *behind* when its writes waited on the peer for at least half of
    /// the window (the peer takes less than the relay offers, or has stopped reading); then
    /// the policy applies, and keeps applying at once until the episode ends. Otherwise the
    /// destination is keeping up — what holds the producers back is the relay's own speed: a
    /// sender task that gets little CPU completes few writes, but none of them waits — and a
    /// new window begins. A write that makes no progress at all is ended by the write timeout,
    /// which declares the destination down.
    fn full_hold(&self, s: &mut State, batch: &Batch, mode: PushMode) -> Hold {
        let limits = &self.core.limits;
        let stats = &self.core.stats;
        if mode == PushMode::NoWait
            || limits.full_wait.is_zero()
            || batch.len() > limits.max_datapoints
            || batch.size_bytes() > limits.max_bytes
            || s.spill_refused
        {
            return Hold::Apply(OverflowCause::NoWait);
        }
        if !stats.is_connected() || stats.failed_within(HEALTHY_AFTER) {
            return Hold::Apply(OverflowCause::Down);
        }
        if s.behind {
            return Hold::Apply(OverflowCause::Behind);
        }
        let now = Instant::now();
        let here = FullWindow {
            start: now,
            peer_waited: stats.peer_waited(),
        };
        let window = s.full_window.get_or_insert(here);
        let elapsed = now.saturating_duration_since(window.start);
        if elapsed >= limits.full_wait {
            if here.peer_waited.saturating_sub(window.peer_waited) * 2 >= elapsed {
                s.behind = true;
                return Hold::Apply(OverflowCause::Behind);
            }
            *window = here;
        }
        Hold::Until(window.start + limits.full_wait)
    }

    /// The memory-only path: the policy decides what does not fit.
    fn push_memory(
        &self,
        mut s: std::sync::MutexGuard<'_, State>,
        mut batch: Batch,
        mode: PushMode,
        out: &mut PushOutcome,
    ) -> Step {
        let limits = &self.core.limits;
        let policy = match limits.when_full {
            _ if mode == PushMode::Backpressure => WhenFull::Block,
            WhenFull::Spill => limits.spill_fallback,
            p => p,
        };
        let total = batch.len();
        let mut fits = memory::fitting_prefix(limits, &s, &mut batch);
        if fits < total && matches!(policy, WhenFull::DropNewest | WhenFull::DropOldest) {
            match self.full_hold(&mut s, &batch, mode) {
                Hold::Until(deadline) => return Step::WaitUntil(batch, deadline),
                Hold::Apply(cause) => self.core.stats.add_overflow(cause),
            }
        }
        let mut evicted = 0;
        if fits < total && policy == WhenFull::DropOldest {
            let disk_records;
            (evicted, disk_records) = memory::evict_oldest(&mut s, total, |s| {
                memory::fitting_prefix(limits, s, &mut batch)
            });
            if let Some(disk) = &self.disk {
                disk.ack(disk_records);
            }
            fits = memory::fitting_prefix(limits, &s, &mut batch);
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
        memory::enqueue(&self.core, &mut s, batch, out);
        drop(s);
        if evicted > 0 {
            self.core
                .stats
                .add_dropped(DestinationDropReason::DropOldest, evicted as u64);
            out.evicted += evicted;
            self.core.settled.notify_waiters();
        }
        match rest {
            Some(rest) if policy == WhenFull::Block && mode != PushMode::NoWait => Step::Wait(rest),
            Some(rest) => {
                self.core
                    .drop_counted(rest.len(), DestinationDropReason::QueueFull, out);
                Step::Done
            }
            None => Step::Done,
        }
    }

    /// The batch goes to the disk tier (it does not fit in memory, or the queue is in disk
    /// mode). Entering disk mode, what waits in memory is older than this batch, so it goes to
    /// disk first (only records replayed from disk, still in the log and older than anything,
    /// stay in memory) — provided the log looks able to take it all. When it does not, or
    /// while the log is refusing data, the memory tier keeps its batches and takes what fits
    /// of this one, as a memory-only queue would, and only the overflow is offered to the
    /// log: a full disk never loses more than no disk. Moved batches the log refuses come
    /// back to memory (`queue::worker`).
    fn spill(
        &self,
        mut s: std::sync::MutexGuard<'_, State>,
        disk: &DiskTier,
        mut batch: Batch,
        mode: PushMode,
        out: &mut PushOutcome,
    ) -> Step {
        if s.staged_bytes > 0 && s.staged_bytes + batch.size_bytes() > disk.staging_bytes {
            drop(s);
            if mode != PushMode::NoWait {
                return Step::Wait(batch);
            }
            self.core
                .drop_counted(batch.len(), DestinationDropReason::QueueFull, out);
            return Step::Done;
        }
        let mut moved_lost = 0;
        if s.disk_points == 0 {
            let first_new = s
                .batches
                .iter()
                .position(|e| !e.from_disk)
                .unwrap_or(s.batches.len());
            let waiting: usize = s
                .batches
                .iter()
                .skip(first_new)
                .map(|e| e.batch.size_bytes())
                .sum();
            if !s.spill_refused && disk.can_take(&self.core, &s, waiting + batch.size_bytes()) {
                let older: Vec<_> = s.batches.drain(first_new..).collect();
                for e in older {
                    let (n, bytes) = (e.batch.len(), e.batch.heap_bytes());
                    s.datapoints -= n;
                    s.bytes -= bytes;
                    moved_lost += n - disk.stage(&mut s, e.batch, e.position, true);
                }
            } else {
                let fits = memory::fitting_prefix(&self.core.limits, &s, &mut batch);
                let rest = batch.split_off(fits);
                memory::enqueue(&self.core, &mut s, batch, out);
                batch = rest;
            }
        }
        let total = batch.len();
        if total > 0 {
            let position = s.take_positions(total);
            let stored = disk.stage(&mut s, batch, position, false);
            if stored > 0 {
                out.mark = position + stored as u64;
            }
            out.accepted += stored;
            self.core.publish(&s);
            drop(s);
            self.core
                .drop_counted(total - stored, DestinationDropReason::SpillIo, out);
        } else {
            drop(s);
        }
        if moved_lost > 0 {
            self.core
                .stats
                .add_dropped(DestinationDropReason::SpillIo, moved_lost as u64);
        }
        Step::Done
    }

    /// Takes the oldest batch without waiting; it is in flight until [`ack`](Self::ack)ed or
    /// [`requeue`](Self::requeue)d.
    pub fn try_pop(&self) -> Option<Batch> {
        let mut s = self.core.lock();
        let popped = memory::pop_front(&mut s);
        self.maybe_replay(&mut s);
        self.core.publish(&s);
        popped
    }

    pub(super) fn maybe_replay(&self, s: &mut State) {
        if let Some(disk) = &self.disk {
            disk.maybe_replay(&self.core.limits, s);
        }
    }

    /// Waits for the oldest batch. `None` once the queue is closed and both tiers are empty.
    pub async fn pop(&self) -> Option<Batch> {
        loop {
            let notified = self.core.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.core.lock();
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
        let lost: usize = dropped.iter().map(|&(_, n)| n).sum();
        let mut s = self.core.lock();
        let disk_records = memory::ack(&mut s, sent + lost);
        if let Some(disk) = &self.disk {
            disk.ack(disk_records);
        }
        self.maybe_replay(&mut s);
        self.core.publish(&s);
        drop(s);
        self.core.stats.add_sent(sent as u64, messages as u64);
        for &(reason, n) in dropped {
            if n > 0 {
                self.core.stats.add_dropped(reason, n as u64);
            }
        }
        self.core.room_made();
        self.core.settled.notify_waiters();
    }

    /// In-flight batches whose write failed go back to the front, oldest first, ahead of
    /// everything queued since. They are already counted in the memory bound. `batches` must
    /// be the most recently popped in-flight batches, in pop order (requeue newer groups
    /// first when handing back more than one group).
    pub fn requeue(&self, batches: Vec<Batch>) {
        let mut s = self.core.lock();
        memory::requeue(&mut s, batches);
        self.core.publish(&s);
        drop(s);
        self.core.ready.notify_one();
    }

    /// No more pushes will come; [`pop`](Self::pop) returns `None` once drained.
    pub fn close(&self) {
        self.core.lock().closed = true;
        self.core.ready.notify_one();
        self.core.room.notify_waiters();
    }

    /// Takes pushes again after [`close`](Self::close): a destination a reload removed and
    /// added back before its queue was shut down.
    pub fn reopen(&self) {
        self.core.lock().closed = false;
    }

    /// True once [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.core.lock().closed
    }

    /// Resolves after the next push, requeue, replay or close (or at once if one happened
    /// since the last wait). Meant for the single consumer.
    pub async fn changed(&self) {
        self.core.ready.notified().await;
    }

    /// Shutdown, after the destination task stopped: a queue with a disk tier writes what is
    /// still in memory to its spill log (replayed first on the next start) and returns
    /// `(0, left on disk)`; a memory-only queue counts what is left as dropped (`shutdown`)
    /// and returns `(dropped, 0)`. Delivery receipts still waiting then resolve as
    /// [`Settled::Stopped`].
    pub async fn shut_down(&self) -> (u64, u64) {
        self.close();
        let result = match &self.disk {
            Some(disk) => (0, disk.shutdown(&self.core).await),
            None => {
                let mut s = self.core.lock();
                let left: usize = memory::drain_waiting(&mut s)
                    .iter()
                    .map(|e| e.batch.len())
                    .sum::<usize>()
                    + s.in_flight;
                s.tags.clear();
                s.in_flight = 0;
                s.in_flight_bytes = 0;
                self.core.publish(&s);
                drop(s);
                self.core
                    .stats
                    .add_dropped(DestinationDropReason::Shutdown, left as u64);
                (left as u64, 0)
            }
        };
        self.core.lock().stopped = true;
        self.core.room.notify_waiters();
        self.core.settled.notify_waiters();
        result
    }

    /// Waits until every datapoint accepted before `mark` (a [`PushOutcome::mark`]) has left
    /// the queue: written to the destination, or dropped and counted.
    pub async fn settled(&self, mark: u64) -> Settled {
        loop {
            let notified = self.core.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.core.lock();
                if s.oldest_position() >= mark {
                    return Settled::Done;
                }
                if s.stopped {
                    return Settled::Stopped;
                }
            }
            notified.await;
        }
    }

    /// True once everything accepted before `mark` has left the queue (or the queue stopped):
    /// what [`settled`](Self::settled) waits for, without waiting.
    pub fn is_settled(&self, mark: u64) -> bool {
        let s = self.core.lock();
        s.oldest_position() >= mark || s.stopped
    }

    /// Datapoints waiting in memory (not in flight).
    pub fn len(&self) -> usize {
        self.core.lock().datapoints
    }

    /// True when nothing waits in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Datapoints queued: waiting plus in flight in memory, plus the disk tier.
    pub fn queued(&self) -> usize {
        let s = self.core.lock();
        s.datapoints + s.in_flight + s.disk_points as usize
    }

    /// Bytes handed to the spill thread and not yet stored or dropped.
    #[cfg(test)]
    pub(super) fn staged_bytes(&self) -> usize {
        self.core.lock().staged_bytes
    }

    /// Datapoints in the disk tier (handed to the spill thread, not yet replayed).
    pub fn queued_disk(&self) -> u64 {
        self.core.lock().disk_points
    }
}
