//! An ingestor's pending data: one batch per destination, filled between flushes.

use std::sync::Arc;

use crate::batch::{Batch, POINT_OVERHEAD};
use crate::queue::DestinationQueue;
use crate::router::ReplicaPools;

/// A pending batch is handed over (kept aside for the next flush) once its names reach this
/// size, so no batch comes near [`crate::batch::MAX_NAME_BYTES`].
pub(super) const MAX_PENDING_BATCH_NAME_BYTES: usize = 64 << 20;

/// Most datapoints and name bytes a first batch makes room for from what other connections'
/// batches held ([`DestinationQueue::filled_hint`]): about a 1 MiB message's worth (a socket
/// read is 64 KiB, a pickle message, Kinesis record or Kafka message at most about 1 MiB).
const MAX_SHARED_HINT_POINTS: usize = 1 << 16;
const MAX_SHARED_HINT_NAME_BYTES: usize = 1 << 20;

/// A pending batch holding at least this many datapoints that runs out of room is set aside
/// whole and followed by another, instead of growing: growing reallocates, and on a heap full
/// of other batches glibc's realloc cannot extend in place, so it allocates anew and copies
/// the whole batch. Smaller batches grow as before, so a queue never holds a run of tiny
/// ones.
const MIN_CHAINED_POINTS: usize = 32;

/// One pending batch per destination, and those set aside because they grew large.
#[derive(Debug)]
pub(super) struct Pending {
    batches: Vec<Batch>,
    /// Per destination, the datapoints and name bytes of the last batch handed over: a new
    /// batch is made room for a quarter more at once, instead of growing step by step. Before
    /// the first, the destination's queue tells what other ingestors' batches held
    /// ([`DestinationQueue::filled_hint`]).
    last: Vec<(usize, usize)>,
    /// Batches set aside, with their destination, in order.
    set_aside: Vec<(usize, Batch)>,
    /// Per destination, the datapoints and name bytes of the batches set aside since the last
    /// hand-over: with the last batch's, what the destination got in all.
    set_aside_sizes: Vec<(usize, usize)>,
    /// Names plus per-datapoint overhead, over all destinations.
    bytes: usize,
    /// Datapoints appended over all destinations (a datapoint counts once per destination).
    copies: usize,
}

impl Pending {
    pub(super) fn new(destinations: usize) -> Self {
        Self {
            batches: (0..destinations).map(|_| Batch::new()).collect(),
            last: vec![(0, 0); destinations],
            set_aside: Vec::new(),
            set_aside_sizes: vec![(0, 0); destinations],
            bytes: 0,
            copies: 0,
        }
    }

    /// Names plus per-datapoint overhead of everything pending, over all destinations.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The destinations it holds a batch for.
    pub(super) fn destinations(&self) -> usize {
        self.batches.len()
    }

    /// Datapoints pending over all destinations (one per destination a datapoint goes to).
    pub(super) fn copies(&self) -> usize {
        self.copies
    }

    /// Appends one datapoint for every distinct destination of `route` (carbon sends to the
    /// *set* of destinations the router yields: a duplicate, from RF=2 on a one-node ring or
    /// overlapping `continue` rules, gets one copy, and with pooled replicas so do two
    /// members of one pool, under the pool's representative). A batch started after a flush
    /// takes a spare from its destination's queue (`queues`). Returns the pending bytes after
    /// it.
    #[inline]
    pub(super) fn append(
        &mut self,
        route: &[u16],
        pools: Option<&ReplicaPools>,
        queues: &[Arc<DestinationQueue>],
        name: &[u8],
        timestamp: f64,
        value: f64,
    ) -> usize {
        let pool_of = |d: u16| pools.map_or(d, |p| p.representative(d));
        for (i, &dest) in route.iter().enumerate() {
            let dest = pool_of(dest);
            if route[..i].iter().any(|&d| pool_of(d) == dest) {
                continue;
            }
            let dest = usize::from(dest);
            // Route indices come from the router built on the same destination list.
            let Some(b) = self.batches.get_mut(dest) else {
                continue;
            };
            if b.is_unallocated() {
                let last = self.last.get(dest).copied().unwrap_or_default();
                provision(b, queues.get(dest), last);
            }
            if b.name_bytes() + name.len() > MAX_PENDING_BATCH_NAME_BYTES
                || (!b.has_room_for(name.len()) && b.len() >= MIN_CHAINED_POINTS)
            {
                let full = b.take();
                let filled = (full.len(), full.name_bytes());
                if let Some(sizes) = self.set_aside_sizes.get_mut(dest) {
                    sizes.0 += filled.0;
                    sizes.1 += filled.1;
                }
                self.set_aside.push((dest, full));
                provision(b, queues.get(dest), filled);
            }
            // Cannot fail: the batch holds at most MAX_PENDING_BATCH_NAME_BYTES of names
            // before this one, far below the batch's own bound.
            if b.push(name, timestamp, value).is_ok() {
                self.bytes += name.len() + POINT_OVERHEAD;
                self.copies += 1;
            }
        }
        self.bytes
    }

