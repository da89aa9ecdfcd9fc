//! Route lookup cost: uncached (`Router::route_into`, one MD5 per datapoint for `carbon_ch`)
//! against the relay's shared [`RouteCache`], and the shared cache against the alternative it
//! was measured against: a private cache per thread (what a per-worker first level would be;
//! it is the pre-0.2 per-connection design, kept here only as the yardstick).
//!
//! - `route/cold/*`: the uncached router over 100k names; `cold/carbon_ch_runs` routes them in
//!   runs of 128 (`Router::route_many`: sixteen MD5s at a time with AVX2 or AVX-512, eight otherwise,
//!   what the relay does for short `carbon_ch` names instead of looking them up).
//! - `route/hit/*`: 100k warm names; `shared_1t` one thread, `shared_2t` two threads on one
//!   cache, `private_1t`/`private_2t` a private map per thread.
//! - `route/miss/*`: every name new (a walk over 1M names through a 16 MiB cache, so each is
//!   evicted before it comes round again): hash, route, insert, evict.
//! - `route/churn/*`: 20k hot names, each lookup followed by one never-seen name; prints the
//!   hot names' hit ratio.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;

use anthracite::unstable::router::{
    DestinationSpec, HashType, RelayMethod, RouteCache, Router, RouterSpec,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};

/// Names per iteration batch; a realistic set of distinct series repeating every interval.
const NAMES: usize = 100_000;
/// The relay's default budget.
const BUDGET: usize = 64 << 20;

fn router(method: RelayMethod, hash_type: HashType) -> Arc<Router> {
    let destinations = ["127.0.0.1:2104:a", "127.0.0.1:2204:b"]
        .iter()
        .filter_map(|d| DestinationSpec::parse(d).ok())
        .collect();
    match Router::new(RouterSpec {
        method,
        hash_type,
        replication_factor: 1,
        diverse_replicas: true,
        destinations,
        rules: Vec::new(),
        aggregation_rules: Vec::new(),
        c_relay: None,
    }) {
        Ok(r) => Arc::new(r),
        Err(e) => panic!("bench router: {e}"),
    }
}

fn names(count: usize, prefix: &str) -> Vec<String> {
    const KINDS: [&str; 4] = ["user", "system", "idle", "iowait"];
    (0..count)
        .map(|i| {
            format!(
                "{prefix}host-{:05}.cpu.{}.{}",
                i / 32,
                (i / 4) % 8,
                KINDS[i % KINDS.len()]
            )
        })
        .collect()
}

/// The yardstick: a private name → route map per thread (std `HashMap`, boxed keys, routes in
/// an arena), emptied when full.
struct PrivateCache {
    router: Arc<Router>,
    capacity: usize,
    map: HashMap<Box<[u8]>, (u32, u32)>,
    arena: Vec<u16>,
}

impl PrivateCache {
    fn new(router: Arc<Router>, capacity: usize) -> Self {
        Self {
            router,
            capacity,
            map: HashMap::new(),
            arena: Vec::new(),
        }
    }

    fn route_into(&mut self, name: &[u8], out: &mut Vec<u16>) {
        if let Some(&(start, len)) = self.map.get(name) {
            out.clear();
            out.extend_from_slice(&self.arena[start as usize..(start + len) as usize]);
            return;
        }
        self.router.route_into(name, out);
        if self.map.len() >= self.capacity {
            self.map.clear();
            self.arena.clear();
        }
        let start = self.arena.len() as u32;
        self.arena.extend_from_slice(out);
        self.map.insert(name.into(), (start, out.len() as u32));
    }
}

fn sum_routes(names: &[String], mut route: impl FnMut(&[u8], &mut Vec<u16>)) -> usize {
    let mut out = Vec::with_capacity(4);
    let mut sum = 0usize;
    for name in names {
        route(black_box(name.as_bytes()), &mut out);
        sum += usize::from(out[0]);
    }
    sum
}

fn bench_cold(group: &mut BenchmarkGroup<'_, WallTime>, names: &[String]) {
    for (label, hash_type) in [
        ("carbon_ch", HashType::CarbonCh),
        ("fnv1a_ch", HashType::Fnv1aCh),
        ("mmh3_ch", HashType::Mmh3Ch),
    ] {
        let r = router(RelayMethod::ConsistentHashing, hash_type);
        group.bench_function(format!("cold/{label}"), |b| {
            b.iter(|| sum_routes(names, |n, out| r.route_into(n, out)))
        });
    }
    let r = router(RelayMethod::ConsistentHashing, HashType::CarbonCh);
    let bytes: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
    let mut out = Vec::new();
    let mut spans = [(0u32, 0u32); 128];
    group.bench_function("cold/carbon_ch_runs", |b| {
        b.iter(|| {
            let mut sum = 0usize;
            for run in bytes.chunks(spans.len()) {
                out.clear();
                r.route_many(black_box(run), &mut out, &mut spans[..run.len()]);
                sum += out.iter().map(|&d| usize::from(d)).sum::<usize>();
            }
            sum
        })
    });
}

