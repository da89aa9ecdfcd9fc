//! The aggregator's clock: runs the series timers and hands the aggregates to an internal
//! ingestor (so they take the ordinary route → queue path and are neither rewritten nor
//! aggregated again), re-reads changed rule files, checkpoints the open intervals, and writes
//! the final state at shutdown (`crate::aggregator::state` is the design).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::aggregator::state::{Kind, Snapshot, StateError, Summary};
use crate::aggregator::{Aggregation, state, unix_now};
use crate::config::aggregation::{AggregationConfig, read_rewrite, read_rules};
use crate::episode::{Episode, Line};
use crate::ingest::{Ingestor, Pipeline, Source};
use crate::protocol::{Point, RUN};

/// Longest sleep of the clock. It sleeps until the next timer is due, and a feed that queues
/// an earlier one (a new series, or one a datapoint wakes) wakes it; the bound only limits
/// how far a step of the wall clock can put a tick out.
const LONGEST_SLEEP: Duration = Duration::from_secs(1);

/// How often the clock looks for the end of a checkpoint write in flight.
const WRITE_POLL: Duration = Duration::from_millis(50);

/// A tick's aggregates gathered into runs of [`RUN`] and routed a run at a time
/// ([`Ingestor::push_run`]): an output name is new to the route cache at its series' first
/// emission, and a run's misses are routed together (`carbon_ch`'s MD5s sixteen at a time)
/// where one push at a time computes them one by one. The names are copied into a buffer of
/// one run's size, reused from tick to tick.
#[derive(Default)]
struct Aggregates {
    names: Vec<u8>,
    /// Each aggregate's name (start and length in `names`), interval and value.
    points: Vec<(usize, usize, f64, f64)>,
}

impl Aggregates {
    fn push(&mut self, name: &str, interval: f64, value: f64, ingestor: &mut Ingestor) {
        self.points
            .push((self.names.len(), name.len(), interval, value));
        self.names.extend_from_slice(name.as_bytes());
        if self.points.len() >= RUN {
            self.route(ingestor);
        }
    }

    /// Routes the aggregates gathered so far into the ingestor's pending batches.
    fn route(&mut self, ingestor: &mut Ingestor) {
        let mut run: [Point<'_>; RUN] = [(&[], 0.0, 0.0); RUN];
        let mut n = 0;
        for (slot, &(start, len, interval, value)) in run.iter_mut().zip(&self.points) {
            *slot = (
                self.names.get(start..start + len).unwrap_or_default(),
                interval,
                value,
            );
            n += 1;
        }
        ingestor.push_run(&run[..n]);
        self.points.clear();
        self.names.clear();
    }
}

/// Restores the state file, if any (before receivers start), and writes what it restored back
/// as a checkpoint. A checkpoint means the previous run did not stop cleanly: that is logged
/// and counted.
pub(super) fn restore(aggregation: &Aggregation, config: &AggregationConfig) {
    let Some(dir) = &config.state_dir else {
        return;
    };
    let mut core = aggregation.lock();
    let restored = match state::restore(&mut core, dir) {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(e) => {
            error!(error = %e, "aggregator state not restored");
            return;
        }
    };
    let file = restored.file;
    match file.kind {
        Kind::Final => info!(
            series = restored.series,
            intervals = restored.intervals,
            dir = %dir.display(),
            "aggregator state restored"
        ),
        Kind::Checkpoint => {
            aggregation.count_unclean_restart(restored.intervals);
            warn!(
                checkpoint_unix_secs = file.written_at.floor(),
                checkpoint_age_secs = (unix_now() - file.written_at).max(0.0).round(),
                series = restored.series,
                intervals = restored.intervals,
                datapoints = file.datapoints,
                dir = %dir.display(),
                "the previous run ended without writing its aggregator state: restored its last checkpoint; datapoints aggregated after the checkpoint's time (checkpoint_unix_secs) were lost for the open intervals"
            );
        }
    }
    if config.checkpoint_interval.is_some() && restored.series > 0 {
        let snapshot = Snapshot::take(&core, Kind::Checkpoint, unix_now());
        drop(core);
        aggregation.count_checkpoint(checkpoint_written(snapshot.write(dir)));
    }
}

fn checkpoint_written(result: Result<Summary, StateError>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => {
            error!(error = %e, "aggregator checkpoint not written: a crash now loses the open intervals");
            false
        }
    }
}

