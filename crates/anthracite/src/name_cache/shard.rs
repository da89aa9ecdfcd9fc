//! One shard of a [`NameCache`](super::NameCache): a segmented log of entries and a
//! linear-probing index over it, read without a lock (module documentation of `cache`).
//!
//! ## Words
//!
//! Everything readers look at is `AtomicU64` (or `AtomicU32`) words, read with relaxed loads
//! (plain loads on x86 and ARM) under the shard's sequence counter, so a reader never writes
//! a shared cache line and a torn read is detected, never acted on. An entry is one header word
//! then the name's bytes followed by the value's bytes, packed little-endian into words:
//!
//! ```text
//! word 0: hash_hi << 32 | key_len << 16 | value_len      words 1..: key bytes, value bytes
//! ```
//!
//! An index slot is `hash_hi << 32 | (location + 1) << 1 | referenced`, `0` meaning empty; a
//! location is `segment << segment_shift | word offset`. The index holds exactly the live
//! entries; an entry replaced by a newer value for the same name is simply no longer pointed
//! at, and eviction skips it.
//!
//! ## Readers and the writer
//!
//! Writers (insertions, evictions) take the shard's mutex and bracket their changes with the
//! sequence counter (odd while writing). A reader loads the counter, probes and copies the
//! value out, then checks that the counter has not moved; if it has, it retries a few times
//! and then reports a miss (the caller computes the value; nothing waits). Memory readers may
//! look at is never freed while the shard lives, so a racing reader can read stale words but
//! never freed ones: segments are allocated once each, and the index grows by doubling into a
//! new table published with a generation number, the smaller tables staying allocated (they
//! sum to less than the current one; the budget reserves room for all of them).
//!
//! The index is sized to the names it holds (load between 3/8 and 3/4), not to the budget: a
//! hundred thousand names take 2 MiB of slots, which stay in the CPU's caches far better than
//! a sparse table sized for the whole budget would.

use std::collections::VecDeque;
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::{ALLOC_OVERHEAD, Lookup, ValueSink};

/// Bytes per word.
const WORD: usize = size_of::<u64>();
/// Smallest segment, in words (512 bytes).
const MIN_SEGMENT_WORDS: usize = 64;
/// A shard needs an open segment, an older one to evict and a spare to copy survivors into.
const MIN_SEGMENTS: usize = 3;
/// First index table, in slots (at most).
const FIRST_SLOTS: usize = 256;
/// Smallest largest index table, in slots.
const MIN_SLOTS: usize = 16;
/// The index tables (all generations) take at most this fraction (1/n) of a shard's budget:
/// the largest table at most half of it, rounded down to a power of two.
const INDEX_SHARE: usize = 3;
/// Smallest admission filter, in 64-bit words.
const MIN_SEEN: usize = 32;
/// The admission filter takes at most this fraction (1/n) of a shard's budget (rounded down to
/// a power of two: a sixteenth for power-of-two budgets).
const SEEN_SHARE: usize = 12;
/// Reads retried this often while a writer changes the shard before a lookup reports a miss.
const READ_ATTEMPTS: usize = 4;
/// Slot bit: looked up since written or last given a second chance.
const REFERENCED: u64 = 1;
/// Most entries, as a fraction of the slots (linear probing stays short below 3/4).
const MAX_LOAD_NUM: usize = 3;
const MAX_LOAD_DEN: usize = 4;

/// A shard's shape, fixed at construction from its budget.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geometry {
    /// `log2` of the segment size in words.
    segment_shift: u32,
    /// Segments (the spare included); 0 disables the shard.
    segments: usize,
    /// Slots of the first index table (a power of two; each generation doubles it).
    first_slots: usize,
    /// Index generations: the largest table has `first_slots << (tables - 1)` slots.
    tables: usize,
    /// Admission-filter words (a power of two).
    seen: usize,
}

impl Geometry {
    /// About a quarter of `budget` for the index, a sixteenth for the admission filter, the
    /// rest in segments of at most `max_segment` bytes, at least `target` of them if possible.
    pub(super) fn for_budget(budget: usize, target: usize, max_segment: usize) -> Self {
        let disabled = Self {
            segment_shift: 0,
            segments: 0,
            first_slots: 0,
            tables: 0,
            seen: 0,
        };
        // All generations together: just under twice the largest.
        let max_slots = pow2_at_most(budget / INDEX_SHARE / WORD / 2);
        let seen = pow2_at_most(budget / SEEN_SHARE / WORD);
        if max_slots < MIN_SLOTS || seen < MIN_SEEN {
            return disabled;
        }
        let first_slots = max_slots.min(FIRST_SLOTS);
        let tables = (max_slots / first_slots).ilog2() as usize + 1;
        let mut segment_words = pow2_at_most(max_segment / WORD).max(MIN_SEGMENT_WORDS);
        while segment_words > MIN_SEGMENT_WORDS && segment_words * WORD * target > budget {
            segment_words /= 2;
        }
        let index =
            index_bytes(first_slots, tables) + tables * size_of::<OnceLock<Box<[AtomicU64]>>>();
        let fixed = index + filter_bytes(seen) + ALLOC_OVERHEAD + bookkeeping(0);
        let mut segments = budget.saturating_sub(fixed) / (segment_words * WORD + per_segment());
        // Locations are 31 bits (plus one for "empty").
        segments = segments.min(((1usize << 31) - 2) / segment_words);
        if segments < MIN_SEGMENTS {
            return disabled;
        }
        Self {
            segment_shift: segment_words.trailing_zeros(),
            segments,
            first_slots,
            tables,
            seen,
        }
    }

