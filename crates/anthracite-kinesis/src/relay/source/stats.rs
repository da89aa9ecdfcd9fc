//! Counters of one Kinesis source, updated once per GetRecords batch and mirrored to the
//! `metrics` facade (names in [`crate::metric_names`]).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use metrics::{Counter, Gauge, counter, gauge};

use crate::metric_names::{Named, carbon as leaf, facade as names};
use anthracite::episode::{Episode, Line};
use anthracite::figure::{Component, Figure, Fold, Reporting, path_component};

/// Why this worker lost a shard lease (the `reason` label of `leases_lost`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseLoss {
    /// A renewal or checkpoint failed its condition: another worker took the lease.
    Taken,
    /// No renewal succeeded within one lease duration by this worker's clock (the process
    /// was paused, or the lease table was unreachable): found by the renewer, or first by the
    /// shard's reader before a fetch or a delivery.
    Expired,
}

impl LeaseLoss {
    const ALL: [LeaseLoss; 2] = [LeaseLoss::Taken, LeaseLoss::Expired];

    /// The `reason` label.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            LeaseLoss::Taken => "taken",
            LeaseLoss::Expired => "expired",
        }
    }
}

/// A shard's life, in the order the coordinator saw it (for operators and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardEvent {
    /// A reader started on the shard.
    Started(String),
    /// The shard reached SHARD_END and everything in it was delivered.
    Ended(String),
}

/// Counters of one stream (all shards together).
#[derive(Debug)]
pub struct KinesisStats {
    stream: String,
    polls: AtomicU64,
    records: AtomicU64,
    user_records: AtomicU64,
    lines: AtomicU64,
    bytes: AtomicU64,
    throttles: AtomicU64,
    expired_iterators: AtomicU64,
    kpl_aggregated: AtomicU64,
    kpl_corrupt: AtomicU64,
    decode_errors: AtomicU64,
    errors: AtomicU64,
    paused: AtomicU64,
    checkpoints: AtomicU64,
    active_shards: AtomicU64,
    leases_held: AtomicU64,
    leases_taken: AtomicU64,
    leases_stolen: AtomicU64,
    /// Per [`LeaseLoss`].
    leases_lost: [AtomicU64; 2],
    /// The `leases_lost` series per reason, registered with the worker's label.
    leases_lost_counters: OnceLock<[Counter; 2]>,
    /// Lease losses of this stream, logged once per episode.
    lease_losses: Mutex<Episode>,
    events: Mutex<Vec<ShardEvent>>,
    active_gauge: Gauge,
    checkpoint_age_gauge: Gauge,
    /// The checkpoint age last reported by the coordinator, and when.
    checkpoint_age: Mutex<(Instant, f64)>,
    /// Each shard's counters, in the order its reader started.
    shards: Mutex<Vec<(String, Arc<ShardCounters>)>>,
    /// Lease table mode: this worker's id (the `worker` label of the lease series).
    lease_worker: Mutex<Option<String>>,
}

/// One shard's counters (the per-shard `/metrics` series and the stream's carbon figures).
#[derive(Debug, Default)]
struct ShardCounters {
    behind_ms: AtomicI64,
    records: AtomicU64,
    lines: AtomicU64,
    bytes: AtomicU64,
    throttles: AtomicU64,
    expired: AtomicU64,
    kpl_aggregated: AtomicU64,
    kpl_corrupt: AtomicU64,
}

/// A copy of [`KinesisStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KinesisStatsSnapshot {
    /// Successful GetRecords calls.
    pub polls: u64,
    /// Kinesis records received.
    pub records: u64,
    /// User records after KPL de-aggregation.
    pub user_records: u64,
    /// Non-empty lines handed to the parser.
    pub lines: u64,
    /// Record payload bytes received.
    pub bytes: u64,
    /// ProvisionedThroughputExceeded answers.
    pub throttles: u64,
    /// ExpiredIterator answers.
    pub expired_iterators: u64,
    /// Records that were KPL aggregates.
    pub kpl_aggregated: u64,
    /// Records with the KPL magic that were not valid aggregates (passed through as plain).
    pub kpl_corrupt: u64,
    /// User records whose payload did not decode (dropped).
    pub decode_errors: u64,
    /// Other failed calls (stream missing, network, …).
    pub errors: u64,
    /// Times a reader paused because a destination queue was over its high-water mark.
    pub paused: u64,
    /// Checkpoints committed.
    pub checkpoints: u64,
    /// Shards being read now.
    pub active_shards: u64,
    /// Leases this worker holds now (lease table mode).
    pub leases_held: u64,
    /// Unowned or expired leases this worker took.
    pub leases_taken: u64,
    /// Leases this worker took from a live worker to balance the fleet.
    pub leases_stolen: u64,
    /// Leases this worker lost: a renewal or checkpoint failed its condition, or no renewal
    /// succeeded for one lease duration (each lease counted once, by whoever found it first:
    /// the renewer, a checkpoint, or the shard's reader).
    pub leases_lost: u64,
}

