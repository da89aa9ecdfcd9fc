//! One shard of a [`NameCache`](super::NameCache): a segmented log of entries and a
//! linear-probing index over it, within a byte budget (module documentation of `cache`).
//!
//! Entry layout in a segment, little-endian, unaligned:
//!
//! ```text
//! hash_hi: u32 | key_len: u32 | value_len: u16 | flags: u8 | 0: u8 | key | value
//! ```
//!
//! An index slot is `hash_hi << 32 | (location + 1)`, `0` meaning empty; a location is
//! `segment << segment_shift | offset`. The index holds exactly the live entries: an entry is
//! dropped from the index when evicted or replaced, and a replaced entry is flagged dead so
//! that eviction skips it.

use std::collections::VecDeque;
use std::mem::size_of;

use super::ALLOC_OVERHEAD;

/// Entry header bytes.
const HEADER: usize = 12;
/// Flag: looked up since written or last given a second chance.
const REFERENCED: u8 = 1;
/// Flag: replaced by a newer entry for the same name; its bytes wait for eviction.
const DEAD: u8 = 2;
/// Byte of the header holding the flags.
const FLAGS_AT: usize = 10;
/// Smallest segment.
const MIN_SEGMENT_BYTES: usize = 512;
/// A shard needs an open segment, an older one to evict and a spare to copy survivors into.
const MIN_SEGMENTS: usize = 3;
/// First index size, in slots.
const MIN_SLOTS: usize = 16;
/// Smallest admission filter, in fingerprints.
const MIN_SEEN: usize = 64;
/// The admission filter takes at most this fraction (1/n) of the budget.
const SEEN_SHARE: usize = 16;

/// A shard's shape, fixed at construction from its budget.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geometry {
    /// Budget of the shard, bytes.
    budget: usize,
    /// `log2` of the segment size.
    segment_shift: u32,
    /// Most segments (the spare included); 0 disables the shard.
    max_segments: usize,
    /// Largest index, in slots (a power of two).
    max_slots: usize,
    /// Fingerprints in the admission filter (a power of two).
    seen_slots: usize,
}

impl Geometry {
    /// Segments of at most `max_segment` bytes, about `target` of them. The index and the
    /// segments share the budget: the index doubles while the entries fill three quarters of
    /// it (up to half the budget), giving back the oldest segments when it needs their bytes.
    /// Small names thus get a larger index and fewer segments, long names the reverse.
    pub(super) fn for_budget(budget: usize, target: usize, max_segment: usize) -> Self {
        let mut segment = max_segment.max(MIN_SEGMENT_BYTES).next_power_of_two();
        while segment > MIN_SEGMENT_BYTES && segment * target > budget {
            segment /= 2;
        }
        let mut max_slots = MIN_SLOTS;
        while max_slots * 2 * size_of::<u64>() <= budget / 2 {
            max_slots *= 2;
        }
        let mut seen_slots = MIN_SEEN;
        while seen_slots * 2 * size_of::<u32>() <= budget / SEEN_SHARE {
            seen_slots *= 2;
        }
        let seen = seen_slots * size_of::<u32>() + ALLOC_OVERHEAD;
        let index = MIN_SLOTS * size_of::<u64>() + ALLOC_OVERHEAD;
        let mut max_segments = budget.saturating_sub(index + seen + bookkeeping_fixed())
            / (segment + per_segment_cost());
        // Locations are u32 (plus one for "empty").
        max_segments = max_segments.min((u32::MAX as usize - 1) >> segment.trailing_zeros());
        if max_segments < MIN_SEGMENTS {
            max_segments = 0;
        }
        Self {
            budget,
            segment_shift: segment.trailing_zeros(),
            max_segments,
            max_slots,
            seen_slots,
        }
    }

    /// True when the budget is too small for a working shard.
    pub(super) fn is_disabled(&self) -> bool {
        self.max_segments == 0
    }

    fn segment_bytes(&self) -> usize {
        1 << self.segment_shift
    }
}

/// Bookkeeping allocations that do not depend on the segment count (their overheads).
fn bookkeeping_fixed() -> usize {
    3 * ALLOC_OVERHEAD
}