    /// True when the budget is too small for a working shard.
    pub(super) fn is_disabled(&self) -> bool {
        self.segments == 0
    }

    fn segment_words(&self) -> usize {
        1 << self.segment_shift
    }
}

/// Bytes of index tables `0..tables` with the allocator's overhead.
fn index_bytes(first_slots: usize, tables: usize) -> usize {
    (0..tables)
        .map(|g| (first_slots << g) * WORD + ALLOC_OVERHEAD)
        .sum()
}

fn pow2_at_most(n: usize) -> usize {
    if n == 0 { 0 } else { 1 << n.ilog2() }
}

/// Bookkeeping bytes of a shard with room for `segments` (its four vectors and their
/// allocations; with 0, only the allocation overheads).
fn bookkeeping(segments: usize) -> usize {
    4 * ALLOC_OVERHEAD + segments * (per_segment() - ALLOC_OVERHEAD)
}

/// Bookkeeping per segment: its slot in the segment table, its fill level, its places in the
/// order and free lists, and the allocator's overhead on the segment itself.
fn per_segment() -> usize {
    size_of::<OnceLock<Box<[AtomicU64]>>>() + 3 * size_of::<u32>() + ALLOC_OVERHEAD
}

/// What only the writer (holding the mutex) touches.
#[derive(Debug)]
struct Writer {
    /// Live entries (= occupied slots).
    entries: usize,
    /// Words used in each segment.
    fill: Vec<u32>,
    /// Segments holding entries, oldest first; the back one is open for appends.
    order: VecDeque<u32>,
    /// Allocated, empty segments.
    free: Vec<u32>,
    /// An allocated, empty segment kept for eviction to copy survivors into.
    spare: Option<u32>,
    /// Segments allocated so far.
    allocated: usize,
}

/// See the module documentation. Aligned so that one shard's counter and mutex never share a
/// cache line with another's.
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct Shard {
    /// Sequence counter: odd while a writer changes the shard.
    seq: AtomicU64,
    /// The current index table (its position in `tables`).
    generation: AtomicUsize,
    /// Index tables by generation, each twice the previous; allocated as the index grows.
    tables: Box<[OnceLock<Box<[AtomicU64]>>]>,
    /// Admission filter, allocated on the shard's first miss (boxed: its counter is written
    /// on misses and must not share a cache line with `seq`).
    seen: OnceLock<Box<Seen>>,
    segments: Box<[OnceLock<Box<[AtomicU64]>>]>,
    geometry: Geometry,
    writer: Mutex<Writer>,
}

impl Shard {
    pub(super) fn new(geometry: Geometry) -> Self {
        let n = geometry.segments;
        Self {
            seq: AtomicU64::new(0),
            generation: AtomicUsize::new(0),
            tables: (0..geometry.tables).map(|_| OnceLock::new()).collect(),
            seen: OnceLock::new(),
            segments: (0..n).map(|_| OnceLock::new()).collect(),
            geometry,
            writer: Mutex::new(Writer {
                entries: 0,
                fill: vec![0; n],
                order: VecDeque::with_capacity(n),
                free: Vec::with_capacity(n),
                spare: None,
                allocated: 0,
            }),
        }
    }

    fn writer(&self) -> MutexGuard<'_, Writer> {
        // The writer keeps the structure consistent between statements that can panic (none
        // of its statements index out of bounds), so a poisoned lock is still sound.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current index table (empty before the first insertion).
    #[inline]
    fn slots(&self) -> &[AtomicU64] {
        let generation = self.generation.load(Ordering::Acquire);
        self.tables
            .get(generation)
            .and_then(OnceLock::get)
            .map_or(&[], |t| t)
    }

    fn seen(&self) -> &Seen {
        self.seen.get_or_init(|| {
            Box::new(Seen {
                added: AtomicUsize::new(0),
                bits: zeroed(self.geometry.seen),
            })
        })
    }

    pub(super) fn len(&self) -> usize {
        self.writer().entries
    }

