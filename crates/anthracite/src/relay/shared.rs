//! What a relay shares with its handles, its admin listener and its self-metrics reporter:
//! the pipeline (whose books and queues the counters come from), the relay's phase, the
//! other sources' figures (the sources of extensions) and the reload counters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use metrics::{Counter, counter};

use super::running::Running;
use crate::admin::{Health, Overview};
use crate::figure::{Component, Reporting};
use crate::ingest::Pipeline;
use crate::metric_names::facade;
use crate::queue::{DestinationQueue, DestinationStats};
use crate::telemetry::reporter::Books;
use crate::telemetry::{ReloadCounts, StatsSnapshot};

/// A relay's shared state (behind an `Arc`).
pub(crate) struct Shared {
    pub(crate) pipeline: Pipeline,
    pub(crate) health: Arc<Health>,
    /// The configuration in brief and the reload history, for the status page.
    pub(crate) overview: Arc<Overview>,
    sources: Mutex<Vec<Arc<dyn Reporting>>>,
    reloads: ReloadBooks,
    /// What a running relay owns: set by `Relay::run` once started, taken by shutdown; a
    /// reload holds the lock while it applies a configuration.
    pub(super) control: tokio::sync::Mutex<Option<Running>>,
    /// Queues of destinations a reload removed that still hold data.
    pub(super) removed: Arc<Mutex<Vec<Arc<DestinationQueue>>>>,
    /// The runtime the relay runs on (set by `Relay::run`): a reload requested from another
    /// runtime spawns the relay's tasks here.
    pub(super) runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    /// The locks on the spill directories, held for the relay's life.
    _spill_locks: super::spill_lock::SpillLocks,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("pipeline", &self.pipeline)
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

/// Reload counters, mirrored to the facade.
#[derive(Debug)]
struct ReloadBooks {
    applied: AtomicU64,
    rejected: AtomicU64,
    applied_metric: Counter,
    rejected_metric: Counter,
}

impl Shared {
    pub(crate) fn new(pipeline: Pipeline, features: Vec<&'static str>) -> Self {
        Self {
            pipeline,
            health: Arc::new(Health::default()),
            overview: Arc::new(Overview::new(features)),
            sources: Mutex::new(Vec::new()),
            reloads: ReloadBooks {
                applied: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
                applied_metric: counter!(facade::CONFIG_RELOADS, "result" => "applied"),
                rejected_metric: counter!(facade::CONFIG_RELOADS, "result" => "rejected"),
            },
            control: tokio::sync::Mutex::new(None),
            removed: Arc::new(Mutex::new(Vec::new())),
            runtime: std::sync::OnceLock::new(),
            _spill_locks: super::spill_lock::SpillLocks::default(),
        }
    }

    /// Holds `locks` (the spill directories') for as long as the relay's state lives.
    pub(super) fn with_spill_locks(mut self, locks: super::spill_lock::SpillLocks) -> Self {
        self._spill_locks = locks;
        self
    }

    fn removed_queues(&self) -> Vec<Arc<DestinationQueue>> {
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Another source reports figures of its own from now on.
    pub(crate) fn add_source(&self, source: Arc<dyn Reporting>) {
        self.sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(source);
    }

    /// A reload was applied (`true`) or rejected; `detail` says what changed or why not.
    pub(crate) fn count_reload(&self, applied: bool, detail: String) {
        self.overview.record_reload(applied, detail);
        let r = &self.reloads;
        if applied {
            r.applied.fetch_add(1, Relaxed);
            r.applied_metric.increment(1);
        } else {
            r.rejected.fetch_add(1, Relaxed);
            r.rejected_metric.increment(1);
        }
    }
}

impl Books for Shared {
    fn snapshot(&self) -> StatsSnapshot {
        let p = &self.pipeline;
        let mut s = StatsSnapshot::collect(
            p.stats().snapshot(),
            p.queues().iter().map(|q| &**q.stats()),
        );
        s.removed = self
            .removed_queues()
            .iter()
            .map(|q| q.stats().snapshot())
            .collect();
        s.reloads = ReloadCounts {
            applied: self.reloads.applied.load(Relaxed),
            rejected: self.reloads.rejected.load(Relaxed),
        };
        s
    }

    fn destination_stats(&self) -> Vec<Arc<DestinationStats>> {
        self.pipeline
            .queues()
            .iter()
            .chain(self.removed_queues().iter())
            .map(|q| q.stats().clone())
            .collect()
    }

    fn sources(&self) -> Vec<Component> {
        self.sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|s| s.component())
            .collect()
    }
}
