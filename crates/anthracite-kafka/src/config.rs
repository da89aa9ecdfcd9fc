//! The settings this crate owns in `relay.toml`: `[[kafka]]` (or a single `[kafka]`), the
//! sources, and the `kafka` table of a `servers` entry with `protocol = "kafka"`, a
//! destination. Raw serde structs with documented defaults, validated into [`KafkaConfig`]
//! and [`KafkaTarget`]; every error names the key and the file.

use std::collections::BTreeMap;
use std::time::Duration;

use anthracite::ConfigError;
use anthracite::extension::{DestinationContext, SectionContext, epoch_seconds};
use serde::{Deserialize, Serialize};

/// Where a partition without a committed offset starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InitialOffset {
    /// The oldest retained message (default: nothing retained is missed).
    #[default]
    Earliest,
    /// Only messages written after the group first reads the partition.
    Latest,
    /// The first message whose timestamp is at or after `initial_timestamp` (a backfill).
    Timestamp,
}

/// How the consumers of a group agree on who reads which partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupProtocol {
    /// Kafka's classic group protocol (every broker version): the members assign the
    /// partitions among themselves (cooperative-sticky), and the relay sets the session
    /// timeout a relay needs ([`DEFAULT_SESSION_TIMEOUT_MS`], heartbeats at a third of it).
    #[default]
    Classic,
    /// The broker-side protocol of KIP-848 (`group.protocol = consumer`, Kafka 4.0 and
    /// later): the brokers assign and time out members, with no group-wide pause while a
    /// member joins or leaves. The session timeout is the brokers' (their
    /// `group.consumer.session.timeout.ms`, 45 s unless configured), not the relay's.
    Consumer,
}

impl GroupProtocol {
    /// librdkafka's `group.protocol` value.
    pub const fn as_str(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }
}

/// The session timeout of a relay's consumers with the classic protocol, unless set in
/// `properties` (librdkafka's own default is 45 s): a member that dies is noticed after this
/// long, and its partitions move. Heartbeats go at a third of it.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 10_000;

/// What one Kafka message holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// One or more Graphite plaintext lines (default).
    #[default]
    Lines,
    /// One carbon pickle payload (a list of `(name, (timestamp, value))`), without the
    /// 4-byte length prefix of the TCP protocol.
    Pickle,
}

/// Where a `protocol = "kafka"` destination writes.
#[derive(Clone, Debug, PartialEq)]
pub struct KafkaTarget {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// Message payload format.
    pub format: MessageFormat,
    /// Client id.
    pub client_id: String,
    /// Passed-through librdkafka producer properties.
    pub properties: BTreeMap<String, String>,
}

/// One `[[kafka]]` entry as written in `relay.toml`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawKafka {
    /// Bootstrap brokers, `host:port`. Required.
    pub brokers: Vec<String>,
    /// Topics to read. Required.
    pub topics: Vec<String>,
    /// Consumer group: relays with the same group share the partitions. Default `anthracite`.
    pub group_id: String,
    /// Client id the brokers see. Default `anthracite-<hostname>`.
    pub client_id: String,
    /// `earliest` (default), `latest` or `timestamp`; used only for partitions without a
    /// committed offset.
    pub initial_offset: InitialOffset,
    /// For `timestamp`: a TOML datetime with offset, e.g. `2026-01-01T00:00:00Z`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_timestamp: Option<toml::value::Datetime>,
    /// `lines` (default) or `pickle`.
    pub format: MessageFormat,
    /// `classic` (default) or `consumer` (KIP-848, brokers 4.0 and later).
    pub group_protocol: GroupProtocol,
    /// Commit delivered offsets this often (also on revocation and at shutdown). Default
    /// 1000 ms.
    pub commit_interval_ms: u64,
    /// Stop fetching while any destination queue holds more than this fraction of its
    /// `max_datapoints`. Default 0.5.
    pub queue_high_water: f64,
    /// librdkafka properties passed through as they are: TLS and SASL
    /// (`security.protocol`, `ssl.ca.location`, `sasl.mechanism`, `sasl.username`, …) and
    /// tuning (`session.timeout.ms`, `fetch.max.bytes`, …). The relay's own keys
    /// (`group.id`, `enable.auto.commit`, …) cannot be overridden here.
    pub properties: BTreeMap<String, String>,
}

