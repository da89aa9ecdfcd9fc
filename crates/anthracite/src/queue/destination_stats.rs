//! One destination's books: counters and gauges updated by its queue and its connection task,
//! mirrored to the `metrics` facade, and their snapshots.
//!
//! Updated once per batch (a push, a pop, a write, a spill append), never per datapoint.

use std::sync::Mutex;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::time::{Duration, Instant, SystemTime};

use metrics::{Counter, Gauge, counter, gauge};

use super::policy::{DestinationDropReason, OverflowCause};
use crate::metric_names::facade;

/// Current queue depth, readable without the queue's lock, and the peak since last read.
#[derive(Debug, Default)]
pub struct QueueDepth {
    datapoints: AtomicU64,
    bytes: AtomicU64,
    peak: AtomicU64,
}

impl QueueDepth {
    /// Records a new depth (datapoints waiting or in flight, bytes waiting).
    pub fn set(&self, datapoints: usize, bytes: usize) {
        self.datapoints.store(datapoints as u64, Relaxed);
        self.bytes.store(bytes as u64, Relaxed);
        self.peak.fetch_max(datapoints as u64, Relaxed);
    }

    /// Datapoints waiting or in flight.
    pub fn datapoints(&self) -> u64 {
        self.datapoints.load(Relaxed)
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// The largest depth seen since the previous call, then restarts from the current depth.
    pub fn take_peak(&self) -> u64 {
        self.peak.swap(self.datapoints.load(Relaxed), Relaxed)
    }
}

/// Time a destination's writes spent waiting on its peer: a write that finds the socket's
/// send buffer full waits until the peer reads. Microseconds since `origin`, so a wait in
/// progress counts too (a hung peer's wait grows while it lasts). Updated once per write that
/// waits, never per datapoint.
#[derive(Debug)]
struct PeerWait {
    origin: Instant,
    /// Completed waits.
    total_us: AtomicU64,
    /// Start of the wait in progress, plus one (0: none).
    since_us: AtomicU64,
}

impl PeerWait {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            total_us: AtomicU64::new(0),
            since_us: AtomicU64::new(0),
        }
    }

    fn now_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64 + 1
    }

    fn began(&self) {
        self.since_us.store(self.now_us(), Relaxed);
    }

    fn ended(&self) {
        let since = self.since_us.swap(0, Relaxed);
        if since > 0 {
            self.total_us
                .fetch_add(self.now_us().saturating_sub(since), Relaxed);
        }
    }

    fn total(&self) -> Duration {
        let since = self.since_us.load(Relaxed);
        let running = if since > 0 {
            self.now_us().saturating_sub(since)
        } else {
            0
        };
        Duration::from_micros(self.total_us.load(Relaxed) + running)
    }
}

/// Counters for one destination.
#[derive(Debug)]
pub struct DestinationStats {
    name: String,
    routed: AtomicU64,
    sent: AtomicU64,
    messages: AtomicU64,
    queued_until_connected: AtomicU64,
    queued_until_connected_metric: Counter,
    moved_out: AtomicU64,
    moved_in: AtomicU64,
    moved_out_metric: Counter,
    moved_in_metric: Counter,
    dropped: [AtomicU64; DestinationDropReason::ALL.len()],
    connected: AtomicU64,
    depth: QueueDepth,
    routed_metric: Counter,
    sent_metric: Counter,
    messages_metric: Counter,
    dropped_metric: Vec<Counter>,
    connected_metric: Gauge,
    connect_failures: AtomicU64,
    connect_failures_metric: Counter,
    write_timeouts: AtomicU64,
    write_timeouts_metric: Counter,
    full_waits: AtomicU64,
    full_waits_metric: Counter,
    overflows: [AtomicU64; OverflowCause::ALL.len()],
    overflows_metric: Vec<Counter>,
    peer_wait: PeerWait,
    last_error: Mutex<Option<LastError>>,
    queue_datapoints_metric: Gauge,
    queue_bytes_metric: Gauge,
    spill: SpillCounters,
}

