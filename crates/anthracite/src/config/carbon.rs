//! `carbon.conf` import: run on an existing carbon-relay configuration unchanged.
//!
//! Reads the file as carbon 1.1.10 does ([`super::ini`]: Python's `ConfigParser`): the
//! `[relay]` section, then `[relay:<instance>]` over it, `[DEFAULT]` feeding both; each value
//! typed by carbon's default for the key (bool, int, float incl. `inf`, comma list). The
//! settings are translated into a [`RawConfig`] and validated by [`Config::from_raw`], so a
//! carbon.conf and a relay.toml end in the same [`Config`]. `relay-rules.conf` (RELAY_METHOD
//! `rules`) and `aggregation-rules.conf` (the aggregated methods) are read relative to the
//! directory of carbon.conf, as carbon does with `--config`.
//!
//! Every key present that anthracite does not implement (or that carbon does not know) becomes
//! one entry of [`CarbonImport::warnings`], which the binary logs at startup.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::ini::{self, Ini};

mod relay_defaults;
mod relay_rules;
use super::raw::{RawConfig, RawServer};
use super::{Config, ConfigError};
use crate::destination::{DEFAULT_MAX_DATAPOINTS_PER_MESSAGE, OutputProtocol};
use crate::queue::WhenFull;
use crate::router::{DestinationSpec, HashType, RelayMethod};
pub(crate) use relay_defaults::relay_defaults;
pub use relay_rules::parse_relay_rules;

/// How to read a carbon.conf (carbon-relay's command-line options).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CarbonOptions {
    /// carbon.conf (carbon's `--config`); its directory is carbon's `CONF_DIR`.
    pub path: PathBuf,
    /// carbon's `--instance` (default `a`): selects `[relay:<instance>]` and names the
    /// self-metrics `<host>-<instance>`.
    pub instance: String,
    /// carbon-relay's `--rules`: relay-rules.conf instead of `CONF_DIR/RELAY_RULES`.
    pub rules: Option<PathBuf>,
    /// carbon-relay's `--aggregation-rules` (carbon-aggregator's `--rules`), instead of
    /// `CONF_DIR/AGGREGATION_RULES`.
    pub aggregation_rules: Option<PathBuf>,
    /// Run as carbon-aggregator: read `[aggregator]` and `[aggregator:<instance>]`, aggregate
    /// with the aggregation and rewrite rules, route by consistent hashing.
    pub aggregator: bool,
    /// carbon-aggregator's `--rewrite-rules`, instead of `CONF_DIR/REWRITE_RULES`.
    pub rewrite_rules: Option<PathBuf>,
}

impl CarbonOptions {
    /// Options for `path` with carbon's defaults (instance `a`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            instance: "a".into(),
            rules: None,
            aggregation_rules: None,
            aggregator: false,
            rewrite_rules: None,
        }
    }
}

/// A carbon.conf translated into a validated [`Config`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CarbonImport {
    /// The configuration to run.
    pub config: Config,
    /// One line per setting that has no effect in anthracite (or differs); log them.
    pub warnings: Vec<String>,
}

