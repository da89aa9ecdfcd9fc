//! Counters of one Kafka source (one consumer group membership), updated once per flush, per
//! rebalance and per statistics report, never per message; mirrored to the `metrics` facade
//! (names in [`crate::metric_names::kafka`]).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use metrics::{Counter, Gauge, counter, gauge};

use crate::metric_names::{Named, carbon as leaf, facade as names};
use anthracite::figure::{Component, Figure, Fold, Reporting, path_component};

/// Why a message held no datapoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadMessage {
    /// `format = "lines"`: no line of it parsed as a Graphite datapoint.
    NotGraphite,
    /// `format = "pickle"`: the payload is not a pickle frame carbon would accept.
    BadPickle,
}

impl BadMessage {
    /// Every reason.
    pub(crate) const ALL: [BadMessage; 2] = [BadMessage::NotGraphite, BadMessage::BadPickle];

    /// The `reason` label.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            BadMessage::NotGraphite => "not_graphite",
            BadMessage::BadPickle => "bad_pickle",
        }
    }
}

/// Counters of one source.
#[derive(Debug)]
pub struct KafkaStats {
    group: String,
    messages: AtomicU64,
    lines: AtomicU64,
    bytes: AtomicU64,
    commits: AtomicU64,
    assigned: AtomicU64,
    revoked: AtomicU64,
    errors: AtomicU64,
    bad: [AtomicU64; 2],
    assigned_now: AtomicU64,
    partitions: Mutex<Vec<(String, i32, Arc<PartitionCounters>)>>,
    handles: Handles,
}

#[derive(Debug)]
struct Handles {
    commits: Counter,
    assigned: Counter,
    revoked: Counter,
    errors: Counter,
    bad: [Counter; 2],
    assigned_now: Gauge,
}

/// One partition's counters.
#[derive(Debug)]
pub(crate) struct PartitionCounters {
    /// Assigned to this relay now (a released partition's commit age is not ours to report).
    assigned: AtomicBool,
    lag: AtomicI64,
    /// The group's committed offset as librdkafka's statistics last reported it (-1: not
    /// known).
    stats_committed: AtomicI64,
    messages: AtomicU64,
    lines: AtomicU64,
    bytes: AtomicU64,
    /// When the last commit of this partition succeeded (or it was assigned).
    committed_at: Mutex<Instant>,
    lag_gauge: Gauge,
    commit_age_gauge: Gauge,
    messages_counter: Counter,
    lines_counter: Counter,
    bytes_counter: Counter,
}

/// What one flush adds for one partition.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PartitionCounts {
    pub messages: u64,
    pub lines: u64,
    pub bytes: u64,
}

impl KafkaStats {
    /// Empty counters for consumer group `group`.
    pub(crate) fn new(group: &str) -> Self {
        let g = group.to_string();
        let bad = |r: BadMessage| counter!(names::BAD_MESSAGES, "group" => g.clone(), "reason" => r.as_str());
        Self {
            messages: AtomicU64::new(0),
            lines: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            assigned: AtomicU64::new(0),
            revoked: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            bad: [AtomicU64::new(0), AtomicU64::new(0)],
            assigned_now: AtomicU64::new(0),
            partitions: Mutex::new(Vec::new()),
            handles: Handles {
                commits: counter!(names::COMMITS, "group" => g.clone()),
                assigned: counter!(names::REBALANCES, "group" => g.clone(), "kind" => "assign"),
                revoked: counter!(names::REBALANCES, "group" => g.clone(), "kind" => "revoke"),
                errors: counter!(names::ERRORS, "group" => g.clone()),
                bad: [bad(BadMessage::NotGraphite), bad(BadMessage::BadPickle)],
                assigned_now: gauge!(names::ASSIGNED_PARTITIONS, "group" => g.clone()),
            },
            group: g,
        }
    }

