use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write;

use super::*;

/// Counts, per thread, the bytes and allocations live through the system allocator, so a test
/// can compare a cache's own accounting with what the allocator handed out to it.
struct Counting;

thread_local! {
    static LIVE: Cell<(isize, isize)> = const { Cell::new((0, 0)) };
}

fn count(bytes: isize, allocations: isize) {
    let _ = LIVE.try_with(|c| {
        let (b, a) = c.get();
        c.set((b + bytes, a + allocations));
    });
}

// SAFETY: every call forwards to `System` with the same arguments; the counting touches only a
// const-initialised thread-local `Cell` without a destructor (no allocation, no reentrancy).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize, 1);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize, 1);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize), -1);
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize, 0);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> (isize, isize) {
    LIVE.with(|c| c.get())
}

impl NameCache {
    /// Checks every shard's invariants.
    fn check(&self) {
        for s in self.shards.iter() {
            s.check();
        }
        assert!(self.accounted_bytes() <= self.budget);
    }
}

fn put(cache: &NameCache, name: &[u8], value: &[u8]) {
    cache.insert(cache.hash(name), name, value);
}

fn get(cache: &NameCache, name: &[u8]) -> Option<Vec<u8>> {
    let mut value = Vec::new();
    match cache.lookup(cache.hash(name), name, &mut value) {
        Lookup::Hit => Some(value),
        Lookup::Miss { .. } => None,
    }
}

/// Every key length, whole words and tails: each name finds its own value, and a name of the
/// same length differing only in its last byte does not.
#[test]
fn keys_of_every_length_compare_to_the_byte() {
    let cache = NameCache::new(1 << 20);
    let name = |len: usize, last: u8| {
        let mut n: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        if let Some(b) = n.last_mut() {
            *b = last;
        }
        n
    };
    for len in 1..=40 {
        put(&cache, &name(len, b'x'), &[len as u8]);
    }
    for len in 1..=40 {
        assert_eq!(
            get(&cache, &name(len, b'x')),
            Some(vec![len as u8]),
            "{len}"
        );
        assert_eq!(get(&cache, &name(len, b'y')), None, "{len}");
    }
}

#[test]
fn stores_replaces_and_misses() {
    let cache = NameCache::new(1 << 20);
    assert!(!cache.is_disabled());
    assert_eq!(get(&cache, b"a.b"), None);
    put(&cache, b"a.b", b"\x01\x00");
    put(&cache, b"a.c", b"");
    assert_eq!(get(&cache, b"a.b").as_deref(), Some(&b"\x01\x00"[..]));
    assert_eq!(get(&cache, b"a.c").as_deref(), Some(&b""[..]));
    put(&cache, b"a.b", b"xyz");
    assert_eq!(get(&cache, b"a.b").as_deref(), Some(&b"xyz"[..]));
    assert_eq!(cache.len(), 2);
    cache.check();
}

#[test]
fn tiny_budget_disables() {
    for budget in [0, 100, 2000] {
        let cache = NameCache::new(budget);
        assert!(cache.is_disabled(), "{budget}");
        put(&cache, b"a", b"b");
        assert_eq!(get(&cache, b"a"), None);
        assert_eq!(cache.accounted_bytes(), 0);
    }
}

#[test]
fn oversized_entries_are_not_cached() {
    let cache = NameCache::new(64 << 10);
    let long = vec![b'x'; 40 << 10];
    put(&cache, &long, b"v");
    assert_eq!(get(&cache, &long), None);
    put(&cache, b"short", b"v");
    assert_eq!(get(&cache, b"short").as_deref(), Some(&b"v"[..]));
    cache.check();
}

