//! # anthracite-kafka — Apache Kafka for the anthracite relay
//!
//! An [extension](anthracite::extension) of the relay: the `[[kafka]]` section of
//! `relay.toml` (sources) and the destination protocol `protocol = "kafka"`.
//!
//! - **source** — `src/source/`: one [`KafkaSource`] per entry, a librdkafka consumer in the
//!   entry's consumer group (relays sharing a `group_id` share the topics' partitions, with the
//!   cooperative-sticky assignor), polled by one thread that feeds each message to the relay
//!   through an [`Ingestor`](anthracite::Ingestor) (Graphite lines, or one carbon pickle
//!   payload). Offsets are committed only once what precedes them was flushed into the
//!   destination queues, and synchronously before a partition is released: at least once,
//!   and a graceful handoff re-reads nothing.
//! - **destination** — `src/destination.rs`: datapoints partitioned by metric name as Kafka's
//!   Java client would (murmur2), packed into line or pickle messages, sent through
//!   librdkafka's idempotent producer, counted as sent once the brokers acknowledged them; the
//!   relay's queue, spill tier and failure episodes in front, as for a carbon-cache.
//!   `src/producer.rs`: the producer's settings, its delivery reports as futures and the
//!   thread that polls them without spinning.
//! - **settings** — [`config`]: the raw TOML of both, with documented defaults, validated into
//!   [`KafkaConfig`] and [`KafkaTarget`]; [`metric_names`]: every self-metric name.
//!
//! ## Use
//!
//! Register [`Kafka`] with the relay's configuration:
//!
//! ```no_run
//! use anthracite::extension::Extensions;
//! use anthracite::{Config, Relay};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let extensions = Extensions::new().with(anthracite_kafka::Kafka);
//! let config = Config::from_toml_str_with(
//!     r#"
//!     [destinations]
//!     servers = ["127.0.0.1:2104:a"]
//!     [[kafka]]
//!     brokers = ["127.0.0.1:9092"]
//!     topics = ["graphite"]
//!     group_id = "relays"
//!     "#,
//!     &extensions,
//! )?;
//! let relay = Relay::builder(config).features(extensions.features()).build()?;
//! relay.run(std::future::pending::<()>()).await?;
//! # Ok(()) }
//! ```
//!
//! Or run a [`KafkaSource`] on a relay the program already has
//! ([`RelayHandle::source_context`](anthracite::RelayHandle::source_context)).
#![warn(missing_docs)]

pub mod config;
mod destination;
pub mod metric_names;
mod producer;
mod source;

use std::sync::Arc;

use anthracite::ConfigError;
use anthracite::destination::{BoxFuture, StreamDestination};
use anthracite::extension::{
    DestinationContext, Extension, Section, SectionContext, SourceError, SourceSpec, StreamSource,
};

pub use config::{GroupProtocol, KafkaConfig, KafkaTarget, MessageFormat, Session};
pub use destination::{KafkaDestination, murmur2, partition_for};
pub use source::{KafkaError, KafkaSource, KafkaStats};

/// The Kafka extension: `[[kafka]]` sources and `protocol = "kafka"` destinations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Kafka;

impl Extension for Kafka {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn sources(
        &self,
        section: &toml::Value,
        cx: &SectionContext<'_>,
    ) -> Result<Section, ConfigError> {
        let raw: Vec<config::RawKafka> = cx.entries(self.name(), section)?;
        let sources = config::validate_all(&raw, cx)?
            .into_iter()
            .map(|config| Arc::new(GroupSpec { config }) as Arc<dyn SourceSpec>)
            .collect();
        Section::new(self.name(), &raw, sources, cx)
    }

    fn destination(
        &self,
        settings: &toml::Table,
        cx: &DestinationContext<'_>,
    ) -> Result<(Arc<dyn StreamDestination>, toml::Table), ConfigError> {
        let (target, resolved) = KafkaTarget::from_settings(settings, cx)?;
        Ok((Arc::new(KafkaDestination::new(target)), resolved))
    }
}

/// One configured consumer: nothing is contacted until it runs.
#[derive(Debug)]
struct GroupSpec {
    config: KafkaConfig,
}

impl SourceSpec for GroupSpec {
    fn prepare(&self) -> BoxFuture<'_, Result<Box<dyn StreamSource>, SourceError>> {
        let source = KafkaSource::new(self.config.clone());
        Box::pin(async move { Ok(Box::new(source) as Box<dyn StreamSource>) })
    }
}
