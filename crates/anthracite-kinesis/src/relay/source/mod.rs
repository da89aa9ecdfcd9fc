//! AWS Kinesis Data Streams source: records → Graphite lines → the relay's pipeline.
//!
//! # Design
//!
//! One [`KinesisSource`] per configured stream. Its **coordinator** ([`coordinator`]) lists
//! the shards (ListShards, paged), keeps a parent → child graph, and runs one **reader**
//! ([`reader`]) task per shard. A child shard starts only after every parent it names has
//! reached SHARD_END (a merge has two parents), so per-key order survives resharding. The
//! coordinator re-lists on an interval and whenever a shard ends; when GetRecords returns
//! `ChildShards` at the end of a shard, the children join the graph at once.
//!
//! A reader loops on GetRecords with the stream's pacing (about 1 s when caught up, 200 ms
//! when behind: at most 5 calls per second per shard), de-aggregates KPL records ([`crate::kpl`]),
//! decodes the payload ([`decode`]: none, gzip, zlib, auto), splits lines like a UDP datagram
//! and feeds them to its own [`Ingestor`](anthracite::Ingestor), which parses with carbon's
//! rules, counts bad lines, routes, and flushes into the destination queues.
//!
//! # Delivery guarantee: at least once
//!
//! A reader records a shard's position — `(sequence, sub-sequence)` of the last user record —
//! only after flushing every earlier line of that shard into the destination queues. The
//! coordinator commits those positions ([`checkpoint`]) on an interval, when a shard ends and
//! at shutdown. After a crash, records since the last commit are read again (duplicates
//! bounded by one checkpoint interval); nothing committed is lost.
//!
//! While any destination queue holds more than `queue_high_water` of its bound, readers stop
//! polling (and so commit nothing new), instead of pushing lines the queue would drop.
//!
//! # Errors
//!
//! - ProvisionedThroughputExceeded: per-shard exponential back-off with jitter, retrying with
//!   the same iterator. The GetRecords client has SDK retries off so every throttle is seen
//!   and counted here; the control-plane client (ListShards, GetShardIterator) keeps them.
//! - ExpiredIterator: a new iterator `AT_SEQUENCE_NUMBER` the last processed record, skipping
//!   the user records already processed (works inside an aggregate).
//! - Stream missing or deleted: logged once per episode with the stream's name, retried with
//!   back-off until it exists again or the relay stops.
//!
//! # Sharing a stream
//!
//! Without `lease_table`, one relay reads every shard of a stream and keeps checkpoints in a
//! local file. With it, a fleet of relays shares the shards through a DynamoDB lease table in
//! the KCL 2.x layout, checkpoints live in the lease rows, and a relay that dies has its
//! shards taken over by the others: see [`leases`], whose module documentation is the design.

pub(crate) mod checkpoint;
pub(crate) mod coordinator;
pub(crate) mod decode;
pub(crate) mod leases;
pub(crate) mod reader;
pub(crate) mod shards;
pub(crate) mod stats;

use std::sync::Arc;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::config::retry::RetryConfig;

use anthracite::extension::{SourceContext, StreamSource};
use anthracite::figure::Reporting;

use crate::config::KinesisConfig;
use crate::config::{InitialPosition, LeaseConfig};
use leases::worker::{LeaseSettings, Leases};
use leases::{Checkpoint, DynamoDbTable, LeaseStore};

pub(crate) use checkpoint::{CheckpointError, CheckpointStore, FileStore, StreamCheckpoint};
pub use stats::{KinesisStats, ShardEvent};

/// Errors of a Kinesis source.
#[derive(Debug, thiserror::Error)]
pub enum KinesisError {
    /// The checkpoint store failed (a corrupt file is reported here at startup).
    #[error("kinesis stream {stream}: {source}")]
    Checkpoint {
        /// The stream.
        stream: String,
        /// The store's error.
        source: CheckpointError,
    },
    /// A checkpoint task could not be run.
    #[error("kinesis stream {stream}: checkpoint task failed: {message}")]
    Task {
        /// The stream.
        stream: String,
        /// What happened.
        message: String,
    },
}

/// One stream being read into a relay's pipeline.
#[derive(Debug)]
pub struct KinesisSource {
    config: KinesisConfig,
    store: Arc<dyn CheckpointStore>,
    checkpoint: StreamCheckpoint,
    control: Client,
    data: Client,
    stats: Arc<KinesisStats>,
    leases: Option<Arc<Leases>>,
}

impl KinesisSource {
    /// Prepares a source: loads its checkpoint (a corrupt file is an error here, before
    /// anything is read) and builds its clients. `base` replaces the SDK's default chain
    /// (credentials, region) when given; the config's region, profile, role and endpoint
    /// apply on top. With `lease_table`, checkpoints live in the lease rows and a checkpoint
    /// file found in `checkpoint_dir` is migrated into an empty table.
    pub async fn new(
        config: KinesisConfig,
        base: Option<&SdkConfig>,
    ) -> Result<Self, KinesisError> {
        let file = config
            .checkpoint_dir
            .as_ref()
            .map(|dir| FileStore::new(dir, &config.stream_name));
        let Some(lease_config) = config.leases.clone() else {
            let store: Arc<dyn CheckpointStore> = match file {
                Some(f) => Arc::new(f),
                None => {
                    return Err(KinesisError::Task {
                        stream: config.stream_name.clone(),
                        message: "no checkpoint_dir and no lease_table".into(),
                    });
                }
            };
            return Self::with_store(config, base, store).await;
        };
        let migrate = match file {
            Some(f) => Some(f.load().await.map_err(|source| KinesisError::Checkpoint {
                stream: config.stream_name.clone(),
                source,
            })?),
            None => None,
        };
        let sdk = sdk_config(&config, base).await;
        let stats = Arc::new(KinesisStats::new(&config.stream_name));
        let leases = Arc::new(lease_worker(&config, &lease_config, &sdk, migrate, &stats));
        let store = Arc::new(LeaseStore::new(leases.clone(), &config.stream_name));
        let mut source = Self::build(config, sdk, store, StreamCheckpoint::default(), stats);
        source.leases = Some(leases);
        Ok(source)
    }