/// A model check: random inserts, replacements and lookups against a `HashMap`, over budgets
/// from a few KiB to a few MiB; every hit must carry the last value stored, and the
/// invariants hold throughout.
#[test]
fn agrees_with_a_map_under_random_operations() {
    let mut rng = fastrand::Rng::with_seed(7);
    for budget in [16 << 10, 40 << 10, 100 << 10, 3 << 20] {
        let cache = NameCache::new(budget);
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut hits = 0;
        for step in 0..40_000 {
            let n = rng.usize(..3000);
            let len = if rng.u8(..20) == 0 {
                rng.usize(..600)
            } else {
                0
            };
            let name = format!("n{n}.{}", "x".repeat(len)).into_bytes();
            if rng.bool() {
                let value = vec![rng.u8(..); rng.usize(..5)];
                put(&cache, &name, &value);
                model.insert(name, value);
            } else if let Some(v) = get(&cache, &name) {
                hits += 1;
                assert_eq!(Some(&v), model.get(&name), "budget {budget} step {step}");
            }
            if step % 5000 == 0 {
                cache.check();
            }
        }
        cache.check();
        let enough = if budget > 1 << 20 { 10_000 } else { 10 };
        assert!(hits > enough, "budget {budget}: only {hits} hits");
    }
}

/// Under churn (a stream of one-off names several times larger than the cache), names looked
/// up again and again stay cached: second chance keeps them, where emptying the cache when
/// full would lose them all on every lap.
#[test]
fn hot_names_survive_churn() {
    let cache = NameCache::new(1 << 20);
    let hot: Vec<Vec<u8>> = (0..2000)
        .map(|i| format!("hot.host-{i}.cpu").into_bytes())
        .collect();
    for h in &hot {
        put(&cache, h, b"\x01\x00");
    }
    let mut cold = 0u64;
    let mut misses = 0;
    for round in 0..40 {
        for h in &hot {
            match get(&cache, h) {
                Some(_) => {}
                None => {
                    misses += 1;
                    put(&cache, h, b"\x01\x00");
                }
            }
            // Three one-off names per hot lookup: 240k names of ~45 bytes, ten times the
            // budget; one round of them fills about a third of it.
            for _ in 0..3 {
                let name = format!("cold.stream.{cold}.value.sum");
                put(&cache, name.as_bytes(), b"\x00\x00");
                cold += 1;
            }
        }
        if round == 0 {
            assert!(cache.accounted_bytes() <= cache.budget());
        }
    }
    cache.check();
    assert!(
        misses < hot.len() / 10,
        "{misses} hot-name misses in {} lookups",
        40 * hot.len()
    );
}

/// The budget holds under a million distinct names, and the accounting is the allocator's
/// truth: the bytes the cache accounts for are exactly the bytes the allocator handed out on
/// its behalf, plus [`ALLOC_OVERHEAD`] per live allocation.
#[test]
fn memory_stays_within_budget_under_a_million_distinct_names() {
    let budget = 4 << 20;
    let mut name = String::with_capacity(64);
    let before = live();
    let cache = NameCache::new(budget);
    let mut peak_accounted = 0;
    for i in 0..1_000_000u32 {
        name.clear();
        let _ = write!(name, "servers.host-{:05}.cpu.{}.user", i / 64, i % 64);
        put(&cache, name.as_bytes(), &i.to_le_bytes()[..2]);
        if i % 50_000 == 0 {
            let accounted = cache.accounted_bytes();
            peak_accounted = peak_accounted.max(accounted);
            assert!(accounted <= budget, "{accounted} > {budget} after {i}");
            let (bytes, allocations) = live();
            let allocated = (bytes - before.0) + (allocations - before.1) * ALLOC_OVERHEAD as isize;
            // The cache's own struct lives wherever its owner puts it (here: the stack).
            assert_eq!(
                allocated as usize,
                accounted - size_of::<NameCache>(),
                "after {i} names"
            );
        }
    }
    cache.check();
    assert!(
        peak_accounted > budget * 3 / 4,
        "the cache should use its budget: {peak_accounted} of {budget}"
    );
    assert!(cache.len() > 40_000, "{} names cached", cache.len());
}

/// 16 KiB names: each shard's segments hold only a few, eviction walks them, the budget holds.
#[test]
fn long_names_stay_within_budget() {
    let budget = 4 << 20;
    let cache = NameCache::new(budget);
    let mut name = vec![b'a'; 16 << 10];
    for i in 0..600u32 {
        name[..4].copy_from_slice(&i.to_le_bytes());
        put(&cache, &name, b"\x01\x00");
        assert!(get(&cache, &name).is_some(), "name {i} cached");
        assert!(cache.accounted_bytes() <= budget);
    }
    // Three 16 KiB names fit a 64 KiB segment; the index and filter take about a third.
    assert!(cache.len() > 100, "{} cached", cache.len());
    cache.check();
}

