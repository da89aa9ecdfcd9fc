//! Wires the stages together and owns startup, reload and shutdown order.
//!
//! Startup: build the router and one queue per destination; when run, the admin listener
//! first, then the receivers' sockets, one task per destination, the receivers, then the
//! self-metrics reporter (`running`). A reload changes the running relay in place
//! (`reload`, whose module documentation is the design; `destinations` and `listeners` hold the
//! destinations and sockets it changes).
//!
//! Shutdown, once the caller's `shutdown` future completes: stop accepting; let every
//! connection parse what it already has and flush (bounded by the grace period); close the
//! queues; let destinations drain until empty or the grace period ends; then write whatever is
//! still in memory to the destination's spill log (replayed first on the next start), or, for
//! a memory-only queue, count it as dropped with reason `shutdown` and log it. Completion is
//! tracked, never slept on.

mod aggregates;
mod c_relay_aggregates;
mod c_relay_figures;
mod c_relay_hand_over;
mod c_relay_statistics;
mod destinations;
mod listeners;
mod reload;
mod running;
mod shared;
pub(crate) mod spill_lock;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};

use crate::config::{Config, ConfigError};
use crate::extension::SourceContext;
use crate::ingest::{IngestStats, Ingestor, Pipeline, Source};
use crate::queue::DestinationQueue;
use crate::receiver::{Listener, StreamListener};
use crate::router::{Router, RouterError};
use crate::telemetry::StatsSnapshot;
use crate::telemetry::reporter::Books;
use shared::Shared;

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
    /// Another process (another relay) holds the lock on this spill directory.
    #[error(
        "spill directory {} is in use by another relay (it holds {}/{}); give each relay \
         its own [destinations.spill] dir",
        dir.display(), dir.display(), spill_lock::LOCK_FILE
    )]
    SpillLocked {
        /// The spill directory.
        dir: std::path::PathBuf,
    },
    /// The spill directory's lock file could not be created or locked.
    #[error("cannot lock {}: {source}", path.display())]
    SpillLock {
        /// The lock file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
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
    /// A Unix socket path could not be bound.
    #[error("cannot bind the line receiver on Unix socket {}: {source}", path.display())]
    BindUnix {
        /// The socket's path.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A source of an extension could not be prepared (e.g. a Kinesis stream's checkpoint
    /// file is corrupt).
    #[error("cannot start a source: {0}")]
    Source(crate::extension::SourceError),
    /// A receiver's own certificate and key (a carbon-c-relay listener's `ssl PEMFILE`) could
    /// not be read: the message names the file and where the configuration names it.
    #[error("cannot set up a listener: {0}")]
    ListenerTls(String),
}

pub use c_relay_hand_over::FAIL_WAIT;
pub use reload::{ReloadError, Reloaded};

/// A relay ready to run. Build it with [`Relay::builder`].
pub struct Relay {
    config: Config,
    shared: Arc<Shared>,
    /// One per destination, in `config.destinations` order.
    queues: Vec<Arc<DestinationQueue>>,
    lists: Option<crate::filter::ListWatcher>,
    aggregation: Option<Arc<crate::aggregator::Aggregation>>,
    admin: Option<TcpListener>,
    line: Option<StreamListener>,
    pickle: Option<StreamListener>,
    protobuf: Option<StreamListener>,
    udp: Option<UdpSocket>,
}

/// Builds a [`Relay`]: inject already-bound sockets (tests bind port 0, embedders own their
/// sockets); any receiver not injected is bound from the configuration when the relay runs.
pub struct RelayBuilder {
    config: Config,
    admin: Option<TcpListener>,
    line: Option<StreamListener>,
    pickle: Option<StreamListener>,
    protobuf: Option<StreamListener>,
    udp: Option<UdpSocket>,
    features: Vec<&'static str>,
}

/// A cheap, cloneable handle onto a relay: counters, and ingestors for non-socket sources.
#[derive(Clone, Debug)]
pub struct RelayHandle {
    shared: Arc<Shared>,
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
            admin: None,
            line: None,
            pickle: None,
            protobuf: None,
            udp: None,
            features: Vec::new(),
        }
    }

    /// A handle for counters and extra sources; valid before, during and after `run`.
    pub fn handle(&self) -> RelayHandle {
        RelayHandle {
            shared: self.shared.clone(),
        }
    }

    /// Runs until `shutdown` completes, then shuts down in order (see the module docs).
    /// [`RelayHandle::reload`] applies a new configuration in between.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<ShutdownReport, RelayError> {
        let shared = self.shared.clone();
        let _ = shared.runtime.set(tokio::runtime::Handle::current());
        let running = self.start().await?;
        *shared.control.lock().await = Some(running);
        shutdown.await;
        // Waits for a reload in progress to finish.
        let running = shared.control.lock().await.take();
        match running {
            Some(r) => Ok(r.shut_down(&shared).await),
            None => Ok(ShutdownReport {
                stats: shared.snapshot(),
                undelivered: Vec::new(),
                spilled: Vec::new(),
            }),
        }
    }
}

