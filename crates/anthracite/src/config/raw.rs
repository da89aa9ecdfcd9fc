//! The `relay.toml` schema: serde structs with documented defaults.
//!
//! Unknown keys are errors (`deny_unknown_fields`), except at the top level, whose other
//! sections belong to extensions ([`crate::extension`]), and in a `servers` entry, whose other
//! keys belong to its protocol's extension. Durations are numbers with their unit in the key
//! name (`_ms`, `_secs`); sizes are bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::destination::OutputProtocol;
use crate::queue::WhenFull;
use crate::router::{HashType, RelayMethod};

/// The whole file. Its top-level keys are the core's sections ([`RawConfig::SECTIONS`]) and the
/// sections of extensions (`extensions`), which the first stage keeps as TOML for their
/// extensions to validate.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct RawConfig {
    /// `[listen]`.
    pub listen: RawListen,
    /// `[router]`.
    pub router: RawRouter,
    /// `[destinations]`.
    pub destinations: RawDestinations,
    /// `[[rules]]`, in evaluation order (method `rules` only).
    pub rules: Vec<RawRule>,
    /// `[ingest]`.
    pub ingest: RawIngest,
    /// `[telemetry]`.
    pub telemetry: RawTelemetry,
    /// `[shutdown]`.
    pub shutdown: RawShutdown,
    /// `[admin]`.
    pub admin: RawAdmin,
    /// `[log]`.
    pub log: RawLog,
    /// `[aggregation]`: carbon-aggregator's rules (off when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregation: Option<super::aggregation::RawAggregation>,
    /// `[rewrite]`: carbon's rewrite rules (with `[aggregation]` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<super::aggregation::RawRewrite>,
    /// Sections of extensions (`[[kinesis]]`, `[[kafka]]`, …), by name, as written; after
    /// validation, as their extensions resolved them.
    #[serde(skip)]
    pub extensions: BTreeMap<String, toml::Value>,
    /// The routing of an imported carbon-c-relay configuration (no `relay.toml` key): it
    /// replaces `[router]` and `[[rules]]`, and the destinations may be none.
    #[serde(skip)]
    pub c_relay: Option<crate::router::CRelayProgram>,
    /// Plaintext receivers beyond `listen.line_tcp` and `listen.line_udp` (an imported
    /// carbon-c-relay configuration's; no `relay.toml` key).
    #[serde(skip)]
    pub extra_line: Vec<super::ExtraLine>,
}

impl RawConfig {
    /// The core's top-level sections.
    pub const SECTIONS: [&'static str; 11] = [
        "listen",
        "router",
        "destinations",
        "rules",
        "ingest",
        "telemetry",
        "shutdown",
        "admin",
        "log",
        "aggregation",
        "rewrite",
    ];

    /// The first stage: the core's sections with their schema (unknown keys inside them are
    /// errors with their position), and every other top-level key kept for an extension.
    pub(crate) fn parse(text: &str, file: &str) -> Result<Self, ConfigError> {
        let syntax = |e: toml::de::Error| ConfigError::Syntax {
            file: file.to_string(),
            message: e.to_string(),
        };
        let mut raw: RawConfig = toml::from_str(text).map_err(syntax)?;
        raw.extensions = toml::from_str::<OtherSections>(text).map_err(syntax)?.0;
        Ok(raw)
    }

    /// The file as TOML: the core's sections, then the extensions'.
    pub(crate) fn to_toml(&self) -> Result<String, toml::ser::Error> {
        let mut text = toml::to_string_pretty(self)?;
        if !self.extensions.is_empty() {
            let table: toml::Table = self.extensions.clone().into_iter().collect();
            text.push('\n');
            text.push_str(&toml::to_string_pretty(&table)?);
        }
        Ok(text)
    }
}

/// The top-level keys that are not the core's sections, as TOML values (the core's are
/// skipped unread: their integers may pass what a TOML value holds).
struct OtherSections(BTreeMap<String, toml::Value>);

