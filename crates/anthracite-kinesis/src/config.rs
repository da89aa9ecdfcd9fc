//! The settings this crate owns in `relay.toml`: `[[kinesis]]` (or a single `[kinesis]`),
//! the sources, and the keys of a `servers` entry with `protocol = "kinesis"`, a destination.
//! Raw serde structs with documented defaults, validated into [`KinesisConfig`] and
//! [`KinesisTarget`]; every error names the key and the file.

use std::path::PathBuf;
use std::time::Duration;

use anthracite::ConfigError;
use anthracite::extension::{DestinationContext, SectionContext, epoch_seconds};
use serde::{Deserialize, Serialize};

/// Where a shard without a checkpoint starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InitialPosition {
    /// The oldest record still retained (default: nothing retained is missed).
    #[default]
    TrimHorizon,
    /// Only records written after the reader starts. Closed shards are skipped.
    Latest,
    /// Records written at or after `initial_timestamp`.
    AtTimestamp,
}

/// How record payloads are encoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContentEncoding {
    /// Plain Graphite text (default).
    #[default]
    None,
    /// Every (user) record is a gzip member.
    Gzip,
    /// Every (user) record is a zlib stream.
    Zlib,
    /// Per record: gzip if it starts with `1f 8b`, zlib if it has a zlib header, else plain.
    Auto,
}

/// One `[[kinesis]]` entry as written in `relay.toml`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawKinesis {
    /// Stream name, or its ARN (`arn:aws:kinesis:…:stream/NAME`). Required.
    pub stream: String,
    /// AWS region. Default: the SDK's chain (`AWS_REGION`, profile, IMDS).
    pub region: String,
    /// Endpoint URL (a VPC endpoint, or a local Kinesis for tests). Default: AWS's.
    pub endpoint_url: String,
    /// Named profile for credentials and region. Default: the SDK's default chain.
    pub profile: String,
    /// Role to assume (STS) with the default chain's credentials. Default: none.
    pub role_arn: String,
    /// `trim_horizon` (default), `latest` or `at_timestamp`; used only for shards without a
    /// checkpoint.
    pub initial_position: InitialPosition,
    /// For `at_timestamp`: a TOML datetime with offset, e.g. `2026-01-01T00:00:00Z`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_timestamp: Option<toml::value::Datetime>,
    /// Pause between GetRecords calls on a shard that is caught up. Default 1000 ms.
    pub poll_idle_ms: u64,
    /// Pause between GetRecords calls on a shard that is behind. Default 200 ms, the minimum
    /// (Kinesis allows 5 calls per second per shard).
    pub poll_busy_ms: u64,
    /// Records per GetRecords call, 1..=10000. Default 10000.
    pub max_records: i32,
    /// Re-list shards this often (splits, merges). Default 60 s.
    pub shard_sync_interval_secs: f64,
    /// Directory of the checkpoint files (one per stream). Required without `lease_table`;
    /// with it, a file found here is migrated into the empty lease table.
    pub checkpoint_dir: PathBuf,
    /// Commit checkpoints this often (also at shard end and shutdown). Default 10 s.
    pub checkpoint_interval_secs: f64,
    /// `none` (default), `gzip`, `zlib` or `auto`.
    pub content_encoding: ContentEncoding,
    /// Pause polling while any destination queue holds more than this fraction of its
    /// `max_datapoints`. Default 0.5.
    pub queue_high_water: f64,
    /// First back-off after a throttle or error. Default 200 ms; doubles, with jitter.
    pub backoff_min_ms: u64,
    /// Longest back-off. Default 10000 ms.
    pub backoff_max_ms: u64,
    /// DynamoDB table of shard leases and checkpoints (KCL 2.x layout), shared by every relay
    /// reading the stream. Default: none (one relay reads every shard, checkpoints in files).
    pub lease_table: String,
    /// Endpoint URL for DynamoDB (a VPC endpoint, or a local DynamoDB). Default: AWS's.
    pub dynamodb_endpoint_url: String,
    /// This relay's lease owner name, unique in the fleet. Default `<hostname>-<pid>`.
    pub worker_id: String,
    /// A lease not renewed for this long may be taken by another relay. Default 10 s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_duration_secs: Option<f64>,
}

