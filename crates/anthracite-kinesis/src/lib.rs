//! # anthracite-kinesis — AWS Kinesis Data Streams for the anthracite relay
//!
//! An [extension](anthracite::extension) of the relay: the `[[kinesis]]` section of
//! `relay.toml` (sources) and the destination protocol `protocol = "kinesis"`.
//!
//! - **source** — `src/source/`: one [`KinesisSource`] per stream. A coordinator lists the
//!   shards and runs one reader per shard (children after their parents, so per-key order
//!   survives resharding); a reader de-aggregates KPL records ([`kpl`]), decodes the payload
//!   (none, gzip, zlib, auto) and feeds each record's text to the relay as one message through
//!   an [`Ingestor`](anthracite::Ingestor). Positions are checkpointed only after what precedes
//!   them was flushed into the destination queues: at least once.
//! - **leases** — `src/source/leases/` (its module documentation is the design): relays sharing
//!   a stream share its shards through a DynamoDB lease table in the KCL 2.x layout;
//!   checkpoints live in the lease rows, and the shards of a relay that dies are taken over.
//! - **destination** — `src/destination.rs`: KPL-aggregated records into a stream with
//!   `PutRecords`, counted as sent only once the stream acknowledged them; the relay's queue,
//!   spill tier and failure episodes in front, as for a carbon-cache.
//! - **settings** — [`config`]: the raw TOML of both, with documented defaults, validated into
//!   [`KinesisConfig`] and [`KinesisTarget`]; [`metric_names`]: every self-metric name.
//!
//! ## Use
//!
//! Register [`Kinesis`] with the relay's configuration:
//!
//! ```no_run
//! use anthracite::extension::Extensions;
//! use anthracite::{Config, Relay};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let extensions = Extensions::new().with(anthracite_kinesis::Kinesis::new());
//! let config = Config::from_toml_str_with(
//!     r#"
//!     [destinations]
//!     servers = ["127.0.0.1:2104:a"]
//!     [[kinesis]]
//!     stream = "metrics"
//!     checkpoint_dir = "/var/lib/anthracite/kinesis"
//!     "#,
//!     &extensions,
//! )?;
//! let relay = Relay::builder(config).features(extensions.features()).build()?;
//! relay.run(std::future::pending::<()>()).await?;
//! # Ok(()) }
//! ```
//!
//! Or run a [`KinesisSource`] on a relay the program already has
//! ([`RelayHandle::source_context`](anthracite::RelayHandle::source_context)).
#![warn(missing_docs)]
#![cfg_attr(not(feature = "unstable"), allow(dead_code, unused_imports))]

pub mod config;
mod destination;
pub mod kpl;
pub mod metric_names;
mod source;
#[cfg(feature = "unstable")]
#[doc(hidden)]
pub mod unstable;

use std::sync::Arc;

use anthracite::ConfigError;
use anthracite::destination::{BoxFuture, StreamDestination};
use anthracite::extension::{
    DestinationContext, Extension, Section, SectionContext, SourceError, SourceSpec, StreamSource,
};
use aws_config::SdkConfig;

pub use config::{KinesisConfig, KinesisTarget};
pub use destination::KinesisDestination;
pub use source::checkpoint::{CheckpointError, CheckpointStore, FileStore, StreamCheckpoint};
pub use source::{KinesisError, KinesisSource, KinesisStats, ShardEvent};

/// The Kinesis extension: `[[kinesis]]` sources and `protocol = "kinesis"` destinations.
#[derive(Clone, Debug, Default)]
pub struct Kinesis {
    aws: Option<SdkConfig>,
}

impl Kinesis {
    /// With the AWS SDK's default chain for credentials and region.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses this AWS configuration (credentials, region) for the configured streams instead
    /// of the SDK's default chain; each stream's region, role and endpoint still apply.
    pub fn with_sdk_config(mut self, sdk: SdkConfig) -> Self {
        self.aws = Some(sdk);
        self
    }
}

impl Extension for Kinesis {
    fn name(&self) -> &'static str {
        "kinesis"
    }

    fn sources(
        &self,
        section: &toml::Value,
        cx: &SectionContext<'_>,
    ) -> Result<Section, ConfigError> {
        let raw: Vec<config::RawKinesis> = cx.entries(self.name(), section)?;
        let configs = config::validate_all(&raw, cx)?;
        let resolved = toml::Value::try_from(&raw)
            .map_err(|e| cx.invalid(self.name(), format!("cannot render: {e}")))?;
        Ok(Section {
            resolved,
            sources: configs
                .into_iter()
                .map(|config| {
                    Arc::new(StreamSpec {
                        config,
                        aws: self.aws.clone(),
                    }) as Arc<dyn SourceSpec>
                })
                .collect(),
        })
    }

    fn destination(
        &self,
        settings: &toml::Table,
        cx: &DestinationContext<'_>,
    ) -> Result<(Arc<dyn StreamDestination>, toml::Table), ConfigError> {
        // Kinesis speaks HTTPS through the AWS SDK; `destinations.tls` is for TCP and does not
        // apply here.
        let (target, resolved) = KinesisTarget::from_settings(settings, cx)?;
        Ok((Arc::new(KinesisDestination::new(target)), resolved))
    }
}

/// One configured stream, prepared when the relay starts.
#[derive(Debug)]
struct StreamSpec {
    config: KinesisConfig,
    aws: Option<SdkConfig>,
}

impl SourceSpec for StreamSpec {
    fn prepare(&self) -> BoxFuture<'_, Result<Box<dyn StreamSource>, SourceError>> {
        Box::pin(async move {
            let source = KinesisSource::new(self.config.clone(), self.aws.as_ref()).await?;
            Ok(Box::new(source) as Box<dyn StreamSource>)
        })
    }
}
