//! A client connection's read buffer, and what bounds it.
//!
//! - **While the client sends**, the buffer is [`READ_BUFFER`] (64 KiB): reads are large, and
//!   consumed bytes are reclaimed in place (no allocation per read).
//! - **While the client is silent**, it holds nothing: an empty buffer is released before the
//!   connection waits for data, so ten thousand idle clients cost no buffers.
//! - **While the connection waits for a queue's room** (its flush held back by a full
//!   queue), it holds only what it has not consumed (a partial line or frame), in an
//!   allocation of that size: a thousand clients held back hold their remainders, not a read
//!   buffer each.
//! - **A pickle frame larger than the buffer** is read into an allocation of exactly its
//!   size, paid for from the relay-wide frame budget (`listen.max_frame_buffer_bytes`, a
//!   semaphore of bytes): the connection waits for room before reading such a frame, and
//!   gives the room back as soon as the frame is consumed. A plaintext line is bounded per
//!   connection by `listen.max_line_length`.
//!
//! Every change of size is reported to the ingest books ([`IngestStats::buffer_resized`]),
//! so `buffered_bytes` is the memory the receive buffers hold, not an estimate.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::sync::OwnedSemaphorePermit;

use crate::ingest::IngestStats;

/// A connection's read buffer while its client is sending.
pub const READ_BUFFER: usize = 64 << 10;

/// Least free room for a read.
const MIN_READ: usize = READ_BUFFER / 4;

/// Most unconsumed bytes a connection held back by a full queue keeps, in an allocation of
/// their own size, instead of its read buffer.
pub const MAX_COMPACT: usize = READ_BUFFER / 16;

/// A connection's read buffer with its accounting; see the [module documentation](self).
#[derive(Debug)]
pub(crate) struct ReadBuffer {
    buf: BytesMut,
    /// Bytes allocated (what the books were told).
    allocated: usize,
    /// Frame budget held for an allocation over [`READ_BUFFER`].
    budget: Option<OwnedSemaphorePermit>,
    /// The socket had nothing waiting when last tried, and nothing was read since: the next
    /// read waits for readiness instead of trying first.
    drained: bool,
    stats: Arc<IngestStats>,
}

impl ReadBuffer {
    /// An empty buffer (nothing allocated yet) reporting to `stats`.
    pub(crate) fn new(stats: Arc<IngestStats>) -> Self {
        Self {
            buf: BytesMut::new(),
            allocated: 0,
            budget: None,
            drained: false,
            stats,
        }
    }

    /// The bytes received and not yet consumed.
    pub(crate) fn bytes(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// True when the last read filled all the room it had: the client may have more waiting.
    pub(crate) fn is_full(&self) -> bool {
        self.buf.len() == self.buf.capacity()
    }

    /// Bytes waiting to be consumed.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing waits to be consumed.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Bytes allocated now.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated
    }

    fn set_allocated(&mut self, bytes: usize) {
        let old = std::mem::replace(&mut self.allocated, bytes);
        self.stats
            .buffer_resized(bytes.saturating_sub(old), old.saturating_sub(bytes));
    }

    /// Notes growth done by the buffer itself (a reserve that reallocated): its capacity right
    /// after the reserve is its whole allocation.
    fn note_capacity(&mut self) {
        let cap = self.buf.capacity();
        if cap > self.allocated {
            self.set_allocated(cap);
        }
    }

    /// Replaces the allocation by one of exactly `capacity` bytes holding the same data.
    fn reallocate(&mut self, capacity: usize) {
        let mut fresh = BytesMut::with_capacity(capacity);
        fresh.extend_from_slice(&self.buf);
        self.buf = fresh;
        self.set_allocated(self.buf.capacity());
    }

    /// Makes room for a read: at least a quarter of [`READ_BUFFER`] free, reclaiming consumed
    /// bytes in place where possible. While a large frame holds budget its allocation is
    /// exact and is only filled up.
    pub(crate) fn prepare_read(&mut self) {
        if self.budget.is_some() && self.buf.capacity() > self.buf.len() {
            return;
        }
        let len = self.buf.len();
        if self.buf.capacity() - len >= MIN_READ {
            return;
        }
        let want = READ_BUFFER.max(len + MIN_READ);
        if self.allocated >= want && self.buf.try_reclaim(want - len) {
            self.note_capacity();
            return;
        }
        self.reallocate(want);
    }

    /// Bytes over [`READ_BUFFER`] a frame of `total` bytes (length prefix included) needs
    /// from the frame budget, if any; `None` when it fits the ordinary buffer or its budget is
    /// already held.
    pub(crate) fn budget_needed(&self, total: usize) -> Option<usize> {
        (total > READ_BUFFER && self.budget.is_none()).then(|| total - READ_BUFFER)
    }

    /// Makes the buffer hold a whole frame of `total` bytes (length prefix included), which
    /// starts at the front of the buffer. A frame over [`READ_BUFFER`] needs `budget` (from
    /// [`budget_needed`](Self::budget_needed)) and gets an allocation of exactly `total`.
    pub(crate) fn reserve_frame(&mut self, total: usize, budget: Option<OwnedSemaphorePermit>) {
        if let Some(permit) = budget {
            self.budget = Some(permit);
            if self.allocated != total {
                self.reallocate(total);
            }
            return;
        }
        if self.buf.capacity() >= total {
            return;
        }
        let want = READ_BUFFER.max(total);
        if self.allocated >= want && self.buf.try_reclaim(want - self.buf.len()) {
            self.note_capacity();
            return;
        }
        self.reallocate(want);
    }