/// Settings anthracite implements; everything else present in the file is warned about.
const HONOURED: &[&str] = &[
    "LINE_RECEIVER_INTERFACE",
    "LINE_RECEIVER_PORT",
    "PICKLE_RECEIVER_INTERFACE",
    "PICKLE_RECEIVER_PORT",
    "PICKLE_RECEIVER_MAX_LENGTH",
    "ENABLE_UDP_LISTENER",
    "UDP_RECEIVER_INTERFACE",
    "UDP_RECEIVER_PORT",
    // carbon 1.1 loads receivers as plugins (`<PLUGIN>_RECEIVER_*`); protobuf is one.
    "PROTOBUF_RECEIVER_INTERFACE",
    "PROTOBUF_RECEIVER_PORT",
    "RELAY_METHOD",
    "REPLICATION_FACTOR",
    "DIVERSE_REPLICAS",
    "ROUTER_HASH_TYPE",
    "DESTINATIONS",
    "DESTINATION_PROTOCOL",
    "DESTINATION_TRANSPORT",
    "DESTINATION_SSL_CA",
    "DESTINATION_POOL_REPLICAS",
    "MAX_QUEUE_SIZE",
    "QUEUE_LOW_WATERMARK_PCT",
    "MAX_DATAPOINTS_PER_MESSAGE",
    "USE_FLOW_CONTROL",
    "USE_WHITELIST",
    "CARBON_METRIC_PREFIX",
    "CARBON_METRIC_INTERVAL",
    "MAX_RECEIVER_CONNECTIONS",
    "METRIC_CLIENT_IDLE_TIMEOUT",
    "MIN_TIMESTAMP_RESOLUTION",
    "TAG_RELAY_NORMALIZED",
    "RELAY_RULES",
    "AGGREGATION_RULES",
];

/// Settings anthracite implements for carbon-aggregator (`--aggregator`) only.
const HONOURED_AGGREGATOR: &[&str] = &[
    "FORWARD_ALL",
    "MAX_AGGREGATION_INTERVALS",
    "WRITE_BACK_FREQUENCY",
    "LOG_AGGREGATOR_MISSES",
    "REWRITE_RULES",
    // Where the open intervals are kept across restarts (`storage_dir`).
    "STORAGE_DIR",
];

/// Every other key of carbon 1.1.10's `conf.defaults` (known to carbon, not implemented here).
const KNOWN: &[&str] = &[
    "USER",
    "MAX_CACHE_SIZE",
    "MAX_UPDATES_PER_SECOND",
    "MAX_CREATES_PER_MINUTE",
    "MIN_TIMESTAMP_LAG",
    "CACHE_QUERY_INTERFACE",
    "CACHE_QUERY_PORT",
    "LOG_UPDATES",
    "LOG_CREATES",
    "LOG_CACHE_HITS",
    "LOG_CACHE_QUEUE_SORTS",
    "DATABASE",
    "WHISPER_AUTOFLUSH",
    "WHISPER_SPARSE_CREATE",
    "WHISPER_FALLOCATE_CREATE",
    "WHISPER_LOCK_WRITES",
    "WHISPER_FADVISE_RANDOM",
    "CERES_MAX_SLICE_GAP",
    "CERES_NODE_CACHING_BEHAVIOR",
    "CERES_SLICE_CACHING_BEHAVIOR",
    "CERES_LOCK_WRITES",
    "MAX_AGGREGATION_INTERVALS",
    "FORWARD_ALL",
    "TIME_TO_DEFER_SENDING",
    "ENABLE_AMQP",
    "AMQP_METRIC_NAME_IN_BODY",
    "AMQP_VERBOSE",
    "AMQP_SPEC",
    "BIND_PATTERNS",
    "GRAPHITE_URL",
    "ENABLE_TAGS",
    "SKIP_TAGS_FOR_NONTAGGED",
    "TAG_UPDATE_INTERVAL",
    "TAG_BATCH_SIZE",
    "TAG_QUEUE_SIZE",
    "TAG_HASH_FILENAMES",
    "ENABLE_MANHOLE",
    "MANHOLE_INTERFACE",
    "MANHOLE_PORT",
    "MANHOLE_USER",
    "MANHOLE_PUBLIC_KEY",
    "MANHOLE_HOST_KEY_DIR",
    "DYNAMIC_ROUTER",
    "DYNAMIC_ROUTER_MAX_RETRIES",
    "USE_INSECURE_UNPICKLER",
    "CACHE_WRITE_STRATEGY",
    "WRITE_BACK_FREQUENCY",
    "MIN_RESET_STAT_FLOW",
    "MIN_RESET_RATIO",
    "MIN_RESET_INTERVAL",
    "TCP_KEEPALIVE",
    "TCP_KEEPIDLE",
    "TCP_KEEPINTVL",
    "TCP_KEEPCNT",
    "USE_RATIO_RESET",
    "LOG_LISTENER_CONN_LOST",
    "LOG_LISTENER_CONN_SUCCESS",
    "LOG_AGGREGATOR_MISSES",
    "REWRITE_RULES",
    "ENABLE_LOGROTATION",
    "CACHE_METRIC_NAMES_MAX",
    "CACHE_METRIC_NAMES_TTL",
    "RAVEN_DSN",
    "STORAGE_DIR",
    "LOCAL_DATA_DIR",
    "WHITELISTS_DIR",
    "PID_DIR",
    "LOG_DIR",
    "CONF_DIR",
];

