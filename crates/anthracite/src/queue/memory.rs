//! The memory tier: a FIFO of whole batches bounded by `max_datapoints` and `max_bytes`,
//! counting both waiting and in-flight batches, and counting the heap each batch holds
//! ([`Batch::heap_bytes`]: a batch filled into a spare may have room it did not use), so the
//! bound is the memory the tier really holds.
//!
//! These are the tier's operations on the queue's [`State`], always called under its lock by
//! [`DestinationQueue`](super::DestinationQueue); one lock per batch, never per datapoint.

use super::core::{Core, Entry, PushOutcome, QueueLimits, State, Tag};
use crate::batch::{Batch, POINT_OVERHEAD};

/// How many leading datapoints of `batch` fit under both bounds of the memory tier. A batch
/// that does not fit whole gives back the room it does not use first, so that its prefix,
/// once split off ([`Batch::split_off`] leaves it exact), holds what is counted here.
pub(super) fn fitting_prefix(limits: &QueueLimits, s: &State, batch: &mut Batch) -> usize {
    let room_points = limits
        .max_datapoints
        .saturating_sub(s.datapoints + s.in_flight);
    let room_bytes = limits.max_bytes.saturating_sub(s.bytes + s.in_flight_bytes);
    if batch.len() <= room_points && batch.heap_bytes() <= room_bytes {
        return batch.len();
    }
    if batch.heap_bytes() > batch.size_bytes() {
        batch.shrink_to_fit();
        if batch.len() <= room_points && batch.heap_bytes() <= room_bytes {
            return batch.len();
        }
    }
    let mut bytes = 0;
    let mut n = 0;
    for dp in batch.iter().take(room_points) {
        let b = dp.name.len() + POINT_OVERHEAD;
        if bytes + b > room_bytes {
            break;
        }
        bytes += b;
        n += 1;
    }
    n
}

/// Appends `batch` (newly accepted) to the memory tier and wakes the consumer.
pub(super) fn enqueue(core: &Core, s: &mut State, batch: Batch, out: &mut PushOutcome) {
    let n = batch.len();
    if n > 0 {
        let position = s.take_positions(n);
        s.datapoints += n;
        s.bytes += batch.heap_bytes();
        s.batches.push_back(Entry {
            batch,
            from_disk: false,
            position,
        });
        out.accepted += n;
        out.mark = s.next_position;
    }
    core.publish(s);
    if n > 0 {
        core.ready.notify_one();
    }
}

/// Evicts waiting batches, oldest first, until `fits(s)` says `want` datapoints fit. Returns
/// how many datapoints were evicted, and how many records replayed from the spill log the log
/// can now acknowledge: an evicted record is counted as dropped, so it must not be replayed
/// again after a restart.
pub(super) fn evict_oldest(
    s: &mut State,
    want: usize,
    mut fits: impl FnMut(&State) -> usize,
) -> (usize, usize) {
    let mut evicted = 0;
    let mut left_disk = false;
    while fits(s) < want {
        let Some(old) = s.batches.pop_front() else {
            break;
        };
        s.datapoints -= old.batch.len();
        s.bytes -= old.batch.heap_bytes();
        evicted += old.batch.len();
        if old.from_disk {
            left_disk = true;
            insert_sorted(&mut s.disk_left, old.position);
        }
    }
    let disk_records = if left_disk { disk_records_done(s) } else { 0 };
    (evicted, disk_records)
}

/// Moves the oldest waiting batch in flight.
pub(super) fn pop_front(s: &mut State) -> Option<Batch> {
    let e = s.batches.pop_front()?;
    let (n, bytes) = (e.batch.len(), e.batch.heap_bytes());
    s.datapoints -= n;
    s.bytes -= bytes;
    s.in_flight += n;
    s.in_flight_bytes += bytes;
    s.tags.push_back(Tag {
        points: n,
        bytes,
        from_disk: e.from_disk,
        position: e.position,
    });
    Some(e.batch)
}

/// The oldest in-flight batches holding `datapoints` were written; returns how many of them
/// were records replayed from the spill log (to acknowledge there).
pub(super) fn ack(s: &mut State, datapoints: usize) -> usize {
    let mut left = datapoints;
    let mut disk_records = 0;
    while left > 0 {
        let Some(t) = s.tags.pop_front() else {
            break;
        };
        left = left.saturating_sub(t.points);
        s.in_flight -= t.points;
        s.in_flight_bytes -= t.bytes;
        if t.from_disk {
            if s.disk_left.is_empty() {
                // Tags are the oldest datapoints held, so this is the log's oldest record.
                disk_records += 1;
            } else {
                insert_sorted(&mut s.disk_left, t.position);
            }
        }
    }
    if !s.disk_left.is_empty() {
        disk_records += disk_records_done(s);
    }
    disk_records
}

/// How many records replayed from the spill log that left the memory tier out of order
/// ([`State::disk_left`]) the log can acknowledge now: the log acknowledges its oldest records
/// first, so only those older than every replayed record still held (in flight or waiting).
/// Scans the tier only while some wait, which takes `drop_oldest` evicting behind a record in
/// flight.
pub(super) fn disk_records_done(s: &mut State) -> usize {
    let oldest_held = s
        .tags
        .iter()
        .find(|t| t.from_disk)
        .map(|t| t.position)
        .or_else(|| s.batches.iter().find(|e| e.from_disk).map(|e| e.position));
    let done = match oldest_held {
        Some(p) => s.disk_left.partition_point(|&left| left < p),
        None => s.disk_left.len(),
    };
    s.disk_left.drain(..done);
    done
}

/// Inserts `position` into `positions`, kept in ascending order.
pub(super) fn insert_sorted(positions: &mut std::collections::VecDeque<u64>, position: u64) {
    let at = positions.partition_point(|&p| p < position);
    positions.insert(at, position);
}

/// In-flight batches go back to the front, oldest first (`batches` are the most recently
/// popped, in pop order).
pub(super) fn requeue(s: &mut State, batches: Vec<Batch>) {
    for batch in batches.into_iter().rev() {
        let tag = s.tags.pop_back().unwrap_or(Tag {
            points: batch.len(),
            bytes: batch.heap_bytes(),
            from_disk: false,
            position: s.oldest_position(),
        });
        s.in_flight = s.in_flight.saturating_sub(tag.points);
        s.in_flight_bytes = s.in_flight_bytes.saturating_sub(tag.bytes);
        s.datapoints += batch.len();
        s.bytes += batch.heap_bytes();
        s.batches.push_front(Entry {
            batch,
            from_disk: tag.from_disk,
            position: tag.position,
        });
    }
}

/// Takes every waiting batch out of the tier.
pub(super) fn drain_waiting(s: &mut State) -> Vec<Entry> {
    let out: Vec<Entry> = s.batches.drain(..).collect();
    s.datapoints = 0;
    s.bytes = 0;
    out
}
