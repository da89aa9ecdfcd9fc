//! carbon-c-relay 3.7.3's aggregator (`aggregator.c`): buckets per output name, their
//! expiry, and what each `compute` writes.
//!
//! - A series (one output name of one `compute`) is made on its first datapoint: its
//!   `bucketcnt = ceil(expire / interval) + 2` buckets start at
//!   `((now - expire) / interval) * interval`, one interval apart, and its own expiry is
//!   `expire + rand() % interval` (a splay against a thundering herd).
//! - A datapoint goes to bucket `(epoch - first.start) / interval`; one before the first
//!   bucket, past the last, or in a bucket already written is dropped (counted).
//! - A bucket is written once `start + expiry < now` (at shutdown: every bucket with
//!   `start + expire < now + expire - interval`), when it holds anything, as
//!   `name value ts` with the value printed by `%f` (counts by `%zu`) and `ts` the bucket's
//!   start, middle or end; then it moves to the end with the next start. A series whose
//!   buckets are all empty is forgotten.
//! - `median` and `percentileN` take `sorted[(int)(p/100 * cnt + 0.9) - 1]`, sorted by
//!   glibc's merge sort with carbon-c-relay's comparator, which compares `(int)(a - b)` (so
//!   values less than one apart count as equal and keep their arrival order); `variance` is
//!   the population variance, `stddev` its square root.
//!
//! - Unlike carbon-c-relay, the open series are bounded ([`DEFAULT_MAX_SERIES`], or the
//!   overlay's `max_aggregation_series`): a datapoint that would open a series past the
//!   bound is dropped and counted (`series_limit`); the series already open go on. So are
//!   the values the `median`, `percentile`, `variance` and `stddev` computes keep until a
//!   bucket is written (the overlay's `max_aggregation_values`, over every aggregation): a
//!   datapoint that would keep one more is dropped and counted (`values_limit`).
//!
//! The written lines are fed back through the relay (cleansed and routed again), as
//! carbon-c-relay writes them to a pipe its dispatchers read.

use std::collections::HashMap;

use super::route::AggregateHit;
use super::{AggregatorSpec, ComputeKind, Program, TsWhen};

/// Open series (over every aggregation) when the overlay sets no bound: about 1 KiB each
/// with a few buckets and a name, so about 1 GiB at the bound.
pub(crate) const DEFAULT_MAX_SERIES: usize = 1_000_000;

/// Values kept for the computes that need them, over every aggregation, when the overlay sets
/// no bound (8 bytes each: 80 MB), as the carbon-aggregator import's default `max_values`.
pub(crate) const DEFAULT_MAX_VALUES: usize = 10_000_000;

/// One bucket of a series.
#[derive(Clone, Debug, Default)]
struct Bucket {
    start: i64,
    cnt: usize,
    sum: f64,
    max: f64,
    min: f64,
    /// The values, for the computes that need them.
    values: Vec<f64>,
    written: bool,
}

/// One output name of one compute.
#[derive(Debug)]
struct Series {
    /// `expire + rand() % interval`.
    expire: i64,
    buckets: Vec<Bucket>,
}

/// The open series of one `aggregate` statement, per compute.
#[derive(Debug, Default)]
struct Aggregator {
    computes: Vec<HashMap<Box<[u8]>, Series>>,
}

/// What the aggregators did, for the relay's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AggregateCounts {
    /// Datapoints taken into a bucket.
    pub received: u64,
    /// Datapoints dropped: before the first bucket, past the last, or in a written one.
    pub dropped: u64,
    /// Lines written.
    pub sent: u64,
    /// Datapoints dropped because they would have opened a series past the bound.
    pub series_limit: u64,
    /// Datapoints dropped because their value would have been kept past the values bound.
    pub values_limit: u64,
}

