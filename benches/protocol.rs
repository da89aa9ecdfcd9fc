//! Wire-format micro-benchmarks: line parsing, pickle decoding (ours against `serde_pickle`,
//! the measurement behind the hand-written decoder) and pickle encoding.

use std::hint::black_box;

use anthracite::DropCounts;
use anthracite::unstable::batch::Datapoint;
use anthracite::unstable::protocol::line::{LineFramer, encode_line, parse_line};
use anthracite::unstable::protocol::normalize;
use anthracite::unstable::protocol::pickle::{PickleDecoder, encode_message};
use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const POINTS: usize = 500;

fn names() -> Vec<String> {
    (0..POINTS)
        .map(|i| {
            format!(
                "servers.host{:03}.cpu.core{}.usage;dc=eu-{}",
                i % 97,
                i % 8,
                i % 3
            )
        })
        .collect()
}

/// One datapoint per name, with distinct timestamps and fractional values.
fn points(names: &[String]) -> Vec<Datapoint<'_>> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| Datapoint {
            name: name.as_bytes(),
            timestamp: 1_700_000_000.0 + i as f64,
            value: i as f64 * 0.37,
        })
        .collect()
}

fn line_parse(c: &mut Criterion) {
    let names = names();
    let points = points(&names);
    let mut input = BytesMut::new();
    for &dp in &points {
        encode_line(dp, &mut input);
    }
    let input = input.freeze();
    let mut group = c.benchmark_group("line");
    group.throughput(Throughput::Elements(POINTS as u64));
    group.bench_function("frame_and_parse_500", |b| {
        let mut framer = LineFramer::new(16384);
        let mut buf = BytesMut::with_capacity(input.len());
        b.iter(|| {
            buf.extend_from_slice(&input);
            let mut sum = 0.0;
            framer.feed(&mut buf, |line| {
                if let Ok((name, ts, v)) = line.and_then(parse_line)
                    && let Ok((ts, v)) = normalize(ts, v, 0.0)
                {
                    sum += ts + v + name.len() as f64;
                }
            });
            black_box(sum)
        });
    });
    group.bench_function("encode_500", |b| {
        let mut out = BytesMut::with_capacity(input.len());
        b.iter(|| {
            out.clear();
            for &dp in &points {
                encode_line(dp, &mut out);
            }
            black_box(out.len())
        });
    });
    group.finish();
}

fn pickle(c: &mut Criterion) {
    let names = names();
    let points = points(&names);
    let mut framed = BytesMut::new();
    encode_message(points.iter().copied(), &mut framed);
    let payload = framed.split_off(4).freeze();

    // Both decoders must accept the frame, or the comparison measures an early error.
    assert!(serde_pickle::value_from_slice(&payload, serde_pickle::DeOptions::new()).is_ok());
    let mut check = PickleDecoder::new();
    assert_eq!(
        check.decode(&payload, &mut DropCounts::default(), |_, _, _| {}),
        Ok(POINTS)
    );

    let mut group = c.benchmark_group("pickle");
    group.throughput(Throughput::Elements(POINTS as u64));
    group.bench_function("decode_500_anthracite", |b| {
        let mut decoder = PickleDecoder::new();
        let mut drops = DropCounts::default();
        b.iter(|| {
            let mut sum = 0.0;
            let n = decoder.decode(&payload, &mut drops, |name, ts, v| {
                sum += ts + v + name.len() as f64;
            });
            black_box((n, sum))
        });
    });
    group.bench_function("decode_500_serde_pickle", |b| {
        b.iter(|| {
            let value = serde_pickle::value_from_slice(&payload, serde_pickle::DeOptions::new());
            black_box(value.is_ok())
        });
    });
    group.bench_function("encode_500", |b| {
        let mut out = BytesMut::with_capacity(payload.len() + 4);
        b.iter(|| {
            out.clear();
            encode_message(points.iter().copied(), &mut out);
            black_box(out.len())
        });
    });
    group.finish();
}

criterion_group!(benches, line_parse, pickle);
criterion_main!(benches);
