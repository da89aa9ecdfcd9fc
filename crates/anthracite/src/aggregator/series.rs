//! The output series, their interval buffers and their timers (carbon's `BufferManager`,
//! `MetricBuffer`, `IntervalBuffer` and one `LoopingCall` per series), bounded.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::method::{Accumulator, Method};
use super::rules::AggregationRules;

/// Bounds and carbon's timing settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AggregatorLimits {
    /// carbon's `MAX_AGGREGATION_INTERVALS` (default 5).
    pub max_intervals: i64,
    /// carbon's `WRITE_BACK_FREQUENCY` in seconds (`None`: each series' frequency).
    pub write_back: Option<f64>,
    /// Most output series held at once; a datapoint that would create one more is dropped
    /// (`series_limit`).
    pub max_series: usize,
    /// Most values held for percentiles; a percentile datapoint past it is dropped
    /// (`values_limit`).
    pub max_values: usize,
    /// Most intervals held over all series (each a few words; late or scattered timestamps
    /// can open many per series between two ticks); a datapoint that would open one more is
    /// dropped (`intervals_limit`).
    pub max_intervals_held: usize,
    /// Most input names whose rule verdict is cached (the cache is emptied when full).
    pub max_cached_names: usize,
}

impl Default for AggregatorLimits {
    fn default() -> Self {
        Self {
            max_intervals: 5,
            write_back: None,
            max_series: 1_000_000,
            max_values: 10_000_000,
            max_intervals_held: 5_000_000,
            max_cached_names: 1_000_000,
        }
    }
}

/// Counters since the aggregator was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AggregatorStats {
    /// Aggregates computed and handed on (`aggregateDatapointsSent`).
    pub sent: u64,
    /// Datapoints not aggregated because the series bound was reached.
    pub dropped_series_limit: u64,
    /// Datapoints not aggregated because the values bound was reached.
    pub dropped_values_limit: u64,
    /// Datapoints not aggregated because the intervals bound was reached.
    pub dropped_intervals_limit: u64,
    /// Output series held now (`allocatedBuffers`).
    pub series: u64,
    /// Values in open intervals now (`bufferedDatapoints`).
    pub buffered: u64,
    /// Values held for percentiles now.
    pub held_values: u64,
    /// Intervals held now, over all series.
    pub held_intervals: u64,
    /// Datapoints added to an interval since the aggregator was created.
    pub aggregated: u64,
}

/// What one [`Aggregator::feed`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Emitted {
    /// Some rule matched the name.
    pub matched: bool,
    /// The name is one of the outputs it resolved to (`FORWARD_ALL` then does not pass it on).
    pub is_output: bool,
}

/// Where a name goes under one rule.
#[derive(Debug)]
struct Target {
    rule: u32,
    output: Box<str>,
}

/// One interval's buffer.
#[derive(Debug)]
pub(super) struct Interval {
    pub(super) start: f64,
    pub(super) acc: Accumulator,
    pub(super) active: bool,
}

/// One output series.
#[derive(Debug)]
pub(super) struct Series {
    pub(super) name: Box<str>,
    pub(super) method: Method,
    pub(super) frequency: i64,
    /// Seconds between timer ticks: `min(WRITE_BACK_FREQUENCY, frequency)`.
    pub(super) period: f64,
    /// Unix time of the next tick.
    pub(super) next_due: f64,
    /// In creation order (the order carbon's dict iterates in).
    pub(super) intervals: Vec<Interval>,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    series: Option<Series>,
}

/// The series table: every output series, found by name, with its timer.
#[derive(Debug, Default)]
pub(super) struct Table {
    index: HashMap<Box<str>, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// `(due in µs, slot, generation)`; entries of deleted series are skipped when popped.
    timers: BinaryHeap<Reverse<(i64, u32, u32)>>,
    /// Value vectors of freed intervals, reused.
    pool: Vec<Vec<f64>>,
    scratch: Vec<f64>,
    pub(super) stats: AggregatorStats,
}

