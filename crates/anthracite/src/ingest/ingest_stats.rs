//! The ingest side's books: datapoints received and rejected per source, client connections,
//! and the white/blacklist counters, mirrored to the `metrics` facade. Updated once per flush
//! (per read), never per datapoint.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use metrics::{Counter, Gauge, counter, gauge};

use super::source::Source;
use crate::metric_names::facade;
use crate::protocol::{DropCounts, DropReason};

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
    evicted_metric: Counter,
    accept_errors_metric: Counter,
    tls_failures_metric: Counter,
    rejected: AtomicU64,
    idle_closed: AtomicU64,
    evicted: AtomicU64,
    accept_errors: AtomicU64,
    tls_failures: AtomicU64,
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
            evicted_metric: counter!(facade::CONNECTIONS_EVICTED, "source" => label),
            accept_errors_metric: counter!(facade::ACCEPT_ERRORS, "source" => label),
            tls_failures_metric: counter!(facade::TLS_HANDSHAKE_FAILURES, "source" => label),
            rejected: AtomicU64::new(0),
            idle_closed: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
            tls_failures: AtomicU64::new(0),
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
    buffered_bytes: AtomicU64,
    buffered_metric: Gauge,
    udp_kernel_drops: AtomicU64,
    udp_kernel_drops_metric: Counter,
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
            buffered_bytes: AtomicU64::new(0),
            buffered_metric: gauge!(facade::RECEIVE_BUFFER_BYTES),
            udp_kernel_drops: AtomicU64::new(0),
            udp_kernel_drops_metric: counter!(facade::UDP_KERNEL_DROPS),
        }
    }

    /// Client connections' read buffers (and pickle decoders' kept scratch) grew by `grown`
    /// bytes and shrank by `shrunk` (called when a buffer changes size, not per read).
    pub fn buffer_resized(&self, grown: usize, shrunk: usize) {
        if grown > 0 {
            self.buffered_bytes.fetch_add(grown as u64, Relaxed);
            self.buffered_metric.increment(grown as f64);
        }
        if shrunk > 0 {
            self.buffered_bytes.fetch_sub(shrunk as u64, Relaxed);
            self.buffered_metric.decrement(shrunk as f64);
        }
    }

    /// Datagrams the kernel dropped on the UDP socket because its receive buffer was full.
    pub fn udp_kernel_dropped(&self, datagrams: u64) {
        if datagrams > 0 {
            self.udp_kernel_drops.fetch_add(datagrams, Relaxed);
            self.udp_kernel_drops_metric.increment(datagrams);
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
        let s = self.source(source);
        s.idle_closed.fetch_add(1, Relaxed);
        s.idle_metric.increment(1);
    }

    /// The connection idle the longest was closed to admit a new one at the limit.
    pub fn connection_evicted(&self, source: Source) {
        let s = self.source(source);
        s.evicted.fetch_add(1, Relaxed);
        s.evicted_metric.increment(1);
    }

    /// `accept` failed (e.g. the process is out of file descriptors).
    pub fn accept_failed(&self, source: Source) {
        let s = self.source(source);
        s.accept_errors.fetch_add(1, Relaxed);
        s.accept_errors_metric.increment(1);
    }

    /// A TLS handshake failed, timed out or was closed to admit another connection.
    pub fn tls_handshake_failed(&self, source: Source) {
        let s = self.source(source);
        s.tls_failures.fetch_add(1, Relaxed);
        s.tls_failures_metric.increment(1);
    }

    /// A consistent-enough copy of every counter (each counter read once).
    pub fn snapshot(&self) -> IngestSnapshot {
        let mut invalid = DropCounts::default();
        let mut received_by_source = Vec::new();
        let mut received = 0;
        let mut active_connections = 0;
        let mut rejected_connections = 0;
        let mut idle_closed_connections = 0;
        let mut evicted_connections = 0;
        let mut accept_errors = 0;
        let mut sources = Vec::with_capacity(self.sources.len());
        for (i, s) in self.sources.iter().enumerate() {
            let mut one = SourceSnapshot {
                source: Source::ALL[i],
                received: s.received.load(Relaxed),
                invalid: DropCounts::default(),
                active: s.active.load(Relaxed),
                rejected: s.rejected.load(Relaxed),
                idle_closed: s.idle_closed.load(Relaxed),
                evicted: s.evicted.load(Relaxed),
                accept_errors: s.accept_errors.load(Relaxed),
                tls_handshake_failures: s.tls_failures.load(Relaxed),
            };
            for reason in DropReason::ALL {
                one.invalid.0[reason.index()] = s.invalid[reason.index()].load(Relaxed);
                invalid.0[reason.index()] += one.invalid.0[reason.index()];
            }
            received += one.received;
            received_by_source.push((one.source, one.received));
            active_connections += one.active;
            rejected_connections += one.rejected;
            idle_closed_connections += one.idle_closed;
            evicted_connections += one.evicted;
            accept_errors += one.accept_errors;
            sources.push(one);
        }
        IngestSnapshot {
            received,
            received_by_source,
            invalid,
            active_connections,
            rejected_connections,
            idle_closed_connections,
            evicted_connections,
            accept_errors,
            blacklist_matches: self.blacklist_matches.load(Relaxed),
            whitelist_rejects: self.whitelist_rejects.load(Relaxed),
            sources,
            buffered_bytes: self.buffered_bytes.load(Relaxed),
            udp_kernel_drops: self.udp_kernel_drops.load(Relaxed),
        }
    }
}

/// A copy of one source's counters.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SourceSnapshot {
    /// The source.
    pub source: Source,
    /// Datapoints accepted.
    pub received: u64,
    /// Rejected while parsing, per reason.
    pub invalid: DropCounts,
    /// Open client connections.
    pub active: u64,
    /// Connections refused at the limit.
    pub rejected: u64,
    /// Connections closed by the idle timeout.
    pub idle_closed: u64,
    /// Idle connections closed to admit a new one at the limit.
    pub evicted: u64,
    /// Failed `accept` calls.
    pub accept_errors: u64,
    /// TLS handshakes that failed, timed out or were closed to admit another connection.
    pub tls_handshake_failures: u64,
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
    /// Connections refused at the limit (none of the others idle long enough to close).
    pub rejected_connections: u64,
    /// Connections closed by the idle timeout.
    pub idle_closed_connections: u64,
    /// Idle connections closed to admit a new one at the limit.
    pub evicted_connections: u64,
    /// Failed `accept` calls.
    pub accept_errors: u64,
    /// Datapoints dropped because their name matched the blacklist.
    pub blacklist_matches: u64,
    /// Datapoints dropped because their name was not on a non-empty whitelist.
    pub whitelist_rejects: u64,
    /// Per source, in [`Source::ALL`] order.
    pub sources: Vec<SourceSnapshot>,
    /// Bytes held by client connections' read buffers and pickle decoders now.
    pub buffered_bytes: u64,
    /// Datagrams the kernel dropped on the UDP socket (receive buffer full).
    pub udp_kernel_drops: u64,
}
