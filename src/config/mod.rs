//! Configuration, in two stages.
//!
//! [`raw`] holds the serde structs of `relay.toml` (`deny_unknown_fields`, every default
//! documented); [`Config`] is the validated result: parsed addresses, the destination list and
//! a [`RouterSpec`] ready to build. Every cross-field rule reports the key it concerns.

pub mod raw;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::destination::DestinationConfig;
use crate::queue::QueueLimits;
use crate::router::{DestinationSpec, Method, RouterSpec, RuleSpec};

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
    /// Most concurrent client connections over all TCP receivers.
    pub max_connections: usize,
    /// Close a client connection silent for this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Longest accepted plaintext line, in bytes.
    pub max_line_length: usize,
    /// Largest accepted pickle frame, in bytes.
    pub max_pickle_frame: usize,
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
    /// Self-metrics.
    pub telemetry: TelemetryConfig,
    /// How long shutdown may take to flush queues.
    pub shutdown_grace: Duration,
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
        if l.max_pickle_frame < 64 || l.max_pickle_frame > (1 << 30) {
            return Err(invalid(
                "listen.max_pickle_frame",
                "must be between 64 bytes and 1 GiB".into(),
            ));
        }
        if l.max_connections == 0 {
            return Err(invalid("listen.max_connections", "must be at least 1".into()));
        }
        let listen = ListenConfig {
            line_tcp: addr("listen.line_tcp", &l.line_tcp)?,
            line_udp: addr("listen.line_udp", &l.line_udp)?,
            pickle_tcp: addr("listen.pickle_tcp", &l.pickle_tcp)?,
            max_connections: l.max_connections,
            idle_timeout: (l.idle_timeout_secs > 0.0)
                .then(|| Duration::from_secs_f64(l.idle_timeout_secs)),
            max_line_length: l.max_line_length,
            max_pickle_frame: l.max_pickle_frame,
        };

        let d = &raw.destinations;
        if d.servers.is_empty() {
            return Err(invalid(
                "destinations.servers",
                "at least one destination is required".into(),
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
            let limits = QueueLimits {
                max_datapoints: o.max_queue_datapoints.unwrap_or(d.queue.max_datapoints),
                max_bytes: o.max_queue_bytes.unwrap_or(d.queue.max_bytes),
                when_full: o.when_full.unwrap_or(d.queue.when_full),
            };
            if limits.max_datapoints == 0 || limits.max_bytes == 0 {
                return Err(invalid(&key, "queue bounds must be positive".into()));
            }
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
            destinations.push(DestinationConfig {
                spec,
                protocol: o.protocol.unwrap_or(d.protocol),
                max_datapoints_per_message: d.max_datapoints_per_message,
                queue: limits,
                flush_bytes: d.flush_bytes.max(1),
                linger: Duration::from_millis(d.linger_ms),
                connect_timeout: Duration::from_millis(d.connect_timeout_ms.max(1)),
                backoff_min: Duration::from_millis(d.backoff_min_ms),
                backoff_max: Duration::from_millis(d.backoff_max_ms),
            });
        }
        if destinations.len() > usize::from(u16::MAX) {
            return Err(invalid("destinations.servers", "too many destinations".into()));
        }

        let r = &raw.router;
        if r.replication_factor == 0 {
            return Err(invalid("router.replication_factor", "must be at least 1".into()));
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
                    regex::Regex::new(p)
                        .map_err(|e| invalid(&format!("{key}.pattern"), e.to_string()))?;
                }
                if rule.destinations.is_empty() {
                    return Err(invalid(
                        &format!("{key}.destinations"),
                        "must name at least one destination".into(),
                    ));
                }
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
                    format!("method \"rules\" needs exactly one rule with default = true, found {defaults}"),
                ));
            }
        } else if !raw.rules.is_empty() {
            return Err(invalid(
                "rules",
                "rules are only used with router.method = \"rules\"".into(),
            ));
        }
        let router = RouterSpec {
            method: r.method,
            hash_type: r.hash_type,
            replication_factor: r.replication_factor,
            diverse_replicas: r.diverse_replicas,
            destinations: destinations.iter().map(|d| d.spec.clone()).collect(),
            rules,
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
        if !(raw.shutdown.grace_secs >= 0.0 && raw.shutdown.grace_secs.is_finite()) {
            return Err(invalid("shutdown.grace_secs", "must be >= 0".into()));
        }
        Ok(Config {
            listen,
            router,
            route_cache_entries: r.route_cache_entries,
            destinations,
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
}