impl Default for RawKafka {
    fn default() -> Self {
        Self {
            brokers: Vec::new(),
            topics: Vec::new(),
            group_id: "anthracite".into(),
            client_id: String::new(),
            initial_offset: InitialOffset::Earliest,
            initial_timestamp: None,
            format: MessageFormat::Lines,
            group_protocol: GroupProtocol::Classic,
            commit_interval_ms: 1000,
            queue_high_water: 0.5,
            properties: BTreeMap::new(),
        }
    }
}

/// librdkafka properties the relay sets itself: a pass-through value would break its
/// delivery guarantee (offsets, the rebalance protocol, acknowledgements).
const RESERVED: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "group.id",
    "client.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "partition.assignment.strategy",
    "group.protocol",
    "acks",
    "request.required.acks",
    "enable.idempotence",
];

/// A validated Kafka source.
#[derive(Clone, Debug, PartialEq)]
pub struct KafkaConfig {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Topics to read.
    pub topics: Vec<String>,
    /// Consumer group.
    pub group_id: String,
    /// Client id.
    pub client_id: String,
    /// Start without a committed offset.
    pub initial_offset: InitialOffset,
    /// Milliseconds since the epoch, for [`InitialOffset::Timestamp`].
    pub initial_timestamp_ms: Option<i64>,
    /// Message payload format.
    pub format: MessageFormat,
    /// The consumer group protocol.
    pub group_protocol: GroupProtocol,
    /// With the classic protocol: the session timeout and the heartbeat interval in effect
    /// (the relay's defaults, or `properties`). `None` with the consumer protocol: the
    /// brokers set them.
    pub session: Option<Session>,
    /// librdkafka's statistics interval (`statistics.interval.ms`): how often the consumer
    /// lag is refreshed.
    pub statistics_interval: Duration,
    /// Offset commit interval.
    pub commit_interval: Duration,
    /// Queue fill fraction that pauses fetching.
    pub queue_high_water: f64,
    /// Longest Graphite line (from `listen.max_line_length`).
    pub max_line_length: usize,
    /// Passed-through librdkafka properties.
    pub properties: BTreeMap<String, String>,
}

/// A classic group member's liveness settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session {
    /// `session.timeout.ms`: a member not heard from for this long leaves the group.
    pub timeout: Duration,
    /// `heartbeat.interval.ms`.
    pub heartbeat: Duration,
}

/// The statistics interval (`statistics.interval.ms`) the relay sets unless `properties` does.
pub const DEFAULT_STATISTICS_INTERVAL_MS: u64 = 5000;

/// A property in milliseconds, as librdkafka reads it (`None` when not set).
fn millis(
    properties: &BTreeMap<String, String>,
    key: &str,
    err: &dyn Fn(&str, &str) -> ConfigError,
) -> Result<Option<u64>, ConfigError> {
    properties
        .get(key)
        .map(|v| {
            v.trim()
                .parse::<u64>()
                .ok()
                .filter(|&ms| ms > 0)
                .ok_or_else(|| {
                    err(
                        &format!("properties.\"{key}\""),
                        &format!("{v:?} is not a positive number of milliseconds"),
                    )
                })
        })
        .transpose()
}

/// The liveness settings of `protocol` with these `properties`.
fn session(
    protocol: GroupProtocol,
    properties: &BTreeMap<String, String>,
    err: &dyn Fn(&str, &str) -> ConfigError,
) -> Result<Option<Session>, ConfigError> {
    let timeout = millis(properties, "session.timeout.ms", err)?;
    let heartbeat = millis(properties, "heartbeat.interval.ms", err)?;
    if protocol == GroupProtocol::Consumer {
        if let Some(key) = [
            ("session.timeout.ms", timeout),
            ("heartbeat.interval.ms", heartbeat),
        ]
        .into_iter()
        .find_map(|(k, v)| v.map(|_| k))
        {
            return Err(err(
                &format!("properties.\"{key}\""),
                "is set on the brokers with group_protocol = \"consumer\" (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms)",
            ));
        }
        return Ok(None);
    }
    let timeout = timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT_MS);
    let heartbeat = heartbeat.unwrap_or(timeout / 3);
    if heartbeat >= timeout {
        return Err(err(
            "properties.\"heartbeat.interval.ms\"",
            "must be less than session.timeout.ms (a third of it is usual)",
        ));
    }
    Ok(Some(Session {
        timeout: Duration::from_millis(timeout),
        heartbeat: Duration::from_millis(heartbeat.max(1)),
    }))
}