/// The state of every aggregation of a carbon-c-relay configuration.
#[derive(Debug)]
pub(crate) struct Aggregators {
    aggregators: Vec<Aggregator>,
    rng: fastrand::Rng,
    pub counts: AggregateCounts,
    /// Series open now, over every aggregation.
    open: usize,
    /// The bound on `open`.
    max_series: usize,
    /// Most values held in buckets, over every aggregation.
    max_values: usize,
    /// Values held in buckets now, over every aggregation (bounded by `max_values`).
    values: usize,
}

impl Aggregators {
    /// Empty state for `program`'s aggregations, with at most `max_series` open series and
    /// `max_values` kept values.
    pub(crate) fn new(program: &Program, max_series: usize, max_values: usize) -> Self {
        Self {
            aggregators: program
                .aggregators
                .iter()
                .map(|a| Aggregator {
                    computes: a.computes.iter().map(|_| HashMap::new()).collect(),
                })
                .collect(),
            rng: fastrand::Rng::new(),
            counts: AggregateCounts::default(),
            open: 0,
            max_series,
            max_values,
            values: 0,
        }
    }

    /// Series open now.
    pub(crate) fn open_series(&self) -> usize {
        self.open
    }

    /// Moves the series of `old`'s aggregations that `new` (this state's program) has
    /// unchanged into this state, each to the first equal aggregation not yet given one.
    /// The counters carry over, so they keep counting up.
    pub(crate) fn take_from(
        &mut self,
        old: &mut Aggregators,
        old_program: &Program,
        new: &Program,
    ) {
        let mut taken = vec![false; old_program.aggregators.len()];
        for (i, spec) in new.aggregators.iter().enumerate() {
            let Some(j) = (0..old_program.aggregators.len())
                .find(|&j| !taken[j] && old_program.aggregators[j] == *spec)
            else {
                continue;
            };
            taken[j] = true;
            if let (Some(to), Some(from)) =
                (self.aggregators.get_mut(i), old.aggregators.get_mut(j))
            {
                std::mem::swap(to, from);
            }
        }
        self.counts = old.counts;
        self.open = self.count_open();
        old.open = old.count_open();
        self.values = self.count_values();
        old.values = old.count_values();
    }

    fn count_values(&self) -> usize {
        self.aggregators
            .iter()
            .flat_map(|a| &a.computes)
            .flat_map(HashMap::values)
            .flat_map(|s| &s.buckets)
            .map(|b| b.values.len())
            .sum()
    }

    fn count_open(&self) -> usize {
        self.aggregators
            .iter()
            .flat_map(|a| &a.computes)
            .map(HashMap::len)
            .sum()
    }

    /// Takes one datapoint (`name` is the hit's output name) at wall-clock second `now`.
    pub(crate) fn put(&mut self, program: &Program, hit: &AggregateHit, name: &[u8], now: i64) {
        let (Some(spec), Some(state)) = (
            program.aggregators.get(hit.aggregator as usize),
            self.aggregators.get_mut(hit.aggregator as usize),
        ) else {
            return;
        };
        let (Some(compute), Some(series_of)) = (
            spec.computes.get(hit.compute as usize),
            state.computes.get_mut(hit.compute as usize),
        ) else {
            return;
        };
        let interval = i64::from(spec.interval.max(1));
        let expire = i64::from(spec.expire);
        let series = match series_of.get_mut(name) {
            Some(s) => s,
            None => {
                if self.open >= self.max_series {
                    self.counts.series_limit += 1;
                    return;
                }
                self.open += 1;
                let base = ((now - expire) / interval) * interval;
                let count = bucket_count(spec);
                let splay = i64::from(self.rng.u32(..i32::MAX as u32)) % interval;
                series_of.entry(name.into()).or_insert(Series {
                    expire: expire + splay,
                    buckets: (0..count)
                        .map(|i| Bucket {
                            start: base + i as i64 * interval,
                            ..Bucket::default()
                        })
                        .collect(),
                })
            }
        };
        let itime = hit.epoch.saturating_sub(series.buckets[0].start);
        if itime < 0 || itime >= series.buckets.len() as i64 * interval {
            self.counts.dropped += 1;
            return;
        }
        let Some(b) = series.buckets.get_mut((itime / interval) as usize) else {
            self.counts.dropped += 1;
            return;
        };
        if b.written {
            self.counts.dropped += 1;
            return;
        }
        let keep = needs_values(compute.kind);
        if keep && self.values >= self.max_values {
            self.counts.values_limit += 1;
            return;
        }
        let v = hit.value;
        if b.cnt == 0 {
            (b.sum, b.max, b.min) = (v, v, v);
        } else {
            b.sum += v;
            if b.max < v {
                b.max = v;
            }
            if b.min > v {
                b.min = v;
            }
        }
        if keep {
            b.values.push(v);
            self.values += 1;
        }
        b.cnt += 1;
        self.counts.received += 1;
    }

