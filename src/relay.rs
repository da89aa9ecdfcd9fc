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

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::Config;
use crate::destination::{self, DestinationSignals};
use crate::ingest::{Ingestor, Pipeline};
use crate::queue::{DestinationDropReason, DestinationQueue, WhenFull};
use crate::receiver::{ReceiverContext, framed, tcp, udp};
use crate::router::{Router, RouterError};
use crate::telemetry::stats::Source;
use crate::telemetry::{RelayStats, StatsSnapshot, reporter};

/// Errors starting or running a relay.
#[derive(Debug, thiserror::Error)]
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
    protobuf: Option<TcpListener>,
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
    protobuf: Option<TcpListener>,
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
            protobuf: None,
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
        let Relay {
            config,
            pipeline,
            lists,
            line,
            pickle,
            protobuf,
            udp,
            #[cfg(feature = "kinesis")]
            aws,
        } = self;
        let line = bind_tcp(line, config.listen.line_tcp, "line receiver").await?;
        let pickle = bind_tcp(pickle, config.listen.pickle_tcp, "pickle receiver").await?;
        let protobuf = bind_tcp(protobuf, config.listen.protobuf_tcp, "protobuf receiver").await?;
        let udp = match (udp, config.listen.line_udp) {
            (Some(s), _) => Some(s),
            (None, Some(addr)) => {
                Some(
                    UdpSocket::bind(addr)
                        .await
                        .map_err(|source| RelayError::Bind {
                            what: "udp receiver",
                            addr,
                            source,
                        })?,
                )
            }
            (None, None) => None,
        };
        // Kinesis checkpoints load before anything runs: a corrupt one stops startup.
        #[cfg(feature = "kinesis")]
        let kinesis_sources =
            crate::receiver::kinesis::prepare(&config.kinesis, aws.as_ref()).await?;

        // Destinations first, so nothing accepted waits for them to exist.
        let abort = CancellationToken::new();
        let mut destinations = JoinSet::new();
        for (dest, queue) in config.destinations.iter().zip(pipeline.queues.iter()) {
            let signals = DestinationSignals {
                abort: abort.clone(),
            };
            destinations.spawn(destination::run(dest.clone(), queue.clone(), signals));
        }

        let stop_receivers = CancellationToken::new();
        let connections = TaskTracker::new();
        let ctx = ReceiverContext {
            pipeline: pipeline.clone(),
            shutdown: stop_receivers.clone(),
            tracker: connections.clone(),
            connections: Arc::new(Semaphore::new(config.listen.max_connections)),
            idle_timeout: config.listen.idle_timeout,
            max_line_length: config.listen.max_line_length,
            max_pickle_frame: config.listen.max_pickle_frame,
            max_protobuf_frame: config.listen.max_protobuf_frame,
            tls: config.listen.tls.clone(),
        };
        let mut receivers = JoinSet::new();
        if let Some(l) = line {
            info!(addr = ?l.local_addr().ok(), "plaintext receiver listening");
            receivers.spawn(tcp::accept_loop(
                l,
                ctx.clone(),
                Source::LineTcp,
                tcp::serve_line,
            ));
        }
        if let Some(l) = pickle {
            info!(addr = ?l.local_addr().ok(), "pickle receiver listening");
            receivers.spawn(tcp::accept_loop(
                l,
                ctx.clone(),
                Source::PickleTcp,
                framed::serve_pickle,
            ));
        }
        if let Some(l) = protobuf {
            info!(addr = ?l.local_addr().ok(), "protobuf receiver listening");
            receivers.spawn(tcp::accept_loop(
                l,
                ctx.clone(),
                Source::ProtobufTcp,
                framed::serve_protobuf,
            ));
        }
        if let Some(s) = udp {
            info!(addr = ?s.local_addr().ok(), "udp receiver listening");
            receivers.spawn(udp::serve_udp(s, ctx.clone()));
        }
        #[cfg(feature = "kinesis")]
        let kinesis_tasks =
            crate::receiver::kinesis::spawn(kinesis_sources, &pipeline, &stop_receivers);
        let stop_reporter = CancellationToken::new();
        let reporter_task = config.telemetry.interval.map(|interval| {
            tokio::spawn(reporter::run(
                pipeline.clone(),
                config.telemetry.clone(),
                interval,
                stop_reporter.clone(),
            ))
        });

        let lists_task = lists.map(|w| tokio::spawn(w.run(stop_reporter.clone())));

        shutdown.await;
        info!("shutting down: receivers first");
        let deadline = tokio::time::Instant::now() + config.shutdown_grace;
        stop_receivers.cancel();
        while receivers.join_next().await.is_some() {}
        // Kinesis readers flush what they parsed; then the final checkpoint is committed.
        #[cfg(feature = "kinesis")]
        crate::receiver::kinesis::join(kinesis_tasks, deadline).await;
        connections.close();
        if tokio::time::timeout_at(deadline, connections.wait())
            .await
            .is_err()
        {
            warn!("client connections still draining at the end of the grace period");
        }
        stop_reporter.cancel();
        if let Some(t) = reporter_task {
            let _ = t.await;
        }
        if let Some(t) = lists_task {
            let _ = t.await;
        }

        info!("flushing destination queues");
        for q in pipeline.queues.iter() {
            q.close();
        }
        let drained = tokio::time::timeout_at(deadline, async {
            while destinations.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            abort.cancel();
            while destinations.join_next().await.is_some() {}
        }
        let mut undelivered = Vec::new();
        let mut spilled = Vec::new();
        for q in pipeline.queues.iter() {
            if let Some(on_disk) = q.spill_for_shutdown().await {
                if on_disk > 0 {
                    info!(
                        destination = q.stats().name(),
                        datapoints = on_disk,
                        "left in the spill log for the next run"
                    );
                    spilled.push((q.stats().name().to_string(), on_disk));
                }
                continue;
            }
            let left: u64 = q.drain_all().iter().map(|b| b.len() as u64).sum();
            if left > 0 {
                q.stats().add_dropped(DestinationDropReason::Shutdown, left);
                warn!(
                    destination = q.stats().name(),
                    datapoints = left,
                    "undelivered at shutdown"
                );
                undelivered.push((q.stats().name().to_string(), left));
            }
        }
        info!("shutdown complete");
        Ok(ShutdownReport {
            stats: pipeline.stats().snapshot(),
            undelivered,
            spilled,
        })
    }
}

