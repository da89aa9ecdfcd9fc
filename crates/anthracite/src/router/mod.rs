//! Routing: which destinations get a datapoint, exactly as carbon 1.1.10 decides.
//!
//! A [`Router`] is built once from a [`RouterSpec`] and shared (`Arc`) by every connection.
//! It answers with destination *indices* into [`RouterSpec::destinations`], in the order carbon
//! yields them, duplicates included where carbon yields duplicates (`anthracite route` prints
//! them). Delivery goes to each distinct destination once, as carbon's
//! `CarbonClientManager.getFactories` collects the destinations into a set.
//!
//! - [`hash`]: carbon's position hashes (`carbon_ch` MD5, `fnv1a_ch`, `mmh3_ch`) and the
//!   Python `str()` texts it hashes for ring nodes.
//! - [`ring`]: `ConsistentHashRing` (consistent-hashing) and `FastHashRing` (fast-hashing), and
//!   the table of precomputed preference lists that makes a lookup one hash plus a binary
//!   search.
//! - [`rules`]: `RELAY_METHOD = rules`.
//! - [`pool`]: [`ReplicaPools`], carbon's `DESTINATION_POOL_REPLICAS` (applied by the
//!   ingestor, after routing).
//! - [`cache`]: [`RouteCache`], the relay-wide name → route cache that keeps the rules'
//!   regexes and long names' hashes off the path of repeated names.
//! - [`md5x`]: `carbon_ch` positions of eight names at once (AVX2 or portable lanes).
//!
//! - [`aggregation`]: the aggregated routers (`aggregated-consistent-hashing`,
//!   `fast-aggregated-hashing`): carbon resolves a name to its aggregate names with the
//!   aggregation rules, routes each through the plain hashing router and yields the *set* of
//!   destinations ([`Strategy::Aggregated`]); the cache stays valid because the result is still
//!   a pure function of the name.

use std::fmt;
use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};

pub(crate) mod aggregation;
pub(crate) mod c_relay;
pub(crate) mod hash;
pub(crate) mod md5x;
pub(crate) mod pool;
pub(crate) mod ring;
pub(crate) mod route_cache;
pub(crate) mod rules;

pub use hash::{NodeKeys, carbon_hash};
pub(crate) use pool::ReplicaPools;
pub(crate) use ring::{ConsistentHashRing, FastHashOrder};
pub use route_cache::RouteCache;

use ring::{Node, Replication, RouteTable};
use rules::Rules;

use crate::pattern::PatternSet;

/// A destination as written in carbon's `DESTINATIONS`: `host:port[:instance]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct DestinationSpec {
    /// Host as written (no brackets for IPv6).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Optional instance name (part of the ring key; the port is not).
    pub instance: Option<String>,
}

/// Errors building a router or parsing a destination.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RouterError {
    /// Destination text is not `host:port[:instance]`.
    #[error("invalid destination {0:?}: expected host:port[:instance] or [ipv6]:port[:instance]")]
    BadDestination(String),
    /// A hashing router needs at least one destination.
    #[error("no destinations configured")]
    NoDestinations,
    /// More destinations than route indices (`u16`) can name.
    #[error("{0} destinations configured; at most 65535 are supported")]
    TooManyDestinations(usize),
    /// Two destinations share `(host, instance)`: carbon keys its ring by that pair (the port
    /// is not part of the key) and refuses the second one.
    #[error("destination {0} duplicates the host and instance of an earlier destination")]
    DuplicateDestination(DestinationSpec),
    /// `replication_factor` is 0.
    #[error("replication factor must be at least 1")]
    ZeroReplicationFactor,
    /// The rules do not contain exactly one default rule (a rule without `pattern`).
    #[error("expected exactly one default rule (without a pattern), found {0}")]
    DefaultRuleCount(usize),
    /// A rule's pattern is not a valid regular expression.
    #[error("invalid rule pattern {pattern:?}: {source}")]
    BadPattern {
        /// The pattern as written.
        pattern: String,
        /// Why it did not compile.
        #[source]
        source: crate::pattern::PatternError,
    },
    /// A rule names a destination index outside the destination list.
    #[error("rule #{rule} refers to destination index {index}, which does not exist")]
    RuleDestination {
        /// Position of the rule in the routing rules, in configuration order.
        rule: usize,
        /// The offending index.
        index: u16,
    },
}

