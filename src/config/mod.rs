//! Configuration, in two stages.
//!
//! [`raw`] holds the serde structs of `relay.toml` (`deny_unknown_fields`, every default
//! documented); [`Config`] is the validated result: parsed addresses, the destination list and
//! a [`RouterSpec`] ready to build. Every cross-field rule reports the key it concerns.

pub mod carbon;
pub mod ini;
pub mod kinesis;
pub mod raw;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::destination::{DestinationConfig, MAX_UDP_PAYLOAD, OutputProtocol};
use crate::queue::spill::{FsyncPolicy, SpillConfig};
use crate::queue::{QueueLimits, SpillSettings, WhenFull};
use crate::router::{DestinationSpec, Method, RouterSpec, RuleSpec};
use crate::tls::{ClientTls, ClientTlsSettings, ServerTls, ServerTlsSettings};

pub use kinesis::KinesisConfig;
pub use raw::RawConfig;

/// Configuration errors. Every variant names the key (and the file, when loaded from one).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML did not parse or did not match the schema.
    #[error("{file}: {message}")]
    Syntax {
        /// The file (or `<string>`).
        file: String,
        /// The parser's message, naming the key and position.
        message: String,
    },
    /// A value is out of range or inconsistent with another.
    #[error("{file}: {key}: {message}")]
    Invalid {
        /// The file (or `<string>`).
        file: String,
        /// The dotted key at fault.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// Where the relay listens.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenConfig {
    /// Plaintext over TCP (`None`: off).
    pub line_tcp: Option<SocketAddr>,
    /// Plaintext over UDP (`None`: off).
    pub line_udp: Option<SocketAddr>,
    /// Pickle over TCP (`None`: off).
    pub pickle_tcp: Option<SocketAddr>,
    /// carbon's protobuf over TCP (`None`: off).
    pub protobuf_tcp: Option<SocketAddr>,
    /// Most concurrent client connections over all TCP receivers.
    pub max_connections: usize,
    /// Close a client connection silent for this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Longest accepted plaintext line, in bytes.
    pub max_line_length: usize,
    /// Largest accepted pickle frame, in bytes.
    pub max_pickle_frame: usize,
    /// Largest accepted protobuf frame, in bytes.
    pub max_protobuf_frame: usize,
    /// TLS on every TCP receiver (`None`: plaintext).
    pub tls: Option<ServerTls>,
}

/// The relay's own metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// How often self-metrics are emitted into the stream (`None`: never).
    pub interval: Option<Duration>,
    /// First component of self-metric names (carbon's `CARBON_METRIC_PREFIX`).
    pub prefix: String,
    /// Host component (dots become underscores), defaults to the machine's hostname.
    pub host: String,
    /// Instance name appended as `<host>-<instance>`.
    pub instance: String,
}

impl TelemetryConfig {
    /// `<prefix>.relays.<host>-<instance>`, as carbon names its relay metrics.
    pub fn metric_root(&self) -> String {
        format!(
            "{}.relays.{}-{}",
            self.prefix,
            self.host.replace('.', "_"),
            self.instance
        )
    }
}

/// Between parsing and routing.
#[derive(Clone, Debug, PartialEq)]
pub struct IngestConfig {
    /// Timestamps are rounded down to a multiple of this many seconds (0: off).
    pub min_timestamp_resolution: u64,
    /// Normalise tagged names before routing (carbon's `TAG_RELAY_NORMALIZED`).
    pub tag_relay_normalized: bool,
    /// White/blacklist files (`None`: no filtering).
    pub lists: Option<ListsConfig>,
}

