//! The aggregator's verdict cache: per input name, the outputs its rules resolve it to.
//!
//! The aggregator holds it under its own lock and is its only user, so it is a plain
//! open-addressing table (no shards, no sequence counter, no atomics, unlike the relay's
//! shared [`NameCache`](crate::name_cache::NameCache)): a lookup is the slot, then the record it
//! points at, both of which [`Verdicts::prefetch_slot`] and [`Verdicts::prefetch_entry`] can
//! start loading a few datapoints ahead.
//!
//! Records lie back to back in one byte log: the name's hash (8 bytes), the name's and the
//! value's lengths (4 bytes each), the name, the value, padded to 8 bytes. A slot holds the
//! hash's upper 32 bits (to skip most comparisons) and the record's position in 8-byte words
//! plus one (0 is empty). The table doubles at three quarters full. Bounded by names and by
//! bytes: when either bound would be passed the cache is emptied and refilled (nothing is
//! dropped; names are resolved again).

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::name_cache::prefetch;

/// Log bytes allowed per name of the names bound (an entry of a 40-byte name with one output
/// takes 64).
const BYTES_PER_NAME: usize = 128;
/// Log bytes reserved per name of the room given to [`Verdicts::with_room`] (a 40-byte name
/// with four outputs takes 80).
const AVERAGE_RECORD: usize = 80;
/// Record header: hash, name length, value length.
const HEADER: usize = 16;

/// Per-name verdicts, bounded. See the module documentation.
#[derive(Debug)]
pub(super) struct Verdicts {
    seed: u64,
    slots: Vec<u64>,
    log: Vec<u8>,
    len: usize,
    max_names: usize,
    max_bytes: usize,
}

impl Verdicts {
    /// An empty cache for at most `max_names` names (0: nothing is cached).
    pub(super) fn new(max_names: usize) -> Self {
        Self {
            seed: fastrand::u64(..),
            slots: Vec::new(),
            log: Vec::new(),
            len: 0,
            max_names,
            max_bytes: max_names.saturating_mul(BYTES_PER_NAME),
        }
    }

    /// [`new`](Self::new) with room for `names` names (within `max_names`) before the table
    /// or the log grows: growing the log copies every record, growing the table places every
    /// record again. The room is address space: pages are touched as records and slots fill.
    pub(super) fn with_room(max_names: usize, names: usize) -> Self {
        let names = names.min(max_names);
        let mut v = Self::new(max_names);
        if names > 0 {
            v.slots = vec![0; (names * 4 / 3 + 1).next_power_of_two().max(1024)];
            v.log = Vec::with_capacity(names * AVERAGE_RECORD);
        }
        v
    }

    /// The hash the other methods take: xxh3 of the name, seeded per cache.
    #[inline]
    pub(super) fn hash(&self, name: &[u8]) -> u64 {
        xxh3_64_with_seed(name, self.seed)
    }

