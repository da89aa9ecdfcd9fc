//! carbon's consistent-hashing ring and fast-hashing node order, and the precomputed
//! preference table that makes a lookup one hash, one binary search and one slice copy.
//!
//! [`ConsistentHashRing`] mirrors `carbon.hashing.ConsistentHashRing` (1.1.10): 100 replicas
//! per `(server, instance)` node, collisions bumped by +1 without wrapping, lookup at the first
//! entry whose position is ≥ the key's, and `get_nodes` walking the ring for distinct nodes.
//! [`FastHashOrder`] mirrors `carbon.routers.FastHashRing`. Because carbon's walk depends only
//! on the start index, [`RouteTable`] evaluates `ConsistentHashingRouter.getDestinations` once
//! per possible start at build time; routing a datapoint never walks the ring.

use super::HashType;
use super::hash::{NodeKeys, carbon_hash};

/// Replicas per node; fixed in carbon.
pub(crate) const REPLICA_COUNT: usize = 100;

/// A ring node as carbon keys it: the port is not part of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node<'a> {
    /// Server (host) string as configured.
    pub server: &'a str,
    /// Instance name, `None` when the destination has none.
    pub instance: Option<&'a str>,
}

/// carbon's `ConsistentHashRing`: sorted `(position, node)` entries; nodes are destination
/// indices.
#[derive(Clone, Debug)]
pub struct ConsistentHashRing {
    hash_type: HashType,
    positions: Vec<i64>,
    nodes: Vec<u16>,
    node_count: usize,
    buckets: Buckets,
}

/// Where each stretch of ring positions starts in the sorted ring, so that
/// [`ConsistentHashRing::start_index`] searches a handful of entries instead of bisecting the
/// whole ring (eight dependent loads for 200 entries, a fifth of routing a new name).
/// Bucket `k` covers positions `base + (k << shift) ..`; there are about four times as many
/// buckets as entries, so most hold zero or one, and the entries of a bucket below the
/// position are counted rather than bisected (no branch on how many there are).
#[derive(Clone, Debug)]
struct Buckets {
    base: i64,
    shift: u32,
    /// `starts[k]`: the first entry at or after bucket `k`'s first position; one more than
    /// there are buckets (the last is the ring's length).
    starts: Vec<u32>,
}

impl Buckets {
    fn new(positions: &[i64]) -> Self {
        let (Some(&base), Some(&last)) = (positions.first(), positions.last()) else {
            return Self {
                base: 0,
                shift: 0,
                starts: vec![0],
            };
        };
        let count = (4 * positions.len()).next_power_of_two().min(1 << 16);
        // The smallest shift that fits every position from `base` to `last` into `count`
        // buckets.
        let span = last.abs_diff(base);
        let mut shift = 0;
        while (span >> shift) >= count as u64 {
            shift += 1;
        }
        let starts = (0..=count as u64)
            .map(|k| {
                let first = i128::from(base) + (i128::from(k) << shift);
                positions.partition_point(|&p| i128::from(p) < first) as u32
            })
            .collect();
        Self {
            base,
            shift,
            starts,
        }
    }

    /// `positions.partition_point(|&p| p < position)`, `positions` being the sorted ring the
    /// buckets were built on.
    #[inline]
    fn partition_point(&self, positions: &[i64], position: i64) -> usize {
        if position <= self.base {
            return 0;
        }
        let bucket = (position.abs_diff(self.base) >> self.shift) as usize;
        match (self.starts.get(bucket), self.starts.get(bucket + 1)) {
            (Some(&lo), Some(&hi)) => {
                let (lo, hi) = (lo as usize, hi as usize);
                lo + positions.get(lo..hi).map_or(0, |stretch| {
                    stretch.iter().map(|&p| usize::from(p < position)).sum()
                })
            }
            // Past the last bucket: past the last entry.
            _ => positions.len(),
        }
    }
}

