//! Configuration, in two stages.
//!
//! [`raw`] holds the serde structs of `relay.toml` (`deny_unknown_fields`, every default
//! documented); [`Config`] is the validated result: parsed addresses, the destination list and
//! a [`RouterSpec`] ready to build. Every cross-field rule reports the key it concerns.

pub(crate) mod aggregation;
mod builder;
pub(crate) mod c_relay;
pub(crate) mod carbon;
pub(crate) mod ini;
mod placement;
pub(crate) mod raw;
mod telemetry;
mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::destination::DestinationConfig;
use crate::extension::{Extensions, SourceSpec};
pub(crate) use crate::filter::ListsConfig;
use crate::protocol::compression::Compression;
use crate::router::RouterSpec;
use crate::tls::ServerTls;
pub use placement::Placement;
pub(crate) use telemetry::TelemetryConfig;

pub use builder::ConfigBuilder;
pub use c_relay::{CRelayFlags, CRelayImport, CRelayOptions};
pub use carbon::{CarbonImport, CarbonOptions};
pub use raw::LogFormat;
pub(crate) use raw::RawConfig;

/// Configuration errors. Every variant names the key (and the file, when loaded from one).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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

impl ConfigError {
    /// A value of `file` at `key` is out of range or inconsistent: the one way every
    /// validator (the core's sections, the carbon.conf import, an extension's section)
    /// reports it.
    pub fn invalid(
        file: impl std::fmt::Display,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConfigError::Invalid {
            file: file.to_string(),
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Where the relay listens.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ListenConfig {
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
    /// Longest accepted metric name, in bytes (every protocol).
    pub max_name_length: usize,
    /// Bytes all connections together may hold for frames over their base read buffer.
    pub max_frame_buffer_bytes: usize,
    /// Listen backlog of the TCP receivers the relay binds.
    pub backlog: u32,
    /// `SO_RCVBUF` asked for the UDP socket (`None`: the system default).
    pub udp_recv_buffer: Option<usize>,
    /// Largest accepted protobuf frame, in bytes.
    pub max_protobuf_frame: usize,
    /// TLS on every TCP receiver (`None`: plaintext).
    pub tls: Option<ServerTls>,
    /// Stream compression of `line_tcp`'s connections.
    pub line_tcp_compression: Compression,
    /// Most bytes one unit of a compressed connection may decode into.
    pub max_decompressed_bytes: usize,
    /// More plaintext receivers (a carbon-c-relay configuration's `listen` beyond the first
    /// TCP and UDP address): bound at startup, kept as they are by a reload.
    pub extra_line: Vec<ExtraLine>,
}

/// A plaintext receiver beyond `line_tcp` and `line_udp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ExtraLine {
    /// A TCP address, its connections' compression and its own TLS (never `listen.tls`).
    Tcp(SocketAddr, Compression, Option<ListenerPem>),
    Udp(SocketAddr),
    /// A Unix stream socket's path (a stale socket file there is removed first), its
    /// connections' compression and its own TLS.
    Unix(std::path::PathBuf, Compression, Option<ListenerPem>),
}

/// A receiver's own TLS: one PEM file holding its certificate and private key (a
/// carbon-c-relay listener's `ssl PEMFILE`, read with OpenSSL's `use_certificate_file` and
/// `use_PrivateKey_file` on the same path). It is read when the receiver is bound, as
/// carbon-c-relay reads it: `check` (its `-t`) accepts a configuration whose file is not there,
/// `run` refuses to start without it. The stream is decompressed inside TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListenerPem {
    /// The PEM file, relative to the working directory as carbon-c-relay opens it.
    pub path: PathBuf,
    /// Where the configuration names it (`file:line`).
    pub origin: String,
}

impl ListenerPem {
    /// Reads the file into a TLS server configuration; the error names the file and where the
    /// configuration names it.
    pub(crate) fn load(&self) -> Result<ServerTls, String> {
        ServerTls::new(crate::tls::ServerTlsSettings {
            cert_file: self.path.clone(),
            key_file: self.path.clone(),
            client_ca: None,
        })
        .map_err(|e| format!("{}: listen … ssl {}: {e}", self.origin, self.path.display()))
    }
}

/// Between parsing and routing.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct IngestConfig {
    /// Timestamps are rounded down to a multiple of this many seconds (0: off).
    pub min_timestamp_resolution: u64,
    /// Normalise tagged names before routing (carbon's `TAG_RELAY_NORMALIZED`).
    pub tag_relay_normalized: bool,
    /// White/blacklist files (`None`: no filtering).
    pub lists: Option<ListsConfig>,
}

