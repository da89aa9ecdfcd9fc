//! The seam for crates that add what the core does not have: sources a relay reads from (a
//! Kinesis stream, a Kafka consumer group) and destinations of other kinds (a Kinesis stream, a
//! Kafka topic). `anthracite-kinesis` and `anthracite-kafka` are such crates; the `anthracite`
//! binary registers them behind its Cargo features, and an embedder registers what it links.
//!
//! # One file, sections owned by their crates
//!
//! An [`Extension`] has a name. In `relay.toml` it owns the top-level section of that name
//! (`[kinesis]` or `[[kinesis]]`) and the destination protocol of that name (a `servers` entry
//! with `protocol = "kinesis"` and the extension's own keys beside `address`). The core reads
//! everything else with its own schema; the sections and keys it does not know go, as TOML
//! values, to the extension registered under their name ([`Extensions`]), which validates
//! them into sources ([`Section`]) or a destination kind
//! ([`crate::destination::StreamDestination`]). A section no registered
//! extension claims is an error naming it, like an unknown key.
//!
//! # Lifecycle
//!
//! A configured source is a [`SourceSpec`]. When the relay runs, it prepares every source first
//! ([`SourceSpec::prepare`]: a corrupt checkpoint stops startup before any port is bound), then
//! binds its receivers and starts its destinations, then runs each prepared [`StreamSource`]
//! with a [`SourceContext`]: ingestors into the relay's pipeline, the queue-pressure signal,
//! and the stop signal. Shutdown stops sources with the receivers (phase 1) and waits for them
//! (their final checkpoints and commits) until the grace period ends. A source's self-metrics
//! are its [`crate::figure::Reporting`] component, read at report and scrape time
//! beside the relay's own.
//!
//! Sections of extensions are fixed for the life of a relay: a reload that changes one is
//! rejected (it needs a restart); destinations of extensions reload like any other.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigError;
use crate::destination::{BoxFuture, StreamDestination};
use crate::figure::Reporting;
use crate::ingest::{Ingestor, Pipeline, Source};

/// A crate's addition to the relay: a `relay.toml` section of sources and a destination
/// protocol, both under [`name`](Self::name). See the [module documentation](self).
pub trait Extension: Send + Sync + fmt::Debug + 'static {
    /// The section (`[name]`, `[[name]]`) and the destination protocol (`protocol = "name"`)
    /// it owns. Never one of the core's sections or protocols.
    fn name(&self) -> &'static str;

    /// Validates the section (a table, or an array of tables) into sources.
    fn sources(
        &self,
        section: &toml::Value,
        cx: &SectionContext<'_>,
    ) -> Result<Section, ConfigError>;

    /// Validates a destination with `protocol = name`: `settings` holds the keys of its
    /// `servers` entry that are not the core's. Returns the destination kind and the settings
    /// with every default resolved.
    fn destination(
        &self,
        settings: &toml::Table,
        cx: &DestinationContext<'_>,
    ) -> Result<(Arc<dyn StreamDestination>, toml::Table), ConfigError>;
}

/// A validated section: its sources, and the section with every default resolved (what
/// `anthracite check` prints; a reload compares it).
#[derive(Debug)]
pub struct Section {
    /// The section, resolved.
    pub resolved: toml::Value,
    /// One per entry of the section.
    pub sources: Vec<Arc<dyn SourceSpec>>,
}

impl Section {
    /// The section `name` of `sources`, made from `entries`: its entries as written, with
    /// every default filled in (one table per source).
    pub fn new<T: serde::Serialize>(
        name: &str,
        entries: &[T],
        sources: Vec<Arc<dyn SourceSpec>>,
        cx: &SectionContext<'_>,
    ) -> Result<Self, ConfigError> {
        let resolved = toml::Value::try_from(entries)
            .map_err(|e| cx.invalid(name, format!("cannot render: {e}")))?;
        Ok(Section { resolved, sources })
    }
}