/// The disk tier's counters and gauges for one destination (all zero without a spill log).
#[derive(Debug)]
struct SpillCounters {
    memory_bytes: AtomicU64,
    memory_bytes_peak: AtomicU64,
    disk_datapoints: AtomicU64,
    recovered: AtomicU64,
    spilled_records: AtomicU64,
    spilled_datapoints: AtomicU64,
    spilled_bytes: AtomicU64,
    replayed_records: AtomicU64,
    replayed_datapoints: AtomicU64,
    replayed_bytes: AtomicU64,
    disk_bytes: AtomicU64,
    oldest_age_ms: AtomicU64,
    damaged_segments: AtomicU64,
    abandoned_bytes: AtomicU64,
    io_errors: AtomicU64,
    spilled_records_metric: Counter,
    spilled_datapoints_metric: Counter,
    spilled_bytes_metric: Counter,
    replayed_records_metric: Counter,
    replayed_datapoints_metric: Counter,
    replayed_bytes_metric: Counter,
    disk_datapoints_metric: Gauge,
    disk_bytes_metric: Gauge,
    oldest_age_metric: Gauge,
    damaged_metric: Counter,
    io_errors_metric: Counter,
}

impl SpillCounters {
    fn new(l: &str) -> Self {
        let c = |name: &'static str| counter!(name, "destination" => l.to_string());
        let g = |name: &'static str| gauge!(name, "destination" => l.to_string());
        Self {
            memory_bytes: AtomicU64::new(0),
            memory_bytes_peak: AtomicU64::new(0),
            disk_datapoints: AtomicU64::new(0),
            recovered: AtomicU64::new(0),
            spilled_records: AtomicU64::new(0),
            spilled_datapoints: AtomicU64::new(0),
            spilled_bytes: AtomicU64::new(0),
            replayed_records: AtomicU64::new(0),
            replayed_datapoints: AtomicU64::new(0),
            replayed_bytes: AtomicU64::new(0),
            disk_bytes: AtomicU64::new(0),
            oldest_age_ms: AtomicU64::new(0),
            damaged_segments: AtomicU64::new(0),
            abandoned_bytes: AtomicU64::new(0),
            io_errors: AtomicU64::new(0),
            spilled_records_metric: c(facade::SPILLED_RECORDS),
            spilled_datapoints_metric: c(facade::SPILLED_DATAPOINTS),
            spilled_bytes_metric: c(facade::SPILLED_BYTES),
            replayed_records_metric: c(facade::REPLAYED_RECORDS),
            replayed_datapoints_metric: c(facade::REPLAYED_DATAPOINTS),
            replayed_bytes_metric: c(facade::REPLAYED_BYTES),
            disk_datapoints_metric: g(facade::SPILL_QUEUE_DATAPOINTS),
            disk_bytes_metric: g(facade::SPILL_DISK_BYTES),
            oldest_age_metric: g(facade::SPILL_OLDEST_AGE),
            damaged_metric: c(facade::SPILL_DAMAGED_SEGMENTS),
            io_errors_metric: c(facade::SPILL_IO_ERRORS),
        }
    }
}

