//! Wires the stages together and owns startup and shutdown order.
//!
//! Startup: build the router, one queue and one task per destination, then the receivers on
//! the injected (or configured) sockets, then the self-metrics reporter.
//!
//! Shutdown, once the caller's `shutdown` future completes: stop accepting; let every
//! connection parse what it already has and flush (bounded by the grace period); close the
//! queues; let destinations drain until empty or the grace period ends; then write whatever is
//! still in memory to the destination's spill log (replayed first on the next start), or, for
//! a memory-only queue, count it as dropped with reason `shutdown` and log it. Completion is tracked, never
//! slept on.

mod running;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tracing::info;

use crate::config::Config;
use crate::ingest::{IngestStats, Ingestor, Pipeline, Source};
use crate::queue::{DestinationQueue, DestinationStats, WhenFull};
use crate::router::{Router, RouterError};
use crate::telemetry::StatsSnapshot;

/// Errors starting or running a relay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// The router could not be built from the configuration.
    #[error("cannot build router: {0}")]
    Router(#[from] RouterError),
    /// A destination's spill log could not be opened.
    #[error("cannot open the spill log of {destination}: {source}")]
    Spill {
        /// The destination.
        destination: String,
        /// What failed.
        source: crate::queue::spill::SpillError,
    },
    /// A configured address could not be bound.
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        /// Which receiver.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A Kinesis source could not start (e.g. its checkpoint file is corrupt).
    #[cfg(feature = "kinesis")]
    #[error(transparent)]
    Kinesis(#[from] crate::receiver::kinesis::KinesisError),
}

/// A relay ready to run. Build it with [`Relay::builder`].
pub struct Relay {
    config: Config,
    pipeline: Pipeline,
    lists: Option<crate::filter::ListWatcher>,
    line: Option<TcpListener>,
    pickle: Option<TcpListener>,
    udp: Option<UdpSocket>,
    #[cfg(feature = "kinesis")]
    aws: Option<aws_config::SdkConfig>,
}

/// Builds a [`Relay`]: inject already-bound sockets (tests bind port 0, embedders own their
/// sockets); any receiver not injected is bound from the configuration when the relay runs.
pub struct RelayBuilder {
    config: Config,
    line: Option<TcpListener>,
    pickle: Option<TcpListener>,
    udp: Option<UdpSocket>,
    #[cfg(feature = "kinesis")]
    aws: Option<aws_config::SdkConfig>,
}

/// A cheap, cloneable handle onto a relay: counters, and ingestors for non-socket sources.
#[derive(Clone, Debug)]
pub struct RelayHandle {
    pipeline: Pipeline,
}

/// What shutdown left behind.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Counters after shutdown.
    pub stats: StatsSnapshot,
    /// Datapoints per destination that could not be delivered within the grace period and
    /// were lost (memory-only queues).
    pub undelivered: Vec<(String, u64)>,
    /// Datapoints per destination left in the spill log for the next run.
    pub spilled: Vec<(String, u64)>,
}

impl Relay {
    /// Starts building a relay from a validated config.
    pub fn builder(config: Config) -> RelayBuilder {
        RelayBuilder {
            config,
            line: None,
            pickle: None,
            udp: None,
            #[cfg(feature = "kinesis")]
            aws: None,
        }
    }

    /// A handle for counters and extra sources; valid before, during and after `run`.
    pub fn handle(&self) -> RelayHandle {
        RelayHandle {
            pipeline: self.pipeline.clone(),
        }
    }

    /// Runs until `shutdown` completes, then shuts down in order (see the module docs).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<ShutdownReport, RelayError> {
        let running = self.start().await?;
        shutdown.await;
        Ok(running.shut_down().await)
    }
}

impl RelayBuilder {
    /// Serves plaintext on this listener instead of `listen.line_tcp`.
    pub fn line_listener(mut self, listener: TcpListener) -> Self {
        self.line = Some(listener);
        self
    }

    /// Serves pickle on this listener instead of `listen.pickle_tcp`.
    pub fn pickle_listener(mut self, listener: TcpListener) -> Self {
        self.pickle = Some(listener);
        self
    }

