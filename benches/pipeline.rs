//! The in-process pipeline: plaintext bytes → framer → parser → route cache → per-destination
//! batches → queues, then the destination's pickle encoding of what was queued.
//! One iteration = 2,000 lines (about 80 KiB, one large read) from one connection, 1,000
//! distinct names (so the route cache is warm, as in production).

use std::sync::Arc;

use anthracite::unstable::destination::encode;
use anthracite::unstable::ingest::IngestStats;
use anthracite::unstable::ingest::{Pipeline, lines as lines_into};
use anthracite::unstable::protocol::line::LineFramer;
use anthracite::unstable::queue::{DestinationQueue, DestinationStats, QueueLimits};
use anthracite::unstable::router::{DestinationSpec, HashType, RelayMethod, Router, RouterSpec};
use anthracite::{OutputProtocol, Source};
use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn pipeline() -> Pipeline {
    let destinations = vec![
        DestinationSpec::parse("127.0.0.1:2104:a").expect("dest"),
        DestinationSpec::parse("127.0.0.1:2204:b").expect("dest"),
    ];
    let router = Arc::new(
        Router::new(RouterSpec {
            method: RelayMethod::ConsistentHashing,
            hash_type: HashType::CarbonCh,
            replication_factor: 1,
            diverse_replicas: true,
            destinations: destinations.clone(),
            rules: Vec::new(),
            aggregation_rules: Vec::new(),
            c_relay: None,
        })
        .expect("router"),
    );
    let limits = QueueLimits {
        max_datapoints: usize::MAX,
        max_bytes: usize::MAX,
        ..QueueLimits::default()
    };
    let queues: Arc<[Arc<DestinationQueue>]> = destinations
        .iter()
        .map(|d| {
            let stats = Arc::new(DestinationStats::new(d.to_string()));
            Arc::new(DestinationQueue::new(limits, stats))
        })
        .collect();
    Pipeline::new(router, queues, Arc::new(IngestStats::new()), 64 << 20)
}

fn payload(lines: usize, distinct: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..lines {
        let n = i % distinct;
        out.extend_from_slice(
            format!(
                "host-{:04}.cpu.{}.user {}.25 1700000000\n",
                n / 8,
                n % 8,
                i % 1000
            )
            .as_bytes(),
        );
    }
    out
}

fn bench_pipeline(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let lines = 2000;
    let data = payload(lines, 1000);
    let p = pipeline();
    let mut out = BytesMut::with_capacity(1 << 20);
    let mut ingestor = p.ingestor(Source::LineTcp);
    let mut framer = LineFramer::new(16_384);
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(lines as u64));
    group.bench_function("lines_to_pickle_carbon_ch_2dest", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&data[..]);
            // As the TCP receiver does: runs of lines, their route lookups batched.
            framer.feed_batched(&mut buf, |lines| lines_into(&mut ingestor, lines));
            rt.block_on(ingestor.flush());
            drain(&p, &mut out);
        })
    });
    group.finish();
}

/// What a destination task does with the queue: pop, encode pickle messages of 500 with the
/// writers' encoder, ack.
fn drain(p: &Pipeline, out: &mut BytesMut) {
    for q in p.queues().iter() {
        while let Some(batch) = q.try_pop() {
            out.clear();
            let written = encode(
                OutputProtocol::Pickle,
                500,
                std::slice::from_ref(&batch),
                out,
            );
            q.ack(written, 1);
        }
    }
}

criterion_group!(benches, bench_pipeline);
criterion_main!(benches);