    /// Every byte this shard has allocated, with the allocator's overhead per allocation.
    pub(super) fn accounted_bytes(&self) -> usize {
        let w = self.writer();
        fn vec_bytes(capacity: usize, item: usize) -> usize {
            if capacity == 0 {
                0
            } else {
                capacity * item + ALLOC_OVERHEAD
            }
        }
        let index = self
            .tables
            .iter()
            .filter_map(OnceLock::get)
            .map(|t| vec_bytes(t.len(), WORD))
            .sum::<usize>()
            + vec_bytes(self.tables.len(), size_of::<OnceLock<Box<[AtomicU64]>>>())
            + self.seen.get().map_or(0, |s| filter_bytes(s.bits.len()));
        let segments = self
            .segments
            .iter()
            .filter_map(OnceLock::get)
            .map(|s| vec_bytes(s.len(), WORD))
            .sum::<usize>();
        vec_bytes(self.segments.len(), size_of::<OnceLock<Box<[AtomicU64]>>>())
            + vec_bytes(w.fill.capacity(), size_of::<u32>())
            + vec_bytes(w.order.capacity(), size_of::<u32>())
            + vec_bytes(w.free.capacity(), size_of::<u32>())
            + index
            + segments
    }

    /// The most this shard will account for.
    #[cfg(test)]
    pub(super) fn budget_bytes(&self) -> usize {
        let g = &self.geometry;
        bookkeeping(g.segments)
            + index_bytes(g.first_slots, g.tables)
            + g.tables * size_of::<OnceLock<Box<[AtomicU64]>>>()
            + ALLOC_OVERHEAD
            + filter_bytes(g.seen)
            + g.segments * (g.segment_words() * WORD + ALLOC_OVERHEAD)
    }

