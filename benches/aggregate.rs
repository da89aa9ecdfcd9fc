//! Aggregation cost per datapoint (the `aggregate` scenario's shape: 100k input names, 100
//! rules, 10k output series, 60 s frequency), on the aggregator alone (no sockets):
//!
//! - `aggregate/warm/*`: every series and every name's rule verdict exist — the steady state,
//!   which allocates nothing per datapoint. `sum`, `avg` and `p95` rules (a third each). One
//!   datapoint at a time, and `batched` as the relay feeds a read (`Aggregator::feed_all`).
//! - `aggregate/cold`: a new aggregator per iteration, so every name is resolved against the
//!   rules once and every series created.
//! - `aggregate/emit`: one tick that computes and hands on all 10k aggregates (percentiles
//!   sorted once each).

use std::hint::black_box;
use std::sync::Arc;

use anthracite::unstable::aggregator::{AggregationRules, Aggregator, AggregatorLimits};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const RULES: usize = 100;
const GROUPS: usize = 100;
const HOSTS: usize = 10;

fn rules() -> Arc<AggregationRules> {
    let methods = ["sum", "avg", "p95"];
    let text: String = (0..RULES)
        .map(|r| {
            format!(
                "agg.app{r}.<g>.requests (60) = {} app{r}.<g>.*.requests\n",
                methods[r % methods.len()]
            )
        })
        .collect();
    match AggregationRules::parse(&text) {
        Ok(r) => Arc::new(r),
        Err(e) => panic!("bench rules: {e}"),
    }
}

fn names() -> Vec<String> {
    let mut out = Vec::with_capacity(RULES * GROUPS * HOSTS);
    for h in 0..HOSTS {
        for g in 0..GROUPS {
            for r in 0..RULES {
                out.push(format!("app{r}.grp{g}.host{h}.requests"));
            }
        }
    }
    out
}

fn feed(a: &mut Aggregator, names: &[String], ts: f64) {
    for (i, n) in names.iter().enumerate() {
        black_box(a.feed(n.as_bytes(), ts, i as f64 * 0.5, 1000.0));
    }
}

fn bench(c: &mut Criterion) {
    let rules = rules();
    let names = names();
    let mut group = c.benchmark_group("aggregate");
    group.sample_size(10);
    group.throughput(Throughput::Elements(names.len() as u64));

    let mut warm = Aggregator::new(rules.clone(), AggregatorLimits::default());
    feed(&mut warm, &names, 1020.0);
    group.bench_function("warm/100k_names_100_rules", |b| {
        b.iter(|| feed(&mut warm, &names, 1020.0));
    });
    // As the relay feeds it: a read's datapoints together, their verdict lookups overlapped.
    group.bench_function("warm/100k_names_100_rules_batched", |b| {
        b.iter(|| {
            let points = names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.as_bytes(), 1020.0, i as f64 * 0.5));
            warm.feed_all(points, 1000.0, &mut |e| {
                black_box(e);
            });
        });
    });
    group.bench_function("cold", |b| {
        b.iter_batched(
            || Aggregator::new(rules.clone(), AggregatorLimits::default()),
            |mut a| {
                feed(&mut a, &names, 1020.0);
                a
            },
            BatchSize::LargeInput,
        );
    });
    group.throughput(Throughput::Elements((RULES * GROUPS) as u64));
    group.bench_function("emit/10k_series", |b| {
        b.iter_batched(
            || {
                let mut a = Aggregator::new(rules.clone(), AggregatorLimits::default());
                feed(&mut a, &names, 1020.0);
                a
            },
            |mut a| {
                let mut n = 0usize;
                a.tick(1_000_000.0, &mut |_, _, v| {
                    black_box(v);
                    n += 1;
                });
                assert_eq!(n, RULES * GROUPS);
                a
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
