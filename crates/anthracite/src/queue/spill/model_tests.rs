//! Model check: the spill log against a `VecDeque` model over random operation sequences,
//! with simulated crashes (unsynced data dropped, torn prefixes kept) and reopens.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;

use super::segment::SEGMENT_HEADER_LEN;
use super::*;

#[derive(Clone, Debug)]
enum Op {
    /// Append a batch of `n` datapoints (1..=4) with names of `name_len` bytes.
    Append {
        n: usize,
        name_len: usize,
    },
    Read,
    Ack(usize),
    Sync,
    /// Crash (keeping up to this many unsynced bytes of the last file written) and reopen.
    Crash(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..=4, 1usize..30).prop_map(|(n, name_len)| Op::Append { n, name_len }),
        4 => Just(Op::Read),
        3 => (0usize..4).prop_map(Op::Ack),
        1 => Just(Op::Sync),
        1 => (0usize..300).prop_map(Op::Crash),
    ]
}

/// Batch number `seq`: its identity is carried in every datapoint's timestamp.
fn batch_for(seq: u64, n: usize, name_len: usize) -> Batch {
    let mut b = Batch::new();
    for i in 0..n {
        let name: Vec<u8> = (0..name_len)
            .map(|j| b'a' + ((seq as usize + i + j) % 26) as u8)
            .collect();
        b.push(&name, seq as f64, i as f64 - 0.5)
            .expect("batch has room");
    }
    b
}

fn seq_of(b: &Batch) -> u64 {
    b.get(0).map_or(u64::MAX, |d| d.timestamp as u64)
}