    /// The counters of `topic`/`partition` (created on first use, at assignment).
    pub(crate) fn partition(&self, topic: &str, partition: i32) -> Arc<PartitionCounters> {
        let mut all = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, c)) = all.iter().find(|(t, p, _)| t == topic && *p == partition) {
            return c.clone();
        }
        let labels = [
            ("group", self.group.clone()),
            ("topic", topic.to_string()),
            ("partition", partition.to_string()),
        ];
        let c = Arc::new(PartitionCounters {
            assigned: AtomicBool::new(false),
            lag: AtomicI64::new(0),
            stats_committed: AtomicI64::new(-1),
            messages: AtomicU64::new(0),
            lines: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            committed_at: Mutex::new(Instant::now()),
            lag_gauge: gauge!(names::CONSUMER_LAG, &labels),
            commit_age_gauge: gauge!(names::COMMIT_AGE, &labels),
            messages_counter: counter!(names::MESSAGES, &labels),
            lines_counter: counter!(names::LINES, &labels),
            bytes_counter: counter!(names::BYTES, &labels),
        });
        all.push((topic.to_string(), partition, c.clone()));
        c
    }

    pub(crate) fn rebalanced(&self, assigned: bool, partitions: usize, now_assigned: usize) {
        let n = partitions as u64;
        if assigned {
            self.assigned.fetch_add(n, Relaxed);
            self.handles.assigned.increment(n);
        } else {
            self.revoked.fetch_add(n, Relaxed);
            self.handles.revoked.increment(n);
        }
        self.assigned_now.store(now_assigned as u64, Relaxed);
        self.handles.assigned_now.set(now_assigned as f64);
    }

    pub(crate) fn committed(&self) {
        self.commits.fetch_add(1, Relaxed);
        self.handles.commits.increment(1);
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Relaxed);
        self.handles.errors.increment(1);
    }

    pub(crate) fn bad_messages(&self, reason: BadMessage, n: u64) {
        if n > 0 {
            self.bad[reason as usize].fetch_add(n, Relaxed);
            self.handles.bad[reason as usize].increment(n);
        }
    }

    pub(crate) fn read(&self, p: &PartitionCounters, c: PartitionCounts) {
        p.messages.fetch_add(c.messages, Relaxed);
        p.lines.fetch_add(c.lines, Relaxed);
        p.bytes.fetch_add(c.bytes, Relaxed);
        p.messages_counter.increment(c.messages);
        p.lines_counter.increment(c.lines);
        p.bytes_counter.increment(c.bytes);
        self.messages.fetch_add(c.messages, Relaxed);
        self.lines.fetch_add(c.lines, Relaxed);
        self.bytes.fetch_add(c.bytes, Relaxed);
    }
}

impl PartitionCounters {
    pub(crate) fn lag(&self, lag: i64) {
        self.lag.store(lag, Relaxed);
        self.lag_gauge.set(lag as f64);
    }

    /// The committed offset librdkafka's statistics report (negative: none).
    pub(crate) fn set_stats_committed(&self, offset: i64) {
        self.stats_committed.store(offset, Relaxed);
    }

    /// The committed offset librdkafka's statistics last reported, if any.
    pub(crate) fn stats_committed(&self) -> Option<i64> {
        Some(self.stats_committed.load(Relaxed)).filter(|&o| o >= 0)
    }

    /// The partition was assigned (`true`) or released.
    pub(crate) fn set_assigned(&self, on: bool) {
        self.assigned.store(on, Relaxed);
        if on {
            *self.committed_at.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        } else {
            self.lag(0);
        }
        self.commit_age_gauge.set(0.0);
    }

    pub(crate) fn committed_now(&self) {
        *self.committed_at.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.commit_age_gauge.set(0.0);
    }

    fn commit_age(&self) -> f64 {
        if !self.assigned.load(Relaxed) {
            return 0.0;
        }
        let age = self
            .committed_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
            .as_secs_f64();
        self.commit_age_gauge.set(age);
        age
    }
}

/// The group's figures: per partition for `/metrics`, folded per group for carbon
/// (`kafka.<group>.consumerLag` and `commitAgeSeconds` are the largest over its partitions,
/// `messagesRead` and `linesRead` the sums).
impl Reporting for KafkaStats {
    fn component(&self) -> Component {
        let group = || vec![("group", self.group.clone())];
        let mut figures = vec![
            Figure::counter(self.commits.load(Relaxed)).named(names::COMMITS, group()),
            Figure::counter(self.errors.load(Relaxed)).named(names::ERRORS, group()),
            Figure::gauge(self.assigned_now.load(Relaxed) as f64)
                .named(names::ASSIGNED_PARTITIONS, group()),
        ];
        for (kind, n) in [("assign", &self.assigned), ("revoke", &self.revoked)] {
            let mut labels = group();
            labels.push(("kind", kind.to_string()));
            figures.push(
                Figure::counter(n.load(Relaxed))
                    .named(names::REBALANCES, labels)
                    .carbon(leaf::REBALANCES),
            );
        }
        for r in BadMessage::ALL {
            let mut labels = group();
            labels.push(("reason", r.as_str().to_string()));
            figures.push(
                Figure::counter(self.bad[r as usize].load(Relaxed))
                    .named(names::BAD_MESSAGES, labels)
                    .carbon(format!("{}.{}", leaf::BAD_MESSAGES, r.as_str())),
            );
        }
        let partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, partition, c) in partitions.iter() {
            let labels = || {
                vec![
                    ("group", self.group.clone()),
                    ("topic", topic.clone()),
                    ("partition", partition.to_string()),
                ]
            };
            let count =
                |a: &AtomicU64, name| Figure::counter(a.load(Relaxed)).named(name, labels());
            figures.extend([
                Figure::gauge(c.lag.load(Relaxed) as f64)
                    .named(names::CONSUMER_LAG, labels())
                    .carbon_folded(leaf::CONSUMER_LAG, Fold::Max),
                Figure::gauge(c.commit_age())
                    .named(names::COMMIT_AGE, labels())
                    .carbon_folded(leaf::COMMIT_AGE_SECONDS, Fold::Max),
                count(&c.messages, names::MESSAGES).carbon(leaf::MESSAGES_READ),
                count(&c.lines, names::LINES).carbon(leaf::LINES_READ),
                count(&c.bytes, names::BYTES),
            ]);
        }
        Component {
            path: format!("kafka.{}", path_component(&self.group)),
            figures,
        }
    }
}
