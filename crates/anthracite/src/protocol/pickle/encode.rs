//! The protocol-2 encoder: datapoints → framed pickle messages, as carbon's senders write them.
//!
//! Names go out as `BINUNICODE`, numbers as `BINFLOAT` (bit-exact), without memo opcodes:
//! each entry is a 5-byte head (`X` and the name's length), the name, and a 20-byte tail (two
//! `BINFLOAT`s and two `TUPLE2`s), between a fixed opening and closing per message.

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::{BufMut, BytesMut};

use crate::batch::{Batch, Datapoint, Point};

/// Bytes of an entry besides its name: `X` + u32 length, then `G` + f64, `G` + f64, `TUPLE2`,
/// `TUPLE2`.
const ENTRY_OVERHEAD: usize = 5 + 20;

/// An entry's head: `BINUNICODE` and the name's length.
#[inline(always)]
fn head(name_len: usize) -> [u8; 5] {
    let mut head = [b'X', 0, 0, 0, 0];
    head[1..].copy_from_slice(&(name_len as u32).to_le_bytes());
    head
}

/// An entry's tail: `(timestamp, value)` as two `BINFLOAT`s, then the two tuples.
#[inline(always)]
fn tail(timestamp: f64, value: f64) -> [u8; 20] {
    let mut tail = [
        b'G', 0, 0, 0, 0, 0, 0, 0, 0, b'G', 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0x86,
    ];
    tail[1..9].copy_from_slice(&timestamp.to_be_bytes());
    tail[10..18].copy_from_slice(&value.to_be_bytes());
    tail
}

/// Appends one entry, checking the buffer's room on each of its three parts.
#[inline]
fn put_entry(dp: Datapoint<'_>, out: &mut BytesMut) {
    out.reserve(ENTRY_OVERHEAD + dp.name.len());
    out.extend_from_slice(&head(dp.name.len()));
    out.extend_from_slice(dp.name);
    out.extend_from_slice(&tail(dp.timestamp, dp.value));
}

/// One message being written: opened by [`begin`](Self::begin), filled with entries, closed
/// by [`finish`](Self::finish) (which writes the length in front).
#[derive(Debug)]
pub(crate) struct MessageWriter {
    /// Where the message's length field is in the buffer.
    start: usize,
    /// Entries written.
    entries: usize,
}

impl MessageWriter {
    /// Opens a message at the end of `out`: a length to be filled in, `PROTO 2`,
    /// `EMPTY_LIST`, `MARK`.
    pub(crate) fn begin(out: &mut BytesMut) -> Self {
        let start = out.len();
        out.put_u32(0);
        out.put_slice(b"\x80\x02](");
        Self { start, entries: 0 }
    }

    /// Entries written so far.
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    /// Appends one entry.
    pub(crate) fn put(&mut self, dp: Datapoint<'_>, out: &mut BytesMut) {
        put_entry(dp, out);
        self.entries += 1;
    }

    /// Appends the datapoints `range` of `batch` (a range past its end is cut to it). The
    /// room for all of them is made once and each entry written into it whole, with one check
    /// of room per entry, not one per part.
    pub(crate) fn put_run(&mut self, batch: &Batch, range: Range<usize>, out: &mut BytesMut) {
        let points = batch.points();
        let end = range.end.min(points.len());
        let points = points.get(range.start.min(end)..end).unwrap_or_default();
        out.reserve(points.len() * ENTRY_OVERHEAD + Point::run_name_bytes(points));
        let room = out.spare_capacity_mut();
        let mut filled = 0;
        let mut written = 0;
        for p in points {
            let dp = batch.view(p);
            let Some(entry) = fill_entry(room, filled, dp) else {
                break;
            };
            filled = entry;
            written += 1;
        }
        let len = out.len() + filled;
        // SAFETY: `fill_entry` wrote every byte of `room[..filled]` (each entry the bytes from
        // where the previous one ended up to where it ends), and `room` is the buffer's spare
        // capacity, starting right at its length.
        unsafe { out.set_len(len) };
        // Never taken: the room made holds every entry. Were it short, the rest still goes
        // out, checked part by part.
        for p in &points[written..] {
            put_entry(batch.view(p), out);
        }
        self.entries += points.len();
    }

    /// Closes the message: `APPENDS` and `STOP` (with no entries, the `MARK` gives way to
    /// `STOP`, as Python writes an empty list), then its length in front.
    pub(crate) fn finish(self, out: &mut BytesMut) {
        if self.entries == 0 {
            out.truncate(out.len() - 1); // the MARK
            out.put_u8(b'.');
        } else {
            out.put_slice(b"e.");
        }
        let len = (out.len() - self.start - 4) as u32;
        out[self.start..self.start + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// Writes `dp`'s entry into `room` from `at`; returns where it ends, or `None` (nothing
/// written) when it does not fit.
#[inline(always)]
fn fill_entry(room: &mut [MaybeUninit<u8>], at: usize, dp: Datapoint<'_>) -> Option<usize> {
    let end = at + ENTRY_OVERHEAD + dp.name.len();
    let entry = room.get_mut(at..end)?;
    let (h, rest) = entry.split_first_chunk_mut::<5>()?;
    let (name, t) = rest.split_last_chunk_mut::<20>()?;
    write_bytes(h, &head(dp.name.len()));
    write_bytes(name, dp.name);
    write_bytes(t, &tail(dp.timestamp, dp.value));
    Some(end)
}

/// Copies `src` into `dst`, which is exactly as long (what `<[MaybeUninit<u8>]>::
/// write_copy_of_slice` does, stable only from Rust 1.93, past the crate's minimum version).
#[inline(always)]
fn write_bytes(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "every caller sizes dst as src");
    // SAFETY: `dst` is valid for `src.len()` writes (the lengths are equal, checked above),
    // `MaybeUninit<u8>` has the layout of `u8`, and a shared and a unique borrow cannot
    // overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), src.len());
    }
}

/// Appends one framed message (4-byte big-endian length + protocol-2 pickle of
/// `[(name, (timestamp, value)), …]`) holding every datapoint of `points`.
///
/// Names go out as `BINUNICODE`, numbers as `BINFLOAT` (bit-exact), without memo opcodes.
pub fn encode_message<'a>(points: impl Iterator<Item = Datapoint<'a>>, out: &mut BytesMut) {
    let mut message = MessageWriter::begin(out);
    for dp in points {
        message.put(dp, out);
    }
    message.finish(out);
}