/// The `kafka` table of a destination with `protocol = "kafka"`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RawKafkaSink {
    /// Bootstrap brokers, `host:port`. Default: the destination's own `host:port`.
    pub brokers: Vec<String>,
    /// The topic. Required.
    pub topic: String,
    /// `lines` (default) or `pickle` batches per message.
    pub format: MessageFormat,
    /// Client id the brokers see. Default `anthracite-<hostname>`.
    pub client_id: String,
    /// librdkafka producer properties passed through (TLS, SASL, `compression.type`,
    /// `message.timeout.ms`, …); `acks` and `enable.idempotence` are the relay's.
    pub properties: BTreeMap<String, String>,
}

fn default_client_id() -> String {
    format!(
        "anthracite-{}",
        gethostname::gethostname().to_string_lossy()
    )
}

fn check_properties(
    properties: &BTreeMap<String, String>,
    err: &dyn Fn(&str, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    for k in properties.keys() {
        if RESERVED.contains(&k.as_str()) {
            return Err(err(
                &format!("properties.\"{k}\""),
                "is set by the relay itself (see docs/streams.md, Kafka)",
            ));
        }
    }
    Ok(())
}

fn check_brokers(
    brokers: &[String],
    err: &dyn Fn(&str, &str) -> ConfigError,
) -> Result<String, ConfigError> {
    for b in brokers {
        let ok = b
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(err("brokers", &format!("{b:?} is not host:port")));
        }
    }
    Ok(brokers.join(","))
}

fn valid_topic(t: &str) -> bool {
    (1..=249).contains(&t.len())
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl KafkaConfig {
    /// Validates one raw entry; `key` is its dotted name (`kafka[0]`).
    pub fn from_raw(
        raw: &RawKafka,
        key: &str,
        cx: &SectionContext<'_>,
    ) -> Result<Self, ConfigError> {
        let err = |k: &str, m: &str| cx.invalid(&format!("{key}.{k}"), m);
        if raw.brokers.is_empty() {
            return Err(err("brokers", "at least one bootstrap broker is required"));
        }
        let brokers = check_brokers(&raw.brokers, &err)?;
        if raw.topics.is_empty() {
            return Err(err("topics", "at least one topic is required"));
        }
        if let Some(t) = raw.topics.iter().find(|t| !valid_topic(t)) {
            return Err(err(
                "topics",
                &format!("{t:?}: topic names are 1-249 characters of [a-zA-Z0-9._-]"),
            ));
        }
        if raw.group_id.is_empty() {
            return Err(err("group_id", "must not be empty"));
        }
        let initial_timestamp_ms = match (raw.initial_offset, &raw.initial_timestamp) {
            (InitialOffset::Timestamp, None) => {
                return Err(err(
                    "initial_timestamp",
                    "required with initial_offset = \"timestamp\"",
                ));
            }
            (InitialOffset::Timestamp, Some(t)) => {
                let secs = epoch_seconds(t).ok_or_else(|| {
                    err("initial_timestamp", "needs a date, a time and an offset")
                })?;
                Some((secs * 1000.0).round() as i64)
            }
            (_, Some(_)) => {
                return Err(err(
                    "initial_timestamp",
                    "only used with initial_offset = \"timestamp\"",
                ));
            }
            (_, None) => None,
        };
        if !(10..=3_600_000).contains(&raw.commit_interval_ms) {
            return Err(err("commit_interval_ms", "must be between 10 and 3600000"));
        }
        if !(raw.queue_high_water > 0.0 && raw.queue_high_water <= 1.0) {
            return Err(err("queue_high_water", "must be in (0, 1]"));
        }
        check_properties(&raw.properties, &err)?;
        let session = session(raw.group_protocol, &raw.properties, &err)?;
        // librdkafka's 0 turns its statistics off; the lag is then refreshed (from the
        // watermarks, while fetching is paused) at the relay's default interval.
        let statistics_interval = Duration::from_millis(
            raw.properties
                .get("statistics.interval.ms")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&ms| ms > 0)
                .unwrap_or(DEFAULT_STATISTICS_INTERVAL_MS),
        );
        Ok(KafkaConfig {
            brokers,
            topics: raw.topics.clone(),
            group_id: raw.group_id.clone(),
            client_id: if raw.client_id.is_empty() {
                default_client_id()
            } else {
                raw.client_id.clone()
            },
            initial_offset: raw.initial_offset,
            initial_timestamp_ms,
            format: raw.format,
            group_protocol: raw.group_protocol,
            session,
            statistics_interval,
            commit_interval: Duration::from_millis(raw.commit_interval_ms),
            queue_high_water: raw.queue_high_water,
            max_line_length: cx.max_line_length(),
            properties: raw.properties.clone(),
        })
    }
}

