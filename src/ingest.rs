//! Parse → route → queue: the glue every source shares.
//!
//! An [`Ingestor`] belongs to one connection (or one Kinesis shard reader, or one embedding
//! producer). It parses lines, normalises datapoints the way carbon's `metricReceived` does,
//! routes each name through its own [`RouteCache`], and appends to one pending [`Batch`] per
//! destination. [`Ingestor::flush`] moves the pending batches into the destination queues and
//! publishes the counters — once per read, never per datapoint.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::batch::Batch;
use crate::filter::{Lists, SharedLists, Verdict};
use crate::protocol::{DropCounts, DropReason, line, normalize, tags};
use crate::queue::DestinationQueue;
use crate::router::{NameHashBuilder, ReplicaPools, RouteCache, Router};
use crate::telemetry::RelayStats;
use crate::telemetry::stats::Source;

/// Shared, immutable parts every [`Ingestor`] needs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Pipeline {
    pub(crate) router: Arc<Router>,
    pub(crate) queues: Arc<[Arc<DestinationQueue>]>,
    pub(crate) stats: Arc<RelayStats>,
    pub(crate) route_cache_entries: usize,
    pub(crate) lists: Option<Arc<SharedLists>>,
    pub(crate) min_timestamp_resolution: u64,
    pub(crate) tag_relay_normalized: bool,
    pub(crate) pools: Option<Arc<ReplicaPools>>,
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
            lists: None,
            min_timestamp_resolution: 0,
            tag_relay_normalized: false,
            pools: None,
        }
    }

    /// Pools destinations sharing `host:port` (carbon's `DESTINATION_POOL_REPLICAS`): a
    /// datapoint routed to any member goes once, to the member with the shortest queue.
    pub fn with_replica_pools(mut self, on: bool) -> Self {
        self.pools = if on {
            ReplicaPools::new(self.router.destinations()).map(Arc::new)
        } else {
            None
        };
        self
    }

    /// Filters received names through carbon's whitelist/blacklist (`USE_WHITELIST`).
    pub fn with_lists(mut self, lists: Arc<SharedLists>) -> Self {
        self.lists = Some(lists);
        self
    }

    /// Rounds received timestamps down to a multiple of `seconds` (carbon's
    /// `MIN_TIMESTAMP_RESOLUTION`; 0 = off).
    pub fn with_min_timestamp_resolution(mut self, seconds: u64) -> Self {
        self.min_timestamp_resolution = seconds;
        self
    }

    /// Routes and sends tagged names in carbon's normalised form (`TAG_RELAY_NORMALIZED`):
    /// tags sorted, leading `~` removed, OpenMetrics `name{tag="v"}` rewritten.
    pub fn with_tag_normalization(mut self, on: bool) -> Self {
        self.tag_relay_normalized = on;
        self
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

    /// True while any destination queue holds more than `fraction` of its datapoint bound.
    /// Pull sources (Kinesis) stop reading while it holds, instead of pushing datapoints a
    /// full queue would drop; one lock per queue, meant to be called once per batch.
    pub fn backlogged(&self, fraction: f64) -> bool {
        self.queues.iter().any(|q| {
            let limit = q.limits().max_datapoints as f64 * fraction;
            q.len() as f64 > limit
        })
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
    filter: Option<NameFilter>,
    resolution: u64,
    backpressure: bool,
    tags: Option<TagNormalizer>,
}

/// A name in carbon's normalised tagged form.
type NormalizedName = Box<[u8]>;

/// Per-ingestor memo of carbon's tag normalisation: names repeat, so each distinct name is
/// parsed once (bounded; cleared when full, like the route cache).
#[derive(Debug)]
struct TagNormalizer {
    /// `None`: the name stays as it is (no tags to sort, or carbon would not parse it).
    memo: HashMap<Box<[u8]>, Option<NormalizedName>, NameHashBuilder>,
    max_entries: usize,
}

impl TagNormalizer {
    fn new(max_entries: usize) -> Self {
        Self {
            memo: HashMap::with_hasher(NameHashBuilder::random()),
            max_entries: max_entries.max(1),
        }
    }

    #[inline]
    fn apply<'a>(&'a mut self, name: &'a [u8]) -> &'a [u8] {
        if !self.memo.contains_key(name) {
            if self.memo.len() >= self.max_entries {
                self.memo.clear();
            }
            let normalized = std::str::from_utf8(name)
                .ok()
                .and_then(tags::normalize)
                .filter(|n| n.as_bytes() != name)
                .map(|n| n.into_bytes().into_boxed_slice());
            self.memo.insert(name.into(), normalized);
        }
        match self.memo.get(name) {
            Some(Some(n)) => n,
            _ => name,
        }
    }
}

/// The ingestor's view of the white/blacklists: refreshed once per flush, verdicts cached per
/// name until the lists change.
#[derive(Debug)]
struct NameFilter {
    shared: Arc<SharedLists>,
    generation: u64,
    lists: Arc<Lists>,
    verdicts: HashMap<Box<[u8]>, Verdict, NameHashBuilder>,
    max_entries: usize,
    blacklisted: u64,
    not_whitelisted: u64,
}

impl NameFilter {
    fn new(shared: Arc<SharedLists>, max_entries: usize) -> Self {
        Self {
            generation: shared.generation(),
            lists: shared.load(),
            shared,
            verdicts: HashMap::with_hasher(NameHashBuilder::random()),
            max_entries: max_entries.max(1),
            blacklisted: 0,
            not_whitelisted: 0,
        }
    }

    #[inline]
    fn passes(&mut self, name: &[u8]) -> bool {
        let verdict = match self.verdicts.get(name) {
            Some(&v) => v,
            None => {
                let v = self.lists.verdict(name);
                if self.verdicts.len() >= self.max_entries {
                    self.verdicts.clear();
                }
                self.verdicts.insert(name.into(), v);
                v
            }
        };
        match verdict {
            Verdict::Pass => true,
            Verdict::Blacklisted => {
                self.blacklisted += 1;
                false
            }
            Verdict::NotWhitelisted => {
                self.not_whitelisted += 1;
                false
            }
        }
    }

    /// Picks up reloaded lists (one atomic load when nothing changed).
    fn refresh(&mut self) {
        let generation = self.shared.generation();
        if generation != self.generation {
            self.generation = generation;
            self.lists = self.shared.load();
            self.verdicts.clear();
        }
    }
}

impl Ingestor {
    fn new(pipeline: Pipeline, source: Source) -> Self {
        let tags_on = pipeline.tag_relay_normalized;
        let route_cache_entries = pipeline.route_cache_entries;
        let cache = RouteCache::new(pipeline.router.clone(), pipeline.route_cache_entries);
        let pending = (0..pipeline.queues.len()).map(|_| Batch::new()).collect();
        // carbon applies the lists and the resolution in `MetricReceiver.metricReceived`; its
        // own metrics (`metricGenerated`) bypass both.
        let external = source != Source::Internal;
        let filter = pipeline
            .lists
            .clone()
            .filter(|_| external)
            .map(|l| NameFilter::new(l, pipeline.route_cache_entries));
        let resolution = if external {
            pipeline.min_timestamp_resolution
        } else {
            0
        };
        Self {
            filter,
            resolution,
            pipeline,
            cache,
            pending,
            source,
            accepted: 0,
            drops: DropCounts::default(),
            now: unix_now(),
            backpressure: false,
            tags: tags_on.then(|| TagNormalizer::new(route_cache_entries)),
        }
    }

    /// For sources that can pause (Kinesis, an embedder reading from a durable log): make
    /// [`flush`](Self::flush) wait for room in a full queue instead of applying a dropping
    /// policy, so nothing such a source hands over is dropped for lack of room.
    pub fn with_backpressure(mut self) -> Self {
        self.backpressure = true;
        self
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
        if let Some(f) = &mut self.filter
            && !f.passes(name)
        {
            return;
        }
        match normalize(timestamp, value, self.now) {
            Ok((mut timestamp, value)) => {
                if self.resolution > 0 {
                    // carbon: int(timestamp) // res * res (truncate, then floor-divide).
                    let res = self.resolution as i64;
                    timestamp = ((timestamp.trunc() as i64).div_euclid(res) * res) as f64;
                }
                // carbon's RelayProcessor normalises after the receiver's checks (lists,
                // timestamps), then routes and sends the normalised name.
                let name = match self.tags.as_mut() {
                    Some(t) => t.apply(name),
                    None => name,
                };
                let route = self.cache.route(name);
                if route.is_empty() {
                    self.drops.add(DropReason::NoDestination);
                    return;
                }
                self.accepted += 1;
                let pools = self.pipeline.pools.as_deref();
                let pool_of = |d: u16| pools.map_or(d, |p| p.representative(d));
                for (i, &dest) in route.iter().enumerate() {
                    // carbon sends to the *set* of destinations the router yields: a duplicate
                    // (RF=2 on a one-node ring, overlapping `continue` rules) gets one copy,
                    // and with pooled replicas so do two members of one pool.
                    let dest = pool_of(dest);
                    if route[..i].iter().any(|&d| pool_of(d) == dest) {
                        continue;
                    }
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
    ///
    /// This is where back-pressure happens: with policy `block`, or while a queue's hand-over
    /// buffer to its spill log is full, the call waits for room — a TCP connection then stops
    /// reading its socket, a Kinesis reader stops polling. UDP cannot wait: its datapoints
    /// that do not fit are dropped and counted (`queue_full`).
    pub async fn flush(&mut self) {
        let can_wait = self.source != Source::LineUdp;
        for (i, pending) in self.pending.iter_mut().enumerate() {
            if pending.is_empty() {
                continue;
            }
            let batch = pending.take();
            let target = match self.pipeline.pools.as_deref() {
                Some(pools) => {
                    least_loaded(pools.members(i as u16), &self.pipeline.queues).unwrap_or(i)
                }
                None => i,
            };
            if let Some(q) = self.pipeline.queues.get(target) {
                if !q.stats().is_connected() {
                    q.stats().add_queued_until_connected(batch.len() as u64);
                }
                if self.backpressure {
                    q.push_backpressure(batch).await;
                } else if can_wait {
                    q.push_wait(batch).await;
                } else {
                    q.push(batch);
                }
            }
        }
        if let Some(f) = &mut self.filter {
            if f.blacklisted > 0 || f.not_whitelisted > 0 {
                self.pipeline
                    .stats
                    .record_filtered(f.blacklisted, f.not_whitelisted);
                f.blacklisted = 0;
                f.not_whitelisted = 0;
            }
            f.refresh();
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

/// The pool member whose queue holds the fewest datapoints (the first of equals), as carbon's
/// `min(pool, key=queueSize)`; `None` for an empty pool.
fn least_loaded(members: &[u16], queues: &[Arc<DestinationQueue>]) -> Option<usize> {
    members
        .iter()
        .map(|&m| usize::from(m))
        .filter_map(|m| queues.get(m).map(|q| (q.queued(), m)))
        .min_by_key(|&(queued, _)| queued)
        .map(|(_, m)| m)
}

/// Seconds since the epoch as a float, like Python's `time.time()`.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