    /// Forgets every name.
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.log.clear();
        self.len = 0;
    }

    /// Names cached.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Starts loading the slot a lookup of `hash` reads first.
    #[inline]
    pub(super) fn prefetch_slot(&self, hash: u64) {
        if let Some(s) = self.slots.get(hash as usize & self.mask()) {
            prefetch(s);
        }
    }

    /// Starts loading the record the first slot of `hash` points at (its header and the end
    /// of a name of `len` bytes, where the value starts). Reads that slot, which
    /// [`prefetch_slot`](Self::prefetch_slot) should have brought in.
    #[inline]
    pub(super) fn prefetch_entry(&self, hash: u64, len: usize) {
        let Some(&s) = self.slots.get(hash as usize & self.mask()) else {
            return;
        };
        if s == 0 {
            return;
        }
        let at = record_at(s);
        for at in [at, at + HEADER + len] {
            if let Some(b) = self.log.get(at) {
                prefetch(b);
            }
        }
    }

    /// The value cached for `name` (whose [`hash`](Self::hash) is `hash`).
    #[inline]
    pub(super) fn get(&self, hash: u64, name: &[u8]) -> Option<&[u8]> {
        let mask = self.mask();
        let tag = hash >> 32;
        let mut i = hash as usize & mask;
        loop {
            let s = *self.slots.get(i)?;
            if s == 0 {
                return None;
            }
            if s >> 32 == tag {
                let at = record_at(s);
                let (n, v) = (read_u32(&self.log, at + 8), read_u32(&self.log, at + 12));
                let key = at + HEADER;
                if self.log.get(key..key + n) == Some(name) {
                    return self.log.get(key + n..key + n + v);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Caches `value` for `name` (not cached yet), emptying the cache first when a bound
    /// would be passed; a name too large for the bound is not cached.
    pub(super) fn insert(&mut self, hash: u64, name: &[u8], value: &[u8]) {
        let size = (HEADER + name.len() + value.len()).next_multiple_of(8);
        if self.len >= self.max_names || self.log.len() + size > self.max_bytes {
            self.clear();
            if size > self.max_bytes || self.max_names == 0 {
                return;
            }
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let at = self.log.len();
        // Positions are stored in 8-byte words in 32 bits (with 0 for empty).
        if at / 8 + 1 > u32::MAX as usize {
            self.clear();
            return self.insert(hash, name, value);
        }
        self.log.extend_from_slice(&hash.to_le_bytes());
        self.log
            .extend_from_slice(&(name.len() as u32).to_le_bytes());
        self.log
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.log.extend_from_slice(name);
        self.log.extend_from_slice(value);
        self.log.resize(at + size, 0);
        self.place(hash, at);
        self.len += 1;
    }

    fn place(&mut self, hash: u64, at: usize) {
        let mask = self.mask();
        let mut i = hash as usize & mask;
        while let Some(s) = self.slots.get_mut(i) {
            if *s == 0 {
                *s = (hash >> 32) << 32 | (at / 8 + 1) as u64;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the table (from 1024 slots) and places every record again.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(1024);
        self.slots.clear();
        self.slots.resize(size, 0);
        let mut at = 0;
        while at + HEADER <= self.log.len() {
            let hash = u64::from_le_bytes(read_bytes(&self.log, at));
            let (n, v) = (read_u32(&self.log, at + 8), read_u32(&self.log, at + 12));
            self.place(hash, at);
            at += (HEADER + n + v).next_multiple_of(8);
        }
    }
}

/// The log position of the record a slot points at.
#[inline]
fn record_at(slot: u64) -> usize {
    ((slot & u64::from(u32::MAX)) as usize - 1) * 8
}

#[inline]
fn read_bytes<const N: usize>(log: &[u8], at: usize) -> [u8; N] {
    log.get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .unwrap_or([0; N])
}

#[inline]
fn read_u32(log: &[u8], at: usize) -> usize {
    u32::from_le_bytes(read_bytes(log, at)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_it_holds_and_grows() {
        // From empty, and with room for fewer names than it gets (it grows past the room).
        for mut v in [Verdicts::new(100_000), Verdicts::with_room(100_000, 3000)] {
            holds_and_grows(&mut v);
        }
        assert_eq!(Verdicts::with_room(10, 3000).slots.len(), 1024);
        assert!(Verdicts::with_room(0, 3000).slots.is_empty());
    }

    fn holds_and_grows(v: &mut Verdicts) {
        for i in 0..5000u32 {
            let name = format!("some.metric.{i}");
            let h = v.hash(name.as_bytes());
            assert_eq!(v.get(h, name.as_bytes()), None);
            v.insert(h, name.as_bytes(), &i.to_le_bytes()[..(i % 5) as usize]);
        }
        assert_eq!(v.len(), 5000);
        for i in 0..5000u32 {
            let name = format!("some.metric.{i}");
            let h = v.hash(name.as_bytes());
            v.prefetch_slot(h);
            v.prefetch_entry(h, name.len());
            assert_eq!(
                v.get(h, name.as_bytes()),
                Some(&i.to_le_bytes()[..(i % 5) as usize])
            );
        }
        assert_eq!(v.get(v.hash(b"other"), b"other"), None);
    }

    #[test]
    fn a_bound_empties_it() {
        let mut v = Verdicts::new(10);
        for i in 0..25u32 {
            let name = format!("n{i}");
            v.insert(v.hash(name.as_bytes()), name.as_bytes(), b"x");
            assert!(v.len() <= 10);
        }
        assert_eq!(v.len(), 5);
        assert!(v.get(v.hash(b"n24"), b"n24").is_some());
        assert!(v.get(v.hash(b"n0"), b"n0").is_none());
        // A name larger than the byte bound (10 × 128) is not cached.
        let long = vec![b'a'; 2000];
        v.insert(v.hash(&long), &long, b"x");
        assert!(v.get(v.hash(&long), &long).is_none());
        let mut none = Verdicts::new(0);
        none.insert(none.hash(b"a"), b"a", b"x");
        assert_eq!(none.get(none.hash(b"a"), b"a"), None);
    }
}
