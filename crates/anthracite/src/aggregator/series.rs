//! The output series, their interval buffers and their timers (carbon's `BufferManager`,
//! `MetricBuffer`, `IntervalBuffer` and one `LoopingCall` per series), bounded.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use smallvec::SmallVec;

use super::method::{Accumulator, AggregationMethod};
use super::rules::{AggregationRules, ResolveScratch};
use super::values::ValueStore;
use super::verdicts::Verdicts;
use crate::name_cache::prefetch_all;
use crate::protocol::{Point, RUN};

/// How far ahead of the datapoint being fed its verdict-cache index slot is prefetched…
const SLOTS_AHEAD: usize = 16;
/// …and its entry (which needs the slot)…
const ENTRIES_AHEAD: usize = 8;
/// …and the series its verdict names (which needs the entry).
const SERIES_AHEAD: usize = 4;

/// A verdict's first byte: the name is itself one of its outputs.
const IS_OUTPUT: u8 = 1;
/// A verdict's first byte: some rule resolved the name to an output.
const MATCHED: u8 = 2;
/// A verdict's first byte: some rule's template raised a `TypeError` for the name (that rule
/// yields nothing).
const SKIPPED: u8 = 4;
/// A verdict's first byte: a rule's template raised a `KeyError` or `ValueError` for the
/// name: the rules after it do not see it, and it is not passed on.
const STOPPED: u8 = 8;

/// Series (and output references) the tables have room for from the start, within
/// `max_series`: a growing index hashes every name again through the series it holds, and a
/// growing vector of slots or references is copied whole. The room is address space more
/// than memory: the vectors' pages are touched as they fill, and the indexes' are a few
/// bytes per entry.
const RESERVED_SERIES: usize = 1 << 15;
/// Percentile values the value store has room for from the start, within `max_values` (its
/// blocks are 64-byte aligned, which the allocator cannot grow in place: every growth is a
/// copy). A million values are 9 MiB of address space, touched as blocks are taken.
const RESERVED_VALUES: usize = 1 << 20;

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
    /// Some rule resolved the name to an output.
    pub matched: bool,
    /// The name is one of the outputs it resolved to (`FORWARD_ALL` then does not pass it on).
    pub is_output: bool,
    /// Some rule yielded nothing for the name because its template raised a `TypeError`.
    pub skipped: bool,
    /// A rule's template raised a `KeyError` or `ValueError`: the datapoint stopped there
    /// (not passed on, whatever `FORWARD_ALL` says).
    pub stopped: bool,
    /// With `skipped` or `stopped`: the position of that rule (the one it stopped at, else the
    /// first that skipped it).
    pub failed_rule: u32,
}

/// An output series as the rules reach it: the first rule that resolved to it (its method and
/// frequency create the series). Its [`Bound`] is kept apart, in a small array every datapoint
/// reads, while this is read only to find or create the series.
#[derive(Debug)]
struct SeriesRef {
    /// The rule's position in the rules file.
    rule: u32,
    /// The output name's hash in the series index (the key of the reference itself is
    /// derived from it: a new name's output is hashed once for both).
    hash: u64,
    /// Shared with the series (one allocation per output name).
    output: Arc<str>,
    method: AggregationMethod,
    frequency: i64,
}

/// `(slot, generation)` of the series an output reference last found or created, checked
/// before use (the series may have been deleted, and its slot reused, since), so that a
/// datapoint finds its series without hashing the output name.
type Bound = Option<(u32, u32)>;

/// One interval's buffer.
#[derive(Debug)]
pub(super) struct Interval {
    pub(super) start: f64,
    pub(super) acc: Accumulator,
    pub(super) active: bool,
}

/// A series' intervals: the one a steady sender keeps open lies in the series itself, so a
/// datapoint reaches it without a further pointer chase.
pub(super) type Intervals = SmallVec<[Interval; 1]>;