/// carbon's `USE_WHITELIST` files.
#[derive(Clone, Debug, PartialEq)]
pub struct ListsConfig {
    /// Whitelist file (`None`: no whitelist).
    pub whitelist: Option<PathBuf>,
    /// Blacklist file (`None`: no blacklist).
    pub blacklist: Option<PathBuf>,
    /// How often the files' modification times are checked.
    pub reload_interval: Duration,
}

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Listeners.
    pub listen: ListenConfig,
    /// Routing, ready for [`crate::router::Router::new`].
    pub router: RouterSpec,
    /// Names cached per connection by the route cache (0: no cache).
    pub route_cache_entries: usize,
    /// Destinations, in `servers` order (the ring insertion order).
    pub destinations: Vec<DestinationConfig>,
    /// Instances sharing `host:port` share the load instead of each getting a copy (carbon's
    /// `DESTINATION_POOL_REPLICAS`).
    pub pool_replicas: bool,
    /// Filtering and normalisation before routing.
    pub ingest: IngestConfig,
    /// Self-metrics.
    pub telemetry: TelemetryConfig,
    /// How long shutdown may take to flush queues.
    pub shutdown_grace: Duration,
    /// Kinesis Data Streams sources (`[[kinesis]]`).
    pub kinesis: Vec<KinesisConfig>,
    /// The raw configuration with every default filled in (what `anthracite check` prints).
    pub resolved: RawConfig,
}