    /// Writes every bucket past its expiry at wall-clock second `now` (`shutdown`: every
    /// completed one) through `emit` (a line without its newline), then rotates the written
    /// buckets and forgets empty series.
    pub(crate) fn expire(
        &mut self,
        program: &Program,
        now: i64,
        shutdown: bool,
        emit: &mut dyn FnMut(&[u8]),
    ) {
        let mut line = Vec::new();
        for (spec, state) in program.aggregators.iter().zip(&mut self.aggregators) {
            let interval = i64::from(spec.interval.max(1));
            let now = if shutdown {
                now + i64::from(spec.expire) - interval
            } else {
                now
            };
            for (compute, series_of) in spec.computes.iter().zip(&mut state.computes) {
                series_of.retain(|name, series| {
                    let expire = if shutdown {
                        i64::from(spec.expire)
                    } else {
                        series.expire
                    };
                    for b in &mut series.buckets {
                        if b.start + expire >= now {
                            break;
                        }
                        if b.written {
                            continue;
                        }
                        b.written = true;
                        if b.cnt > 0 {
                            line.clear();
                            write_metric(spec, compute.kind, b, name, &mut line);
                            emit(&line);
                            self.counts.sent += 1;
                        }
                    }
                    while series.buckets.first().is_some_and(|b| b.written) {
                        let mut b = series.buckets.remove(0);
                        let last = series.buckets.last().map_or(b.start, |l| l.start);
                        b.start = last + interval;
                        b.cnt = 0;
                        // Given back, not kept: the bound counts what buckets hold.
                        self.values -= b.values.len();
                        b.values = Vec::new();
                        b.written = false;
                        series.buckets.push(b);
                    }
                    let keep = series.buckets.iter().any(|b| b.cnt > 0);
                    if !keep {
                        self.open -= 1;
                    }
                    keep
                });
            }
        }
    }
}

/// `(expire + (interval - 1)) / interval + 1 + 1`.
fn bucket_count(spec: &AggregatorSpec) -> usize {
    let interval = usize::from(spec.interval.max(1));
    usize::from(spec.expire).div_ceil(interval) + 2
}

fn needs_values(kind: ComputeKind) -> bool {
    matches!(
        kind,
        ComputeKind::Median
            | ComputeKind::Percentile(_)
            | ComputeKind::Variance
            | ComputeKind::Stddev
    )
}