impl DestinationSpec {
    /// Parses `host:port[:instance]` or `[ipv6]:port[:instance]` like carbon's
    /// `util.parseDestination`: surrounding whitespace is ignored, everything after the
    /// port's colon is the instance (which may itself contain `:` or be empty).
    ///
    /// Stricter than carbon where carbon would accept nonsense: a missing colon, an empty host
    /// or a port outside 0..=65535 are errors here rather than a destination that never
    /// connects.
    pub fn parse(text: &str) -> Result<Self, RouterError> {
        let bad = || RouterError::BadDestination(text.to_owned());
        let s = text.trim();
        let (host, rest) = if let Some(inner) = s.strip_prefix('[') {
            // carbon: `bidx = s.rfind(']:')`, host between the brackets.
            let close = inner.rfind("]:").ok_or_else(bad)?;
            (&inner[..close], &inner[close + 2..])
        } else {
            s.split_once(':').ok_or_else(bad)?
        };
        let (port, instance) = match rest.split_once(':') {
            Some((port, instance)) => (port, Some(instance.to_owned())),
            None => (rest, None),
        };
        if host.is_empty() {
            return Err(bad());
        }
        // Python's int() tolerates surrounding whitespace.
        let port = port.trim().parse::<u16>().map_err(|_| bad())?;
        Ok(Self {
            host: host.to_owned(),
            port,
            instance,
        })
    }

    /// Parses carbon's comma-separated `DESTINATIONS` list (blank entries are skipped).
    pub fn parse_list(text: &str) -> Result<Vec<Self>, RouterError> {
        text.split(',')
            .filter(|d| !d.trim().is_empty())
            .map(Self::parse)
            .collect()
    }
}

impl fmt::Display for DestinationSpec {
    /// carbon's form: `host:port:instance`, `host:port` without instance, `[v6]:port…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)?;
        } else {
            write!(f, "{}:{}", self.host, self.port)?;
        }
        match &self.instance {
            Some(instance) => write!(f, ":{instance}"),
            None => Ok(()),
        }
    }
}

/// carbon's `ROUTER_HASH_TYPE`.
// The variants are carbon's own names (`carbon_ch`, `fnv1a_ch`, `mmh3_ch`).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum HashType {
    /// MD5, first two bytes.
    #[default]
    #[serde(rename = "carbon_ch")]
    CarbonCh,
    /// FNV-1a 32, folded to 16 bits.
    #[serde(rename = "fnv1a_ch")]
    Fnv1aCh,
    /// MurmurHash3 x86_32.
    #[serde(rename = "mmh3_ch")]
    Mmh3Ch,
}

/// carbon's `RELAY_METHOD`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RelayMethod {
    /// Consistent-hashing ring.
    #[default]
    ConsistentHashing,
    /// Sorted node list, start at hash mod N.
    FastHashing,
    /// Ordered regex rules.
    Rules,
    /// Consistent-hashing on the names the aggregation rules resolve a metric to.
    AggregatedConsistentHashing,
    /// Fast-hashing on the names the aggregation rules resolve a metric to.
    FastAggregatedHashing,
}

impl HashType {
    /// carbon's spelling (`ROUTER_HASH_TYPE`).
    pub const fn as_str(self) -> &'static str {
        match self {
            HashType::CarbonCh => "carbon_ch",
            HashType::Fnv1aCh => "fnv1a_ch",
            HashType::Mmh3Ch => "mmh3_ch",
        }
    }
}

impl RelayMethod {
    /// carbon's spelling (`RELAY_METHOD`).
    pub const fn as_str(self) -> &'static str {
        match self {
            RelayMethod::ConsistentHashing => "consistent-hashing",
            RelayMethod::FastHashing => "fast-hashing",
            RelayMethod::Rules => "rules",
            RelayMethod::AggregatedConsistentHashing => "aggregated-consistent-hashing",
            RelayMethod::FastAggregatedHashing => "fast-aggregated-hashing",
        }
    }

    /// True for the two aggregated methods.
    pub fn is_aggregated(self) -> bool {
        matches!(
            self,
            RelayMethod::AggregatedConsistentHashing | RelayMethod::FastAggregatedHashing
        )
    }

    /// True for the methods that walk a [`FastHashOrder`] rather than a ring.
    pub fn is_fast(self) -> bool {
        matches!(
            self,
            RelayMethod::FastHashing | RelayMethod::FastAggregatedHashing
        )
    }
}