/// One output series.
#[derive(Debug)]
pub(super) struct Series {
    pub(super) name: Arc<str>,
    pub(super) method: AggregationMethod,
    pub(super) frequency: i64,
    /// Seconds between timer ticks: `min(WRITE_BACK_FREQUENCY, frequency)`.
    pub(super) period: f64,
    /// Unix time of the next tick: the timer's next one while an interval is active, else
    /// the first one at which an interval ages out (the ticks between find nothing to do).
    pub(super) next_due: f64,
    /// No interval is active: the series waits for its oldest interval to age out, or for a
    /// datapoint, which brings its timer back to the next tick of its phase.
    pub(super) parked: bool,
    /// The due time (µs) of the parked tick queued for it, if one is: parking again at the
    /// same time queues nothing more.
    pub(super) parked_at: Option<i64>,
    /// In creation order (the order carbon's dict iterates in).
    pub(super) intervals: Intervals,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    series: Option<Series>,
}

/// The series table: every output series, found by name, with its timer.
#[derive(Debug, Default)]
pub(super) struct Table {
    /// The slots of the live series by name: a slot's series holds the key, so a name is
    /// hashed once per lookup or insertion and not stored again.
    index: HashTable<u32>,
    /// Keyed SipHash: senders choose the names.
    hasher: RandomState,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// `(due in µs, slot, generation)`; entries of deleted series are skipped when popped.
    timers: BinaryHeap<Reverse<(i64, u32, u32)>>,
    /// The values of the percentile intervals.
    pub(super) values: ValueStore,
    /// An interval's values being sorted for its percentile.
    scratch: Vec<f64>,
    /// When the clock is asleep, the time (µs) it wakes at by itself; `i64::MIN` while it is
    /// awake (it reads the timers before it sleeps again).
    clock_at: i64,
    /// A timer was queued before `clock_at`: the clock must be woken to run it in time.
    wake_clock: bool,
    pub(super) stats: AggregatorStats,
}

/// carbon-aggregator's buffers. See the `aggregator` module documentation for the semantics.
#[derive(Debug)]
pub struct Aggregator {
    rules: Arc<AggregationRules>,
    limits: AggregatorLimits,
    /// Per input name, its verdict: a flags byte ([`MATCHED`], [`IS_OUTPUT`], [`SKIPPED`],
    /// [`STOPPED`]), with `SKIPPED` or `STOPPED` the little-endian `u32` position of that
    /// rule, then the little-endian `u32` indices in `refs` of the outputs it feeds, one per
    /// rule that resolved it, in file order.
    verdicts: Verdicts,
    /// The outputs the verdicts name, each `(rule, output)` once.
    refs: Vec<SeriesRef>,
    /// Per entry of `refs`, its series' slot.
    bound: Vec<Bound>,
    /// Index in `refs` by `(rule, output)`: the entry of `refs` holds the key, so a new
    /// reference costs one hash of its key and no copy of it. Hashed by [`ref_hash`] from
    /// the output's keyed hash in the series index, which the reference keeps.
    ref_ids: HashTable<u32>,
    /// The verdict being resolved.
    verdict: Vec<u8>,
    /// The captures and output names of the name being resolved.
    scratch: ResolveScratch,
    pub(super) table: Table,
}

/// A verdict's failed rule (0 when none) and its output references (see
/// `Aggregator::verdicts`).
#[inline]
fn ids_of(verdict: &[u8]) -> (u32, &[u8]) {
    let flags = verdict.first().copied().unwrap_or(0);
    if flags & (SKIPPED | STOPPED) != 0 {
        let rule = verdict.get(1..5).unwrap_or_default();
        let rule = rule.try_into().map_or(0, u32::from_le_bytes);
        (rule, verdict.get(5..).unwrap_or_default())
    } else {
        (0, verdict.get(1..).unwrap_or_default())
    }
}