impl ConsistentHashRing {
    /// Builds the ring, adding `nodes` in order (node `i` is destination index `i`).
    ///
    /// Callers guarantee at most `u16::MAX + 1` distinct nodes.
    pub fn new(hash_type: HashType, nodes: &[Node<'_>], keys: &NodeKeys) -> Self {
        let mut entries: Vec<(i64, u16)> = Vec::with_capacity(nodes.len() * REPLICA_COUNT);
        let mut taken = TakenPositions::default();
        for (index, node) in nodes.iter().enumerate() {
            for i in 0..REPLICA_COUNT {
                let key = keys.replica_key(hash_type, node.server, node.instance, i);
                // carbon: `while position in [r[0] for r in self.ring]: position += 1`.
                let position = taken.claim(carbon_hash(key.as_bytes(), hash_type));
                entries.push((position, index as u16));
            }
        }
        entries.sort_unstable();
        let positions: Vec<i64> = entries.iter().map(|e| e.0).collect();
        Self {
            hash_type,
            buckets: Buckets::new(&positions),
            positions,
            nodes: entries.iter().map(|e| e.1).collect(),
            node_count: nodes.len(),
        }
    }

    /// The hash this ring positions with.
    pub fn hash_type(&self) -> HashType {
        self.hash_type
    }

    /// Number of ring entries (replicas × nodes).
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// True for a ring without nodes.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The sorted ring as `(position, destination index)`, as carbon's `ring` list.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (i64, u16)> + '_ {
        self.positions
            .iter()
            .copied()
            .zip(self.nodes.iter().copied())
    }

    /// The ring position carbon searches for `key`.
    #[inline]
    pub fn position(&self, key: &[u8]) -> i64 {
        carbon_hash(key, self.hash_type)
    }

    /// Index of the first entry with position ≥ `position`, wrapping to 0 (carbon's
    /// `bisect_left(ring, (position, ())) % len(ring)`). The ring must not be empty.
    #[inline]
    pub fn start_index(&self, position: i64) -> usize {
        let i = self.buckets.partition_point(&self.positions, position);
        if i == self.positions.len() { 0 } else { i }
    }

    /// carbon's `get_nodes` from ring index `start`: distinct nodes in ring order; a one-node
    /// ring yields its node first from the short-circuit and then again from the walk.
    pub fn walk_from(&self, start: usize) -> impl Iterator<Item = u16> + '_ {
        let len = self.positions.len();
        let short_circuit = (self.node_count == 1).then(|| self.nodes.first().copied());
        let mut seen = vec![false; self.node_count];
        let mut seen_count = 0usize;
        let mut index = start;
        let last_index = (start + len).wrapping_sub(1) % len.max(1);
        let walk = std::iter::from_fn(move || {
            while seen_count < self.node_count && index != last_index {
                let node = self.nodes[index];
                index = (index + 1) % len;
                let slot = &mut seen[usize::from(node)];
                if !*slot {
                    *slot = true;
                    seen_count += 1;
                    return Some(node);
                }
            }
            None
        });
        short_circuit.flatten().into_iter().chain(walk)
    }

    /// carbon's `get_nodes(key)`.
    pub fn get_nodes(&self, key: &[u8]) -> impl Iterator<Item = u16> + '_ {
        let start = self.start_index(self.position(key));
        self.walk_from(start)
    }
}

/// Ring positions already used, answering "first free position ≥ p" in near-constant time.
///
/// carbon probes +1 at a time against the whole ring; with more than ~650 `carbon_ch` nodes the
/// 16-bit space saturates and probing goes quadratic. A union-find over "next candidate"
/// pointers gives the same positions without the quadratic walk.
#[derive(Debug, Default)]
struct TakenPositions {
    /// For a taken position, a position ≥ it+1 to try next; absent means free.
    next: std::collections::HashMap<i64, i64>,
}

impl TakenPositions {
    /// Takes and returns the first free position ≥ `position`.
    fn claim(&mut self, position: i64) -> i64 {
        let mut free = position;
        while let Some(&n) = self.next.get(&free) {
            free = n;
        }
        // Path compression: every probed position now points past the one just taken.
        let mut p = position;
        while p != free {
            match self.next.insert(p, free + 1) {
                Some(n) => p = n,
                None => break,
            }
        }
        self.next.insert(free, free + 1);
        free
    }
}

/// carbon's `FastHashRing`: nodes sorted by the hash of `str((server, instance))`; a key
/// starts at `hash(key) mod N` and takes every node once, in order.
#[derive(Clone, Debug)]
pub struct FastHashOrder {
    hash_type: HashType,
    sorted: Vec<(i64, u16)>,
}

