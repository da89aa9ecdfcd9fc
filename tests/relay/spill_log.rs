//! The spill log on the real file system, in a temporary directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anthracite::unstable::batch::Batch;
use anthracite::unstable::queue::spill::{
    AppendOutcome, FsyncPolicy, LedgerState, SpillConfig, SpillError, SpillLog,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A batch of `n` datapoints with realistic names; its number is carried in the timestamps.
fn batch(seq: u64, n: usize) -> Batch {
    let mut b = Batch::with_capacity(n, n * 48);
    for i in 0..n {
        let name = format!("carbon.agents.web-{:03}.cpu.core{i}.usage_user", seq % 997);
        b.push(name.as_bytes(), seq as f64, i as f64 * 0.25)
            .expect("batch has room");
    }
    b
}

fn seq_of(b: &Batch) -> Option<u64> {
    b.get(0).map(|d| d.timestamp as u64)
}

fn config(segment_bytes: u64, max_bytes: u64) -> SpillConfig {
    SpillConfig {
        max_bytes,
        segment_bytes,
        max_age: None,
        fsync: FsyncPolicy::Interval(Duration::from_secs(1)),
        ledger_interval: Duration::from_secs(1),
    }
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    files
}

fn disk_bytes(dir: &Path) -> u64 {
    segment_files(dir)
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

fn drain(log: &mut SpillLog) -> Result<Vec<u64>, SpillError> {
    let mut seqs = Vec::new();
    while let Some(b) = log.read_next()? {
        seqs.extend(seq_of(&b));
    }
    Ok(seqs)
}

fn appended(outcome: AppendOutcome) -> TestResult {
    if outcome == AppendOutcome::Appended {
        Ok(())
    } else {
        Err("unexpected Full".into())
    }
}

#[test]
fn reopen_replays_unacked_records_in_order() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("dest-a");
    let (mut log, report) = SpillLog::open(&dir, config(64 << 10, 1 << 20))?;
    assert_eq!(report.ledger, LedgerState::Missing);
    for seq in 0..10 {
        appended(log.append(&batch(seq, 50))?)?;
    }
    assert_eq!(log.read_next()?.as_ref().and_then(seq_of), Some(0));
    assert_eq!(log.read_next()?.as_ref().and_then(seq_of), Some(1));
    assert_eq!(log.read_next()?.as_ref().and_then(seq_of), Some(2));
    assert_eq!(log.ack(2)?, 2);
    log.close()?;

    let (mut log, report) = SpillLog::open(&dir, config(64 << 10, 1 << 20))?;
    assert_eq!(report.records, 8);
    assert_eq!(report.datapoints, 8 * 50);
    assert_eq!(report.damaged_segments, 0);
    // Record 2 was read but not acknowledged: it is delivered again (at-least-once).
    assert_eq!(drain(&mut log)?, (2..10).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn replayed_batches_are_bit_exact() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let mut b = Batch::new();
    b.push(b"a.b;tag=x", 1.7e9, -0.0).expect("batch has room");
    b.push(b"c", f64::MIN_POSITIVE / 2.0, f64::INFINITY)
        .expect("batch has room");
    let (mut log, _) = SpillLog::open(tmp.path(), config(4096, 8192))?;
    appended(log.append(&b)?)?;
    log.close()?;
    let (mut log, _) = SpillLog::open(tmp.path(), config(4096, 8192))?;
    let got = log.read_next()?.ok_or("record missing")?;
    let bits = |b: &Batch| -> Vec<(Vec<u8>, u64, u64)> {
        b.iter()
            .map(|d| (d.name.to_vec(), d.timestamp.to_bits(), d.value.to_bits()))
            .collect()
    };
    assert_eq!(bits(&got), bits(&b));
    Ok(())
}

#[test]
fn corrupted_tail_record_is_skipped_and_counted() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let (mut log, _) = SpillLog::open(dir, config(1 << 20, 4 << 20))?;
    for seq in 0..5 {
        appended(log.append(&batch(seq, 20))?)?;
    }
    log.close()?;
    let files = segment_files(dir);
    assert_eq!(files.len(), 1);
    let mut bytes = fs::read(&files[0])?;
    let len = bytes.len();
    bytes[len - 3] ^= 0x5a; // inside the last record's payload
    fs::write(&files[0], &bytes)?;

    let (mut log, report) = SpillLog::open(dir, config(1 << 20, 4 << 20))?;
    assert_eq!(report.records, 4);
    assert_eq!(report.damaged_segments, 1);
    assert!(report.abandoned_bytes > 0 && report.abandoned_bytes < len as u64);
    // New appends go to a fresh segment, never behind the damaged tail.
    appended(log.append(&batch(5, 20))?)?;
    assert_eq!(drain(&mut log)?, vec![0, 1, 2, 3, 5]);
    Ok(())
}

#[test]
fn torn_tail_record_is_skipped_and_counted() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let (mut log, _) = SpillLog::open(dir, config(1 << 20, 4 << 20))?;
    for seq in 0..3 {
        appended(log.append(&batch(seq, 20))?)?;
    }
    log.close()?;
    let files = segment_files(dir);
    let file = fs::OpenOptions::new().write(true).open(&files[0])?;
    let len = file.metadata()?.len();
    file.set_len(len - 10)?; // a partial write of the last record
    drop(file);

    let (mut log, report) = SpillLog::open(dir, config(1 << 20, 4 << 20))?;
    assert_eq!((report.records, report.damaged_segments), (2, 1));
    assert_eq!(drain(&mut log)?, vec![0, 1]);
    Ok(())
}