/// What a section's validation knows of the rest of the file.
#[derive(Clone, Copy, Debug)]
pub struct SectionContext<'a> {
    pub(crate) file: &'a str,
    pub(crate) max_line_length: usize,
}

impl<'a> SectionContext<'a> {
    /// A context for validating a section of `file` (or `<string>`, `<code>`) whose
    /// `listen.max_line_length` is `max_line_length`.
    pub fn new(file: &'a str, max_line_length: usize) -> Self {
        Self {
            file,
            max_line_length,
        }
    }

    /// The file being validated (or `<string>`), for errors.
    pub fn file(&self) -> &str {
        self.file
    }

    /// `listen.max_line_length`: the longest line a source should hand to the parser.
    pub fn max_line_length(&self) -> usize {
        self.max_line_length
    }

    /// An error at `key` (a dotted key such as `kinesis[0].stream_name`).
    pub fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        invalid(self.file, key, message)
    }

    /// The entries of `section` (one table, or an array of tables) as `T`; an error names
    /// the entry and the key (`name[i]: …`).
    pub fn entries<T: DeserializeOwned>(
        &self,
        name: &str,
        section: &toml::Value,
    ) -> Result<Vec<T>, ConfigError> {
        // Through TOML text, not `Value::try_into`: that hands datetimes over as strings.
        let parse = |key: String, v: &toml::Value| {
            let text = match v {
                toml::Value::Table(t) => toml::to_string(t),
                other => toml::to_string(other),
            }
            .map_err(|e| self.invalid(&key, e.to_string()))?;
            toml::from_str::<T>(&text).map_err(|e| self.invalid(&key, e.message().to_string()))
        };
        match section {
            toml::Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| parse(format!("{name}[{i}]"), v))
                .collect(),
            toml::Value::Table(_) => Ok(vec![parse(format!("{name}[0]"), section)?]),
            other => Err(self.invalid(
                name,
                format!(
                    "expected a table [{name}] or tables [[{name}]], found a {}",
                    other.type_str()
                ),
            )),
        }
    }
}

/// What a destination's validation knows of it.
#[derive(Clone, Copy, Debug)]
pub struct DestinationContext<'a> {
    pub(crate) file: &'a str,
    pub(crate) key: &'a str,
    pub(crate) name: &'a str,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    pub(crate) tls: bool,
}

impl DestinationContext<'_> {
    /// The file being validated (or `<string>`), for errors.
    pub fn file(&self) -> &str {
        self.file
    }

    /// The destination's key (`destinations.servers[2]`).
    pub fn key(&self) -> &str {
        self.key
    }

    /// The destination's name (`host:port:instance`).
    pub fn name(&self) -> &str {
        self.name
    }

    /// The host of its address (brackets of an IPv6 address removed).
    pub fn host(&self) -> &str {
        self.host
    }

    /// The port of its address.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether `[destinations.tls]` is set (the core's TLS, for TCP destinations).
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// An error at `key` below the destination (`stream`, `kafka.topic`), or at the
    /// destination itself when `key` is empty.
    pub fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        let full = if key.is_empty() {
            self.key.to_string()
        } else {
            format!("{}.{key}", self.key)
        };
        invalid(self.file, &full, message)
    }
}

fn invalid(file: &str, key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::invalid(file, key, message)
}

/// The extensions a relay's configuration may use, and the build's features for
/// `anthracite --version` and `anthracite_build_info`.
#[derive(Clone, Debug, Default)]
pub struct Extensions {
    list: Vec<Arc<dyn Extension>>,
    features: Vec<&'static str>,
}

impl Extensions {
    /// None: the core alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `extension` (its name is also a feature of the build).
    pub fn with(mut self, extension: impl Extension) -> Self {
        self.features.push(extension.name());
        self.list.push(Arc::new(extension));
        self
    }