/// Lookups racing insertions, replacements and evictions never see a torn or foreign value:
/// every value carries its name's checksum and a version repeated throughout, and a small
/// budget keeps the writers evicting while the readers read.
#[test]
fn lookups_racing_writers_see_whole_values() {
    fn value_for(name: &[u8], version: u8) -> Vec<u8> {
        let sum = name
            .iter()
            .fold(0u8, |a, &b| a.wrapping_mul(31).wrapping_add(b));
        let mut v = vec![version; 3 + name.len() % 13];
        v.push(sum);
        v
    }
    fn valid(name: &[u8], v: &[u8]) -> bool {
        let Some((&sum, body)) = v.split_last() else {
            return false;
        };
        let want = value_for(name, body.first().copied().unwrap_or(0));
        want.last() == Some(&sum)
            && body.len() == want.len() - 1
            && body.iter().all(|&b| b == body[0])
    }
    let cache = NameCache::new(64 << 10);
    let hits = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let cache = &cache;
            let hits = &hits;
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(u64::from(t));
                let mut value = Vec::new();
                for i in 0..60_000usize {
                    let name = format!("race.{}.{}", rng.u32(..300), "y".repeat(i % 7));
                    let h = cache.hash(name.as_bytes());
                    match cache.lookup(h, name.as_bytes(), &mut value) {
                        Lookup::Hit => {
                            assert!(valid(name.as_bytes(), &value), "{name}: {value:?}");
                            hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Lookup::Miss { .. } if t % 2 == 0 => {
                            let v = value_for(name.as_bytes(), rng.u8(..));
                            cache.insert(h, name.as_bytes(), &v);
                        }
                        Lookup::Miss { .. } => {}
                    }
                }
            });
        }
    });
    cache.check();
    assert!(hits.into_inner() > 1000);
}

#[test]
fn a_name_is_admitted_on_second_sight() {
    let cache = NameCache::new(1 << 20);
    let h = cache.hash(b"a.b");
    let mut v = Vec::new();
    assert_eq!(
        cache.lookup(h, b"a.b", &mut v),
        Lookup::Miss { admit: false }
    );
    assert_eq!(
        cache.lookup(h, b"a.b", &mut v),
        Lookup::Miss { admit: true }
    );
    cache.insert(h, b"a.b", b"v");
    assert_eq!(cache.lookup(h, b"a.b", &mut v), Lookup::Hit);
    assert_eq!(v, b"v");
    // Names seen once each are rarely admitted.
    let admitted = (0..100_000)
        .map(|i| format!("once.{i}"))
        .filter(|n| {
            let h = cache.hash(n.as_bytes());
            cache.lookup(h, n.as_bytes(), &mut v) != Lookup::Miss { admit: false }
        })
        .count();
    // The Bloom filter admits about one in seventy at its fullest, 0.5 % on average.
    assert!(admitted < 1_000, "{admitted} one-off names admitted");
    assert_eq!(cache.len(), 1);
    assert_eq!(
        NameCache::new(0).lookup(h, b"a.b", &mut v),
        Lookup::Miss { admit: false }
    );
}

/// Every name of a working set is admitted at its second sight: no two names can keep each
/// other out of the cache (a table of one fingerprint per position let about one name in ten
/// of a 100k set miss forever, each miss paying the route's MD5).
#[test]
fn every_repeating_name_is_admitted() {
    let cache = NameCache::new(16 << 20);
    let names: Vec<String> = (0..100_000).map(|i| format!("set.host-{i}.cpu")).collect();
    let mut v = Vec::new();
    for _ in 0..2 {
        for n in &names {
            let h = cache.hash(n.as_bytes());
            if let Lookup::Miss { admit: true } = cache.lookup(h, n.as_bytes(), &mut v) {
                cache.insert(h, n.as_bytes(), b"r");
            }
        }
    }
    assert_eq!(cache.len(), names.len());
}