/// `write_metric`: `name value ts`.
fn write_metric(
    spec: &AggregatorSpec,
    kind: ComputeKind,
    b: &mut Bucket,
    name: &[u8],
    out: &mut Vec<u8>,
) {
    use std::io::Write as _;
    let interval = i64::from(spec.interval);
    let ts = match spec.ts {
        TsWhen::Start => b.start,
        TsWhen::Middle => b.start + interval / 2,
        TsWhen::End => b.start + interval,
    };
    let cnt = b.cnt as f64;
    let value = match kind {
        ComputeKind::Count => {
            out.extend_from_slice(name);
            let _ = write!(out, " {} {ts}", b.cnt);
            return;
        }
        ComputeKind::Sum => b.sum,
        ComputeKind::Max => b.max,
        ComputeKind::Min => b.min,
        ComputeKind::Average => b.sum / cnt,
        ComputeKind::Median | ComputeKind::Percentile(_) => {
            let p = f64::from(kind.percentile().unwrap_or(50));
            let k = ((p / 100.0 * cnt) + 0.9) as i64;
            glibc_msort(&mut b.values);
            usize::try_from(k - 1)
                .ok()
                .and_then(|i| b.values.get(i))
                .copied()
                .unwrap_or(0.0)
        }
        ComputeKind::Variance | ComputeKind::Stddev => {
            let avg = b.sum / cnt;
            let ksum = b.values.iter().map(|v| (v - avg).powi(2)).sum::<f64>() / cnt;
            if kind == ComputeKind::Variance {
                ksum
            } else {
                ksum.sqrt()
            }
        }
    };
    out.extend_from_slice(name);
    out.push(b' ');
    write_percent_f(value, out);
    let _ = write!(out, " {ts}");
}

/// C's `%f`: six decimals; `inf`, `nan` as glibc spells them.
fn write_percent_f(v: f64, out: &mut Vec<u8>) {
    use std::io::Write as _;
    if v.is_nan() {
        out.extend_from_slice(if v.is_sign_negative() {
            b"-nan"
        } else {
            b"nan"
        });
    } else if v.is_infinite() {
        out.extend_from_slice(if v < 0.0 { b"-inf" } else { b"inf" });
    } else {
        let _ = write!(out, "{v:.6}");
    }
}

/// carbon-c-relay's `cmp_entry`: `(int)(a - b)`.
fn cmp_entry(a: f64, b: f64) -> i64 {
    let d = a - b;
    if d.is_nan() {
        // (int)NaN is INT_MIN on x86.
        i64::from(i32::MIN)
    } else {
        d.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i64
    }
}

/// glibc's `qsort` for arrays it can buffer (`msort_with_tmp`): a top-down merge sort that
/// takes from the left run while `cmp(left, right) <= 0`. Its result with carbon-c-relay's
/// inconsistent comparator is what carbon-c-relay's percentiles read.
fn glibc_msort(v: &mut [f64]) {
    let mut tmp = vec![0.0; v.len()];
    msort_with_tmp(v, &mut tmp);
}

