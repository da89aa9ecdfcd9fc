//! Hand-over: batches waiting in one destination's queue move to another destination's queue.
//!
//! carbon-c-relay's `any_of` and `failover` clusters (and `dynamic` rings) move what a member
//! that is down still holds to the other members (`server.c`'s secondaries); the relay decides
//! when and to whom (`relay::c_relay_hand_over`), the queues do the move, here, so that it is
//! exact:
//!
//! - **Only waiting batches move**, oldest first. In-flight batches belong to the destination
//!   task: once handed back after a failed write they are waiting again and can move then.
//!   A moved datapoint has left its first queue for good, so it is never also sent by the
//!   first destination when it returns.
//! - **Bounded by the receiver.** A move takes only what fits under the receiver's memory
//!   bounds (`max_datapoints`, `max_bytes`), never its full policy: nothing is dropped or
//!   spilled by a move, and what does not fit stays where it was. A receiver in disk mode
//!   (something in its spill log) takes nothing: it is behind its own input already, and its
//!   memory tier then holds what it replays.
//! - **Records replayed from the spill log** move whole, and are acknowledged in the first
//!   destination's log once moved (as an eviction acknowledges them): the receiver holds them
//!   now, in memory, or in its own spill log at shutdown. A down destination's log thus drains
//!   through its replay into the other members, at the log's `replay_rate`.
//! - **Counted on both sides**: `moved_out` on the first destination and `moved_in` on the
//!   receiver, so that for every destination
//!   `routed + moved_in = sent + dropped + queued + moved_out`.
//!
//! Both queues' locks are held for the move, taken in the order of the queues' addresses, and
//! nothing else holds two queue locks: moves in opposite directions cannot deadlock.

use std::sync::Arc;

use super::DestinationQueue;
use super::core::{PushOutcome, State};
use super::memory;

impl DestinationQueue {
    /// Moves up to `max` datapoints waiting in this queue's memory tier, oldest first, to
    /// `to`'s memory tier, as far as they fit under `to`'s bounds (see the module
    /// documentation); returns how many moved. A record replayed from the spill log moves
    /// whole, so the last one may pass `max`. Nothing moves to the queue itself, to a closed
    /// queue, or to one with data in its disk tier.
    pub fn hand_over(&self, to: &DestinationQueue, max: usize) -> usize {
        if Arc::ptr_eq(&self.core, &to.core) || max == 0 {
            return 0;
        }
        // Both locks, always in address order: two moves in opposite directions cannot
        // deadlock.
        let (mut s, mut r) = if Arc::as_ptr(&self.core) < Arc::as_ptr(&to.core) {
            let s = self.core.lock();
            (s, to.core.lock())
        } else {
            let r = to.core.lock();
            (self.core.lock(), r)
        };
        if r.closed || r.disk_points > 0 {
            return 0;
        }
        if s.batches.is_empty() {
            // A member down since it entered disk mode holds everything in its spill log:
            // nothing pops to ask for a replay, so the hand-over does.
            drop(r);
            self.maybe_replay(&mut s);
            return 0;
        }
        let mut moved = 0;
        let mut disk_moved = false;
        let mut out = PushOutcome::default();
        let st: &mut State = &mut s;
        while moved < max {
            let Some(front) = st.batches.front_mut() else {
                break;
            };
            let held = front.batch.heap_bytes();
            let fits = memory::fitting_prefix(&to.core.limits, &r, &mut front.batch);
            let len = front.batch.len();
            let want = match front.from_disk {
                // A record of the spill log moves whole or not at all.
                true if fits >= len => len,
                true => 0,
                false => fits.min(max - moved),
            };
            let whole = want == len;
            if want == 0 {
                // The prefix check may have given back unused room: the tier counts it.
                st.bytes = st.bytes - held + front.batch.heap_bytes();
                break;
            }
            let batch = if whole {
                let Some(e) = st.batches.pop_front() else {
                    break;
                };
                st.bytes -= held;
                if e.from_disk {
                    disk_moved = true;
                    memory::insert_sorted(&mut st.disk_left, e.position);
                }
                e.batch
            } else {
                let rest = front.batch.split_off(want);
                let head = std::mem::replace(&mut front.batch, rest);
                front.position += want as u64;
                st.bytes = st.bytes - held + front.batch.heap_bytes();
                head
            };
            st.datapoints -= batch.len();
            moved += batch.len();
            memory::enqueue(&to.core, &mut r, batch, &mut out);
        }
        drop(r);
        if moved == 0 {
            return 0;
        }
        if disk_moved && let Some(disk) = &self.disk {
            disk.ack(memory::disk_records_done(&mut s));
        }
        self.maybe_replay(&mut s);
        self.core.publish(&s);
        drop(s);
        self.core.stats.add_moved_out(moved as u64);
        to.core.stats.add_moved_in(moved as u64);
        self.core.room_made();
        self.core.settled.notify_waiters();
        moved
    }

    /// Datapoints the memory tier has room for (by its datapoint bound) and whether it has
    /// room for `bytes` more (by its byte bound): how close the queue is to full, for a
    /// cluster deciding whether to offload a member or pass over it.
    pub fn memory_room(&self, bytes: usize) -> (usize, bool) {
        let s = self.core.lock();
        let limits = &self.core.limits;
        let points = limits
            .max_datapoints
            .saturating_sub(s.datapoints + s.in_flight);
        let bytes_ok = s.bytes + s.in_flight_bytes + bytes <= limits.max_bytes;
        (points, bytes_ok)
    }
}