    /// The value cached for `name` into `sink`, marking the entry referenced; on a miss,
    /// whether to admit the name (see [`NameCache::lookup`](super::NameCache::lookup)).
    #[inline]
    pub(super) fn lookup(&self, hash: u64, name: &[u8], sink: &mut impl ValueSink) -> Lookup {
        match self.read_validated(hash, name, sink) {
            Some(Some((slots, at, slot))) => {
                // Written once per lap of the log, not per hit; the exchange leaves a slot
                // a writer has changed since alone.
                if slot & REFERENCED == 0
                    && let Some(s) = slots.get(at)
                {
                    let _ = s.compare_exchange(
                        slot,
                        slot | REFERENCED,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                Lookup::Hit
            }
            Some(None) => Lookup::Miss {
                admit: self.seen().admit(hash),
            },
            None => Lookup::Miss { admit: false },
        }
    }

    /// Whether `name` is cached, its value into `sink`; no side effect (no referenced bit, no
    /// admission).
    pub(super) fn peek(&self, hash: u64, name: &[u8], sink: &mut impl ValueSink) -> bool {
        matches!(self.read_validated(hash, name, sink), Some(Some(_)))
    }

    /// A lookup validated by the sequence counter: `Some(found)` with the table, slot
    /// position and slot value of a hit, `None` when writers kept the shard busy.
    #[inline]
    fn read_validated(
        &self,
        hash: u64,
        name: &[u8],
        sink: &mut impl ValueSink,
    ) -> Option<Option<(&[AtomicU64], usize, u64)>> {
        let hi = (hash >> 32) as u32;
        for _ in 0..READ_ATTEMPTS {
            let seq = self.seq.load(Ordering::Acquire);
            if seq & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let slots = self.slots();
            let found = self.read(slots, hi, name, sink);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == seq {
                return Some(found.map(|(at, slot)| (slots, at, slot)));
            }
        }
        None
    }

    /// Starts loading the home slot of `hash` (see
    /// [`NameCache::prefetch`](super::NameCache::prefetch)).
    #[inline]
    pub(super) fn prefetch_slot(&self, hash: u64) {
        let slots = self.slots();
        let mask = slots.len().saturating_sub(1);
        if let Some(slot) = slots.get((hash >> 32) as usize & mask) {
            prefetch(slot);
        }
    }

    /// Starts loading the header, the last key word and the first value word of the entry the
    /// first slot tagged like `hash` points at (an entry may straddle two cache lines); for a
    /// name not in the index, the admission-filter words its miss will read. Reads the slots
    /// (which [`prefetch_slot`](Self::prefetch_slot) should have brought in).
    #[inline]
    pub(super) fn prefetch_entry(&self, hash: u64, key_len: usize) {
        let slots = self.slots();
        let mask = slots.len().saturating_sub(1);
        let hi = (hash >> 32) as u32;
        let mut at = hi as usize & mask;
        for _ in 0..4 {
            let s = slots.get(at).map_or(0, |s| s.load(Ordering::Relaxed));
            if s == 0 {
                if let Some(seen) = self.seen.get() {
                    seen.prefetch(hash);
                }
                return;
            }
            if (s >> 32) as u32 == hi {
                if let Some((data, offset)) = self.entry(location(s)) {
                    // The header, the key's last word and the value's first word (which
                    // follows the key, often on the next cache line).
                    let last = offset + key_len.div_ceil(WORD);
                    for at in [offset, last, last + 1] {
                        if let Some(word) = data.get(at) {
                            prefetch(word);
                        }
                    }
                }
                return;
            }
            at = (at + 1) & mask;
        }
    }

    /// Probes for `name`; on a match copies the value into `sink` and returns the slot's
    /// position and value. May see a writer's half-done work: the caller validates.
    #[inline]
    fn read(
        &self,
        slots: &[AtomicU64],
        hi: u32,
        name: &[u8],
        sink: &mut impl ValueSink,
    ) -> Option<(usize, u64)> {
        let found = self.find(slots, hi, name)?;
        sink.clear();
        read_bytes(
            found.data,
            found.offset + 1,
            found.header.key_len,
            found.header.value_len,
            sink,
        );
        Some((found.at, found.slot))
    }

    /// Where `name` is indexed, if it is.
    #[inline]
    fn find(&self, slots: &[AtomicU64], hi: u32, name: &[u8]) -> Option<Found<'_>> {
        let mask = slots.len().checked_sub(1)?;
        let mut at = hi as usize & mask;
        // Bounded: a racing writer could leave no empty slot in view.
        for _ in 0..slots.len() {
            let slot = slots.get(at)?.load(Ordering::Relaxed);
            if slot == 0 {
                return None;
            }
            if (slot >> 32) as u32 == hi
                && let Some((data, offset, header)) = self.key_matches(location(slot), name)
            {
                return Some(Found {
                    at,
                    slot,
                    data,
                    offset,
                    header,
                });
            }
            at = (at + 1) & mask;
        }
        None
    }

    /// Slot position pointing at `loc` (an entry whose hash is `hi`).
    fn find_location(&self, slots: &[AtomicU64], hi: u32, loc: u32) -> Option<usize> {
        let mask = slots.len().checked_sub(1)?;
        let mut at = hi as usize & mask;
        for _ in 0..slots.len() {
            let s = slots.get(at)?.load(Ordering::Relaxed);
            if s == 0 {
                return None;
            }
            if location(s) == loc {
                return Some(at);
            }
            at = (at + 1) & mask;
        }
        None
    }

    #[inline]
    fn key_matches(&self, loc: u32, name: &[u8]) -> Option<(&[AtomicU64], usize, Header)> {
        let (data, offset) = self.entry(loc)?;
        let header = Header::read(data, offset)?;
        if header.key_len != name.len() {
            return None;
        }
        // Header::read checked that the entry lies within the segment.
        let words = data.get(offset + 1..offset + 1 + name.len().div_ceil(WORD))?;
        let mut chunks = name.chunks_exact(WORD);
        let mut differ = 0u64;
        for (chunk, word) in chunks.by_ref().zip(words) {
            let bytes = <[u8; WORD]>::try_from(chunk).unwrap_or_default();
            differ |= word.load(Ordering::Relaxed) ^ u64::from_le_bytes(bytes);
        }
        let tail = chunks.remainder();
        if let Some(word) = words.last().filter(|_| !tail.is_empty()) {
            // The rest of the last word holds the value's first bytes.
            let mask = (1u64 << (8 * tail.len())) - 1;
            differ |= (word.load(Ordering::Relaxed) & mask) ^ tail_word(name);
        }
        (differ == 0).then_some((data, offset, header))
    }

    /// The segment holding `loc` and the word offset in it.
    #[inline]
    fn entry(&self, loc: u32) -> Option<(&[AtomicU64], usize)> {
        let shift = self.geometry.segment_shift;
        let segment = self.segments.get((loc >> shift) as usize)?.get()?;
        Some((segment, (loc & ((1 << shift) - 1)) as usize))
    }

    /// Stores `value` for `name` (see [`NameCache::insert`](super::NameCache::insert)).
    pub(super) fn insert(&self, hash: u64, name: &[u8], value: &[u8]) {
        let words = entry_words(name.len(), value.len());
        if words > self.geometry.segment_words() / 2
            || name.len() > usize::from(u16::MAX)
            || value.len() > usize::from(u16::MAX)
        {
            return;
        }
        let mut w = self.writer();
        // Odd while writing, whatever a writer that unwound mid-bracket left behind (the
        // poisoned lock is recovered above): readers never accept a bracket as stable.
        let writing = self.seq.load(Ordering::Relaxed).wrapping_add(1) | 1;
        self.seq.store(writing, Ordering::Relaxed);
        fence(Ordering::Release);
        self.insert_locked(&mut w, (hash >> 32) as u32, name, value, words);
        self.seq.store(writing.wrapping_add(1), Ordering::Release);
    }

    fn insert_locked(&self, w: &mut Writer, hi: u32, name: &[u8], value: &[u8], words: usize) {
        let slots = self.slots();
        if let Some(Found { at, .. }) = self.find(slots, hi, name) {
            let mut old = Vec::new();
            let same = self.read(slots, hi, name, &mut old).is_some() && old == value;
            if same {
                if let Some(s) = slots.get(at) {
                    s.fetch_or(REFERENCED, Ordering::Relaxed);
                }
                return;
            }
            remove_slot(w, slots, at);
        }
        // Each round frees index room or opens a segment (evicting the oldest at the
        // budget); two laps of the log clear every referenced bit, so this ends well within
        // the bound.
        for _ in 0..4 * self.geometry.segments + 8 {
            if (w.entries + 1) * MAX_LOAD_DEN > self.slots().len() * MAX_LOAD_NUM {
                if !self.grow_index() && !self.evict_oldest(w) {
                    self.clear(w);
                }
                continue;
            }
            let open = w.order.back().copied();
            let room = open
                .and_then(|id| w.fill.get(id as usize))
                .map_or(0, |&f| self.geometry.segment_words() - f as usize);
            if room < words {
                self.open_segment(w);
                continue;
            }
            if let Some(id) = open {
                self.append(w, id, hi, name, value);
            }
            return;
        }
    }

    /// Opens a new segment for appends: an empty one, a newly allocated one, or (at the
    /// budget) the spare after the oldest segment's survivors have moved into it.
    fn open_segment(&self, w: &mut Writer) {
        if let Some(id) = w.free.pop() {
            w.order.push_back(id);
        } else if let Some(id) = self.allocate(w, true) {
            w.order.push_back(id);
        } else if !self.evict_oldest(w) {
            self.clear(w);
        }
    }

    /// Moves the index into the next, twice as large table; false at the largest. Runs inside
    /// the writer's sequence bracket: readers of the old table retry on the new one.
    fn grow_index(&self) -> bool {
        let generation = self.generation.load(Ordering::Relaxed);
        let (next, old) = match self.tables.get(generation).and_then(OnceLock::get) {
            Some(old) => (generation + 1, &old[..]),
            // The first insertion allocates the first table.
            None => (generation, &[][..]),
        };
        let Some(table) = self.tables.get(next) else {
            return false;
        };
        let slots = table.get_or_init(|| zeroed(self.geometry.first_slots << next));
        let mask = slots.len().saturating_sub(1);
        for s in old
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&s| s != 0)
        {
            let mut at = (s >> 32) as usize & mask;
            while slots
                .get(at)
                .is_some_and(|t| t.load(Ordering::Relaxed) != 0)
            {
                at = (at + 1) & mask;
            }
            if let Some(t) = slots.get(at) {
                t.store(s, Ordering::Relaxed);
            }
        }
        self.generation.store(next, Ordering::Release);
        true
    }