/// Bookkeeping per possible segment: its `Vec` header, its place in the order and free lists,
/// and the allocator's overhead on the segment itself.
fn per_segment_cost() -> usize {
    size_of::<Vec<u8>>() + 2 * size_of::<u32>() + ALLOC_OVERHEAD
}

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Shard {
    geometry: Geometry,
    /// Linear-probing index; empty or a power of two long.
    slots: Vec<u64>,
    /// Live entries (= occupied slots).
    entries: usize,
    /// Segments by id; an unallocated one has capacity 0.
    segments: Vec<Vec<u8>>,
    /// Segments holding entries, oldest first; the back one is open for appends.
    order: VecDeque<u32>,
    /// Allocated, empty segments.
    free: Vec<u32>,
    /// An allocated, empty segment kept for eviction to copy survivors into.
    spare: Option<u32>,
    /// Segments allocated now.
    allocated: usize,
    /// Admission filter: fingerprints of names missed once and not admitted (allocated on
    /// the first miss).
    seen: Vec<u32>,
}

impl Shard {
    pub(super) fn new(geometry: Geometry) -> Self {
        let n = geometry.max_segments;
        Self {
            geometry,
            slots: Vec::new(),
            entries: 0,
            segments: Vec::with_capacity(n),
            order: VecDeque::with_capacity(n),
            free: Vec::with_capacity(n),
            spare: None,
            allocated: 0,
            seen: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries
    }

    /// Every byte this shard has allocated, with the allocator's overhead per allocation.
    pub(super) fn accounted_bytes(&self) -> usize {
        fn vec_bytes(capacity: usize, item: usize) -> usize {
            if capacity == 0 {
                0
            } else {
                capacity * item + ALLOC_OVERHEAD
            }
        }
        vec_bytes(self.segments.capacity(), size_of::<Vec<u8>>())
            + vec_bytes(self.order.capacity(), size_of::<u32>())
            + vec_bytes(self.free.capacity(), size_of::<u32>())
            + self.slot_bytes(self.slots.capacity())
            + vec_bytes(self.seen.capacity(), size_of::<u32>())
            + self
                .segments
                .iter()
                .map(|s| vec_bytes(s.capacity(), 1))
                .sum::<usize>()
    }

    fn slot_bytes(&self, slots: usize) -> usize {
        if slots == 0 {
            0
        } else {
            slots * size_of::<u64>() + ALLOC_OVERHEAD
        }
    }

    /// Bytes the shard would hold with `segments` allocated and an index of `slots` (plus
    /// `extra_slots` held at the same time, while the index grows).
    fn bytes_with(&self, segments: usize, slots: usize, extra_slots: usize) -> usize {
        let n = self.geometry.max_segments;
        bookkeeping_fixed()
            + self.geometry.seen_slots * size_of::<u32>()
            + ALLOC_OVERHEAD
            + n * (size_of::<Vec<u8>>() + 2 * size_of::<u32>())
            + segments * (self.geometry.segment_bytes() + ALLOC_OVERHEAD)
            + self.slot_bytes(slots)
            + self.slot_bytes(extra_slots)
    }

    /// The value cached for `name`, marking its entry referenced.
    #[inline]
    pub(super) fn get(&mut self, hash: u64, name: &[u8]) -> Option<&[u8]> {
        let hi = (hash >> 32) as u32;
        let slot = self.find(hi, name)?;
        let loc = location(*self.slots.get(slot)?);
        let (segment, offset) = self.split(loc);
        let data = self.segments.get_mut(segment)?;
        let header = Header::read(data, offset)?;
        // Written only when it changes: a hot entry's line is not dirtied on every hit.
        if let Some(flags) = data.get_mut(offset + FLAGS_AT)
            && *flags & REFERENCED == 0
        {
            *flags |= REFERENCED;
        }
        data.get(header.value_range(offset))
    }

    /// After a miss: true when `hash` missed before and its fingerprint is still in the
    /// admission filter (the name came back: cache it), else records the fingerprint.
    #[inline]
    pub(super) fn admit(&mut self, hash: u64) -> bool {
        if self.seen.is_empty() {
            self.seen = vec![0; self.geometry.seen_slots];
        }
        let fingerprint = (hash as u32) | 1;
        let at = (hash >> 40) as usize & (self.seen.len() - 1);
        match self.seen.get_mut(at) {
            Some(f) if *f == fingerprint => true,
            Some(f) => {
                *f = fingerprint;
                false
            }
            None => false,
        }
    }

    /// Stores `value` for `name` (see [`NameCache::insert`](super::NameCache::insert)).
    pub(super) fn insert(&mut self, hash: u64, name: &[u8], value: &[u8]) {
        let size = HEADER + name.len() + value.len();
        if size > self.geometry.segment_bytes() / 2 {
            return;
        }
        let hi = (hash >> 32) as u32;
        if let Some(slot) = self.find(hi, name)
            && self.replace_or_keep(slot, value)
        {
            return;
        }
        // Each round either grows something or evicts a segment; two laps of the log clear
        // every referenced flag, so this ends well within the bound.
        for _ in 0..4 * self.geometry.max_segments + 8 {
            if !self.index_has_room() {
                self.make_index_room();
                continue;
            }
            if !self.open_has_room(size) {
                self.open_segment();
                continue;
            }
            self.append(hi, name, value);
            return;
        }
    }

    /// For a name already cached: true when its value is `value` (marked referenced);
    /// otherwise the old entry is flagged dead and dropped from the index.
    fn replace_or_keep(&mut self, slot: usize, value: &[u8]) -> bool {
        let Some(&s) = self.slots.get(slot) else {
            return false;
        };
        let (segment, offset) = self.split(location(s));
        let Some(data) = self.segments.get_mut(segment) else {
            return false;
        };
        let same = Header::read(data, offset)
            .and_then(|h| data.get(h.value_range(offset)))
            .is_some_and(|v| v == value);
        if let Some(flags) = data.get_mut(offset + FLAGS_AT) {
            *flags |= if same { REFERENCED } else { DEAD };
        }
        if !same {
            self.remove_slot(slot);
        }
        same
    }

    /// Slot of `name`, if cached.
    #[inline]
    fn find(&self, hi: u32, name: &[u8]) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = hi as usize & mask;
        loop {
            let s = *self.slots.get(i)?;
            if s == 0 {
                return None;
            }
            if (s >> 32) as u32 == hi && self.key_at(location(s)) == Some(name) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Slot pointing at location `loc` (an entry whose hash is `hi`).
    fn find_location(&self, hi: u32, loc: u32) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = hi as usize & mask;
        loop {
            let s = *self.slots.get(i)?;
            if s == 0 {
                return None;
            }
            if location(s) == loc {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn key_at(&self, loc: u32) -> Option<&[u8]> {
        let (segment, offset) = self.split(loc);
        let data = self.segments.get(segment)?;
        let header = Header::read(data, offset)?;
        data.get(header.key_range(offset))
    }

    #[inline]
    fn split(&self, loc: u32) -> (usize, usize) {
        let shift = self.geometry.segment_shift;
        ((loc >> shift) as usize, (loc & ((1 << shift) - 1)) as usize)
    }

    /// Load factor at most 3/4 after one more entry.
    fn index_has_room(&self) -> bool {
        (self.entries + 1) * 4 <= self.slots.len() * 3
    }

    /// Grows the index if it may (releasing old segments if the growth needs their bytes),
    /// else evicts the oldest segment.
    fn make_index_room(&mut self) {
        let slots = self.slots.len();
        let grown = (slots * 2).max(MIN_SLOTS);
        if grown <= self.geometry.max_slots {
            // Old and new tables exist together while the entries move.
            while self.bytes_with(self.allocated, grown, slots) > self.geometry.budget {
                if !self.release_oldest() {
                    break;
                }
            }
            if self.bytes_with(self.allocated, grown, slots) <= self.geometry.budget {
                self.grow_index(grown);
                return;
            }
        }
        if !self.evict_oldest() {
            self.clear();
        }
    }

    fn grow_index(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![0; slots]);
        let mask = slots - 1;
        for s in old.into_iter().filter(|&s| s != 0) {
            let mut i = (s >> 32) as usize & mask;
            while self.slots.get(i).is_some_and(|&t| t != 0) {
                i = (i + 1) & mask;
            }
            if let Some(t) = self.slots.get_mut(i) {
                *t = s;
            }
        }
    }

    fn open_has_room(&self, size: usize) -> bool {
        self.order
            .back()
            .and_then(|&id| self.segments.get(id as usize))
            .is_some_and(|s| s.capacity() - s.len() >= size)
    }

    /// Opens a new segment for appends: an empty one, a newly allocated one, or (at the
    /// budget) the spare after its oldest segment's survivors have moved into it.
    fn open_segment(&mut self) {
        if let Some(id) = self.free.pop() {
            self.order.push_back(id);
        } else if let Some(id) = self.allocate(true) {
            self.order.push_back(id);
        } else if !self.evict_oldest() {
            self.clear();
        }
    }

    /// Allocates a segment if the budget allows; `keep_spare` leaves room for one more (the
    /// spare eviction copies survivors into).
    fn allocate(&mut self, keep_spare: bool) -> Option<u32> {
        let want = self.allocated + 1 + usize::from(keep_spare);
        if want > self.geometry.max_segments
            || self.bytes_with(want, self.slots.len(), 0) > self.geometry.budget
        {
            return None;
        }
        let segment = Vec::with_capacity(self.geometry.segment_bytes());
        let id = match self.segments.iter().position(|s| s.capacity() == 0) {
            Some(id) => {
                self.segments[id] = segment;
                id
            }
            None => {
                self.segments.push(segment);
                self.segments.len() - 1
            }
        };
        self.allocated += 1;
        Some(id as u32)
    }

    /// Second chance for the oldest segment: referenced entries move to the spare segment
    /// (which becomes the open one), the rest leave the index; the emptied segment is the
    /// next spare. False when there is nothing older than the open segment to evict.
    fn evict_oldest(&mut self) -> bool {
        if self.order.len() < 2 {
            return false;
        }
        let target = match self.spare.take().or_else(|| self.free.pop()) {
            Some(id) => Some(id),
            None => self.allocate(false),
        };
        let Some(victim) = self.order.pop_front() else {
            return false;
        };
        let mut data = std::mem::take(&mut self.segments[victim as usize]);
        let mut moved = match target {
            Some(t) => std::mem::take(&mut self.segments[t as usize]),
            None => Vec::new(),
        };
        let base = target.map(|t| t << self.geometry.segment_shift);
        let victim_base = victim << self.geometry.segment_shift;
        let mut offset = 0;
        while let Some(header) = Header::read(&data, offset) {
            let end = offset + header.size();
            if header.flags & DEAD == 0
                && let Some(slot) = self.find_location(header.hash_hi, victim_base | offset as u32)
            {
                let survive = header.flags & REFERENCED != 0
                    && moved.capacity() - moved.len() >= header.size();
                match (survive, base, data.get(offset..end)) {
                    (true, Some(base), Some(bytes)) => {
                        let new_loc = base | moved.len() as u32;
                        let flags_at = moved.len() + FLAGS_AT;
                        moved.extend_from_slice(bytes);
                        if let Some(f) = moved.get_mut(flags_at) {
                            *f &= !REFERENCED;
                        }
                        if let Some(s) = self.slots.get_mut(slot) {
                            *s = (u64::from(header.hash_hi) << 32) | u64::from(new_loc + 1);
                        }
                    }
                    _ => self.remove_slot(slot),
                }
            }
            offset = end;
        }
        data.clear();
        self.segments[victim as usize] = data;
        if self.spare.is_none() {
            self.spare = Some(victim);
        } else {
            self.free.push(victim);
        }
        if let Some(t) = target {
            self.segments[t as usize] = moved;
            self.order.push_back(t);
        }
        true
    }

    /// Drops the oldest segment's entries and gives its memory back (to make room for the
    /// index). False when only the open segment is left.
    fn release_oldest(&mut self) -> bool {
        if let Some(id) = self.free.pop().or_else(|| self.spare.take()) {
            self.segments[id as usize] = Vec::new();
            self.allocated -= 1;
            return true;
        }
        if self.order.len() < 2 {
            return false;
        }
        let Some(victim) = self.order.pop_front() else {
            return false;
        };
        let data = std::mem::take(&mut self.segments[victim as usize]);
        self.drop_entries(victim, &data);
        self.allocated -= 1;
        true
    }

    /// Removes the live entries of segment `id` (holding `data`) from the index.
    fn drop_entries(&mut self, id: u32, data: &[u8]) {
        let base = id << self.geometry.segment_shift;
        let mut offset = 0;
        while let Some(header) = Header::read(data, offset) {
            if header.flags & DEAD == 0
                && let Some(slot) = self.find_location(header.hash_hi, base | offset as u32)
            {
                self.remove_slot(slot);
            }
            offset += header.size();
        }
    }

    /// Forgets everything (keeps the memory): the last resort when a shard is too small to
    /// evict one segment at a time.
    fn clear(&mut self) {
        self.slots.fill(0);
        self.entries = 0;
        while let Some(id) = self.order.pop_front() {
            if let Some(s) = self.segments.get_mut(id as usize) {
                s.clear();
            }
            self.free.push(id);
        }
    }

    fn append(&mut self, hi: u32, name: &[u8], value: &[u8]) {
        let Some(&id) = self.order.back() else {
            return;
        };
        let shift = self.geometry.segment_shift;
        let Some(data) = self.segments.get_mut(id as usize) else {
            return;
        };
        let loc = (id << shift) | data.len() as u32;
        data.extend_from_slice(&hi.to_le_bytes());
        data.extend_from_slice(&(name.len() as u32).to_le_bytes());
        data.extend_from_slice(&(value.len() as u16).to_le_bytes());
        data.extend_from_slice(&[0, 0]);
        data.extend_from_slice(name);
        data.extend_from_slice(value);
        let mask = self.slots.len() - 1;
        let mut i = hi as usize & mask;
        while self.slots.get(i).is_some_and(|&s| s != 0) {
            i = (i + 1) & mask;
        }
        if let Some(s) = self.slots.get_mut(i) {
            *s = (u64::from(hi) << 32) | u64::from(loc + 1);
            self.entries += 1;
        }
    }

    /// Empties slot `i`, shifting later members of its probe run back (no tombstones).
    fn remove_slot(&mut self, mut i: usize) {
        let mask = self.slots.len() - 1;
        self.entries -= 1;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots.get(j).copied().unwrap_or(0);
            if s == 0 {
                break;
            }
            let home = (s >> 32) as usize & mask;
            // `s` may fill the hole at `i` unless its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.slots[i] = s;
                i = j;
            }
        }
        if let Some(s) = self.slots.get_mut(i) {
            *s = 0;
        }
    }

    /// Checks the invariants (tests): the index holds exactly the live entries, each once,
    /// reachable from its home slot; the accounted bytes are within the budget.
    #[cfg(test)]
    pub(super) fn check(&self) {
        let mut live = 0;
        for &id in &self.order {
            let data = &self.segments[id as usize];
            let base = id << self.geometry.segment_shift;
            let mut offset = 0;
            while let Some(h) = Header::read(data, offset) {
                if h.flags & DEAD == 0 {
                    live += 1;
                    let key = &data[h.key_range(offset)];
                    let slot = self.find(h.hash_hi, key).expect("live entry reachable");
                    assert_eq!(location(self.slots[slot]), base | offset as u32);
                }
                offset += h.size();
            }
            assert_eq!(offset, data.len(), "segment {id} walks to its end");
        }
        assert_eq!(live, self.entries);
        assert_eq!(self.slots.iter().filter(|&&s| s != 0).count(), self.entries);
        assert!(self.accounted_bytes() <= self.geometry.budget);
    }
}

/// Location part of a slot.
#[inline]
fn location(slot: u64) -> u32 {
    (slot as u32).wrapping_sub(1)
}

/// A decoded entry header.
#[derive(Clone, Copy, Debug)]
struct Header {
    hash_hi: u32,
    key_len: usize,
    value_len: usize,
    flags: u8,
}

impl Header {
    #[inline]
    fn read(data: &[u8], offset: usize) -> Option<Self> {
        let h: &[u8; HEADER] = data.get(offset..offset + HEADER)?.try_into().ok()?;
        let header = Self {
            hash_hi: u32::from_le_bytes([h[0], h[1], h[2], h[3]]),
            key_len: u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize,
            value_len: usize::from(u16::from_le_bytes([h[8], h[9]])),
            flags: h[FLAGS_AT],
        };
        (offset + header.size() <= data.len()).then_some(header)
    }

    #[inline]
    fn size(&self) -> usize {
        HEADER + self.key_len + self.value_len
    }

    #[inline]
    fn key_range(&self, offset: usize) -> std::ops::Range<usize> {
        let start = offset + HEADER;
        start..start + self.key_len
    }

    #[inline]
    fn value_range(&self, offset: usize) -> std::ops::Range<usize> {
        let start = offset + HEADER + self.key_len;
        start..start + self.value_len
    }
}