impl Config {
    /// Reads and validates a `relay.toml` file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates `relay.toml` text.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::parse(text, "<string>")
    }

    fn parse(text: &str, file: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        Self::from_raw(raw, file)
    }

    /// Validates raw structs (the second stage).
    pub fn from_raw(raw: RawConfig, file: &str) -> Result<Self, ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            file: file.to_string(),
            key: key.to_string(),
            message,
        };
        let addr = |key: &str, text: &str| -> Result<Option<SocketAddr>, ConfigError> {
            if text.is_empty() {
                return Ok(None);
            }
            text.parse::<SocketAddr>().map(Some).map_err(|e| {
                invalid(
                    key,
                    format!("{text:?} is not an IP:port socket address ({e}); use \"\" to disable"),
                )
            })
        };
        let l = &raw.listen;
        if l.max_line_length < 64 {
            return Err(invalid(
                "listen.max_line_length",
                "must be at least 64".into(),
            ));
        }
        for (key, frame) in [
            ("listen.max_pickle_frame", l.max_pickle_frame),
            ("listen.max_protobuf_frame", l.max_protobuf_frame),
        ] {
            if !(64..=(1 << 30)).contains(&frame) {
                return Err(invalid(key, "must be between 64 bytes and 1 GiB".into()));
            }
        }
        if l.max_connections == 0 {
            return Err(invalid(
                "listen.max_connections",
                "must be at least 1".into(),
            ));
        }
        let listen = ListenConfig {
            line_tcp: addr("listen.line_tcp", &l.line_tcp)?,
            line_udp: addr("listen.line_udp", &l.line_udp)?,
            pickle_tcp: addr("listen.pickle_tcp", &l.pickle_tcp)?,
            protobuf_tcp: addr("listen.protobuf_tcp", &l.protobuf_tcp)?,
            max_connections: l.max_connections,
            idle_timeout: (l.idle_timeout_secs > 0.0)
                .then(|| Duration::from_secs_f64(l.idle_timeout_secs)),
            max_line_length: l.max_line_length,
            max_pickle_frame: l.max_pickle_frame,
            max_protobuf_frame: l.max_protobuf_frame,
            tls: server_tls(l.tls.as_ref(), &invalid)?,
        };

        let d = &raw.destinations;
        if d.servers.is_empty() {
            return Err(invalid(
                "destinations.servers",
                "at least one destination is required".into(),
            ));
        }
        let tls = client_tls(d.tls.as_ref(), &invalid)?;
        if !(64..=MAX_UDP_PAYLOAD).contains(&d.max_datagram_bytes) {
            return Err(invalid(
                "destinations.max_datagram_bytes",
                format!("must be between 64 and {MAX_UDP_PAYLOAD}"),
            ));
        }
        let mut destinations: Vec<DestinationConfig> = Vec::with_capacity(d.servers.len());
        for (i, server) in d.servers.iter().enumerate() {
            let key = format!("destinations.servers[{i}]");
            let spec = DestinationSpec::parse(server.address())
                .map_err(|e| invalid(&key, e.to_string()))?;
            if let Some(prev) = destinations
                .iter()
                .find(|p| p.spec.host == spec.host && p.spec.instance == spec.instance)
            {
                return Err(invalid(
                    &key,
                    format!(
                        "{spec} has the same (host, instance) as {} — carbon's ring cannot tell them apart",
                        prev.spec
                    ),
                ));
            }
            let o = server.overrides();
            let spill_on = !d.spill.dir.is_empty();
            let default_policy = if spill_on {
                WhenFull::Spill
            } else {
                WhenFull::DropNewest
            };
            let limits = QueueLimits {
                max_datapoints: o.max_queue_datapoints.unwrap_or(d.queue.max_datapoints),
                max_bytes: o.max_queue_bytes.unwrap_or(d.queue.max_bytes),
                when_full: o.when_full.or(d.queue.when_full).unwrap_or(default_policy),
                spill_fallback: o.spill_fallback.unwrap_or(d.queue.spill_fallback),
            };
            if limits.max_datapoints == 0 || limits.max_bytes == 0 {
                return Err(invalid(&key, "queue bounds must be positive".into()));
            }
            if limits.spill_fallback == WhenFull::Spill {
                let k = if o.spill_fallback.is_some() {
                    format!("{key}.spill_fallback")
                } else {
                    "destinations.queue.spill_fallback".into()
                };
                return Err(invalid(
                    &k,
                    "must be drop_newest, drop_oldest or block (spill cannot be its own fallback)"
                        .into(),
                ));
            }
            if limits.when_full == WhenFull::Spill && !spill_on {
                let k = if o.when_full.is_some() {
                    format!("{key}.when_full")
                } else {
                    "destinations.queue.when_full".into()
                };
                return Err(invalid(
                    &k,
                    "\"spill\" needs destinations.spill.dir to be set".into(),
                ));
            }
            let spill = if spill_on {
                Some(spill_settings(&d.spill, &o, &spec, &invalid)?)
            } else {
                None
            };
            if d.max_datapoints_per_message == 0 {
                return Err(invalid(
                    "destinations.max_datapoints_per_message",
                    "must be at least 1".into(),
                ));
            }
            if d.backoff_min_ms == 0 || d.backoff_max_ms < d.backoff_min_ms {
                return Err(invalid(
                    "destinations.backoff_max_ms",
                    "need 0 < backoff_min_ms <= backoff_max_ms".into(),
                ));
            }
            let protocol = o.protocol.unwrap_or(d.protocol);
            if protocol == OutputProtocol::Udp && tls.is_some() {
                return Err(invalid(
                    "destinations.tls",
                    format!(
                        "{spec} uses protocol \"udp\": TLS needs a TCP protocol (pickle, line or protobuf)"
                    ),
                ));
            }
            destinations.push(DestinationConfig {
                spec,
                protocol,
                max_datapoints_per_message: d.max_datapoints_per_message,
                queue: limits,
                flush_bytes: d.flush_bytes.max(1),
                linger: Duration::from_millis(d.linger_ms),
                connect_timeout: Duration::from_millis(d.connect_timeout_ms.max(1)),
                backoff_min: Duration::from_millis(d.backoff_min_ms),
                backoff_max: Duration::from_millis(d.backoff_max_ms),
                spill,
                tls: tls.clone(),
                max_datagram_bytes: d.max_datagram_bytes,
            });
        }
        if destinations.len() > usize::from(u16::MAX) {
            return Err(invalid(
                "destinations.servers",
                "too many destinations".into(),
            ));
        }

        let r = &raw.router;
        if r.replication_factor == 0 {
            return Err(invalid(
                "router.replication_factor",
                "must be at least 1".into(),
            ));
        }
        let mut rules = Vec::with_capacity(raw.rules.len());
        if r.method == Method::Rules {
            let mut defaults = 0;
            for (i, rule) in raw.rules.iter().enumerate() {
                let key = format!("rules[{i}]");
                if rule.default == rule.pattern.is_some() {
                    return Err(invalid(
                        &key,
                        "a rule has either `pattern` or `default = true`, not both or neither"
                            .into(),
                    ));
                }
                if rule.default {
                    defaults += 1;
                }
                if let Some(p) = &rule.pattern {
                    crate::pattern::Pattern::case_insensitive(p)
                        .map_err(|e| invalid(&format!("{key}.pattern"), e.to_string()))?;
                }
                // An empty list is allowed: the rule discards what it matches, which is what
                // carbon does when none of a rule's destinations is configured.
                let mut idx = Vec::with_capacity(rule.destinations.len());
                for name in &rule.destinations {
                    let spec = DestinationSpec::parse(name)
                        .map_err(|e| invalid(&format!("{key}.destinations"), e.to_string()))?;
                    let pos = destinations
                        .iter()
                        .position(|d| d.spec == spec)
                        .ok_or_else(|| {
                            invalid(
                                &format!("{key}.destinations"),
                                format!("{name:?} is not in destinations.servers"),
                            )
                        })?;
                    idx.push(pos as u16);
                }
                rules.push(RuleSpec {
                    pattern: rule.pattern.clone(),
                    destinations: idx,
                    continue_matching: rule.continue_matching,
                });
            }
            if defaults != 1 {
                return Err(invalid(
                    "rules",
                    format!(
                        "method \"rules\" needs exactly one rule with default = true, found {defaults}"
                    ),
                ));
            }
        } else if !raw.rules.is_empty() {
            return Err(invalid(
                "rules",
                "rules are only used with router.method = \"rules\"".into(),
            ));
        }
        if r.method.is_aggregated() {
            for (i, line) in r.aggregation_rules.iter().enumerate() {
                crate::router::aggregation::AggregationRule::parse(line).map_err(|e| {
                    invalid(&format!("router.aggregation_rules[{i}]"), e.to_string())
                })?;
            }
        } else if !r.aggregation_rules.is_empty() {
            return Err(invalid(
                "router.aggregation_rules",
                "aggregation rules are only used with the aggregated methods".into(),
            ));
        }
        let router = RouterSpec {
            method: r.method,
            hash_type: r.hash_type,
            replication_factor: r.replication_factor,
            diverse_replicas: r.diverse_replicas,
            destinations: destinations.iter().map(|d| d.spec.clone()).collect(),
            rules,
            aggregation_rules: r.aggregation_rules.clone(),
        };

        let t = &raw.telemetry;
        if t.interval_secs < 0.0 || !t.interval_secs.is_finite() {
            return Err(invalid("telemetry.interval_secs", "must be >= 0".into()));
        }
        let host = if t.host.is_empty() {
            gethostname::gethostname().to_string_lossy().into_owned()
        } else {
            t.host.clone()
        };
        let telemetry = TelemetryConfig {
            interval: (t.interval_secs > 0.0).then(|| Duration::from_secs_f64(t.interval_secs)),
            prefix: t.prefix.clone(),
            host,
            instance: t.instance.clone(),
        };
        let g = &raw.ingest;
        if !(g.list_reload_secs > 0.0 && g.list_reload_secs.is_finite()) {
            return Err(invalid("ingest.list_reload_secs", "must be > 0".into()));
        }
        let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
        let ingest = IngestConfig {
            min_timestamp_resolution: g.min_timestamp_resolution,
            tag_relay_normalized: g.tag_relay_normalized,
            lists: g.use_whitelist.then(|| ListsConfig {
                whitelist: path(&g.whitelist),
                blacklist: path(&g.blacklist),
                reload_interval: Duration::from_secs_f64(g.list_reload_secs),
            }),
        };
        if !(raw.shutdown.grace_secs >= 0.0 && raw.shutdown.grace_secs.is_finite()) {
            return Err(invalid("shutdown.grace_secs", "must be >= 0".into()));
        }
        let kinesis = kinesis::validate_all(&raw.kinesis.0, listen.max_line_length)
            .map_err(|(key, message)| invalid(&key, message))?;
        Ok(Config {
            kinesis,
            listen,
            router,
            route_cache_entries: r.route_cache_entries,
            destinations,
            pool_replicas: d.pool_replicas,
            ingest,
            telemetry,
            shutdown_grace: Duration::from_secs_f64(raw.shutdown.grace_secs),
            resolved: raw,
        })
    }

    /// The configuration with every default filled in, as TOML.
    pub fn to_resolved_toml(&self) -> String {
        toml::to_string_pretty(&self.resolved)
            .unwrap_or_else(|e| format!("# cannot render configuration: {e}\n"))
    }
}

