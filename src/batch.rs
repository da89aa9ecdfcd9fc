//! Batches of datapoints: the unit that moves between stages.
//!
//! A [`Batch`] packs every metric name into one byte buffer and keeps fixed-size [`Point`]
//! records beside it, so building a batch of a thousand datapoints costs two growing vectors,
//! not a thousand allocations. Batches are built per connection (or per Kinesis record), one per
//! destination, and moved whole into that destination's queue.
//!
//! Offsets into the name buffer are `u32`, so a batch holds at most [`MAX_NAME_BYTES`] bytes of
//! names: [`Batch::push`] and [`Batch::append`] refuse what would pass it ([`BatchFull`]), and
//! the ingestor starts a new batch long before (it hands batches over every few MiB).

use std::mem::size_of;

/// One datapoint inside a [`Batch`]: where its name lives in the name buffer, and its numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    name_start: u32,
    name_len: u32,
    /// Seconds since the epoch, as carbon keeps it (a float).
    pub timestamp: f64,
    /// The value, as carbon keeps it (a float, never NaN once accepted).
    pub value: f64,
}

/// A borrowed view of one datapoint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Datapoint<'a> {
    /// The metric name exactly as received (UTF-8, tags included verbatim).
    pub name: &'a [u8],
    /// Seconds since the epoch.
    pub timestamp: f64,
    /// The value.
    pub value: f64,
}

/// Fixed per-datapoint overhead counted against queue byte bounds, besides the name itself.
pub const POINT_OVERHEAD: usize = size_of::<Point>();

/// Most bytes of names one batch holds (its offsets are `u32`).
pub const MAX_NAME_BYTES: usize = u32::MAX as usize;

/// A batch cannot take more names: its name buffer would pass [`MAX_NAME_BYTES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("batch full: its names would pass {MAX_NAME_BYTES} bytes")]
pub struct BatchFull;

