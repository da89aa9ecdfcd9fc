//! Scenario files (`bench/scenarios/*.toml`): what load to offer, to how many sinks, how they
//! misbehave, and the bounds of the run.
//!
//! Parsed in two stages like the relay's own config: raw serde structs with
//! `deny_unknown_fields` and documented defaults, then [`Scenario::validate`], which applies
//! command-line overrides and checks every bound so a run can never be unbounded.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use super::aggregation::Aggregation;
use super::routing::Routing;

use super::BenchError;

/// Upper bound on datapoints in one run (count mode); keeps pre-rendered payloads in memory.
pub const MAX_DATAPOINTS: u64 = 50_000_000;
/// Upper bound on any run's wall-clock length, drain included.
pub const MAX_RUN_SECS: f64 = 3600.0;
/// Upper bound on sinks.
pub const MAX_CONNECTIONS: usize = 256;
/// Upper bound on generator connections (many-clients scenarios; mind `ulimit -n`).
pub const MAX_GENERATOR_CONNECTIONS: usize = 10_000;
/// Upper bound on distinct names (all rendered before the clock starts).
pub const MAX_NAMES: usize = 10_000_000;
/// Upper bound on the rates of one sweep.
pub const MAX_SWEEP_RATES: usize = 64;
/// Most generated routing rules.
pub const MAX_RULES: usize = 10_000;
/// Default p99 latency target of a sweep step, in milliseconds.
pub const DEFAULT_P99_TARGET_MS: f64 = 100.0;

/// Wire protocol spoken by the generator (towards the relay) or expected by a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Graphite plaintext, `name value timestamp\n`.
    Line,
    /// carbon pickle, 4-byte big-endian length + pickle of `[(name, (ts, value)), …]`.
    Pickle,
}

impl Protocol {
    /// Lowercase name, as in scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Line => "line",
            Protocol::Pickle => "pickle",
        }
    }
}

/// What a sink expects to receive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkProtocol {
    /// Decide per connection from the first byte (pickle frames start with a 0 length byte).
    #[default]
    Auto,
    /// Plaintext only.
    Line,
    /// Pickle only.
    Pickle,
}

impl From<SinkProtocol> for anthracite_sink::SinkProtocol {
    fn from(p: SinkProtocol) -> Self {
        match p {
            SinkProtocol::Auto => anthracite_sink::SinkProtocol::Auto,
            SinkProtocol::Line => anthracite_sink::SinkProtocol::Line,
            SinkProtocol::Pickle => anthracite_sink::SinkProtocol::Pickle,
        }
    }
}

/// A whole scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name printed in reports (defaults to the file stem).
    #[serde(default)]
    pub name: String,
    /// One sentence for humans.
    #[serde(default)]
    pub description: String,
    /// Offered load.
    #[serde(default)]
    pub load: Load,
    /// Shape of the metric names.
    #[serde(default)]
    pub names: Names,
    /// The counting sinks that stand in for carbon-caches.
    #[serde(default)]
    pub sinks: Sinks,
    /// Bounds of the run.
    #[serde(default)]
    pub limits: Limits,
    /// Rate used for the capacity estimate ("Y datapoints/s needs Z cores").
    #[serde(default)]
    pub capacity_target_rate: Option<f64>,
    /// The offered rates of `--sweep` and what a step must meet.
    #[serde(default)]
    pub sweep: Sweep,
    /// How the harness configures anthracite when it runs in-process.
    #[serde(default)]
    pub in_process: InProcess,
    /// Aggregate in the relay (`[aggregation]`), with rules generated over the name set.
    #[serde(default)]
    pub aggregation: Option<Aggregation>,
    /// How the relay routes: consistent hashing with N copies, or N generated regex rules.
    #[serde(default)]
    pub routing: Routing,
}