impl<'de> Deserialize<'de> for OtherSections {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OtherSections;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a TOML document")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<OtherSections, A::Error> {
                let mut other = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    if RawConfig::SECTIONS.contains(&key.as_str()) {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    } else {
                        other.insert(key, map.next_value::<toml::Value>()?);
                    }
                }
                Ok(OtherSections(other))
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// `[listen]`: receivers.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawListen {
    /// Plaintext TCP address. Default `0.0.0.0:2003`; `""` disables.
    pub line_tcp: String,
    /// Plaintext UDP address. Default `""` (off, as in carbon).
    pub line_udp: String,
    /// Pickle TCP address. Default `0.0.0.0:2004`; `""` disables.
    pub pickle_tcp: String,
    /// carbon's protobuf (`Payload`, length-prefixed) over TCP. Default `""` (off, as in
    /// carbon, whose `PROTOBUF_RECEIVER_PORT` is unset by default).
    pub protobuf_tcp: String,
    /// Most concurrent TCP client connections (1–1000000). Default 10000. At the limit the
    /// connection idle the longest is closed to admit the new one; with none idle, the new
    /// one is refused.
    pub max_connections: usize,
    /// Close connections idle this long, in seconds; 0 = never (carbon's default). Default 600.
    pub idle_timeout_secs: f64,
    /// Longest plaintext line in bytes (64–1048576). Default 16384 (carbon's limit).
    pub max_line_length: usize,
    /// Largest pickle frame in bytes (64–1073741824). Default 1048576 (carbon's
    /// `PICKLE_RECEIVER_MAX_LENGTH`).
    pub max_pickle_frame: usize,
    /// Longest metric name in bytes (16–1048576), in every protocol; longer names are
    /// dropped and counted (`name_too_long`). Default 4096.
    pub max_name_length: usize,
    /// Bytes all client connections together may hold for frames larger than their 64 KiB
    /// read buffer (at least `max_pickle_frame` + 4, at most 64 GiB). A connection waits for
    /// room before reading such a frame. Default 268435456 (256 MiB).
    pub max_frame_buffer_bytes: usize,
    /// Listen backlog of the TCP receivers (1–65535; the kernel caps it at
    /// `net.core.somaxconn`). Default 1024.
    pub backlog: u32,
    /// Receive buffer (`SO_RCVBUF`) asked for the UDP socket, in bytes; 0 keeps the system
    /// default (the kernel caps it at `net.core.rmem_max`). Default 4194304.
    pub udp_recv_buffer: usize,
    /// Largest protobuf frame in bytes (64–1073741824). Default 1048576 (carbon's fixed
    /// protobuf limit).
    pub max_protobuf_frame: usize,
    /// Stream compression of the plaintext TCP receiver's connections: `plain` (default),
    /// `gzip`, `lz4`, `snappy` (carbon-c-relay's transports, on its wire format) or `zstd`.
    pub line_tcp_compression: String,
    /// Most bytes an LZ4 frame or a snappy block of a compressed connection may decode into,
    /// and the largest zstd window (131072–1073741824); a gzip or zstd stream may decode into
    /// this much, then 256 times what it was sent. Past it the connection is closed and
    /// counted (`decompressed_too_large`). Default 4194304.
    pub max_decompressed_bytes: usize,
    /// TLS on every TCP receiver (line, pickle, protobuf): `{ cert_file, key_file, client_ca }`.
    /// Default: none (plaintext, as carbon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawServerTls>,
}

/// `listen.tls`: the receivers' certificate, and optionally the CA client certificates must
/// chain to.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawServerTls {
    /// PEM certificate chain. Required.
    pub cert_file: String,
    /// PEM private key. Required.
    pub key_file: String,
    /// PEM CA certificates; when set, clients must present a certificate signed by one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_ca: String,
}

/// `destinations.tls`: TLS to every TCP destination (carbon's `DESTINATION_TRANSPORT = ssl`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawClientTls {
    /// PEM CA certificates the destinations' certificates must chain to (carbon's
    /// `DESTINATION_SSL_CA`). Default `""`: the system's CA store.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub ca_file: String,
    /// Name the certificates must be valid for. Default `""`: each destination's host (as
    /// carbon).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub server_name: String,
    /// PEM client certificate chain, for destinations that ask for one (with `client_key`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub client_cert: String,
    /// PEM private key of `client_cert`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub client_key: String,
}

impl Default for RawListen {
    fn default() -> Self {
        Self {
            line_tcp: "0.0.0.0:2003".into(),
            line_udp: String::new(),
            pickle_tcp: "0.0.0.0:2004".into(),
            protobuf_tcp: String::new(),
            max_connections: 10_000,
            idle_timeout_secs: 600.0,
            max_line_length: crate::protocol::line::DEFAULT_MAX_LINE,
            max_pickle_frame: crate::protocol::pickle::DEFAULT_MAX_FRAME,
            max_name_length: 4096,
            max_frame_buffer_bytes: 256 << 20,
            backlog: 1024,
            udp_recv_buffer: 4 << 20,
            max_protobuf_frame: crate::protocol::protobuf::DEFAULT_MAX_FRAME,
            line_tcp_compression: "plain".into(),
            max_decompressed_bytes: crate::protocol::compression::DEFAULT_BUDGET,
            tls: None,
        }
    }
}