/// The periodic checkpoint: at most one write in flight, off the aggregator's lock.
struct Checkpoints {
    dir: PathBuf,
    every: Duration,
    next: tokio::time::Instant,
    /// A checkpoint of this run is on disk (so it must go when no series is left).
    on_disk: bool,
    writing: Option<tokio::task::JoinHandle<Result<Summary, StateError>>>,
    failures: Episode,
    /// What the aggregator had done when the last checkpoint was taken: with nothing
    /// aggregated, sent or freed since, the file on disk is still the state.
    taken: Option<(u64, u64, u64, u64)>,
}

impl Checkpoints {
    fn new(config: &AggregationConfig) -> Option<Self> {
        let dir = config.state_dir.clone()?;
        let every = config.checkpoint_interval?;
        Some(Self {
            on_disk: state::path_in(&dir).exists(),
            dir,
            every,
            next: tokio::time::Instant::now() + every,
            writing: None,
            failures: Episode::default(),
            taken: None,
        })
    }

    /// When the clock is to look at the checkpoints next: when one is due, or soon while one
    /// is being written (to collect it).
    fn wake_at(&self) -> tokio::time::Instant {
        if self.writing.is_some() {
            tokio::time::Instant::now() + WRITE_POLL
        } else {
            self.next
        }
    }

    /// Called at every tick of the clock: collects a finished write, and starts the next one
    /// when due (skipped while the previous one is still writing).
    async fn tick(&mut self, aggregation: &Aggregation) {
        if self.writing.as_ref().is_some_and(|w| w.is_finished())
            && let Some(w) = self.writing.take()
        {
            let done = w.await;
            self.collect(aggregation, done);
        }
        let now = tokio::time::Instant::now();
        if now < self.next || self.writing.is_some() {
            return;
        }
        self.next = now + self.every;
        let core = aggregation.lock();
        let stats = core.stats();
        let mark = (
            stats.aggregated,
            stats.sent,
            stats.held_intervals,
            stats.series,
        );
        if stats.series == 0 {
            drop(core);
            if self.on_disk {
                match state::remove(&self.dir) {
                    Ok(()) => self.on_disk = false,
                    Err(e) => error!(error = %e, "stale aggregator checkpoint not removed"),
                }
            }
            return;
        }
        if self.on_disk && self.taken == Some(mark) {
            return;
        }
        self.taken = Some(mark);
        let snapshot = Snapshot::take(&core, Kind::Checkpoint, unix_now());
        drop(core);
        let dir = self.dir.clone();
        self.on_disk = true;
        self.writing = Some(tokio::task::spawn_blocking(move || snapshot.write(&dir)));
    }

    fn collect(
        &mut self,
        aggregation: &Aggregation,
        done: Result<Result<Summary, StateError>, tokio::task::JoinError>,
    ) {
        let ok = match done {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                if let Some(Line::Started(c) | Line::Ongoing(c)) =
                    self.failures.occurred(1, Instant::now())
                {
                    error!(error = %e, failures = c.amount, "aggregator checkpoint not written: a crash now loses what was aggregated since the last one");
                }
                self.taken = None;
                false
            }
            Err(_) => {
                self.taken = None;
                false
            }
        };
        aggregation.count_checkpoint(ok);
    }

    /// Waits for the write in flight, so the final state is written after it.
    async fn finish(&mut self, aggregation: &Aggregation) {
        if let Some(w) = self.writing.take() {
            let done = w.await;
            self.collect(aggregation, done);
        }
    }
}

/// A rule file and the modification time of the version in force.
struct Watched {
    path: PathBuf,
    seen: Option<SystemTime>,
}