/// Offered load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Load {
    /// Datapoints to send in total (count mode). Default 1,000,000. Ignored when
    /// `duration_secs` is set.
    pub datapoints: u64,
    /// Send for this long instead of a fixed count (duration mode).
    pub duration_secs: Option<f64>,
    /// Total datapoints/s over all connections; 0 means as fast as possible. Default 0.
    pub rate: f64,
    /// Generator connections. Default 4.
    pub connections: usize,
    /// Protocol towards the relay. Default line.
    pub protocol: Protocol,
    /// Datapoints per pickle frame, and per write slice in line mode at maximum rate.
    /// Default 500.
    pub batch: usize,
}

impl Default for Load {
    fn default() -> Self {
        Self {
            datapoints: 1_000_000,
            duration_secs: None,
            rate: 0.0,
            connections: 4,
            protocol: Protocol::Line,
            batch: 500,
        }
    }
}

/// Shape of the generated names: `host-0001.cpu.3.user` and friends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Names {
    /// Distinct names. Default 100,000.
    pub count: usize,
    /// Dot-separated components (2–16). Default 4 (`host-0001.cpu.3.user`).
    pub depth: usize,
    /// Pad the last component so names are at least this long. Default 0 (no padding).
    pub min_length: usize,
    /// Prefix put before every name, e.g. `"servers."`. Default empty.
    pub prefix: String,
    /// Graphite tags appended verbatim, e.g. `["dc=x", "env=prod"]` → `;dc=x;env=prod`.
    pub tags: Vec<String>,
    /// Every datapoint of a run carries a name not sent before in that run: `count` is
    /// ignored and becomes the number of datapoints (count mode, or `load.rate ×
    /// load.duration_secs`; a maximum-rate duration run has no such number and is refused).
    /// Default false.
    pub distinct: bool,
    /// Every connection cycles through all names, each from its own offset, so a name arrives
    /// on many connections (relays upstream spreading names over their connections). Default
    /// false: connection `c` of `k` sends names `c`, `c + k`, `c + 2k`, … (a fleet of hosts,
    /// each sending its own metrics).
    pub shared: bool,
}

impl Default for Names {
    fn default() -> Self {
        Self {
            count: 100_000,
            depth: 4,
            min_length: 0,
            prefix: String::new(),
            tags: Vec::new(),
            distinct: false,
            shared: false,
        }
    }
}

/// The counting sinks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sinks {
    /// Number of sinks (relay destinations). Default 2.
    pub count: usize,
    /// What the relay is told to send them, and what they decode. Default pickle.
    pub protocol: Protocol,
    /// Decode by protocol or auto-detect per connection. Default auto.
    pub detect: SinkProtocol,
    /// Record every name received to check that each name lands on one sink only.
    pub record_names: bool,
    /// Sinks that read slowly.
    pub slow: Vec<SlowSink>,
    /// Sinks that go down for a while.
    pub down: Vec<DownSink>,
}

impl Default for Sinks {
    fn default() -> Self {
        Self {
            count: 2,
            protocol: Protocol::Pickle,
            detect: SinkProtocol::Auto,
            record_names: false,
            slow: Vec::new(),
            down: Vec::new(),
        }
    }
}

/// A sink that reads at most `bytes_per_sec` bytes per second on each connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowSink {
    /// Sink index (0-based).
    pub index: usize,
    /// Read throttle per connection.
    pub bytes_per_sec: u64,
}

/// A sink that closes its listener and its connections at `at_secs` after the first byte is
/// sent, refuses connections for `for_secs`, then re-binds the same port and accepts again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DownSink {
    /// Sink index (0-based).
    pub index: usize,
    /// When it goes down, seconds after the run starts. Default 0 (down from the start).
    #[serde(default)]
    pub at_secs: f64,
    /// How long it stays down.
    pub for_secs: f64,
}

/// Bounds of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Hard cap on the sending phase. Default 300 s.
    pub max_send_secs: f64,
    /// After the last send, wait at most this long for deliveries to stop. Default 15 s.
    pub drain_timeout_secs: f64,
    /// Deliveries are complete once nothing arrived for this long (or everything arrived).
    /// Default 1 s.
    pub quiet_secs: f64,
    /// How long to wait for a started relay to accept connections. Default 20 s.
    pub startup_timeout_secs: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_send_secs: 300.0,
            drain_timeout_secs: 15.0,
            quiet_secs: 1.0,
            startup_timeout_secs: 20.0,
        }
    }
}

