//! Spent batches kept for reuse.
//!
//! Every flush of every connection hands its pending batches to the queues and starts new
//! ones; the destination task frees them once written. Allocating and freeing those vectors
//! each time made up most of the allocator's work on the ingest path, and with a thousand
//! connections the heap fragmented (glibc's `_int_malloc` searching its bins was ~7 % of the
//! relay's CPU on `many-clients-1k`). So a queue keeps the batches its destination has written
//! (emptied, their memory kept) and the ingestors fill them again
//! ([`DestinationQueue::spare`](super::DestinationQueue::spare)).
//!
//! The spares are bounded: at most half the queue's `max_bytes` (at most [`MAX_SPARE_BYTES`])
//! and [`MAX_SPARES`] batches; what does not fit is freed, as are batches too small to be worth
//! keeping. Half, not less: while a burst drains, the writers free batches as fast as the
//! ingestors fill new ones, and a spare the ingestors fill again is memory already touched
//! where a freed batch comes back from glibc as fresh pages (docs/benchmarks.md, "Per
//! connection and per destination"). A batch filled into a spare keeps the spare's room, and the
//! memory tier counts it ([`Batch::heap_bytes`]), so the queue's bound is still the memory it
//! holds; one that used less than an eighth of it is trimmed when taken ([`Batch::take`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::batch::Batch;

/// Most bytes of spare batches one queue keeps.
pub const MAX_SPARE_BYTES: usize = 16 << 20;

/// Most bytes of spare batches a queue whose memory tier holds `queue_max_bytes` keeps.
pub fn spare_bytes(queue_max_bytes: usize) -> usize {
    (queue_max_bytes / 2).min(MAX_SPARE_BYTES)
}

/// Most spare batches one queue keeps.
pub(super) const MAX_SPARES: usize = 1024;

/// Batches holding less memory than this are freed, not kept.
const MIN_SPARE_BYTES: usize = 1 << 10;

#[derive(Debug, Default)]
struct Free {
    batches: Vec<Batch>,
    /// Heap bytes of `batches`.
    bytes: usize,
}

/// A queue's spare batches; see the [module documentation](self).
#[derive(Debug)]
pub(super) struct Spares {
    free: Mutex<Free>,
    max_bytes: usize,
    /// The datapoints (high half) and name bytes (low half) of the last batch an ingestor
    /// filled for this destination, each saturated at `u32::MAX`: what a batch started
    /// without a spare makes room for ([`filled_hint`](Self::filled_hint)).
    filled: AtomicU64,
}

impl Spares {
    /// Spares for a queue bounded by `queue_max_bytes`.
    pub(super) fn new(queue_max_bytes: usize) -> Self {
        Self {
            free: Mutex::new(Free::default()),
            max_bytes: spare_bytes(queue_max_bytes),
            filled: AtomicU64::new(0),
        }
    }

    /// Notes what a batch an ingestor filled for this destination held (once per batch).
    pub(super) fn note_filled(&self, points: usize, name_bytes: usize) {
        let half = |n: usize| {
            u64::try_from(n)
                .unwrap_or(u64::MAX)
                .min(u64::from(u32::MAX))
        };
        let packed = half(points) << 32 | half(name_bytes);
        // A hint, not a count: the last writer wins, and a stale value only sizes one batch.
        if self.filled.load(Ordering::Relaxed) != packed {
            self.filled.store(packed, Ordering::Relaxed);
        }
    }

    /// The datapoints and name bytes of the last batch filled for this destination (zero
    /// before the first).
    pub(super) fn filled_hint(&self) -> (usize, usize) {
        let packed = self.filled.load(Ordering::Relaxed);
        let half = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        (half(packed >> 32), half(packed & u64::from(u32::MAX)))
    }

    fn lock(&self) -> MutexGuard<'_, Free> {
        // A push or a pop of a vector: a poisoned lock is still consistent.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An empty batch: the most recently kept spare, or a new one (holding no memory yet).
    pub(super) fn take(&self) -> Batch {
        let mut free = self.lock();
        match free.batches.pop() {
            Some(b) => {
                free.bytes -= b.heap_bytes();
                b
            }
            None => Batch::new(),
        }
    }

    /// Keeps what fits of `batches` (emptied), frees the rest.
    pub(super) fn keep(&self, batches: impl IntoIterator<Item = Batch>) {
        let mut free = self.lock();
        for mut b in batches {
            let bytes = b.heap_bytes();
            if bytes < MIN_SPARE_BYTES
                || free.batches.len() >= MAX_SPARES
                || free.bytes + bytes > self.max_bytes
            {
                continue;
            }
            b.clear();
            free.bytes += bytes;
            free.batches.push(b);
        }
    }

    /// Heap bytes the spares hold.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(points: usize) -> Batch {
        let mut b = Batch::new();
        for i in 0..points {
            b.push(format!("a.metric.name.{i}").as_bytes(), 1.0, 2.0)
                .expect("room");
        }
        b
    }

    #[test]
    fn the_last_filled_size_is_kept_for_a_first_batch_and_saturates() {
        let s = Spares::new(1 << 20);
        assert_eq!(s.filled_hint(), (0, 0));
        s.note_filled(300, 12_000);
        assert_eq!(s.filled_hint(), (300, 12_000));
        s.note_filled(7, 90);
        assert_eq!(s.filled_hint(), (7, 90));
        // Each half saturates on its own: a huge count never spills into the other.
        s.note_filled(usize::MAX, 5);
        assert_eq!(s.filled_hint(), (u32::MAX as usize, 5));
        s.note_filled(5, usize::MAX);
        assert_eq!(s.filled_hint(), (5, u32::MAX as usize));
    }

    #[test]
    fn spares_come_back_empty_with_their_memory_within_the_bound() {
        // Half of 1 MiB: 512 KiB of spares.
        let s = Spares::new(1 << 20);
        let kept = filled(1000);
        let bytes = kept.heap_bytes();
        assert!(bytes > MIN_SPARE_BYTES && bytes < 64 << 10, "{bytes}");
        s.keep([kept, filled(3)]);
        // The tiny one is not worth keeping.
        assert_eq!(s.bytes(), bytes);
        let b = s.take();
        assert!(b.is_empty());
        assert_eq!(b.heap_bytes(), bytes);
        assert_eq!(s.bytes(), 0);
        assert!(s.take().is_unallocated());
        // Never more than the bound, however many are offered.
        s.keep((0..100).map(|_| filled(1000)));
        assert!(s.bytes() <= (1 << 20) / 2);
        assert!(s.bytes() > (1 << 20) / 2 - bytes);
        let big = Spares::new(usize::MAX);
        big.keep((0..2 * MAX_SPARES).map(|_| filled(40)));
        assert_eq!(big.lock().batches.len(), MAX_SPARES);
        assert!(big.bytes() <= MAX_SPARE_BYTES);
    }
}