/// Reads `options.path` and everything it refers to.
pub(crate) fn load(options: &CarbonOptions) -> Result<CarbonImport, ConfigError> {
    let text = read(&options.path)?;
    from_text(&text, options)
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The merged `[relay]` + `[relay:<instance>]` settings: upper-case key → (value, section).
struct Settings<'a> {
    values: HashMap<String, (String, String)>,
    file: &'a str,
}

impl Settings<'_> {
    /// `[section] KEY` where the key was set, else `KEY` (a carbon default).
    fn section_key(&self, key: &str) -> String {
        match self.values.get(key) {
            Some((_, section)) => format!("[{section}] {key}"),
            None => key.to_owned(),
        }
    }

    fn invalid(&self, key: &str, message: String) -> ConfigError {
        ConfigError::invalid(self.file, self.section_key(key), message)
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|(v, _)| v.as_str())
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.str(key) {
            None => Ok(default),
            Some(v) => ini::parse_bool(v).ok_or_else(|| {
                self.invalid(
                    key,
                    format!("{v:?} is not a boolean (1/yes/true/on, 0/no/false/off)"),
                )
            }),
        }
    }

    fn float(&self, key: &str, default: f64) -> Result<f64, ConfigError> {
        match self.str(key) {
            None => Ok(default),
            Some(v) => ini::parse_float(v)
                .ok_or_else(|| self.invalid(key, format!("{v:?} is not a number"))),
        }
    }

    fn uint(&self, key: &str, default: u64) -> Result<u64, ConfigError> {
        match self.str(key) {
            None => Ok(default),
            Some(v) => ini::parse_int(v)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| self.invalid(key, format!("{v:?} is not a non-negative integer"))),
        }
    }

    /// A count where carbon accepts `inf`: `None` for infinity.
    fn count_or_inf(&self, key: &str, default: Option<u64>) -> Result<Option<u64>, ConfigError> {
        match self.str(key) {
            None => Ok(default),
            Some(v) => match ini::parse_float(v) {
                Some(f) if f == f64::INFINITY => Ok(None),
                Some(f) if f >= 0.0 && f.is_finite() => Ok(Some(f as u64)),
                _ => Err(self.invalid(key, format!("{v:?} is not a non-negative number or inf"))),
            },
        }
    }

    fn address(
        &self,
        iface_key: &str,
        port_key: &str,
        default_port: u64,
    ) -> Result<String, ConfigError> {
        let iface = self.str(iface_key).unwrap_or("0.0.0.0");
        let port = self.uint(port_key, default_port)?;
        if port == 0 {
            // carbon: `if not port: return` — the receiver is off.
            return Ok(String::new());
        }
        if port > u64::from(u16::MAX) {
            return Err(self.invalid(port_key, format!("{port} is not a TCP/UDP port")));
        }
        let iface = iface.trim_start_matches('[').trim_end_matches(']');
        Ok(if iface.contains(':') {
            format!("[{iface}]:{port}")
        } else {
            format!("{iface}:{port}")
        })
    }
}