/// One routing rule (indices into the destination list).
#[derive(Clone, Debug)]
pub struct RuleSpec {
    /// Regex searched (unanchored, case-insensitively as carbon's `re.I`) in the metric name;
    /// `None` for the default rule. Compiled once, by [`RuleSpec::compile`].
    pub pattern: Option<crate::pattern::Pattern>,
    /// Destination indices, in order.
    pub destinations: Vec<u16>,
    /// Keep evaluating later rules after a match.
    pub continue_matching: bool,
}

/// Everything needed to build a [`Router`].
#[derive(Clone, Debug, Default)]
pub struct RouterSpec {
    /// Routing method.
    pub method: RelayMethod,
    /// Hash for ring positions.
    pub hash_type: HashType,
    /// Copies per datapoint.
    pub replication_factor: usize,
    /// At most one copy per host string.
    pub diverse_replicas: bool,
    /// Destinations; order is ring insertion order.
    pub destinations: Vec<DestinationSpec>,
    /// Rules, in evaluation order, the default rule last (method `rules` only).
    pub rules: Vec<RuleSpec>,
    /// Aggregation rules, compiled from carbon's `aggregation-rules.conf` lines (aggregated
    /// methods only).
    pub aggregation_rules: Vec<aggregation::AggregationRule>,
    /// An imported carbon-c-relay configuration's routing: when set it decides, and
    /// `destinations` are its servers in order.
    pub c_relay: Option<CRelayProgram>,
}

/// The routing of a carbon-c-relay configuration (what `Config::load_c_relay` reads), for a
/// [`RouterSpec`].
#[derive(Clone, Debug)]
pub struct CRelayProgram {
    pub(crate) program: std::sync::Arc<c_relay::Program>,
    /// Its aggregations' open buckets, shared by every connection (a reload hands the
    /// buckets of the aggregations it keeps to the new configuration:
    /// [`CRelayProgram::share_aggregates`], [`CRelayProgram::take_aggregates`]).
    pub(crate) aggregates: std::sync::Arc<std::sync::Mutex<c_relay::Aggregators>>,
    /// Its `statistics`, unless off (`-s`, or `submit every 0 seconds`).
    pub(crate) statistics: Option<std::sync::Arc<CRelayStatistics>>,
}

/// How a carbon-c-relay configuration submits its statistics.
#[derive(Clone, Debug)]
pub(crate) struct CRelayStatistics {
    /// Seconds between submissions.
    pub interval: u32,
    /// What every name starts with: the stub of its `send to` (if any), the prefix, a dot.
    pub prefix: String,
    /// `dispatcherN` names: one per worker (`-w`, else one per online CPU).
    pub dispatchers: usize,
    /// `reset counters after interval`: each submission counts since the one before.
    pub reset: bool,
}

impl CRelayProgram {
    /// `program` with empty aggregations bounded by `max_series` open series and
    /// `max_values` kept values (the overlay's `[limits]`).
    pub(crate) fn new(
        program: std::sync::Arc<c_relay::Program>,
        max_series: usize,
        max_values: usize,
    ) -> Self {
        let aggregates = c_relay::Aggregators::new(&program, max_series, max_values);
        Self {
            program,
            aggregates: std::sync::Arc::new(std::sync::Mutex::new(aggregates)),
            statistics: None,
        }
    }

    /// The configuration as `carbon-c-relay -t -d` prints it back: two programs that print
    /// alike route alike.
    pub(crate) fn printed(&self) -> String {
        let mut out = String::new();
        self.program.print(
            c_relay::print::PrintMode {
                aggregations: true,
                hash: true,
                stubs: true,
            },
            &mut out,
        );
        out
    }

    /// Shares `old`'s open buckets when this configuration has the same aggregations, so
    /// connections of either configuration feed one state. Harmless if the reload is then
    /// rejected.
    pub(crate) fn share_aggregates(&mut self, old: &CRelayProgram) {
        if self.program.aggregators == old.program.aggregators {
            self.aggregates = std::sync::Arc::clone(&old.aggregates);
        }
    }

    /// Otherwise moves the series of `old`'s aggregations that this configuration keeps
    /// unchanged (same interval, expiry, timestamp, computes and output names) into this
    /// state: done once the reload can no longer fail.
    pub(crate) fn take_aggregates(&self, old: &CRelayProgram) {
        if std::sync::Arc::ptr_eq(&self.aggregates, &old.aggregates) {
            return;
        }
        let mut from = old.aggregates.lock().unwrap_or_else(|e| e.into_inner());
        let mut to = self.aggregates.lock().unwrap_or_else(|e| e.into_inner());
        to.take_from(&mut from, &old.program, &self.program);
    }

