//! Parse → route → queue: the glue every source shares.
//!
//! An [`Ingestor`] belongs to one connection (or one Kinesis shard reader, or one embedding
//! producer). It parses lines, normalises datapoints the way carbon's `metricReceived` does,
//! routes each name through the relay's shared route cache, and appends to one pending batch
//! per destination. [`Ingestor::flush`] moves the pending batches into the destination queues
//! and publishes the counters — once per read, never per datapoint.
//!
//! ## Feedback for the producer
//!
//! [`Ingestor::push`] says at once what became of a datapoint ([`Pushed`]): pending, pending
//! with a hint to flush, or dropped with its reason. [`Ingestor::flush`] says what the queues
//! did with the pending data ([`Flushed`]: queued, dropped by a full policy, or waited for
//! room), and [`Ingestor::receipt`] gives a [`Receipt`] that resolves once everything flushed
//! so far has left the destination queues. An `Ingestor` dropped with data still pending hands
//! it to the queues without waiting (a full queue then drops it, counted), so nothing vanishes
//! uncounted.

mod c_relay;
mod ingest_stats;
mod pending;
mod receipt;
pub(crate) mod routing;
mod source;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::aggregator::{Aggregation, Staged};
use crate::batch::{Batch, POINT_OVERHEAD};
use crate::filter::{NameFilter, SharedLists, Verdict};
use crate::protocol::pickle::PickleDecoder;
use crate::protocol::tags::TagNormalizer;
use crate::protocol::{DropCounts, DropReason, line, normalize};
use crate::protocol::{Point, RUN};
use crate::queue::{DestinationQueue, PushMode, PushOutcome};
use crate::router::{ReplicaPools, RouteCache, Router};

use c_relay::CRelayLines;
use pending::{MAX_PENDING_BATCH_NAME_BYTES, Pending};

pub use ingest_stats::{IngestSnapshot, IngestStats, SourceSnapshot};
pub use receipt::{Delivery, Receipt};
pub(crate) use routing::Routing;
pub(crate) use routing::RoutingCell;
pub use source::Source;

/// Pending bytes (names plus per-datapoint overhead, over all destinations) past which
/// [`Ingestor::push`] answers [`Pushed::FlushNow`].
pub const FLUSH_HINT_BYTES: usize = 4 << 20;

/// Longest metric name a [`Pipeline`] accepts unless told otherwise (`listen.max_name_length`).
pub(crate) const DEFAULT_MAX_NAME_LENGTH: usize = 4096;

/// The shortest plaintext line, `a 1 1` and its newline: a line of `n` bytes holds a name of
/// at most `n − 5` bytes, so one copy of it pends at most `n + POINT_OVERHEAD − 5` bytes, at
/// most `(POINT_OVERHEAD + 1) / SHORTEST_LINE` per byte ([`Ingestor::read_room`]).
const SHORTEST_LINE: usize = 6;

/// Datapoints per destination, on average, past which a socket reader flushes rather than
/// reading ahead ([`Ingestor::read_room`]).
const READ_AHEAD_BATCH: usize = 512;

/// How far ahead of the datapoint being routed its route-cache index slot is prefetched…
const SLOTS_AHEAD: usize = 16;
/// …and its entry (which needs the slot).
const ENTRIES_AHEAD: usize = 8;

/// What every [`Ingestor`] shares: the current routing generation (`ingest::routing`) and the ingest
/// counters. Cheap to clone; a configuration reload installs a new generation in it.
///
/// The name caches belong to the generation and are shared by every ingestor: the route cache
/// (bounded by `router.route_cache_bytes`) and, when those features are on, the list-verdict
/// cache and the tag-normalisation memo (a quarter of that budget each). Memory for names is
/// thus bounded by configuration however many connections send however many names.
#[derive(Clone, Debug)]
pub struct Pipeline {
    pub(crate) routing: Arc<RoutingCell>,
    pub(crate) stats: Arc<IngestStats>,
}

impl Pipeline {
    /// Assembles a pipeline from its parts; `queues` are indexed like `router.destinations()`.
    /// Routes are cached in a [`RouteCache`] of `route_cache_bytes` (0: no cache).
    pub fn new(
        router: Arc<Router>,
        queues: Arc<[Arc<DestinationQueue>]>,
        stats: Arc<IngestStats>,
        route_cache_bytes: usize,
    ) -> Self {
        Self {
            routing: Arc::new(RoutingCell::new(Routing::new(
                router,
                queues,
                route_cache_bytes,
            ))),
            stats,
        }
    }

    /// Changes the current generation's settings (building a pipeline, before any ingestor).
    fn with_routing(self, change: impl FnOnce(&mut Routing)) -> Self {
        let mut next = self.routing.load().copy();
        change(&mut next);
        self.routing.install(next);
        self
    }

    /// Drops (and counts as `name_too_long`) names longer than `bytes`, whatever the source
    /// (`listen.max_name_length`; default [`DEFAULT_MAX_NAME_LENGTH`]).
    pub fn with_max_name_length(self, bytes: usize) -> Self {
        self.with_routing(|r| r.max_name_length = bytes)
    }

