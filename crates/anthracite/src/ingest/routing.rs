//! Routing generations: what a datapoint's destinations are decided with, swapped whole by a
//! configuration reload.
//!
//! A [`Routing`] is immutable: the router, the destination queues it indexes, the
//! white/blacklists, the replica pools and the per-name settings. The pipeline holds the
//! current one in a [`RoutingCell`]; a reload installs a new one in one step (the router, the
//! queues and the lists switch together, never one without the others).
//!
//! An [`Ingestor`](super::Ingestor) keeps its pending batches indexed by the destinations of
//! one generation, so it changes generation only at a flush boundary: before it takes the
//! first datapoint after a flush it *enters* the current generation (one atomic increment of
//! the generation's `busy` count, per batch, never per datapoint), and the flush *leaves* it
//! once every pending batch is in a queue of that generation. So a datapoint is routed by the
//! generation that was current when its batch began, and its batch goes to that generation's
//! queues.
//!
//! Entering is checked twice against the cell's version (increment, then re-read): a reload
//! that installs a new generation and then sees `busy == 0` on the old one knows that no
//! ingestor can push into the old generation's queues any more — one that raced it backs out
//! and enters the new generation instead. The reload uses that to retire removed
//! destinations only after their last pushes (`relay::reload`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, RwLock};

use crate::aggregator::Aggregation;
use crate::filter::SharedLists;
use crate::name_cache::NameCache;
use crate::queue::DestinationQueue;
use crate::router::{ReplicaPools, RouteCache, Router};

/// One routing generation.
#[derive(Debug)]
pub struct Routing {
    /// The router; its destination indices index `queues`.
    pub router: Arc<Router>,
    /// The routes of `router`, cached for every ingestor (`router.route_cache_bytes`).
    pub routes: Arc<RouteCache>,
    /// The destination queues, indexed like `router.destinations()`.
    pub queues: Arc<[Arc<DestinationQueue>]>,
    /// carbon's white/blacklists (`None`: no filtering).
    pub lists: Option<Arc<SharedLists>>,
    /// The lists' verdicts, cached for every ingestor (a quarter of the route cache's budget;
    /// allocated on first use).
    pub verdicts: Arc<NameCache>,
    /// carbon's tag normalisation, memoised for every ingestor (a quarter of the route
    /// cache's budget; allocated on first use).
    pub tag_memo: Arc<NameCache>,
    /// The walks of a carbon-c-relay configuration's routes, kept per name for every
    /// ingestor (`router::c_relay::plan`; the route cache's budget, which such a
    /// configuration leaves unused; allocated on first use).
    pub(crate) c_relay_plans: Arc<NameCache>,
    /// Pools of destinations sharing `host:port` (`DESTINATION_POOL_REPLICAS`).
    pub pools: Option<Arc<ReplicaPools>>,
    /// The route cache's budget in bytes.
    pub route_cache_bytes: usize,
    /// Timestamps are rounded down to a multiple of this many seconds (0: off).
    pub min_timestamp_resolution: u64,
    /// Normalise tagged names before routing.
    pub tag_relay_normalized: bool,
    /// Longer names are dropped as `name_too_long` (`listen.max_name_length`).
    pub max_name_length: usize,
    /// carbon-aggregator's stage (`[aggregation]`): received datapoints go through it before
    /// routing; the aggregator outlives generations (a reload carries it over).
    pub aggregation: Option<Arc<Aggregation>>,
    /// Ingestors holding pending data routed by this generation.
    busy: AtomicUsize,
}

impl Routing {
    /// A generation of `router` over `queues`, with no lists, pools or name settings, and
    /// new name caches within `route_cache_bytes`.
    pub fn new(
        router: Arc<Router>,
        queues: Arc<[Arc<DestinationQueue>]>,
        route_cache_bytes: usize,
    ) -> Self {
        Self {
            routes: Arc::new(RouteCache::new(router.clone(), route_cache_bytes)),
            router,
            queues,
            lists: None,
            verdicts: Arc::new(NameCache::new(route_cache_bytes / 4)),
            tag_memo: Arc::new(NameCache::new(route_cache_bytes / 4)),
            c_relay_plans: Arc::new(NameCache::new(route_cache_bytes)),
            pools: None,
            route_cache_bytes,
            min_timestamp_resolution: 0,
            tag_relay_normalized: false,
            max_name_length: super::DEFAULT_MAX_NAME_LENGTH,
            aggregation: None,
            busy: AtomicUsize::new(0),
        }
    }

    /// A copy of the settings, not the busy count (for building the next generation).
    pub fn copy(&self) -> Self {
        Self {
            router: self.router.clone(),
            routes: self.routes.clone(),
            queues: self.queues.clone(),
            lists: self.lists.clone(),
            verdicts: self.verdicts.clone(),
            tag_memo: self.tag_memo.clone(),
            c_relay_plans: self.c_relay_plans.clone(),
            pools: self.pools.clone(),
            route_cache_bytes: self.route_cache_bytes,
            min_timestamp_resolution: self.min_timestamp_resolution,
            tag_relay_normalized: self.tag_relay_normalized,
            max_name_length: self.max_name_length,
            aggregation: self.aggregation.clone(),
            busy: AtomicUsize::new(0),
        }
    }

    /// True while no ingestor holds pending data routed by this generation.
    pub fn is_idle(&self) -> bool {
        self.busy.load(SeqCst) == 0
    }

    /// True when `queue` is one of this generation's.
    pub fn has_queue(&self, queue: &Arc<DestinationQueue>) -> bool {
        self.queues.iter().any(|q| Arc::ptr_eq(q, queue))
    }

    pub(super) fn leave(&self) {
        self.busy.fetch_sub(1, SeqCst);
    }
}

/// The current generation and its version (bumped by every install).
#[derive(Debug)]
pub(crate) struct RoutingCell {
    version: AtomicU64,
    current: RwLock<Arc<Routing>>,
}

impl RoutingCell {
    /// Starts with `routing` as version 1.
    pub(crate) fn new(routing: Routing) -> Self {
        Self {
            version: AtomicU64::new(1),
            current: RwLock::new(Arc::new(routing)),
        }
    }

    /// The current generation.
    pub(crate) fn load(&self) -> Arc<Routing> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The current version (one atomic load).
    pub(crate) fn version(&self) -> u64 {
        self.version.load(SeqCst)
    }

    /// The current generation and its version, read together.
    fn load_versioned(&self) -> (Arc<Routing>, u64) {
        let g = match self.current.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        // The version only changes under the write lock.
        (g.clone(), self.version.load(SeqCst))
    }

    /// Makes `routing` current; returns the generation it replaced.
    pub(crate) fn install(&self, routing: Routing) -> Arc<Routing> {
        let routing = Arc::new(routing);
        let mut g = match self.current.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let old = std::mem::replace(&mut *g, routing);
        self.version.fetch_add(1, SeqCst);
        old
    }

    /// Enters the current generation for one batch: returns it (marked busy) and its version.
    /// `held` is the generation (and version) the caller had; it is reused when still
    /// current, so the common case takes no lock.
    pub(super) fn enter(&self, held: (Arc<Routing>, u64)) -> (Arc<Routing>, u64) {
        let (mut routing, mut version) = held;
        loop {
            if self.version() != version {
                (routing, version) = self.load_versioned();
            }
            routing.busy.fetch_add(1, SeqCst);
            // A reload may have installed a new generation between the load and the
            // increment; it may already have seen this one idle. Back out and retry.
            if self.version() == version {
                return (routing, version);
            }
            routing.leave();
        }
    }
}