/// A run of datapoints bound for one destination, names packed in one buffer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    names: Vec<u8>,
    points: Vec<Point>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch with room for `points` datapoints and `name_bytes` bytes of names.
    pub fn with_capacity(points: usize, name_bytes: usize) -> Self {
        Self {
            names: Vec::with_capacity(name_bytes),
            points: Vec::with_capacity(points),
        }
    }

    /// Appends one datapoint, copying its name into the batch's buffer; refuses it when the
    /// batch's names would pass [`MAX_NAME_BYTES`].
    #[inline]
    pub fn push(&mut self, name: &[u8], timestamp: f64, value: f64) -> Result<(), BatchFull> {
        let end = self.names.len() + name.len();
        if end > MAX_NAME_BYTES {
            return Err(BatchFull);
        }
        // Both fit in u32: end <= MAX_NAME_BYTES.
        let name_start = self.names.len() as u32;
        self.names.extend_from_slice(name);
        self.points.push(Point {
            name_start,
            name_len: name.len() as u32,
            timestamp,
            value,
        });
        Ok(())
    }

    /// Number of datapoints.
    #[inline]
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when the batch holds no datapoint.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Bytes this batch counts against a queue's byte bound: names plus per-point overhead.
    #[inline]
    pub fn size_bytes(&self) -> usize {
        self.names.len() + self.points.len() * POINT_OVERHEAD
    }

    /// Bytes of names alone.
    #[inline]
    pub fn name_bytes(&self) -> usize {
        self.names.len()
    }

    /// The datapoint at `index`.
    #[inline]
    pub fn get(&self, index: usize) -> Option<Datapoint<'_>> {
        self.points.get(index).map(|p| self.view(p))
    }

    #[inline]
    fn view(&self, p: &Point) -> Datapoint<'_> {
        let start = p.name_start as usize;
        Datapoint {
            name: &self.names[start..start + p.name_len as usize],
            timestamp: p.timestamp,
            value: p.value,
        }
    }

    /// Iterates over the datapoints in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Datapoint<'_>> + '_ {
        self.points.iter().map(move |p| self.view(p))
    }

    /// Empties the batch, keeping its buffers for reuse.
    pub fn clear(&mut self) {
        self.names.clear();
        self.points.clear();
    }

    /// Splits the batch at `at`: `self` keeps `[0, at)`, the returned batch holds `[at, len)`.
    pub fn split_off(&mut self, at: usize) -> Batch {
        if at >= self.points.len() {
            return Batch::new();
        }
        let tail_points = self.points.split_off(at);
        let name_cut = tail_points[0].name_start as usize;
        let tail_names = self.names.split_off(name_cut);
        let points = tail_points
            .into_iter()
            .map(|mut p| {
                p.name_start -= name_cut as u32;
                p
            })
            .collect();
        Batch {
            names: tail_names,
            points,
        }
    }

    /// Copies every datapoint of `other` to the end of `self`; refuses (and copies nothing)
    /// when the names would pass [`MAX_NAME_BYTES`].
    pub fn append(&mut self, other: &Batch) -> Result<(), BatchFull> {
        if self.names.len() + other.names.len() > MAX_NAME_BYTES {
            return Err(BatchFull);
        }
        let base = self.names.len() as u32;
        self.names.extend_from_slice(&other.names);
        self.points.extend(other.points.iter().map(|p| Point {
            name_start: p.name_start + base,
            ..*p
        }));
        Ok(())
    }

    /// Takes the batch's contents, trimmed to what it holds, leaving an empty batch with room
    /// for a quarter more than it held.
    ///
    /// A taken batch usually goes into a destination queue, whose bounds count what batches
    /// hold ([`size_bytes`](Self::size_bytes)): handing over the slack a vector's doubling
    /// leaves (up to half of it) would let a queue's memory pass its bound. Shrinking a heap
    /// block in place is cheap (the allocator splits it, nothing is copied). Sizing the next
    /// batch after this one, not after the largest ever, keeps a burst from making every later
    /// batch carry its capacity.
    pub fn take(&mut self) -> Batch {
        let points = self.points.len();
        let names = self.names.len();
        self.points.shrink_to_fit();
        self.names.shrink_to_fit();
        std::mem::replace(
            self,
            Batch::with_capacity(points + points / 4, names + names / 4),
        )
    }

    /// Bytes of heap this batch holds (its vectors' capacities).
    #[cfg(test)]
    fn capacity_bytes(&self) -> usize {
        self.names.capacity() + self.points.capacity() * size_of::<Point>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(b: &Batch) -> Vec<&[u8]> {
        b.iter().map(|d| d.name).collect()
    }

    #[test]
    fn taken_batches_hold_no_slack_and_the_next_is_sized_after_them() {
        let mut b = Batch::new();
        for round in [3000, 10, 600] {
            for i in 0..round {
                b.push(format!("host.{i}.cpu").as_bytes(), 1.0, 2.0)
                    .expect("room");
            }
            let taken = b.take();
            assert_eq!(taken.len(), round);
            // What a queue counts (names + overhead per point) is what it holds.
            assert_eq!(taken.capacity_bytes(), taken.size_bytes());
            // Not the capacity of the largest batch ever: a quarter more than the last.
            assert_eq!(b.points.capacity(), round + round / 4);
        }
    }

    #[test]
    fn push_iter_split_append_keep_order_and_bytes() {
        let mut b = Batch::new();
        b.push(b"a.b", 1.0, 2.0).expect("room");
        b.push(b"c", 3.0, 4.0).expect("room");
        b.push(b"dd.e", 5.0, 6.0).expect("room");
        assert_eq!(b.len(), 3);
        assert_eq!(b.size_bytes(), 8 + 3 * POINT_OVERHEAD);
        let tail = b.split_off(1);
        assert_eq!(names(&b), vec![&b"a.b"[..]]);
        assert_eq!(names(&tail), vec![&b"c"[..], &b"dd.e"[..]]);
        assert_eq!(tail.get(1).map(|d| d.value), Some(6.0));
        b.append(&tail).expect("room");
        assert_eq!(names(&b), vec![&b"a.b"[..], &b"c"[..], &b"dd.e"[..]]);
        assert!(b.split_off(3).is_empty());
    }

    #[test]
    fn batch_offsets_cannot_overflow_u32() {
        // Zeroed allocations are lazily mapped: 4 GiB of address space, no 4 GiB of memory.
        // Nothing here copies the huge name: every push of it is refused before copying.
        let huge = vec![0u8; MAX_NAME_BYTES + 1];
        let mut empty = Batch::new();
        assert_eq!(empty.push(&huge, 1.0, 1.0), Err(BatchFull));
        assert!(empty.is_empty());
        let mut b = Batch::new();
        b.push(b"a", 1.0, 1.0).expect("room");
        assert_eq!(b.push(&huge[..MAX_NAME_BYTES], 2.0, 2.0), Err(BatchFull));
        assert_eq!(b.len(), 1, "a refused push leaves the batch as it was");
        assert_eq!(b.get(0).map(|d| d.name), Some(&b"a"[..]));
    }
}