fn varint_len(v: usize) -> u64 {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

/// Record size computed independently of the encoder.
fn model_record_len(b: &Batch) -> u64 {
    16 + varint_len(b.len())
        + b.iter()
            .map(|d| varint_len(d.name.len()) + d.name.len() as u64 + 16)
            .sum::<u64>()
}

struct Model {
    /// Every batch ever appended, by seq.
    batches: Vec<Batch>,
    /// Unacknowledged seqs, oldest first; the first `in_flight` of them have been read.
    queue: VecDeque<u64>,
    in_flight: usize,
    /// Seqs acknowledged since the ledger was last persisted: may come back after a crash.
    acked_since_ledger: Vec<u64>,
    /// Seqs below this were appended before the last sync: must survive a crash.
    durable_upto: u64,
}

fn config(segment_bytes: u64, segments: u64, always: bool) -> SpillConfig {
    SpillConfig {
        max_bytes: segment_bytes * segments,
        segment_bytes,
        max_age: None,
        fsync: if always {
            FsyncPolicy::Always
        } else {
            FsyncPolicy::Interval(Duration::from_secs(3600))
        },
        ledger_interval: Duration::from_secs(3600),
    }
}

fn read_all(log: &mut SpillLog<MemFs>) -> Result<Vec<u64>, TestCaseError> {
    let mut out = Vec::new();
    while let Some(b) = log
        .read_next()
        .map_err(|e| TestCaseError::fail(e.to_string()))?
    {
        out.push(seq_of(&b));
    }
    Ok(out)
}

fn check_accounting(
    log: &SpillLog<MemFs>,
    model: &Model,
    fs: &MemFs,
    dir: &Path,
) -> Result<(), TestCaseError> {
    let stats = log.stats();
    let q = &model.queue;
    prop_assert_eq!(stats.records, q.len() as u64);
    prop_assert_eq!(stats.in_flight_records, model.in_flight as u64);
    let dps: u64 = q
        .iter()
        .map(|&s| model.batches[s as usize].len() as u64)
        .sum();
    prop_assert_eq!(stats.datapoints, dps);
    let bytes: u64 = q
        .iter()
        .map(|&s| model_record_len(&model.batches[s as usize]))
        .sum();
    prop_assert_eq!(stats.queued_bytes, bytes);
    prop_assert_eq!(stats.disk_bytes, fs.bytes_in(dir, ".seg"));
    prop_assert!(stats.disk_bytes <= log.config().max_bytes);
    if q.is_empty() {
        prop_assert_eq!(
            stats.disk_bytes,
            0,
            "a drained log leaves no segment behind"
        );
    }
    Ok(())
}

fn run(ops: Vec<Op>, segment_bytes: u64, segments: u64, always: bool) -> Result<(), TestCaseError> {
    let fs = MemFs::new();
    let dir = Path::new("/spill/dest-a");
    let cfg = config(segment_bytes, segments, always);
    let fail = |e: SpillError| TestCaseError::fail(e.to_string());
    let (mut log, _) = SpillLog::open_with(fs.clone(), dir, cfg.clone()).map_err(fail)?;
    let mut model = Model {
        batches: Vec::new(),
        queue: VecDeque::new(),
        in_flight: 0,
        acked_since_ledger: Vec::new(),
        durable_upto: 0,
    };
    for op in ops {
        match op {
            Op::Append { n, name_len } => {
                let seq = model.batches.len() as u64;
                let batch = batch_for(seq, n, name_len);
                let rec = model_record_len(&batch);
                let before = log.stats().disk_bytes;
                model.batches.push(batch);
                match log.append(&model.batches[seq as usize]).map_err(fail)? {
                    AppendOutcome::Appended => {
                        model.queue.push_back(seq);
                        if always {
                            model.durable_upto = seq + 1;
                        }
                    }
                    AppendOutcome::Full => {
                        prop_assert!(
                            before + rec + SEGMENT_HEADER_LEN > cfg.max_bytes,
                            "Full with room"
                        );
                    }
                }
            }
            Op::Read => {
                let got = log.read_next().map_err(fail)?;
                match model.queue.get(model.in_flight) {
                    Some(&seq) => {
                        let got = got.ok_or_else(|| TestCaseError::fail("record missing"))?;
                        prop_assert_eq!(&got, &model.batches[seq as usize]);
                        model.in_flight += 1;
                    }
                    None => prop_assert!(got.is_none()),
                }
            }
            Op::Ack(k) => {
                let acked = log.ack(k).map_err(fail)?;
                prop_assert_eq!(acked, k.min(model.in_flight));
                for _ in 0..acked {
                    if let Some(seq) = model.queue.pop_front() {
                        model.acked_since_ledger.push(seq);
                    }
                }
                model.in_flight -= acked;
            }
            Op::Sync => {
                log.sync().map_err(fail)?;
                model.durable_upto = model.batches.len() as u64;
                model.acked_since_ledger.clear();
            }
            Op::Crash(keep) => {
                drop(log);
                fs.crash(keep);
                // Look at what survived through an independent copy, then reopen for real.
                let copy = fs.snapshot();
                let (mut probe, report) =
                    SpillLog::open_with(copy, dir, cfg.clone()).map_err(fail)?;
                let survived = read_all(&mut probe)?;
                prop_assert_eq!(report.records, survived.len() as u64);
                let full: Vec<u64> = model
                    .acked_since_ledger
                    .iter()
                    .chain(model.queue.iter())
                    .copied()
                    .collect();
                let k = model.acked_since_ledger.len();
                let end = match survived.first() {
                    Some(first) => {
                        let i = full.iter().position(|s| s == first).ok_or_else(|| {
                            TestCaseError::fail(format!("replayed unknown record {first}"))
                        })?;
                        prop_assert!(i <= k, "replay starts after an unacknowledged record");
                        prop_assert_eq!(
                            &full[i..(i + survived.len()).min(full.len())],
                            &survived[..]
                        );
                        i + survived.len()
                    }
                    None => k,
                };
                for (idx, &seq) in full.iter().enumerate().skip(k) {
                    if seq < model.durable_upto {
                        prop_assert!(idx < end, "synced record {} lost", seq);
                    }
                }
                let (reopened, _) =
                    SpillLog::open_with(fs.clone(), dir, cfg.clone()).map_err(fail)?;
                log = reopened;
                model.queue = survived.into_iter().collect();
                model.in_flight = 0;
                model.acked_since_ledger.clear();
                model.durable_upto = model.batches.len() as u64;
            }
        }
        check_accounting(&log, &model, &fs, dir)?;
    }
    Ok(())
}

proptest! {

    #[test]
    fn spill_log_matches_model(
        ops in proptest::collection::vec(op(), 1..120),
        segment_bytes in prop_oneof![Just(300u64), Just(600), Just(2000)],
        segments in 2u64..6,
        always in any::<bool>(),
    ) {
        run(ops, segment_bytes, segments, always)?;
    }
}

#[test]
fn torn_tail_after_crash_is_skipped_and_counted() -> Result<(), SpillError> {
    let fs = MemFs::new();
    let dir = Path::new("/d");
    let cfg = config(4096, 4, false);
    let (mut log, _) = SpillLog::open_with(fs.clone(), dir, cfg.clone())?;
    for seq in 0..3 {
        assert_eq!(log.append(&batch_for(seq, 2, 10))?, AppendOutcome::Appended);
    }
    log.sync()?;
    assert_eq!(log.append(&batch_for(3, 2, 10))?, AppendOutcome::Appended);
    drop(log);
    fs.crash(20); // a header and a few payload bytes of record 3
    let (mut log, report) = SpillLog::open_with(fs.clone(), dir, cfg)?;
    assert_eq!(report.records, 3);
    assert_eq!(report.damaged_segments, 1);
    assert_eq!(report.abandoned_bytes, 20);
    for seq in 0..3 {
        assert_eq!(log.read_next()?.map(|b| seq_of(&b)), Some(seq));
    }
    assert_eq!(log.read_next()?, None);
    Ok(())
}

#[test]
fn io_failure_is_a_typed_error_and_the_log_recovers() -> Result<(), SpillError> {
    let fs = MemFs::new();
    let dir = Path::new("/d");
    let (mut log, _) = SpillLog::open_with(fs.clone(), dir, config(4096, 4, true))?;
    assert_eq!(log.append(&batch_for(0, 1, 5))?, AppendOutcome::Appended);
    fs.set_failure(Some(std::io::ErrorKind::StorageFull));
    let err = log.append(&batch_for(1, 1, 5)).err();
    assert!(
        err.as_ref().is_some_and(SpillError::is_disk_full),
        "{err:?}"
    );
    fs.set_failure(None);
    assert_eq!(log.append(&batch_for(2, 1, 5))?, AppendOutcome::Appended);
    let seqs: Vec<u64> = std::iter::from_fn(|| log.read_next().ok().flatten())
        .map(|b| seq_of(&b))
        .collect();
    assert_eq!(seqs, vec![0, 2]);
    Ok(())
}

#[test]
fn expired_records_are_dropped_at_read_and_counted() -> Result<(), SpillError> {
    let fs = MemFs::new();
    let dir = Path::new("/d");
    let mut cfg = config(4096, 4, false);
    cfg.max_age = Some(Duration::from_secs(60));
    let (mut log, _) = SpillLog::open_with(fs.clone(), dir, cfg)?;
    fs.set_now_millis(1_000);
    assert_eq!(log.append(&batch_for(0, 3, 5))?, AppendOutcome::Appended);
    fs.set_now_millis(50_000);
    assert_eq!(log.append(&batch_for(1, 2, 5))?, AppendOutcome::Appended);
    fs.set_now_millis(70_000);
    assert_eq!(
        log.stats().oldest_record_age,
        Some(Duration::from_millis(69_000))
    );
    assert_eq!(log.read_next()?.map(|b| seq_of(&b)), Some(1));
    let stats = log.stats();
    assert_eq!((stats.expired_records, stats.expired_datapoints), (1, 3));
    assert_eq!((stats.records, stats.datapoints), (1, 2));
    assert_eq!(log.ack(1)?, 1);
    assert_eq!(log.stats().disk_bytes, 0);
    Ok(())
}