impl DestinationStats {
    /// Books for the destination `name` (`host:port:instance`), registering its facade series.
    pub fn new(name: impl Into<String>) -> Self {
        let name: String = name.into();
        let l = name.clone();
        Self {
            routed: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            queued_until_connected: AtomicU64::new(0),
            queued_until_connected_metric: counter!(
                facade::QUEUED_UNTIL_CONNECTED,
                "destination" => l.clone()
            ),
            moved_out: AtomicU64::new(0),
            moved_in: AtomicU64::new(0),
            moved_out_metric: counter!(
                facade::MOVED,
                "destination" => l.clone(), "direction" => "out"
            ),
            moved_in_metric: counter!(
                facade::MOVED,
                "destination" => l.clone(), "direction" => "in"
            ),
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
            connect_failures: AtomicU64::new(0),
            connect_failures_metric: counter!(
                facade::DESTINATION_CONNECT_FAILURES,
                "destination" => l.clone()
            ),
            write_timeouts: AtomicU64::new(0),
            write_timeouts_metric: counter!(
                facade::DESTINATION_WRITE_TIMEOUTS,
                "destination" => l.clone()
            ),
            full_waits: AtomicU64::new(0),
            full_waits_metric: counter!(facade::DESTINATION_FULL_WAITS, "destination" => l.clone()),
            overflows: std::array::from_fn(|_| AtomicU64::new(0)),
            overflows_metric: OverflowCause::ALL
                .iter()
                .map(|c| {
                    counter!(facade::DESTINATION_OVERFLOWS, "destination" => l.clone(), "cause" => c.as_str())
                })
                .collect(),
            peer_wait: PeerWait::new(),
            last_error: Mutex::new(None),
            queue_datapoints_metric: gauge!(facade::QUEUE_DATAPOINTS, "destination" => l.clone()),
            queue_bytes_metric: gauge!(facade::QUEUE_BYTES, "destination" => l.clone()),
            spill: SpillCounters::new(&l),
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

    /// Datapoints this destination's queue handed to another destination's queue.
    pub fn add_moved_out(&self, n: u64) {
        self.moved_out.fetch_add(n, Relaxed);
        self.moved_out_metric.increment(n);
    }

    /// Datapoints another destination's queue handed to this one's.
    pub fn add_moved_in(&self, n: u64) {
        self.moved_in.fetch_add(n, Relaxed);
        self.moved_in_metric.increment(n);
    }

    /// Datapoints routed here while it was not connected (carbon's `queuedUntilConnected`).
    pub fn add_queued_until_connected(&self, n: u64) {
        self.queued_until_connected.fetch_add(n, Relaxed);
        self.queued_until_connected_metric.increment(n);
    }

    /// True while a connection to the destination is up.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Relaxed) == 1
    }

    /// True while the destination is down: not connected, and a connection attempt failed or
    /// a connection was lost (carbon-c-relay's `server_failed`, which `failover` and `any_of`
    /// clusters consult).
    pub fn is_failing(&self) -> bool {
        !self.is_connected() && self.connect_failures.load(Relaxed) > 0
    }

    /// Connection state changed.
    pub fn set_connected(&self, connected: bool) {
        self.connected.store(u64::from(connected), Relaxed);
        self.connected_metric.set(if connected { 1.0 } else { 0.0 });
    }

    /// A connection attempt failed or a connection was lost, with what happened.
    pub fn connect_failed(&self, error: &dyn std::fmt::Display) {
        self.connect_failures.fetch_add(1, Relaxed);
        self.connect_failures_metric.increment(1);
        self.set_last_error(error);
    }

    /// A write made no progress for the write timeout: the connection was declared dead.
    pub fn write_timed_out(&self, error: &dyn std::fmt::Display) {
        self.write_timeouts.fetch_add(1, Relaxed);
        self.write_timeouts_metric.increment(1);
        self.set_last_error(error);
    }

    /// A batch's producer is held back by the full wait (counted once per batch).
    pub fn add_full_wait(&self) {
        self.full_waits.fetch_add(1, Relaxed);
        self.full_waits_metric.increment(1);
    }

    /// The memory tier's policy (spill or drop) applied to a batch that did not fit, for
    /// `cause` (counted once per batch).
    pub fn add_overflow(&self, cause: OverflowCause) {
        self.overflows[cause as usize].fetch_add(1, Relaxed);
        self.overflows_metric[cause as usize].increment(1);
    }

    /// A write found the socket's send buffer full: from now until
    /// [`peer_wait_ended`](Self::peer_wait_ended) the destination waits on its peer.
    pub fn peer_wait_began(&self) {
        self.peer_wait.began();
    }

    /// The write that waited on the peer completed (or failed).
    pub fn peer_wait_ended(&self) {
        self.peer_wait.ended();
    }

    /// Total time the destination's writes have waited on the peer to take bytes, including
    /// a wait in progress. The full wait compares its growth with the time that passed.
    pub fn peer_waited(&self) -> Duration {
        self.peer_wait.total()
    }

    /// True when the last connection failure, lost connection or write timeout happened less
    /// than `window` ago (or the clock went back since).
    pub fn failed_within(&self, window: std::time::Duration) -> bool {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|e| e.at.elapsed().map_or(true, |age| age < window))
    }