async fn bind_tcp(
    injected: Option<TcpListener>,
    configured: Option<SocketAddr>,
    what: &'static str,
) -> Result<Option<TcpListener>, RelayError> {
    match (injected, configured) {
        (Some(l), _) => Ok(Some(l)),
        (None, Some(addr)) => TcpListener::bind(addr)
            .await
            .map(Some)
            .map_err(|source| RelayError::Bind { what, addr, source }),
        (None, None) => Ok(None),
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

    /// Serves carbon's protobuf on this listener instead of `listen.protobuf_tcp`.
    pub fn protobuf_listener(mut self, listener: TcpListener) -> Self {
        self.protobuf = Some(listener);
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
        let names: Vec<String> = self
            .config
            .destinations
            .iter()
            .map(|d| d.spec.to_string())
            .collect();
        let stats = Arc::new(RelayStats::new(&names));
        let mut queues = Vec::with_capacity(self.config.destinations.len());
        for (d, s) in self.config.destinations.iter().zip(stats.destinations()) {
            let q = match &d.spill {
                Some(spill) => {
                    let q = DestinationQueue::with_spill(d.queue, s.clone(), spill.clone())
                        .map_err(|source| RelayError::Spill {
                            destination: d.spec.to_string(),
                            source,
                        })?;
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
                    DestinationQueue::new(d.queue, s.clone())
                }
            };
            queues.push(Arc::new(q));
        }
        let queues: Arc<[Arc<DestinationQueue>]> = queues.into();
        let mut pipeline = Pipeline::new(router, queues, stats, self.config.route_cache_entries)
            .with_min_timestamp_resolution(self.config.ingest.min_timestamp_resolution)
            .with_tag_normalization(self.config.ingest.tag_relay_normalized)
            .with_replica_pools(self.config.pool_replicas);
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
            protobuf: self.protobuf,
            udp: self.udp,
            #[cfg(feature = "kinesis")]
            aws: self.aws,
        })
    }
}

impl RelayHandle {
    /// A copy of the relay's counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.pipeline.stats().snapshot()
    }

    /// An ingestor for a non-socket source (Kinesis, an embedding program): push datapoints
    /// or lines into it and [`flush`](Ingestor::flush) them into the queues.
    pub fn ingestor(&self) -> Ingestor {
        self.pipeline.ingestor(Source::Embedded)
    }

    /// The shared parse → route → queue pipeline, for sources that make their own ingestors
    /// (a `KinesisSource` run by an embedder).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The router, e.g. to ask where a name goes.
    pub fn router(&self) -> &Arc<Router> {
        self.pipeline.router()
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
