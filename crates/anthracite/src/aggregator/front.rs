//! The aggregator as the relay shares it: the [`Aggregator`] behind one lock taken once per
//! staged batch, the rewrite rules, the settings and the counters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::rewrite::{self, RewriteRules, Scratch};
use super::rules::AggregationRules;
use super::series::{Aggregator, AggregatorLimits, AggregatorStats};
use crate::episode::{Episode, Line};
use crate::figure::{Component, Figure, Reporting};
use crate::metric_names::{carbon as leaf, facade};
use crate::protocol::{Point, RUN};

/// How the aggregator behaves (carbon's `[aggregator]` settings and anthracite's bounds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AggregationSettings {
    /// carbon's `FORWARD_ALL`: pass on every datapoint that is not itself an aggregate output.
    pub forward_all: bool,
    /// carbon's `LOG_AGGREGATOR_MISSES`: log names no rule matched (once per episode).
    pub log_misses: bool,
    /// Bounds and timing.
    pub limits: AggregatorLimits,
}

/// A staged datapoint: `(name start, name length, timestamp, value)` in its stage's name buffer.
type StagedPoint = (u32, u32, f64, f64);

/// Datapoints of one read, staged for the aggregator: names in one buffer, no allocation per
/// datapoint once grown.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    names: Vec<u8>,
    points: Vec<StagedPoint>,
    /// After `[pre]` (used only when there are `[pre]` rules).
    rewritten: Vec<u8>,
    rewritten_points: Vec<StagedPoint>,
    /// The passed-on datapoints after `[post]` (used only when there are `[post]` rules).
    posted: Vec<u8>,
    posted_points: Vec<StagedPoint>,
    forward: Vec<bool>,
    text: String,
    scratch: Scratch,
}

impl Staged {
    /// Stages one checked datapoint.
    #[inline]
    pub(crate) fn push(&mut self, name: &[u8], timestamp: f64, value: f64) {
        let start = self.names.len() as u32;
        self.names.extend_from_slice(name);
        self.points
            .push((start, name.len() as u32, timestamp, value));
    }

    /// True when nothing is staged.
    pub(crate) fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Runs the staged datapoints through `[pre]`, the aggregator and `[post]`, handing those
    /// to pass on to `forward` in runs of up to 128 `(name, timestamp, value)`, in arrival
    /// order; empties the stage.
    pub(crate) fn process(
        &mut self,
        aggregation: &Aggregation,
        forward: &mut dyn FnMut(&[Point<'_>]),
    ) {
        let rules = aggregation.rewrite_rules();
        let Self {
            names,
            points,
            rewritten,
            rewritten_points,
            posted,
            posted_points,
            forward: pass,
            text,
            scratch,
        } = self;
        let (names_in, points_in) = if rules.pre.is_empty() {
            (&*names, &*points)
        } else {
            rename(
                &rules.pre,
                (names, points),
                None,
                (rewritten, rewritten_points),
                text,
                scratch,
            );
            (&*rewritten, &*rewritten_points)
        };
        pass.clear();
        aggregation.feed(names_in, points_in, pass);
        if rules.post.is_empty() {
            runs(names_in, points_in, Some(pass), forward);
        } else {
            rename(
                &rules.post,
                (names_in, points_in),
                Some(pass),
                (posted, posted_points),
                text,
                scratch,
            );
            runs(posted, posted_points, None, forward);
        }
        names.clear();
        points.clear();
    }
}

/// The name of a staged datapoint.
#[inline]
fn name_of<'a>(names: &'a [u8], &(start, len, _, _): &StagedPoint) -> &'a [u8] {
    names
        .get(start as usize..(start + len) as usize)
        .unwrap_or_default()
}

/// Whether datapoint `i` is among those `keep` says (all without `keep`).
#[inline]
fn kept(keep: Option<&[bool]>, i: usize) -> bool {
    keep.is_none_or(|k| k.get(i).copied().unwrap_or(false))
}

