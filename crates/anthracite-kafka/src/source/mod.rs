//! Apache Kafka source: messages of a consumer group's partitions → Graphite datapoints → the
//! relay's pipeline.
//!
//! # Design
//!
//! One [`KafkaSource`] per `[[kafka]]` entry: one librdkafka consumer (built from source by
//! the `rdkafka` crate) in the entry's consumer group, polled by one dedicated thread
//! (`consumer.rs`). Relays sharing a `group_id` share the topics' partitions; the group uses
//! the **cooperative-sticky** assignor, so a rebalance moves only the partitions that change
//! owner and the others keep flowing. A relay that dies stops heart-beating; after
//! `session.timeout.ms` (45 s by default; a pass-through property) the group gives its
//! partitions to the others.
//!
//! Each message is one or more Graphite lines, or one carbon pickle payload (`format`),
//! decoded into the thread's own [`Ingestor`](anthracite::Ingestor) (`payload.rs`) and
//! flushed into the destination queues when the consumer is idle, every 16 384 datapoints, or
//! 50 ms after the oldest unflushed one.
//!
//! # Delivery guarantee: at least once
//!
//! Offsets are committed by the relay only (`enable.auto.commit = false`), and only offsets
//! whose messages were flushed into the destination queues (`positions.rs`): every
//! `commit_interval_ms`, and synchronously **before a partition is released** — librdkafka
//! calls the rebalance callback on the polling thread, which flushes and commits there and
//! then lets the partition go. A graceful handoff (a relay joins or leaves, SIGTERM) therefore
//! re-reads nothing. After a crash the new owner resumes at the last commit: duplicates are
//! bounded by one commit interval of messages; nothing committed is lost (what was accepted is
//! in the destination queues, or in their spill logs).
//!
//! While any destination queue holds more than `queue_high_water` of its bound, the thread
//! pauses fetching its partitions (staying in the group) instead of pushing datapoints a full
//! queue would drop; the ingestor itself waits for room (back-pressure), it never drops.
//!
//! # Errors
//!
//! Brokers unreachable, a subscribed topic missing, a failed commit: counted
//! (`anthracite_kafka_errors_total`) and logged once per episode; librdkafka reconnects on its
//! own and the source keeps polling, so other sources never wait for it. A message that holds
//! no datapoint (not Graphite text, a malformed pickle) is dropped and counted per reason
//! (`badMessages`, and each line or frame in `invalidDatapoints`), its offset committed like
//! any other: a poison message never blocks its partition.

pub(crate) mod consumer;
mod payload;
mod positions;
mod stats;

use std::sync::Arc;

use anthracite::destination::BoxFuture;
use anthracite::extension::{SourceContext, StreamSource};
use anthracite::figure::Reporting;

use crate::config::KafkaConfig;

pub use stats::KafkaStats;

/// Errors of a Kafka source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaError {
    /// librdkafka refused the configuration (an unknown or invalid property).
    #[error("kafka source (group {group}): {source}")]
    Client {
        /// The consumer group.
        group: String,
        /// librdkafka's error.
        source: rdkafka::error::KafkaError,
    },
}

/// One `[[kafka]]` entry being read into a relay's pipeline.
#[derive(Debug)]
pub struct KafkaSource {
    config: Arc<KafkaConfig>,
    stats: Arc<KafkaStats>,
}

impl KafkaSource {
    /// A source for `config` (nothing is contacted until [`run`](Self::run)).
    pub fn new(config: KafkaConfig) -> Self {
        let stats = Arc::new(KafkaStats::new(&config.group_id));
        Self {
            config: Arc::new(config),
            stats,
        }
    }

    /// The source's counters (shared; valid while and after it runs).
    pub fn stats(&self) -> Arc<KafkaStats> {
        self.stats.clone()
    }

    /// Reads into the relay of `cx` until its stop signal, then commits what was delivered
    /// and leaves the group. Runs the consumer on a blocking thread of the current runtime.
    pub async fn run(self, cx: SourceContext) -> Result<(), KafkaError> {
        let group = self.config.group_id.clone();
        let parts = consumer::Parts {
            config: self.config,
            stats: self.stats,
            relay: cx.clone(),
            runtime: tokio::runtime::Handle::current(),
        };
        let consumer = consumer::create(parts).map_err(|source| KafkaError::Client {
            group: group.clone(),
            source,
        })?;
        let thread = tokio::task::spawn_blocking(move || consumer::run(consumer, &cx));
        if let Err(e) = thread.await {
            tracing::error!(%group, error = %e, "kafka consumer thread failed");
        }
        Ok(())
    }
}

impl StreamSource for KafkaSource {
    fn describe(&self) -> String {
        format!(
            "kafka group {} (topics {}, brokers {})",
            self.config.group_id,
            self.config.topics.join(","),
            self.config.brokers
        )
    }

    fn reporting(&self) -> Arc<dyn Reporting> {
        self.stats.clone()
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let group = self.config.group_id.clone();
            if let Err(e) = (*self).run(cx).await {
                tracing::error!(%group, error = %e, "kafka source failed");
            }
        })
    }
}