/// What one reader adds after one GetRecords batch.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BatchCounts {
    pub records: u64,
    pub user_records: u64,
    pub lines: u64,
    pub bytes: u64,
    pub kpl_aggregated: u64,
    pub kpl_corrupt: u64,
    pub decode_errors: u64,
}

impl KinesisStats {
    /// Empty counters for `stream`.
    pub fn new(stream: &str) -> Self {
        let label = stream.to_string();
        Self {
            stream: label.clone(),
            polls: AtomicU64::new(0),
            records: AtomicU64::new(0),
            user_records: AtomicU64::new(0),
            lines: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
            expired_iterators: AtomicU64::new(0),
            kpl_aggregated: AtomicU64::new(0),
            kpl_corrupt: AtomicU64::new(0),
            decode_errors: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            paused: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            active_shards: AtomicU64::new(0),
            leases_held: AtomicU64::new(0),
            leases_taken: AtomicU64::new(0),
            leases_stolen: AtomicU64::new(0),
            leases_lost: [AtomicU64::new(0), AtomicU64::new(0)],
            leases_lost_counters: OnceLock::new(),
            lease_losses: Mutex::new(Episode::default()),
            events: Mutex::new(Vec::new()),
            active_gauge: gauge!(names::ACTIVE_SHARDS, "stream" => label.clone()),
            checkpoint_age_gauge: gauge!(names::CHECKPOINT_AGE, "stream" => label),
            checkpoint_age: Mutex::new((Instant::now(), 0.0)),
            shards: Mutex::new(Vec::new()),
            lease_worker: Mutex::new(None),
        }
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> KinesisStatsSnapshot {
        KinesisStatsSnapshot {
            polls: self.polls.load(Relaxed),
            records: self.records.load(Relaxed),
            user_records: self.user_records.load(Relaxed),
            lines: self.lines.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            throttles: self.throttles.load(Relaxed),
            expired_iterators: self.expired_iterators.load(Relaxed),
            kpl_aggregated: self.kpl_aggregated.load(Relaxed),
            kpl_corrupt: self.kpl_corrupt.load(Relaxed),
            decode_errors: self.decode_errors.load(Relaxed),
            errors: self.errors.load(Relaxed),
            paused: self.paused.load(Relaxed),
            checkpoints: self.checkpoints.load(Relaxed),
            active_shards: self.active_shards.load(Relaxed),
            leases_held: self.leases_held.load(Relaxed),
            leases_taken: self.leases_taken.load(Relaxed),
            leases_stolen: self.leases_stolen.load(Relaxed),
            leases_lost: self.leases_lost.iter().map(|n| n.load(Relaxed)).sum(),
        }
    }

    /// Shard starts and ends so far, in order.
    pub fn events(&self) -> Vec<ShardEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    pub(crate) fn event(&self, e: ShardEvent) {
        let delta: i64 = match e {
            ShardEvent::Started(_) => 1,
            ShardEvent::Ended(_) => 0,
        };
        if delta > 0 {
            self.shard_active(true);
        }
        if let Ok(mut v) = self.events.lock() {
            v.push(e);
        }
    }

    pub(crate) fn shard_active(&self, started: bool) {
        let n = if started {
            self.active_shards.fetch_add(1, Relaxed) + 1
        } else {
            self.active_shards.fetch_sub(1, Relaxed).saturating_sub(1)
        };
        self.active_gauge.set(n as f64);
    }

    pub(crate) fn checkpointed(&self) {
        self.checkpoints.fetch_add(1, Relaxed);
    }

    pub(crate) fn checkpoint_age(&self, secs: f64) {
        self.checkpoint_age_gauge.set(secs);
        *self
            .checkpoint_age
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = (Instant::now(), secs);
    }

    /// Seconds since the last committed checkpoint (the coordinator's last report plus the
    /// time since).
    pub fn checkpoint_lag_secs(&self) -> f64 {
        let (at, secs) = *self
            .checkpoint_age
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        secs + at.elapsed().as_secs_f64()
    }

    fn shard_counters(&self, shard: &str) -> Arc<ShardCounters> {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, c)) = shards.iter().find(|(s, _)| s == shard) {
            return c.clone();
        }
        let c = Arc::new(ShardCounters::default());
        shards.push((shard.to_string(), c.clone()));
        c
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Relaxed);
    }

    pub(crate) fn paused(&self) {
        self.paused.fetch_add(1, Relaxed);
    }

    /// Counts `n` leases lost for `why`; returns the line to log for this stream's episode
    /// of losses, if one is due (a pause loses every lease at once: one line, with counts).
    pub(crate) fn lease_lost(&self, why: LeaseLoss, n: u64) -> Option<Line> {
        self.leases_lost[why as usize].fetch_add(n, Relaxed);
        if let Some(c) = self.leases_lost_counters.get() {
            c[why as usize].increment(n);
        }
        self.lease_losses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .occurred(n, Instant::now())
    }
}

