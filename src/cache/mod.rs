//! The relay's name caches: one byte-bounded map from metric names to small byte values,
//! shared by every connection and source.
//!
//! Three things are a pure function of a metric name and worth remembering: its route (an MD5
//! for `carbon_ch`), its white/blacklist verdict (a regex set) and its normalised tagged form
//! (a parse and a sort). A [`NameCache`] holds one of them for every name the relay has seen
//! lately, once per relay: a name that arrives on a thousand connections is computed twice
//! (see *Admission*) and stored once. The route cache ([`crate::router::RouteCache`]) is built on it; the filter and
//! the tag normaliser use it directly.
//!
//! ## Memory: bounded by the budget, counted to the byte
//!
//! A cache is given a byte budget and never holds more. It counts every byte it allocates:
//! the keys, the values, their headers, the index, the bookkeeping vectors and the
//! allocator's per-allocation overhead ([`ALLOC_OVERHEAD`]); [`NameCache::accounted_bytes`]
//! reports the sum, and a unit test holds it against the bytes the allocator actually handed
//! out. Nothing is allocated per lookup or per insertion: memory grows in whole segments
//! (below) and index doublings, up to the budget, and then stays flat.
//!
//! ## Layout: sharded, each shard a segmented log with an open-addressing index
//!
//! The cache is split into up to [`MAX_SHARDS`] shards by the name's hash, each behind its own
//! mutex, so two threads rarely meet on one lock (criterion `route_cache` bench: two threads on
//! one shared cache run at twice one thread's rate). A shard stores its entries back to back
//! in fixed-size *segments* (the log): a 12-byte header (hash, key length, value length,
//! flags), the name's bytes, the value's bytes. Its index is a linear-probing table of `u64`
//! slots, each holding 32 bits of the hash (to skip most key comparisons) and the entry's
//! position in the log. A hit is one lock, one or two index cache lines, one entry.
//!
//! ## Eviction: second chance over whole segments
//!
//! A hit sets the entry's *referenced* flag. When a shard needs room (a new segment, or index
//! slots) and its budget allows no more, it takes its oldest segment and walks it: entries
//! referenced since they were written are copied into a spare segment with the flag cleared
//! (they survive, now the newest), the others are dropped from the index. The emptied segment
//! becomes the next spare. This is CLOCK (FIFO with reinsertion) at segment granularity: a name
//! that keeps arriving is touched at least once per lap of the log and is never evicted by a
//! stream of one-off names; one-off names leave in arrival order. Eviction work is proportional
//! to the segment walked, never to the whole cache, and never empties the cache at once.
//!
//! ## Admission: second sight
//!
//! A name is stored only when it is missed a second time while its fingerprint is still in
//! the shard's admission filter (a direct-mapped array of 32-bit fingerprints, 1/16 of the
//! budget). A stream of names that never come back (all-distinct workloads, or more distinct
//! names cycling than the cache can hold) then costs one filter write per datapoint, not an
//! insertion and a later eviction, and cannot push the names that do repeat out of the cache;
//! a name that repeats pays its hash one extra time. This is the small-queue filter of S3-FIFO
//! and the doorkeeper of TinyLFU in their cheapest form.
//!
//! A name whose entry would not fit in half a segment is not cached (its value is computed on
//! every lookup, exactly as if the cache were off): one such name cannot flush the cache.
//! A budget too small for a shard's minimum (three segments and a small index) disables the
//! cache.

mod shard;
#[cfg(test)]
mod tests;

use std::mem::size_of;
use std::sync::{Mutex, MutexGuard};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use shard::{Geometry, Shard};

/// Most shards one cache is split into.
pub const MAX_SHARDS: usize = 64;

/// Bytes the allocator is counted to spend around each allocation (glibc's chunk header and
/// rounding to 16 bytes).
pub const ALLOC_OVERHEAD: usize = 16;

/// Smallest shard worth having: below this a cache uses fewer shards.
const MIN_SHARD_BYTES: usize = 256 << 10;

/// Largest segment (a name up to half of it can be cached: 32 KiB).
const MAX_SEGMENT_BYTES: usize = 64 << 10;

/// Segments a shard aims for at least; smaller budgets get smaller segments.
const TARGET_SEGMENTS: usize = 12;

