//! The relay's name caches: one byte-bounded map from metric names to small byte values,
//! shared by every connection and source.
//!
//! Three things are a pure function of a metric name and worth remembering: its route (an MD5
//! for `carbon_ch`), its white/blacklist verdict (a regex set) and its normalised tagged form
//! (a parse and a sort). A [`NameCache`] holds one of them for every name the relay has seen
//! lately, once per relay: a name that arrives on a thousand connections is computed twice
//! (see *Admission*) and stored once. The route cache ([`crate::router::RouteCache`]) is built
//! on it (short names of hashing routers excepted: their hashes cost less than a lookup); the filter
//! and the tag normaliser use it directly.
//!
//! ## Memory: bounded by the budget, counted to the byte
//!
//! A cache is given a byte budget and never holds more. It counts every byte it allocates:
//! the keys, the values, their headers, the index, the bookkeeping vectors and the
//! allocator's per-allocation overhead ([`ALLOC_OVERHEAD`]); [`NameCache::accounted_bytes`]
//! reports the sum, and a unit test holds it against the bytes the allocator actually handed
//! out. Nothing is allocated per lookup or per insertion: a shard allocates its index and
//! admission filter on its first lookup and its segments one at a time as they fill, up to
//! the budget, and then stays flat.
//!
//! ## Layout: sharded, each shard a segmented log with an open-addressing index
//!
//! The cache is split into up to [`MAX_SHARDS`] shards by the name's hash. A shard stores its
//! entries back to back in fixed-size *segments* (the log): a header word (hash, key length,
//! value length), then the name's and the value's bytes. Its index is a linear-probing table of
//! `u64` slots, each holding 32 bits of the hash (to skip most key comparisons), the entry's
//! position in the log and its *referenced* bit. A quarter of a shard's budget is its index,
//! a sixteenth its admission filter (below), the rest segments.
//!
//! ## Reading without a lock
//!
//! A lookup takes no lock and writes nothing shared: everything it reads is atomic words read
//! with plain loads, bracketed by the shard's sequence counter (a seqlock). Only insertions and
//! evictions take the shard's mutex and bump the counter; a lookup that overlaps one retries,
//! and after a few tries reports a miss rather than wait. Two threads hitting the same names
//! therefore do not bounce cache lines between their cores (criterion `route` bench:
//! `hit/shared_2t` against `hit/shared_1t`), which a mutex per shard did: every lock and
//! unlock writes the lock's line. Memory a lookup may touch is never freed while the cache
//! lives (the index is allocated whole on a shard's first lookup, segments once each), so a
//! lookup racing a writer reads stale words at worst, and the counter tells it so.
//!
//! ## Eviction: second chance over whole segments
//!
//! A hit sets the entry's *referenced* bit (once per lap, not per hit). When a shard needs
//! room (its segments are all allocated and full, or its index is three quarters full), it
//! takes its oldest segment and walks it: entries referenced since they were written are
//! copied into a spare segment with the bit cleared (they survive, now the newest), the others
//! are dropped from the index. The emptied segment becomes the next spare. This is CLOCK (FIFO
//! with reinsertion) at segment granularity: a name that keeps arriving is touched at least
//! once per lap of the log and is never evicted by a stream of one-off names; one-off names
//! leave in arrival order. Eviction work is proportional to the segment walked, never to the
//! whole cache, and never empties the cache at once.
//!
//! ## Admission: second sight
//!
//! A name is stored only when it is missed a second time while the shard's admission filter
//! still remembers the first miss (a Bloom filter, two bits per name, about 1/16 of the
//! budget, emptied after it has taken a name per sixteen bits). A stream of names that never
//! come back (all-distinct workloads, or more distinct names cycling than the cache can hold)
//! then costs two bit tests per datapoint, not an insertion and a later eviction, and cannot
//! push the names that do repeat out of the cache; a name that repeats pays its hash one extra
//! time. This is the small-queue filter of S3-FIFO and TinyLFU's doorkeeper in their cheapest
//! form.
//!
//! A name whose entry would not fit in half a segment is not cached (its value is computed on
//! every lookup, exactly as if the cache were off): one such name cannot flush the cache.
//! A budget too small for a shard's minimum (three segments and a small index, a few KiB)
//! disables the cache.

mod shard;
#[cfg(test)]
mod tests;

use std::mem::size_of;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use shard::{Geometry, Shard};
pub(crate) use shard::{prefetch, prefetch_all};

/// Most shards one cache is split into.
pub(crate) const MAX_SHARDS: usize = 64;

/// Bytes the allocator is counted to spend around each allocation (glibc's chunk header and
/// rounding to 16 bytes).
pub(crate) const ALLOC_OVERHEAD: usize = 16;

/// Smallest shard worth having: below this a cache uses fewer shards (so that a 4 MiB cache
/// still has 64 KiB segments and caches 16 KiB names).
const MIN_SHARD_BYTES: usize = 1 << 20;

/// Largest segment (a name up to half of it can be cached: 32 KiB).
const MAX_SEGMENT_BYTES: usize = 64 << 10;

/// Segments a shard aims for at least; smaller budgets get smaller segments.
const TARGET_SEGMENTS: usize = 12;

/// Where a lookup copies a cached value. A lookup that races a writer may start over, so it
/// clears the sink before each attempt.
pub trait ValueSink {
    /// Forgets what a previous attempt wrote.
    fn clear(&mut self);
    /// Appends the next bytes of the value.
    fn extend(&mut self, bytes: &[u8]);
}

impl ValueSink for Vec<u8> {
    fn clear(&mut self) {
        Vec::clear(self);
    }

