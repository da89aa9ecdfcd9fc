//! `[[kafka]]` (or a single `[kafka]`): Apache Kafka sources, and the `kafka` table of a
//! destination with `protocol = "kafka"`.
//!
//! Always compiled, so a `relay.toml` is validated the same way with or without the `kafka`
//! Cargo feature; a binary built without the feature rejects a configured source or
//! destination with an error naming the key. The runtime lives in `crate::receiver::kafka`
//! and `crate::destination::kafka`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::destination::KafkaTarget;

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

pub(crate) use crate::destination::MessageFormat;

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
pub(crate) struct KafkaConfig {
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
    /// Offset commit interval.
    pub commit_interval: Duration,
    /// Queue fill fraction that pauses fetching.
    pub queue_high_water: f64,
    /// Longest Graphite line (from `listen.max_line_length`).
    pub max_line_length: usize,
    /// Passed-through librdkafka properties.
    pub properties: BTreeMap<String, String>,
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
    err: &dyn Fn(&str, &str) -> (String, String),
) -> Result<(), (String, String)> {
    for k in properties.keys() {
        if RESERVED.contains(&k.as_str()) {
            return Err(err(
                &format!("properties.\"{k}\""),
                "is set by the relay itself (see the README's Kafka section)",
            ));
        }
    }
    Ok(())
}

fn check_brokers(
    brokers: &[String],
    err: &dyn Fn(&str, &str) -> (String, String),
) -> Result<String, (String, String)> {
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
    /// Validates one raw entry; `key` is its dotted name (`kafka[0]`). Errors are
    /// `(key, message)`.
    pub(crate) fn from_raw(
        raw: &RawKafka,
        key: &str,
        max_line_length: usize,
    ) -> Result<Self, (String, String)> {
        let err = |k: &str, m: &str| (format!("{key}.{k}"), m.to_string());
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
                let secs = super::kinesis::datetime_to_epoch(t).ok_or_else(|| {
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
            commit_interval: Duration::from_millis(raw.commit_interval_ms),
            queue_high_water: raw.queue_high_water,
            max_line_length,
            properties: raw.properties.clone(),
        })
    }
}

impl RawKafkaSink {
    /// Validates a destination's `kafka` table; `host_port` is the destination's address
    /// (the bootstrap broker when `brokers` is empty); `key` names the destination.
    pub fn validate(&self, key: &str, host_port: &str) -> Result<KafkaTarget, (String, String)> {
        let raw = self;
        let err = |k: &str, m: &str| (format!("{key}.kafka.{k}"), m.to_string());
        let brokers = if raw.brokers.is_empty() {
            host_port.to_string()
        } else {
            check_brokers(&raw.brokers, &err)?
        };
        if !valid_topic(&raw.topic) {
            return Err(err("topic", "required: 1-249 characters of [a-zA-Z0-9._-]"));
        }
        check_properties(&raw.properties, &err)?;
        if !cfg!(feature = "kafka") {
            return Err((
                key.to_string(),
                "this binary was built without the `kafka` feature".into(),
            ));
        }
        Ok(KafkaTarget {
            brokers,
            topic: raw.topic.clone(),
            format: raw.format,
            client_id: if raw.client_id.is_empty() {
                default_client_id()
            } else {
                raw.client_id.clone()
            },
            properties: raw.properties.clone(),
        })
    }
}

/// Validates every `[[kafka]]` entry; errors are `(dotted key, message)`.
pub(crate) fn validate_all(
    raw: &[RawKafka],
    max_line_length: usize,
) -> Result<Vec<KafkaConfig>, (String, String)> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, k) in raw.iter().enumerate() {
        let key = format!("kafka[{i}]");
        if !cfg!(feature = "kafka") {
            return Err((
                key,
                "this binary was built without the `kafka` feature".into(),
            ));
        }
        out.push(KafkaConfig::from_raw(k, &key, max_line_length)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let e = KafkaConfig::from_raw(&r, "kafka[0]", 100).expect_err("reserved key");
        assert_eq!(e.0, "kafka[0].properties.\"enable.auto.commit\"");
        let mut r = raw();
        r.initial_offset = InitialOffset::Timestamp;
        let e = KafkaConfig::from_raw(&r, "kafka[0]", 100).expect_err("no timestamp");
        assert_eq!(e.0, "kafka[0].initial_timestamp");
        let mut r = raw();
        r.brokers = vec!["nohost".into()];
        assert_eq!(
            KafkaConfig::from_raw(&r, "kafka[1]", 100)
                .expect_err("bad broker")
                .0,
            "kafka[1].brokers"
        );
    }

    #[test]
    fn timestamp_backfill_is_in_milliseconds() {
        let mut r = raw();
        r.initial_offset = InitialOffset::Timestamp;
        r.initial_timestamp = Some("2023-11-14T22:13:20Z".parse().expect("datetime"));
        let c = KafkaConfig::from_raw(&r, "kafka[0]", 100).expect("valid");
        assert_eq!(c.initial_timestamp_ms, Some(1_700_000_000_000));
    }
}