    /// Like [`new`](Self::new) with another checkpoint store (and no lease table).
    pub async fn with_store(
        config: KinesisConfig,
        base: Option<&SdkConfig>,
        store: Arc<dyn CheckpointStore>,
    ) -> Result<Self, KinesisError> {
        let checkpoint = store
            .load()
            .await
            .map_err(|source| KinesisError::Checkpoint {
                stream: config.stream_name.clone(),
                source,
            })?;
        let sdk = sdk_config(&config, base).await;
        let stats = Arc::new(KinesisStats::new(&config.stream_name));
        Ok(Self::build(config, sdk, store, checkpoint, stats))
    }

    fn build(
        config: KinesisConfig,
        sdk: SdkConfig,
        store: Arc<dyn CheckpointStore>,
        checkpoint: StreamCheckpoint,
        stats: Arc<KinesisStats>,
    ) -> Self {
        let mut control = aws_sdk_kinesis::config::Builder::from(&sdk);
        if let Some(url) = &config.endpoint_url {
            control = control.endpoint_url(url);
        }
        let data = control.clone().retry_config(RetryConfig::disabled());
        Self {
            control: Client::from_conf(control.build()),
            data: Client::from_conf(data.build()),
            config,
            store,
            checkpoint,
            stats,
            leases: None,
        }
    }

    /// The source's counters (shared; valid while and after it runs).
    pub fn stats(&self) -> Arc<KinesisStats> {
        self.stats.clone()
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.config.stream_name
    }

    /// Reads into the relay of `cx` until its stop signal, then stops every reader (each
    /// flushes what it parsed) and commits the final checkpoint.
    pub async fn run(self, cx: SourceContext) -> Result<(), KinesisError> {
        let shutdown = cx.stop().clone();
        coordinator::run(
            coordinator::Parts {
                config: Arc::new(self.config),
                store: self.store,
                checkpoint: self.checkpoint,
                control: self.control,
                data: self.data,
                stats: self.stats,
                relay: cx,
                leases: self.leases,
            },
            shutdown,
        )
        .await
    }
}

/// The lease worker of a stream: a DynamoDB client (same credentials and region as Kinesis,
/// its own endpoint) whose calls time out well within one renewal period.
fn lease_worker(
    config: &KinesisConfig,
    lease: &LeaseConfig,
    sdk: &SdkConfig,
    migrate: Option<StreamCheckpoint>,
    stats: &Arc<KinesisStats>,
) -> Leases {
    let period = lease.lease_duration / 3;
    let mut ddb = aws_sdk_dynamodb::config::Builder::from(sdk).timeout_config(
        TimeoutConfig::builder()
            .operation_attempt_timeout(period)
            .operation_timeout(period * 2)
            .build(),
    );
    if let Some(url) = &lease.dynamodb_endpoint_url {
        ddb = ddb.endpoint_url(url);
    }
    let table = DynamoDbTable::new(
        aws_sdk_dynamodb::Client::from_conf(ddb.build()),
        &lease.table,
    );
    let initial = match config.initial_position {
        InitialPosition::TrimHorizon => Checkpoint::TrimHorizon,
        InitialPosition::Latest => Checkpoint::Latest,
        InitialPosition::AtTimestamp => Checkpoint::AtTimestamp,
    };
    Leases::new(
        Arc::new(table),
        LeaseSettings {
            stream: config.stream_name.clone(),
            worker: lease.worker_id.clone(),
            duration: lease.lease_duration,
            initial,
            skip_closed: config.initial_position == InitialPosition::Latest,
        },
        migrate,
        stats.clone(),
    )
}

async fn sdk_config(config: &KinesisConfig, base: Option<&SdkConfig>) -> SdkConfig {
    let mut sdk = match base {
        Some(b) => b.clone(),
        None => {
            let mut loader = aws_config::defaults(BehaviorVersion::latest());
            if let Some(p) = &config.profile {
                loader = loader.profile_name(p);
            }
            if let Some(r) = &config.region {
                loader = loader.region(Region::new(r.clone()));
            }
            loader.load().await
        }
    };
    if let Some(r) = &config.region {
        sdk = sdk.into_builder().region(Region::new(r.clone())).build();
    }
    if let Some(role) = &config.role_arn {
        let provider = aws_config::sts::AssumeRoleProvider::builder(role)
            .session_name("anthracite")
            .configure(&sdk)
            .build()
            .await;
        sdk = sdk
            .into_builder()
            .credentials_provider(aws_sdk_kinesis::config::SharedCredentialsProvider::new(
                provider,
            ))
            .build();
    }
    sdk
}

impl StreamSource for KinesisSource {
    fn describe(&self) -> String {
        format!("kinesis stream {}", self.config.stream_name)
    }

    fn reporting(&self) -> Arc<dyn Reporting> {
        self.stats.clone()
    }

    fn run(self: Box<Self>, cx: SourceContext) -> anthracite::destination::BoxFuture<'static, ()> {
        Box::pin(async move {
            let stream = self.config.stream_name.clone();
            if let Err(e) = (*self).run(cx).await {
                tracing::error!(%stream, error = %e, "kinesis source failed");
            }
        })
    }
}