    /// Records a feature of the build that is not an extension (`kafka-tls`).
    pub fn with_feature(mut self, feature: &'static str) -> Self {
        self.features.push(feature);
        self
    }

    /// The extension named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Extension>> {
        self.list.iter().find(|e| e.name() == name)
    }

    /// The extensions' names, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.list.iter().map(|e| e.name()).collect()
    }

    /// The build's features: every extension's name, then the others recorded.
    pub fn features(&self) -> &[&'static str] {
        &self.features
    }
}

/// The error a source gives when it cannot be prepared.
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// A configured source (one entry of an extension's section).
pub trait SourceSpec: Send + Sync + fmt::Debug {
    /// Prepares the source before the relay binds any port: loads its checkpoints, builds its
    /// clients. An error stops the relay's startup (`RelayError::Source`).
    fn prepare(&self) -> BoxFuture<'_, Result<Box<dyn StreamSource>, SourceError>>;
}

/// A prepared source, ready to run.
pub trait StreamSource: Send {
    /// What it reads, for logs (`kinesis stream metrics`, `kafka group relays`).
    fn describe(&self) -> String;

    /// Its self-metrics, read at report and scrape time while and after it runs.
    fn reporting(&self) -> Arc<dyn Reporting>;

    /// Reads into the relay until [`SourceContext::stop`] is cancelled; then flushes what it
    /// parsed and commits its position before returning.
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<'static, ()>;
}

/// What a running source gets from its relay: ingestors into the relay's parse → route →
/// queue pipeline, the queue-pressure signal, and the stop signal.
#[derive(Clone, Debug)]
pub struct SourceContext {
    pipeline: Pipeline,
    stop: CancellationToken,
}

impl SourceContext {
    pub(crate) fn new(pipeline: Pipeline, stop: CancellationToken) -> Self {
        Self { pipeline, stop }
    }

    /// A new ingestor that waits for room in a full queue instead of dropping (a source that
    /// can pause reading never needs to drop). One per reading task.
    pub fn ingestor(&self) -> Ingestor {
        self.pipeline.ingestor(Source::Embedded).with_backpressure()
    }

    /// True while any destination's memory tier holds more than `fraction` (0–1) of its
    /// bound: a pull source stops fetching while it holds, instead of pushing datapoints a
    /// full queue would spill or drop.
    pub fn backlogged(&self, fraction: f64) -> bool {
        self.pipeline.backlogged(fraction)
    }

    /// Cancelled when the source must stop (the relay's shutdown, phase 1).
    pub fn stop(&self) -> &CancellationToken {
        &self.stop
    }
}

/// Seconds since the epoch of a TOML offset datetime (`None` without a date, a time or an
/// offset).
pub fn epoch_seconds(t: &toml::value::Datetime) -> Option<f64> {
    let date = t.date?;
    let time = t.time?;
    let offset_minutes = match t.offset? {
        toml::value::Offset::Z => 0i64,
        toml::value::Offset::Custom { minutes } => i64::from(minutes),
    };
    // Howard Hinnant's days_from_civil.
    let (y, m, d) = (
        i64::from(date.year),
        i64::from(date.month),
        i64::from(date.day),
    );
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400
        + i64::from(time.hour) * 3600
        + i64::from(time.minute) * 60
        + i64::from(time.second)
        - offset_minutes * 60;
    Some(secs as f64 + f64::from(time.nanosecond) / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_of_datetimes() {
        let t: toml::value::Datetime = "2023-11-14T22:13:20Z".parse().expect("datetime");
        assert_eq!(epoch_seconds(&t), Some(1_700_000_000.0));
        let t: toml::value::Datetime = "2023-11-15T00:13:20+02:00".parse().expect("datetime");
        assert_eq!(epoch_seconds(&t), Some(1_700_000_000.0));
        let t: toml::value::Datetime = "1970-01-01T00:00:00.5Z".parse().expect("datetime");
        assert_eq!(epoch_seconds(&t), Some(0.5));
    }
}
