//! The in-memory tier of a destination's queue.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::{DestinationDropReason, WhenFull};
use crate::batch::Batch;
use crate::telemetry::DestinationStats;

/// Bounds and policy of one destination's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most datapoints waiting (in flight not included).
    pub max_datapoints: usize,
    /// Most bytes waiting (names plus fixed per-datapoint overhead).
    pub max_bytes: usize,
    /// What to do when a push does not fit.
    pub when_full: WhenFull,
}

impl Default for QueueLimits {
    fn default() -> Self {
        Self {
            max_datapoints: 1_000_000,
            max_bytes: 256 << 20,
            when_full: WhenFull::DropNewest,
        }
    }
}

/// What happened to a pushed batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushOutcome {
    /// Datapoints queued.
    pub accepted: usize,
    /// Datapoints dropped by the full policy.
    pub dropped: usize,
}

#[derive(Debug, Default)]
struct State {
    batches: VecDeque<Batch>,
    datapoints: usize,
    bytes: usize,
    in_flight: usize,
    closed: bool,
}

/// A bounded FIFO of batches for one destination, shared by every producer and the single
/// destination task that consumes it.
///
/// Locking is per batch (one lock per push or pop of a whole batch), never per datapoint.
#[derive(Debug)]
pub struct DestinationQueue {
    state: Mutex<State>,
    ready: Notify,
    limits: QueueLimits,
    stats: Arc<DestinationStats>,
}

