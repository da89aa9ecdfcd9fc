//! Per-relay counters, updated once per batch and mirrored to the `metrics` facade.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use metrics::{Counter, Gauge, counter, gauge};

use super::names::facade;
use crate::protocol::{DropCounts, DropReason};
use crate::queue::{DestinationDropReason, QueueDepth};

/// Where datapoints entered the relay (the `source` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Plaintext over TCP.
    LineTcp,
    /// Plaintext over UDP.
    LineUdp,
    /// Pickle over TCP.
    PickleTcp,
    /// The relay's own self-metrics.
    Internal,
    /// An embedding program or a non-socket source (e.g. Kinesis).
    Embedded,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 5] = [
        Source::LineTcp,
        Source::LineUdp,
        Source::PickleTcp,
        Source::Internal,
        Source::Embedded,
    ];

    /// The `source` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Source::LineTcp => "line_tcp",
            Source::LineUdp => "line_udp",
            Source::PickleTcp => "pickle_tcp",
            Source::Internal => "internal",
            Source::Embedded => "embedded",
        }
    }
}

/// Counters for one source.
#[derive(Debug)]
struct SourceStats {
    received: AtomicU64,
    invalid: [AtomicU64; DropReason::ALL.len()],
    active: AtomicU64,
    received_metric: Counter,
    invalid_metric: Vec<Counter>,
    active_metric: Gauge,
    rejected_metric: Counter,
    idle_metric: Counter,
    rejected: AtomicU64,
}

impl SourceStats {
    fn new(source: Source) -> Self {
        let label = source.as_str();
        Self {
            received: AtomicU64::new(0),
            invalid: std::array::from_fn(|_| AtomicU64::new(0)),
            active: AtomicU64::new(0),
            received_metric: counter!(facade::RECEIVED, "source" => label),
            invalid_metric: DropReason::ALL
                .iter()
                .map(|r| counter!(facade::INVALID, "source" => label, "reason" => r.as_str()))
                .collect(),
            active_metric: gauge!(facade::CONNECTIONS_ACTIVE, "source" => label),
            rejected_metric: counter!(facade::CONNECTIONS_REJECTED, "source" => label),
            idle_metric: counter!(facade::CONNECTIONS_IDLE_CLOSED, "source" => label),
            rejected: AtomicU64::new(0),
        }
    }
}

/// Counters for the whole relay: per source, plus one [`DestinationStats`] per destination.
#[derive(Debug)]
pub struct RelayStats {
    sources: Vec<SourceStats>,
    destinations: Vec<Arc<DestinationStats>>,
}

impl RelayStats {
    /// Books for a relay with these destination names (`host:port:instance`).
    pub fn new(destination_names: &[String]) -> Self {
        Self {
            sources: Source::ALL.iter().map(|&s| SourceStats::new(s)).collect(),
            destinations: destination_names
                .iter()
                .map(|n| Arc::new(DestinationStats::new(n.clone())))
                .collect(),
        }
    }

    fn source(&self, source: Source) -> &SourceStats {
        &self.sources[source as usize]
    }

    /// Adds one batch worth of parse results.
    pub fn record_parsed(&self, source: Source, received: u64, drops: &DropCounts) {
        let s = self.source(source);
        if received > 0 {
            s.received.fetch_add(received, Relaxed);
            s.received_metric.increment(received);
        }
        if !drops.is_empty() {
            for reason in DropReason::ALL {
                let n = drops.get(reason);
                if n > 0 {
                    s.invalid[reason.index()].fetch_add(n, Relaxed);
                    s.invalid_metric[reason.index()].increment(n);
                }
            }
        }
    }

    /// A client connection opened (`+1`) or closed (`-1`).
    pub fn connection_delta(&self, source: Source, opened: bool) {
        let s = self.source(source);
        if opened {
            s.active.fetch_add(1, Relaxed);
            s.active_metric.increment(1.0);
        } else {
            s.active.fetch_sub(1, Relaxed);
            s.active_metric.decrement(1.0);
        }
    }

    /// A connection was refused at the limit.
    pub fn connection_rejected(&self, source: Source) {
        let s = self.source(source);
        s.rejected.fetch_add(1, Relaxed);
        s.rejected_metric.increment(1);
    }

    /// A connection was closed for idleness.
    pub fn connection_idle_closed(&self, source: Source) {
        self.source(source).idle_metric.increment(1);
    }

    /// The destinations' books, indexed like the router's destinations.
    pub fn destinations(&self) -> &[Arc<DestinationStats>] {
        &self.destinations
    }

    /// A consistent-enough copy of every counter (each counter read once).
    pub fn snapshot(&self) -> StatsSnapshot {
        let mut invalid = DropCounts::default();
        let mut received_by_source = Vec::new();
        let mut received = 0;
        let mut active_connections = 0;
        let mut rejected_connections = 0;
        for (i, s) in self.sources.iter().enumerate() {
            let r = s.received.load(Relaxed);
            received += r;
            received_by_source.push((Source::ALL[i], r));
            active_connections += s.active.load(Relaxed);
            rejected_connections += s.rejected.load(Relaxed);
            for reason in DropReason::ALL {
                invalid.0[reason.index()] += s.invalid[reason.index()].load(Relaxed);
            }
        }
        StatsSnapshot {
            received,
            received_by_source,
            invalid,
            active_connections,
            rejected_connections,
            destinations: self.destinations.iter().map(|d| d.snapshot()).collect(),
        }
    }
}

