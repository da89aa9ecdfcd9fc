//! The state file: open series written at an orderly shutdown and by periodic checkpoints,
//! read back at start.
//!
//! - **Where.** `aggregator.state` in the spill directory (the only directory anthracite owns
//!   for data that outlives the process).
//! - **Format.** One JSON document `{"version":1,"kind":…,"written_at":…,"intervals":…,
//!   "datapoints":…,"series":[…]}`. `kind` is `final` (written at an orderly shutdown) or
//!   `checkpoint` (written while running); `written_at` is when the snapshot was taken (Unix
//!   seconds), `intervals` and `datapoints` the open intervals and the datapoints they hold.
//!   Each series holds its name, method, frequency, timer period and next tick (Unix seconds),
//!   and its intervals in creation order with their accumulator. Every float is stored as its
//!   IEEE-754 bits, so the restored sums, minima (`-0.0`) and infinities are the same bits. A
//!   file without `kind` (written before checkpoints existed) is a final state.
//! - **Write.** A [`Snapshot`] is taken under the aggregator's lock (a copy of the series, no
//!   serialisation) and written without it: to `aggregator.state.tmp`, synced, renamed over
//!   `aggregator.state`. A crash during the write leaves the previous file or none, never a
//!   torn one. The final state is written at shutdown, after the receivers stopped (nothing
//!   more is fed) and before the queues drain. Checkpoints are written by the aggregator's
//!   clock task every `checkpoint_interval_secs` while it holds series (skipped when nothing
//!   was aggregated, sent or freed since the last one); that task also writes
//!   the final state, after waiting for the checkpoint in flight and starting no other, so a
//!   checkpoint never replaces a final state nor races its write. When the last series is
//!   freed the checkpoint is removed (nothing is open, so nothing is at risk).
//! - **Size.** A checkpoint is the same document as the final state: bounded by `max_series`,
//!   the intervals they hold and `max_values`.
//! - **Read.** At start, before any receiver accepts: a series whose name already exists is
//!   not restored twice; a series past `max_series` is dropped and counted like any datapoint
//!   at the bound. What was read is written back at once as a checkpoint, so a crash right
//!   after the start loses nothing restored, and a later start can tell that this run did not
//!   stop cleanly. A file that does not parse is renamed `aggregator.state.bad`, logged, and
//!   ignored.
//! - **Timing.** A restored series keeps its timer phase: a tick that fell due while the
//!   process was down fires at once, so an interval that received data before the restart is
//!   sent with everything it holds, and with whatever arrives after the restart added to it.
//! - **What SIGKILL loses.** The datapoints aggregated after the last checkpoint's
//!   `written_at`: an interval restored from the checkpoint lacks them, and one created after
//!   it is gone. Aggregates already emitted are in the destination queues.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::method::{Accumulator, AggregationMethod};
use super::series::{Aggregator, Interval, Intervals, Series};

/// File name of the state file in the spill directory.
pub const STATE_FILE: &str = "aggregator.state";

/// Why the state could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a state file of this version.
    #[error("{path}: not an aggregator state file: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Which write produced a state file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Written at an orderly shutdown: it holds everything the aggregator held.
    #[default]
    Final,
    /// Written while running: datapoints aggregated after it are not in it.
    Checkpoint,
}

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
    #[serde(default)]
    kind: Kind,
    #[serde(default)]
    written_at: f64,
    #[serde(default)]
    intervals: u64,
    #[serde(default)]
    datapoints: u64,
    series: Vec<SavedSeries>,
}

#[derive(Serialize, Deserialize)]
struct SavedSeries {
    name: String,
    method: String,
    frequency: i64,
    period: u64,
    next_due: u64,
    intervals: Vec<SavedInterval>,
}

#[derive(Serialize, Deserialize)]
struct SavedInterval {
    start: u64,
    active: bool,
    sum: u64,
    count: u64,
    min: u64,
    max: u64,
    values: Vec<u64>,
}

/// What a state file holds, from its header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Final state or checkpoint.
    pub kind: Kind,
    /// When the snapshot was taken (Unix seconds; 0 when the file does not say).
    pub written_at: f64,
    /// Output series in the file.
    pub series: usize,
    /// Open intervals in the file.
    pub intervals: u64,
    /// Datapoints those intervals hold.
    pub datapoints: u64,
}

/// What [`restore`] found and took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Restored {
    /// The file's header.
    pub file: Summary,
    /// Series restored (fewer than the file's when past `max_series` or already present).
    pub series: usize,
    /// Intervals restored.
    pub intervals: u64,
}