/// `destinations.tls`: files read and the rustls configuration built now, so a bad file is a
/// startup error naming the key.
fn client_tls(
    raw: Option<&raw::RawClientTls>,
    invalid: &impl Fn(&str, String) -> ConfigError,
) -> Result<Option<ClientTls>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
    if raw.client_cert.is_empty() != raw.client_key.is_empty() {
        return Err(invalid(
            "destinations.tls.client_key",
            "client_cert and client_key go together".into(),
        ));
    }
    let settings = ClientTlsSettings {
        ca_file: path(&raw.ca_file),
        server_name: (!raw.server_name.is_empty()).then(|| raw.server_name.clone()),
        client_cert: path(&raw.client_cert),
        client_key: path(&raw.client_key),
    };
    ClientTls::new(settings)
        .map(Some)
        .map_err(|e| invalid("destinations.tls", e.to_string()))
}

/// `listen.tls`, read and built like [`client_tls`].
fn server_tls(
    raw: Option<&raw::RawServerTls>,
    invalid: &impl Fn(&str, String) -> ConfigError,
) -> Result<Option<ServerTls>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    for (key, value) in [
        ("listen.tls.cert_file", &raw.cert_file),
        ("listen.tls.key_file", &raw.key_file),
    ] {
        if value.is_empty() {
            return Err(invalid(key, "required with listen.tls".into()));
        }
    }
    let settings = ServerTlsSettings {
        cert_file: PathBuf::from(&raw.cert_file),
        key_file: PathBuf::from(&raw.key_file),
        client_ca: (!raw.client_ca.is_empty()).then(|| PathBuf::from(&raw.client_ca)),
    };
    ServerTls::new(settings)
        .map(Some)
        .map_err(|e| invalid("listen.tls", e.to_string()))
}