/// Logs one line of a stream's lease-loss episode: the first loss with its shard and why,
/// then at most one line per interval with the count since the previous one.
pub(crate) fn log_lease_loss(stream: &str, worker: &str, shard: &str, why: &str, line: Line) {
    match line {
        Line::Started(_) => {
            tracing::warn!(%stream, %worker, %shard, why, "shard lease lost; its reader stops without delivering what it holds (further losses of this episode are counted in leases_lost, logged at most every 10 s)")
        }
        Line::Ongoing(c) => {
            tracing::warn!(%stream, %worker, %shard, why, lost = c.occurrences, seconds = c.over.as_secs(), "shard leases still being lost")
        }
        Line::Ended(_) => {}
    }
}

/// The stream's figures: per shard for `/metrics`, folded per stream for carbon
/// (`kinesis.<stream>.millisBehindLatest` is the largest over its shards, `recordsRead` and
/// `throttles` the sums). A new per-stream figure is one more entry here.
impl Reporting for KinesisStats {
    fn component(&self) -> Component {
        let stream = || vec![("stream", self.stream.clone())];
        let mut figures = vec![
            Figure::gauge(self.checkpoint_lag_secs())
                .named(names::CHECKPOINT_AGE, stream())
                .carbon_folded(leaf::CHECKPOINT_LAG_SECONDS, Fold::Max),
            Figure::gauge(self.active_shards.load(Relaxed) as f64)
                .named(names::ACTIVE_SHARDS, stream()),
        ];
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        for (shard, c) in shards.iter() {
            let labels = || vec![("stream", self.stream.clone()), ("shard", shard.clone())];
            let count =
                |a: &AtomicU64, name| Figure::counter(a.load(Relaxed)).named(name, labels());
            figures.extend([
                Figure::gauge(c.behind_ms.load(Relaxed) as f64)
                    .named(names::MILLIS_BEHIND_LATEST, labels())
                    .carbon_folded(leaf::MILLIS_BEHIND_LATEST, Fold::Max),
                count(&c.records, names::RECORDS).carbon(leaf::RECORDS_READ),
                count(&c.lines, names::LINES),
                count(&c.bytes, names::BYTES),
                count(&c.throttles, names::THROTTLES).carbon(leaf::THROTTLES),
                count(&c.expired, names::EXPIRED_ITERATORS),
                count(&c.kpl_aggregated, names::KPL_AGGREGATED),
                count(&c.kpl_corrupt, names::KPL_CORRUPT),
            ]);
        }
        drop(shards);
        let worker = self
            .lease_worker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(worker) = worker {
            let labels = || vec![("stream", self.stream.clone()), ("worker", worker.clone())];
            let count =
                |a: &AtomicU64, name| Figure::counter(a.load(Relaxed)).named(name, labels());
            figures.extend([
                Figure::gauge(self.leases_held.load(Relaxed) as f64)
                    .named(names::LEASES_HELD, labels())
                    .carbon(leaf::LEASES_HELD),
                count(&self.leases_taken, names::LEASES_TAKEN).carbon(leaf::LEASES_TAKEN),
                count(&self.leases_stolen, names::LEASES_STOLEN).carbon(leaf::LEASES_STOLEN),
            ]);
            for why in LeaseLoss::ALL {
                let mut labels = labels();
                labels.push(("reason", why.as_str().to_string()));
                figures.push(
                    Figure::counter(self.leases_lost[why as usize].load(Relaxed))
                        .named(names::LEASES_LOST, labels)
                        .carbon(leaf::LEASES_LOST),
                );
            }
        }
        Component {
            path: format!("kinesis.{}", path_component(&self.stream)),
            figures,
        }
    }
}

/// Lease counters of one stream and worker (registered once, when the worker starts).
#[derive(Debug)]
pub(crate) struct LeaseMetrics {
    stats: Arc<KinesisStats>,
    held: Gauge,
    taken: Counter,
    stolen: Counter,
}

