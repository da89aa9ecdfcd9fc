//! What the relay runs: the extension that registers the section and the protocol, the source
//! and the destination (the AWS SDK; Cargo feature `aws`).

pub(crate) mod destination;
pub(crate) mod source;

use std::sync::Arc;

use anthracite::ConfigError;
use anthracite::destination::{BoxFuture, StreamDestination};
use anthracite::extension::{
    DestinationContext, Extension, Section, SectionContext, SourceError, SourceSpec, StreamSource,
};
use aws_config::SdkConfig;

use crate::config::{self, KinesisConfig, KinesisTarget};
pub use destination::KinesisDestination;
pub use source::checkpoint::{
    CheckpointError, CheckpointStore, FileStore, Position, SequenceNumber, ShardCheckpoint,
    StreamCheckpoint,
};
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
        let sources = config::validate_all(&raw, cx)?
            .into_iter()
            .map(|config| {
                let aws = self.aws.clone();
                Arc::new(StreamSpec { config, aws }) as Arc<dyn SourceSpec>
            })
            .collect();
        Section::new(self.name(), &raw, sources, cx)
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

/// The full error chain of an SDK error, for logs.
pub(crate) fn error_text<E: std::error::Error + 'static>(e: &E) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}