impl RelayBuilder {
    /// The body of the stream listener setters: `listener` fills the builder's `slot`.
    fn serve(
        mut self,
        slot: fn(&mut Self) -> &mut Option<StreamListener>,
        listener: StreamListener,
    ) -> Self {
        *slot(&mut self) = Some(listener);
        self
    }

    /// Serves plaintext on this TCP listener instead of `listen.line_tcp`.
    pub fn line_listener(self, listener: TcpListener) -> Self {
        self.serve(|b| &mut b.line, StreamListener::Tcp(listener))
    }

    /// Serves plaintext on connections from any [`Listener`] (a Unix socket, an
    /// [`Incoming`](crate::Incoming) stream of in-memory connections, …) instead of
    /// `listen.line_tcp`.
    pub fn line_connections(self, listener: impl Listener) -> Self {
        self.serve(|b| &mut b.line, StreamListener::other(listener))
    }

    /// Serves pickle on this TCP listener instead of `listen.pickle_tcp`.
    pub fn pickle_listener(self, listener: TcpListener) -> Self {
        self.serve(|b| &mut b.pickle, StreamListener::Tcp(listener))
    }

    /// Serves pickle on connections from any [`Listener`] instead of `listen.pickle_tcp`.
    pub fn pickle_connections(self, listener: impl Listener) -> Self {
        self.serve(|b| &mut b.pickle, StreamListener::other(listener))
    }

    /// Serves the admin endpoints (`/metrics`, `/healthz`, `/ready`, `/destinations`) on
    /// this listener instead of `admin.listen`. It answers from the start of
    /// [`Relay::run`] to its end: `/ready` says 503 until every receiver is bound and again
    /// once shutdown begins.
    pub fn admin_listener(mut self, listener: TcpListener) -> Self {
        self.admin = Some(listener);
        self
    }

    /// Serves carbon's protobuf on this TCP listener instead of `listen.protobuf_tcp`.
    pub fn protobuf_listener(self, listener: TcpListener) -> Self {
        self.serve(|b| &mut b.protobuf, StreamListener::Tcp(listener))
    }

    /// Serves carbon's protobuf on connections from any [`Listener`] instead of
    /// `listen.protobuf_tcp`.
    pub fn protobuf_connections(self, listener: impl Listener) -> Self {
        self.serve(|b| &mut b.protobuf, StreamListener::other(listener))
    }

    /// Serves plaintext datagrams on this socket instead of `listen.line_udp`.
    pub fn udp_socket(mut self, socket: UdpSocket) -> Self {
        self.udp = Some(socket);
        self
    }