impl LeaseMetrics {
    pub(crate) fn new(stats: Arc<KinesisStats>, worker: &str) -> Self {
        *stats.lease_worker.lock().unwrap_or_else(|p| p.into_inner()) = Some(worker.to_string());
        let labels = [
            ("stream", stats.stream.clone()),
            ("worker", worker.to_string()),
        ];
        let lost = |why: LeaseLoss| counter!(names::LEASES_LOST, "stream" => stats.stream.clone(), "worker" => worker.to_string(), "reason" => why.as_str());
        let _ = stats
            .leases_lost_counters
            .set([lost(LeaseLoss::Taken), lost(LeaseLoss::Expired)]);
        Self {
            held: gauge!(names::LEASES_HELD, &labels),
            taken: counter!(names::LEASES_TAKEN, &labels),
            stolen: counter!(names::LEASES_STOLEN, &labels),
            stats,
        }
    }

    pub(crate) fn stats(&self) -> &KinesisStats {
        &self.stats
    }

    pub(crate) fn held(&self, n: usize) {
        self.stats.leases_held.store(n as u64, Relaxed);
        self.held.set(n as f64);
    }

    pub(crate) fn taken(&self, stolen: bool) {
        if stolen {
            self.stats.leases_stolen.fetch_add(1, Relaxed);
            self.stolen.increment(1);
        } else {
            self.stats.leases_taken.fetch_add(1, Relaxed);
            self.taken.increment(1);
        }
    }
}

/// One shard's metric handles (registered once per reader, never per record).
pub(crate) struct ShardMetrics {
    counters: Arc<ShardCounters>,
    behind: Gauge,
    records: Counter,
    lines: Counter,
    bytes: Counter,
    throttles: Counter,
    expired: Counter,
    kpl_aggregated: Counter,
    kpl_corrupt: Counter,
}

impl ShardMetrics {
    pub(crate) fn new(stats: &KinesisStats, shard: &str) -> Self {
        let stream = stats.stream();
        let l = |name: &'static str| counter!(name, "stream" => stream.to_string(), "shard" => shard.to_string());
        Self {
            counters: stats.shard_counters(shard),
            behind: gauge!(names::MILLIS_BEHIND_LATEST, "stream" => stream.to_string(), "shard" => shard.to_string()),
            records: l(names::RECORDS),
            lines: l(names::LINES),
            bytes: l(names::BYTES),
            throttles: l(names::THROTTLES),
            expired: l(names::EXPIRED_ITERATORS),
            kpl_aggregated: l(names::KPL_AGGREGATED),
            kpl_corrupt: l(names::KPL_CORRUPT),
        }
    }

    pub(crate) fn batch(&self, stats: &KinesisStats, c: &BatchCounts, behind: Option<i64>) {
        let sc = &self.counters;
        if let Some(ms) = behind {
            self.behind.set(ms as f64);
            sc.behind_ms.store(ms, Relaxed);
        }
        sc.records.fetch_add(c.records, Relaxed);
        sc.lines.fetch_add(c.lines, Relaxed);
        sc.bytes.fetch_add(c.bytes, Relaxed);
        sc.kpl_aggregated.fetch_add(c.kpl_aggregated, Relaxed);
        sc.kpl_corrupt.fetch_add(c.kpl_corrupt, Relaxed);
        stats.polls.fetch_add(1, Relaxed);
        stats.records.fetch_add(c.records, Relaxed);
        stats.user_records.fetch_add(c.user_records, Relaxed);
        stats.lines.fetch_add(c.lines, Relaxed);
        stats.bytes.fetch_add(c.bytes, Relaxed);
        stats.kpl_aggregated.fetch_add(c.kpl_aggregated, Relaxed);
        stats.kpl_corrupt.fetch_add(c.kpl_corrupt, Relaxed);
        stats.decode_errors.fetch_add(c.decode_errors, Relaxed);
        self.records.increment(c.records);
        self.lines.increment(c.lines);
        self.bytes.increment(c.bytes);
        self.kpl_aggregated.increment(c.kpl_aggregated);
        self.kpl_corrupt.increment(c.kpl_corrupt);
    }

    pub(crate) fn throttled(&self, stats: &KinesisStats) {
        stats.throttles.fetch_add(1, Relaxed);
        self.counters.throttles.fetch_add(1, Relaxed);
        self.throttles.increment(1);
    }

    pub(crate) fn expired(&self, stats: &KinesisStats) {
        stats.expired_iterators.fetch_add(1, Relaxed);
        self.counters.expired.fetch_add(1, Relaxed);
        self.expired.increment(1);
    }
}