    /// Allocates a segment if the budget allows; `keep_spare` leaves room for one more (the
    /// spare eviction copies survivors into).
    fn allocate(&self, w: &mut Writer, keep_spare: bool) -> Option<u32> {
        let want = w.allocated + 1 + usize::from(keep_spare);
        if want > self.geometry.segments {
            return None;
        }
        let id = w.allocated;
        let segment = self.segments.get(id)?;
        segment.get_or_init(|| zeroed(self.geometry.segment_words()));
        w.allocated += 1;
        Some(id as u32)
    }

    /// Second chance for the oldest segment: referenced entries move to the spare (which
    /// becomes the open segment), the rest leave the index; the emptied segment is the next
    /// spare. False when there is nothing older than the open segment.
    fn evict_oldest(&self, w: &mut Writer) -> bool {
        if w.order.len() < 2 {
            return false;
        }
        let slots = self.slots();
        let target = match w.spare.take().or_else(|| w.free.pop()) {
            Some(id) => Some(id),
            None => self.allocate(w, false),
        };
        let Some(victim) = w.order.pop_front() else {
            return false;
        };
        let shift = self.geometry.segment_shift;
        let victim_fill = w.fill.get(victim as usize).map_or(0, |&f| f as usize);
        let victim_data = self.segments.get(victim as usize).and_then(OnceLock::get);
        let target_data = target
            .and_then(|t| self.segments.get(t as usize))
            .and_then(OnceLock::get);
        let mut moved = 0usize;
        let mut offset = 0usize;
        while offset < victim_fill {
            let Some(header) = victim_data.and_then(|d| Header::read(d, offset)) else {
                break;
            };
            let size = entry_words(header.key_len, header.value_len);
            let loc = (victim << shift) | offset as u32;
            if let Some(at) = self.find_location(slots, header.hash_hi, loc) {
                let slot = slots.get(at).map_or(0, |s| s.load(Ordering::Relaxed));
                let survive =
                    slot & REFERENCED != 0 && moved + size <= self.geometry.segment_words();
                match (survive, target, target_data, victim_data) {
                    (true, Some(t), Some(to), Some(from)) => {
                        for i in 0..size {
                            let word = from
                                .get(offset + i)
                                .map_or(0, |x| x.load(Ordering::Relaxed));
                            if let Some(x) = to.get(moved + i) {
                                x.store(word, Ordering::Relaxed);
                            }
                        }
                        let new_loc = (t << shift) | moved as u32;
                        if let Some(s) = slots.get(at) {
                            s.store(make_slot(header.hash_hi, new_loc), Ordering::Relaxed);
                        }
                        moved += size;
                    }
                    _ => remove_slot(w, slots, at),
                }
            }
            offset += size;
        }
        if let Some(f) = w.fill.get_mut(victim as usize) {
            *f = 0;
        }
        if w.spare.is_none() {
            w.spare = Some(victim);
        } else {
            w.free.push(victim);
        }
        if let Some(t) = target {
            if let Some(f) = w.fill.get_mut(t as usize) {
                *f = moved as u32;
            }
            w.order.push_back(t);
        }
        true
    }