impl Watched {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            seen: mtime(path),
        }
    }

    /// True when the file changed (or appeared, or vanished) since it was last seen.
    fn changed(&mut self) -> bool {
        let now = mtime(&self.path);
        if now == self.seen {
            return false;
        }
        self.seen = now;
        true
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Runs until `stop`, then writes the state file (when configured).
pub(super) async fn run(
    aggregation: Arc<Aggregation>,
    config: AggregationConfig,
    pipeline: Pipeline,
    stop: CancellationToken,
) {
    let mut ingestor = pipeline.ingestor(Source::Internal);
    let mut rules = config.rules_file.as_deref().map(Watched::new);
    let mut rewrite = config.rewrite_file.as_deref().map(Watched::new);
    let mut next_check = tokio::time::Instant::now() + config.reload_interval;
    let mut checkpoints = Checkpoints::new(&config);
    let mut aggregates = Aggregates::default();
    loop {
        let wake_at = aggregation
            .lock()
            .plan_clock(unix_now(), LONGEST_SLEEP.as_secs_f64());
        let mut deadline = tokio::time::Instant::now() + until(wake_at, unix_now());
        deadline = deadline.min(next_check);
        if let Some(c) = &checkpoints {
            deadline = deadline.min(c.wake_at());
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep_until(deadline) => {}
            _ = aggregation.clock_woken() => {}
        }
        {
            let mut core = aggregation.lock();
            core.tick(unix_now(), &mut |name, interval, value| {
                aggregates.push(name, interval, value, &mut ingestor);
            });
        }
        aggregates.route(&mut ingestor);
        if ingestor.pending_datapoints() > 0 {
            ingestor.flush().await;
        }
        if tokio::time::Instant::now() >= next_check {
            next_check = tokio::time::Instant::now() + config.reload_interval;
            reload(&aggregation, rules.as_mut(), rewrite.as_mut());
        }
        if let Some(c) = &mut checkpoints {
            c.tick(&aggregation).await;
        }
    }
    if let Some(c) = &mut checkpoints {
        c.finish(&aggregation).await;
    }
    ingestor.flush().await;
    if let Some(dir) = &config.state_dir {
        match state::save(&aggregation.lock(), dir) {
            Ok(n) => info!(series = n, dir = %dir.display(), "aggregator state written"),
            Err(e) => error!(error = %e, "aggregator state not written: open intervals are lost"),
        }
    } else {
        let s = aggregation.stats();
        if s.buffered > 0 {
            warn!(
                series = s.series,
                datapoints = s.buffered,
                "open aggregation intervals lost at shutdown (set aggregation.state_dir or destinations.spill.dir to keep them)"
            );
        }
    }
}

/// The time from `now` to `at` (Unix seconds), at most [`LONGEST_SLEEP`]; none when `at` has
/// passed (or is not a number).
fn until(at: f64, now: f64) -> Duration {
    let secs = at - now;
    if secs > 0.0 {
        Duration::from_secs_f64(secs.min(LONGEST_SLEEP.as_secs_f64()))
    } else {
        Duration::ZERO
    }
}

/// Re-reads the rule files that changed; a file that does not parse is refused whole.
fn reload(aggregation: &Aggregation, rules: Option<&mut Watched>, rewrite: Option<&mut Watched>) {
    if let Some(w) = rules
        && w.changed()
    {
        // carbon: a vanished rules file is an empty rule set.
        let read = if w.path.exists() {
            read_rules(&w.path)
        } else {
            Ok(Default::default())
        };
        match read {
            Ok(r) => {
                info!(file = %w.path.display(), rules = r.len(), "aggregation rules reloaded");
                for line in crate::config::aggregation::rule_warnings(&r, Some(&w.path), "") {
                    warn!("{line}");
                }
                aggregation.set_rules(r);
            }
            Err(e) => {
                aggregation.count_rejected_reload();
                error!(error = %e, "aggregation rules not reloaded: the rules in force stay");
            }
        }
    }
    if let Some(w) = rewrite
        && w.changed()
    {
        match read_rewrite(&w.path) {
            Ok(r) => {
                info!(file = %w.path.display(), "rewrite rules reloaded");
                aggregation.set_rewrite(r);
            }
            Err(e) => {
                aggregation.count_rejected_reload();
                error!(error = %e, "rewrite rules not reloaded: the rules in force stay");
            }
        }
    }
}