impl Default for RawKinesis {
    fn default() -> Self {
        Self {
            stream: String::new(),
            region: String::new(),
            endpoint_url: String::new(),
            profile: String::new(),
            role_arn: String::new(),
            initial_position: InitialPosition::TrimHorizon,
            initial_timestamp: None,
            poll_idle_ms: 1000,
            poll_busy_ms: 200,
            max_records: 10_000,
            shard_sync_interval_secs: 60.0,
            checkpoint_dir: PathBuf::new(),
            checkpoint_interval_secs: 10.0,
            content_encoding: ContentEncoding::None,
            queue_high_water: 0.5,
            backoff_min_ms: 200,
            backoff_max_ms: 10_000,
            lease_table: String::new(),
            dynamodb_endpoint_url: String::new(),
            worker_id: String::new(),
            lease_duration_secs: None,
        }
    }
}

/// The keys of a `servers` entry with `protocol = "kinesis"`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawKinesisDestination {
    /// The stream written to. Required.
    pub stream: String,
    /// The AWS region. Default: the SDK's chain (`AWS_REGION`, the profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Endpoint override (kinesalite, LocalStack, a VPC endpoint). Default: AWS's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
}

/// Where a Kinesis destination writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KinesisTarget {
    /// The stream's name.
    pub stream: String,
    /// AWS region (default: the SDK's chain: `AWS_REGION`, the profile).
    pub region: Option<String>,
    /// Endpoint override (kinesalite, LocalStack, a VPC endpoint).
    pub endpoint_url: Option<String>,
}

impl KinesisTarget {
    /// Validates a destination's keys (`stream` required; `region`, `endpoint_url`).
    pub fn from_settings(
        settings: &toml::Table,
        cx: &DestinationContext<'_>,
    ) -> Result<(Self, toml::Table), ConfigError> {
        let raw: RawKinesisDestination = toml::Value::Table(settings.clone())
            .try_into()
            .map_err(|e| cx.invalid("", e.to_string().trim_end().to_string()))?;
        if raw.stream.is_empty() {
            return Err(cx.invalid("stream", "protocol = \"kinesis\" needs the stream's name"));
        }
        let resolved = toml::Table::try_from(&raw).map_err(|e| cx.invalid("", e.to_string()))?;
        Ok((
            KinesisTarget {
                stream: raw.stream,
                region: raw.region,
                endpoint_url: raw.endpoint_url,
            },
            resolved,
        ))
    }
}

/// Default `lease_duration_secs`.
pub(crate) const DEFAULT_LEASE_DURATION_SECS: f64 = 10.0;

/// Shard leases in a DynamoDB table (`lease_table` and its keys).
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseConfig {
    /// The table's name.
    pub table: String,
    /// DynamoDB endpoint override.
    pub dynamodb_endpoint_url: Option<String>,
    /// This relay's `leaseOwner` value.
    pub worker_id: String,
    /// How long an unrenewed lease stays this worker's.
    pub lease_duration: Duration,
}

/// A validated Kinesis source.
#[derive(Clone, Debug, PartialEq)]
pub struct KinesisConfig {
    /// Stream name (the last part of an ARN).
    pub stream_name: String,
    /// The ARN when the stream was given as one.
    pub stream_arn: Option<String>,
    /// Region override.
    pub region: Option<String>,
    /// Endpoint override.
    pub endpoint_url: Option<String>,
    /// Profile override.
    pub profile: Option<String>,
    /// Role to assume.
    pub role_arn: Option<String>,
    /// Start position without a checkpoint.
    pub initial_position: InitialPosition,
    /// Seconds since the epoch, for [`InitialPosition::AtTimestamp`].
    pub initial_timestamp: Option<f64>,
    /// Pause between calls on a caught-up shard.
    pub poll_idle: Duration,
    /// Pause between calls on a shard that is behind (≥ 200 ms).
    pub poll_busy: Duration,
    /// Records per GetRecords call.
    pub max_records: i32,
    /// Shard re-list interval.
    pub shard_sync_interval: Duration,
    /// Checkpoint directory (absent only with a lease table).
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint commit interval.
    pub checkpoint_interval: Duration,
    /// Payload encoding.
    pub content_encoding: ContentEncoding,
    /// Queue fill fraction that pauses polling.
    pub queue_high_water: f64,
    /// Back-off bounds after throttles and errors.
    pub backoff_min: Duration,
    /// Longest back-off.
    pub backoff_max: Duration,
    /// Longest Graphite line (from `listen.max_line_length`).
    pub max_line_length: usize,
    /// Shard leases shared by a fleet of relays; `None`: this relay reads every shard.
    pub leases: Option<LeaseConfig>,
}