/// Default `router.route_cache_bytes`: 64 MiB, about 730,000 names of 40 bytes.
pub(crate) const DEFAULT_ROUTE_CACHE_BYTES: usize = 64 << 20;

/// `[router]`: how destinations are chosen.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRouter {
    /// `consistent-hashing` (default), `fast-hashing` or `rules`.
    pub method: RelayMethod,
    /// `carbon_ch` (default), `fnv1a_ch` or `mmh3_ch`.
    pub hash_type: HashType,
    /// Copies of each datapoint. Default 1.
    pub replication_factor: usize,
    /// At most one copy per host. Default true (carbon's default).
    pub diverse_replicas: bool,
    /// Bytes of the relay's route cache, shared by every connection (every byte it holds is
    /// counted: names, routes, index). Default 64 MiB; 0 disables; otherwise at least
    /// 64 KiB. The list-verdict cache and the tag memo, when on, take a quarter of this each.
    pub route_cache_bytes: usize,
    /// Methods `aggregated-consistent-hashing` / `fast-aggregated-hashing` only: carbon's
    /// `aggregation-rules.conf` lines, `output_template (frequency) = method input_pattern`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregation_rules: Vec<String>,
}

impl Default for RawRouter {
    fn default() -> Self {
        Self {
            method: RelayMethod::ConsistentHashing,
            hash_type: HashType::CarbonCh,
            replication_factor: 1,
            diverse_replicas: true,
            route_cache_bytes: DEFAULT_ROUTE_CACHE_BYTES,
            aggregation_rules: Vec::new(),
        }
    }
}

/// `[destinations]`: the carbon-caches and how to talk to them.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawDestinations {
    /// `host:port[:instance]` strings (or tables with per-destination overrides), in ring
    /// insertion order. Required.
    pub servers: Vec<RawServer>,
    /// `pickle` (default), `line`, `protobuf`, `udp` (plaintext lines in datagrams), or the
    /// protocol of an extension (`kinesis`, `kafka`: per server, with that extension's keys).
    pub protocol: String,
    /// Datapoints per pickle or protobuf message. Default 500 (carbon's
    /// `MAX_DATAPOINTS_PER_MESSAGE`).
    pub max_datapoints_per_message: usize,
    /// `protocol = "udp"`: most bytes of lines per datagram. Default 1432 (fits a 1500-byte
    /// MTU); a longer line goes alone.
    pub max_datagram_bytes: usize,
    /// Stream compression of `line` destinations: `plain` (default), `gzip`, `lz4`, `snappy`
    /// (carbon-c-relay's transports) or `zstd`.
    pub compression: String,
    /// Instances sharing `host:port` form a pool: a datapoint the router sends to any of them
    /// goes once, to the one with the shortest queue (carbon's `DESTINATION_POOL_REPLICAS`).
    /// Default false.
    pub pool_replicas: bool,
    /// TLS to the destinations (`{ ca_file, server_name, client_cert, client_key }`). Default:
    /// none (plaintext).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawClientTls>,
    /// Write once this many bytes are buffered. Default 65536.
    pub flush_bytes: usize,
    /// Wait this long for more data before a smaller write. Default 5 ms.
    pub linger_ms: u64,
    /// TCP connect timeout. Default 3000 ms.
    pub connect_timeout_ms: u64,
    /// First reconnect delay. Default 100 ms; doubles per failure, with jitter.
    pub backoff_min_ms: u64,
    /// Longest reconnect delay. Default 10000 ms.
    pub backoff_max_ms: u64,
    /// A write that makes no progress for this long marks the connection dead (a hung
    /// carbon-cache, a silent network partition): its data is requeued and the relay
    /// reconnects. Default 10000 ms; 0 disables (a hung peer then holds its connection until
    /// the kernel gives up, ~15 minutes).
    pub write_timeout_ms: u64,
    /// TCP keepalive on destination connections: idle seconds before the first probe
    /// (probes every third of that, three unanswered probes close the connection). Default
    /// 30; 0 disables.
    pub keepalive_secs: u64,
    /// `[destinations.queue]`.
    pub queue: RawQueue,
    /// `[destinations.spill]`.
    pub spill: RawSpill,
}

