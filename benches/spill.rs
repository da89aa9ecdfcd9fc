//! Spill log throughput: append and replay, in datapoints per second.
//!
//! Batches of 500 datapoints with realistic names (~45 bytes), on the real file system (a
//! temporary directory on the same disk as `target/`). Append uses the default fsync policy
//! (`Interval(1 s)`), so the timed loop includes the periodic `fdatasync`s; replay is open
//! (CRC scan of every segment) + `read_next` + `ack` of everything, with a warm page cache.
//! `append_500dp_fsync_always` shows the price of one `fdatasync` per batch.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use anthracite::unstable::batch::Batch;
use anthracite::unstable::queue::spill::{AppendOutcome, FsyncPolicy, SpillConfig, SpillLog};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const POINTS: usize = 500;

fn batch(seq: u64) -> Batch {
    let mut b = Batch::with_capacity(POINTS, POINTS * 48);
    for i in 0..POINTS {
        let name = format!(
            "carbon.agents.web-{:03}.collectd.cpu-{}.cpu-user.value",
            (seq as usize * 7 + i) % 613,
            i % 16
        );
        b.push(
            name.as_bytes(),
            1_700_000_000.0 + seq as f64,
            i as f64 * 1.25,
        )
        .expect("batch has room");
    }
    b
}

fn config() -> SpillConfig {
    SpillConfig {
        max_bytes: 64 << 30,
        ..SpillConfig::default()
    }
}

fn fill(dir: &Path, batches: &[Batch], iters: u64) -> Duration {
    fill_with(dir, batches, iters, config())
}

fn fill_with(dir: &Path, batches: &[Batch], iters: u64, config: SpillConfig) -> Duration {
    let Ok((mut log, _)) = SpillLog::open(dir, config) else {
        panic!("cannot open bench spill log");
    };
    let start = Instant::now();
    for i in 0..iters {
        let outcome = log.append(&batches[i as usize % batches.len()]);
        assert!(matches!(outcome, Ok(AppendOutcome::Appended)));
    }
    let elapsed = start.elapsed();
    assert!(log.close().is_ok());
    elapsed
}

fn bench(c: &mut Criterion) {
    let batches: Vec<Batch> = (0..64).map(batch).collect();
    let base = tempfile::Builder::new()
        .prefix("spill-bench")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .or_else(|_| tempfile::tempdir());
    let Ok(base) = base else {
        panic!("no temp dir for the spill bench");
    };
    let mut group = c.benchmark_group("spill");
    group.throughput(Throughput::Elements(POINTS as u64));

    let mut run = 0u64;
    group.bench_function("append_500dp_fsync_1s", |b| {
        b.iter_custom(|iters| {
            run += 1;
            let dir = base.path().join(format!("append-{run}"));
            let elapsed = fill(&dir, &batches, iters);
            let _ = std::fs::remove_dir_all(&dir);
            elapsed
        })
    });

    group.bench_function("append_500dp_fsync_always", |b| {
        b.iter_custom(|iters| {
            run += 1;
            let dir = base.path().join(format!("always-{run}"));
            let always = SpillConfig {
                fsync: FsyncPolicy::Always,
                ..config()
            };
            let elapsed = fill_with(&dir, &batches, iters, always);
            let _ = std::fs::remove_dir_all(&dir);
            elapsed
        })
    });

    group.bench_function("replay_500dp", |b| {
        b.iter_custom(|iters| {
            run += 1;
            let dir = base.path().join(format!("replay-{run}"));
            fill(&dir, &batches, iters);
            let start = Instant::now();
            let Ok((mut log, report)) = SpillLog::open(&dir, config()) else {
                panic!("cannot reopen bench spill log");
            };
            assert_eq!(report.records, iters);
            while let Ok(Some(batch)) = log.read_next() {
                black_box(&batch);
                let _ = log.ack(1);
            }
            let elapsed = start.elapsed();
            assert!(log.is_empty());
            drop(log);
            let _ = std::fs::remove_dir_all(&dir);
            elapsed
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
