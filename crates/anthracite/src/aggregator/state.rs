//! The state file: open series written at an orderly shutdown, read back at start.
//!
//! - **Where.** `aggregator.state` in the spill directory (the only directory anthracite owns
//!   for data that outlives the process).
//! - **Format.** One JSON document `{"version":1,"series":[…]}`; each series holds its name,
//!   method, frequency, timer period and next tick (Unix seconds), and its intervals in
//!   creation order with their accumulator. Every float is stored as its IEEE-754 bits, so the
//!   restored sums, minima (`-0.0`) and infinities are the same bits.
//! - **Write.** At shutdown, after the receivers stopped (nothing more is fed) and before the
//!   queues drain: written to `aggregator.state.tmp`, synced, renamed over `aggregator.state`.
//!   A crash during the write leaves the previous file or none, never a torn one.
//! - **Read.** At start, before any receiver accepts: a series whose name already exists is
//!   not restored twice; a series past `max_series` is dropped and counted like any datapoint
//!   at the bound. The file is removed once read, so a later crash cannot restore it twice.
//!   A file that does not parse is renamed `aggregator.state.bad`, logged, and ignored.
//! - **Timing.** A restored series keeps its timer phase: a tick that fell due while the
//!   process was down fires at once, so an interval that received data before the restart is
//!   sent with everything it holds, and with whatever arrives after the restart added to it.
//!   SIGKILL loses the open intervals, as carbon loses them at every restart.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::method::{Accumulator, Method};
use super::series::{Aggregator, Interval, Series};

/// File name of the state file in the spill directory.
pub(crate) const STATE_FILE: &str = "aggregator.state";

/// Why the state could not be written or read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StateError {
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

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
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

/// The state file in `dir`.
pub(crate) fn path_in(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

/// Writes every open series to `dir/aggregator.state`; returns how many.
pub(crate) fn save(aggregator: &Aggregator, dir: &Path) -> Result<usize, StateError> {
    let file = File {
        version: 1,
        series: aggregator
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
                    .map(|b| SavedInterval {
                        start: b.start.to_bits(),
                        active: b.active,
                        sum: b.acc.sum.to_bits(),
                        count: b.acc.count,
                        min: b.acc.min.to_bits(),
                        max: b.acc.max.to_bits(),
                        values: b.acc.values.iter().map(|v| v.to_bits()).collect(),
                    })
                    .collect(),
            })
            .collect(),
    };
    let path = path_in(dir);
    let tmp = dir.join(format!("{STATE_FILE}.tmp"));
    let io = |source| StateError::Io {
        path: tmp.clone(),
        source,
    };
    let bytes = serde_json::to_vec(&file).map_err(|e| StateError::Format {
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
    Ok(file.series.len())
}

/// Reads `dir/aggregator.state` into `aggregator` and removes the file; returns how many
/// series were restored (0 without a file).
pub(crate) fn restore(aggregator: &mut Aggregator, dir: &Path) -> Result<usize, StateError> {
    let path = path_in(dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
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
    let max_series = aggregator.limits().max_series;
    let mut restored = 0;
    for s in file.series {
        let Some(method) = Method::parse(&s.method) else {
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
        aggregator.table.insert(Series {
            name: s.name.into_boxed_str(),
            method,
            frequency: s.frequency,
            period: f64::from_bits(s.period),
            next_due: f64::from_bits(s.next_due),
            intervals: s
                .intervals
                .into_iter()
                .map(|b| Interval {
                    start: f64::from_bits(b.start),
                    active: b.active,
                    acc: Accumulator {
                        sum: f64::from_bits(b.sum),
                        count: b.count,
                        min: f64::from_bits(b.min),
                        max: f64::from_bits(b.max),
                        values: b.values.into_iter().map(f64::from_bits).collect(),
                    },
                })
                .collect(),
        });
        restored += 1;
    }
    std::fs::remove_file(&path).map_err(|source| StateError::Io { path, source })?;
    Ok(restored)
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
        assert_eq!(restore(&mut after, dir.path()).expect("restored"), 3);
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
    fn a_torn_file_is_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(path_in(dir.path()), b"{\"version\":1,\"ser").expect("write");
        let mut a = Aggregator::new(Arc::default(), AggregatorLimits::default());
        assert!(matches!(
            restore(&mut a, dir.path()),
            Err(StateError::Format { .. })
        ));
        assert!(dir.path().join("aggregator.state.bad").exists());
        assert_eq!(restore(&mut a, dir.path()).expect("none"), 0);
    }
}