/// The keys of a `servers` entry with `protocol = "kafka"`: the `kafka` table.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawKafkaDestination {
    /// The topic and its settings. Required.
    pub kafka: Option<RawKafkaSink>,
}

impl KafkaTarget {
    /// Validates a destination's keys (its `kafka` table); the destination's own `host:port`
    /// is the bootstrap broker when the table names none. Returns the target and the table
    /// with its defaults resolved.
    pub fn from_settings(
        settings: &toml::Table,
        cx: &DestinationContext<'_>,
    ) -> Result<(Self, toml::Table), ConfigError> {
        let raw: RawKafkaDestination = toml::Value::Table(settings.clone())
            .try_into()
            .map_err(|e| cx.invalid("", e.to_string().trim_end().to_string()))?;
        let Some(sink) = raw.kafka else {
            return Err(cx.invalid(
                "",
                format!(
                    "{} uses protocol \"kafka\": it needs a kafka table with a topic",
                    cx.name()
                ),
            ));
        };
        if cx.tls() {
            return Err(invalid_tls(cx));
        }
        let err = |k: &str, m: &str| cx.invalid(&format!("kafka.{k}"), m);
        let brokers = if sink.brokers.is_empty() {
            format!("{}:{}", cx.host(), cx.port())
        } else {
            check_brokers(&sink.brokers, &err)?
        };
        if !valid_topic(&sink.topic) {
            return Err(err("topic", "required: 1-249 characters of [a-zA-Z0-9._-]"));
        }
        check_properties(&sink.properties, &err)?;
        let target = KafkaTarget {
            brokers,
            topic: sink.topic.clone(),
            format: sink.format,
            client_id: if sink.client_id.is_empty() {
                default_client_id()
            } else {
                sink.client_id.clone()
            },
            properties: sink.properties.clone(),
        };
        let mut resolved = toml::Table::new();
        resolved.insert(
            "kafka".into(),
            toml::Value::try_from(&sink).map_err(|e| cx.invalid("kafka", e.to_string()))?,
        );
        Ok((target, resolved))
    }
}

fn invalid_tls(cx: &DestinationContext<'_>) -> ConfigError {
    ConfigError::invalid(
        cx.file(),
        "destinations.tls",
        format!(
            "{} uses protocol \"kafka\": its TLS settings are librdkafka properties in its kafka table",
            cx.name()
        ),
    )
}

