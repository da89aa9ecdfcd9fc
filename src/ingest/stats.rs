//! The ingest side's books: datapoints received and rejected per source, client connections,
//! and the white/blacklist counters, mirrored to the `metrics` facade. Updated once per flush
//! (per read), never per datapoint.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use metrics::{Counter, Gauge, counter, gauge};

use super::source::Source;
use crate::protocol::{DropCounts, DropReason};
use crate::telemetry::names::facade;

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

/// The ingest side's counters for one relay: per source, plus the white/blacklist counts.
/// Each relay owns its own, so two relays in one process keep separate books.
#[derive(Debug)]
pub struct IngestStats {
    sources: Vec<SourceStats>,
    blacklist_matches: AtomicU64,
    whitelist_rejects: AtomicU64,
    blacklist_metric: Counter,
    whitelist_metric: Counter,
}

impl Default for IngestStats {
    fn default() -> Self {
        Self::new()
    }
}

impl IngestStats {
    /// Empty books, registering the facade series of every source.
    pub fn new() -> Self {
        Self {
            sources: Source::ALL.iter().map(|&s| SourceStats::new(s)).collect(),
            blacklist_matches: AtomicU64::new(0),
            whitelist_rejects: AtomicU64::new(0),
            blacklist_metric: counter!(facade::BLACKLIST_MATCHES),
            whitelist_metric: counter!(facade::WHITELIST_REJECTS),
        }
    }

    /// Adds one batch worth of names dropped by the blacklist / not on the whitelist.
    pub fn record_filtered(&self, blacklisted: u64, not_whitelisted: u64) {
        if blacklisted > 0 {
            self.blacklist_matches.fetch_add(blacklisted, Relaxed);
            self.blacklist_metric.increment(blacklisted);
        }
        if not_whitelisted > 0 {
            self.whitelist_rejects.fetch_add(not_whitelisted, Relaxed);
            self.whitelist_metric.increment(not_whitelisted);
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

    /// A consistent-enough copy of every counter (each counter read once).
    pub fn snapshot(&self) -> IngestSnapshot {
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
        IngestSnapshot {
            received,
            received_by_source,
            invalid,
            active_connections,
            rejected_connections,
            blacklist_matches: self.blacklist_matches.load(Relaxed),
            whitelist_rejects: self.whitelist_rejects.load(Relaxed),
        }
    }
}

/// A copy of the ingest side's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IngestSnapshot {
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
    /// Datapoints dropped because their name matched the blacklist.
    pub blacklist_matches: u64,
    /// Datapoints dropped because their name was not on a non-empty whitelist.
    pub whitelist_rejects: u64,
}