/// A validated configuration: read from `relay.toml` ([`Config::load`]), from carbon-relay's
/// own `carbon.conf` ([`Config::load_carbon`]), or built in code ([`Config::builder`]).
///
/// Its parts are the relay's business; what an embedder needs is on the methods.
#[derive(Clone, Debug)]
pub struct Config {
    /// Listeners.
    pub(crate) listen: ListenConfig,
    /// Routing, ready for [`crate::router::Router::new`].
    pub(crate) router: RouterSpec,
    /// Bytes of the relay's shared route cache (0: no cache).
    pub(crate) route_cache_bytes: usize,
    /// Destinations, in `servers` order (the ring insertion order).
    pub(crate) destinations: Vec<DestinationConfig>,
    /// Instances sharing `host:port` share the load instead of each getting a copy (carbon's
    /// `DESTINATION_POOL_REPLICAS`).
    pub(crate) pool_replicas: bool,
    /// Filtering and normalisation before routing.
    pub(crate) ingest: IngestConfig,
    /// Self-metrics.
    pub(crate) telemetry: TelemetryConfig,
    /// How long shutdown may take to flush queues.
    pub(crate) shutdown_grace: Duration,
    /// The admin HTTP listener (`None`: off).
    pub(crate) admin_listen: Option<SocketAddr>,
    /// Where it was read from (a file name, `<string>`, `<builder>`), for logs.
    pub(crate) source: String,
    /// Sources of extensions (`[[kinesis]]`, `[[kafka]]`, …), in file order.
    pub(crate) sources: Vec<Arc<dyn SourceSpec>>,
    /// carbon-aggregator's stage (`[aggregation]`, `[rewrite]`; `None`: off).
    pub(crate) aggregation: Option<aggregation::AggregationConfig>,
    /// The raw configuration with every default filled in (what `anthracite check` prints).
    pub(crate) resolved: RawConfig,
    /// What the configuration does that an operator should hear about at start.
    pub(crate) warnings: Vec<String>,
}