    /// Pools destinations sharing `host:port` (carbon's `DESTINATION_POOL_REPLICAS`): a
    /// datapoint routed to any member goes once, to the member with the shortest queue.
    pub fn with_replica_pools(self, on: bool) -> Self {
        self.with_routing(|r| {
            r.pools = if on {
                ReplicaPools::new(r.router.destinations()).map(Arc::new)
            } else {
                None
            };
        })
    }

    /// Runs received datapoints through carbon-aggregator's stage (rewrite, aggregate,
    /// forward) before routing.
    pub fn with_aggregation(self, aggregation: Arc<Aggregation>) -> Self {
        self.with_routing(|r| r.aggregation = Some(aggregation))
    }

    /// Filters received names through carbon's whitelist/blacklist (`USE_WHITELIST`).
    pub fn with_lists(self, lists: Arc<SharedLists>) -> Self {
        self.with_routing(|r| r.lists = Some(lists))
    }

    /// Rounds received timestamps down to a multiple of `seconds` (carbon's
    /// `MIN_TIMESTAMP_RESOLUTION`; 0 = off).
    pub fn with_min_timestamp_resolution(self, seconds: u64) -> Self {
        self.with_routing(|r| r.min_timestamp_resolution = seconds)
    }

    /// Routes and sends tagged names in carbon's normalised form (`TAG_RELAY_NORMALIZED`):
    /// tags sorted, leading `~` removed, OpenMetrics `name{tag="v"}` rewritten.
    pub fn with_tag_normalization(self, on: bool) -> Self {
        self.with_routing(|r| r.tag_relay_normalized = on)
    }

    /// A new ingestor for one producer.
    pub fn ingestor(&self, source: Source) -> Ingestor {
        Ingestor::new(self.clone(), source)
    }

    /// The current routing generation.
    pub fn routing(&self) -> Arc<Routing> {
        self.routing.load()
    }

    /// The current generation's router.
    pub fn router(&self) -> Arc<Router> {
        self.routing.load().router.clone()
    }

    /// The route cache every ingestor of the current generation shares.
    pub fn route_cache(&self) -> Arc<RouteCache> {
        self.routing.load().routes.clone()
    }

    /// The current generation's destination queues, indexed like `router().destinations()`.
    pub fn queues(&self) -> Arc<[Arc<DestinationQueue>]> {
        self.routing.load().queues.clone()
    }

    /// Makes `routing` the current generation (a configuration reload); returns the one it
    /// replaced. Ingestors move to it at their next flush boundary.
    pub fn install(&self, routing: Routing) -> Arc<Routing> {
        self.routing.install(routing)
    }

    /// The ingest side's counters.
    pub fn stats(&self) -> &Arc<IngestStats> {
        &self.stats
    }

    /// True while any destination queue holds more than `fraction` of its datapoint bound.
    /// Pull sources (Kinesis) stop reading while it holds, instead of pushing datapoints a
    /// full queue would drop; one lock per queue, meant to be called once per batch.
    pub fn backlogged(&self, fraction: f64) -> bool {
        self.queues().iter().any(|q| {
            let limit = q.limits().max_datapoints as f64 * fraction;
            q.len() as f64 > limit
        })
    }
}

/// What [`Ingestor::push`] did with a datapoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pushed {
    /// Pending: the next [`flush`](Ingestor::flush) hands it to its destination queues.
    Accepted,
    /// Pending, and the ingestor holds more than [`FLUSH_HINT_BYTES`]: flush before pushing
    /// much more (the ingestor keeps taking datapoints; this is its memory talking).
    FlushNow,
    /// Rejected and counted with this reason (`invalidDatapoints`).
    Invalid(DropReason),
    /// Dropped by carbon's blacklist (counted as `blacklistMatches`).
    Blacklisted,
    /// Dropped for not being on carbon's whitelist (counted as `whitelistRejects`).
    NotWhitelisted,
}

impl Pushed {
    /// True when the datapoint is pending for its destinations.
    pub fn is_accepted(self) -> bool {
        matches!(self, Pushed::Accepted | Pushed::FlushNow)
    }
}

/// What one [`Ingestor::flush`] did with the pending datapoints. Counts are datapoint copies:
/// with replication a datapoint counts once per destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Flushed {
    /// Copies taken by the destination queues (memory or spill log).
    pub queued: u64,
    /// Copies a full queue dropped (`drop_newest`, the spill fallback, or a closed queue),
    /// counted per destination with the reason.
    pub dropped: u64,
    /// Older queued copies evicted to make room (`drop_oldest`).
    pub evicted: u64,
    /// The flush waited for room in a queue (policy `block`, back-pressure, or a full
    /// hand-over buffer to the spill log).
    pub waited: bool,
}

impl Flushed {
    fn add(&mut self, o: &PushOutcome) {
        self.queued += o.accepted as u64;
        self.dropped += o.dropped as u64;
        self.evicted += o.evicted as u64;
        self.waited |= o.waited;
    }
}