/// The hash of an output reference `(rule, output)` from its output's hash in the series
/// index (keyed SipHash: senders choose the names, and a rule's position does not let them
/// predict it).
#[inline]
fn ref_hash(output_hash: u64, rule: u32) -> u64 {
    output_hash ^ u64::from(rule).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn micros(t: f64) -> i64 {
    (t * 1e6) as i64
}

/// A datapoint being added to the series its name feeds, with the interval of its timestamp
/// at the last frequency asked for: the series of one name mostly share a frequency, so the
/// interval is computed once per datapoint rather than once per series.
struct Sample {
    timestamp: f64,
    value: f64,
    /// The frequency `interval` is for (0, which no series has, before the first).
    frequency: i64,
    interval: f64,
}

impl Sample {
    fn new((timestamp, value): (f64, f64)) -> Self {
        Self {
            timestamp,
            value,
            frequency: 0,
            interval: 0.0,
        }
    }

    /// The timestamp's interval at `frequency`.
    #[inline]
    fn interval(&mut self, frequency: i64) -> f64 {
        if frequency != self.frequency {
            self.frequency = frequency;
            self.interval = interval_start(self.timestamp, frequency);
        }
        self.interval
    }
}

/// carbon's interval of a timestamp, `ts - ts % frequency` with Python's float `%` (the
/// remainder takes the sign of the positive frequency).
#[inline]
fn interval_start(timestamp: f64, frequency: i64) -> f64 {
    // Whole seconds (what senders send) in integers: the same value, without `fmod`.
    if (1.0..9.0e15).contains(&timestamp) && timestamp.fract() == 0.0 {
        let t = timestamp as i64;
        return (t - t.rem_euclid(frequency)) as f64;
    }
    timestamp - timestamp.rem_euclid(frequency as f64)
}

impl Aggregator {
    /// An aggregator with no series.
    pub fn new(rules: Arc<AggregationRules>, limits: AggregatorLimits) -> Self {
        let series = limits.max_series.min(RESERVED_SERIES);
        let values = limits.max_values.min(RESERVED_VALUES);
        Self {
            rules,
            verdicts: Verdicts::with_room(limits.max_cached_names, RESERVED_SERIES),
            limits,
            refs: Vec::with_capacity(series),
            bound: Vec::with_capacity(series),
            ref_ids: HashTable::with_capacity(series),
            verdict: Vec::new(),
            scratch: ResolveScratch::default(),
            table: Table::with_capacity(series, values),
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
        self.forget_verdicts();
    }

    fn forget_verdicts(&mut self) {
        self.verdicts.clear();
        self.refs.clear();
        self.bound.clear();
        self.ref_ids.clear();
    }

    /// True when the output series `name` exists.
    pub fn has_series(&self, name: &str) -> bool {
        self.table
            .slot_of(name, self.table.hasher.hash_one(name))
            .is_some()
    }

    /// Counters and current sizes.
    pub fn stats(&self) -> AggregatorStats {
        self.table.stats
    }

    /// Adds a datapoint to every output series its name resolves to (at `now`, Unix seconds,
    /// which starts the timer of a series it creates).
    pub fn feed(&mut self, name: &[u8], timestamp: f64, value: f64, now: f64) -> Emitted {
        let hash = self.verdicts.hash(name);
        self.feed_hashed(name, hash, (timestamp, value), now)
    }

    /// [`feed`](Self::feed) for each `(name, timestamp, value)` in order, handing what each
    /// found to `found`. The lookups of consecutive datapoints overlap: their verdict-cache
    /// memory is prefetched a few datapoints ahead, then, once a verdict is in, the slots of
    /// the series it names, so a batch waits for memory about once rather than once per
    /// datapoint and series.
    pub fn feed_all<'a>(
        &mut self,
        points: impl ExactSizeIterator<Item = Point<'a>> + Clone,
        now: f64,
        found: &mut dyn FnMut(Emitted),
    ) {
        let mut run: [Point<'a>; RUN] = [(&[], 0.0, 0.0); RUN];
        let mut hashes = [0u64; RUN];
        let mut points = points.peekable();
        while points.peek().is_some() {
            let mut n = 0;
            for ((h, p), point) in hashes.iter_mut().zip(&mut run).zip(&mut points) {
                *h = self.verdicts.hash(point.0);
                *p = point;
                n += 1;
            }
            let (hashes, run) = (&hashes[..n], &run[..n]);
            for &h in hashes.iter().take(SLOTS_AHEAD) {
                self.verdicts.prefetch_slot(h);
            }
            for (&h, p) in hashes.iter().zip(run).take(ENTRIES_AHEAD) {
                self.verdicts.prefetch_entry(h, p.0.len());
            }
            for (&h, p) in hashes.iter().zip(run).take(SERIES_AHEAD) {
                self.prefetch_series(h, p.0);
            }
            for (i, (&h, &(name, timestamp, value))) in hashes.iter().zip(run).enumerate() {
                if let Some(&h) = hashes.get(i + SLOTS_AHEAD) {
                    self.verdicts.prefetch_slot(h);
                }
                if let (Some(&h), Some(p)) =
                    (hashes.get(i + ENTRIES_AHEAD), run.get(i + ENTRIES_AHEAD))
                {
                    self.verdicts.prefetch_entry(h, p.0.len());
                }
                if let (Some(&h), Some(p)) =
                    (hashes.get(i + SERIES_AHEAD), run.get(i + SERIES_AHEAD))
                {
                    self.prefetch_series(h, p.0);
                }
                found(self.feed_hashed(name, h, (timestamp, value), now));
            }
        }
    }

    /// Starts loading the series a known name feeds (nothing for a name not seen yet).
    #[inline]
    fn prefetch_series(&self, hash: u64, name: &[u8]) {
        let Some(verdict) = self.verdicts.get(hash, name) else {
            return;
        };
        self.table.prefetch(ids_of(verdict).1, &self.bound);
    }

    #[inline]
    fn feed_hashed(&mut self, name: &[u8], hash: u64, point: (f64, f64), now: f64) -> Emitted {
        let Self {
            verdicts,
            refs,
            bound,
            table,
            limits,
            ..
        } = self;
        if let Some(verdict) = verdicts.get(hash, name) {
            return table.apply(verdict, (refs, bound), limits, point, now);
        }
        self.resolve(name, hash);
        let Self {
            verdict,
            refs,
            bound,
            table,
            limits,
            ..
        } = self;
        table.apply(verdict, (refs, bound), limits, point, now)
    }

    /// Tests `name` against the rules, into `self.verdict` and the verdict cache.
    #[cold]
    fn resolve(&mut self, name: &[u8], hash: u64) {
        if self.refs.len() >= self.limits.max_cached_names.max(self.limits.max_series) {
            // The outputs named by verdicts since the last reset: bounded like the names.
            self.forget_verdicts();
        }
        let mut flags = 0;
        self.verdict.clear();
        self.verdict.push(0);
        let mut failures = super::rules::Failures::default();
        // Names are UTF-8 (the receivers hand over nothing else); anything else matches no rule.
        if let Ok(text) = std::str::from_utf8(name) {
            let Self {
                rules,
                refs,
                bound,
                ref_ids,
                verdict,
                scratch,
                table,
                ..
            } = self;
            let hasher = &table.hasher;
            failures = rules.for_each_output(text, scratch, |i, output| {
                flags |= MATCHED;
                if output.as_bytes() == name {
                    flags |= IS_OUTPUT;
                }
                let Some(rule) = rules.rules.get(i) else {
                    return;
                };
                let rule_at = i as u32;
                let output_hash = hasher.hash_one(output);
                let hash = ref_hash(output_hash, rule_at);
                // One probe whether the reference is new or not: a new name's outputs are
                // mostly new too.
                let entry = ref_ids.entry(
                    hash,
                    |&id| {
                        refs.get(id as usize)
                            .is_some_and(|r| r.rule == rule_at && *r.output == *output)
                    },
                    |&id| {
                        refs.get(id as usize)
                            .map_or(0, |r| ref_hash(r.hash, r.rule))
                    },
                );
                let id = match entry {
                    Entry::Occupied(e) => *e.get(),
                    Entry::Vacant(e) => {
                        let id = refs.len() as u32;
                        refs.push(SeriesRef {
                            rule: rule_at,
                            hash: output_hash,
                            output: Arc::from(output),
                            method: rule.method,
                            frequency: rule.frequency,
                        });
                        bound.push(None);
                        e.insert(id);
                        id
                    }
                };
                verdict.extend_from_slice(&id.to_le_bytes());
            });
        }
        if failures.skipped.is_some() {
            flags |= SKIPPED;
        }
        if failures.stopped.is_some() {
            flags |= STOPPED;
        }
        if let Some(rule) = failures.stopped.or(failures.skipped) {
            let at = (rule as u32).to_le_bytes();
            self.verdict.splice(1..1, at);
        }
        if let Some(f) = self.verdict.first_mut() {
            *f = flags;
        }
        self.verdicts.insert(hash, name, &self.verdict);
    }

    /// Runs every series timer due by `now` (Unix seconds), handing each aggregate to `emit`
    /// as `(name, interval, value)`.
    pub fn tick(&mut self, now: f64, emit: &mut dyn FnMut(&str, f64, f64)) {
        // The clock is awake: it reads the timers again before it sleeps.
        self.table.clock_at = i64::MIN;
        self.table.tick(now, self.limits.max_intervals, emit);
    }

    /// When the next timer is due (Unix seconds), if any series exists.
    pub fn next_due(&mut self) -> Option<f64> {
        self.table.next_due()
    }

    /// The clock goes to sleep at `now` (Unix seconds) for at most `longest` seconds: returns
    /// when it is to wake (the next timer, or `now + longest`), and from then until
    /// [`take_clock_wake`](Self::take_clock_wake) notes every timer queued before that time.
    pub(crate) fn plan_clock(&mut self, now: f64, longest: f64) -> f64 {
        let latest = now + longest;
        let at = self.table.next_due().map_or(latest, |due| due.min(latest));
        self.table.clock_at = micros(at);
        self.table.wake_clock = false;
        at
    }

    /// True (once) when a timer was queued before the sleeping clock's wake-up time since it
    /// went to sleep: the clock is then to be woken.
    pub(crate) fn take_clock_wake(&mut self) -> bool {
        let wake = self.table.wake_clock;
        if wake {
            self.table.wake_clock = false;
            self.table.clock_at = i64::MIN;
        }
        wake
    }
}

/// True when `slot` holds the live series `name`.
fn series_named(slots: &[Slot], slot: u32, name: &str) -> bool {
    slots
        .get(slot as usize)
        .and_then(|s| s.series.as_ref())
        .is_some_and(|s| *s.name == *name)
}

impl Table {
    /// An empty table with room for `series` series and `values` percentile values.
    fn with_capacity(series: usize, values: usize) -> Self {
        Self {
            index: HashTable::with_capacity(series),
            slots: Vec::with_capacity(series),
            values: ValueStore::with_capacity(values),
            clock_at: i64::MIN,
            ..Self::default()
        }
    }

    /// Adds a datapoint to every output series of a `verdict` (see `Aggregator::verdicts`).
    #[inline]
    fn apply(
        &mut self,
        verdict: &[u8],
        (refs, bound): (&[SeriesRef], &mut [Bound]),
        limits: &AggregatorLimits,
        point: (f64, f64),
        now: f64,
    ) -> Emitted {
        let flags = verdict.first().copied().unwrap_or(0);
        // The series' slots are prefetched by `feed_all`, a few datapoints ahead.
        let (failed_rule, ids) = ids_of(verdict);
        let mut sample = Sample::new(point);
        for id in ids.chunks_exact(4) {
            let id = u32::from_le_bytes([id[0], id[1], id[2], id[3]]) as usize;
            if let (Some(r), Some(b)) = (refs.get(id), bound.get_mut(id)) {
                self.add(r, b, limits, &mut sample, now);
            }
        }
        Emitted {
            matched: flags & MATCHED != 0,
            is_output: flags & IS_OUTPUT != 0,
            skipped: flags & SKIPPED != 0,
            stopped: flags & STOPPED != 0,
            failed_rule,
        }
    }

    /// Starts loading the slots of the bound series among `ids` (a verdict's output
    /// references), without waiting for any of them.
    #[inline]
    fn prefetch(&self, ids: &[u8], bound: &[Bound]) {
        for id in ids.chunks_exact(4) {
            let id = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
            if let Some(Some((slot, _))) = bound.get(id as usize)
                && let Some(s) = self.slots.get(*slot as usize)
            {
                prefetch_all(s);
            }
        }
    }

    /// Adds a datapoint to the series `r` names (found by its remembered slot, else by name;
    /// created under `r`'s rule when missing).
    #[inline]
    fn add(
        &mut self,
        r: &SeriesRef,
        bound: &mut Bound,
        limits: &AggregatorLimits,
        sample: &mut Sample,
        now: f64,
    ) {
        let slot = match *bound {
            Some((slot, generation)) if self.is_live(slot, generation) => slot,
            _ => match self.find_or_create(r, bound, limits, now) {
                Some(slot) => slot,
                None => return,
            },
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
        let interval = sample.interval(series.frequency);
        let value = sample.value;
        let buffer = match series.intervals.iter().position(|b| b.start == interval) {
            Some(i) => &mut series.intervals[i],
            None => {
                if self.stats.held_intervals as usize >= limits.max_intervals_held {
                    self.stats.dropped_intervals_limit += 1;
                    return;
                }
                self.stats.held_intervals += 1;
                series.intervals.push(Interval {
                    start: interval,
                    acc: Accumulator::default(),
                    active: true,
                });
                let last = series.intervals.len() - 1;
                &mut series.intervals[last]
            }
        };
        buffer.acc.add(value);
        if keep {
            self.values.push(&mut buffer.acc.values, value);
        }
        buffer.active = true;
        if series.parked {
            series.parked = false;
            // The timer's next tick in its phase after `now` (it kept its phase while parked).
            let period = series.period;
            let mut next = series.next_due;
            let back = ((next - now) / period).floor();
            if back > 1.0 {
                next -= (back - 1.0) * period;
            }
            while next - period > now {
                next -= period;
            }
            while next <= now {
                next += period;
            }
            series.next_due = next;
            let generation = self.slots.get(slot as usize).map_or(0, |s| s.generation);
            self.queue_timer(micros(next), slot, generation);
        }
        self.stats.buffered += 1;
        self.stats.aggregated += 1;
        if keep {
            self.stats.held_values += 1;
        }
    }

    /// The series `r` names, by name, or a new one under `r`'s rule; binds `r` to its slot.
    /// `None` (counted) when a bound refuses a new series.
    #[cold]
    fn find_or_create(
        &mut self,
        r: &SeriesRef,
        bound: &mut Bound,
        limits: &AggregatorLimits,
        now: f64,
    ) -> Option<u32> {
        let Self {
            index,
            slots,
            hasher,
            free,
            stats,
            ..
        } = self;
        let held = index.len();
        let rehash = |&s: &u32| {
            slots
                .get(s as usize)
                .and_then(|s| s.series.as_ref())
                .map_or(0, |s| hasher.hash_one(&*s.name))
        };
        // One probe of the index whether the series exists or not: a new output reference
        // mostly names a new series.
        let entry = index.entry(r.hash, |&s| series_named(slots, s, &r.output), rehash);
        let slot = match entry {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                if held >= limits.max_series {
                    stats.dropped_series_limit += 1;
                    return None;
                }
                // A new series needs an interval: refused here, not left empty.
                if stats.held_intervals as usize >= limits.max_intervals_held {
                    stats.dropped_intervals_limit += 1;
                    return None;
                }
                let slot = match free.pop() {
                    Some(s) => s,
                    None => {
                        slots.push(Slot::default());
                        (slots.len() - 1) as u32
                    }
                };
                e.insert(slot);
                let period = match limits.write_back {
                    Some(w) => w.min(r.frequency as f64),
                    None => r.frequency as f64,
                };
                self.fill(
                    slot,
                    Series {
                        name: r.output.clone(),
                        method: r.method,
                        frequency: r.frequency,
                        period,
                        next_due: now + period,
                        parked: false,
                        parked_at: None,
                        intervals: Intervals::new(),
                    },
                );
                slot
            }
        };
        let generation = self.slots.get(slot as usize)?.generation;
        *bound = Some((slot, generation));
        Some(slot)
    }

    /// The slot of the live series `name` (`hash` is its hash by `self.hasher`).
    fn slot_of(&self, name: &str, hash: u64) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash, |&s| series_named(slots, s, name))
            .copied()
    }

    /// Adds a series (new, or restored) and starts its timer; returns its slot.
    pub(super) fn insert(&mut self, series: Series) -> u32 {
        let hash = self.hasher.hash_one(&*series.name);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let Self {
            index,
            slots,
            hasher,
            ..
        } = self;
        let rehash = |&s: &u32| {
            slots
                .get(s as usize)
                .and_then(|s| s.series.as_ref())
                .map_or(0, |s| hasher.hash_one(&*s.name))
        };
        // A restored series whose name is held already takes the name over, as a map
        // insertion would.
        match index.entry(hash, |&s| series_named(slots, s, &series.name), rehash) {
            Entry::Occupied(mut e) => *e.get_mut() = slot,
            Entry::Vacant(e) => {
                e.insert(slot);
            }
        }
        self.fill(slot, series);
        slot
    }

    /// Puts `series` in `slot` (already in the index), counts what it holds and starts its
    /// timer.
    fn fill(&mut self, slot: u32, series: Series) {
        let due = micros(series.next_due);
        self.stats.held_intervals += series.intervals.len() as u64;
        for b in &series.intervals {
            self.stats.buffered += b.acc.count;
            self.stats.held_values += b.acc.values.len() as u64;
        }
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        s.series = Some(series);
        let generation = s.generation;
        self.queue_timer(due, slot, generation);
        self.stats.series = self.index.len() as u64;
    }

    /// Queues a series' tick from outside the clock (a new series, or one a datapoint wakes),
    /// noting when the sleeping clock would wake too late for it.
    fn queue_timer(&mut self, due: i64, slot: u32, generation: u32) {
        if due < self.clock_at {
            self.wake_clock = true;
        }
        self.timers.push(Reverse((due, slot, generation)));
    }

    fn next_due(&mut self) -> Option<f64> {
        while let Some(&Reverse((due, slot, generation))) = self.timers.peek() {
            if self.is_due_entry(due, slot, generation) {
                return Some(due as f64 / 1e6);
            }
            self.timers.pop();
        }
        None
    }

    /// True when a timer entry is the series' tick: it lives, and the entry is its next tick
    /// (a parked tick left behind by a datapoint that woke the series is not).
    fn is_due_entry(&self, due: i64, slot: u32, generation: u32) -> bool {
        self.slots
            .get(slot as usize)
            .filter(|s| s.generation == generation)
            .and_then(|s| s.series.as_ref())
            .is_some_and(|s| micros(s.next_due) == due)
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
            if !self.is_due_entry(due, slot, generation) {
                continue;
            }
            if let Some(next) = self.compute(slot, now, max_intervals, emit) {
                self.timers.push(Reverse((micros(next), slot, generation)));
            }
        }
    }

    /// carbon's `MetricBuffer.compute_value` for the series in `slot`; returns the tick to
    /// queue for it, `None` when it was deleted or its tick is queued already.
    ///
    /// After it no interval is active, and until a datapoint comes carbon's ticks only free
    /// intervals as they age out: the series is parked until the first tick of its phase at
    /// which its oldest interval does (one queued tick instead of one per write-back period,
    /// which is what an idle aggregator with many open series would spend its time on).
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
                self.scratch.clear();
                if series.method.keeps_values() {
                    self.values.extend_into(&b.acc.values, &mut self.scratch);
                }
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
                self.values.release(&mut freed.acc.values);
            } else {
                i += 1;
            }
        }
        if series.intervals.is_empty() {
            let hash = self.hasher.hash_one(&*series.name);
            s.series = None;
            s.generation = s.generation.wrapping_add(1);
            if let Ok(e) = self.index.find_entry(hash, |&x| x == slot) {
                e.remove();
            }
            self.free.push(slot);
            self.stats.series = self.index.len() as u64;
            return None;
        }
        if series.parked_at == Some(micros(series.next_due)) {
            // This was the parked tick: it is no longer queued.
            series.parked_at = None;
        }
        // LoopingCall keeps its phase and skips the ticks it missed.
        let mut next = series.next_due + series.period;
        while next <= now {
            next += series.period;
        }
        // The first tick at which the oldest interval is freed: `current` past its start by
        // more than `max_intervals` frequencies.
        let oldest = series
            .intervals
            .iter()
            .map(|b| b.start)
            .fold(f64::INFINITY, f64::min);
        if !oldest.is_finite() {
            // No age to wait for (a timestamp no interval arithmetic holds): tick as carbon.
            series.next_due = next;
            return Some(next);
        }
        let frees = |t: f64| {
            let t = t.floor() as i64;
            ((t - t.rem_euclid(series.frequency) - max_intervals * series.frequency) as f64)
                > oldest
        };
        let target = oldest + ((max_intervals + 1) * series.frequency) as f64;
        let skip = ((target - next) / series.period).ceil();
        if skip > 1.0 {
            next += (skip - 1.0) * series.period;
        }
        while !frees(next) {
            next += series.period;
        }
        series.next_due = next;
        series.parked = true;
        let due = micros(next);
        if series.parked_at == Some(due) {
            return None;
        }
        series.parked_at = Some(due);
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
        // Nothing active: parked until interval 120 ages out (current 540 - 5 × 60 > 120 …
        // at the first tick of the phase from 480 on).
        assert_eq!(a.next_due(), Some(480.0));
        assert!(tick(&mut a, 200.0).is_empty());
        // A datapoint wakes it at the next tick of its phase.
        a.feed(b"i.z", 180.0, 3.0, 201.0);
        assert_eq!(a.next_due(), Some(205.0));
        assert_eq!(tick(&mut a, 205.0), vec![("o".into(), 180.0, 3.0)]);
        assert_eq!(a.next_due(), Some(480.0));
        // The parked tick frees interval 120 and keeps 180 (until 540).
        assert!(tick(&mut a, 480.0).is_empty());
        assert_eq!(a.stats().held_intervals, 1);
        assert_eq!(a.next_due(), Some(540.0));
        assert!(tick(&mut a, 540.0).is_empty());
        assert_eq!(a.stats().series, 0);
        assert_eq!(a.next_due(), None);
    }

    /// The clock sleeps until the next timer; a feed that queues an earlier one (a series a
    /// datapoint wakes) says so once, one that queues a later one (a new series) does not.
    #[test]
    fn a_timer_queued_before_the_sleeping_clock_wakes_it() {
        let mut a = aggregator("o (60) = avg i.*\n", Some(5.0));
        assert_eq!(a.plan_clock(100.0, 1.0), 101.0);
        a.feed(b"i.x", 120.0, 1.0, 100.0);
        assert!(!a.take_clock_wake(), "a new series is due a period later");
        assert_eq!(a.plan_clock(100.0, 10.0), 105.0);
        assert_eq!(tick(&mut a, 105.0), vec![("o".into(), 120.0, 1.0)]);
        // Parked until 480: the clock sleeps its longest.
        assert_eq!(a.plan_clock(200.0, 10.0), 210.0);
        // Woken by a datapoint, the series is due at 205, before the clock wakes by itself.
        a.feed(b"i.z", 180.0, 3.0, 201.0);
        assert!(a.take_clock_wake());
        assert!(!a.take_clock_wake(), "once");
        assert_eq!(a.plan_clock(201.0, 10.0), 205.0);
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

    /// carbon's `process`: the rules before a raising template take the datapoint, the ones
    /// after it do not; a `TypeError` only skips its own rule.
    #[test]
    fn a_raising_template_stops_the_datapoint_where_carbon_does() {
        let mut a = aggregator(
            "before.<x> (10) = sum i.<x>\n\
             typed.%d (10) = sum i.<x>\n\
             keyed.<nope> (10) = sum i.<x>\n\
             after.<x> (10) = sum i.<x>\n\
             other.<x> (10) = sum j.<x>\n",
            None,
        );
        let e = a.feed(b"i.a", 100.0, 2.0, 100.0);
        assert!(e.matched && e.skipped && e.stopped && !e.is_output);
        assert_eq!(e.failed_rule, 2);
        // Again from the verdict cache: the same.
        assert_eq!(a.feed(b"i.a", 101.0, 3.0, 100.0), e);
        let e = a.feed(b"j.a", 100.0, 1.0, 100.0);
        assert!(e.matched && !e.skipped && !e.stopped);
        let mut out = tick(&mut a, 110.0);
        out.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            out,
            vec![
                ("before.a".into(), 100.0, 5.0),
                ("other.a".into(), 100.0, 1.0)
            ]
        );
        assert!(!a.has_series("after.a"));
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