    /// The build's features, reported by `/status` and `anthracite_build_info`
    /// ([`Extensions::features`](crate::extension::Extensions::features)). Default: none.
    pub fn features(mut self, features: &[&'static str]) -> Self {
        self.features = features.to_vec();
        self
    }

    /// Builds the router, queues and counters.
    pub fn build(self) -> Result<Relay, RelayError> {
        let router = Arc::new(Router::new(self.config.router.clone())?);
        // Before any spill log is opened: a second relay on the same directory must not
        // replay the first one's logs.
        let spill_locks = spill_lock::lock_spill_roots(&self.config.destinations)?;
        let queues = self
            .config
            .destinations
            .iter()
            .map(destinations::open_queue)
            .collect::<Result<Vec<_>, _>>()?;
        let stats = Arc::new(IngestStats::new());
        let mut pipeline = Pipeline::new(
            router,
            queues.clone().into(),
            stats,
            self.config.route_cache_bytes,
        )
        .with_min_timestamp_resolution(self.config.ingest.min_timestamp_resolution)
        .with_tag_normalization(self.config.ingest.tag_relay_normalized)
        .with_max_name_length(self.config.listen.max_name_length)
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
        let aggregation = self.config.aggregation.as_ref().map(|a| {
            let agg = Arc::new(crate::aggregator::Aggregation::new(
                a.rules.clone(),
                a.rewrite.clone(),
                a.settings,
            ));
            aggregates::restore(&agg, a);
            agg
        });
        if let Some(a) = &aggregation {
            pipeline = pipeline.with_aggregation(a.clone());
        }
        Ok(Relay {
            config: self.config,
            shared: Arc::new(Shared::new(pipeline, self.features).with_spill_locks(spill_locks)),
            queues,
            lists,
            aggregation,
            admin: self.admin,
            line: self.line,
            pickle: self.pickle,
            protobuf: self.protobuf,
            udp: self.udp,
        })
    }
}

impl RelayHandle {
    /// A copy of the relay's counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.snapshot()
    }

    /// An ingestor for a non-socket source (an embedding program): push datapoints or lines
    /// into it and [`flush`](Ingestor::flush) them into the queues.
    pub fn ingestor(&self) -> Ingestor {
        self.shared.pipeline.ingestor(Source::Embedded)
    }

    /// What a source runs with ([`StreamSource::run`](crate::extension::StreamSource::run)),
    /// for a source the embedding program starts itself: it reads into this relay until
    /// `stop` is cancelled.
    pub fn source_context(&self, stop: tokio_util::sync::CancellationToken) -> SourceContext {
        SourceContext::new(self.shared.pipeline.clone(), stop)
    }

    /// Adds `figures` to what the relay reports about itself (carbon self-metrics and
    /// `/metrics`), for a source the embedding program starts itself.
    pub fn report(&self, figures: Arc<dyn crate::figure::Reporting>) {
        self.shared.add_source(figures);
    }

    /// True while any destination's memory tier holds more than `fraction` (0–1) of its
    /// bound (see [`SourceContext::backlogged`]).
    pub fn backlogged(&self, fraction: f64) -> bool {
        self.shared.pipeline.backlogged(fraction)
    }

    /// The shared parse → route → queue pipeline, for sources that make their own ingestors.
    pub(crate) fn pipeline(&self) -> &Pipeline {
        &self.shared.pipeline
    }

    /// The destinations each name goes to (`host:port:instance`), in carbon's preference
    /// order, with duplicates removed as carbon's client manager does.
    pub fn route(&self, name: &str) -> Vec<String> {
        let router = self.pipeline().router();
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

    /// Datapoints waiting or in flight (in memory and on disk), per destination of the
    /// current configuration: `(host:port:instance, datapoints)` in the router's order.
    pub fn queued(&self) -> Vec<(String, u64)> {
        let pipeline = self.pipeline();
        let router = pipeline.router();
        router
            .destinations()
            .iter()
            .zip(pipeline.queues().iter())
            .map(|(d, q)| (d.to_string(), q.queued() as u64))
            .collect()
    }

    /// Applies a new configuration to the running relay (see the reload design in
    /// `src/relay/reload.rs`): the routing (ring, rules, aggregation rules, lists) switches
    /// for new data at once; unchanged destinations keep their queues and connections, added
    /// ones start, removed ones deliver or keep on disk what they hold; changed listener
    /// addresses are rebound; client connections stay open. A configuration that cannot be
    /// applied is rejected whole (logged and counted), and the relay goes on unchanged.
    pub async fn reload(&self, config: Config) -> Result<Reloaded, ReloadError> {
        self.reload_with(|| Ok(config)).await
    }

    /// Like [`reload`](Self::reload), with the configuration loaded by `load`; a load error
    /// (a file that does not parse or validate) is a rejected reload, logged and counted.
    pub async fn reload_with(
        &self,
        load: impl FnOnce() -> Result<Config, ConfigError>,
    ) -> Result<Reloaded, ReloadError> {
        reload::reload(&self.shared, load).await
    }
}