/// Per-producer parse/route/batch state. Not shared between tasks.
#[derive(Debug)]
pub struct Ingestor {
    pipeline: Pipeline,
    /// The generation pending batches are routed by, and its version.
    routing: Arc<Routing>,
    version: u64,
    /// True between the first datapoint after a flush and the end of the next flush: the
    /// ingestor is counted as busy in `routing`.
    entered: bool,
    /// Receipt marks of queues no longer in `routing` (left behind by a generation change).
    earlier_marks: Vec<(Arc<DestinationQueue>, u64)>,
    /// The route of the datapoint being pushed (reused).
    route: Vec<u16>,
    /// The routes of a run of datapoints being pushed (reused, see [`push_run`](Self::push_run)).
    run_routes: Vec<u16>,
    pending: Pending,
    /// Batches on their way to the queues during a flush (reused).
    handing: Vec<(usize, Batch)>,
    /// Per destination, the queue position after everything flushed so far.
    marks: Vec<u64>,
    max_name_length: usize,
    source: Source,
    mode: PushMode,
    accepted: u64,
    drops: DropCounts,
    now: f64,
    filter: Option<NameFilter>,
    resolution: u64,
    tags: Option<TagNormalizer>,
    /// carbon-aggregator's stage, for received (not internal) datapoints.
    aggregation: Option<Arc<Aggregation>>,
    /// Datapoints waiting for the aggregator (fed at the next flush).
    staged: Staged,
    /// The decoder of [`pickle_payload`](Self::pickle_payload) and its drop tally, made at its
    /// first use and kept (its scratch space) for the next.
    pickle: Option<Box<(PickleDecoder, DropCounts)>>,
    /// The line router of a carbon-c-relay configuration: lines go through it instead of
    /// being parsed into datapoints.
    c_relay: Option<Box<CRelayLines>>,
    /// The sender's address, given by the receiver only when the carbon-c-relay program has
    /// a `file ip` cluster ([`wants_client`](Self::wants_client)).
    client: Option<std::net::IpAddr>,
}

/// What one [`Ingestor::message`] held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageLines {
    /// Non-empty lines.
    pub lines: u64,
    /// Lines rejected (unparseable, too long, filtered as invalid), each counted with its
    /// reason.
    pub invalid: u64,
}

impl Ingestor {
    fn new(pipeline: Pipeline, source: Source) -> Self {
        let routing = pipeline.routing.load();
        let version = pipeline.routing.version();
        let n = routing.queues.len();
        let c_relay = CRelayLines::for_routing(&routing, None);
        Self {
            filter: Self::filter_for(&routing, source),
            resolution: Self::resolution_for(&routing, source),
            tags: Self::tags_for(&routing),
            aggregation: Self::aggregation_for(&routing, source),
            staged: Staged::default(),
            route: Vec::new(),
            run_routes: Vec::new(),
            pending: Pending::new(n),
            handing: Vec::new(),
            marks: vec![0; n],
            earlier_marks: Vec::new(),
            max_name_length: routing.max_name_length,
            mode: if source == Source::LineUdp {
                PushMode::NoWait
            } else {
                PushMode::Wait
            },
            source,
            routing,
            version,
            entered: false,
            pipeline,
            accepted: 0,
            drops: DropCounts::default(),
            now: unix_now(),
            pickle: None,
            c_relay,
            client: None,
        }
    }

    // carbon applies the lists and the resolution in `MetricReceiver.metricReceived`; its own
    // metrics (`metricGenerated`) bypass both.
    fn filter_for(routing: &Routing, source: Source) -> Option<NameFilter> {
        routing
            .lists
            .clone()
            .filter(|_| source != Source::Internal)
            .map(|l| NameFilter::new(l, routing.verdicts.clone()))
    }

    fn resolution_for(routing: &Routing, source: Source) -> u64 {
        if source == Source::Internal {
            0
        } else {
            routing.min_timestamp_resolution
        }
    }

    // carbon's generated datapoints (aggregates, self-metrics) take a pipeline that only
    // relays.
    fn aggregation_for(routing: &Routing, source: Source) -> Option<Arc<Aggregation>> {
        routing
            .aggregation
            .clone()
            .filter(|_| source != Source::Internal)
    }

    fn tags_for(routing: &Routing) -> Option<TagNormalizer> {
        routing
            .tag_relay_normalized
            .then(|| TagNormalizer::new(routing.tag_memo.clone()))
    }

    /// Moves to `routing` (nothing is pending): per-destination state follows it; the name
    /// caches are the generation's (a reload keeps them when what they cache is unchanged).
    fn adopt(&mut self, routing: Arc<Routing>, version: u64) {
        let n = routing.queues.len();
        // Receipt marks follow their queue: kept where the queue is still there, set aside
        // where it is not.
        let mut marks = vec![0; n];
        let old = self
            .marks
            .iter()
            .zip(self.routing.queues.iter())
            .filter(|(m, _)| **m > 0)
            .map(|(m, q)| (q.clone(), *m))
            .chain(std::mem::take(&mut self.earlier_marks))
            .collect::<Vec<_>>();
        for (q, m) in old {
            match routing.queues.iter().position(|nq| Arc::ptr_eq(nq, &q)) {
                Some(i) => marks[i] = marks[i].max(m),
                // Kept for receipts until it settles, so reloads do not pile them up.
                None if !q.is_settled(m) => self.earlier_marks.push((q, m)),
                None => {}
            }
        }
        self.marks = marks;
        // The filter's counters were published by the flush before: nothing is lost.
        self.filter = Self::filter_for(&routing, self.source);
        self.resolution = Self::resolution_for(&routing, self.source);
        self.max_name_length = routing.max_name_length;
        self.tags = Self::tags_for(&routing);
        self.aggregation = Self::aggregation_for(&routing, self.source);
        self.c_relay = CRelayLines::for_routing(&routing, self.client);
        self.pending = Pending::new(n);
        self.routing = routing;
        self.version = version;
    }