impl DestinationQueue {
    /// An empty queue reporting into `stats`.
    pub fn new(limits: QueueLimits, stats: Arc<DestinationStats>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            limits,
            stats,
        }
    }

    /// The queue's bounds and policy.
    pub fn limits(&self) -> QueueLimits {
        self.limits
    }

    /// The destination's books.
    pub fn stats(&self) -> &Arc<DestinationStats> {
        &self.stats
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the queue inconsistent (every update is
        // a few integer adds), so a poisoned lock is still safe to use.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, s: &State) {
        self.stats.set_depth(s.datapoints + s.in_flight, s.bytes);
    }

    /// Queues `batch`, applying the full policy to whatever does not fit. Every datapoint is
    /// counted as routed, and the dropped ones as dropped with reason `queue_full`.
    pub fn push(&self, mut batch: Batch) -> PushOutcome {
        let total = batch.len();
        if total == 0 {
            return PushOutcome::default();
        }
        self.stats.add_routed(total as u64);
        let mut s = self.lock();
        if s.closed {
            drop(s);
            self.stats
                .add_dropped(DestinationDropReason::Shutdown, total as u64);
            return PushOutcome {
                accepted: 0,
                dropped: total,
            };
        }
        let fits = self.fitting_prefix(&s, &batch);
        let dropped = total - fits;
        if fits < total {
            match self.limits.when_full {
                WhenFull::DropNewest => {
                    let _tail = batch.split_off(fits);
                }
            }
        }
        if fits > 0 {
            s.datapoints += batch.len();
            s.bytes += batch.size_bytes();
            s.batches.push_back(batch);
        }
        self.publish(&s);
        drop(s);
        if dropped > 0 {
            self.stats
                .add_dropped(DestinationDropReason::QueueFull, dropped as u64);
        }
        if fits > 0 {
            self.ready.notify_one();
        }
        PushOutcome {
            accepted: fits,
            dropped,
        }
    }

    /// How many leading datapoints of `batch` fit under both bounds.
    fn fitting_prefix(&self, s: &State, batch: &Batch) -> usize {
        let room_points = self.limits.max_datapoints.saturating_sub(s.datapoints);
        let room_bytes = self.limits.max_bytes.saturating_sub(s.bytes);
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
        let batch = s.batches.pop_front()?;
        s.datapoints -= batch.len();
        s.bytes -= batch.size_bytes();
        s.in_flight += batch.len();
        self.publish(&s);
        Some(batch)
    }

    /// Waits for the oldest batch. `None` once the queue is closed and empty.
    pub async fn pop(&self) -> Option<Batch> {
        loop {
            let notified = self.ready.notified();
            {
                let s = self.lock();
                if s.batches.is_empty() && s.closed {
                    return None;
                }
            }
            if let Some(b) = self.try_pop() {
                return Some(b);
            }
            notified.await;
        }
    }

    /// In-flight datapoints were written: they count as sent.
    pub fn ack(&self, datapoints: usize, messages: usize) {
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(datapoints);
        self.publish(&s);
        drop(s);
        self.stats.add_sent(datapoints as u64, messages as u64);
    }

    /// In-flight batches whose write failed go back to the front, oldest first, ahead of
    /// everything queued since. They were accepted once, so no bound applies to them.
    pub fn requeue(&self, batches: Vec<Batch>) {
        let mut s = self.lock();
        for b in batches.into_iter().rev() {
            s.in_flight = s.in_flight.saturating_sub(b.len());
            s.datapoints += b.len();
            s.bytes += b.size_bytes();
            s.batches.push_front(b);
        }
        self.publish(&s);
        drop(s);
        self.ready.notify_one();
    }

    /// No more pushes will come; [`pop`](Self::pop) returns `None` once drained.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// True once [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Resolves after the next push, requeue or close (or at once if one happened since the
    /// last wait). Meant for the single consumer.
    pub async fn changed(&self) {
        self.ready.notified().await;
    }

    /// Takes everything still waiting (for shutdown accounting or spilling).
    pub fn drain_all(&self) -> Vec<Batch> {
        let mut s = self.lock();
        let out: Vec<Batch> = s.batches.drain(..).collect();
        s.datapoints = 0;
        s.bytes = 0;
        self.publish(&s);
        out
    }

    /// Datapoints waiting (not in flight).
    pub fn len(&self) -> usize {
        self.lock().datapoints
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Datapoints waiting plus in flight.
    pub fn queued(&self) -> usize {
        let s = self.lock();
        s.datapoints + s.in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::RelayStats;

    fn queue(max_datapoints: usize, max_bytes: usize) -> DestinationQueue {
        let stats = RelayStats::new(&["d:1:a".to_string()]);
        let d = stats.destinations()[0].clone();
        DestinationQueue::new(
            QueueLimits {
                max_datapoints,
                max_bytes,
                when_full: WhenFull::DropNewest,
            },
            d,
        )
    }

    fn batch(n: usize) -> Batch {
        let mut b = Batch::new();
        for i in 0..n {
            b.push(format!("m.{i}").as_bytes(), i as f64, 1.0);
        }
        b
    }

    #[test]
    fn drop_newest_keeps_prefix_and_counts_exactly() {
        let q = queue(5, usize::MAX);
        assert_eq!(q.push(batch(3)).accepted, 3);
        let out = q.push(batch(4));
        assert_eq!((out.accepted, out.dropped), (2, 2));
        let snap = q.stats().snapshot();
        assert_eq!(snap.routed, 7);
        assert_eq!(snap.dropped(DestinationDropReason::QueueFull), 2);
        assert_eq!(snap.queued, 5);
    }

    #[test]
    fn byte_bound_applies() {
        let per = 3 + crate::batch::POINT_OVERHEAD; // "m.0"
        let q = queue(usize::MAX, per * 2);
        let out = q.push(batch(3));
        assert_eq!((out.accepted, out.dropped), (2, 1));
    }

    #[test]
    fn requeue_goes_first_and_accounting_holds() {
        let q = queue(100, usize::MAX);
        q.push(batch(2));
        q.push(batch(3));
        let first = q.try_pop().unwrap_or_default();
        assert_eq!(first.len(), 2);
        assert_eq!(q.queued(), 5);
        q.requeue(vec![first]);
        assert_eq!(q.try_pop().map(|b| b.len()), Some(2));
        q.ack(2, 1);
        let s = q.stats().snapshot();
        assert_eq!(s.routed, s.sent + s.dropped_total() + s.queued);
        assert_eq!(s.sent, 2);
    }

    #[tokio::test]
    async fn pop_returns_none_after_close_and_drain() {
        let q = Arc::new(queue(100, usize::MAX));
        q.push(batch(1));
        q.close();
        assert!(q.pop().await.is_some());
        assert!(q.pop().await.is_none());
    }
}