    fn extend(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// What [`NameCache::lookup`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Cached: the value is in the sink.
    Hit,
    /// Not cached; `admit` says whether to [`insert`](NameCache::insert) the value once
    /// computed (the name was missed recently before).
    Miss {
        /// Insert the computed value.
        admit: bool,
    },
}

/// A byte-bounded, sharded cache from names to small byte values. Shared (`Arc`) by every
/// ingestor; see the module documentation for layout, reading and eviction.
#[derive(Debug)]
pub struct NameCache {
    shards: Box<[Shard]>,
    seed: u64,
    shard_mask: u64,
    budget: usize,
    /// Bytes of the cache itself and its shard array (counted once).
    fixed: usize,
}

impl NameCache {
    /// A cache that holds at most `budget_bytes`; a budget below one shard's minimum (a few
    /// KiB) disables it: every lookup misses and nothing is stored or allocated.
    pub fn new(budget_bytes: usize) -> Self {
        let mut shards = MAX_SHARDS;
        while shards > 1 && budget_bytes / shards < MIN_SHARD_BYTES {
            shards /= 2;
        }
        let mut fixed = size_of::<Self>() + shards * size_of::<Shard>() + ALLOC_OVERHEAD;
        let per_shard = budget_bytes.saturating_sub(fixed) / shards;
        let geometry = Geometry::for_budget(per_shard, TARGET_SEGMENTS, MAX_SEGMENT_BYTES);
        if geometry.is_disabled() {
            // Nothing allocated, nothing counted.
            shards = 0;
            fixed = 0;
        }
        let shards: Box<[Shard]> = (0..shards).map(|_| Shard::new(geometry)).collect();
        Self {
            shard_mask: (shards.len() as u64).saturating_sub(1),
            shards,
            seed: fastrand::u64(..),
            budget: budget_bytes,
            fixed,
        }
    }

    /// The hash every other method takes: xxh3 of the name, seeded per cache so that names
    /// crafted to collide in one relay do not collide in another. Compute it once per lookup
    /// and pass it to [`lookup`](Self::lookup) and [`insert`](Self::insert).
    #[inline]
    pub fn hash(&self, name: &[u8]) -> u64 {
        xxh3_64_with_seed(name, self.seed)
    }

    /// The lookup of the data path: on a hit the cached value of `name` (whose
    /// [`hash`](Self::hash) is `hash`) is copied into `value`; on a miss the answer says
    /// whether to [`insert`](Self::insert) the value once computed (see *Admission*). Takes
    /// no lock and writes no shared memory on a hit (see *Reading without a lock*).
    #[inline]
    pub fn lookup(&self, hash: u64, name: &[u8], value: &mut impl ValueSink) -> Lookup {
        match self.shard(hash) {
            Some(shard) => shard.lookup(hash, name, value),
            None => Lookup::Miss { admit: false },
        }
    }

    /// Whether `name` is cached (its value into `value`), without the side effects of
    /// [`lookup`](Self::lookup): nothing is marked referenced or recorded for admission.
    pub fn peek(&self, hash: u64, name: &[u8], value: &mut impl ValueSink) -> bool {
        self.shard(hash)
            .is_some_and(|shard| shard.peek(hash, name, value))
    }

    /// Starts loading the index slot that a lookup of `hash` will read, without waiting for
    /// it (a prefetch instruction on x86-64, nothing elsewhere; nothing is written). Issued a
    /// few lookups ahead, then [`prefetch_entry`](Self::prefetch_entry), it lets the cache
    /// misses of consecutive lookups overlap instead of following one another.
    #[inline]
    pub fn prefetch_slot(&self, hash: u64) {
        if let Some(s) = self.shard(hash) {
            s.prefetch_slot(hash);
        }
    }

    /// Starts loading the entry (header, last key word, first value word) that a lookup of
    /// `hash`, a name of `len` bytes, will compare and copy, or for a name not indexed the
    /// admission-filter words its miss will read. Reads the index slot, which
    /// [`prefetch_slot`](Self::prefetch_slot) should have brought in. Racy by design: what it
    /// reads only steers the CPU's caches.
    #[inline]
    pub fn prefetch_entry(&self, hash: u64, len: usize) {
        if let Some(s) = self.shard(hash) {
            s.prefetch_entry(hash, len);
        }
    }

    /// Stores `value` for `name`, replacing an earlier value, evicting as the budget requires.
    /// A name and value too large for the cache (or a disabled cache) store nothing.
    pub fn insert(&self, hash: u64, name: &[u8], value: &[u8]) {
        if let Some(shard) = self.shard(hash) {
            shard.insert(hash, name, value);
        }
    }

    /// The byte budget the cache was given.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// True when the budget is too small for any entry: every lookup misses.
    pub fn is_disabled(&self) -> bool {
        self.shards.is_empty()
    }

    /// Every byte the cache holds now: entries, index, admission filter, bookkeeping,
    /// allocator overhead. Never more than [`budget`](Self::budget) (takes every shard's writer
    /// lock in turn; for tests and reports).
    pub fn accounted_bytes(&self) -> usize {
        self.fixed
            + self
                .shards
                .iter()
                .map(Shard::accounted_bytes)
                .sum::<usize>()
    }

    /// Names cached now (takes every shard's writer lock in turn).
    pub fn len(&self) -> usize {
        self.shards.iter().map(Shard::len).sum()
    }

    /// True when no name is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shard of `hash` (`None` for a disabled cache).
    #[inline]
    fn shard(&self, hash: u64) -> Option<&Shard> {
        // The low bits pick the shard (the count is a power of two); the index uses the high
        // 32 bits.
        self.shards.get((hash & self.shard_mask) as usize)
    }
}