impl Default for RawDestinations {
    fn default() -> Self {
        Self {
            servers: Vec::new(),
            protocol: OutputProtocol::Pickle.as_str().to_string(),
            max_datapoints_per_message: crate::destination::DEFAULT_MAX_DATAPOINTS_PER_MESSAGE,
            max_datagram_bytes: 1432,
            compression: "plain".into(),
            pool_replicas: false,
            tls: None,
            flush_bytes: 64 << 10,
            linger_ms: 5,
            connect_timeout_ms: 3000,
            backoff_min_ms: 100,
            backoff_max_ms: 10_000,
            write_timeout_ms: 10_000,
            keepalive_secs: 30,
            queue: RawQueue::default(),
            spill: RawSpill::default(),
        }
    }
}

/// `[destinations.queue]`: the per-destination queue (its memory tier).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawQueue {
    /// Most datapoints in memory per destination (waiting plus in flight). Default 1000000.
    pub max_datapoints: usize,
    /// Most bytes in memory per destination: the heap its batches hold (names + 24 bytes per
    /// datapoint, plus room a batch did not fill). Default 16777216 (16 MiB).
    pub max_bytes: usize,
    /// Policy when the memory tier is full: `spill`, `drop_newest`, `drop_oldest` or `block`.
    /// Default: `spill` when `destinations.spill.dir` is set, else `drop_newest` (as
    /// carbon-relay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_full: Option<WhenFull>,
    /// With `when_full = "spill"`: what to do once the spill budget is exhausted or the disk
    /// fails: `drop_newest` (default), `drop_oldest` or `block`.
    pub spill_fallback: WhenFull,
    /// How long (ms) TCP clients are held back, per episode, while a connected destination's
    /// memory tier is full, before `when_full` applies (0-3600000; 0 applies it at once).
    /// Default 2000.
    pub full_wait_ms: u64,
}

impl Default for RawQueue {
    fn default() -> Self {
        Self {
            max_datapoints: 1_000_000,
            max_bytes: crate::queue::DEFAULT_MAX_BYTES,
            when_full: None,
            spill_fallback: WhenFull::DropNewest,
            full_wait_ms: crate::queue::DEFAULT_FULL_WAIT.as_millis() as u64,
        }
    }
}

/// `fsync` policy of the spill log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RawFsync {
    /// Every `fsync_interval_ms` (default).
    #[default]
    Interval,
    /// After every batch.
    Always,
    /// Never (the kernel writes back when it likes).
    Never,
}

/// `[destinations.spill]`: the disk tier, one directory per destination under `dir`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawSpill {
    /// Parent directory of the per-destination spill logs; `""` (default) disables spilling.
    pub dir: String,
    /// Disk budget per destination, in bytes. Default 1073741824 (1 GiB).
    pub max_bytes: u64,
    /// Segment file size. Default 67108864 (64 MiB); keep `max_bytes` ≥ 2 × this.
    pub segment_bytes: u64,
    /// Drop records older than this when they come up for replay; 0 (default) = no limit.
    pub max_age_secs: f64,
    /// `interval` (default), `always` or `never`.
    pub fsync: RawFsync,
    /// With `fsync = "interval"`: milliseconds between fsyncs. Default 1000.
    pub fsync_interval_ms: u64,
    /// Most datapoints per second replayed from disk per destination; 0 (default) = unlimited.
    pub replay_rate: u64,
}

impl Default for RawSpill {
    fn default() -> Self {
        Self {
            dir: String::new(),
            max_bytes: 1 << 30,
            segment_bytes: 64 << 20,
            max_age_secs: 0.0,
            fsync: RawFsync::Interval,
            fsync_interval_ms: 1000,
            replay_rate: 0,
        }
    }
}

/// One entry of `servers`: a plain string, or a table with overrides.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RawServer {
    /// `"host:port[:instance]"`.
    Address(String),
    /// `{ address = "host:port:instance", when_full = "drop_newest", … }`.
    Detailed(Box<RawServerDetail>),
}