/// `[sweep]`: the rates `anthracite bench --sweep` offers, one run each, and the rule that finds
/// the knee — the highest rate whose run lost nothing, kept p99 latency within
/// `p99_target_ms`, and was really offered (the generator sent at least
/// [`super::sweep::MIN_OFFERED_FRACTION`] of it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sweep {
    /// Offered rates in datapoints/s (each > 0), run in ascending order. Default none
    /// (`--rates` must give them).
    pub rates: Vec<f64>,
    /// Send for this long at each rate (duration mode). Default: the scenario's own
    /// `load.duration_secs`, or `load.datapoints` at each rate.
    pub step_secs: Option<f64>,
    /// p99 end-to-end latency a step may reach and still count (ms). Default 100.
    pub p99_target_ms: f64,
    /// Cost sweep over the rule count (`[routing] rules` at each point). Default none.
    pub rules: Vec<usize>,
    /// Cost sweep over the destination count (`[sinks] count` at each point). Default none.
    pub destinations: Vec<usize>,
    /// Replication factors crossed with `destinations` (or swept alone). Default none.
    pub replication: Vec<usize>,
    /// Aggregation cost sweep over the rules each datapoint matches (`[aggregation]
    /// rules_per_datapoint`, the groups kept: `rules` grows with it). Default none.
    pub rules_per_datapoint: Vec<usize>,
    /// Aggregation cost sweep over the output series (the names scaled to make that many;
    /// at least one datapoint per name). Default none.
    pub output_series: Vec<usize>,
    /// Aggregation cost sweep over `WRITE_BACK_FREQUENCY` in seconds (each > 0). Default none.
    pub write_back_secs: Vec<u64>,
    /// Method sets crossed with the aggregation axis (or swept alone): `"running"` (sum, avg,
    /// min, max, count: running values), `"percentile"` (p50 … p999: every value kept) or
    /// `"all"` (the twelve). Default none: the scenario's methods.
    pub methods: Vec<String>,
}

impl Default for Sweep {
    fn default() -> Self {
        Self {
            rates: Vec::new(),
            step_secs: None,
            p99_target_ms: DEFAULT_P99_TARGET_MS,
            rules: Vec::new(),
            destinations: Vec::new(),
            replication: Vec::new(),
            rules_per_datapoint: Vec::new(),
            output_series: Vec::new(),
            write_back_secs: Vec::new(),
            methods: Vec::new(),
        }
    }
}

/// `[in_process]`: the in-process relay's queues. External relays take theirs from
/// `--relay-config-template`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InProcess {
    /// Memory tier of each destination queue, in datapoints. Default 5,000,000, as the
    /// carbon-relay and carbon-c-relay templates in `bench/relays/`.
    pub queue_datapoints: usize,
    /// Spill what does not fit to disk (`when_full = "spill"`) in a directory made for the run
    /// and removed after it. Default false (`drop_newest`).
    pub spill: bool,
}

impl Default for InProcess {
    fn default() -> Self {
        Self {
            queue_datapoints: super::inprocess::QUEUE_DATAPOINTS,
            spill: false,
        }
    }
}

/// Command-line overrides of scenario fields.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--datapoints`.
    pub datapoints: Option<u64>,
    /// `--duration`.
    pub duration_secs: Option<f64>,
    /// `--rate`.
    pub rate: Option<f64>,
    /// `--connections`.
    pub connections: Option<usize>,
    /// `--names`.
    pub names: Option<usize>,
    /// `--protocol`.
    pub protocol: Option<Protocol>,
    /// `--sinks`.
    pub sinks: Option<usize>,
    /// `--capacity-rate`.
    pub capacity_target_rate: Option<f64>,
    /// `--drain-timeout`.
    pub drain_timeout_secs: Option<f64>,
    /// `--rates`.
    pub sweep_rates: Option<Vec<f64>>,
    /// `--p99-target-ms`.
    pub p99_target_ms: Option<f64>,
}