    /// After consuming: gives back a large frame's allocation and budget, and a long line's
    /// growth, once what is left fits the ordinary buffer.
    pub(crate) fn shrink(&mut self) {
        // A frame still arriving keeps its allocation and budget.
        let frame_pending = self.budget.is_some() && !self.buf.is_empty();
        if frame_pending || self.allocated <= READ_BUFFER || self.buf.len() > READ_BUFFER - MIN_READ
        {
            return;
        }
        self.budget = None;
        if self.buf.is_empty() {
            self.release();
        } else {
            self.reallocate(READ_BUFFER);
        }
    }

    /// Before a wait that reads nothing (a flush held back by a full queue): frees the
    /// allocation if nothing is left in it, or moves a small remainder (at most
    /// [`MAX_COMPACT`] bytes) into an allocation of its own size. A large frame's
    /// allocation, and a remainder over that, stay. The next read makes room again.
    pub(crate) fn compact(&mut self) {
        let len = self.buf.len();
        if self.budget.is_some() || len > MAX_COMPACT {
            return;
        }
        if len == 0 {
            self.release_if_empty();
        } else if self.allocated > MAX_COMPACT {
            self.reallocate(len);
        }
    }

    /// Frees the allocation when nothing waits in it (before waiting for a silent client).
    pub(crate) fn release_if_empty(&mut self) {
        if self.buf.is_empty() && self.allocated > 0 {
            self.release();
        }
    }

    fn release(&mut self) {
        self.buf = BytesMut::new();
        self.budget = None;
        self.set_allocated(0);
    }

    /// Notes what a read did to the allocation (a read into a full buffer may grow it).
    pub(crate) fn after_read(&mut self) {
        self.drained = false;
        self.note_capacity();
    }

    /// Notes that the socket had nothing waiting, and releases an empty buffer.
    pub(crate) fn note_drained(&mut self) {
        self.drained = true;
        self.release_if_empty();
    }

    /// True once after [`note_drained`](Self::note_drained) with no read since.
    pub(crate) fn take_drained(&mut self) -> bool {
        std::mem::take(&mut self.drained)
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        self.set_allocated(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;

    #[test]
    fn large_frame_allocation_is_exact_budgeted_and_given_back() {
        let stats = Arc::new(IngestStats::new());
        let budget = Arc::new(Semaphore::new(4 << 20));
        let mut rb = ReadBuffer::new(stats.clone());
        rb.prepare_read();
        assert_eq!(rb.allocated(), READ_BUFFER);
        rb.bytes().extend_from_slice(&[0, 16, 0, 0]);
        let total = 4 + (1 << 20);
        let need = rb.budget_needed(total).expect("over the buffer");
        let permit = budget
            .clone()
            .try_acquire_many_owned(need as u32)
            .expect("budget");
        rb.reserve_frame(total, Some(permit));
        assert_eq!(rb.allocated(), total);
        // Still arriving: the frame keeps its allocation.
        rb.shrink();
        assert_eq!(rb.allocated(), total);
        assert_eq!(stats.snapshot().buffered_bytes, total as u64);
        assert_eq!(budget.available_permits(), (4 << 20) - need);
        // The frame arrives and is consumed.
        rb.bytes().resize(total, 0);
        rb.prepare_read();
        bytes::Buf::advance(rb.bytes(), total);
        rb.shrink();
        assert_eq!(rb.allocated(), 0);
        assert_eq!(budget.available_permits(), 4 << 20);
        assert_eq!(stats.snapshot().buffered_bytes, 0);
    }

    #[test]
    fn consumed_bytes_are_reclaimed_in_place_and_idle_buffers_released() {
        let stats = Arc::new(IngestStats::new());
        let mut rb = ReadBuffer::new(stats.clone());
        for _ in 0..100 {
            rb.prepare_read();
            let full = rb.bytes().capacity();
            rb.bytes().resize(full, b'x');
            rb.after_read();
            let keep = 10;
            let consumed = rb.len() - keep;
            bytes::Buf::advance(rb.bytes(), consumed);
            rb.shrink();
            assert_eq!(rb.allocated(), READ_BUFFER);
        }
        assert_eq!(stats.snapshot().buffered_bytes, READ_BUFFER as u64);
        // Waiting for a queue's room, it holds only the remainder.
        rb.compact();
        assert_eq!(rb.allocated(), 10);
        assert_eq!(rb.bytes().as_ref(), b"xxxxxxxxxx");
        assert_eq!(stats.snapshot().buffered_bytes, 10);
        // And reads on into a whole buffer again, the remainder first.
        rb.prepare_read();
        assert_eq!(rb.allocated(), READ_BUFFER);
        assert_eq!(rb.bytes().as_ref(), b"xxxxxxxxxx");
        bytes::Buf::advance(rb.bytes(), 5);
        rb.compact();
        assert_eq!(rb.allocated(), 5);
        bytes::Buf::advance(rb.bytes(), 5);
        rb.compact();
        assert_eq!(rb.allocated(), 0);
        rb.prepare_read();
        assert_eq!(rb.allocated(), READ_BUFFER);
        rb.release_if_empty();
        assert_eq!(stats.snapshot().buffered_bytes, 0);
        drop(rb);
        assert_eq!(stats.snapshot().buffered_bytes, 0);
    }
}