impl KinesisConfig {
    /// Validates one raw entry; `key` is its dotted name (`kinesis[0]`).
    pub fn from_raw(
        raw: &RawKinesis,
        key: &str,
        cx: &SectionContext<'_>,
    ) -> Result<Self, ConfigError> {
        let err = |k: &str, m: &str| cx.invalid(&format!("{key}.{k}"), m);
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        if raw.stream.is_empty() {
            return Err(err("stream", "a stream name or ARN is required"));
        }
        let (stream_name, stream_arn) = if raw.stream.starts_with("arn:") {
            let name = raw
                .stream
                .split_once(":stream/")
                .map(|(_, n)| n)
                .filter(|n| !n.is_empty() && !n.contains('/'))
                .ok_or_else(|| err("stream", "ARN must end in :stream/NAME"))?;
            (name.to_string(), Some(raw.stream.clone()))
        } else {
            (raw.stream.clone(), None)
        };
        let valid_name = stream_name.len() <= 128
            && stream_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !valid_name {
            return Err(err(
                "stream",
                "stream names are 1-128 characters of [a-zA-Z0-9_.-]",
            ));
        }
        let initial_timestamp = match (raw.initial_position, &raw.initial_timestamp) {
            (InitialPosition::AtTimestamp, None) => {
                return Err(err(
                    "initial_timestamp",
                    "required with initial_position = \"at_timestamp\"",
                ));
            }
            (InitialPosition::AtTimestamp, Some(t)) => {
                Some(epoch_seconds(t).ok_or_else(|| {
                    err("initial_timestamp", "needs a date, a time and an offset")
                })?)
            }
            (_, Some(_)) => {
                return Err(err(
                    "initial_timestamp",
                    "only used with initial_position = \"at_timestamp\"",
                ));
            }
            (_, None) => None,
        };
        if raw.poll_busy_ms < 200 {
            return Err(err(
                "poll_busy_ms",
                "must be at least 200 (Kinesis allows 5 GetRecords calls per second per shard)",
            ));
        }
        if raw.poll_idle_ms < raw.poll_busy_ms {
            return Err(err("poll_idle_ms", "must be at least poll_busy_ms"));
        }
        if raw.poll_idle_ms > 3_600_000 {
            return Err(err("poll_idle_ms", "must be at most 3600000 (one hour)"));
        }
        if !(1..=10_000).contains(&raw.max_records) {
            return Err(err("max_records", "must be between 1 and 10000"));
        }
        let secs = |k: &str, v: f64| -> Result<Duration, ConfigError> {
            if v.is_finite() && v > 0.0 && v < 1e9 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(err(k, "must be a positive number of seconds"))
            }
        };
        let shard_sync_interval = secs("shard_sync_interval_secs", raw.shard_sync_interval_secs)?;
        let checkpoint_interval = secs("checkpoint_interval_secs", raw.checkpoint_interval_secs)?;
        let leases = lease_config(raw, &err)?;
        if raw.checkpoint_dir.as_os_str().is_empty() && leases.is_none() {
            return Err(err(
                "checkpoint_dir",
                "a directory for checkpoint files is required (or a lease_table)",
            ));
        }
        if !(raw.queue_high_water > 0.0 && raw.queue_high_water <= 1.0) {
            return Err(err("queue_high_water", "must be in (0, 1]"));
        }
        if raw.backoff_min_ms == 0 || raw.backoff_max_ms < raw.backoff_min_ms {
            return Err(err(
                "backoff_max_ms",
                "need 0 < backoff_min_ms <= backoff_max_ms",
            ));
        }
        if raw.backoff_max_ms > 3_600_000 {
            return Err(err("backoff_max_ms", "must be at most 3600000 (one hour)"));
        }
        Ok(KinesisConfig {
            stream_name,
            stream_arn,
            region: opt(&raw.region),
            endpoint_url: opt(&raw.endpoint_url),
            profile: opt(&raw.profile),
            role_arn: opt(&raw.role_arn),
            initial_position: raw.initial_position,
            initial_timestamp,
            poll_idle: Duration::from_millis(raw.poll_idle_ms),
            poll_busy: Duration::from_millis(raw.poll_busy_ms),
            max_records: raw.max_records,
            shard_sync_interval,
            checkpoint_dir: (!raw.checkpoint_dir.as_os_str().is_empty())
                .then(|| raw.checkpoint_dir.clone()),
            checkpoint_interval,
            content_encoding: raw.content_encoding,
            queue_high_water: raw.queue_high_water,
            backoff_min: Duration::from_millis(raw.backoff_min_ms),
            backoff_max: Duration::from_millis(raw.backoff_max_ms),
            max_line_length: cx.max_line_length(),
            leases,
        })
    }

    /// A config for `stream` with every default, for embedding and tests.
    pub fn new(stream: &str, checkpoint_dir: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        let raw = RawKinesis {
            stream: stream.to_string(),
            checkpoint_dir: checkpoint_dir.into(),
            ..RawKinesis::default()
        };
        Self::from_raw(&raw, "kinesis", &SectionContext::new("<code>", 16_384))
    }
}

