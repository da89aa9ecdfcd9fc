//! The relay's route cache: one per routing generation, shared by every connection and source.
//!
//! Routing is a pure function of the name, so the first lookup of a name anywhere in the
//! relay pays carbon's hash (MD5 for `carbon_ch`, or the rules' regexes), the second one pays
//! it again and stores the route (a name seen once is not stored: see the cache's
//! *Admission*), and every later one, on any connection, is an xxh3 hash, a lock-free read
//! (a sequence check, no shared cache line written) and a byte comparison. The store is a
//! [`NameCache`]: bounded in bytes (`router.route_cache_bytes`), sharded, second-chance
//! eviction; keys are the full name bytes, so an xxh3 collision costs a comparison, never a
//! misroute.
//!
//! One exception, measured: in runs of datapoints, a hashing router's names that fit two MD5
//! blocks (up to 119 bytes) are not looked up at all. Their hashes (`carbon_ch`'s MD5s eight at
//! a time in AVX2, sixteen with AVX-512) cost less than a lookup that has to fetch its index
//! slot and entry from memory, which is what a cache of 100k names does on every hit
//! ([`RouteCache::computes`]).
//!
//! A [`RouteCache`] is built from one [`Router`] and a budget and answers for that router
//! only: when the routing changes, build a new cache with the new router and drop the old
//! one (it holds nothing else).

use std::sync::Arc;

use super::{Router, Strategy, md5x};
use crate::name_cache::{Lookup, NameCache, ValueSink};

/// Routes with at most this many destinations are encoded on the stack on a miss.
const INLINE_ROUTE: usize = 16;

/// Decodes a cached route (little-endian `u16` indices) straight into the caller's vector,
/// after its first `start` entries.
struct RouteSink<'a> {
    out: &'a mut Vec<u16>,
    start: usize,
    /// The low byte of an index split across two `extend` calls.
    low: Option<u8>,
}

impl ValueSink for RouteSink<'_> {
    fn clear(&mut self) {
        self.out.truncate(self.start);
        self.low = None;
    }

    #[inline]
    fn extend(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match self.low.take() {
                Some(low) => self.out.push(u16::from_le_bytes([low, b])),
                None => self.low = Some(b),
            }
        }
    }
}

/// The shared cache in front of a [`Router`]: repeated names skip the hash.
#[derive(Debug)]
pub struct RouteCache {
    router: Arc<Router>,
    names: NameCache,
    enabled: bool,
    /// Names up to this length are routed by computation in runs ([`computes`](Self::computes)).
    computed_up_to: usize,
}

impl RouteCache {
    /// A cache holding at most `budget_bytes` (every byte counted: names, routes, index); a
    /// budget too small for one entry (a few KiB, or 0) disables it: every lookup routes.
    pub fn new(router: Arc<Router>, budget_bytes: usize) -> Self {
        let names = NameCache::new(budget_bytes);
        let computed_up_to = match router.strategy() {
            Strategy::Hash(_) => md5x::MAX_KEY,
            _ => 0,
        };
        Self {
            router,
            enabled: !names.is_disabled(),
            names,
            computed_up_to,
        }
    }

    /// True when a run of names ([`route_misses`](Self::route_misses)) should route `name`
    /// by computing it rather than look it up (and never store it): with a hashing router
    /// (`consistent-hashing`, `fast-hashing`), names up to 119 bytes (two MD5 blocks). Eight
    /// `carbon_ch` MD5s in AVX2, or one FNV-1a or MurmurHash3 of such a name, cost less than a
    /// lookup once the cache outgrows the CPU's caches (an index slot and an entry fetched
    /// from memory, one after the other; docs/benchmarks.md, "Benchmark notes": computed runs). Longer
    /// names, the rules and aggregation routers (regexes) still go through the cache, as does
    /// every lookup of a single name ([`route_into`](Self::route_into)).
    #[inline]
    pub fn computes(&self, name: &[u8]) -> bool {
        name.len() <= self.computed_up_to
    }

    /// The router behind this cache.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Destination indices for `name` into `out` (replacing its contents), from the cache when
    /// the name was routed before; the same answer as [`Router::route_into`], in carbon's
    /// yield order.
    #[inline]
    pub fn route_into(&self, name: &[u8], out: &mut Vec<u16>) {
        self.route_hashed(name, self.hash(name), out);
    }

