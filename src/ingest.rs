//! Parse → route → queue: the glue every source shares.
//!
//! An [`Ingestor`] belongs to one connection (or one Kinesis shard reader, or one embedding
//! producer). It parses lines, normalises datapoints the way carbon's `metricReceived` does,
//! routes each name through its own [`RouteCache`], and appends to one pending [`Batch`] per
//! destination. [`Ingestor::flush`] moves the pending batches into the destination queues and
//! publishes the counters — once per read, never per datapoint.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::batch::Batch;
use crate::protocol::{DropCounts, DropReason, line, normalize};
use crate::queue::DestinationQueue;
use crate::router::{RouteCache, Router};
use crate::telemetry::RelayStats;
use crate::telemetry::stats::Source;

/// Shared, immutable parts every [`Ingestor`] needs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Pipeline {
    pub(crate) router: Arc<Router>,
    pub(crate) queues: Arc<[Arc<DestinationQueue>]>,
    pub(crate) stats: Arc<RelayStats>,
    pub(crate) route_cache_entries: usize,
}

impl Pipeline {
    /// Assembles a pipeline from its parts; `queues` are indexed like `router.destinations()`.
    pub fn new(
        router: Arc<Router>,
        queues: Arc<[Arc<DestinationQueue>]>,
        stats: Arc<RelayStats>,
        route_cache_entries: usize,
    ) -> Self {
        Self {
            router,
            queues,
            stats,
            route_cache_entries,
        }
    }

    /// A new ingestor for one producer.
    pub fn ingestor(&self, source: Source) -> Ingestor {
        Ingestor::new(self.clone(), source)
    }

    /// The router.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The destination queues, indexed like `router().destinations()`.
    pub fn queues(&self) -> &[Arc<DestinationQueue>] {
        &self.queues
    }

    /// The relay's counters.
    pub fn stats(&self) -> &Arc<RelayStats> {
        &self.stats
    }
}

/// Per-producer parse/route/batch state. Not shared between tasks.
#[derive(Debug)]
pub struct Ingestor {
    pipeline: Pipeline,
    cache: RouteCache,
    pending: Vec<Batch>,
    source: Source,
    accepted: u64,
    drops: DropCounts,
    now: f64,
}

impl Ingestor {
    fn new(pipeline: Pipeline, source: Source) -> Self {
        let cache = RouteCache::new(pipeline.router.clone(), pipeline.route_cache_entries);
        let pending = (0..pipeline.queues.len()).map(|_| Batch::new()).collect();
        Self {
            pipeline,
            cache,
            pending,
            source,
            accepted: 0,
            drops: DropCounts::default(),
            now: unix_now(),
        }
    }

    /// Parses one plaintext line (without `\n`) and routes it, or counts why not.
    #[inline]
    pub fn line(&mut self, text: &[u8]) {
        match line::parse_line(text) {
            Ok((name, timestamp, value)) => self.push(name, timestamp, value),
            Err(reason) => self.drops.add(reason),
        }
    }

    /// Routes one datapoint after carbon's normalisation (NaN dropped, `-1` = now).
    #[inline]
    pub fn push(&mut self, name: &[u8], timestamp: f64, value: f64) {
        if name.is_empty() {
            self.drops.add(DropReason::EmptyName);
            return;
        }
        match normalize(timestamp, value, self.now) {
            Ok((timestamp, value)) => {
                self.accepted += 1;
                for &dest in self.cache.route(name) {
                    // Route indices come from the router built on the same destination list.
                    if let Some(b) = self.pending.get_mut(usize::from(dest)) {
                        b.push(name, timestamp, value);
                    }
                }
            }
            Err(reason) => self.drops.add(reason),
        }
    }

    /// Counts a datapoint (or frame) rejected before it reached [`push`](Self::push).
    #[inline]
    pub fn reject(&mut self, reason: DropReason) {
        self.drops.add(reason);
    }

    /// Adds rejections a decoder tallied itself.
    pub fn add_drops(&mut self, drops: &DropCounts) {
        for (mine, theirs) in self.drops.0.iter_mut().zip(drops.0.iter()) {
            *mine += theirs;
        }
    }

    /// Datapoints accepted since the last flush.
    pub fn pending_datapoints(&self) -> u64 {
        self.accepted
    }

    /// Moves pending batches into the destination queues and publishes counters.
    pub async fn flush(&mut self) {
        for (i, pending) in self.pending.iter_mut().enumerate() {
            if pending.is_empty() {
                continue;
            }
            let batch = pending.take();
            if let Some(q) = self.pipeline.queues.get(i) {
                q.push(batch);
            }
        }
        if self.accepted > 0 || !self.drops.is_empty() {
            self.pipeline
                .stats
                .record_parsed(self.source, self.accepted, &self.drops);
            self.accepted = 0;
            self.drops.clear();
        }
        self.now = unix_now();
    }
}

/// Seconds since the epoch as a float, like Python's `time.time()`.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