impl Scenario {
    /// Parses scenario TOML text (stage one: syntax and unknown keys).
    pub fn from_toml_str(text: &str) -> Result<Self, BenchError> {
        toml::from_str(text).map_err(|e| BenchError::ScenarioParse {
            file: String::new(),
            message: e.to_string(),
        })
    }

    /// Reads and parses a scenario file; `name` defaults to the file stem.
    pub fn load(path: &Path) -> Result<Self, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
            context: format!("reading scenario {}", path.display()),
            source,
        })?;
        let mut s: Scenario = toml::from_str(&text).map_err(|e| BenchError::ScenarioParse {
            file: path.display().to_string(),
            message: e.to_string(),
        })?;
        if s.name.is_empty() {
            s.name = path
                .file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        Ok(s)
    }

    /// Applies overrides, then checks every bound (stage two).
    pub fn validate(mut self, o: &Overrides) -> Result<Self, BenchError> {
        if let Some(v) = o.datapoints {
            self.load.datapoints = v;
            self.load.duration_secs = None;
        }
        if let Some(v) = o.duration_secs {
            self.load.duration_secs = Some(v);
        }
        if let Some(v) = o.rate {
            self.load.rate = v;
        }
        if let Some(v) = o.connections {
            self.load.connections = v;
        }
        if let Some(v) = o.names {
            self.names.count = v;
        }
        if let Some(v) = o.protocol {
            self.load.protocol = v;
        }
        if let Some(v) = o.sinks {
            self.sinks.count = v;
        }
        if let Some(v) = o.drain_timeout_secs {
            self.limits.drain_timeout_secs = v;
        }
        if let Some(v) = o.capacity_target_rate {
            self.capacity_target_rate = Some(v);
        }
        if let Some(v) = &o.sweep_rates {
            self.sweep.rates.clone_from(v);
        }
        if let Some(v) = o.p99_target_ms {
            self.sweep.p99_target_ms = v;
        }
        let bad = |key: &str, why: &str| {
            Err(BenchError::Invalid(format!(
                "scenario {:?}: {key} {why}",
                self.name
            )))
        };
        let l = &self.load;
        match l.duration_secs {
            Some(d) if !(d > 0.0 && d <= MAX_RUN_SECS) => {
                return bad("load.duration_secs", "must be in (0, 3600]");
            }
            None if l.datapoints == 0 || l.datapoints > MAX_DATAPOINTS => {
                return bad("load.datapoints", "must be in [1, 50000000]");
            }
            _ => {}
        }
        if !(l.rate >= 0.0 && l.rate.is_finite()) {
            return bad("load.rate", "must be >= 0 (0 = maximum rate)");
        }
        if let (Some(d), true) = (l.duration_secs, l.rate > 0.0)
            && d * l.rate > MAX_DATAPOINTS as f64
        {
            return bad(
                "load.rate × load.duration_secs",
                "exceeds 50000000 datapoints",
            );
        }
        if l.connections == 0 || l.connections > MAX_GENERATOR_CONNECTIONS {
            return bad("load.connections", "must be in [1, 10000]");
        }
        if l.batch == 0 || l.batch > 100_000 {
            return bad("load.batch", "must be in [1, 100000]");
        }
        if self.names.distinct && self.names.shared {
            return bad("names.distinct", "cannot be combined with names.shared");
        }
        if self.names.distinct {
            let total = match l.duration_secs {
                None => l.datapoints as f64,
                Some(d) if l.rate > 0.0 => (d * l.rate).ceil(),
                Some(_) => {
                    return bad(
                        "names.distinct",
                        "needs load.datapoints or load.rate with load.duration_secs",
                    );
                }
            };
            if total > MAX_NAMES as f64 {
                return bad("names.distinct", "would need more than 10000000 names");
            }
        } else if self.names.count == 0 || self.names.count > MAX_NAMES {
            return bad("names.count", "must be in [1, 10000000]");
        }
        if !(2..=16).contains(&self.names.depth) {
            return bad("names.depth", "must be in [2, 16]");
        }
        if self.names.min_length > 1024 {
            return bad("names.min_length", "must be <= 1024");
        }
        if self.sinks.count == 0 || self.sinks.count > MAX_CONNECTIONS {
            return bad("sinks.count", "must be in [1, 256]");
        }
        if self.routing.rules > MAX_RULES {
            return bad("routing.rules", "must be in [0, 10000]");
        }
        if self.routing.replication == 0 || self.routing.replication > self.sinks.count {
            return bad("routing.replication", "must be in [1, sinks.count]");
        }
        let sw = &self.sweep;
        let costs =
            !(sw.rules.is_empty() && sw.destinations.is_empty() && sw.replication.is_empty());
        let aggregation_axes = [
            !sw.rules_per_datapoint.is_empty(),
            !sw.output_series.is_empty(),
            !sw.write_back_secs.is_empty(),
        ]
        .into_iter()
        .filter(|&a| a)
        .count();
        let aggregating = aggregation_axes > 0 || !sw.methods.is_empty();
        if (costs || aggregating) && !sw.rates.is_empty() {
            return bad(
                "sweep",
                "sweeps either rates or the configuration (rules, destinations, replication, aggregation), not both",
            );
        }
        if aggregating {
            if costs {
                return bad(
                    "sweep",
                    "sweeps either the routing (rules, destinations, replication) or the aggregation, not both",
                );
            }
            if aggregation_axes > 1 {
                return bad(
                    "sweep",
                    "sweeps one of rules_per_datapoint, output_series, write_back_secs at a time (methods may cross it)",
                );
            }
            if self.aggregation.is_none() {
                return bad("sweep", "an aggregation sweep needs [aggregation]");
            }
            if sw.rules_per_datapoint.iter().any(|&k| k == 0 || k > 100) {
                return bad("sweep.rules_per_datapoint", "must each be in [1, 100]");
            }
            if sw.output_series.iter().any(|&n| n == 0 || n > MAX_NAMES) {
                return bad("sweep.output_series", "must each be in [1, 10000000]");
            }
            if sw.write_back_secs.contains(&0) {
                return bad("sweep.write_back_secs", "must each be > 0");
            }
            if let Some(m) = sw
                .methods
                .iter()
                .find(|m| super::aggregation::MethodSet::parse(m).is_none())
            {
                return bad(
                    "sweep.methods",
                    &format!("{m:?} is not running, percentile or all"),
                );
            }
        }
        let crossed = !(sw.destinations.is_empty() && sw.replication.is_empty());
        if !sw.rules.is_empty() && crossed {
            return bad(
                "sweep.rules",
                "cannot be crossed with destinations or replication",
            );
        }
        if sw.rules.iter().any(|&r| r == 0 || r > MAX_RULES) {
            return bad("sweep.rules", "must each be in [1, 10000]");
        }
        if sw
            .destinations
            .iter()
            .any(|&d| d == 0 || d > MAX_CONNECTIONS)
        {
            return bad("sweep.destinations", "must each be in [1, 256]");
        }
        if sw
            .replication
            .iter()
            .any(|&r| r == 0 || r > MAX_CONNECTIONS)
        {
            return bad("sweep.replication", "must each be in [1, 256]");
        }
        for s in &self.sinks.slow {
            if s.index >= self.sinks.count || s.bytes_per_sec == 0 {
                return bad(
                    "sinks.slow",
                    "needs index < sinks.count and bytes_per_sec > 0",
                );
            }
        }
        for d in &self.sinks.down {
            if d.index >= self.sinks.count
                || !(d.at_secs >= 0.0 && d.at_secs <= MAX_RUN_SECS)
                || !(d.for_secs > 0.0 && d.for_secs <= MAX_RUN_SECS)
            {
                return bad(
                    "sinks.down",
                    "needs index < sinks.count, 0 <= at_secs, 0 < for_secs <= 3600",
                );
            }
        }
        let lim = &self.limits;
        for (key, v) in [
            ("limits.max_send_secs", lim.max_send_secs),
            ("limits.drain_timeout_secs", lim.drain_timeout_secs),
            ("limits.quiet_secs", lim.quiet_secs),
            ("limits.startup_timeout_secs", lim.startup_timeout_secs),
        ] {
            if !(v > 0.0 && v <= MAX_RUN_SECS) {
                return bad(key, "must be in (0, 3600]");
            }
        }
        if let Some(r) = self.capacity_target_rate
            && !(r > 0.0 && r.is_finite())
        {
            return bad("capacity_target_rate", "must be > 0");
        }
        let sw = &self.sweep;
        if sw.rates.len() > MAX_SWEEP_RATES || sw.rates.iter().any(|r| !(*r > 0.0 && r.is_finite()))
        {
            return bad("sweep.rates", "must be at most 64 rates, each > 0");
        }
        if let Some(d) = sw.step_secs
            && !(d > 0.0 && d <= MAX_RUN_SECS)
        {
            return bad("sweep.step_secs", "must be in (0, 3600]");
        }
        if !(sw.p99_target_ms > 0.0 && sw.p99_target_ms.is_finite()) {
            return bad("sweep.p99_target_ms", "must be > 0");
        }
        if self.in_process.queue_datapoints == 0 {
            return bad("in_process.queue_datapoints", "must be > 0");
        }
        if let Some(a) = &self.aggregation
            && let Err(why) = a.check()
        {
            return Err(BenchError::Invalid(format!(
                "scenario {:?}: {why}",
                self.name
            )));
        }
        Ok(self)
    }

    /// Datapoints each connection sends in count mode (the remainder goes to the first ones).
    pub fn per_connection_counts(&self) -> Vec<u64> {
        let k = self.load.connections as u64;
        let total = self.load.datapoints;
        (0..k)
            .map(|c| total / k + u64::from(c < total % k))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aggregate_scenario_makes_10k_outputs_from_100_rules() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/scenarios/aggregate.toml"
        ))
        .expect("read aggregate.toml");
        let s = Scenario::from_toml_str(&text).expect("parses");
        let a = s.aggregation.clone().expect("[aggregation]");
        let rules = a.rules(&s.names);
        assert_eq!(rules.len(), 100);
        let addr: std::net::SocketAddr = "127.0.0.1:2104".parse().expect("addr");
        let toml = crate::inprocess::config_toml(&s, &[addr], None);
        anthracite::Config::from_toml_str(&toml).expect("the relay accepts the generated rules");
        let parsed = anthracite::unstable::aggregator::AggregationRules::from_lines(&rules)
            .expect("rules parse");
        let mut outputs = std::collections::HashSet::new();
        // Name `i` is metric `i % 100` of host `i / 100`: rule `i % 100` is the one for it.
        for i in 0..s.names.count {
            let name = crate::generator::name(&s.names, i);
            if let Some(o) = parsed.rules[i % 100].rule.aggregate_name(&name) {
                outputs.insert(o);
            }
        }
        assert_eq!(outputs.len(), 10_000);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(Scenario::from_toml_str("[load]\nbogus = 1\n").is_err());
    }

    #[test]
    fn overrides_apply_and_bounds_hold() {
        let s = Scenario::from_toml_str("[load]\ndatapoints = 10\nconnections = 3\n").unwrap();
        let s = s
            .validate(&Overrides {
                datapoints: Some(11),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(s.per_connection_counts(), vec![4, 4, 3]);
        let zero = Scenario::from_toml_str("[load]\nconnections = 0\n").unwrap();
        assert!(zero.validate(&Overrides::default()).is_err());
    }

    #[test]
    fn shipped_scenarios_parse_and_validate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Scenario::load(&path)
                    .and_then(|s| s.validate(&Overrides::default()))
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 4);
    }
}
