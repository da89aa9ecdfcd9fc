//! carbon-aggregator: aggregation rules, rewrite rules and the aggregation buffers, exactly as
//! carbon 1.1.10's `carbon-aggregator.py` computes them, bounded and restartable.
//!
//! This is the design document; the code follows it. What carbon does is read from its own
//! source (`lib/carbon/aggregator/{rules,buffers,processor}.py`, `rewrite.py`, `service.py`,
//! `pipeline.py`, `conf.py` of the PyPI package 1.1.10), and what the output depends on is
//! checked against the running daemon by `tests/carbon/differential_aggregator.rs`.
//!
//! # The pipeline
//!
//! carbon-aggregator runs every received datapoint through
//! `['rewrite:pre', 'aggregate', 'rewrite:post', 'relay']` (`service.createAggregatorService`,
//! which also forces `RELAY_METHOD = consistent-hashing`). What the aggregate step *generates*
//! takes `metricGenerated`, whose pipeline holds only `relay`: **aggregates are neither
//! rewritten nor aggregated again**, and neither are the daemon's own self-metrics. So:
//!
//! 1. `[pre]` rewrite rules rename the received name ([`rewrite`]).
//! 2. Every aggregation rule is tried on that name, in file order; each that matches resolves
//!    it to an output name and the datapoint is added to that output's buffer ([`Aggregator`]).
//! 3. With `FORWARD_ALL` (default on), the datapoint is passed on unless its own name is among
//!    the output names just resolved (`metric not in aggregate_metrics`); `[post]` rewrite rules
//!    rename what is passed on, and it is routed and sent like any relayed datapoint. With
//!    `LOG_AGGREGATOR_MISSES` (default on) a name no rule matched is logged (carbon logs every
//!    such datapoint; anthracite once per episode, with the count).
//! 4. Aggregates computed by the series timers (below) are routed and sent as they are.
//!
//! In anthracite the received datapoints of a connection are staged by its ingestor and fed to
//! the shared [`Aggregator`] under one lock per read (never one per datapoint); the passed-on
//! ones then go through the ordinary route → per-destination queue path (spill included), and
//! so do the aggregates, which a timer task hands to an internal ingestor.
//!
//! # Aggregation rules (`aggregation-rules.conf`)
//!
//! One rule per line, `output_template (frequency) = method input_pattern`; blank lines and
//! lines starting with `#` (after stripping) are skipped. The line is split at the first `=`;
//! each side must split on white space into exactly two words; the frequency is
//! `int(word.lstrip('(').rstrip(')'))`. The input pattern is split on `.` and each part becomes
//! a regex part: `pre<<field>>post` → `pre(?P<field>.+?)post` (may span dots),
//! `pre<field>post` → `pre(?P<field>[^.]+?)post`, a lone `*` → `[^.]+`, otherwise every `*` →
//! `[^.]*`, the rest of the part being regex as written. The parts are joined with `\.`, `$` is
//! appended and the regex is used with `re.match` (anchored at the start). The output template
//! has `<` replaced by `%(` and `>` by `)s` and is `%`-formatted with the match's named groups
//! (`crate::router::aggregation` holds this translation and Python's formatter; the aggregated
//! routers use it too).
//!
//! Formatting may raise, per name: a `TypeError` (`%d`, a second keyless `%s`, `%c` of a longer
//! field) is caught by `get_aggregate_metric`, and that rule yields nothing for the name; any
//! other exception (`KeyError` for a field the input lacks, `<<path>>` in the output; a
//! `ValueError` for a trailing `%`) leaves `AggregationProcessor.process`: the rules before it
//! have taken the datapoint, the rules after it and the `FORWARD_ALL` pass-through do not
//! happen (`run_pipeline` logs the traceback). anthracite does the same (the verdict records
//! where the name stopped), counts the datapoints of each kind and logs them once per episode,
//! and warns about each such rule at load.
//!
//! Methods (`values` are an interval's values in arrival order):
//!
//! | method | value |
//! |---|---|
//! | `sum` | Python 3.11 `sum(values)`: `0 + v1 + v2 + …` left to right in arrival order, starting from the integer 0, so `sum([-0.0])` is `0.0` and the result depends on the order of addition |
//! | `avg` | `float(sum(values)) / len(values)` |
//! | `min`, `max` | Python's `min`/`max`: the first value no later value is `<` (`>`) than, so `-0.0` is kept when it comes first |
//! | `count` | `len(values)` |
//! | `p50 p75 p80 p90 p95 p99 p999` | `sorted(values)`; `rank = f * (n - 1)`; with `l = floor(rank)`, `r = ceil(rank)`: `v[l]` when `l == r`, else `v[l] * (r - rank) + v[r] * (rank - l)` |
//!
//! `sum`, `avg`, `min`, `max` and `count` are kept as running values (the fold *is* Python's
//! left-to-right order, so the result is bit-identical); only the percentiles keep the values,
//! copied into a scratch buffer and sorted once per emission.
//!
//! Differences, all on input carbon fails on: a frequency ≤ 0 (carbon divides by it at the
//! first datapoint), an unknown method and a regex that does not compile are errors naming the
//! file and line — at start (exit 2) and for a reload (which is then rejected whole and
//! counted). carbon raises at start for the last two. No output template is an error.
//!
//! # The buffers and their timing
//!
//! Output series are keyed by output name (`BufferManager.get_buffer`). The **first rule that
//! creates a series fixes its frequency and method**: a second rule with the same output but a
//! different method or frequency adds its datapoints to the same buffers. A datapoint lands in
//! interval `ts - ts % frequency` (Python float `%`: the remainder has the sign of the
//! frequency), created on demand; an interval becomes *active* when it receives a value.
//!
//! Each series has its **own timer**, started when the series is created, firing every
//! `min(WRITE_BACK_FREQUENCY, frequency)` seconds (just `frequency` when `WRITE_BACK_FREQUENCY`
//! is unset), first one period after creation (`LoopingCall.start(…, now=False)`, which keeps
//! the period's phase and skips missed ticks). At each tick, with
//! `now = int(time.time())`, `current = now - now % frequency` and
//! `threshold = current - MAX_AGGREGATION_INTERVALS * frequency`, each interval in creation
//! order:
//!
//! 1. if active, its value over **all values it holds so far** is sent as `(interval, value)`
//!    and it becomes inactive (`aggregateDatapointsSent` += 1);
//! 2. if `interval < threshold`, it is freed — so a late datapoint for it starts again from
//!    empty, is sent once at the next tick and freed again; and when the series has no
//!    interval left it is deleted, its timer stopped: the next datapoint sets it up again under
//!    the first rule it matches (with a new timer phase).
//!
//! So an interval is sent again at every tick after it received data, until it ages out of the
//! window of `MAX_AGGREGATION_INTERVALS` (default 5); a consumer keeps the last value sent.
//! There is no other bound in carbon.
//!
//! # Rewrite rules (`rewrite-rules.conf`)
//!
//! Lines after stripping; `#` comments and blank lines skipped; `[section]` (lower-cased)
//! starts a section *and clears its rules* (a repeated header discards the rules before it);
//! `pattern = replacement` splits at the first `=`, both sides stripped; the rule is
//! `re.compile(pattern).sub(replacement, name)`: every non-overlapping match, leftmost first,
//! replaced; an empty match is allowed right after a non-empty one but not at the position of
//! the previous empty match (Python ≥ 3.7); the replacement is a Python template — `\1`…`\99`,
//! `\g<1>`, `\g<name>` (an unmatched group gives the empty string), `\n`-style escapes, octal
//! `\0`/`\NNN`, any other `\` + non-letter kept as both characters. Rules apply in file order,
//! each to the previous one's result. Only `[pre]` and `[post]` are used.
//!
//! carbon logs and skips a rule whose regex does not compile and a line that is neither a
//! header nor a rule; anthracite refuses the file, naming the line, and refuses templates
//! carbon would raise on at every datapoint (a bad escape, a group the pattern lacks).
//!
//! # Reloading
//!
//! carbon re-reads each rules file every 10 s when its mtime grows (and clears every rule when
//! the file vanishes), and re-reading the aggregation rules **clears every buffer** (their
//! open intervals are lost). anthracite checks the files at the same period and applies a new
//! version **whole or not at all**: a file that does not parse is rejected (counted, logged
//! with file and line) and the rules in force stay. Open series are kept across a reload with
//! the frequency and method they were created with, until they age out; new series follow the
//! new rules. A vanished file is, as in carbon, an empty rule set.
//!
//! # Past carbon: bounds and restarts
//!
//! - **Memory bound.** `max_series` bounds the output series, `max_intervals_held` the
//!   intervals over all series (late or scattered timestamps can open many per series between
//!   two ticks) and `max_values` the values held for percentiles (the only values kept; other
//!   methods hold a few words per interval); `max_cached_names` bounds the verdict cache: that
//!   many names in at most 128 bytes of record per name, and the output references they hold,
//!   at most `max(max_cached_names, max_series)`. A datapoint that would create a series, open
//!   an interval or store a value past its bound is not aggregated and counted
//!   (`anthracite_aggregator_dropped_total{reason="series_limit"|"intervals_limit"|
//!   "values_limit"}`, carbon self-metric
//!   `aggregateDatapointsDropped.<reason>`), logged once per episode. It is still passed on
//!   when `FORWARD_ALL` says so.
//! - **Restart.** On an orderly shutdown the series (name, frequency, method, timer phase and
//!   every open interval's accumulator) are written to `aggregator.state` in the spill
//!   directory ([`state`] describes the format), and read back at start: an interval that spans
//!   the restart is emitted with the value it would have had. While series are open the same
//!   state is also written every `checkpoint_interval_secs` as a *checkpoint* (off the lock,
//!   one write in flight, never after the final state). A crash (SIGKILL) therefore loses only
//!   what was aggregated after the last checkpoint; the next start restores the checkpoint,
//!   warns with its time, and counts the unclean restart and the intervals it restored
//!   (`anthracite_aggregator_unclean_restarts_total`,
//!   `anthracite_aggregator_checkpoint_restored_intervals_total`). carbon loses every open
//!   interval at every restart.
//! - **Speed.** The rules are tested against a name once: its verdict (the output series it
//!   feeds, each by slot in the series slab, checked by a generation) is cached per input
//!   name (`verdicts.rs`: bounded, emptied when full). A read's datapoints are fed together
//!   under one lock with their verdict lookups overlapped (each one's memory prefetched a few
//!   datapoints ahead), and the ones passed on are routed as one run, as plain relaying routes
//!   a read. Once a series and its interval exist, a datapoint allocates nothing (percentile
//!   values go into one store of cache-line blocks, `values.rs`, whose freed blocks are
//!   reused) and hashes its name once; the interval a steady sender fills lies in the series
//!   itself, and the slots of the series a known name feeds are prefetched a few datapoints
//!   ahead. Rules with the same input pattern (several methods or outputs of one pattern)
//!   capture a new name once, into reused buffers; its output names are rendered into one
//!   buffer and looked up before anything is allocated, and an output name is held once, by
//!   its references and its series: the two indexes over them hold positions and hash a name
//!   once per lookup or insertion.
//! - **Idle series.** After a tick no interval of the series is active, and until a datapoint
//!   comes carbon's ticks can only free intervals as they age out: the series' timer is parked
//!   until the first tick of its phase at which its oldest interval is freed, and a datapoint
//!   brings it back to the next tick of its phase. What is sent, and when, is carbon's; an
//!   idle aggregator's cost no longer grows with the write-back frequency. The clock that
//!   runs the timers sleeps until the next one is due (at most a second); a batch that
//!   queues a tick earlier than that (a series a datapoint wakes) wakes it.

mod front;
mod method;
pub(crate) mod rewrite;
mod rules;
mod series;
pub(crate) mod state;
mod values;
mod verdicts;

pub(crate) use front::Staged;
pub(crate) use front::{Aggregation, AggregationSettings};
pub(crate) use rewrite::RewriteRules;
pub use rules::AggregationRules;
pub(crate) use rules::RulesError;
pub use series::{Aggregator, AggregatorLimits};

/// Seconds since the epoch as a float, like Python's `time.time()`.
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