    /// The distinct servers a bare `name` (no value) is sent to, every member up.
    fn route_name(&self, name: &[u8], out: &mut Vec<u16>) {
        let mut routed = c_relay::Routed::default();
        let env = c_relay::route::Env { failed: &|_| false };
        self.program.route(name, name.len(), b"", &env, &mut routed);
        for &(_, server) in &routed.sends {
            if !out.contains(&server) {
                out.push(server);
            }
        }
    }
}

impl RuleSpec {
    /// Compiles a relay-rule pattern the way carbon does (`re.compile(pattern, re.I)`), with
    /// the backtracking fallback for Python-only syntax.
    pub fn compile(pattern: &str) -> Result<crate::pattern::Pattern, RouterError> {
        crate::pattern::Pattern::case_insensitive(pattern).map_err(|source| {
            RouterError::BadPattern {
                pattern: pattern.to_string(),
                source,
            }
        })
    }
}

/// Routing for the two hashing methods: one hash of the name picks a start index, whose
/// preference list was computed when the router was built.
#[derive(Debug)]
pub struct HashRouting {
    hash_type: HashType,
    kind: HashKind,
    table: RouteTable,
}

#[derive(Debug)]
enum HashKind {
    Ring(ConsistentHashRing),
    Fast(FastHashOrder),
}

impl HashRouting {
    fn new(spec: &RouterSpec) -> Self {
        let keys = NodeKeys::new();
        let nodes: Vec<Node<'_>> = spec
            .destinations
            .iter()
            .map(|d| Node {
                server: &d.host,
                instance: d.instance.as_deref(),
            })
            .collect();
        // Same server string, same id: what DIVERSE_REPLICAS compares.
        let server_ids: Vec<u16> = spec
            .destinations
            .iter()
            .map(|d| {
                let first = spec.destinations.iter().position(|e| e.host == d.host);
                first.unwrap_or(0) as u16
            })
            .collect();
        let server_count = server_ids
            .iter()
            .enumerate()
            .filter(|&(i, &id)| usize::from(id) == i)
            .count();
        let replication = Replication {
            factor: spec.replication_factor,
            diverse: spec.diverse_replicas,
            server_ids: &server_ids,
            server_count,
        };
        let (kind, table) = if spec.method.is_fast() {
            let order = FastHashOrder::new(spec.hash_type, &nodes, &keys);
            let table = RouteTable::build(nodes.len(), &replication, |s| order.walk_from(s));
            (HashKind::Fast(order), table)
        } else {
            let ring = ConsistentHashRing::new(spec.hash_type, &nodes, &keys);
            let table = RouteTable::build(ring.len(), &replication, |s| ring.walk_from(s));
            (HashKind::Ring(ring), table)
        };
        Self {
            hash_type: spec.hash_type,
            kind,
            table,
        }
    }

    /// The destinations carbon yields for routing key `key`, appended to `out`.
    #[inline]
    pub fn route_key_into(&self, key: &[u8], out: &mut Vec<u16>) {
        self.route_position_into(carbon_hash(key, self.hash_type), out);
    }

    /// The destinations for a key at ring position `position` (its [`carbon_hash`]), appended
    /// to `out`.
    #[inline]
    pub fn route_position_into(&self, position: i64, out: &mut Vec<u16>) {
        let start = match &self.kind {
            HashKind::Ring(ring) => ring.start_index(position),
            HashKind::Fast(order) => order.start_index(position),
        };
        // A route is one or a few indices: pushed one by one, not through a `memcpy` call.
        let route = self.table.get(start);
        out.reserve(route.len());
        for &d in route {
            out.push(d);
        }
    }

    /// The consistent-hashing ring (`None` for fast-hashing).
    pub fn ring(&self) -> Option<&ConsistentHashRing> {
        match &self.kind {
            HashKind::Ring(ring) => Some(ring),
            HashKind::Fast(_) => None,
        }
    }

    /// The fast-hashing node order (`None` for consistent-hashing).
    pub fn fast_order(&self) -> Option<&FastHashOrder> {
        match &self.kind {
            HashKind::Fast(order) => Some(order),
            HashKind::Ring(_) => None,
        }
    }
}