    /// Forgets everything (keeps the memory): the last resort when a shard is too small to
    /// evict one segment at a time.
    fn clear(&self, w: &mut Writer) {
        for s in self.slots() {
            s.store(0, Ordering::Relaxed);
        }
        w.entries = 0;
        while let Some(id) = w.order.pop_front() {
            if let Some(f) = w.fill.get_mut(id as usize) {
                *f = 0;
            }
            w.free.push(id);
        }
    }

    fn append(&self, w: &mut Writer, id: u32, hi: u32, name: &[u8], value: &[u8]) {
        let Some(data) = self.segments.get(id as usize).and_then(OnceLock::get) else {
            return;
        };
        let Some(fill) = w.fill.get_mut(id as usize) else {
            return;
        };
        let offset = *fill as usize;
        let words = entry_words(name.len(), value.len());
        let header = (u64::from(hi) << 32) | ((name.len() as u64) << 16) | value.len() as u64;
        let body = name.iter().chain(value.iter()).copied();
        let all = std::iter::once(header).chain(pack_words(body));
        for (i, word) in all.enumerate().take(words) {
            if let Some(x) = data.get(offset + i) {
                x.store(word, Ordering::Relaxed);
            }
        }
        *fill += words as u32;
        let loc = (id << self.geometry.segment_shift) | offset as u32;
        let slots = self.slots();
        let mask = slots.len().saturating_sub(1);
        let mut at = hi as usize & mask;
        while slots
            .get(at)
            .is_some_and(|s| s.load(Ordering::Relaxed) != 0)
        {
            at = (at + 1) & mask;
        }
        if let Some(s) = slots.get(at) {
            s.store(make_slot(hi, loc), Ordering::Relaxed);
            w.entries += 1;
        }
    }

    /// Names indexed and the values they read (tests: the invariants hold and the accounting
    /// is within the shard's budget).
    #[cfg(test)]
    pub(super) fn check(&self) {
        let w = self.writer();
        let slots = self.slots();
        let mut live = 0;
        for &id in &w.order {
            let data = self.segments[id as usize].get().expect("allocated");
            let fill = w.fill[id as usize] as usize;
            let mut offset = 0;
            while offset < fill {
                let h = Header::read(data, offset).expect("header");
                let loc = (id << self.geometry.segment_shift) | offset as u32;
                if self.find_location(slots, h.hash_hi, loc).is_some() {
                    live += 1;
                    let mut key = Vec::new();
                    read_bytes(data, offset + 1, 0, h.key_len, &mut key);
                    let at = self
                        .find(slots, h.hash_hi, &key)
                        .expect("reachable by key")
                        .at;
                    assert_eq!(location(slots[at].load(Ordering::Relaxed)), loc);
                }
                offset += entry_words(h.key_len, h.value_len);
            }
            assert_eq!(offset, fill, "segment {id} walks to its end");
        }
        assert_eq!(live, w.entries);
        let occupied = slots
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count();
        assert_eq!(occupied, w.entries);
        drop(w);
        assert!(self.accounted_bytes() <= self.budget_bytes());
    }
}

/// The admission filter: a Bloom filter of the names missed lately (two bits per name),
/// emptied once it has taken a sixteenth of its bits in names (it then answers "seen" wrongly
/// for about one name in seventy: such a name is cached at first sight, which costs nothing
/// but its room). A name seen twice between two emptyings is admitted; no pair of names can
/// keep each other out, as they could in a table of one fingerprint per position.
///
/// A hint outside the sequence counter: racing updates can lose a bit (a later admission) or
/// an emptying can come early, nothing worse.
#[derive(Debug)]
struct Seen {
    /// Names added since the last emptying.
    added: AtomicUsize,
    bits: Box<[AtomicU64]>,
}