/// Counters for one destination.
#[derive(Debug)]
pub struct DestinationStats {
    name: String,
    routed: AtomicU64,
    sent: AtomicU64,
    messages: AtomicU64,
    dropped: [AtomicU64; DestinationDropReason::ALL.len()],
    connected: AtomicU64,
    depth: QueueDepth,
    routed_metric: Counter,
    sent_metric: Counter,
    messages_metric: Counter,
    dropped_metric: Vec<Counter>,
    connected_metric: Gauge,
    connect_failures_metric: Counter,
    queue_datapoints_metric: Gauge,
    queue_bytes_metric: Gauge,
}

impl DestinationStats {
    fn new(name: String) -> Self {
        let l = name.clone();
        Self {
            routed: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            dropped: std::array::from_fn(|_| AtomicU64::new(0)),
            connected: AtomicU64::new(0),
            depth: QueueDepth::default(),
            routed_metric: counter!(facade::ROUTED, "destination" => l.clone()),
            sent_metric: counter!(facade::SENT, "destination" => l.clone()),
            messages_metric: counter!(facade::BATCHES_SENT, "destination" => l.clone()),
            dropped_metric: DestinationDropReason::ALL
                .iter()
                .map(|r| {
                    counter!(facade::DROPPED, "destination" => l.clone(), "reason" => r.as_str())
                })
                .collect(),
            connected_metric: gauge!(facade::DESTINATION_CONNECTED, "destination" => l.clone()),
            connect_failures_metric: counter!(
                facade::DESTINATION_CONNECT_FAILURES,
                "destination" => l.clone()
            ),
            queue_datapoints_metric: gauge!(facade::QUEUE_DATAPOINTS, "destination" => l.clone()),
            queue_bytes_metric: gauge!(facade::QUEUE_BYTES, "destination" => l),
            name,
        }
    }

    /// `host:port:instance`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Datapoints routed here (accepted or dropped by the queue).
    pub fn add_routed(&self, n: u64) {
        self.routed.fetch_add(n, Relaxed);
        self.routed_metric.increment(n);
    }

    /// Datapoints and messages written to the socket.
    pub fn add_sent(&self, datapoints: u64, messages: u64) {
        self.sent.fetch_add(datapoints, Relaxed);
        self.sent_metric.increment(datapoints);
        self.messages.fetch_add(messages, Relaxed);
        self.messages_metric.increment(messages);
    }

    /// Datapoints dropped after routing, with the reason.
    pub fn add_dropped(&self, reason: DestinationDropReason, n: u64) {
        if n > 0 {
            self.dropped[reason as usize].fetch_add(n, Relaxed);
            self.dropped_metric[reason as usize].increment(n);
        }
    }

    /// Connection state changed.
    pub fn set_connected(&self, connected: bool) {
        self.connected.store(u64::from(connected), Relaxed);
        self.connected_metric.set(if connected { 1.0 } else { 0.0 });
    }

    /// A connection attempt failed or a connection was lost.
    pub fn connect_failed(&self) {
        self.connect_failures_metric.increment(1);
    }

    /// Publishes queue depth gauges (called by the queue, per batch).
    pub fn set_depth(&self, datapoints: usize, bytes: usize) {
        self.depth.set(datapoints, bytes);
        self.queue_datapoints_metric.set(datapoints as f64);
        self.queue_bytes_metric.set(bytes as f64);
    }

    /// Current and peak queue depth since the last [`QueueDepth::take_peak`].
    pub fn depth(&self) -> &QueueDepth {
        &self.depth
    }

    /// Copy of every counter.
    pub fn snapshot(&self) -> DestinationSnapshot {
        let mut dropped = [0; DestinationDropReason::ALL.len()];
        for (i, d) in self.dropped.iter().enumerate() {
            dropped[i] = d.load(Relaxed);
        }
        DestinationSnapshot {
            name: self.name.clone(),
            routed: self.routed.load(Relaxed),
            sent: self.sent.load(Relaxed),
            messages: self.messages.load(Relaxed),
            dropped,
            queued: self.depth.datapoints(),
            connected: self.connected.load(Relaxed) == 1,
        }
    }
}

/// A copy of a relay's counters.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsSnapshot {
    /// Datapoints accepted by every source.
    pub received: u64,
    /// Datapoints accepted, per source.
    pub received_by_source: Vec<(Source, u64)>,
    /// Rejected while parsing, per reason.
    pub invalid: DropCounts,
    /// Open client connections.
    pub active_connections: u64,
    /// Connections refused at the limit.
    pub rejected_connections: u64,
    /// Per destination, indexed like the router's destinations.
    pub destinations: Vec<DestinationSnapshot>,
}

/// A copy of one destination's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationSnapshot {
    /// `host:port:instance`.
    pub name: String,
    /// Routed here.
    pub routed: u64,
    /// Written to the socket.
    pub sent: u64,
    /// Messages written.
    pub messages: u64,
    /// Dropped, indexed by [`DestinationDropReason`] as `usize`.
    pub dropped: [u64; DestinationDropReason::ALL.len()],
    /// In the queue or in flight.
    pub queued: u64,
    /// Connected right now.
    pub connected: bool,
}

impl DestinationSnapshot {
    /// Dropped for every reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// Dropped for one reason.
    pub fn dropped(&self, reason: DestinationDropReason) -> u64 {
        self.dropped[reason as usize]
    }
}