/// A copy of the aggregator's series, taken under its lock and written without it.
pub struct Snapshot {
    file: File,
}

impl Snapshot {
    /// Copies every open series of `aggregator` (at `now`, Unix seconds).
    pub fn take(aggregator: &Aggregator, kind: Kind, now: f64) -> Snapshot {
        let store = &aggregator.table.values;
        let mut values = Vec::new();
        let series: Vec<SavedSeries> = aggregator
            .table
            .series()
            .map(|s| SavedSeries {
                name: s.name.to_string(),
                method: s.method.name().to_owned(),
                frequency: s.frequency,
                period: s.period.to_bits(),
                next_due: s.next_due.to_bits(),
                intervals: s
                    .intervals
                    .iter()
                    .map(|b| {
                        values.clear();
                        store.extend_into(&b.acc.values, &mut values);
                        SavedInterval {
                            start: b.start.to_bits(),
                            active: b.active,
                            sum: b.acc.sum.to_bits(),
                            count: b.acc.count,
                            min: b.acc.min.to_bits(),
                            max: b.acc.max.to_bits(),
                            values: values.iter().map(|v| v.to_bits()).collect(),
                        }
                    })
                    .collect(),
            })
            .collect();
        let intervals = series.iter().map(|s| s.intervals.len() as u64).sum();
        let datapoints = series
            .iter()
            .flat_map(|s| &s.intervals)
            .map(|b| b.count)
            .sum();
        Snapshot {
            file: File {
                version: 1,
                kind,
                written_at: now,
                intervals,
                datapoints,
                series,
            },
        }
    }

    /// The header of the file this snapshot writes.
    pub fn summary(&self) -> Summary {
        summary(&self.file)
    }