impl Seen {
    /// Starts loading the words `admit(hash)` reads.
    #[inline]
    fn prefetch(&self, hash: u64) {
        let (a, b) = self.positions(hash);
        for bit in [a, b] {
            if let Some(word) = self.bits.get(bit / 64) {
                prefetch(word);
            }
        }
    }

    /// The two bits of `hash`.
    #[inline]
    fn positions(&self, hash: u64) -> (usize, usize) {
        let bits = self.bits.len() * 64;
        // Two positions over the whole filter, however large (the low bits picked the shard,
        // so they are skipped): the hash's bits above them, and a multiplicative remix.
        let mixed = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (
            (hash >> 12) as usize & (bits - 1),
            (mixed >> 20) as usize & (bits - 1),
        )
    }

    /// After a miss: true when `hash` was missed since the filter was last emptied, else
    /// records it.
    #[inline]
    fn admit(&self, hash: u64) -> bool {
        let bits = self.bits.len() * 64;
        let (a, b) = self.positions(hash);
        let (Some(wa), Some(wb)) = (self.bits.get(a / 64), self.bits.get(b / 64)) else {
            return false;
        };
        let (ma, mb) = (1u64 << (a % 64), 1u64 << (b % 64));
        if wa.load(Ordering::Relaxed) & ma != 0 && wb.load(Ordering::Relaxed) & mb != 0 {
            return true;
        }
        // Plain read-modify-write, not `fetch_or`: a locked instruction is a full barrier on
        // x86 and kept the cache misses of the lookups around it from overlapping (on
        // all-distinct names it was the single most expensive instruction of the data path).
        // Two threads setting bits in the same word at the same instant can lose one: that
        // name is admitted a sighting later, which is all a lost bit can cost.
        wa.store(wa.load(Ordering::Relaxed) | ma, Ordering::Relaxed);
        wb.store(wb.load(Ordering::Relaxed) | mb, Ordering::Relaxed);
        // Counted one name in sixteen (by hash), so that threads missing at once do not all
        // write one counter.
        if hash >> 60 != 0 {
            return false;
        }
        if self.added.fetch_add(1, Ordering::Relaxed) >= bits / 256 {
            self.added.store(0, Ordering::Relaxed);
            for w in self.bits.iter() {
                w.store(0, Ordering::Relaxed);
            }
        }
        false
    }
}

/// Bytes of an admission filter of `words` words: its box and its bits, with overheads.
fn filter_bytes(words: usize) -> usize {
    size_of::<Seen>() + ALLOC_OVERHEAD + words * WORD + ALLOC_OVERHEAD
}

/// Empties slot `at`, shifting later members of its probe run back (no tombstones).
fn remove_slot(w: &mut Writer, slots: &[AtomicU64], mut at: usize) {
    let mask = slots.len().saturating_sub(1);
    w.entries = w.entries.saturating_sub(1);
    let mut next = at;
    loop {
        next = (next + 1) & mask;
        let s = slots.get(next).map_or(0, |s| s.load(Ordering::Relaxed));
        if s == 0 {
            break;
        }
        let home = (s >> 32) as usize & mask;
        // `s` may fill the hole at `at` unless its home lies cyclically in (at, next].
        let stays = if at <= next {
            at < home && home <= next
        } else {
            at < home || home <= next
        };
        if !stays {
            if let Some(hole) = slots.get(at) {
                hole.store(s, Ordering::Relaxed);
            }
            at = next;
        }
    }
    if let Some(hole) = slots.get(at) {
        hole.store(0, Ordering::Relaxed);
    }
}

/// Asks the CPU to start loading the cache line holding `value` into its caches, without
/// waiting for it (a load would hold up everything behind it until the data arrives).
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is only a hint to the cache hierarchy: it cannot fault, reads nothing
    // into the program and writes nothing, and the address comes from a live reference.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// [`prefetch`] of every cache line `value` spans (for a record larger than one line).
#[inline]
pub(crate) fn prefetch_all<T>(value: &T) {
    let start = (value as *const T).cast::<u8>();
    let size = std::mem::size_of::<T>();
    let mut offset = 0;
    while offset < size {
        prefetch_byte(start.wrapping_add(offset));
        offset += 64;
    }
    // The last line, when `value` does not start on a line boundary.
    if size > 0 {
        prefetch_byte(start.wrapping_add(size - 1));
    }
}