/// The lease keys of one entry: all absent, or `lease_table` plus optional others.
fn lease_config(
    raw: &RawKinesis,
    err: &dyn Fn(&str, &str) -> ConfigError,
) -> Result<Option<LeaseConfig>, ConfigError> {
    if raw.lease_table.is_empty() {
        for (key, set) in [
            (
                "dynamodb_endpoint_url",
                !raw.dynamodb_endpoint_url.is_empty(),
            ),
            ("worker_id", !raw.worker_id.is_empty()),
            ("lease_duration_secs", raw.lease_duration_secs.is_some()),
        ] {
            if set {
                return Err(err(key, "only used with lease_table"));
            }
        }
        return Ok(None);
    }
    let t = &raw.lease_table;
    let valid_table = (3..=255).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !valid_table {
        return Err(err(
            "lease_table",
            "DynamoDB table names are 3-255 characters of [a-zA-Z0-9_.-]",
        ));
    }
    let worker_id = if raw.worker_id.is_empty() {
        format!(
            "{}-{}",
            gethostname::gethostname().to_string_lossy(),
            std::process::id()
        )
    } else {
        raw.worker_id.clone()
    };
    let valid_worker = worker_id.len() <= 256
        && !worker_id
            .chars()
            .any(|c| c.is_control() || c.is_whitespace());
    if !valid_worker {
        return Err(err(
            "worker_id",
            "at most 256 characters, without spaces or control characters",
        ));
    }
    let secs = raw
        .lease_duration_secs
        .unwrap_or(DEFAULT_LEASE_DURATION_SECS);
    if !(secs.is_finite() && (1.0..=3600.0).contains(&secs)) {
        return Err(err(
            "lease_duration_secs",
            "must be between 1 and 3600 seconds",
        ));
    }
    Ok(Some(LeaseConfig {
        table: t.clone(),
        dynamodb_endpoint_url: (!raw.dynamodb_endpoint_url.is_empty())
            .then(|| raw.dynamodb_endpoint_url.clone()),
        worker_id,
        lease_duration: Duration::from_secs_f64(secs),
    }))
}