    /// Serves plaintext datagrams on this socket instead of `listen.line_udp`.
    pub fn udp_socket(mut self, socket: UdpSocket) -> Self {
        self.udp = Some(socket);
        self
    }

    /// Uses this AWS configuration (credentials, region) for the configured Kinesis streams
    /// instead of the SDK's default chain; each stream's region, role and endpoint still apply.
    #[cfg(feature = "kinesis")]
    pub fn aws_sdk_config(mut self, sdk: aws_config::SdkConfig) -> Self {
        self.aws = Some(sdk);
        self
    }

    /// Builds the router, queues and counters.
    pub fn build(self) -> Result<Relay, RelayError> {
        let router = Arc::new(Router::new(self.config.router.clone())?);
        let mut queues = Vec::with_capacity(self.config.destinations.len());
        for d in &self.config.destinations {
            let s = Arc::new(DestinationStats::new(d.spec.to_string()));
            let q = match &d.spill {
                Some(spill) => {
                    let q = DestinationQueue::with_spill(d.queue, s, spill.clone()).map_err(
                        |source| RelayError::Spill {
                            destination: d.spec.to_string(),
                            source,
                        },
                    )?;
                    info!(destination = %d.spec, dir = %spill.dir.display(),
                        when_full = d.queue.when_full.as_str(),
                        recovered = q.queued_disk(), "spill log open");
                    q
                }
                None => {
                    if d.queue.when_full == WhenFull::DropNewest {
                        info!(destination = %d.spec,
                            "no spill directory: a full queue drops the newest datapoints (as carbon-relay)");
                    }
                    DestinationQueue::new(d.queue, s)
                }
            };
            queues.push(Arc::new(q));
        }
        let queues: Arc<[Arc<DestinationQueue>]> = queues.into();
        let stats = Arc::new(IngestStats::new());
        let mut pipeline = Pipeline::new(router, queues, stats, self.config.route_cache_bytes)
            .with_min_timestamp_resolution(self.config.ingest.min_timestamp_resolution)
            .with_tag_normalization(self.config.ingest.tag_relay_normalized);
        let lists = self
            .config
            .ingest
            .lists
            .as_ref()
            .map(crate::filter::ListWatcher::new);
        if let Some(w) = &lists {
            pipeline = pipeline.with_lists(w.shared());
        }
        Ok(Relay {
            config: self.config,
            pipeline,
            lists,
            line: self.line,
            pickle: self.pickle,
            udp: self.udp,
            #[cfg(feature = "kinesis")]
            aws: self.aws,
        })
    }
}

impl RelayHandle {
    /// A copy of the relay's counters.
    pub fn stats(&self) -> StatsSnapshot {
        StatsSnapshot::collect(
            self.pipeline.stats().snapshot(),
            self.pipeline.queues.iter().map(|q| &**q.stats()),
        )
    }

    /// An ingestor for a non-socket source (Kinesis, an embedding program): push datapoints
    /// or lines into it and [`flush`](Ingestor::flush) them into the queues.
    pub fn ingestor(&self) -> Ingestor {
        self.pipeline.ingestor(Source::Embedded)
    }

    /// The shared parse → route → queue pipeline, for sources that make their own ingestors.
    pub(crate) fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The destinations each name goes to (`host:port:instance`), in carbon's preference
    /// order, with duplicates removed as carbon's client manager does.
    pub fn route(&self, name: &str) -> Vec<String> {
        let router = self.pipeline.router();
        let mut out = Vec::new();
        router.route_into(name.as_bytes(), &mut out);
        let mut names: Vec<String> = Vec::with_capacity(out.len());
        for i in out {
            if let Some(d) = router.destinations().get(usize::from(i)) {
                let d = d.to_string();
                if !names.contains(&d) {
                    names.push(d);
                }
            }
        }
        names
    }

    /// Datapoints waiting or in flight, per destination.
    pub fn queued(&self) -> Vec<u64> {
        self.pipeline
            .queues
            .iter()
            .map(|q| q.queued() as u64)
            .collect()
    }
}