/// carbon-aggregator's buffers. See the `aggregator` module documentation for the semantics.
#[derive(Debug)]
pub struct Aggregator {
    rules: Arc<AggregationRules>,
    limits: AggregatorLimits,
    verdicts: HashMap<Box<[u8]>, Box<[Target]>>,
    pub(super) table: Table,
}

fn micros(t: f64) -> i64 {
    (t * 1e6) as i64
}

impl Aggregator {
    /// An aggregator with no series.
    pub fn new(rules: Arc<AggregationRules>, limits: AggregatorLimits) -> Self {
        Self {
            rules,
            limits,
            verdicts: HashMap::new(),
            table: Table::default(),
        }
    }

    /// The rules in force.
    pub fn rules(&self) -> &Arc<AggregationRules> {
        &self.rules
    }

    /// The limits in force.
    pub fn limits(&self) -> AggregatorLimits {
        self.limits
    }

    /// Puts new rules in force; open series keep their frequency and method until freed.
    pub fn set_rules(&mut self, rules: Arc<AggregationRules>) {
        self.rules = rules;
        self.verdicts.clear();
    }

    /// True when the output series `name` exists.
    pub fn has_series(&self, name: &str) -> bool {
        self.table.index.contains_key(name)
    }

    /// Counters and current sizes.
    pub fn stats(&self) -> AggregatorStats {
        self.table.stats
    }

    /// Adds a datapoint to every output series its name resolves to (at `now`, Unix seconds,
    /// which starts the timer of a series it creates).
    pub fn feed(&mut self, name: &[u8], timestamp: f64, value: f64, now: f64) -> Emitted {
        if !self.verdicts.contains_key(name) {
            self.resolve(name);
        }
        let Some(targets) = self.verdicts.get(name) else {
            return Emitted::default();
        };
        let mut out = Emitted {
            matched: !targets.is_empty(),
            is_output: false,
        };
        for t in targets.iter() {
            out.is_output |= t.output.as_bytes() == name;
            let Some(rule) = self.rules.rules.get(t.rule as usize) else {
                continue;
            };
            self.table.add(
                &t.output,
                rule.method,
                rule.frequency,
                &self.limits,
                (timestamp, value),
                now,
            );
        }
        out
    }

    #[cold]
    fn resolve(&mut self, name: &[u8]) {
        if self.verdicts.len() >= self.limits.max_cached_names {
            self.verdicts.clear();
        }
        // Names are UTF-8 (the receivers hand over nothing else); anything else matches no rule.
        let mut targets = Vec::new();
        if let Ok(text) = std::str::from_utf8(name) {
            self.rules.for_each_output(text, |i, output| {
                targets.push(Target {
                    rule: i as u32,
                    output: output.into_boxed_str(),
                });
            });
        }
        let targets: Box<[Target]> = targets.into_boxed_slice();
        self.verdicts.insert(name.into(), targets);
    }

    /// Runs every series timer due by `now` (Unix seconds), handing each aggregate to `emit`
    /// as `(name, interval, value)`.
    pub fn tick(&mut self, now: f64, emit: &mut dyn FnMut(&str, f64, f64)) {
        self.table.tick(now, self.limits.max_intervals, emit);
    }

    /// When the next timer is due (Unix seconds), if any series exists.
    pub fn next_due(&mut self) -> Option<f64> {
        self.table.next_due()
    }
}