    /// The hash [`route_hashed`](Self::route_hashed) and [`prefetch_slot`](Self::prefetch_slot) take.
    #[inline]
    pub fn hash(&self, name: &[u8]) -> u64 {
        if self.enabled {
            self.names.hash(name)
        } else {
            0
        }
    }

    /// Starts loading the index slot a lookup of the name with this [`hash`](Self::hash) will
    /// read; a few lookups later, [`prefetch_entry`](Self::prefetch_entry) and then the lookup
    /// itself find it in the CPU's cache (see [`NameCache::prefetch_slot`]).
    #[inline]
    pub fn prefetch_slot(&self, hash: u64) {
        if self.enabled {
            self.names.prefetch_slot(hash);
        }
    }

    /// Starts loading the entry a lookup of the name (`hash`, `len` bytes) will read.
    #[inline]
    pub fn prefetch_entry(&self, hash: u64, len: usize) {
        if self.enabled {
            self.names.prefetch_entry(hash, len);
        }
    }

    /// [`route_into`](Self::route_into) with the name's [`hash`](Self::hash) already computed.
    #[inline]
    pub fn route_hashed(&self, name: &[u8], hash: u64, out: &mut Vec<u16>) {
        out.clear();
        if let Some(admit) = self.lookup_append(name, hash, out) {
            self.router.route_into(name, out);
            if admit {
                self.insert(hash, name, out);
            }
        }
    }

    /// The first half of [`route_hashed`](Self::route_hashed), for routing a run of names
    /// together: on a hit appends the cached route to `out` and returns `None`; on a miss
    /// leaves `out` as it was and returns `Some(admit)` for
    /// [`route_misses`](Self::route_misses).
    #[inline]
    pub fn lookup_append(&self, name: &[u8], hash: u64, out: &mut Vec<u16>) -> Option<bool> {
        if !self.enabled {
            return Some(false);
        }
        let start = out.len();
        let mut sink = RouteSink {
            out,
            start,
            low: None,
        };
        match self.names.lookup(hash, name, &mut sink) {
            Lookup::Hit => None,
            Lookup::Miss { admit } => {
                out.truncate(start);
                Some(admit)
            }
        }
    }

    /// The second half: routes the names [`lookup_append`](Self::lookup_append) missed
    /// (with their hashes and admission answers), appending each route to `out` with its place
    /// in `spans[i]` (start, length), and stores the admitted ones. Their MD5s are computed
    /// together ([`Router::route_many`]).
    pub fn route_misses(
        &self,
        names: &[&[u8]],
        hashes: &[u64],
        admit: &[bool],
        out: &mut Vec<u16>,
        spans: &mut [(u32, u32)],
    ) {
        self.router.route_many(names, out, spans);
        for (((name, &hash), &admit), &(start, len)) in
            names.iter().zip(hashes).zip(admit).zip(spans.iter())
        {
            if admit && let Some(route) = out.get(start as usize..(start + len) as usize) {
                self.insert(hash, name, route);
            }
        }
    }

    #[cold]
    fn insert(&self, hash: u64, name: &[u8], out: &[u16]) {
        let mut inline = [0u8; 2 * INLINE_ROUTE];
        if let Some(bytes) = inline.get_mut(..2 * out.len()) {
            for (b, d) in bytes.chunks_exact_mut(2).zip(out.iter()) {
                b.copy_from_slice(&d.to_le_bytes());
            }
            self.names.insert(hash, name, bytes);
        } else {
            let bytes: Vec<u8> = out.iter().flat_map(|d| d.to_le_bytes()).collect();
            self.names.insert(hash, name, &bytes);
        }
    }

    /// Whether `name`'s route is cached, without marking it used or counting a sighting.
    pub fn is_cached(&self, name: &[u8]) -> bool {
        let mut out = Vec::new();
        let mut sink = RouteSink {
            out: &mut out,
            start: 0,
            low: None,
        };
        self.enabled && self.names.peek(self.hash(name), name, &mut sink)
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.names.budget()
    }

    /// Every byte the cache holds now; never more than [`budget`](Self::budget).
    pub fn accounted_bytes(&self) -> usize {
        self.names.accounted_bytes()
    }

    /// Names cached now.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when no name is cached.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::{DestinationSpec, HashType, RelayMethod, RouterSpec};