    /// Before the first datapoint after a flush: enter the current generation (moving to it
    /// if a reload installed a new one).
    #[cold]
    fn enter(&mut self) {
        let held = (self.routing.clone(), self.version);
        let (routing, version) = self.pipeline.routing.enter(held);
        if version != self.version {
            self.adopt(routing, version);
        }
        self.entered = true;
    }

    /// After a flush: the pending batches are in the generation's queues.
    fn leave(&mut self) {
        if self.entered {
            self.routing.leave();
            self.entered = false;
        }
    }

    /// For sources that can pause (Kinesis, an embedder reading from a durable log): make
    /// [`flush`](Self::flush) wait for room in a full queue instead of applying a dropping
    /// policy, so nothing such a source hands over is dropped for lack of room.
    pub fn with_backpressure(mut self) -> Self {
        self.mode = PushMode::Backpressure;
        self
    }

    /// True when the carbon-c-relay program has a `file ip` cluster: only then does a
    /// receiver look up and give the sender's address ([`set_client`](Self::set_client)),
    /// so other configurations pay nothing for it.
    pub(crate) fn wants_client(&self) -> bool {
        self.c_relay.as_ref().is_some_and(|c| c.wants_client())
    }

    /// The sender's address (`None`: a Unix socket or another listener), written before
    /// each line a `file ip` cluster takes.
    pub(crate) fn set_client(&mut self, client: Option<std::net::IpAddr>) {
        self.client = client;
        if let Some(c) = &mut self.c_relay {
            c.set_client(client);
        }
    }

    /// The carbon-c-relay line router, taken out (to be put back), once the ingestor has
    /// entered the current generation; `None` when that generation routes datapoints.
    fn c_relay_entered(&mut self) -> Option<Box<CRelayLines>> {
        self.c_relay.as_ref()?;
        if !self.entered {
            self.enter();
        }
        self.c_relay.take()
    }

    /// Parses one plaintext line (without `\n`) and routes it, or counts why not.
    #[inline]
    pub fn line(&mut self, text: &[u8]) -> Pushed {
        if let Some(mut c) = self.c_relay_entered() {
            let pushed = self.c_relay_line(&mut c, text);
            Self::c_relay_aggregate(&mut c);
            self.c_relay = Some(c);
            return pushed;
        }
        match line::parse_line(text) {
            Ok((name, timestamp, value)) => self.push(name, timestamp, value),
            Err(reason) => self.reject(reason),
        }
    }