/// Validates every `[[kinesis]]` entry.
pub(crate) fn validate_all(
    raw: &[RawKinesis],
    cx: &SectionContext<'_>,
) -> Result<Vec<KinesisConfig>, ConfigError> {
    let mut out: Vec<KinesisConfig> = Vec::with_capacity(raw.len());
    for (i, k) in raw.iter().enumerate() {
        let key = format!("kinesis[{i}]");
        let k = KinesisConfig::from_raw(k, &key, cx)?;
        let shares_file = |p: &KinesisConfig| {
            p.stream_name == k.stream_name
                && p.checkpoint_dir.is_some()
                && p.checkpoint_dir == k.checkpoint_dir
        };
        if out.iter().any(shares_file) {
            return Err(cx.invalid(
                &key,
                "the same stream twice with one checkpoint_dir would share a checkpoint file",
            ));
        }
        let table = |c: &KinesisConfig| c.leases.as_ref().map(|l| l.table.clone());
        if let Some(t) = table(&k)
            && out.iter().any(|p| table(p).as_ref() == Some(&t))
        {
            return Err(cx.invalid(
                &format!("{key}.lease_table"),
                format!(
                    "table {t:?} is already used by another [[kinesis]] entry: a lease table holds one stream"
                ),
            ));
        }
        out.push(k);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `[[kinesis]]` entries of a whole `relay.toml` text, validated.
    fn kinesis(text: &str) -> Result<Vec<KinesisConfig>, ConfigError> {
        let table: toml::Table = toml::from_str(text).expect("TOML");
        let cx = SectionContext::new("<string>", 16_384);
        let section = table.get("kinesis").expect("a kinesis section");
        validate_all(&cx.entries("kinesis", section)?, &cx)
    }

    /// A whole `relay.toml` text through the relay's configuration with this extension.
    #[cfg(feature = "aws")]
    fn relay(text: &str) -> Result<anthracite::Config, ConfigError> {
        let extensions = anthracite::extension::Extensions::new().with(crate::Kinesis::new());
        anthracite::Config::from_toml_str_with(text, &extensions)
    }

    #[test]
    #[cfg(feature = "aws")]
    fn table_or_array_of_tables_and_errors_name_the_key() {
        let base = "[destinations]\nservers = [\"127.0.0.1:2104:a\"]\n";
        let one = format!("{base}[kinesis]\nstream = \"s\"\ncheckpoint_dir = \"/tmp/cp\"\n");
        assert_eq!(kinesis(&one).expect("one table").len(), 1);
        let e = anthracite::Config::from_toml_str(&one)
            .expect_err("the core alone refuses a [kinesis] section");
        assert!(e.to_string().contains("kinesis"), "{e}");
        let many = format!(
            "{base}[[kinesis]]\nstream = \"a\"\ncheckpoint_dir = \"/tmp/cp\"\n[[kinesis]]\nstream = \"b\"\ncheckpoint_dir = \"/tmp/cp\"\ninitial_position = \"at_timestamp\"\ninitial_timestamp = 2023-11-14T22:13:20Z\ncontent_encoding = \"auto\"\n"
        );
        let c = kinesis(&many).expect("array of tables");
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].initial_timestamp, Some(1_700_000_000.0));
        let resolved = relay(&many).expect("through the relay").to_resolved_toml();
        assert!(resolved.contains("[[kinesis]]"), "{resolved}");
        assert!(resolved.contains("poll_busy_ms = 200"), "{resolved}");
        let bad = format!(
            "{base}[[kinesis]]\nstream = \"a\"\ncheckpoint_dir = \"/x\"\npoll_busy_ms = 50\n"
        );
        let err = relay(&bad).expect_err("too fast");
        assert!(err.to_string().contains("kinesis[0].poll_busy_ms"), "{err}");
        let unknown =
            format!("{base}[kinesis]\nstream = \"a\"\ncheckpoint_dir = \"/x\"\nbogus = 1\n");
        let err = relay(&unknown).expect_err("unknown key");
        assert!(err.to_string().contains("bogus"), "{err}");
        let missing = format!("{base}[kinesis]\nstream = \"a\"\n");
        let err = kinesis(&missing).expect_err("no checkpoint_dir");
        assert!(
            err.to_string().contains("kinesis[0].checkpoint_dir"),
            "{err}"
        );
    }

    #[test]
    #[cfg(feature = "aws")]
    fn a_destination_needs_its_stream_and_takes_no_other_key() {
        let d = |extra: &str| {
            relay(&format!(
                "[destinations]\nservers = [{{ address = \"k:1:a\", protocol = \"kinesis\"{extra} }}]\n"
            ))
        };
        let c = d(", stream = \"out\", region = \"eu-west-1\"").expect("a stream");
        assert!(c.to_resolved_toml().contains("stream = \"out\""));
        let err = d("").expect_err("no stream");
        assert!(err.to_string().contains("destinations.servers[0]"), "{err}");
        let err = d(", stream = \"s\", topic = \"t\"").expect_err("a key of another protocol");
        assert!(err.to_string().contains("topic"), "{err}");
        let err = anthracite::Config::from_toml_str(
            "[destinations]\nservers = [{ address = \"k:1:a\", protocol = \"kinesis\", stream = \"s\" }]\n",
        )
        .expect_err("the core alone has no kinesis protocol");
        assert!(err.to_string().contains("protocol"), "{err}");
    }

    #[test]
    fn lease_keys_are_validated_with_errors_naming_the_key() {
        let base =
            "[destinations]\nservers = [\"127.0.0.1:2104:a\"]\n[[kinesis]]\nstream = \"s\"\n";
        let c = kinesis(&format!("{base}lease_table = \"s-leases\"\n"))
            .expect("a lease table needs no checkpoint_dir");
        let l = c[0].leases.clone().expect("leases");
        assert_eq!(l.lease_duration, Duration::from_secs(10));
        assert!(
            l.worker_id.ends_with(&format!("-{}", std::process::id())),
            "{}",
            l.worker_id
        );
        assert_eq!(c[0].checkpoint_dir, None);
        let c = kinesis(&format!(
            "{base}lease_table = \"s-leases\"\nworker_id = \"relay-7\"\nlease_duration_secs = 2.5\ndynamodb_endpoint_url = \"http://127.0.0.1:8000\"\ncheckpoint_dir = \"/tmp/cp\"\n"
        ))
        .expect("every lease key");
        let l = c[0].leases.clone().expect("leases");
        assert_eq!(l.worker_id, "relay-7");
        assert_eq!(l.lease_duration, Duration::from_millis(2500));
        assert_eq!(
            l.dynamodb_endpoint_url.as_deref(),
            Some("http://127.0.0.1:8000")
        );
        for (extra, key) in [
            (
                "worker_id = \"w\"\ncheckpoint_dir = \"/x\"\n",
                "kinesis[0].worker_id",
            ),
            (
                "lease_duration_secs = 5\ncheckpoint_dir = \"/x\"\n",
                "kinesis[0].lease_duration_secs",
            ),
            (
                "dynamodb_endpoint_url = \"http://x\"\ncheckpoint_dir = \"/x\"\n",
                "kinesis[0].dynamodb_endpoint_url",
            ),
            ("lease_table = \"ab\"\n", "kinesis[0].lease_table"),
            ("lease_table = \"has space\"\n", "kinesis[0].lease_table"),
            (
                "lease_table = \"tbl\"\nworker_id = \"a b\"\n",
                "kinesis[0].worker_id",
            ),
            (
                "lease_table = \"tbl\"\nlease_duration_secs = 0.5\n",
                "kinesis[0].lease_duration_secs",
            ),
            (
                "lease_table = \"tbl\"\n[[kinesis]]\nstream = \"t\"\nlease_table = \"tbl\"\n",
                "kinesis[1].lease_table",
            ),
        ] {
            let err = kinesis(&format!("{base}{extra}")).expect_err(extra);
            assert!(err.to_string().contains(key), "{extra}: {err}");
        }
    }

    #[test]
    fn arn_gives_name() {
        let raw = RawKinesis {
            stream: "arn:aws:kinesis:eu-west-1:123456789012:stream/metrics".into(),
            checkpoint_dir: "/tmp".into(),
            ..RawKinesis::default()
        };
        let c = KinesisConfig::from_raw(&raw, "kinesis[0]", &SectionContext::new("<string>", 100))
            .expect("valid");
        assert_eq!(c.stream_name, "metrics");
        assert!(c.stream_arn.is_some());
    }
}