    fn set_last_error(&self, error: &dyn std::fmt::Display) {
        let e = LastError {
            message: error.to_string(),
            at: SystemTime::now(),
        };
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    /// Publishes queue depth gauges (called by the queue, per batch).
    pub fn set_depth(&self, datapoints: usize, bytes: usize) {
        self.depth.set(datapoints, bytes);
        self.queue_datapoints_metric.set(datapoints as f64);
        self.queue_bytes_metric.set(bytes as f64);
    }

    /// Memory-tier bytes (waiting plus in flight) and disk-tier datapoints (called by the
    /// queue, per batch). Tracks the all-time peak of memory bytes.
    pub fn set_tiers(&self, memory_bytes: usize, disk_datapoints: u64) {
        let sp = &self.spill;
        sp.memory_bytes.store(memory_bytes as u64, Relaxed);
        sp.memory_bytes_peak.fetch_max(memory_bytes as u64, Relaxed);
        if sp.disk_datapoints.swap(disk_datapoints, Relaxed) != disk_datapoints {
            sp.disk_datapoints_metric.set(disk_datapoints as f64);
        }
    }

    /// Datapoints found in the spill log at startup (also counted as routed).
    pub fn add_recovered(&self, datapoints: u64) {
        self.spill.recovered.fetch_add(datapoints, Relaxed);
    }

    /// One batch stored in the spill log (bytes: names plus per-datapoint overhead).
    pub fn add_spilled(&self, datapoints: u64, bytes: u64) {
        let sp = &self.spill;
        sp.spilled_records.fetch_add(1, Relaxed);
        sp.spilled_datapoints.fetch_add(datapoints, Release);
        sp.spilled_bytes.fetch_add(bytes, Relaxed);
        sp.spilled_records_metric.increment(1);
        sp.spilled_datapoints_metric.increment(datapoints);
        sp.spilled_bytes_metric.increment(bytes);
    }

    /// Records replayed from the spill log into memory.
    pub fn add_replayed(&self, records: u64, datapoints: u64, bytes: u64) {
        let sp = &self.spill;
        sp.replayed_records.fetch_add(records, Relaxed);
        sp.replayed_datapoints.fetch_add(datapoints, Relaxed);
        sp.replayed_bytes.fetch_add(bytes, Relaxed);
        sp.replayed_records_metric.increment(records);
        sp.replayed_datapoints_metric.increment(datapoints);
        sp.replayed_bytes_metric.increment(bytes);
    }

    /// Damaged spill segments found (at startup or while replaying) and bytes abandoned.
    pub fn add_spill_damage(&self, segments: u64, abandoned_bytes: u64) {
        let sp = &self.spill;
        sp.damaged_segments.fetch_add(segments, Relaxed);
        sp.abandoned_bytes.fetch_add(abandoned_bytes, Relaxed);
        sp.damaged_metric.increment(segments);
    }

    /// The spill log's gauges, and its cumulative I/O error count.
    pub fn set_spill_gauges(&self, disk_bytes: u64, oldest_age_secs: f64, io_errors: u64) {
        let sp = &self.spill;
        sp.disk_bytes.store(disk_bytes, Relaxed);
        sp.disk_bytes_metric.set(disk_bytes as f64);
        sp.oldest_age_ms
            .store((oldest_age_secs * 1000.0) as u64, Relaxed);
        sp.oldest_age_metric.set(oldest_age_secs);
        let prev = sp.io_errors.swap(io_errors, Relaxed);
        if io_errors > prev {
            sp.io_errors_metric.increment(io_errors - prev);
        }
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
        let sp = &self.spill;
        // The spilled count before the gauges, and with `Acquire` (`add_spilled` comes after
        // the queue published the same datapoints in its gauges): a snapshot that counts them
        // spilled finds them queued too.
        let spilled_datapoints = sp.spilled_datapoints.load(Acquire);
        let queued_memory = self.depth.datapoints();
        let queued_disk = sp.disk_datapoints.load(Relaxed);
        DestinationSnapshot {
            name: self.name.clone(),
            routed: self.routed.load(Relaxed),
            sent: self.sent.load(Relaxed),
            messages: self.messages.load(Relaxed),
            queued_until_connected: self.queued_until_connected.load(Relaxed),
            moved_out: self.moved_out.load(Relaxed),
            moved_in: self.moved_in.load(Relaxed),
            dropped,
            queued: queued_memory + queued_disk,
            queued_memory,
            queued_disk,
            connected: self.connected.load(Relaxed) == 1,
            connect_failures: self.connect_failures.load(Relaxed),
            write_timeouts: self.write_timeouts.load(Relaxed),
            full_waits: self.full_waits.load(Relaxed),
            overflows: std::array::from_fn(|i| self.overflows[i].load(Relaxed)),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            spill: SpillSnapshot {
                memory_bytes: sp.memory_bytes.load(Relaxed),
                memory_bytes_peak: sp.memory_bytes_peak.load(Relaxed),
                recovered: sp.recovered.load(Relaxed),
                spilled_records: sp.spilled_records.load(Relaxed),
                spilled_datapoints,
                spilled_bytes: sp.spilled_bytes.load(Relaxed),
                replayed_records: sp.replayed_records.load(Relaxed),
                replayed_datapoints: sp.replayed_datapoints.load(Relaxed),
                replayed_bytes: sp.replayed_bytes.load(Relaxed),
                disk_bytes: sp.disk_bytes.load(Relaxed),
                oldest_age_ms: sp.oldest_age_ms.load(Relaxed),
                damaged_segments: sp.damaged_segments.load(Relaxed),
                abandoned_bytes: sp.abandoned_bytes.load(Relaxed),
                io_errors: sp.io_errors.load(Relaxed),
            },
        }
    }
}

/// A copy of one destination's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DestinationSnapshot {
    /// `host:port:instance`.
    pub name: String,
    /// Routed here.
    pub routed: u64,
    /// Written to the socket.
    pub sent: u64,
    /// Messages written.
    pub messages: u64,
    /// Routed here while not connected.
    pub queued_until_connected: u64,
    /// Handed from this destination's queue to another's (a carbon-c-relay cluster's member
    /// that was down): `routed + moved_in = sent + dropped + queued + moved_out`.
    pub moved_out: u64,
    /// Handed to this destination's queue from another's.
    pub moved_in: u64,
    /// Dropped, indexed by [`DestinationDropReason`] as `usize`.
    pub dropped: [u64; DestinationDropReason::ALL.len()],
    /// In the queue or in flight: `queued_memory + queued_disk`.
    pub queued: u64,
    /// Waiting or in flight in the memory tier.
    pub queued_memory: u64,
    /// In the disk tier (handed to the spill thread, not yet replayed into memory).
    pub queued_disk: u64,
    /// Connected right now.
    pub connected: bool,
    /// Connection attempts that failed (refused, timed out, TLS handshake rejected) plus
    /// connections lost.
    pub connect_failures: u64,
    /// Connections declared dead because a write made no progress for the write timeout.
    pub write_timeouts: u64,
    /// Batches whose producers waited for room under the full wait.
    pub full_waits: u64,
    /// Batches the full policy (spill or drop) applied to, indexed by cause (`down`,
    /// `behind`, `no_wait`: the queue's `OverflowCause` as `usize`).
    pub overflows: [u64; OverflowCause::ALL.len()],
    /// The most recent connection error, and when it happened.
    pub last_error: Option<LastError>,
    /// The disk tier's counters.
    pub spill: SpillSnapshot,
}