fn bench_hit(group: &mut BenchmarkGroup<'_, WallTime>, names: &[String]) {
    let r = router(RelayMethod::ConsistentHashing, HashType::CarbonCh);
    let shared = RouteCache::new(r.clone(), BUDGET);
    let mut private = PrivateCache::new(r.clone(), 1_000_000);
    // Warm: every name seen once, as after the first interval.
    sum_routes(names, |n, out| shared.route_into(n, out));
    sum_routes(names, |n, out| private.route_into(n, out));
    group.throughput(Throughput::Elements(names.len() as u64));
    group.bench_function("hit/shared_1t", |b| {
        b.iter(|| sum_routes(names, |n, out| shared.route_into(n, out)))
    });
    group.bench_function("hit/private_1t", |b| {
        b.iter(|| sum_routes(names, |n, out| private.route_into(n, out)))
    });

    group.throughput(Throughput::Elements(2 * names.len() as u64));
    group.bench_function("hit/shared_2t", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                let a = s.spawn(|| sum_routes(names, |n, out| shared.route_into(n, out)));
                let b = s.spawn(|| sum_routes(names, |n, out| shared.route_into(n, out)));
                a.join().unwrap_or(0) + b.join().unwrap_or(0)
            })
        })
    });
    let mut second = PrivateCache::new(r, 1_000_000);
    sum_routes(names, |n, out| second.route_into(n, out));
    let (first, second) = (&mut private, &mut second);
    group.bench_function("hit/private_2t", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                let a = s.spawn(|| sum_routes(names, |n, out| first.route_into(n, out)));
                let b = s.spawn(|| sum_routes(names, |n, out| second.route_into(n, out)));
                a.join().unwrap_or(0) + b.join().unwrap_or(0)
            })
        })
    });
}

fn bench_miss(group: &mut BenchmarkGroup<'_, WallTime>) {
    let r = router(RelayMethod::ConsistentHashing, HashType::CarbonCh);
    let pool = names(1_000_000, "fresh.");
    let shared = RouteCache::new(r.clone(), 16 << 20);
    let mut private = PrivateCache::new(r.clone(), 100_000);
    group.throughput(Throughput::Elements(NAMES as u64));
    for (label, cache) in [("shared", 0), ("private", 1), ("uncached", 2)] {
        let mut at = 0;
        group.bench_function(format!("miss/{label}"), |b| {
            b.iter(|| {
                let chunk = &pool[at..at + NAMES];
                at = (at + NAMES) % pool.len();
                match cache {
                    0 => sum_routes(chunk, |n, out| shared.route_into(n, out)),
                    1 => sum_routes(chunk, |n, out| private.route_into(n, out)),
                    _ => sum_routes(chunk, |n, out| r.route_into(n, out)),
                }
            })
        });
    }
}

fn bench_churn(group: &mut BenchmarkGroup<'_, WallTime>) {
    let r = router(RelayMethod::ConsistentHashing, HashType::CarbonCh);
    let hot = names(20_000, "hot.");
    let cold = names(2_000_000, "cold.");
    // 4 MiB holds the hot names about three times over; the cold stream passes through it
    // about twenty times per two million lookups.
    let shared = RouteCache::new(r.clone(), 4 << 20);
    let mut private = PrivateCache::new(r, 60_000);
    group.throughput(Throughput::Elements(2 * hot.len() as u64));
    for (label, which) in [("shared", 0), ("private", 1)] {
        let mut at = 0;
        let (mut hot_hits, mut hot_lookups) = (0u64, 0u64);
        group.bench_function(format!("churn/{label}"), |b| {
            b.iter(|| {
                let mut out = Vec::with_capacity(4);
                for h in &hot {
                    let c = &cold[at];
                    at = (at + 1) % cold.len();
                    match which {
                        0 => {
                            shared.route_into(h.as_bytes(), &mut out);
                            shared.route_into(c.as_bytes(), &mut out);
                        }
                        _ => {
                            private.route_into(h.as_bytes(), &mut out);
                            private.route_into(c.as_bytes(), &mut out);
                        }
                    }
                }
                out.len()
            })
        });
        // Hot-name hit ratio after the run, probed without inserting.
        for h in &hot {
            hot_lookups += 1;
            let present = match which {
                0 => shared.is_cached(h.as_bytes()),
                _ => private.map.contains_key(h.as_bytes()),
            };
            hot_hits += u64::from(present);
        }
        eprintln!(
            "churn/{label}: {:.1}% of the hot names cached after the run",
            100.0 * hot_hits as f64 / hot_lookups as f64
        );
    }
}

fn bench_route(c: &mut Criterion) {
    let names = names(NAMES, "");
    let mut group = c.benchmark_group("route");
    group.throughput(Throughput::Elements(NAMES as u64));
    group.sample_size(10);
    bench_cold(&mut group, &names);
    bench_hit(&mut group, &names);
    bench_miss(&mut group);
    bench_churn(&mut group);
    group.finish();
}

criterion_group!(benches, bench_route);
criterion_main!(benches);
