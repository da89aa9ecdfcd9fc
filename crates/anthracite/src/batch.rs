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
pub(crate) struct Point {
    name_start: u32,
    name_len: u32,
    /// Seconds since the epoch, as carbon keeps it (a float).
    pub timestamp: f64,
    /// The value, as carbon keeps it (a float, never NaN once accepted).
    pub value: f64,
}

impl Point {
    /// Bytes of the names of `run`, consecutive datapoints of one batch: a batch packs names
    /// in the order of their datapoints, so theirs are one span of its name buffer, from the
    /// first one's start to the last one's end (no pass over the run).
    #[inline]
    pub(crate) fn run_name_bytes(run: &[Point]) -> usize {
        match (run.first(), run.last()) {
            (Some(first), Some(last)) => (last.name_start as usize + last.name_len as usize)
                .saturating_sub(first.name_start as usize),
            _ => 0,
        }
    }
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

/// The value that marks a *verbatim line*: a datapoint whose name holds a whole plaintext line
/// (without its newline) that a line destination writes unchanged. carbon-c-relay
/// configurations route lines, not datapoints (their value and timestamp text travel as
/// received); no accepted datapoint has this value, since NaN values are dropped on receipt.
pub(crate) const VERBATIM: f64 = f64::from_bits(0x7ff8_0000_c0d3_0001);

impl Datapoint<'_> {
    /// True when this is a verbatim line (a carbon-c-relay configuration's): `name` is the
    /// whole line, which a plaintext destination writes unchanged.
    #[inline]
    pub fn is_verbatim(&self) -> bool {
        self.value.to_bits() == VERBATIM.to_bits()
    }
}

/// Fixed per-datapoint overhead counted against queue byte bounds, besides the name itself.
pub const POINT_OVERHEAD: usize = size_of::<Point>();

/// Most bytes of names one batch holds (its offsets are `u32`).
pub(crate) const MAX_NAME_BYTES: usize = u32::MAX as usize;

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

    /// Makes room for `points` more datapoints with `name_bytes` more bytes of names.
    pub fn reserve(&mut self, points: usize, name_bytes: usize) {
        self.points.reserve(points);
        self.names.reserve(name_bytes);
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

    /// Bytes of the datapoints themselves: names plus per-point overhead (what the spill log
    /// and writes count; a queue's memory tier counts [`heap_bytes`](Self::heap_bytes)).
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

    /// The datapoints' records, in order (each one's name through [`view`](Self::view)).
    #[inline]
    pub(crate) fn points(&self) -> &[Point] {
        &self.points
    }

    /// The datapoint `p` (one of [`points`](Self::points)) describes.
    #[inline]
    pub(crate) fn view(&self, p: &Point) -> Datapoint<'_> {
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
    /// Both hold no more memory than their datapoints need (a queue counts what they hold,
    /// see [`heap_bytes`](Self::heap_bytes)).
    pub fn split_off(&mut self, at: usize) -> Batch {
        if at >= self.points.len() {
            return Batch::new();
        }
        let tail_points = self.points.split_off(at);
        let name_cut = tail_points[0].name_start as usize;
        let tail_names = self.names.split_off(name_cut);
        self.shrink_to_fit();
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

    /// Takes the batch's contents, leaving an empty batch that holds no memory (a pending
    /// batch gets a queue's spare when next filled, see
    /// [`DestinationQueue::spare`](crate::queue::DestinationQueue::spare)).
    ///
    /// A taken batch usually goes into a destination queue, whose memory tier counts the heap
    /// its batches hold ([`heap_bytes`](Self::heap_bytes)), room they did not fill included.
    /// A batch that used less than an eighth of its room (a few datapoints in a large spare)
    /// is shrunk first (in place: the allocator splits the block, nothing is copied), so it
    /// does not take a queue's room for memory it does not use.
    pub fn take(&mut self) -> Batch {
        let mut taken = std::mem::take(self);
        if taken.heap_bytes() > 8 * taken.size_bytes() {
            taken.shrink_to_fit();
        }
        taken
    }

    /// Gives back the room the batch does not use: afterwards [`heap_bytes`](Self::heap_bytes)
    /// is [`size_bytes`](Self::size_bytes).
    pub fn shrink_to_fit(&mut self) {
        self.names.shrink_to_fit();
        self.points.shrink_to_fit();
    }

    /// True when one more datapoint with a name of `name_len` bytes fits in the room the batch
    /// already holds, without growing (and so moving) either buffer.
    #[inline]
    pub(crate) fn has_room_for(&self, name_len: usize) -> bool {
        self.points.len() < self.points.capacity()
            && self.names.capacity() - self.names.len() >= name_len
    }

    /// True while the batch holds no memory (never filled, or taken).
    #[inline]
    pub fn is_unallocated(&self) -> bool {
        self.points.capacity() == 0
    }

    /// Bytes of heap this batch holds: its vectors' capacities, counted as
    /// [`size_bytes`](Self::size_bytes) counts them (a name byte is a byte, a datapoint
    /// [`POINT_OVERHEAD`]). At least `size_bytes`; what a queue's memory tier counts.
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        self.names.capacity() + self.points.capacity() * POINT_OVERHEAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_name_bytes_are_its_names_after_split_and_append() {
        let mut b = Batch::new();
        for i in 0..40 {
            b.push(&vec![b'x'; i * 7 % 23], 1.0, 2.0).expect("room");
        }
        let mut tail = b.split_off(13);
        tail.append(&b).expect("room");
        for batch in [&b, &tail] {
            let points = batch.points();
            for start in 0..points.len() {
                for end in start..=points.len() {
                    let run = &points[start..end];
                    let sum: usize = run.iter().map(|p| p.name_len as usize).sum();
                    assert_eq!(Point::run_name_bytes(run), sum, "{start}..{end}");
                }
            }
        }
    }

    fn names(b: &Batch) -> Vec<&[u8]> {
        b.iter().map(|d| d.name).collect()
    }

    #[test]
    fn taken_batches_use_at_least_an_eighth_of_their_room_and_leave_nothing_allocated() {
        let mut b = Batch::new();
        for round in [3000, 10, 600, 2000, 1] {
            // Filled into the memory of a larger batch (a queue's spare), or grown from
            // nothing.
            if round == 600 || round == 1 {
                b = Batch::with_capacity(4000, 64 << 10);
            }
            for i in 0..round {
                b.push(format!("host.{i}.cpu").as_bytes(), 1.0, 2.0)
                    .expect("room");
            }
            let taken = b.take();
            assert_eq!(taken.len(), round);
            let (size, heap) = (taken.size_bytes(), taken.heap_bytes());
            assert!(
                size <= heap && heap <= 8 * size,
                "{round}: {heap} for {size}"
            );
            if round == 1 {
                // One datapoint does not keep a spare's room.
                assert_eq!(heap, size);
            }
            if round == 600 {
                // An eighth or more of it used: kept whole, counted whole.
                assert_eq!(heap, 64 * 1024 + 4000 * POINT_OVERHEAD);
            }
            assert!(b.is_unallocated());
            assert_eq!(b.heap_bytes(), 0);
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
        // Both parts hold only what they need.
        assert_eq!(b.heap_bytes(), b.size_bytes());
        assert_eq!(tail.heap_bytes(), tail.size_bytes());
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