/// Validates every `[[kafka]]` entry.
pub(crate) fn validate_all(
    raw: &[RawKafka],
    cx: &SectionContext<'_>,
) -> Result<Vec<KafkaConfig>, ConfigError> {
    raw.iter()
        .enumerate()
        .map(|(i, k)| KafkaConfig::from_raw(k, &format!("kafka[{i}]"), cx))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx() -> SectionContext<'static> {
        SectionContext::new("<string>", 100)
    }

    fn raw() -> RawKafka {
        RawKafka {
            brokers: vec!["127.0.0.1:9092".into()],
            topics: vec!["graphite".into()],
            ..RawKafka::default()
        }
    }

    #[test]
    fn errors_name_the_key() {
        let mut r = raw();
        r.properties
            .insert("enable.auto.commit".into(), "true".into());
        let key = |e: ConfigError| match e {
            ConfigError::Invalid { key, .. } => key,
            other => panic!("{other}"),
        };
        let e = KafkaConfig::from_raw(&r, "kafka[0]", &cx()).expect_err("reserved key");
        assert_eq!(key(e), "kafka[0].properties.\"enable.auto.commit\"");
        let mut r = raw();
        r.initial_offset = InitialOffset::Timestamp;
        let e = KafkaConfig::from_raw(&r, "kafka[0]", &cx()).expect_err("no timestamp");
        assert_eq!(key(e), "kafka[0].initial_timestamp");
        let mut r = raw();
        r.brokers = vec!["nohost".into()];
        assert_eq!(
            key(KafkaConfig::from_raw(&r, "kafka[1]", &cx()).expect_err("bad broker")),
            "kafka[1].brokers"
        );
    }

    /// A whole `relay.toml` text through the relay's configuration with this extension.
    fn relay(text: &str) -> Result<anthracite::Config, ConfigError> {
        let extensions = anthracite::extension::Extensions::new().with(crate::Kafka);
        anthracite::Config::from_toml_str_with(text, &extensions)
    }

    #[test]
    fn a_destination_needs_its_kafka_table_and_its_brokers_default_to_its_address() {
        let d = |extra: &str| {
            relay(&format!(
                "[destinations]\nservers = [{{ address = \"127.0.0.1:9092:k\", protocol = \"kafka\"{extra} }}]\n"
            ))
        };
        let c = d(", kafka = { topic = \"graphite\" }").expect("a topic");
        let resolved = c.to_resolved_toml();
        assert!(resolved.contains("topic = \"graphite\""), "{resolved}");
        assert!(resolved.contains("client_id = \"\""), "{resolved}");
        let err = d("").expect_err("no kafka table");
        assert!(err.to_string().contains("destinations.servers[0]"), "{err}");
        let err = d(", kafka = { topic = \"graphite\", properties = { acks = \"1\" } }")
            .expect_err("a reserved property");
        assert!(
            err.to_string()
                .contains("destinations.servers[0].kafka.properties.\"acks\""),
            "{err}"
        );
        let err = d(", kafka = { topic = \"t\" }, stream = \"s\"").expect_err("another key");
        assert!(err.to_string().contains("stream"), "{err}");
        let err = relay(
            "[destinations]\nservers = [{ address = \"127.0.0.1:9092:k\", protocol = \"kafka\", kafka = { topic = \"t\" } }]\n[destinations.tls]\n",
        )
        .expect_err("the core's TLS");
        assert!(err.to_string().contains("destinations.tls"), "{err}");
        let ok = relay(
            "[destinations]\nservers = [\"127.0.0.1:2104:a\"]\n[[kafka]]\nbrokers = [\"127.0.0.1:9092\"]\ntopics = [\"graphite\"]\n",
        )
        .expect("a source");
        assert!(ok.to_resolved_toml().contains("[[kafka]]"));
    }

    #[test]
    fn a_relay_group_fails_over_in_seconds_unless_properties_or_the_brokers_say_otherwise() {
        let c = KafkaConfig::from_raw(&raw(), "kafka[0]", &cx()).expect("valid");
        let s = c.session.expect("classic");
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert_eq!(s.heartbeat, Duration::from_millis(3333), "a third");
        let mut r = raw();
        r.properties
            .insert("session.timeout.ms".into(), "30000".into());
        let s = KafkaConfig::from_raw(&r, "kafka[0]", &cx())
            .expect("valid")
            .session
            .expect("classic");
        assert_eq!(
            (s.timeout, s.heartbeat),
            (Duration::from_secs(30), Duration::from_secs(10))
        );
        r.properties
            .insert("heartbeat.interval.ms".into(), "30000".into());
        let e = KafkaConfig::from_raw(&r, "kafka[0]", &cx()).expect_err("heartbeat too long");
        assert!(e.to_string().contains("heartbeat.interval.ms"), "{e}");
        let mut r = raw();
        r.group_protocol = GroupProtocol::Consumer;
        let c = KafkaConfig::from_raw(&r, "kafka[0]", &cx()).expect("valid");
        assert_eq!(c.session, None, "the brokers' session");
        r.properties
            .insert("session.timeout.ms".into(), "6000".into());
        let e = KafkaConfig::from_raw(&r, "kafka[2]", &cx()).expect_err("set on the brokers");
        assert!(
            e.to_string()
                .contains("kafka[2].properties.\"session.timeout.ms\""),
            "{e}"
        );
        let mut r = raw();
        r.properties
            .insert("session.timeout.ms".into(), "ten".into());
        assert!(KafkaConfig::from_raw(&r, "kafka[0]", &cx()).is_err());
    }

    #[test]
    fn timestamp_backfill_is_in_milliseconds() {
        let mut r = raw();
        r.initial_offset = InitialOffset::Timestamp;
        r.initial_timestamp = Some("2023-11-14T22:13:20Z".parse().expect("datetime"));
        let c = KafkaConfig::from_raw(&r, "kafka[0]", &cx()).expect("valid");
        assert_eq!(c.initial_timestamp_ms, Some(1_700_000_000_000));
    }
}