    /// Writes the snapshot to `dir/aggregator.state` (temp file, sync, rename).
    pub fn write(&self, dir: &Path) -> Result<Summary, StateError> {
        let path = path_in(dir);
        let tmp = dir.join(format!("{STATE_FILE}.tmp"));
        let io = |source| StateError::Io {
            path: tmp.clone(),
            source,
        };
        let bytes = serde_json::to_vec(&self.file).map_err(|e| StateError::Format {
            path: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(|source| StateError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(self.summary())
    }
}

fn summary(file: &File) -> Summary {
    Summary {
        kind: file.kind,
        written_at: file.written_at,
        series: file.series.len(),
        intervals: file.intervals,
        datapoints: file.datapoints,
    }
}

/// The state file in `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

/// Writes every open series to `dir/aggregator.state` as a final state; returns how many.
pub fn save(aggregator: &Aggregator, dir: &Path) -> Result<usize, StateError> {
    let snapshot = Snapshot::take(aggregator, Kind::Final, super::unix_now());
    snapshot.write(dir).map(|s| s.series)
}

/// Removes a checkpoint once no series is open (a missing file is fine).
pub fn remove(dir: &Path) -> Result<(), StateError> {
    let path = path_in(dir);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StateError::Io { path, source }),
    }
}

/// Reads `dir/aggregator.state` into `aggregator` and removes the file (the caller writes
/// what it restored back as a checkpoint); `None` without a file.
pub fn restore(aggregator: &mut Aggregator, dir: &Path) -> Result<Option<Restored>, StateError> {
    let path = path_in(dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StateError::Io { path, source }),
    };
    let parsed = serde_json::from_slice::<File>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            if f.version == 1 {
                Ok(f)
            } else {
                Err(format!("version {} (this build reads 1)", f.version))
            }
        });
    let file = match parsed {
        Ok(f) => f,
        Err(message) => {
            let _ = std::fs::rename(&path, dir.join(format!("{STATE_FILE}.bad")));
            return Err(StateError::Format { path, message });
        }
    };
    let header = summary(&file);
    let max_series = aggregator.limits().max_series;
    let mut restored = Restored {
        file: header,
        series: 0,
        intervals: 0,
    };
    for s in file.series {
        let Some(method) = AggregationMethod::parse(&s.method) else {
            continue;
        };
        if s.frequency <= 0 || aggregator.has_series(&s.name) {
            continue;
        }
        if aggregator.stats().series as usize >= max_series {
            aggregator.table.stats.dropped_series_limit +=
                s.intervals.iter().map(|b| b.count).sum::<u64>();
            continue;
        }
        restored.series += 1;
        restored.intervals += s.intervals.len() as u64;
        // Woken by its next datapoint, or at its saved tick.
        let parked = s.intervals.iter().all(|b| !b.active);
        let store = &mut aggregator.table.values;
        let intervals: Intervals = s
            .intervals
            .into_iter()
            .map(|b| {
                let mut acc = Accumulator {
                    sum: f64::from_bits(b.sum),
                    count: b.count,
                    min: f64::from_bits(b.min),
                    max: f64::from_bits(b.max),
                    ..Accumulator::default()
                };
                for v in b.values {
                    store.push(&mut acc.values, f64::from_bits(v));
                }
                Interval {
                    start: f64::from_bits(b.start),
                    active: b.active,
                    acc,
                }
            })
            .collect();
        aggregator.table.insert(Series {
            name: Arc::from(s.name),
            method,
            frequency: s.frequency,
            period: f64::from_bits(s.period),
            next_due: f64::from_bits(s.next_due),
            parked,
            parked_at: None,
            intervals,
        });
    }
    std::fs::remove_file(&path).map_err(|source| StateError::Io { path, source })?;
    Ok(Some(restored))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::aggregator::{AggregationRules, AggregatorLimits};

    fn run(a: &mut Aggregator, now: f64) -> Vec<(String, f64, f64)> {
        let mut out = Vec::new();
        a.tick(now, &mut |n, t, v| out.push((n.to_owned(), t, v)));
        out
    }

    #[test]
    fn a_restart_mid_interval_gives_the_value_without_restart() {
        let rules = Arc::new(
            AggregationRules::parse("s (10) = sum i.*\np (10) = p50 i.*\nm (10) = min i.*\n")
                .expect("rules"),
        );
        let feed = |a: &mut Aggregator, from: usize, to: usize| {
            for i in from..to {
                let v = [1e16, 1.0, -1e16, -0.0, 3.5][i % 5];
                a.feed(b"i.x", 100.0 + i as f64, v, 100.0);
            }
        };
        let mut straight = Aggregator::new(rules.clone(), AggregatorLimits::default());
        feed(&mut straight, 0, 9);
        let expected = run(&mut straight, 110.0);

        let dir = tempfile::tempdir().expect("tempdir");
        let mut before = Aggregator::new(rules.clone(), AggregatorLimits::default());
        feed(&mut before, 0, 4);
        assert_eq!(save(&before, dir.path()).expect("saved"), 3);
        let mut after = Aggregator::new(rules, AggregatorLimits::default());
        let r = restore(&mut after, dir.path())
            .expect("restored")
            .expect("a file");
        assert_eq!((r.file.kind, r.series, r.intervals), (Kind::Final, 3, 3));
        assert_eq!(r.file.datapoints, 12);
        assert!(!path_in(dir.path()).exists(), "read once");
        feed(&mut after, 4, 9);
        let got = run(&mut after, 110.0);
        let bits = |v: Vec<(String, f64, f64)>| {
            let mut v: Vec<_> = v
                .into_iter()
                .map(|(n, t, x)| (n, t.to_bits(), x.to_bits()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(bits(got), bits(expected));
    }

    #[test]
    fn a_checkpoint_says_so_and_a_file_without_kind_is_final() {
        let rules = Arc::new(AggregationRules::parse("s (10) = sum i.*\n").expect("rules"));
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = Aggregator::new(rules.clone(), AggregatorLimits::default());
        a.feed(b"i.x", 100.0, 1.0, 100.0);
        a.feed(b"i.x", 110.0, 2.0, 100.0);
        let written = Snapshot::take(&a, Kind::Checkpoint, 123.5)
            .write(dir.path())
            .expect("written");
        let mut b = Aggregator::new(rules.clone(), AggregatorLimits::default());
        let r = restore(&mut b, dir.path()).expect("read").expect("a file");
        assert_eq!(r.file, written);
        assert_eq!(
            (
                r.file.kind,
                r.file.written_at,
                r.file.intervals,
                r.file.datapoints
            ),
            (Kind::Checkpoint, 123.5, 2, 2)
        );
        assert_eq!((r.series, r.intervals), (1, 2));
        std::fs::write(path_in(dir.path()), br#"{"version":1,"series":[]}"#).expect("write");
        let mut c = Aggregator::new(rules, AggregatorLimits::default());
        let r = restore(&mut c, dir.path()).expect("read").expect("a file");
        assert_eq!(r.file.kind, Kind::Final);
    }

    #[test]
    fn a_torn_file_is_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(path_in(dir.path()), b"{\"version\":1,\"ser").expect("write");
        let mut a = Aggregator::new(Arc::default(), AggregatorLimits::default());
        assert!(matches!(
            restore(&mut a, dir.path()),
            Err(StateError::Format { .. })
        ));
        assert!(dir.path().join("aggregator.state.bad").exists());
        assert_eq!(restore(&mut a, dir.path()).expect("none"), None);
    }
}