fn msort_with_tmp(b: &mut [f64], tmp: &mut [f64]) {
    let n = b.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    {
        let (b1, b2) = b.split_at_mut(n1);
        msort_with_tmp(b1, tmp);
        msort_with_tmp(b2, tmp);
    }
    let (mut i, mut j, mut t) = (0, n1, 0);
    while i < n1 && j < n {
        if cmp_entry(b[i], b[j]) <= 0 {
            tmp[t] = b[i];
            i += 1;
        } else {
            tmp[t] = b[j];
            j += 1;
        }
        t += 1;
    }
    // What is left of the right run is already in place.
    while i < n1 {
        tmp[t] = b[i];
        i += 1;
        t += 1;
    }
    b[..t].copy_from_slice(&tmp[..t]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::c_relay::{AggregateCompute, AggregatorSpec};

    fn sum_of(interval: u16, metric: &str) -> AggregatorSpec {
        AggregatorSpec {
            interval,
            expire: interval * 2,
            ts: TsWhen::Start,
            computes: vec![AggregateCompute {
                kind: ComputeKind::Sum,
                metric: metric.into(),
            }],
            stub: None,
        }
    }

    fn hit(aggregator: u32, value: f64, epoch: i64) -> AggregateHit {
        AggregateHit {
            aggregator,
            compute: 0,
            name: (0, 0),
            value,
            epoch,
        }
    }

    /// Every line written once `now` is far past every bucket.
    fn drain(state: &mut Aggregators, program: &Program, now: i64) -> Vec<String> {
        let mut out = Vec::new();
        state.expire(program, now + 1000, false, &mut |l| {
            out.push(String::from_utf8_lossy(l).into_owned())
        });
        out.sort();
        out
    }

    #[test]
    fn a_datapoint_past_the_series_bound_is_dropped_and_counted() {
        let program = Program {
            aggregators: vec![sum_of(60, "agg")],
            ..Program::default()
        };
        let mut state = Aggregators::new(&program, 2, DEFAULT_MAX_VALUES);
        let now = 1_700_000_000;
        for name in ["a", "b", "c", "a", "d"] {
            state.put(&program, &hit(0, 1.0, now), name.as_bytes(), now);
        }
        assert_eq!(state.open_series(), 2);
        assert_eq!(state.counts.series_limit, 2);
        assert_eq!(state.counts.received, 3);
        let bucket = now / 60 * 60;
        assert_eq!(
            drain(&mut state, &program, now),
            [
                format!("a 2.000000 {bucket}"),
                format!("b 1.000000 {bucket}")
            ]
        );
        // Written and empty, the series are forgotten: room for new ones.
        assert_eq!(state.open_series(), 0);
        state.put(&program, &hit(0, 1.0, now), b"c", now);
        assert_eq!(state.open_series(), 1);
    }

    #[test]
    fn values_past_the_bound_are_dropped_counted_and_given_back_when_written() {
        let mut spec = sum_of(60, "agg");
        spec.computes[0].kind = ComputeKind::Median;
        let program = Program {
            aggregators: vec![spec],
            ..Program::default()
        };
        let mut state = Aggregators::new(&program, 10, DEFAULT_MAX_VALUES);
        state.values = DEFAULT_MAX_VALUES - 1;
        let now = 1_700_000_000;
        for v in [1.0, 2.0] {
            state.put(&program, &hit(0, v, now), b"m", now);
        }
        assert_eq!((state.counts.received, state.counts.values_limit), (1, 1));
        let bucket = now / 60 * 60;
        assert_eq!(
            drain(&mut state, &program, now),
            [format!("m 1.000000 {bucket}")]
        );
        assert_eq!(state.values, DEFAULT_MAX_VALUES - 1);
    }

    #[test]
    fn a_reload_takes_over_the_buckets_of_the_aggregations_it_keeps() {
        let old_program = Program {
            aggregators: vec![sum_of(60, "kept"), sum_of(10, "changed")],
            ..Program::default()
        };
        let now = 1_700_000_000;
        let mut old = Aggregators::new(&old_program, 100, DEFAULT_MAX_VALUES);
        old.put(&old_program, &hit(0, 1.0, now), b"kept", now);
        old.put(&old_program, &hit(1, 1.0, now), b"changed", now);
        // The kept aggregation moves to another place; the other one changes its interval.
        let new_program = Program {
            aggregators: vec![sum_of(20, "changed"), sum_of(60, "kept")],
            ..Program::default()
        };
        let mut new = Aggregators::new(&new_program, 100, DEFAULT_MAX_VALUES);
        new.take_from(&mut old, &old_program, &new_program);
        assert_eq!((new.open_series(), old.open_series()), (1, 1));
        new.put(&new_program, &hit(1, 2.0, now), b"kept", now);
        let bucket = now / 60 * 60;
        assert_eq!(
            drain(&mut new, &new_program, now),
            [format!("kept 3.000000 {bucket}")]
        );
    }

    #[test]
    fn the_merge_sort_keeps_values_less_than_one_apart_in_arrival_order() {
        let mut v = vec![3.5, 0.2, 0.9, 0.1, 2.0];
        glibc_msort(&mut v);
        // 0.2, 0.9 and 0.1 compare equal; 2.0 vs 3.5 is -1.5 → -1.
        assert_eq!(v, vec![0.2, 0.9, 0.1, 2.0, 3.5]);
    }

    #[test]
    fn percent_f_prints_six_decimals() {
        let mut out = Vec::new();
        write_percent_f(2.0 / 3.0, &mut out);
        out.push(b' ');
        write_percent_f(-1e20, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "0.666667 -100000000000000000000.000000"
        );
    }
}