    /// Moves everything pending, with its destination, oldest first, into `out` (a vector
    /// the caller reuses); leaves the batches empty. Tells each destination's queue (of
    /// `queues`) what its batch held, for the first batch of other ingestors.
    pub(super) fn take_into(
        &mut self,
        out: &mut Vec<(usize, Batch)>,
        queues: &[Arc<DestinationQueue>],
    ) {
        out.append(&mut self.set_aside);
        let per_destination = self
            .batches
            .iter_mut()
            .zip(&mut self.last)
            .zip(&mut self.set_aside_sizes);
        for (dest, ((b, last), aside)) in per_destination.enumerate() {
            if !b.is_empty() {
                // What the destination got since the last hand-over, batches set aside included:
                // the next batch makes room for all of it at once.
                *last = (b.len() + aside.0, b.name_bytes() + aside.1);
                if let Some(q) = queues.get(dest) {
                    q.note_filled(last.0, last.1);
                }
                out.push((dest, b.take()));
            }
            *aside = (0, 0);
        }
        self.bytes = 0;
        self.copies = 0;
    }
}

/// Starts a pending batch in a spare of its destination's queue; without one, in a new batch
/// with room for a quarter more than the `last` (datapoints, name bytes) this destination got
/// from this ingestor or, before its first, from any ingestor: a new connection's batches
/// start the size of the others' instead of growing from nothing, a reallocation at a time.
#[cold]
fn provision(b: &mut Batch, queue: Option<&Arc<DestinationQueue>>, last: (usize, usize)) {
    let mut hint = last;
    if let Some(q) = queue {
        *b = q.spare();
        if hint.0 == 0 {
            // Another connection's batch sizes this one at most up to a large read's worth:
            // one sender's rare huge batch does not make every new connection reserve as much.
            let (points, names) = q.filled_hint();
            hint = (
                points.min(MAX_SHARED_HINT_POINTS),
                names.min(MAX_SHARED_HINT_NAME_BYTES),
            );
        }
    }
    if b.is_unallocated() {
        let (points, names) = hint;
        b.reserve(points + points / 4, names + names / 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{DestinationStats, QueueLimits};

    #[test]
    fn a_first_batch_starts_the_size_of_the_last_one_filled_for_its_destination() {
        let stats = Arc::new(DestinationStats::new("127.0.0.1:2004:a".to_string()));
        let q = Arc::new(DestinationQueue::new(QueueLimits::default(), stats));
        let queues = vec![q.clone()];
        let mut first = Pending::new(1);
        for i in 0..300 {
            first.append(
                &[0],
                None,
                &queues,
                format!("a.name.{i:04}").as_bytes(),
                1.0,
                2.0,
            );
        }
        let mut out = Vec::new();
        first.take_into(&mut out, &queues);
        assert_eq!(q.filled_hint(), (300, 300 * 11));
        // Another connection's first datapoint for the destination: room for a quarter more
        // than that at once, so the batch does not grow while it fills.
        let mut second = Pending::new(1);
        second.append(&[0], None, &queues, b"a.name.x", 1.0, 2.0);
        assert!(
            second.batches[0].heap_bytes() >= 375 * POINT_OVERHEAD + 375 * 11,
            "{}",
            second.batches[0].heap_bytes()
        );
        // A huge batch elsewhere sizes a new connection's first one only up to the cap.
        q.note_filled(10_000_000, 500_000_000);
        let mut third = Pending::new(1);
        third.append(&[0], None, &queues, b"a.name.y", 1.0, 2.0);
        let cap = MAX_SHARED_HINT_POINTS * POINT_OVERHEAD + MAX_SHARED_HINT_NAME_BYTES;
        let held = third.batches[0].heap_bytes();
        assert!(held <= cap + cap / 4 + 64, "{held} past the cap {cap}");
    }

    #[test]
    fn a_full_batch_is_followed_by_another_not_grown() {
        let stats = Arc::new(DestinationStats::new("127.0.0.1:2004:a".to_string()));
        let q = Arc::new(DestinationQueue::new(QueueLimits::default(), stats));
        let queues = vec![q.clone()];
        let mut pending = Pending::new(1);
        let name = |i: usize| format!("a.name.{i:04}");
        pending.append(&[0], None, &queues, name(0).as_bytes(), 1.0, 2.0);
        pending.batches[0].reserve(100, 100 * 11);
        let room = pending.batches[0].heap_bytes();
        for i in 1..500 {
            pending.append(&[0], None, &queues, name(i).as_bytes(), 1.0, 2.0);
        }
        // The first batch kept the room it was given; what did not fit went on in new ones.
        let (dest, first) = &pending.set_aside[0];
        assert_eq!((*dest, first.heap_bytes()), (0, room));
        assert!(first.len() >= MIN_CHAINED_POINTS);
        let mut out = Vec::new();
        pending.take_into(&mut out, &queues);
        assert!(out.len() >= 2, "{}", out.len());
        let names: Vec<Vec<u8>> = out
            .iter()
            .flat_map(|(_, b)| b.iter().map(|d| d.name.to_vec()))
            .collect();
        let sent: Vec<Vec<u8>> = (0..500).map(|i| name(i).into_bytes()).collect();
        assert_eq!(names, sent, "in order, each once");
        // The next batch makes room for all the destination got, set-aside batches included.
        assert_eq!(pending.last[0], (500, 500 * 11));
        assert_eq!(q.filled_hint(), (500, 500 * 11));
    }
}