/// Per-destination overrides.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct RawServerDetail {
    /// `host:port[:instance]`.
    pub address: String,
    /// Overrides `destinations.protocol`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Overrides `destinations.compression`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// Overrides `destinations.queue.when_full`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_full: Option<WhenFull>,
    /// Overrides `destinations.queue.max_datapoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_datapoints: Option<usize>,
    /// Overrides `destinations.queue.max_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue_bytes: Option<usize>,
    /// Overrides `destinations.queue.spill_fallback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill_fallback: Option<WhenFull>,
    /// Overrides `destinations.spill.max_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spill_max_bytes: Option<u64>,
    /// Overrides `destinations.spill.replay_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_rate: Option<u64>,
    /// Every other key: the settings of an extension's protocol (`stream` for `kinesis`, a
    /// `kafka` table for `kafka`), validated by that extension; with a core protocol, an error.
    #[serde(flatten)]
    pub settings: toml::Table,
}

impl RawServer {
    /// The address text.
    pub fn address(&self) -> &str {
        match self {
            RawServer::Address(a) => a,
            RawServer::Detailed(d) => &d.address,
        }
    }

    /// The overrides (none for a plain string).
    pub fn overrides(&self) -> RawServerDetail {
        match self {
            RawServer::Address(a) => RawServerDetail {
                address: a.clone(),
                ..RawServerDetail::default()
            },
            RawServer::Detailed(d) => d.as_ref().clone(),
        }
    }
}

/// One `[[rules]]` entry.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// Regex searched anywhere in the name, ignoring case (as carbon compiles it with `re.I`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The catch-all rule, evaluated last. Exactly one rule has it.
    #[serde(default)]
    pub default: bool,
    /// Destinations (`host:port[:instance]`, as in `servers`).
    pub destinations: Vec<String>,
    /// Keep evaluating later rules after this one matches. Default false.
    #[serde(default, rename = "continue")]
    pub continue_matching: bool,
}

/// `[ingest]`: what happens to a datapoint between parsing and routing.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawIngest {
    /// Round timestamps down to a multiple of this many seconds (carbon's
    /// `MIN_TIMESTAMP_RESOLUTION`). Default 0: keep them as received.
    pub min_timestamp_resolution: u64,
    /// Route and send tagged names in carbon's normalised form: tags sorted, a leading `~`
    /// removed, OpenMetrics `name{tag="value"}` rewritten (carbon's `TAG_RELAY_NORMALIZED`).
    /// Default false.
    pub tag_relay_normalized: bool,
    /// Filter names through `whitelist` and `blacklist` (carbon's `USE_WHITELIST`). Default
    /// false.
    pub use_whitelist: bool,
    /// File of regexes (one per line, `#` comments); when it has any, only names matching one
    /// are relayed. Default `""` (none).
    pub whitelist: String,
    /// File of regexes; names matching one are dropped (checked before the whitelist).
    /// Default `""` (none).
    pub blacklist: String,
    /// Seconds between checks of the list files' modification times. Default 10 (carbon's).
    pub list_reload_secs: f64,
}

impl Default for RawIngest {
    fn default() -> Self {
        Self {
            min_timestamp_resolution: 0,
            tag_relay_normalized: false,
            use_whitelist: false,
            whitelist: String::new(),
            blacklist: String::new(),
            list_reload_secs: 10.0,
        }
    }
}

/// `[telemetry]`: the relay's own metrics.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTelemetry {
    /// Seconds between self-metric datapoints in the stream; 0 disables. Default 60.
    pub interval_secs: f64,
    /// Name prefix. Default `carbon` (carbon's `CARBON_METRIC_PREFIX`).
    pub prefix: String,
    /// Host part of the names. Default: the machine's hostname.
    pub host: String,
    /// Instance part (`<host>-<instance>`). Default `a`.
    pub instance: String,
    /// The carbon path component after the prefix: `relays` (default) or `aggregator`
    /// (what a carbon.conf imported with `--aggregator` sets, as carbon-aggregator reports).
    pub role: String,
}

impl Default for RawTelemetry {
    fn default() -> Self {
        Self {
            interval_secs: 60.0,
            prefix: "carbon".into(),
            host: String::new(),
            instance: "a".into(),
            role: "relays".into(),
        }
    }
}

/// `[admin]`: the admin HTTP listener (`/metrics`, `/healthz`, `/ready`, `/destinations`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAdmin {
    /// `IP:port` of the admin listener. Default `""` (off).
    pub listen: String,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines (colours only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`: logging of the `anthracite` binary (levels come from `RUST_LOG`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLog {
    /// `text` (default) or `json`; `--log-format` overrides it.
    pub format: LogFormat,
}

/// `[shutdown]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawShutdown {
    /// Seconds to flush queues after receivers stop. Default 10.
    pub grace_secs: f64,
}

impl Default for RawShutdown {
    fn default() -> Self {
        Self { grace_secs: 10.0 }
    }
}