    fn router() -> Arc<Router> {
        let destinations = ["127.0.0.1:2104:a", "127.0.0.1:2204:b", "10.0.0.1:2004"]
            .iter()
            .map(|d| DestinationSpec::parse(d).unwrap())
            .collect();
        Arc::new(
            Router::new(RouterSpec {
                method: RelayMethod::ConsistentHashing,
                hash_type: HashType::CarbonCh,
                replication_factor: 2,
                diverse_replicas: false,
                destinations,
                rules: Vec::new(),
                aggregation_rules: Vec::new(),
                c_relay: None,
            })
            .unwrap(),
        )
    }

    fn uncached(router: &Router, name: &[u8]) -> Vec<u16> {
        let mut out = Vec::new();
        router.route_into(name, &mut out);
        out
    }

    #[test]
    fn cached_answers_equal_uncached() {
        let r = router();
        for budget in [0, 4 << 10, 16 << 10, 1 << 20] {
            let cache = RouteCache::new(r.clone(), budget);
            let mut out = Vec::new();
            for _round in 0..3 {
                for i in 0..500 {
                    // The same names every round: from the second on, answers come from
                    // what the cache stored (as far as the budget kept it).
                    let name = format!("host-{i:04}.cpu.user");
                    let want = uncached(&r, name.as_bytes());
                    for _ in 0..2 {
                        cache.route_into(name.as_bytes(), &mut out);
                        assert_eq!(out, want, "{name} budget {budget}");
                    }
                }
                assert!(cache.accounted_bytes() <= budget.max(1 << 10));
            }
        }
    }

    /// Runs compute names of at most two MD5 blocks for every hashing router, and look up
    /// longer ones; the rules router (regexes) looks up every name.
    #[test]
    fn runs_compute_short_names_of_hashing_routers_only() {
        let destinations: Vec<DestinationSpec> = ["127.0.0.1:2104:a", "127.0.0.1:2204:b"]
            .iter()
            .map(|d| DestinationSpec::parse(d).unwrap())
            .collect();
        let spec = |method, hash_type| RouterSpec {
            method,
            hash_type,
            replication_factor: 1,
            diverse_replicas: true,
            destinations: destinations.clone(),
            rules: Vec::new(),
            aggregation_rules: Vec::new(),
            c_relay: None,
        };
        let short = [b'a'; md5x::MAX_KEY];
        let long = [b'a'; md5x::MAX_KEY + 1];
        for method in [RelayMethod::ConsistentHashing, RelayMethod::FastHashing] {
            for hash_type in [HashType::CarbonCh, HashType::Fnv1aCh, HashType::Mmh3Ch] {
                let r = Arc::new(Router::new(spec(method, hash_type)).unwrap());
                let cache = RouteCache::new(r, 1 << 20);
                assert!(cache.computes(&short), "{method:?} {hash_type:?}");
                assert!(!cache.computes(&long), "{method:?} {hash_type:?}");
            }
        }
        let rules = Router::new(RouterSpec {
            rules: vec![crate::router::RuleSpec {
                pattern: None,
                destinations: vec![0],
                continue_matching: false,
            }],
            ..spec(RelayMethod::Rules, HashType::CarbonCh)
        })
        .unwrap();
        let cache = RouteCache::new(Arc::new(rules), 1 << 20);
        assert!(!cache.computes(&short) && !cache.computes(b"a"));
    }

    #[test]
    fn names_seen_once_are_not_stored() {
        let cache = RouteCache::new(router(), 4 << 20);
        let mut out = Vec::new();
        for i in 0..1000 {
            cache.route_into(format!("once.{i}").as_bytes(), &mut out);
        }
        assert!(cache.len() < 10, "{} stored", cache.len());
        assert!(!cache.is_cached(b"once.1"));
        for i in 0..1000 {
            cache.route_into(format!("once.{i}").as_bytes(), &mut out);
        }
        // A few are lost to fingerprint collisions in the admission filter (each is stored
        // on a later sighting).
        assert!(cache.len() > 900, "{} stored", cache.len());
        let cached = (0..1000)
            .filter(|i| cache.is_cached(format!("once.{i}").as_bytes()))
            .count();
        assert_eq!(cached, cache.len(), "peeking stores nothing");
    }

    #[test]
    fn zero_budget_caches_nothing() {
        let cache = RouteCache::new(router(), 0);
        let mut out = Vec::new();
        cache.route_into(b"a.b", &mut out);
        assert_eq!(out.len(), 2);
        assert!(cache.is_empty());
    }
}