/// Translates carbon.conf text; `options.path` names the file and locates the rule files.
pub fn from_text(text: &str, options: &CarbonOptions) -> Result<CarbonImport, ConfigError> {
    let file = options.path.display().to_string();
    let syntax = |e: ini::IniError| ConfigError::Syntax {
        file: file.clone(),
        message: e.to_string(),
    };
    let parsed = Ini::parse(text).map_err(syntax)?;
    let program = if options.aggregator {
        "aggregator"
    } else {
        "relay"
    };
    let instance_section = format!("{program}:{}", options.instance);
    let values = ini::overlay(&parsed, &[program, &instance_section]).map_err(syntax)?;
    let s = Settings {
        values,
        file: &file,
    };
    let conf_dir = options
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut warnings = Vec::new();
    // Where the aggregated router's rules were read: the file and each rule's line.
    let mut router_rules_file: Option<std::path::PathBuf> = None;
    let mut router_rule_lines: Vec<usize> = Vec::new();
    if !parsed.has_section(program) && !parsed.has_section(&instance_section) {
        warnings.push(format!(
            "{file}: no [{program}] or [{instance_section}] section; carbon's defaults apply"
        ));
    }
    let mut keys: Vec<&String> = s.values.keys().collect();
    keys.sort();
    for key in keys {
        let section = s
            .values
            .get(key)
            .map(|(_, sec)| sec.as_str())
            .unwrap_or(program);
        if HONOURED.contains(&key.as_str())
            || (options.aggregator && HONOURED_AGGREGATOR.contains(&key.as_str()))
        {
            continue;
        }
        if KNOWN.contains(&key.as_str()) {
            warnings.push(format!(
                "{file}: [{section}] {key}: not implemented by anthracite; ignored"
            ));
        } else {
            warnings.push(format!(
                "{file}: [{section}] {key}: not a carbon 1.1.10 setting; ignored"
            ));
        }
    }

    let mut raw = RawConfig::default();
    raw.listen.line_tcp = s.address("LINE_RECEIVER_INTERFACE", "LINE_RECEIVER_PORT", 2003)?;
    raw.listen.pickle_tcp = s.address("PICKLE_RECEIVER_INTERFACE", "PICKLE_RECEIVER_PORT", 2004)?;
    raw.listen.line_udp = if s.bool("ENABLE_UDP_LISTENER", false)? {
        s.address("UDP_RECEIVER_INTERFACE", "UDP_RECEIVER_PORT", 2003)?
    } else {
        String::new()
    };
    // carbon: `port = int(settings.get('PROTOBUF_RECEIVER_PORT', 0))`, off unless set. carbon
    // binds `PROTOBUF_RECEIVER_INTERFACE` as given (and fails to start without it); 0.0.0.0
    // here, like the other receivers' default.
    raw.listen.protobuf_tcp =
        s.address("PROTOBUF_RECEIVER_INTERFACE", "PROTOBUF_RECEIVER_PORT", 0)?;
    raw.listen.max_pickle_frame = s.uint("PICKLE_RECEIVER_MAX_LENGTH", 1 << 20)? as usize;
    raw.listen.max_frame_buffer_bytes = raw
        .listen
        .max_frame_buffer_bytes
        .max(raw.listen.max_pickle_frame.saturating_add(4));
    // carbon's `inf` (its default) is the largest count anthracite allows.
    raw.listen.max_connections = match s.count_or_inf("MAX_RECEIVER_CONNECTIONS", None)? {
        None => MAX_CONNECTIONS,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    // Absent: anthracite's default (carbon has none, so idle clients would hold their slots
    // forever); `None` written out keeps carbon's "never".
    raw.listen.idle_timeout_secs = match s.str("METRIC_CLIENT_IDLE_TIMEOUT") {
        None => raw.listen.idle_timeout_secs,
        Some("None") | Some("") => 0.0,
        Some(_) => s.float("METRIC_CLIENT_IDLE_TIMEOUT", 0.0)?,
    };

    // carbon-aggregator sets `RELAY_METHOD = 'consistent-hashing'` whatever the file says.
    let method_text = if options.aggregator {
        if let Some(m) = s.str("RELAY_METHOD").filter(|m| *m != "consistent-hashing") {
            warnings.push(format!(
                "{file}: RELAY_METHOD = {m}: carbon-aggregator always routes by consistent-hashing; ignored"
            ));
        }
        "consistent-hashing"
    } else {
        s.str("RELAY_METHOD").unwrap_or("rules")
    };
    let method = match method_text {
        "rules" => RelayMethod::Rules,
        "consistent-hashing" => RelayMethod::ConsistentHashing,
        "fast-hashing" => RelayMethod::FastHashing,
        "aggregated-consistent-hashing" => RelayMethod::AggregatedConsistentHashing,
        "fast-aggregated-hashing" => RelayMethod::FastAggregatedHashing,
        other => {
            return Err(s.invalid(
                "RELAY_METHOD",
                format!(
                    "{other:?} must be one of rules, consistent-hashing, fast-hashing, aggregated-consistent-hashing, fast-aggregated-hashing"
                ),
            ));
        }
    };
    raw.router.method = method;
    raw.router.hash_type = match s.str("ROUTER_HASH_TYPE") {
        // carbon: `ROUTER_HASH_TYPE or 'carbon_ch'` for rings, `or 'mmh3_ch'` for FastHashRing.
        None | Some("None") | Some("") if method.is_fast() => HashType::Mmh3Ch,
        None | Some("None") | Some("") => HashType::CarbonCh,
        Some("carbon_ch") => HashType::CarbonCh,
        Some("fnv1a_ch") => HashType::Fnv1aCh,
        Some("mmh3_ch") => HashType::Mmh3Ch,
        Some(other) => {
            return Err(s.invalid(
                "ROUTER_HASH_TYPE",
                format!("{other:?} must be carbon_ch, fnv1a_ch or mmh3_ch"),
            ));
        }
    };
    raw.router.replication_factor = s.uint("REPLICATION_FACTOR", 1)? as usize;
    raw.router.diverse_replicas = s.bool("DIVERSE_REPLICAS", true)?;

    let destinations: Vec<String> = ini::parse_list(s.str("DESTINATIONS").unwrap_or(""))
        .into_iter()
        .filter(|d| !d.is_empty())
        .collect();
    let mut specs = Vec::with_capacity(destinations.len());
    for d in &destinations {
        specs
            .push(DestinationSpec::parse(d).map_err(|e| s.invalid("DESTINATIONS", e.to_string()))?);
    }
    for (i, spec) in specs.iter().enumerate() {
        if specs[..i]
            .iter()
            .any(|p| p.host == spec.host && p.instance == spec.instance)
        {
            return Err(s.invalid(
                "DESTINATIONS",
                format!(
                    "destination instance ({}, {}) already configured (carbon refuses this too: the port is not part of the ring key)",
                    spec.host,
                    spec.instance.as_deref().unwrap_or("None")
                ),
            ));
        }
    }
    raw.destinations.servers = destinations.into_iter().map(RawServer::Address).collect();
    let protocol = match s.str("DESTINATION_PROTOCOL").unwrap_or("pickle") {
        "pickle" => OutputProtocol::Pickle,
        "line" => OutputProtocol::Line,
        "protobuf" => OutputProtocol::Protobuf,
        "udp" => {
            warnings.push(format!(
                "{file}: DESTINATION_PROTOCOL = udp: carbon.conf.example lists it but carbon-relay 1.1.10 has no UDP client and exits at startup; anthracite sends carbon's plaintext lines in UDP datagrams"
            ));
            OutputProtocol::Udp
        }
        other => {
            return Err(s.invalid(
                "DESTINATION_PROTOCOL",
                format!("{other:?} must be one of pickle, line, protobuf, udp"),
            ));
        }
    };
    raw.destinations.protocol = protocol.as_str().to_string();
    raw.destinations.tls = destination_tls(&s, &file, &mut warnings);
    raw.destinations.pool_replicas = s.bool("DESTINATION_POOL_REPLICAS", false)?;
    raw.destinations.queue.max_datapoints = match s.count_or_inf("MAX_QUEUE_SIZE", Some(1000))? {
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        // The byte bound (`destinations.queue.max_bytes`) still applies.
        None => MAX_QUEUE_DATAPOINTS,
    };
    let low = s.float("QUEUE_LOW_WATERMARK_PCT", 0.8)?;
    if !(0.0..=1.0).contains(&low) {
        return Err(s.invalid("QUEUE_LOW_WATERMARK_PCT", "must be between 0 and 1".into()));
    }
    // carbon pauses every receiver while a destination queue is full (USE_FLOW_CONTROL, on by
    // default) and drops new datapoints otherwise. anthracite's `block` policy is the same
    // back-pressure, applied per destination queue: producers whose data routes to the full
    // queue wait; its resume point is "room for the batch", not QUEUE_LOW_WATERMARK_PCT.
    if s.bool("USE_FLOW_CONTROL", true)? {
        raw.destinations.queue.when_full = Some(WhenFull::Block);
        if (low - 0.8).abs() > f64::EPSILON {
            warnings.push(format!(
                "{file}: QUEUE_LOW_WATERMARK_PCT = {low} has no effect: a blocked producer resumes as soon as its batch fits"
            ));
        }
    } else {
        raw.destinations.queue.when_full = Some(WhenFull::DropNewest);
    }
    raw.destinations.max_datapoints_per_message = s.uint(
        "MAX_DATAPOINTS_PER_MESSAGE",
        DEFAULT_MAX_DATAPOINTS_PER_MESSAGE as u64,
    )? as usize;

    raw.telemetry.prefix = s.str("CARBON_METRIC_PREFIX").unwrap_or("carbon").to_owned();
    raw.telemetry.interval_secs = s.float("CARBON_METRIC_INTERVAL", 60.0)?;
    raw.telemetry.instance = options.instance.clone();

    raw.ingest.min_timestamp_resolution = s.uint("MIN_TIMESTAMP_RESOLUTION", 0)?;
    raw.ingest.tag_relay_normalized = s.bool("TAG_RELAY_NORMALIZED", false)?;
    if s.bool("USE_WHITELIST", false)? {
        raw.ingest.use_whitelist = true;
        raw.ingest.whitelist = conf_dir.join("whitelist.conf").display().to_string();
        raw.ingest.blacklist = conf_dir.join("blacklist.conf").display().to_string();
    }

    if method == RelayMethod::Rules {
        let path = options
            .rules
            .clone()
            .unwrap_or_else(|| conf_dir.join(s.str("RELAY_RULES").unwrap_or("relay-rules.conf")));
        let specs_by_text = &specs;
        let text = read(&path)?;
        raw.rules = parse_relay_rules(
            &text,
            &path.display().to_string(),
            specs_by_text,
            &mut warnings,
        )?;
    } else if method.is_aggregated() {
        let path = options.aggregation_rules.clone().unwrap_or_else(|| {
            conf_dir.join(
                s.str("AGGREGATION_RULES")
                    .unwrap_or("aggregation-rules.conf"),
            )
        });
        if path.exists() {
            let text = read(&path)?;
            crate::router::aggregation::parse_rules(&text).map_err(|(line, e)| {
                ConfigError::invalid(path.display(), format!("line {line}"), e.to_string())
            })?;
            let rules: Vec<(usize, &str)> = text
                .lines()
                .map(str::trim)
                .enumerate()
                .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
                .collect();
            raw.router.aggregation_rules = rules.iter().map(|(_, l)| (*l).to_owned()).collect();
            router_rule_lines = rules.iter().map(|(i, _)| i + 1).collect();
            router_rules_file = Some(path.clone());
        } else {
            warnings.push(format!(
                "{}: aggregation rules file does not exist; every metric is routed by its own name (as carbon does)",
                path.display()
            ));
        }
    }

    if options.aggregator {
        aggregator_settings(&s, options, &conf_dir, &mut raw)?;
    }

    let mut config = Config::from_raw(raw, &file).map_err(|e| s.carbon_key(e))?;
    // The router's rules name the file and line they were read from.
    if let Some(rules_file) = router_rules_file {
        config.set_warnings(&|i| {
            let line = router_rule_lines.get(i).copied().unwrap_or(0);
            format!("{}: line {line}", rules_file.display())
        });
    }
    warnings.extend(config.warnings().iter().cloned());
    Ok(CarbonImport { config, warnings })
}

/// carbon-aggregator's settings: its rule files (the aggregation rules must exist, as carbon
/// refuses to start without them), `FORWARD_ALL`, `MAX_AGGREGATION_INTERVALS`,
/// `WRITE_BACK_FREQUENCY`, `LOG_AGGREGATOR_MISSES`, and the self-metrics under
/// `<prefix>.aggregator.<host>-<instance>`.
fn aggregator_settings(
    s: &Settings<'_>,
    options: &CarbonOptions,
    conf_dir: &Path,
    raw: &mut RawConfig,
) -> Result<(), ConfigError> {
    use super::aggregation::{RawAggregation, RawRewrite};
    let rules = options.aggregation_rules.clone().unwrap_or_else(|| {
        conf_dir.join(
            s.str("AGGREGATION_RULES")
                .unwrap_or("aggregation-rules.conf"),
        )
    });
    if !rules.exists() {
        return Err(ConfigError::invalid(
            rules.display(),
            "",
            "aggregation rules file does not exist (carbon-aggregator refuses to start too)",
        ));
    }
    let rewrite = options
        .rewrite_rules
        .clone()
        .unwrap_or_else(|| conf_dir.join(s.str("REWRITE_RULES").unwrap_or("rewrite-rules.conf")));
    let write_back = match s.str("WRITE_BACK_FREQUENCY") {
        None | Some("None") | Some("") => 0.0,
        Some(v) => match ini::parse_float(v) {
            Some(f) if f > 0.0 && f.is_finite() => f,
            _ => {
                return Err(s.invalid(
                    "WRITE_BACK_FREQUENCY",
                    format!("{v:?} is not a positive number of seconds"),
                ));
            }
        },
    };
    let max_intervals = s.uint("MAX_AGGREGATION_INTERVALS", 5)?;
    let storage = storage_dir(s.str("STORAGE_DIR"), conf_dir, &|k| std::env::var(k).ok());
    let state_dir = storage.join(format!("anthracite-aggregator-{}", options.instance));
    raw.aggregation = Some(RawAggregation {
        rules_file: rules.display().to_string(),
        state_dir: state_dir.display().to_string(),
        forward_all: s.bool("FORWARD_ALL", true)?,
        max_intervals,
        write_back_frequency_secs: write_back,
        log_misses: s.bool("LOG_AGGREGATOR_MISSES", true)?,
        ..RawAggregation::default()
    });
    raw.rewrite = Some(RawRewrite {
        rules_file: rewrite.display().to_string(),
        rules: String::new(),
    });
    raw.telemetry.role = "aggregator".into();
    Ok(())
}

/// carbon's `STORAGE_DIR` (where its daemons keep pid files and logs): the setting, else
/// `$GRAPHITE_STORAGE_DIR`, else `storage` under the Graphite root (`$GRAPHITE_ROOT`, else the
/// parent of the directory holding carbon.conf: `/opt/graphite/conf/carbon.conf` →
/// `/opt/graphite/storage`). `env` reads an environment variable.
fn storage_dir(
    setting: Option<&str>,
    conf_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> PathBuf {
    let set = |v: Option<String>| {
        v.filter(|v| !v.is_empty() && v != "None")
            .map(PathBuf::from)
    };
    set(setting.map(str::to_owned))
        .or_else(|| set(env("GRAPHITE_STORAGE_DIR")))
        .unwrap_or_else(|| {
            set(env("GRAPHITE_ROOT"))
                .or_else(|| conf_dir.parent().map(Path::to_path_buf))
                .unwrap_or_default()
                .join("storage")
        })
}

/// `DESTINATION_TRANSPORT` / `DESTINATION_SSL_CA`: carbon connects with TLS when the transport
/// is `ssl` (trusting only `DESTINATION_SSL_CA` when set, else the system store, and checking
/// the certificate against each destination's host), with plain TCP for any other value.
fn destination_tls(
    s: &Settings<'_>,
    file: &str,
    warnings: &mut Vec<String>,
) -> Option<super::raw::RawClientTls> {
    let ca_file = s
        .str("DESTINATION_SSL_CA")
        .filter(|v| !v.is_empty() && *v != "None")
        .unwrap_or_default()
        .to_owned();
    match s.str("DESTINATION_TRANSPORT").unwrap_or("none") {
        "ssl" => Some(super::raw::RawClientTls {
            ca_file,
            ..Default::default()
        }),
        other => {
            if other != "none" {
                warnings.push(format!(
                    "{file}: DESTINATION_TRANSPORT = {other}: not \"ssl\", so plain TCP (as carbon does)"
                ));
            }
            if !ca_file.is_empty() {
                warnings.push(format!(
                    "{file}: DESTINATION_SSL_CA has no effect without DESTINATION_TRANSPORT = ssl"
                ));
            }
            None
        }
    }
}

/// carbon's `MAX_RECEIVER_CONNECTIONS = inf`: `listen.max_connections`' largest value.
const MAX_CONNECTIONS: usize = 1_000_000;
/// carbon's `MAX_QUEUE_SIZE = inf`: `destinations.queue.max_datapoints`' largest value.
const MAX_QUEUE_DATAPOINTS: usize = 1_000_000_000;

/// The relay.toml keys this import fills from carbon.conf settings: a validation error on one
/// of them names the setting that was written.
const CARBON_KEYS: &[(&str, &str)] = &[
    ("listen.line_tcp", "LINE_RECEIVER_PORT"),
    ("listen.pickle_tcp", "PICKLE_RECEIVER_PORT"),
    ("listen.line_udp", "UDP_RECEIVER_PORT"),
    ("listen.protobuf_tcp", "PROTOBUF_RECEIVER_PORT"),
    ("listen.max_pickle_frame", "PICKLE_RECEIVER_MAX_LENGTH"),
    ("listen.max_connections", "MAX_RECEIVER_CONNECTIONS"),
    ("listen.idle_timeout_secs", "METRIC_CLIENT_IDLE_TIMEOUT"),
    ("router.replication_factor", "REPLICATION_FACTOR"),
    ("destinations.servers", "DESTINATIONS"),
    ("destinations.queue.max_datapoints", "MAX_QUEUE_SIZE"),
    (
        "destinations.max_datapoints_per_message",
        "MAX_DATAPOINTS_PER_MESSAGE",
    ),
    ("telemetry.interval_secs", "CARBON_METRIC_INTERVAL"),
    ("telemetry.prefix", "CARBON_METRIC_PREFIX"),
    (
        "ingest.min_timestamp_resolution",
        "MIN_TIMESTAMP_RESOLUTION",
    ),
];

impl Settings<'_> {
    /// Renames a relay.toml key in a validation error to the carbon.conf setting it came from.
    fn carbon_key(&self, e: ConfigError) -> ConfigError {
        let ConfigError::Invalid { file, key, message } = e else {
            return e;
        };
        let key = match CARBON_KEYS.iter().find(|(k, _)| key.starts_with(k)) {
            Some((_, carbon)) => self.section_key(carbon),
            None => key,
        };
        ConfigError::Invalid { file, key, message }
    }
}

#[cfg(test)]
mod tests;