/// How a [`Router`] decides; the aggregated routers will be further variants (module docs).
#[derive(Debug)]
pub enum Strategy {
    /// `consistent-hashing` or `fast-hashing`.
    Hash(HashRouting),
    /// `rules`.
    Rules(Rules),
    /// `aggregated-consistent-hashing` or `fast-aggregated-hashing`.
    Aggregated(AggregatedRouting),
    /// A carbon-c-relay configuration ([`c_relay`]): lines, not names, are routed (a route
    /// may rewrite the line before it is sent); [`Router::route_into`] gives the
    /// destinations a bare name reaches.
    CRelay(CRelayProgram),
}

/// The aggregated routers: hashing on every aggregate name a metric resolves to.
#[derive(Debug)]
pub struct AggregatedRouting {
    hash: HashRouting,
    rules: Vec<aggregation::AggregationRule>,
    /// The rules' input patterns at the same positions, matched in one pass: only the rules
    /// that match a name are asked for its aggregate name (their captures).
    patterns: PatternSet,
}

impl AggregatedRouting {
    /// carbon's `AggregatedConsistentHashingRouter.getDestinations`: each rule's aggregate name
    /// (or the name itself when none matches) routed through the hashing router; the union of
    /// destinations, each once. carbon yields them in Python `set` order, which depends on the
    /// per-process string hash seed; here they come in first-seen order. A rule whose
    /// output template raises a `KeyError` or `ValueError` for the name leaves it with no
    /// destination (carbon-relay drops it: the exception leaves `getDestinations`).
    pub fn route_into(&self, name: &[u8], out: &mut Vec<u16>) {
        let start = out.len();
        let text = std::str::from_utf8(name).ok();
        let mut resolved = false;
        let mut stopped = false;
        if let Some(text) = text {
            self.patterns.for_each_match(name, |i| {
                match self.rules[i].resolve(text) {
                    aggregation::Resolution::Output(agg) => {
                        resolved = true;
                        self.hash.route_key_into(agg.as_bytes(), out);
                    }
                    aggregation::Resolution::Failed(f) if f.stops() => {
                        stopped = true;
                        return ControlFlow::Break(());
                    }
                    aggregation::Resolution::Failed(_) | aggregation::Resolution::NoMatch => {}
                }
                ControlFlow::Continue(())
            });
        }
        if stopped {
            out.truncate(start);
            return;
        }
        if !resolved {
            self.hash.route_key_into(name, out);
        }
        // Keep the first occurrence of each index (routes hold a handful of entries).
        let mut keep = start;
        for i in start..out.len() {
            let d = out[i];
            if !out[start..keep].contains(&d) {
                out[keep] = d;
                keep += 1;
            }
        }
        out.truncate(keep);
    }

    /// The plain hashing router underneath.
    pub fn hash(&self) -> &HashRouting {
        &self.hash
    }
}

/// An immutable router, shared by every connection.
#[derive(Debug)]
pub struct Router {
    destinations: Vec<DestinationSpec>,
    strategy: Strategy,
}

impl Router {
    /// Builds the ring (or rule table), checking the spec the way carbon does at startup.
    pub fn new(spec: RouterSpec) -> Result<Self, RouterError> {
        let count = spec.destinations.len();
        if let Some(program) = spec.c_relay {
            // The configuration was checked as carbon-c-relay checks it.
            if count > usize::from(u16::MAX) {
                return Err(RouterError::TooManyDestinations(count));
            }
            return Ok(Self {
                destinations: spec.destinations,
                strategy: Strategy::CRelay(program),
            });
        }
        if count == 0 {
            return Err(RouterError::NoDestinations);
        }
        if count > usize::from(u16::MAX) {
            return Err(RouterError::TooManyDestinations(count));
        }
        if spec.replication_factor == 0 {
            return Err(RouterError::ZeroReplicationFactor);
        }
        let strategy = match spec.method {
            RelayMethod::Rules => Strategy::Rules(Rules::new(&spec.rules, count)?),
            RelayMethod::ConsistentHashing
            | RelayMethod::FastHashing
            | RelayMethod::AggregatedConsistentHashing
            | RelayMethod::FastAggregatedHashing => {
                let mut seen = std::collections::HashSet::with_capacity(count);
                for d in &spec.destinations {
                    if !seen.insert((d.host.as_str(), d.instance.as_deref())) {
                        return Err(RouterError::DuplicateDestination(d.clone()));
                    }
                }
                let hash = HashRouting::new(&spec);
                if spec.method.is_aggregated() {
                    let patterns = PatternSet::new(
                        spec.aggregation_rules
                            .iter()
                            .map(|r| r.pattern().clone())
                            .collect(),
                    );
                    Strategy::Aggregated(AggregatedRouting {
                        hash,
                        rules: spec.aggregation_rules,
                        patterns,
                    })
                } else {
                    Strategy::Hash(hash)
                }
            }
        };
        Ok(Self {
            destinations: spec.destinations,
            strategy,
        })
    }

