//! Route lookup cost: uncached (`Router::route_into`, one MD5 per datapoint for `carbon_ch`)
//! against cached (`RouteCache::route` over a repeating name set: xxh3 + compare, no MD5).

use std::hint::black_box;
use std::sync::Arc;

use anthracite::unstable::router::{
    DestinationSpec, HashType, Method, RouteCache, Router, RouterSpec,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// Names per iteration batch; a realistic set of distinct series repeating every interval.
const NAMES: usize = 100_000;

fn router(method: Method, hash_type: HashType) -> Arc<Router> {
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
    }) {
        Ok(r) => Arc::new(r),
        Err(e) => panic!("bench router: {e}"),
    }
}

fn names() -> Vec<String> {
    const KINDS: [&str; 4] = ["user", "system", "idle", "iowait"];
    (0..NAMES)
        .map(|i| {
            format!(
                "host-{:04}.cpu.{}.{}",
                i / 32,
                (i / 4) % 8,
                KINDS[i % KINDS.len()]
            )
        })
        .collect()
}

fn bench_route(c: &mut Criterion) {
    let names = names();
    let mut group = c.benchmark_group("route");
    group.throughput(Throughput::Elements(NAMES as u64));
    group.sample_size(10);

    for (label, hash_type) in [
        ("carbon_ch", HashType::CarbonCh),
        ("fnv1a_ch", HashType::Fnv1aCh),
        ("mmh3_ch", HashType::Mmh3Ch),
    ] {
        let r = router(Method::ConsistentHashing, hash_type);
        group.bench_function(format!("cold/{label}"), |b| {
            let mut out = Vec::with_capacity(4);
            b.iter(|| {
                let mut sum = 0usize;
                for name in &names {
                    r.route_into(black_box(name.as_bytes()), &mut out);
                    sum += usize::from(out[0]);
                }
                sum
            })
        });
    }

    let r = router(Method::ConsistentHashing, HashType::CarbonCh);
    let mut cache = RouteCache::new(r, NAMES * 2);
    // Warm: every name seen once, as after the first interval of a connection.
    for name in &names {
        cache.route(name.as_bytes());
    }
    group.bench_function("cached/carbon_ch", |b| {
        b.iter(|| {
            let mut sum = 0usize;
            for name in &names {
                sum += usize::from(cache.route(black_box(name.as_bytes()))[0]);
            }
            sum
        })
    });
    group.finish();
}

criterion_group!(benches, bench_route);
criterion_main!(benches);