impl Table {
    fn add(
        &mut self,
        output: &str,
        method: Method,
        frequency: i64,
        limits: &AggregatorLimits,
        (timestamp, value): (f64, f64),
        now: f64,
    ) {
        let slot = match self.index.get(output) {
            Some(&s) => s,
            None => {
                if self.index.len() >= limits.max_series {
                    self.stats.dropped_series_limit += 1;
                    return;
                }
                // A new series needs an interval: refused here, not left empty.
                if self.stats.held_intervals as usize >= limits.max_intervals_held {
                    self.stats.dropped_intervals_limit += 1;
                    return;
                }
                let period = match limits.write_back {
                    Some(w) => w.min(frequency as f64),
                    None => frequency as f64,
                };
                self.insert(Series {
                    name: output.into(),
                    method,
                    frequency,
                    period,
                    next_due: now + period,
                    intervals: Vec::new(),
                })
            }
        };
        let Some(series) = self
            .slots
            .get_mut(slot as usize)
            .and_then(|s| s.series.as_mut())
        else {
            return;
        };
        let keep = series.method.keeps_values();
        if keep && self.stats.held_values as usize >= limits.max_values {
            self.stats.dropped_values_limit += 1;
            return;
        }
        // Python's float `%` takes the sign of the (positive) frequency.
        let interval = timestamp - timestamp.rem_euclid(series.frequency as f64);
        let buffer = match series.intervals.iter().position(|b| b.start == interval) {
            Some(i) => &mut series.intervals[i],
            None => {
                if self.stats.held_intervals as usize >= limits.max_intervals_held {
                    self.stats.dropped_intervals_limit += 1;
                    return;
                }
                self.stats.held_intervals += 1;
                let values = if keep {
                    self.pool.pop().unwrap_or_default()
                } else {
                    Vec::new()
                };
                series.intervals.push(Interval {
                    start: interval,
                    acc: Accumulator {
                        values,
                        ..Accumulator::default()
                    },
                    active: true,
                });
                let last = series.intervals.len() - 1;
                &mut series.intervals[last]
            }
        };
        buffer.acc.add(value, keep);
        buffer.active = true;
        self.stats.buffered += 1;
        self.stats.aggregated += 1;
        if keep {
            self.stats.held_values += 1;
        }
    }