    /// Parses and routes a run of framed lines exactly as [`line`](Self::line) would one by
    /// one (same counters, same order); their route lookups are batched as in
    /// [`push_run`](Self::push_run). For socket readers, which flush after every read (the
    /// per-line [`Pushed`] is not reported).
    pub(crate) fn lines(&mut self, lines: &[Result<&[u8], DropReason>]) {
        if !lines.is_empty()
            && let Some(mut c) = self.c_relay_entered()
        {
            for l in lines {
                let _ = match l {
                    Ok(text) => self.c_relay_line(&mut c, text),
                    Err(reason) => self.reject(*reason),
                };
            }
            Self::c_relay_aggregate(&mut c);
            self.c_relay = Some(c);
            return;
        }
        // Without tags or aggregation, each line is parsed and checked in one pass and the
        // run goes straight to routing (`push_run` would check it in a second pass).
        let direct = self.tags.is_none() && self.aggregation.is_none();
        for chunk in lines.chunks(RUN) {
            let mut points: [Point<'_>; RUN] = [(&[], 0.0, 0.0); RUN];
            let mut n = 0;
            for l in chunk {
                match l.and_then(line::parse_line_noting_plain) {
                    Ok(((name, timestamp, value), plain)) => {
                        let point = if direct {
                            match self.check_noting_plain(name, timestamp, value, plain) {
                                Ok((timestamp, value)) => (name, timestamp, value),
                                Err(_) => continue,
                            }
                        } else {
                            (name, timestamp, value)
                        };
                        if let Some(slot) = points.get_mut(n) {
                            *slot = point;
                            n += 1;
                        }
                    }
                    Err(reason) => {
                        self.reject(reason);
                    }
                }
            }
            if direct {
                self.route_run(&points[..n]);
            } else {
                self.push_run(&points[..n]);
            }
        }
    }

    /// Routes a run of datapoints `(name, timestamp, value)` exactly as [`push`](Self::push)
    /// would one by one (same destinations, counters and order), but in three passes over
    /// each stretch of up to 128: the route-cache lookups, software-pipelined (while one
    /// datapoint is looked up, the cache memory of the ones a few places ahead is already on
    /// its way, so the run waits for memory about once rather than two or three times per
    /// datapoint); then the names the cache missed, routed together (with `carbon_ch`, their
    /// MD5s eight or sixteen at a time); then every datapoint, in order, into the pending
    /// batches. For socket readers, which flush after every read (the per-datapoint
    /// [`Pushed`] is not reported).
    pub(crate) fn push_run(&mut self, points: &[(&[u8], f64, f64)]) {
        if self.tags.is_some() || self.aggregation.is_some() || points.len() == 1 {
            // The normalised name lives in the normaliser, one at a time; and a run of one
            // (the protobuf decoder's) has nothing to pipeline.
            for &(name, timestamp, value) in points {
                let _ = self.push(name, timestamp, value);
            }
            return;
        }
        for chunk in points.chunks(RUN) {
            let mut checked: [Point<'_>; RUN] = [(&[], 0.0, 0.0); RUN];
            let mut n = 0;
            for &(name, timestamp, value) in chunk {
                if let (Ok((timestamp, value)), Some(slot)) =
                    (self.check(name, timestamp, value), checked.get_mut(n))
                {
                    *slot = (name, timestamp, value);
                    n += 1;
                }
            }
            self.route_run(&checked[..n]);
        }
    }

    /// Routes checked datapoints (no tagged names) into the pending batches in stretches of
    /// [`RUN`], as [`push_run`](Self::push_run) describes.
    fn route_run(&mut self, points: &[Point<'_>]) {
        for checked in points.chunks(RUN) {
            let n = checked.len();
            let mut hashes = [0u64; RUN];
            // One reference count per run (after `check`, which may have moved the ingestor
            // to a new generation), so that routing (which needs `&mut self`) can prefetch
            // through it.
            let routes = Arc::clone(&self.routing.routes);
            // Names the cache would not hold are routed by computation, with the misses
            // (`RouteCache::computes`); the others are hashed for the cache.
            let mut computed = [false; RUN];
            let mut all_computed = true;
            for ((h, c), p) in hashes.iter_mut().zip(&mut computed).zip(checked) {
                *c = routes.computes(p.0);
                if !*c {
                    *h = routes.hash(p.0);
                    all_computed = false;
                }
            }
            if all_computed {
                // Nothing to look up or store (`carbon_ch` names up to 119 bytes, the common
                // run): every name is routed by computation, together.
                self.route_computed(&routes, checked);
                continue;
            }
            let hashes = &hashes[..n];
            let looked_up = |i: usize| computed.get(i).is_some_and(|&c| !c);
            // Index slots SLOTS_AHEAD datapoints ahead, entries (which need their slot)
            // ENTRIES_AHEAD ahead.
            for (i, &h) in hashes.iter().enumerate().take(SLOTS_AHEAD) {
                if looked_up(i) {
                    routes.prefetch_slot(h);
                }
            }
            for (i, (p, &h)) in checked.iter().zip(hashes).enumerate().take(ENTRIES_AHEAD) {
                if looked_up(i) {
                    routes.prefetch_entry(h, p.0.len());
                }
            }
            // First the lookups, hits' routes into `out`; then the misses routed together
            // (their MD5s computed side by side); then every datapoint, in order, into the
            // pending batches.
            let mut out = std::mem::take(&mut self.run_routes);
            out.clear();
            let mut spans = [(0u32, 0u32); RUN];
            let mut missed = [0usize; RUN];
            let mut miss_names: [&[u8]; RUN] = [&[]; RUN];
            let mut miss_hashes = [0u64; RUN];
            let mut miss_admit = [false; RUN];
            let mut misses = 0;
            for (i, (&(name, _, _), &hash)) in checked.iter().zip(hashes).enumerate() {
                if let Some(&h) = hashes.get(i + SLOTS_AHEAD)
                    && looked_up(i + SLOTS_AHEAD)
                {
                    routes.prefetch_slot(h);
                }
                if let (Some(p), Some(&h)) = (
                    checked.get(i + ENTRIES_AHEAD),
                    hashes.get(i + ENTRIES_AHEAD),
                ) && looked_up(i + ENTRIES_AHEAD)
                {
                    routes.prefetch_entry(h, p.0.len());
                }
                if name.len() > MAX_PENDING_BATCH_NAME_BYTES {
                    // Dropped below, before any lookup (as `route` does).
                    continue;
                }
                let start = out.len();
                let lookup = if looked_up(i) {
                    routes.lookup_append(name, hash, &mut out)
                } else {
                    Some(false)
                };
                match lookup {
                    None => {
                        if let Some(s) = spans.get_mut(i) {
                            *s = (start as u32, (out.len() - start) as u32);
                        }
                    }
                    Some(admit) => {
                        if let (Some(m), Some(n), Some(h), Some(a)) = (
                            missed.get_mut(misses),
                            miss_names.get_mut(misses),
                            miss_hashes.get_mut(misses),
                            miss_admit.get_mut(misses),
                        ) {
                            (*m, *n, *h, *a) = (i, name, hash, admit);
                            misses += 1;
                        }
                    }
                }
            }
            if misses > 0 {
                let mut miss_spans = [(0u32, 0u32); RUN];
                routes.route_misses(
                    &miss_names[..misses],
                    &miss_hashes[..misses],
                    &miss_admit[..misses],
                    &mut out,
                    &mut miss_spans[..misses],
                );
                for (&i, &span) in missed[..misses].iter().zip(&miss_spans) {
                    if let Some(s) = spans.get_mut(i) {
                        *s = span;
                    }
                }
            }
            self.deliver_run(checked, &spans, out);
        }
    }

    /// [`route_run`](Self::route_run) for a stretch of at most [`RUN`] datapoints whose names
    /// the cache would not hold ([`RouteCache::computes`]): routed together, then delivered in
    /// order. Their names are at most 119 bytes, so none is too long for a batch.
    fn route_computed(&mut self, routes: &RouteCache, checked: &[Point<'_>]) {
        let mut names: [&[u8]; RUN] = [&[]; RUN];
        for (n, p) in names.iter_mut().zip(checked) {
            *n = p.0;
        }
        let n = checked.len().min(RUN);
        let mut spans = [(0u32, 0u32); RUN];
        let mut out = std::mem::take(&mut self.run_routes);
        out.clear();
        routes
            .router()
            .route_many(&names[..n], &mut out, &mut spans[..n]);
        self.deliver_run(checked, &spans, out);
    }

    /// Delivers a routed run in order: datapoint `i`'s destinations are `out[spans[i]]`;
    /// `out` is kept for the next run.
    #[inline]
    fn deliver_run(&mut self, checked: &[Point<'_>], spans: &[(u32, u32)], out: Vec<u16>) {
        for (&(name, timestamp, value), &(start, len)) in checked.iter().zip(spans) {
            let route = out
                .get(start as usize..(start + len) as usize)
                .unwrap_or_default();
            let _ = self.deliver(name, route, timestamp, value);
        }
        self.run_routes = out;
    }

    /// Routes one datapoint after carbon's normalisation (NaN dropped, `-1` = now) into the
    /// pending batches, or counts why not.
    #[inline]
    pub fn push(&mut self, name: &[u8], timestamp: f64, value: f64) -> Pushed {
        let (timestamp, value) = match self.check(name, timestamp, value) {
            Ok(tv) => tv,
            Err(pushed) => return pushed,
        };
        if self.aggregation.is_some() {
            // Rewritten, aggregated and forwarded at the next flush, under one lock.
            self.staged.push(name, timestamp, value);
            self.accepted += 1;
            return Pushed::Accepted;
        }
        self.push_checked(name, timestamp, value)
    }

    /// Routes a checked datapoint (normalising a tagged name first).
    fn push_checked(&mut self, name: &[u8], timestamp: f64, value: f64) -> Pushed {
        // carbon's RelayProcessor normalises after the receiver's checks (lists,
        // timestamps), then routes and sends the normalised name.
        let Some(mut tags) = self.tags.take() else {
            let hash = self.routing.routes.hash(name);
            return self.route(name, hash, timestamp, value);
        };
        // The normalised name borrows the normaliser, which is set aside meanwhile (a move of
        // a few words, no allocation).
        let normalized = tags.apply(name);
        let hash = self.routing.routes.hash(normalized);
        let pushed = self.route(normalized, hash, timestamp, value);
        self.tags = Some(tags);
        pushed
    }

    /// carbon's checks before routing (`MetricReceiver.metricReceived`): a name, the lists,
    /// timestamp and value normalisation, the timestamp resolution. Enters the current
    /// routing generation first when nothing is pending.
    #[inline]
    fn check(&mut self, name: &[u8], timestamp: f64, value: f64) -> Result<(f64, f64), Pushed> {
        self.check_noting_plain(name, timestamp, value, false)
    }

    /// [`check`](Self::check) for a name the line parser already found to be plain ASCII
    /// without whitespace (`plain`), which then is not scanned for whitespace again.
    #[inline]
    fn check_noting_plain(
        &mut self,
        name: &[u8],
        timestamp: f64,
        value: f64,
        plain: bool,
    ) -> Result<(f64, f64), Pushed> {
        if name.is_empty() {
            return Err(self.reject(DropReason::EmptyName));
        }
        if !self.entered {
            self.enter();
        }
        // Before the lists, the caches and the batches: a hostile name costs nothing more.
        if name.len() > self.max_name_length {
            return Err(self.reject(DropReason::NameTooLong));
        }
        // A name the plaintext protocol could not carry: a line destination would write it as
        // two metrics, one named by the sender. The relay's own names (aggregates, whose
        // output template may write `str(groupdict)` as carbon does) are the configuration's,
        // not a sender's: they pass as carbon sends them.
        if !plain && line::has_py_space(name) && self.source != Source::Internal {
            return Err(self.reject(DropReason::WhitespaceInName));
        }
        if let Some(f) = &mut self.filter {
            match f.check(name) {
                Verdict::Pass => {}
                Verdict::Blacklisted => return Err(Pushed::Blacklisted),
                Verdict::NotWhitelisted => return Err(Pushed::NotWhitelisted),
            }
        }
        let (mut timestamp, value) = match normalize(timestamp, value, self.now) {
            Ok(tv) => tv,
            Err(reason) => return Err(self.reject(reason)),
        };
        if self.resolution > 0 {
            // carbon: int(timestamp) // res * res (truncate, then floor-divide).
            let res = self.resolution as i64;
            timestamp = ((timestamp.trunc() as i64).div_euclid(res) * res) as f64;
        }
        Ok((timestamp, value))
    }

    /// Routes a checked datapoint whose route-cache hash is `hash` into the pending batches.
    #[inline]
    fn route(&mut self, name: &[u8], hash: u64, timestamp: f64, value: f64) -> Pushed {
        let mut route = std::mem::take(&mut self.route);
        if name.len() <= MAX_PENDING_BATCH_NAME_BYTES {
            self.routing.routes.route_hashed(name, hash, &mut route);
        }
        let pushed = self.deliver(name, &route, timestamp, value);
        self.route = route;
        pushed
    }

    /// Puts a checked datapoint on its `route` into the pending batches, or counts why not
    /// (a name too long for a batch, before any lookup; no destination).
    #[inline]
    fn deliver(&mut self, name: &[u8], route: &[u16], timestamp: f64, value: f64) -> Pushed {
        if name.len() > MAX_PENDING_BATCH_NAME_BYTES {
            self.drops.add(DropReason::TooLong);
            return Pushed::Invalid(DropReason::TooLong);
        }
        if route.is_empty() {
            self.drops.add(DropReason::NoDestination);
            return Pushed::Invalid(DropReason::NoDestination);
        }
        self.accepted += 1;
        let pools = self.routing.pools.as_deref();
        let queues = &self.routing.queues;
        Self::hint(
            self.pending
                .append(route, pools, queues, name, timestamp, value),
        )
    }

    #[inline]
    fn hint(pending_bytes: usize) -> Pushed {
        if pending_bytes > FLUSH_HINT_BYTES {
            Pushed::FlushNow
        } else {
            Pushed::Accepted
        }
    }

    /// Feeds one complete message of Graphite plaintext lines (a UDP datagram, a stream
    /// record): carbon's datagram rules, split on `\n` and `\r` (CRLF works), empty lines
    /// skipped, the last line needs no newline; a line over `max_line` bytes is counted as
    /// `too_long`.
    pub fn message(&mut self, text: &[u8], max_line: usize) -> MessageLines {
        let mut seen = MessageLines::default();
        for line in text.split(|&b| b == b'\n' || b == b'\r') {
            if line.is_empty() {
                continue;
            }
            seen.lines += 1;
            let pushed = if line.len() > max_line {
                self.reject(DropReason::TooLong)
            } else {
                self.line(line)
            };
            if matches!(pushed, Pushed::Invalid(_)) {
                seen.invalid += 1;
            }
        }
        seen
    }

    /// Feeds one carbon pickle payload, a list of `(name, (timestamp, value))` without the
    /// 4-byte length prefix of the TCP protocol (a stream message). Entries that are not
    /// datapoints are counted with their reasons; a payload that is not a valid pickle is
    /// counted once and given as the error. `Ok` holds the entries seen.
    pub fn pickle_payload(&mut self, payload: &[u8]) -> Result<u64, DropReason> {
        if payload.is_empty() {
            return Ok(0);
        }
        let mut decoder = self.pickle.take().unwrap_or_default();
        let (pickle, drops) = &mut *decoder;
        let decoded = pickle.decode_batched(payload, drops, |run| self.push_run(run));
        if !drops.is_empty() {
            self.add_drops(drops);
            drops.clear();
        }
        self.pickle = Some(decoder);
        match decoded {
            Ok(entries) => Ok(entries as u64),
            Err(reason) => {
                self.reject(reason);
                Err(reason)
            }
        }
    }

    /// Counts a datapoint (or frame, or line) rejected before it reached the parser, with its
    /// reason (the `reason` label of the invalid-datapoint counter).
    #[inline]
    pub fn reject(&mut self, reason: DropReason) -> Pushed {
        self.drops.add(reason);
        Pushed::Invalid(reason)
    }

    /// Adds rejections a decoder tallied itself.
    pub(crate) fn add_drops(&mut self, drops: &DropCounts) {
        for (mine, theirs) in self.drops.0.iter_mut().zip(drops.0.iter()) {
            *mine += theirs;
        }
    }

    /// Datapoints accepted since the last flush.
    pub fn pending_datapoints(&self) -> u64 {
        self.accepted
    }

    /// How many bytes of plaintext (`buffered` of them already received and not yet parsed)
    /// a socket reader whose reads take up to `read` bytes may parse before its next flush,
    /// so that what waits for the flush stays within what one read's datapoints can hold at
    /// most: `read` bytes of the shortest lines, once per destination a datapoint goes to. A
    /// reader whose client has more waiting reads it before flushing while there is room, so
    /// a flush hands each queue a larger batch (fewer batches, locks and wake-ups per
    /// datapoint).
    ///
    /// With `w` the destinations per datapoint seen since the flush (at most `W`, the most
    /// any datapoint goes to), reading `b` more bytes is allowed while
    /// `pending + b·k·w ≤ read·k·w`, `k` being the most one copy of a line pends per
    /// byte; afterwards `pending ≤ read·k·w + b·k·(W − w) ≤ read·k·W`, the
    /// bound of one read. Zero where names can change length or lines do not pend as
    /// datapoints (tag normalisation, aggregation, a carbon-c-relay configuration), and once
    /// the batches average [`READ_AHEAD_BATCH`] datapoints per destination: reading ahead
    /// pays where one read spreads over many destinations in small batches, and with few
    /// destinations it would only hold more per connection (a thousand clients ahead of the
    /// relay would each pend several reads).
    pub(crate) fn read_room(&self, read: usize, buffered: usize) -> usize {
        if self.tags.is_some() || self.aggregation.is_some() || self.c_relay.is_some() {
            return 0;
        }
        let copies = self.pending.copies();
        if copies >= self.pending.destinations().saturating_mul(READ_AHEAD_BATCH) {
            return 0;
        }
        let spent = if copies == 0 {
            0
        } else {
            // pending / (k·w), with k = (POINT_OVERHEAD + 1) / SHORTEST_LINE and
            // w = copies / accepted; in u128 so that no product overflows.
            let accepted = usize::try_from(self.accepted).unwrap_or(usize::MAX);
            let num = self.pending.bytes() as u128 * SHORTEST_LINE as u128 * accepted as u128;
            let den = (POINT_OVERHEAD as u128 + 1) * copies as u128;
            usize::try_from(num.div_ceil(den)).unwrap_or(usize::MAX)
        };
        read.saturating_sub(spent).saturating_sub(buffered)
    }

    /// Moves pending batches into the destination queues and publishes counters.
    ///
    /// This is where back-pressure happens: with policy `block`, or while a queue's hand-over
    /// buffer to its spill log is full, the call waits for room — a TCP connection then stops
    /// reading its socket, a Kinesis reader stops polling. UDP cannot wait: its datapoints
    /// that do not fit are dropped and counted (`queue_full`).
    pub async fn flush(&mut self) -> Flushed {
        self.aggregate();
        let mut out = Flushed::default();
        let mut batches = std::mem::take(&mut self.handing);
        self.pending.take_into(&mut batches, &self.routing.queues);
        for (dest, batch) in batches.drain(..) {
            self.hand_over(dest, batch, &mut out).await;
        }
        self.handing = batches;
        self.leave();
        self.publish_counters();
        self.now = unix_now();
        out
    }

    /// Drops everything fed since the last flush, without handing it to the queues: for a
    /// source that finds, before delivering, that what it read is no longer its to deliver
    /// (a stream shard or partition another reader now owns, which reads it again from the
    /// last committed position). Nothing is counted, neither as received nor as dropped: for
    /// the relay it was never read. Returns the datapoints dropped.
    pub fn discard(&mut self) -> u64 {
        let mut batches = std::mem::take(&mut self.handing);
        self.pending.take_into(&mut batches, &self.routing.queues);
        for (dest, batch) in batches.drain(..) {
            if let Some(q) = self.routing.queues.get(dest) {
                q.recycle([batch]);
            }
        }
        self.handing = batches;
        if !self.staged.is_empty() {
            self.staged = Staged::default();
        }
        let discarded = self.accepted;
        self.accepted = 0;
        self.drops.clear();
        self.leave();
        discarded
    }

    /// Feeds the staged datapoints to the aggregator and routes those it passes on.
    fn aggregate(&mut self) {
        let Some(aggregation) = self.aggregation.clone() else {
            return;
        };
        if self.staged.is_empty() {
            return;
        }
        let mut staged = std::mem::take(&mut self.staged);
        // Counted as received when staged; routing the passed-on ones counts only its drops.
        let accepted = self.accepted;
        staged.process(&aggregation, &mut |run| {
            if self.tags.is_some() {
                // The normalised name lives in the normaliser, one at a time.
                for &(name, timestamp, value) in run {
                    let _ = self.push_checked(name, timestamp, value);
                }
            } else {
                self.route_run(run);
            }
        });
        self.accepted = accepted;
        self.staged = staged;
    }

    async fn hand_over(&mut self, dest: usize, batch: Batch, out: &mut Flushed) {
        // With pooled replicas the batch goes to the pool's least-loaded member.
        let dest = match self.routing.pools.as_deref() {
            Some(pools) => u16::try_from(dest)
                .ok()
                .and_then(|d| least_loaded(pools.members(d), &self.routing.queues))
                .unwrap_or(dest),
            None => dest,
        };
        let Some(q) = self.routing.queues.get(dest) else {
            return;
        };
        if !q.stats().is_connected() {
            q.stats().add_queued_until_connected(batch.len() as u64);
        }
        let o = q.push_with(batch, self.mode).await;
        out.add(&o);
        if o.accepted > 0
            && let Some(m) = self.marks.get_mut(dest)
        {
            *m = (*m).max(o.mark);
        }
    }

    fn publish_counters(&mut self) {
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
    }

    /// A receipt for everything flushed so far: it resolves once all of it has left the
    /// destination queues (written to the destinations, or dropped and counted).
    pub fn receipt(&self) -> Receipt {
        Receipt::new(
            self.marks
                .iter()
                .zip(self.routing.queues.iter())
                .filter(|(m, _)| **m > 0)
                .map(|(m, q)| (q.clone(), *m))
                .chain(self.earlier_marks.iter().cloned())
                .collect(),
        )
    }
}

impl Drop for Ingestor {
    // Pending data is handed to the queues without waiting, so it is queued or counted as
    // dropped (`queue_full`), never lost uncounted.
    fn drop(&mut self) {
        self.aggregate();
        let mut batches = std::mem::take(&mut self.handing);
        self.pending.take_into(&mut batches, &self.routing.queues);
        for (dest, batch) in batches {
            if let Some(q) = self.routing.queues.get(dest) {
                let o = q.push(batch);
                if o.dropped > 0 {
                    tracing::warn!(
                        destination = q.stats().name(),
                        datapoints = o.dropped,
                        "an ingestor dropped without a final flush: its queue had no room"
                    );
                }
            }
        }
        self.leave();
        self.publish_counters();
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
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests;