/// The spill settings of one destination: its own directory under `spill.dir`, the log's
/// limits (with the server's overrides), validated with errors naming the key.
fn spill_settings(
    raw: &raw::RawSpill,
    o: &raw::RawServerDetail,
    spec: &DestinationSpec,
    invalid: &impl Fn(&str, String) -> ConfigError,
) -> Result<SpillSettings, ConfigError> {
    if !(raw.max_age_secs >= 0.0 && raw.max_age_secs.is_finite()) {
        return Err(invalid(
            "destinations.spill.max_age_secs",
            "must be >= 0".into(),
        ));
    }
    let fsync = match raw.fsync {
        raw::RawFsync::Always => FsyncPolicy::Always,
        raw::RawFsync::Never => FsyncPolicy::Never,
        raw::RawFsync::Interval => {
            if raw.fsync_interval_ms == 0 {
                return Err(invalid(
                    "destinations.spill.fsync_interval_ms",
                    "must be at least 1 (or use fsync = \"always\")".into(),
                ));
            }
            FsyncPolicy::Interval(Duration::from_millis(raw.fsync_interval_ms))
        }
    };
    let log = SpillConfig {
        max_bytes: o.spill_max_bytes.unwrap_or(raw.max_bytes),
        segment_bytes: raw.segment_bytes,
        max_age: (raw.max_age_secs > 0.0).then(|| Duration::from_secs_f64(raw.max_age_secs)),
        fsync,
        ..SpillConfig::default()
    };
    if log.segment_bytes < 4096 || log.segment_bytes > u64::from(u32::MAX) {
        return Err(invalid(
            "destinations.spill.segment_bytes",
            "must be between 4096 bytes and 4 GiB".into(),
        ));
    }
    if log.max_bytes < 2 * log.segment_bytes {
        let k = if o.spill_max_bytes.is_some() {
            "spill_max_bytes"
        } else {
            "destinations.spill.max_bytes"
        };
        return Err(invalid(
            k,
            format!(
                "must be at least 2 × segment_bytes ({})",
                2 * log.segment_bytes
            ),
        ));
    }
    let rate = o.replay_rate.unwrap_or(raw.replay_rate);
    let leaf: String = format!(
        "{}_{}_{}",
        spec.host,
        spec.port,
        spec.instance.as_deref().unwrap_or("None")
    )
    .chars()
    .map(|c| {
        if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
            c
        } else {
            '_'
        }
    })
    .collect();
    Ok(SpillSettings {
        dir: Path::new(&raw.dir).join(leaf),
        log,
        replay_rate: (rate > 0).then_some(rate),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_carbon_ports_and_validation_names_keys() {
        let c = Config::from_toml_str("[destinations]\nservers = [\"127.0.0.1:2104:a\"]\n")
            .expect("minimal config");
        assert_eq!(c.listen.line_tcp, "0.0.0.0:2003".parse().ok());
        assert_eq!(c.listen.pickle_tcp, "0.0.0.0:2004".parse().ok());
        assert_eq!(c.listen.line_udp, None);
        let err = Config::from_toml_str(
            "[destinations]\nservers = [\"127.0.0.1:2104:a\", \"127.0.0.1:2204:a\"]\n",
        )
        .expect_err("duplicate (host, instance)");
        assert!(err.to_string().contains("destinations.servers[1]"), "{err}");
        let err = Config::from_toml_str("[destinations]\nservers=[\"a:1\"]\nbogus = 1\n")
            .expect_err("unknown key");
        assert!(err.to_string().contains("bogus"), "{err}");
        let err = Config::from_toml_str(
            "[router]\nmethod = \"rules\"\n[destinations]\nservers=[\"a:1\"]\n",
        )
        .expect_err("rules need a default");
        assert!(err.to_string().contains("rules"), "{err}");
    }

    #[test]
    fn spill_defaults_and_validation_name_the_key() {
        let base = "[destinations]\nservers = [\"127.0.0.1:2104:a\"]\n";
        let c = Config::from_toml_str(base).expect("no spill");
        assert_eq!(c.destinations[0].queue.when_full, WhenFull::DropNewest);
        assert!(c.destinations[0].spill.is_none());
        let c = Config::from_toml_str(&format!(
            "{base}[destinations.spill]\ndir = \"/tmp/sp\"\nreplay_rate = 5000\nfsync = \"always\"\n"
        ))
        .expect("spill");
        let d = &c.destinations[0];
        assert_eq!(d.queue.when_full, WhenFull::Spill);
        let spill = d.spill.as_ref().expect("spill settings");
        assert_eq!(spill.dir, Path::new("/tmp/sp/127.0.0.1_2104_a"));
        assert_eq!(spill.replay_rate, Some(5000));
        assert_eq!(spill.log.fsync, FsyncPolicy::Always);
        let err = Config::from_toml_str(&format!(
            "{base}[destinations.queue]\nwhen_full = \"spill\"\n"
        ))
        .expect_err("spill without dir");
        assert!(
            err.to_string().contains("destinations.queue.when_full"),
            "{err}"
        );
        let err = Config::from_toml_str(&format!(
            "{base}[destinations.queue]\nspill_fallback = \"spill\"\n"
        ))
        .expect_err("spill as fallback");
        assert!(err.to_string().contains("spill_fallback"), "{err}");
        let err = Config::from_toml_str(&format!(
            "{base}[destinations.spill]\ndir = \"/tmp/sp\"\nmax_bytes = 100000\nsegment_bytes = 65536\n"
        ))
        .expect_err("budget below two segments");
        assert!(
            err.to_string().contains("destinations.spill.max_bytes"),
            "{err}"
        );
    }
}