impl FastHashOrder {
    /// Sorts `nodes` (node `i` is destination index `i`).
    ///
    /// carbon sorts a Python set by hash alone (stable, in set iteration order); equal node
    /// hashes are therefore ordered arbitrarily by carbon. Here ties keep destination order.
    pub fn new(hash_type: HashType, nodes: &[Node<'_>], keys: &NodeKeys) -> Self {
        let mut sorted: Vec<(i64, u16)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let key = keys.node_key(n.server, n.instance);
                (carbon_hash(key.as_bytes(), hash_type), i as u16)
            })
            .collect();
        sorted.sort_by_key(|e| e.0);
        Self { hash_type, sorted }
    }

    /// Nodes as `(hash, destination index)` in carbon's sorted order.
    pub fn sorted(&self) -> &[(i64, u16)] {
        &self.sorted
    }

    /// The start index for a key position: `position mod N`, non-negative as in Python.
    #[inline]
    pub fn start_index(&self, position: i64) -> usize {
        position.rem_euclid(self.sorted.len().max(1) as i64) as usize
    }

    /// carbon's `get_nodes` from `start`: every node once.
    pub fn walk_from(&self, start: usize) -> impl Iterator<Item = u16> + '_ {
        let n = self.sorted.len();
        (start..start + n).map(move |i| self.sorted[i % n].1)
    }

    /// The hash this order uses.
    pub fn hash_type(&self) -> HashType {
        self.hash_type
    }
}

/// Replication settings applied to a node walk, as `ConsistentHashingRouter.getDestinations`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replication<'a> {
    /// `REPLICATION_FACTOR` (≥ 1).
    pub factor: usize,
    /// `DIVERSE_REPLICAS`.
    pub diverse: bool,
    /// Per destination index, an id equal for destinations with the same server string.
    pub server_ids: &'a [u16],
    /// Number of distinct server ids: once all are used, carbon's walk can yield nothing more.
    pub server_count: usize,
}

impl Replication<'_> {
    /// Appends what carbon yields for this walk to `out`.
    pub(crate) fn select(&self, walk: impl Iterator<Item = u16>, out: &mut Vec<u16>) {
        if self.diverse {
            // Servers used so far; replication factors are tiny, a Vec is the fastest set.
            let mut used: Vec<u16> = Vec::with_capacity(self.factor);
            for node in walk {
                let server = self.server_ids[usize::from(node)];
                if used.contains(&server) {
                    continue;
                }
                used.push(server);
                out.push(node);
                if used.len() >= self.factor || used.len() >= self.server_count {
                    return;
                }
            }
        } else {
            out.extend(walk.take(self.factor));
        }
    }
}

/// Precomputed routes: for every start index, the destinations carbon yields.
#[derive(Clone, Debug, Default)]
pub(crate) struct RouteTable {
    offsets: Vec<u32>,
    routes: Vec<u16>,
}

