//! The per-connection route cache: repeated metric names skip the hash entirely.
//!
//! A connection sends the same few thousand names over and over; routing is a pure function of
//! the name, so the first lookup of a name pays carbon's hash (MD5 for `carbon_ch`) and every
//! later one is an xxh3 hash and a byte comparison. The map keys are the full name bytes, so an
//! xxh3 collision can only cost a comparison, never a misroute. Routes live in one arena
//! vector, so an entry is a key allocation plus two integers.
//!
//! Bounded by entry count; when full the cache is emptied (keeping its allocations) and refills
//! with the names in current use: O(1) and no per-entry bookkeeping on the hit path. The hit
//! path allocates nothing, takes no lock and touches no atomic.

use std::collections::HashMap;
use std::sync::Arc;

use super::Router;
use crate::protocol::NameHashBuilder;

/// Where a cached route lives in the arena.
#[derive(Clone, Copy, Debug)]
struct Slot {
    start: u32,
    len: u32,
}

/// A per-connection cache in front of a [`Router`]: repeated names skip the hash.
#[derive(Debug)]
pub struct RouteCache {
    router: Arc<Router>,
    capacity: usize,
    map: HashMap<Box<[u8]>, Slot, NameHashBuilder>,
    arena: Vec<u16>,
    scratch: Vec<u16>,
}

impl RouteCache {
    /// A cache holding at most `capacity` names; `0` disables caching (every lookup routes).
    pub fn new(router: Arc<Router>, capacity: usize) -> Self {
        let hasher = NameHashBuilder::random();
        Self {
            router,
            capacity,
            map: HashMap::with_hasher(hasher),
            arena: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// The router behind this cache.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Names currently cached.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no name is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forgets every cached name (keeps the allocations).
    pub fn clear(&mut self) {
        self.map.clear();
        self.arena.clear();
    }

    /// Destination indices for `name`, from the cache when seen before; same answer as
    /// [`Router::route_into`], in carbon's yield order.
    #[inline]
    pub fn route(&mut self, name: &[u8]) -> &[u16] {
        if let Some(&slot) = self.map.get(name) {
            let start = slot.start as usize;
            return self
                .arena
                .get(start..start + slot.len as usize)
                .unwrap_or(&[]);
        }
        self.route_miss(name)
    }

    #[cold]
    fn route_miss(&mut self, name: &[u8]) -> &[u16] {
        self.router.route_into(name, &mut self.scratch);
        if self.capacity == 0 {
            return &self.scratch;
        }
        if self.map.len() >= self.capacity || self.arena.len() > u32::MAX as usize / 2 {
            self.clear();
        }
        let slot = Slot {
            start: self.arena.len() as u32,
            len: self.scratch.len() as u32,
        };
        self.arena.extend_from_slice(&self.scratch);
        self.map.insert(name.into(), slot);
        &self.scratch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::{DestinationSpec, HashType, Method, RouterSpec};

    fn router() -> Arc<Router> {
        let destinations = ["127.0.0.1:2104:a", "127.0.0.1:2204:b", "10.0.0.1:2004"]
            .iter()
            .map(|d| DestinationSpec::parse(d).unwrap())
            .collect();
        Arc::new(
            Router::new(RouterSpec {
                method: Method::ConsistentHashing,
                hash_type: HashType::CarbonCh,
                replication_factor: 2,
                diverse_replicas: false,
                destinations,
                rules: Vec::new(),
                aggregation_rules: Vec::new(),
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
        for capacity in [0, 1, 3, 1000] {
            let mut cache = RouteCache::new(r.clone(), capacity);
            for round in 0..3 {
                for i in 0..50 {
                    let name = format!("host-{i:04}.cpu.{round}.user");
                    let want = uncached(&r, name.as_bytes());
                    assert_eq!(
                        cache.route(name.as_bytes()),
                        &want[..],
                        "{name} cap {capacity}"
                    );
                    assert_eq!(
                        cache.route(name.as_bytes()),
                        &want[..],
                        "{name} cap {capacity}"
                    );
                }
                assert!(cache.len() <= capacity);
            }
        }
    }

    #[test]
    fn capacity_zero_caches_nothing() {
        let mut cache = RouteCache::new(router(), 0);
        cache.route(b"a.b");
        assert!(cache.is_empty());
    }

    #[test]
    fn full_cache_clears_and_refills() {
        let mut cache = RouteCache::new(router(), 2);
        cache.route(b"a");
        cache.route(b"b");
        assert_eq!(cache.len(), 2);
        cache.route(b"c");
        assert_eq!(cache.len(), 1);
    }
}