    /// Destination indices for `name`, in carbon's yield order (carbon may repeat one).
    ///
    /// Replaces the contents of `out`; reuse one vector to avoid allocating.
    #[inline]
    pub fn route_into(&self, name: &[u8], out: &mut Vec<u16>) {
        out.clear();
        self.route_append(name, out);
    }

    /// [`route_into`](Self::route_into) appending to `out`.
    #[inline]
    fn route_append(&self, name: &[u8], out: &mut Vec<u16>) {
        match &self.strategy {
            Strategy::Hash(hash) => hash.route_key_into(name, out),
            Strategy::Rules(rules) => rules.route_into(name, out),
            Strategy::Aggregated(agg) => agg.route_into(name, out),
            Strategy::CRelay(program) => program.route_name(name, out),
        }
    }

    /// The routes of `names`, each as [`route_into`](Self::route_into) gives it, appended to
    /// `out`; `spans[i]` receives where `names[i]`'s route lies in `out` (start, length).
    /// With `carbon_ch` hashing the MD5s of names up to 119 bytes are computed sixteen at a
    /// time (lane-parallel MD5; eight without AVX2), cheaper than routing them one by one and, on
    /// this path, than looking them up in the route cache ([`RouteCache::computes`]).
    pub fn route_many(&self, names: &[&[u8]], out: &mut Vec<u16>, spans: &mut [(u32, u32)]) {
        let span = |out: &Vec<u16>, start: usize| (start as u32, (out.len() - start) as u32);
        match &self.strategy {
            Strategy::Hash(hash) if hash.hash_type == HashType::CarbonCh => {
                let kernel = md5x::Kernel::detect();
                let width = if kernel.is_wide() {
                    md5x::WIDE_LANES
                } else {
                    md5x::LANES
                };
                for (group, spans) in names.chunks(width).zip(spans.chunks_mut(width)) {
                    let mut positions = [None; md5x::WIDE_LANES];
                    if kernel.is_wide() {
                        let keys: [&[u8]; md5x::WIDE_LANES] =
                            std::array::from_fn(|l| group.get(l).copied().unwrap_or_default());
                        positions = md5x::carbon_positions_wide(kernel, &keys);
                    } else {
                        let keys: [&[u8]; md5x::LANES] =
                            std::array::from_fn(|l| group.get(l).copied().unwrap_or_default());
                        let eight = md5x::carbon_positions(kernel, &keys);
                        positions[..md5x::LANES].copy_from_slice(&eight);
                    }
                    for ((name, position), slot) in group.iter().zip(positions).zip(spans) {
                        let start = out.len();
                        match position {
                            Some(p) => hash.route_position_into(i64::from(p), out),
                            None => hash.route_key_into(name, out),
                        }
                        *slot = span(out, start);
                    }
                }
            }
            _ => {
                for (name, slot) in names.iter().zip(spans) {
                    let start = out.len();
                    self.route_append(name, out);
                    *slot = span(out, start);
                }
            }
        }
    }

    /// The destinations, indexed as routes refer to them.
    pub fn destinations(&self) -> &[DestinationSpec] {
        &self.destinations
    }

    /// How this router decides (for inspection and tests).
    pub fn strategy(&self) -> &Strategy {
        &self.strategy
    }

    /// The consistent-hashing ring, when the method is `consistent-hashing`.
    pub fn ring(&self) -> Option<&ConsistentHashRing> {
        match &self.strategy {
            Strategy::Hash(hash) => hash.ring(),
            Strategy::Aggregated(agg) => agg.hash.ring(),
            Strategy::Rules(_) | Strategy::CRelay(_) => None,
        }
    }
}

#[cfg(test)]
mod tests;