/// What [`NameCache::lookup`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<R> {
    /// Cached: what the reader returned.
    Hit(R),
    /// Not cached; `admit` says whether to insert the value once computed (the name was
    /// missed recently before).
    Miss {
        /// Insert the computed value.
        admit: bool,
    },
}

/// A byte-bounded, sharded cache from names to small byte values. Shared (`Arc`) by every
/// ingestor; see the module documentation for layout and eviction.
#[derive(Debug)]
pub struct NameCache {
    shards: Box<[Mutex<Shard>]>,
    seed: u64,
    shard_mask: u64,
    budget: usize,
    /// Bytes of the cache itself and its shard array (counted once).
    fixed: usize,
}

impl NameCache {
    /// A cache that holds at most `budget_bytes`; a budget below one shard's minimum (a few
    /// KiB) disables it: every lookup misses and nothing is stored.
    pub fn new(budget_bytes: usize) -> Self {
        let mut shards = MAX_SHARDS;
        while shards > 1 && budget_bytes / shards < MIN_SHARD_BYTES {
            shards /= 2;
        }
        let mut fixed = size_of::<Self>() + shards * size_of::<Mutex<Shard>>() + ALLOC_OVERHEAD;
        let per_shard = budget_bytes.saturating_sub(fixed) / shards;
        let geometry = Geometry::for_budget(per_shard, TARGET_SEGMENTS, MAX_SEGMENT_BYTES);
        if geometry.is_disabled() {
            // Nothing allocated, nothing counted.
            shards = 0;
            fixed = 0;
        }
        let shards: Box<[Mutex<Shard>]> = (0..shards)
            .map(|_| Mutex::new(Shard::new(geometry)))
            .collect();
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
    /// and pass it to [`get_with`](Self::get_with) and [`insert`](Self::insert).
    #[inline]
    pub fn hash(&self, name: &[u8]) -> u64 {
        xxh3_64_with_seed(name, self.seed)
    }

    /// The lookup of the data path: `read` gets the cached value of `name` (whose
    /// [`hash`](Self::hash) is `hash`), or on a miss the answer says whether to
    /// [`insert`](Self::insert) the value once computed (see *Admission*).
    #[inline]
    pub fn lookup<R>(&self, hash: u64, name: &[u8], read: impl FnOnce(&[u8]) -> R) -> Lookup<R> {
        let Some(mut shard) = self.shard(hash) else {
            return Lookup::Miss { admit: false };
        };
        match shard.get(hash, name) {
            Some(value) => Lookup::Hit(read(value)),
            None => Lookup::Miss {
                admit: shard.admit(hash),
            },
        }
    }

    /// Calls `read` with the cached value of `name` (whose [`hash`](Self::hash) is `hash`) and
    /// marks the entry referenced; `None` when the name is not cached.
    #[inline]
    pub fn get_with<R>(&self, hash: u64, name: &[u8], read: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.shard(hash)?.get(hash, name).map(read)
    }

    /// Stores `value` for `name`, replacing an earlier value, evicting as the budget requires.
    /// A name and value too large for the cache (or a disabled cache) store nothing.
    pub fn insert(&self, hash: u64, name: &[u8], value: &[u8]) {
        if let Some(mut shard) = self.shard(hash) {
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

    /// Every byte the cache holds now: entries, index, bookkeeping, allocator overhead. Never
    /// more than [`budget`](Self::budget) (locks every shard in turn; for tests and reports).
    pub fn accounted_bytes(&self) -> usize {
        self.fixed
            + self
                .shards
                .iter()
                .map(|s| lock(s).accounted_bytes())
                .sum::<usize>()
    }

    /// Names cached now (locks every shard in turn).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// True when no name is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shard of `hash`, locked (`None` for a disabled cache).
    #[inline]
    fn shard(&self, hash: u64) -> Option<MutexGuard<'_, Shard>> {
        // The low bits pick the shard (the count is a power of two); the index uses the high
        // 32 bits.
        self.shards.get((hash & self.shard_mask) as usize).map(lock)
    }
}

/// A shard's lock. A panic while holding it cannot leave a shard unsound (every method keeps
/// the index and the log consistent between statements that can panic), so poisoning is
/// ignored.
#[inline]
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