impl Config {
    /// Reads and validates a `relay.toml` file of the core alone (a section of an extension,
    /// such as `[[kinesis]]`, is an error: see [`load_with`](Self::load_with)). A relative
    /// `destinations.spill.dir` is taken relative to the file's directory, not to wherever the
    /// relay was started.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(path, &Extensions::new())
    }

    /// Reads and validates a `relay.toml` file whose extension sections and destination
    /// protocols go to `extensions`.
    pub fn load_with(path: &Path, extensions: &Extensions) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file = path.display().to_string();
        let mut raw = RawConfig::parse(&text, &file)?;
        let spill = &mut raw.destinations.spill.dir;
        if !spill.is_empty() && Path::new(spill.as_str()).is_relative() {
            let base = path.parent().unwrap_or(Path::new(""));
            let base = std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf());
            *spill = base.join(spill.as_str()).display().to_string();
        }
        Self::validate(raw, &file, extensions)
    }

    /// Parses and validates `relay.toml` text of the core alone.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::from_toml_str_with(text, &Extensions::new())
    }

    /// Parses and validates `relay.toml` text whose extension sections and destination
    /// protocols go to `extensions`.
    pub fn from_toml_str_with(text: &str, extensions: &Extensions) -> Result<Self, ConfigError> {
        let raw = RawConfig::parse(text, "<string>")?;
        Self::validate(raw, "<string>", extensions)
    }

    /// Reads an unchanged carbon-relay `carbon.conf` (`[relay]`, then `[relay:<instance>]`)
    /// with its relay-rules, aggregation-rules and list files, as carbon 1.1.10 does. The
    /// result carries one warning per setting that has no effect in anthracite.
    pub fn load_carbon(options: &CarbonOptions) -> Result<CarbonImport, ConfigError> {
        carbon::load(options)
    }

    /// Reads carbon-c-relay's configuration file (3.7's language, with its `include`s) and
    /// command-line flags: its clusters become the destinations, its matches, rewrites and
    /// aggregations the routing, its `listen` the receivers. Errors name the file and line.
    pub fn load_c_relay(options: &CRelayOptions) -> Result<CRelayImport, ConfigError> {
        c_relay::load(options)
    }

    /// carbon-relay 1.1.10's defaults, as its `carbon.conf.example` gives them in `[relay]`
    /// (imported like any carbon.conf), plus an admin listener: what the `anthracite` binary
    /// runs on when it is given no configuration.
    ///
    /// - plaintext on `0.0.0.0:2013`, pickle on `0.0.0.0:2014` (no UDP, no protobuf);
    /// - one destination, `127.0.0.1:2004` (a carbon-cache's pickle port), spoken to in pickle,
    ///   500 datapoints per message;
    /// - a queue of 10,000 datapoints (`MAX_QUEUE_SIZE`) that makes producers wait when full
    ///   (`USE_FLOW_CONTROL = True`: the `block` policy), no spill directory;
    /// - self-metrics every 60 s under `carbon.relays.<host>-a`;
    /// - the admin listener (`/metrics`, `/healthz`, the status page) on `127.0.0.1:8080`,
    ///   which carbon does not have.
    ///
    /// The routing is consistent hashing (`carbon_ch`, replication factor 1), where the example
    /// says `RELAY_METHOD = rules`: carbon-relay cannot start on that without a
    /// relay-rules.conf, which the example does not provide, and with a single destination
    /// every method sends every name to it, so consistent hashing, which needs no rules file,
    /// places every datapoint where carbon's rules would. Adding destinations calls for a
    /// configuration anyway.
    pub fn carbon_relay_defaults() -> Self {
        carbon::relay_defaults()
    }

    /// A builder with typed setters; unlike `relay.toml`, it binds no port unless asked.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::new()
    }

    /// The destinations, `host:port:instance`, in ring order.
    pub fn destination_names(&self) -> Vec<String> {
        self.destinations
            .iter()
            .map(|d| d.spec.to_string())
            .collect()
    }

    /// One line for logs and `anthracite check`: destinations, method, hash, replication.
    pub fn summary(&self) -> String {
        format!(
            "{} destination(s), method {}, hash {}, replication factor {}",
            self.destinations.len(),
            self.router.method.as_str(),
            self.router.hash_type.as_str(),
            self.router.replication_factor
        )
    }

    /// One line for logs: where the relay listens and where it sends, e.g. `plaintext
    /// 0.0.0.0:2013, pickle 0.0.0.0:2014, admin 127.0.0.1:8080; to 127.0.0.1:2004 (pickle)`.
    pub fn endpoints(&self) -> String {
        let l = &self.listen;
        let listening: Vec<String> = [
            ("plaintext", l.line_tcp),
            ("plaintext udp", l.line_udp),
            ("pickle", l.pickle_tcp),
            ("protobuf", l.protobuf_tcp),
            ("admin", self.admin_listen),
        ]
        .into_iter()
        .filter_map(|(what, addr)| Some(format!("{what} {}", addr?)))
        .collect();
        let sending: Vec<String> = self
            .destinations
            .iter()
            .map(|d| {
                let protocol = d
                    .extension
                    .as_ref()
                    .map_or(d.protocol.as_str(), |e| e.protocol);
                format!("{} ({protocol})", d.spec)
            })
            .collect();
        if sending.is_empty() {
            listening.join(", ")
        } else {
            format!("{}; to {}", listening.join(", "), sending.join(", "))
        }
    }

    /// Validates raw structs of the core alone (the second stage).
    pub(crate) fn from_raw(raw: RawConfig, file: &str) -> Result<Self, ConfigError> {
        Self::validate(raw, file, &Extensions::new())
    }

    /// Validates raw structs (the second stage), one validator per section; the extensions'
    /// sections and destinations go to their extensions.
    fn validate(
        mut raw: RawConfig,
        file: &str,
        extensions: &Extensions,
    ) -> Result<Self, ConfigError> {
        let ctx = validate::Ctx { file };
        let mut listen = validate::listen(&raw.listen, &ctx)?;
        listen.extra_line = std::mem::take(&mut raw.extra_line);
        let destinations = validate::destinations(
            &mut raw.destinations,
            &ctx,
            extensions,
            raw.c_relay.is_some(),
        )?;
        let router = validate::router(
            &raw.router,
            &raw.rules,
            &destinations,
            raw.c_relay.as_ref(),
            &ctx,
        )?;
        let route_cache_bytes = validate::route_cache_bytes(&raw.router, &ctx)?;
        let telemetry = validate::telemetry(&raw.telemetry, &ctx)?;
        let ingest = validate::ingest(&raw.ingest, &ctx)?;
        let shutdown_grace = validate::shutdown_grace(&raw.shutdown, &ctx)?;
        let admin_listen = validate::admin(&raw.admin, &ctx)?;
        let sources = validate::extension_sections(
            &mut raw.extensions,
            &ctx,
            listen.max_line_length,
            extensions,
        )?;
        let aggregation = aggregation::validate(
            raw.aggregation.as_ref(),
            raw.rewrite.as_ref(),
            &raw.destinations.spill.dir,
            file,
        )?;
        let mut config = Config {
            warnings: Vec::new(),
            aggregation,
            route_cache_bytes,
            listen,
            router,
            destinations,
            pool_replicas: raw.destinations.pool_replicas,
            ingest,
            telemetry,
            shutdown_grace,
            admin_listen,
            source: file.to_string(),
            sources,
            resolved: raw,
        };
        config.set_warnings(&|i| format!("{file}: router.aggregation_rules[{i}]"));
        Ok(config)
    }

    /// Fills [`warnings`](Self::warnings) in, the router's aggregation rule `i` named by
    /// `router_rule(i)`.
    pub(crate) fn set_warnings(&mut self, router_rule: &dyn Fn(usize) -> String) {
        let mut warnings = validate::router_rule_warnings(&self.router, router_rule);
        if let Some(a) = &self.aggregation {
            warnings.extend(a.warnings(&self.source));
        }
        self.warnings = warnings;
    }

    /// What the configuration does that deserves a warning at start, one line each: rules
    /// whose output template carbon's formatting raises on (carbon starts on them too; each
    /// line names the file and line and what carbon and anthracite do), output names holding
    /// white space. Log them.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// How the `anthracite` binary writes log lines (`[log] format`).
    pub fn log_format(&self) -> LogFormat {
        self.resolved.log.format
    }

    /// The configuration with every default filled in, as TOML (the sections of extensions
    /// last, as their extensions resolved them).
    pub fn to_resolved_toml(&self) -> String {
        self.resolved
            .to_toml()
            .unwrap_or_else(|e| format!("# cannot render configuration: {e}\n"))
    }
}

#[cfg(test)]
mod range_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::WhenFull;
    use crate::queue::spill::FsyncPolicy;

    #[test]
    fn relative_spill_dir_is_next_to_the_config_file_not_the_working_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("relay.toml");
        std::fs::write(
            &file,
            "[destinations]\nservers = [\"127.0.0.1:2104:a\"]\n\
             [destinations.spill]\ndir = \"spill\"\n",
        )
        .expect("write relay.toml");
        let c = Config::load(&file).expect("loads");
        let spill = c.destinations[0].spill.as_ref().expect("spill settings");
        assert_eq!(spill.dir, dir.path().join("spill").join("127.0.0.1_2104_a"));
    }

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