impl RouteTable {
    /// Evaluates `walk(start)` through `replication` for every start in `0..starts`.
    pub(crate) fn build<'w, I, F>(starts: usize, replication: &Replication<'_>, mut walk: F) -> Self
    where
        I: Iterator<Item = u16> + 'w,
        F: FnMut(usize) -> I,
    {
        let mut offsets = Vec::with_capacity(starts + 1);
        let mut routes = Vec::with_capacity(starts * replication.factor.min(8));
        offsets.push(0);
        for start in 0..starts {
            replication.select(walk(start), &mut routes);
            offsets.push(routes.len() as u32);
        }
        Self { offsets, routes }
    }

    /// The route for `start` (empty when out of range, which callers never ask).
    #[inline]
    pub(crate) fn get(&self, start: usize) -> &[u16] {
        match (self.offsets.get(start), self.offsets.get(start + 1)) {
            (Some(&a), Some(&b)) => self.routes.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes<'a>(list: &[(&'a str, Option<&'a str>)]) -> Vec<Node<'a>> {
        list.iter()
            .map(|&(server, instance)| Node { server, instance })
            .collect()
    }

    #[test]
    fn ring_has_100_unique_sorted_entries_per_node() {
        let keys = NodeKeys::new();
        for ht in [HashType::CarbonCh, HashType::Fnv1aCh, HashType::Mmh3Ch] {
            // Same instance on every host: fnv1a_ch keys collide for all of them.
            let n = nodes(&[("a", Some("x")), ("b", Some("x")), ("c", Some("x"))]);
            let ring = ConsistentHashRing::new(ht, &n, &keys);
            assert_eq!(ring.len(), 300);
            let e: Vec<_> = ring.entries().collect();
            assert!(e.windows(2).all(|w| w[0].0 < w[1].0), "{ht:?}");
        }
    }

    /// The bucketed search answers exactly as a bisection of the whole ring: rings of every
    /// hash type and size (mmh3's positions are signed 32-bit), queried at and around every
    /// entry, at the extremes and at random.
    #[test]
    fn bucketed_search_equals_bisection() {
        let keys = NodeKeys::new();
        let servers: Vec<String> = (0..40).map(|i| format!("10.0.0.{i}")).collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for ht in [HashType::CarbonCh, HashType::Fnv1aCh, HashType::Mmh3Ch] {
            for count in [1, 2, 3, 7, 40] {
                let n: Vec<Node<'_>> = servers[..count]
                    .iter()
                    .map(|s| Node {
                        server: s,
                        instance: None,
                    })
                    .collect();
                let ring = ConsistentHashRing::new(ht, &n, &keys);
                let mut queries = vec![i64::MIN, i64::MIN + 1, -1, 0, 1, 65_535, 65_536, i64::MAX];
                for &p in &ring.positions {
                    queries.extend([p - 1, p, p + 1]);
                }
                for _ in 0..20_000 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    queries.push(match ht {
                        HashType::Mmh3Ch => i64::from(seed as i32),
                        _ => (seed % 70_000) as i64,
                    });
                }
                for q in queries {
                    let expected = ring.positions.partition_point(|&p| p < q);
                    assert_eq!(
                        ring.buckets.partition_point(&ring.positions, q),
                        expected,
                        "{ht:?} {count} nodes, position {q}"
                    );
                }
            }
        }
        for positions in [
            vec![],
            vec![5],
            vec![0, 1],
            vec![-3, 0, 255, 256, 257, 1 << 40],
        ] {
            let buckets = Buckets::new(&positions);
            for q in [
                i64::MIN,
                -4,
                -3,
                -2,
                0,
                1,
                2,
                255,
                256,
                257,
                258,
                1 << 40,
                i64::MAX,
            ] {
                assert_eq!(
                    buckets.partition_point(&positions, q),
                    positions.partition_point(|&p| p < q),
                    "{positions:?} at {q}"
                );
            }
        }
    }

    #[test]
    fn taken_positions_bump_like_linear_probing() {
        let mut taken = TakenPositions::default();
        let mut naive = std::collections::HashSet::new();
        let mut seed = 7u64;
        for _ in 0..5000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let p = ((seed >> 33) % 300) as i64;
            let mut q = p;
            while naive.contains(&q) {
                q += 1;
            }
            naive.insert(q);
            assert_eq!(taken.claim(p), q);
        }
    }

    #[test]
    fn single_node_ring_yields_node_twice() {
        let keys = NodeKeys::new();
        let ring = ConsistentHashRing::new(HashType::CarbonCh, &nodes(&[("h", None)]), &keys);
        let got: Vec<u16> = ring.get_nodes(b"foo").collect();
        assert_eq!(got, vec![0, 0]);
    }

    #[test]
    fn walk_yields_each_node_once() {
        let keys = NodeKeys::new();
        let n = nodes(&[("a", None), ("b", None), ("c", None)]);
        let ring = ConsistentHashRing::new(HashType::CarbonCh, &n, &keys);
        for start in [0, 1, 150, 299] {
            let mut got: Vec<u16> = ring.walk_from(start).collect();
            got.sort_unstable();
            assert_eq!(got, vec![0, 1, 2]);
        }
    }

    #[test]
    fn fast_start_is_non_negative_modulo() {
        let keys = NodeKeys::new();
        let n = nodes(&[("a", None), ("b", None), ("c", None)]);
        let order = FastHashOrder::new(HashType::Mmh3Ch, &n, &keys);
        assert_eq!(order.start_index(-1), 2);
        assert_eq!(order.start_index(-3), 0);
        assert_eq!(order.start_index(4), 1);
        assert_eq!(order.walk_from(2).count(), 3);
    }

    #[test]
    fn diverse_selection_skips_same_server() {
        let rep = Replication {
            factor: 2,
            diverse: true,
            server_ids: &[0, 0, 2],
            server_count: 2,
        };
        let mut out = Vec::new();
        rep.select([1u16, 0, 2].into_iter(), &mut out);
        assert_eq!(out, vec![1, 2]);
        let nondiverse = Replication {
            diverse: false,
            ..rep
        };
        out.clear();
        nondiverse.select([1u16, 0, 2].into_iter(), &mut out);
        assert_eq!(out, vec![1, 0]);
    }
}