/// A destination's most recent connection error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LastError {
    /// What happened.
    pub message: String,
    /// When.
    pub at: SystemTime,
}

/// A copy of one destination's memory-tier size and disk-tier counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpillSnapshot {
    /// Bytes in the memory tier now (waiting plus in flight).
    pub memory_bytes: u64,
    /// Largest `memory_bytes` ever seen.
    pub memory_bytes_peak: u64,
    /// Datapoints found in the spill log at startup (counted as routed too).
    pub recovered: u64,
    /// Batches (records) written to the spill log.
    pub spilled_records: u64,
    /// Datapoints written to the spill log.
    pub spilled_datapoints: u64,
    /// Bytes spilled, measured like the memory bound (names plus per-datapoint overhead).
    pub spilled_bytes: u64,
    /// Records replayed from disk into memory.
    pub replayed_records: u64,
    /// Datapoints replayed (a record replayed again after a crash counts twice).
    pub replayed_datapoints: u64,
    /// Bytes replayed, measured like `spilled_bytes`.
    pub replayed_bytes: u64,
    /// Bytes of segment files on disk.
    pub disk_bytes: u64,
    /// Age of the oldest record on disk, in milliseconds (0 when empty).
    pub oldest_age_ms: u64,
    /// Torn or corrupt segments found (at startup or while replaying).
    pub damaged_segments: u64,
    /// Bytes abandoned in damaged segments at startup.
    pub abandoned_bytes: u64,
    /// I/O errors met by the spill log.
    pub io_errors: u64,
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