#[test]
fn budget_exhaustion_returns_full_with_exact_accounting() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let (segment_bytes, max_bytes) = (16 << 10, 64 << 10);
    let (mut log, _) = SpillLog::open(dir, config(segment_bytes, max_bytes))?;
    let mut stored = 0u64;
    let mut datapoints = 0u64;
    let full_at = loop {
        let b = batch(stored, 30);
        match log.append(&b)? {
            AppendOutcome::Appended => {
                stored += 1;
                datapoints += 30;
            }
            AppendOutcome::Full => break b,
        }
    };
    let stats = log.stats();
    assert_eq!(stats.records, stored);
    assert_eq!(stats.datapoints, datapoints);
    assert_eq!(
        stats.disk_bytes,
        disk_bytes(dir),
        "accounting matches the files"
    );
    assert!(stats.disk_bytes <= max_bytes);
    assert!(stats.queued_bytes <= stats.disk_bytes);
    // Full means the next record (plus perhaps a segment header) would not fit.
    let mut probe = Vec::new();
    anthracite::unstable::queue::spill::record::encode_record(&full_at, 0, &mut probe);
    assert!(stats.disk_bytes + probe.len() as u64 + 8 > max_bytes);
    assert_eq!(
        log.append(&full_at)?,
        AppendOutcome::Full,
        "Full writes nothing"
    );
    let after = log.stats();
    assert_eq!(
        (after.records, after.queued_bytes, after.disk_bytes),
        (stats.records, stats.queued_bytes, stats.disk_bytes)
    );

    // Draining frees the budget.
    let got = drain(&mut log)?;
    assert_eq!(got, (0..stored).collect::<Vec<_>>());
    assert_eq!(log.ack(got.len())? as u64, stored);
    appended(log.append(&full_at)?)?;
    Ok(())
}

#[test]
fn consumed_segments_are_deleted_promptly() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let (mut log, _) = SpillLog::open(dir, config(8 << 10, 1 << 20))?;
    for seq in 0..60 {
        appended(log.append(&batch(seq, 10))?)?;
    }
    let initial = segment_files(dir).len();
    assert!(initial >= 4, "expected several segments, got {initial}");
    let mut last = initial;
    for _ in 0..60 {
        assert!(log.read_next()?.is_some());
        log.ack(1)?;
        let now = segment_files(dir).len();
        assert!(now <= last);
        last = now;
        assert_eq!(log.stats().disk_bytes, disk_bytes(dir));
    }
    assert_eq!(
        segment_files(dir).len(),
        0,
        "a drained log leaves no segment behind"
    );
    assert_eq!(log.stats().disk_bytes, 0);
    log.close()?;
    let (mut log, report) = SpillLog::open(dir, config(8 << 10, 1 << 20))?;
    assert_eq!(report.records, 0);
    assert_eq!(log.read_next()?, None);
    Ok(())
}

#[test]
fn killed_process_loses_nothing_even_without_fsync() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let mut cfg = config(4 << 10, 1 << 20);
    cfg.fsync = FsyncPolicy::Never;
    let (mut log, _) = SpillLog::open(tmp.path(), cfg.clone())?;
    for seq in 0..20 {
        appended(log.append(&batch(seq, 10))?)?;
    }
    drop(log); // no close, no sync: what a SIGKILL leaves
    let (mut log, report) = SpillLog::open(tmp.path(), cfg)?;
    assert_eq!(report.records, 20);
    assert_eq!(drain(&mut log)?, (0..20).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn oversized_batch_and_bad_config_are_typed_errors() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let bad = SpillLog::open(tmp.path(), config(1 << 20, 1 << 10));
    assert!(matches!(bad, Err(SpillError::Config(_))));
    let (mut log, _) = SpillLog::open(tmp.path(), config(1 << 10, 1 << 20))?;
    assert!(matches!(
        log.append(&batch(0, 100)),
        Err(SpillError::TooLarge { .. })
    ));
    Ok(())
}

#[test]
fn spill_log_can_move_to_a_blocking_thread() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<SpillLog>();
}