    /// Adds a series (new, or restored) and starts its timer; returns its slot.
    pub(super) fn insert(&mut self, series: Series) -> u32 {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let due = micros(series.next_due);
        self.index.insert(series.name.clone(), slot);
        self.stats.held_intervals += series.intervals.len() as u64;
        for b in &series.intervals {
            self.stats.buffered += b.acc.count;
            self.stats.held_values += b.acc.values.len() as u64;
        }
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return slot;
        };
        s.series = Some(series);
        self.timers.push(Reverse((due, slot, s.generation)));
        self.stats.series = self.index.len() as u64;
        slot
    }

    fn next_due(&mut self) -> Option<f64> {
        while let Some(&Reverse((due, slot, generation))) = self.timers.peek() {
            if self.is_live(slot, generation) {
                return Some(due as f64 / 1e6);
            }
            self.timers.pop();
        }
        None
    }

    fn is_live(&self, slot: u32, generation: u32) -> bool {
        self.slots
            .get(slot as usize)
            .is_some_and(|s| s.generation == generation && s.series.is_some())
    }

    fn tick(&mut self, now: f64, max_intervals: i64, emit: &mut dyn FnMut(&str, f64, f64)) {
        let now_us = micros(now);
        while let Some(&Reverse((due, slot, generation))) = self.timers.peek() {
            if due > now_us {
                break;
            }
            self.timers.pop();
            if !self.is_live(slot, generation) {
                continue;
            }
            if let Some(next) = self.compute(slot, now, max_intervals, emit) {
                self.timers.push(Reverse((micros(next), slot, generation)));
            }
        }
    }

    /// carbon's `MetricBuffer.compute_value` for the series in `slot`; returns its next tick,
    /// or `None` when it was deleted.
    fn compute(
        &mut self,
        slot: u32,
        now: f64,
        max_intervals: i64,
        emit: &mut dyn FnMut(&str, f64, f64),
    ) -> Option<f64> {
        let s = self.slots.get_mut(slot as usize)?;
        let series = s.series.as_mut()?;
        let now_s = now.floor() as i64;
        let current = now_s - now_s.rem_euclid(series.frequency);
        let threshold = (current - max_intervals * series.frequency) as f64;
        let mut i = 0;
        while i < series.intervals.len() {
            let b = &mut series.intervals[i];
            if b.active {
                if let Some(value) = b.acc.value(series.method, &mut self.scratch) {
                    emit(&series.name, b.start, value);
                    self.stats.sent += 1;
                }
                b.active = false;
            }
            if b.start < threshold {
                let mut freed = series.intervals.remove(i);
                self.stats.held_intervals -= 1;
                self.stats.buffered -= freed.acc.count;
                self.stats.held_values -= freed.acc.values.len() as u64;
                if freed.acc.values.capacity() > 0 {
                    freed.acc.clear();
                    self.pool.push(freed.acc.values);
                }
            } else {
                i += 1;
            }
        }
        if series.intervals.is_empty() {
            let name = series.name.clone();
            s.series = None;
            s.generation = s.generation.wrapping_add(1);
            self.index.remove(&name);
            self.free.push(slot);
            self.stats.series = self.index.len() as u64;
            return None;
        }
        // LoopingCall keeps its phase and skips the ticks it missed.
        let mut next = series.next_due + series.period;
        while next <= now {
            next += series.period;
        }
        series.next_due = next;
        Some(next)
    }

    /// Every series, for the state file.
    pub(super) fn series(&self) -> impl Iterator<Item = &Series> {
        self.slots.iter().filter_map(|s| s.series.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aggregator(rules: &str, write_back: Option<f64>) -> Aggregator {
        let rules = AggregationRules::parse(rules).expect("rules");
        Aggregator::new(
            Arc::new(rules),
            AggregatorLimits {
                write_back,
                ..AggregatorLimits::default()
            },
        )
    }

    fn tick(a: &mut Aggregator, now: f64) -> Vec<(String, f64, f64)> {
        let mut out = Vec::new();
        a.tick(now, &mut |n, t, v| out.push((n.to_owned(), t, v)));
        out
    }

    #[test]
    fn intervals_are_resent_while_they_get_data_and_freed_after_the_window() {
        let mut a = aggregator("agg.<x>.sum (10) = sum in.<x>.*\n", None);
        let t0 = 1000.0;
        assert!(a.feed(b"in.a.1", 1003.0, 1.0, t0).matched);
        a.feed(b"in.a.2", 1007.0, 2.0, t0);
        assert_eq!(a.next_due(), Some(1010.0));
        assert!(tick(&mut a, 1009.9).is_empty());
        assert_eq!(
            tick(&mut a, 1010.0),
            vec![("agg.a.sum".into(), 1000.0, 3.0)]
        );
        // Nothing new: nothing sent.
        assert!(tick(&mut a, 1020.0).is_empty());
        // A late value re-sends the interval over everything it holds.
        a.feed(b"in.a.3", 1001.0, 4.0, 1021.0);
        assert_eq!(
            tick(&mut a, 1030.0),
            vec![("agg.a.sum".into(), 1000.0, 7.0)]
        );
        // threshold at 1060: current 1060 - 5*10 = 1010 > 1000: freed, series deleted.
        assert!(tick(&mut a, 1060.0).is_empty());
        assert_eq!(a.stats().series, 0);
        assert_eq!(a.next_due(), None);
        // A datapoint for the freed interval starts from empty, is sent once and freed.
        a.feed(b"in.a.1", 1002.0, 5.0, 1061.0);
        assert_eq!(
            tick(&mut a, 1071.0),
            vec![("agg.a.sum".into(), 1000.0, 5.0)]
        );
        assert_eq!(a.stats().series, 0);
        assert_eq!(a.stats().sent, 3);
    }

    #[test]
    fn write_back_frequency_and_missed_ticks() {
        let mut a = aggregator("o (60) = avg i.*\n", Some(5.0));
        a.feed(b"i.x", 120.0, 1.0, 100.0);
        assert_eq!(a.next_due(), Some(105.0));
        assert_eq!(tick(&mut a, 105.0), vec![("o".into(), 120.0, 1.0)]);
        a.feed(b"i.y", 130.0, 2.0, 106.0);
        // Ticks at 110, 115 missed: the next is 110 (due), then 120 keeps the phase.
        assert_eq!(tick(&mut a, 117.0), vec![("o".into(), 120.0, 1.5)]);
        assert_eq!(a.next_due(), Some(120.0));
    }

    #[test]
    fn first_rule_fixes_method_and_two_rules_add_twice() {
        let mut a = aggregator("o (10) = max i.*\no (10) = sum i.<x>\n", None);
        let e = a.feed(b"i.a", 100.0, 2.0, 100.0);
        assert!(e.matched && !e.is_output);
        a.feed(b"i.b", 100.0, 3.0, 100.0);
        // Each datapoint went in twice (once per rule), combined with the first rule's max.
        assert_eq!(tick(&mut a, 110.0), vec![("o".into(), 100.0, 3.0)]);
        assert_eq!(a.stats().buffered, 4);
        let mut a = aggregator("i.<x> (10) = sum i.<x>\n", None);
        assert!(a.feed(b"i.a", 100.0, 1.0, 100.0).is_output);
    }

    #[test]
    fn the_bounds_drop_and_count() {
        let rules = AggregationRules::parse("o.<x> (10) = p50 i.<x>\n").expect("rules");
        let mut a = Aggregator::new(
            Arc::new(rules),
            AggregatorLimits {
                max_series: 2,
                max_values: 3,
                ..AggregatorLimits::default()
            },
        );
        for name in [&b"i.a"[..], b"i.b", b"i.c"] {
            a.feed(name, 100.0, 1.0, 100.0);
        }
        a.feed(b"i.a", 100.0, 2.0, 100.0);
        a.feed(b"i.a", 100.0, 3.0, 100.0);
        let s = a.stats();
        assert_eq!((s.series, s.dropped_series_limit), (2, 1));
        assert_eq!((s.held_values, s.dropped_values_limit), (3, 1));
    }

    #[test]
    fn the_intervals_bound_drops_and_counts() {
        let rules = AggregationRules::parse("o.<x> (10) = sum i.<x>\n").expect("rules");
        let mut a = Aggregator::new(
            Arc::new(rules),
            AggregatorLimits {
                max_intervals_held: 3,
                ..AggregatorLimits::default()
            },
        );
        // Scattered timestamps open an interval each; a new series needs one too.
        for t in [100.0, 110.0, 120.0, 130.0] {
            a.feed(b"i.a", t, 1.0, 100.0);
        }
        a.feed(b"i.b", 100.0, 1.0, 100.0);
        // Into an interval that exists: still aggregated.
        a.feed(b"i.a", 105.0, 1.0, 100.0);
        let s = a.stats();
        assert_eq!((s.series, s.held_intervals), (1, 3));
        assert_eq!((s.buffered, s.dropped_intervals_limit), (4, 2));
        // Freed intervals make room again.
        a.tick(1000.0, &mut |_, _, _| {});
        assert_eq!(a.stats().held_intervals, 0);
        a.feed(b"i.b", 1000.0, 1.0, 1000.0);
        assert_eq!(a.stats().held_intervals, 1);
    }

    #[test]
    fn percentile_sorts_arrival_order_copy() {
        let mut a = aggregator("o (10) = p90 i.*\n", None);
        for (i, v) in [5.0, 1.0, 3.0, 2.0, 4.0].into_iter().enumerate() {
            a.feed(b"i.x", 100.0 + i as f64, v, 100.0);
        }
        assert_eq!(tick(&mut a, 110.0), vec![("o".into(), 100.0, 4.6)]);
    }
}
