//! What a sink has seen, shared by its connections and whoever reads it (a test, the
//! harness's sampler). Connections add to it once per read.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::decode::{Key, Received};
use crate::histogram::Histogram;

/// Error messages a sink keeps (every error is counted; the reasons of the first ones are
/// enough to say what went wrong).
const MAX_ERRORS: usize = 1_000;

/// One connection's tallies since its last read was flushed.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) delivered: u64,
    pub(crate) bad: u64,
    pub(crate) unstamped: u64,
    pub(crate) latency: Histogram,
    pub(crate) names: Vec<Vec<u8>>,
    pub(crate) received: Vec<Received>,
    pub(crate) errors: Vec<String>,
}

#[derive(Default)]
struct Record {
    received: Vec<Received>,
    errors: Vec<String>,
}

/// A sink's counters and records.
#[derive(Default)]
pub struct SinkStats {
    delivered: AtomicU64,
    bytes: AtomicU64,
    bad: AtomicU64,
    unstamped: AtomicU64,
    connections: AtomicU64,
    last_rx_us: AtomicU64,
    latency: Mutex<Histogram>,
    window: Mutex<Histogram>,
    names: Mutex<HashSet<Vec<u8>>>,
    record: Mutex<Record>,
    changed: Condvar,
}

/// A poisoned lock only means a reader panicked (a failing test); the data is still whole.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SinkStats {
    /// Datapoints received.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Bytes received.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Lines or frames that did not decode, and partial ones left at a close.
    pub fn bad(&self) -> u64 {
        self.bad.load(Ordering::Relaxed)
    }

    /// Datapoints whose value was not a send instant (no latency recorded).
    pub fn unstamped(&self) -> u64 {
        self.unstamped.load(Ordering::Relaxed)
    }

    /// Connections accepted.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Microseconds since the sink's clock of the last read that held a datapoint.
    pub fn last_rx_us(&self) -> u64 {
        self.last_rx_us.load(Ordering::Relaxed)
    }

    /// Adds the latency of the whole run into `into`.
    pub fn merge_latency_into(&self, into: &mut Histogram) {
        into.merge(&lock(&self.latency));
    }

    /// Adds the latency recorded since the last call into `into`, and starts a new window.
    pub fn drain_window_into(&self, into: &mut Histogram) {
        let mut window = lock(&self.window);
        into.merge(&window);
        window.clear();
    }

    /// How many distinct names arrived (with [`Keep::Names`](crate::Keep::Names)).
    pub fn distinct_names(&self) -> usize {
        lock(&self.names).len()
    }

    /// Calls `f` with the distinct names received.
    pub fn with_names<R>(&self, f: impl FnOnce(&HashSet<Vec<u8>>) -> R) -> R {
        f(&lock(&self.names))
    }

    /// A copy of every datapoint kept so far (with [`Keep::All`](crate::Keep::All)), in
    /// arrival order per connection.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.record).received.clone()
    }

    /// The multiset of datapoints kept: key → how many times it arrived.
    pub fn multiset(&self) -> HashMap<Key, usize> {
        let mut m = HashMap::new();
        for r in &lock(&self.record).received {
            *m.entry(r.key()).or_insert(0) += 1;
        }
        m
    }

    /// The reasons of the errors seen so far (the first thousand).
    pub fn errors(&self) -> Vec<String> {
        lock(&self.record).errors.clone()
    }

    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves one read's tallies in and wakes whoever waits for datapoints.
    pub(crate) fn absorb(&self, tally: &mut Tally, bytes: u64, now_us: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if tally.bad > 0 {
            self.bad.fetch_add(tally.bad, Ordering::Relaxed);
        }
        if tally.unstamped > 0 {
            self.unstamped.fetch_add(tally.unstamped, Ordering::Relaxed);
        }
        if tally.latency.count() > 0 {
            lock(&self.latency).merge(&tally.latency);
            lock(&self.window).merge(&tally.latency);
            tally.latency.clear();
        }
        if !tally.names.is_empty() {
            lock(&self.names).extend(tally.names.drain(..));
        }
        let mut record = lock(&self.record);
        record.received.append(&mut tally.received);
        let room = MAX_ERRORS.saturating_sub(record.errors.len());
        record
            .errors
            .extend(tally.errors.iter().take(room).cloned());
        // Under the record's lock, so that a waiter cannot miss it.
        if tally.delivered > 0 {
            self.delivered.fetch_add(tally.delivered, Ordering::Relaxed);
            self.last_rx_us.fetch_max(now_us, Ordering::Relaxed);
        }
        drop(record);
        self.changed.notify_all();
        tally.delivered = 0;
        tally.bad = 0;
        tally.unstamped = 0;
    }

    /// Waits until at least `n` datapoints have arrived or `timeout` passed; returns the
    /// count then.
    pub fn wait_for_delivered(&self, n: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let mut record = lock(&self.record);
        loop {
            let delivered = self.delivered();
            let now = Instant::now();
            if delivered >= n || now >= deadline {
                return delivered;
            }
            record = self
                .changed
                .wait_timeout(record, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}