/// Renames the datapoints (those `keep` says, or all) by `rules` into `to_names`/`to_points`.
fn rename(
    rules: &[rewrite::RewriteRule],
    (names, points): (&[u8], &[StagedPoint]),
    keep: Option<&[bool]>,
    (to_names, to_points): (&mut Vec<u8>, &mut Vec<StagedPoint>),
    text: &mut String,
    scratch: &mut Scratch,
) {
    to_names.clear();
    to_points.clear();
    for (i, p) in points.iter().enumerate() {
        if !kept(keep, i) {
            continue;
        }
        let name = name_of(names, p);
        let out = to_names.len() as u32;
        // Names are UTF-8 (the receivers hand over nothing else); anything else is kept.
        match std::str::from_utf8(name) {
            Ok(t) if rewrite::apply(rules, t, text, scratch) => {
                to_names.extend_from_slice(text.as_bytes());
            }
            _ => to_names.extend_from_slice(name),
        }
        to_points.push((out, to_names.len() as u32 - out, p.2, p.3));
    }
}

/// Hands the datapoints of `points` (those `keep` says, or all) to `f` in runs of up to
/// [`RUN`], in order.
fn runs(
    names: &[u8],
    points: &[StagedPoint],
    keep: Option<&[bool]>,
    f: &mut dyn FnMut(&[Point<'_>]),
) {
    let mut run: [Point<'_>; RUN] = [(&[], 0.0, 0.0); RUN];
    let mut n = 0;
    for (i, p) in points.iter().enumerate() {
        if !kept(keep, i) {
            continue;
        }
        if let Some(slot) = run.get_mut(n) {
            *slot = (name_of(names, p), p.2, p.3);
            n += 1;
        }
        if n == RUN {
            f(&run);
            n = 0;
        }
    }
    if n > 0 {
        f(&run[..n]);
    }
}

/// Counters kept beside the aggregator (the rest are its own [`AggregatorStats`]).
#[derive(Debug, Default)]
struct Books {
    received: AtomicU64,
    misses: AtomicU64,
    template_skipped: AtomicU64,
    template_stopped: AtomicU64,
    reloads_applied: AtomicU64,
    reloads_rejected: AtomicU64,
    checkpoints_written: AtomicU64,
    checkpoints_failed: AtomicU64,
    unclean_restarts: AtomicU64,
    checkpoint_restored_intervals: AtomicU64,
}

/// The shared aggregator of a relay. See the `aggregator` module documentation.
#[derive(Debug)]
pub struct Aggregation {
    settings: AggregationSettings,
    core: Mutex<Aggregator>,
    rewrite: Mutex<Arc<RewriteRules>>,
    books: Books,
    misses: Mutex<Episode>,
    drops: Mutex<Episode>,
    template_failures: Mutex<Episode>,
    /// Wakes the aggregator's clock when a feed queues a timer due before the clock would
    /// wake by itself (a new series or a woken one).
    clock: tokio::sync::Notify,
}

impl Aggregation {
    /// An aggregator with these rules and settings and no series.
    pub fn new(
        rules: AggregationRules,
        rewrite: RewriteRules,
        settings: AggregationSettings,
    ) -> Self {
        Self {
            core: Mutex::new(Aggregator::new(Arc::new(rules), settings.limits)),
            rewrite: Mutex::new(Arc::new(rewrite)),
            settings,
            books: Books::default(),
            misses: Mutex::new(Episode::default()),
            drops: Mutex::new(Episode::default()),
            template_failures: Mutex::new(Episode::default()),
            clock: tokio::sync::Notify::new(),
        }
    }

    /// Completes when a feed queued a timer the sleeping clock would run late (at once if
    /// one did since the clock last waited).
    pub(crate) async fn clock_woken(&self) {
        self.clock.notified().await;
    }

    /// The settings.
    pub fn settings(&self) -> AggregationSettings {
        self.settings
    }

    /// The aggregator, locked.
    pub fn lock(&self) -> MutexGuard<'_, Aggregator> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The rewrite rules in force.
    pub fn rewrite_rules(&self) -> Arc<RewriteRules> {
        self.rewrite
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts new aggregation rules in force (a reload that parsed whole).
    pub fn set_rules(&self, rules: AggregationRules) {
        self.lock().set_rules(Arc::new(rules));
        self.books.reloads_applied.fetch_add(1, Relaxed);
    }

    /// Puts new rewrite rules in force (a reload that parsed whole).
    pub fn set_rewrite(&self, rules: RewriteRules) {
        *self.rewrite.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(rules);
        self.books.reloads_applied.fetch_add(1, Relaxed);
    }

    /// Counts a reload refused for a file that did not parse.
    pub fn count_rejected_reload(&self) {
        self.books.reloads_rejected.fetch_add(1, Relaxed);
    }

    /// Counts a checkpoint written (`ok`) or failed.
    pub fn count_checkpoint(&self, ok: bool) {
        let c = if ok {
            &self.books.checkpoints_written
        } else {
            &self.books.checkpoints_failed
        };
        c.fetch_add(1, Relaxed);
    }

    /// Counts a start that restored a checkpoint (the previous run did not write its final
    /// state) and the intervals it restored.
    pub fn count_unclean_restart(&self, intervals: u64) {
        self.books.unclean_restarts.fetch_add(1, Relaxed);
        self.books
            .checkpoint_restored_intervals
            .fetch_add(intervals, Relaxed);
    }

    /// Feeds a staged batch under one lock; `forward[i]` says whether datapoint `i` is passed
    /// on (`FORWARD_ALL`, not an output of its own rules, and not stopped by a raising
    /// template).
    fn feed(&self, names: &[u8], points: &[StagedPoint], forward: &mut Vec<bool>) {
        let now = super::unix_now();
        let mut misses = 0u64;
        let (mut skipped, mut stopped) = (0u64, 0u64);
        let mut failed_rule = None;
        let before;
        let after;
        let wake_clock;
        {
            let mut core = self.lock();
            before = core.stats();
            let forward_all = self.settings.forward_all;
            let points = points.iter().map(|p| (name_of(names, p), p.2, p.3));
            core.feed_all(points, now, &mut |e| {
                if e.stopped {
                    // carbon's exception leaves `process` before the pass-through (and the
                    // miss log, which is part of it).
                    stopped += 1;
                    failed_rule.get_or_insert(e.failed_rule);
                    forward.push(false);
                    return;
                }
                if e.skipped {
                    skipped += 1;
                    failed_rule.get_or_insert(e.failed_rule);
                }
                if !e.matched {
                    misses += 1;
                }
                forward.push(forward_all && !e.is_output);
            });
            after = core.stats();
            wake_clock = core.take_clock_wake();
            if let Some(i) = failed_rule {
                self.log_template_failures(&core, i as usize, skipped, stopped);
            }
        }
        if wake_clock {
            self.clock.notify_one();
        }
        self.books.received.fetch_add(points.len() as u64, Relaxed);
        if skipped > 0 {
            self.books.template_skipped.fetch_add(skipped, Relaxed);
        }
        if stopped > 0 {
            self.books.template_stopped.fetch_add(stopped, Relaxed);
        }
        if misses > 0 {
            self.books.misses.fetch_add(misses, Relaxed);
            // carbon logs a miss only when it passes the datapoint on (FORWARD_ALL).
            if self.settings.log_misses && self.settings.forward_all {
                let line = self
                    .misses
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .occurred(misses, Instant::now());
                if let Some(Line::Started(c) | Line::Ongoing(c)) = line {
                    tracing::info!(
                        datapoints = c.amount,
                        forwarded = self.settings.forward_all,
                        "datapoints matched no aggregation rule"
                    );
                }
            }
        }
        let series = after.dropped_series_limit - before.dropped_series_limit;
        let values = after.dropped_values_limit - before.dropped_values_limit;
        let intervals = after.dropped_intervals_limit - before.dropped_intervals_limit;
        if series + values + intervals > 0 {
            let line = self
                .drops
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .occurred(series + values + intervals, Instant::now());
            if let Some(Line::Started(c) | Line::Ongoing(c)) = line {
                tracing::warn!(
                    datapoints = c.amount,
                    series = after.series,
                    held_values = after.held_values,
                    held_intervals = after.held_intervals,
                    "aggregator at its memory bound: datapoints not aggregated (aggregation.max_series / max_values / max_intervals_held)"
                );
            }
        }
    }

    /// Logs, once per episode, datapoints that met an output template carbon's formatting
    /// raises on (carbon logs each one); `rule` names the first rule of this batch.
    fn log_template_failures(&self, core: &Aggregator, rule: usize, skipped: u64, stopped: u64) {
        let line = self
            .template_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .occurred(skipped + stopped, Instant::now());
        let Some(Line::Started(c) | Line::Ongoing(c)) = line else {
            return;
        };
        let rules = core.rules();
        let Some(r) = rules.rules.get(rule) else {
            return;
        };
        tracing::warn!(
            datapoints = c.amount,
            rule_skipped = skipped,
            datapoint_stopped = stopped,
            line = r.line,
            rule = %r.rule.source,
            "datapoints met an aggregation rule whose output template carbon's formatting raises on (as carbon: a TypeError skips the rule, a KeyError or ValueError stops the datapoint at it)"
        );
    }

    /// The aggregator's counters and sizes.
    pub fn stats(&self) -> AggregatorStats {
        self.lock().stats()
    }
}

impl Reporting for Aggregation {
    fn component(&self) -> Component {
        let s = self.stats();
        let b = &self.books;
        let c = |v: u64| Figure::counter(v);
        Component {
            path: String::new(),
            figures: vec![
                c(s.sent)
                    .series(facade::AGGREGATOR_SENT, vec![])
                    .carbon(leaf::AGGREGATE_DATAPOINTS_SENT),
                Figure::gauge(s.series as f64)
                    .series(facade::AGGREGATOR_SERIES, vec![])
                    .carbon(leaf::ALLOCATED_BUFFERS),
                Figure::gauge(s.buffered as f64)
                    .series(facade::AGGREGATOR_BUFFERED, vec![])
                    .carbon(leaf::BUFFERED_DATAPOINTS),
                c(s.dropped_series_limit)
                    .series(
                        facade::AGGREGATOR_DROPPED,
                        vec![("reason", "series_limit".to_owned())],
                    )
                    .carbon(leaf::AGGREGATE_DROPPED_SERIES_LIMIT),
                c(s.dropped_values_limit)
                    .series(
                        facade::AGGREGATOR_DROPPED,
                        vec![("reason", "values_limit".to_owned())],
                    )
                    .carbon(leaf::AGGREGATE_DROPPED_VALUES_LIMIT),
                c(s.dropped_intervals_limit)
                    .series(
                        facade::AGGREGATOR_DROPPED,
                        vec![("reason", "intervals_limit".to_owned())],
                    )
                    .carbon(leaf::AGGREGATE_DROPPED_INTERVALS_LIMIT),
                c(b.misses.load(Relaxed))
                    .series(facade::AGGREGATOR_MISSES, vec![])
                    .carbon(leaf::AGGREGATOR_MISSES),
                c(b.template_skipped.load(Relaxed))
                    .series(
                        facade::AGGREGATOR_TEMPLATE_FAILURES,
                        vec![("effect", "rule_skipped".to_owned())],
                    )
                    .carbon(leaf::AGGREGATOR_TEMPLATE_RULE_SKIPPED),
                c(b.template_stopped.load(Relaxed))
                    .series(
                        facade::AGGREGATOR_TEMPLATE_FAILURES,
                        vec![("effect", "datapoint_stopped".to_owned())],
                    )
                    .carbon(leaf::AGGREGATOR_TEMPLATE_DATAPOINT_STOPPED),
                c(b.unclean_restarts.load(Relaxed))
                    .series(facade::AGGREGATOR_UNCLEAN_RESTARTS, vec![])
                    .carbon(leaf::AGGREGATOR_UNCLEAN_RESTARTS),
                c(b.checkpoint_restored_intervals.load(Relaxed))
                    .series(facade::AGGREGATOR_CHECKPOINT_RESTORED_INTERVALS, vec![])
                    .carbon(leaf::AGGREGATOR_CHECKPOINT_RESTORED_INTERVALS),
                c(b.checkpoints_written.load(Relaxed))
                    .series(
                        facade::AGGREGATOR_CHECKPOINTS,
                        vec![("result", "written".to_owned())],
                    )
                    .carbon(leaf::AGGREGATOR_CHECKPOINTS_WRITTEN),
                c(b.checkpoints_failed.load(Relaxed))
                    .series(
                        facade::AGGREGATOR_CHECKPOINTS,
                        vec![("result", "failed".to_owned())],
                    )
                    .carbon(leaf::AGGREGATOR_CHECKPOINTS_FAILED),
                c(b.reloads_applied.load(Relaxed)).series(
                    facade::AGGREGATOR_RULE_RELOADS,
                    vec![("result", "applied".to_owned())],
                ),
                c(b.reloads_rejected.load(Relaxed)).series(
                    facade::AGGREGATOR_RULE_RELOADS,
                    vec![("result", "rejected".to_owned())],
                ),
            ],
        }
    }
}