#[inline]
fn prefetch_byte(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is only a hint to the cache hierarchy: it cannot fault, reads nothing
    // into the program and writes nothing; the caller's address lies within a live value.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// `words` zero words from zeroed memory (`calloc`): a large allocation gets the kernel's
/// untouched zero pages, faulted in as words are first used, where writing every word faults
/// in the whole table at once. The admission filter's bits are spread over all its pages, so
/// a shard that sees few names (plain relaying or aggregating alike) pays for the pages
/// those names touch rather than for the whole filter.
fn zeroed(words: usize) -> Box<[AtomicU64]> {
    let layout = match std::alloc::Layout::array::<AtomicU64>(words) {
        Ok(layout) if layout.size() > 0 => layout,
        // Nothing to allocate, or more than an address space (which `collect` reports).
        _ => return (0..words).map(|_| AtomicU64::new(0)).collect(),
    };
    // SAFETY: the layout's size is not zero.
    let memory = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicU64>();
    if memory.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `memory` is a live allocation of the global allocator with the layout of
    // `words` `AtomicU64`s, the layout `Box<[AtomicU64]>` frees it with, owned by nothing
    // else; its bytes are zero, a valid `AtomicU64` (which has the size, alignment and bit
    // validity of `u64`).
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(memory, words)) }
}

#[inline]
fn make_slot(hi: u32, loc: u32) -> u64 {
    (u64::from(hi) << 32) | (u64::from(loc + 1) << 1)
}

/// Location part of a slot.
#[inline]
fn location(slot: u64) -> u32 {
    ((slot as u32) >> 1).wrapping_sub(1)
}

/// Words of an entry: the header and the packed key and value.
#[inline]
fn entry_words(key_len: usize, value_len: usize) -> usize {
    1 + (key_len + value_len).div_ceil(WORD)
}

/// The last `name.len() % 8` bytes of `name` as a little-endian word (zero above them), as
/// the packed key's last word holds them. Built in registers, not by copying the bytes into a
/// zeroed stack word and loading it back (a wide load over narrower stores, which the CPU
/// cannot forward: a stall on every lookup, and a call to `memcpy`).
#[inline]
fn tail_word(name: &[u8]) -> u64 {
    let tail = name.len() % WORD;
    if tail == 0 {
        return 0;
    }
    match name.last_chunk::<WORD>() {
        // The last eight bytes, shifted down past the ones that belong to whole words.
        Some(last) => u64::from_le_bytes(*last) >> (8 * (WORD - tail)),
        None => name
            .iter()
            .rev()
            .fold(0, |word, &b| (word << 8) | u64::from(b)),
    }
}

/// Copies `len` bytes starting `skip` bytes into the packed area at word `start` to `sink`.
#[inline]
fn read_bytes(
    data: &[AtomicU64],
    start: usize,
    skip: usize,
    len: usize,
    sink: &mut impl ValueSink,
) {
    let mut at = skip;
    let end = skip + len;
    while at < end {
        let Some(word) = data.get(start + at / WORD) else {
            return;
        };
        let bytes = word.load(Ordering::Relaxed).to_le_bytes();
        let from = at % WORD;
        let to = WORD.min(from + end - at);
        if let Some(b) = bytes.get(from..to) {
            sink.extend(b);
        }
        at += to - from;
    }
}

/// Packs a byte stream into little-endian words (the last one zero-padded).
fn pack_words(bytes: impl Iterator<Item = u8>) -> impl Iterator<Item = u64> {
    let mut bytes = bytes.peekable();
    std::iter::from_fn(move || {
        bytes.peek()?;
        let mut b = [0u8; WORD];
        for (slot, x) in b.iter_mut().zip(bytes.by_ref()) {
            *slot = x;
        }
        Some(u64::from_le_bytes(b))
    })
}

/// An indexed entry: its slot (position and value), segment, offset and header.
struct Found<'a> {
    at: usize,
    slot: u64,
    data: &'a [AtomicU64],
    offset: usize,
    header: Header,
}

/// A decoded entry header.
#[derive(Clone, Copy, Debug)]
struct Header {
    hash_hi: u32,
    key_len: usize,
    value_len: usize,
}

impl Header {
    /// The header at `offset`, if the entry it describes lies within the segment.
    #[inline]
    fn read(data: &[AtomicU64], offset: usize) -> Option<Self> {
        let w = data.get(offset)?.load(Ordering::Relaxed);
        let header = Self {
            hash_hi: (w >> 32) as u32,
            key_len: ((w >> 16) & 0xffff) as usize,
            value_len: (w & 0xffff) as usize,
        };
        (offset + entry_words(header.key_len, header.value_len) <= data.len()).then_some(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_word_packs_the_bytes_past_the_last_whole_word() {
        let bytes: Vec<u8> = (1..=40u8).map(|b| b.wrapping_mul(37)).collect();
        for len in 0..=bytes.len() {
            let name = &bytes[..len];
            let tail = &name[len - len % WORD..];
            let mut want = [0u8; WORD];
            want[..tail.len()].copy_from_slice(tail);
            assert_eq!(tail_word(name), u64::from_le_bytes(want), "length {len}");
        }
    }
}
