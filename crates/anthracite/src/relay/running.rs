//! A relay between startup and shutdown: what [`Relay::run`](super::Relay::run) started (and
//! a reload may change), and the four shutdown phases, in order.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::destinations::{Live, Retiring, ShutdownSignals};
use super::listeners::{self, Kind, Listeners, Socket};
use super::{Relay, RelayError, ShutdownReport, shared::Shared};
use crate::admin::{self, AdminState, Phase};
use crate::config::Config;
use crate::extension::{SourceContext, StreamSource};
use crate::filter::ListWatcher;
use crate::ingest::{Pipeline, Routing};
use crate::telemetry::reporter::{self, Books};

/// Everything a running relay owns, so that a reload can change it and shutdown can stop it
/// in order.
pub(super) struct Running {
    pub(super) config: Config,
    pub(super) pipeline: Pipeline,
    pub(super) destination_signals: ShutdownSignals,
    /// Destinations of the current generation, in ring order.
    pub(super) active: Vec<Live>,
    /// Destinations a reload removed that still hold data.
    pub(super) retiring: Vec<Retiring>,
    /// Earlier routing generations; a retirement waits until those that route to its
    /// destination are idle.
    pub(super) past: Vec<Arc<Routing>>,
    pub(super) listeners: Listeners,
    stop_receivers: CancellationToken,
    connections: TaskTracker,
    /// The running sources of extensions, each with what it reads (for logs).
    sources: Vec<(String, JoinHandle<()>)>,
    pub(super) background: Background,
    pub(super) admin: Admin,
}

/// The self-metrics reporter, the list watcher and the drop-episode logger.
pub(super) struct Background {
    stop: CancellationToken,
    reporter: Option<(CancellationToken, JoinHandle<()>)>,
    lists: Option<(CancellationToken, JoinHandle<()>)>,
    episodes: JoinHandle<()>,
    /// The aggregator's clock; stopped after the receivers, so the state it writes holds
    /// everything received.
    aggregates: Option<(CancellationToken, JoinHandle<()>)>,
    /// A carbon-c-relay configuration's statistics.
    c_relay_statistics: Option<JoinHandle<()>>,
}

impl Background {
    /// Starts carbon-c-relay's statistics when the current configuration has them and they
    /// do not run (at start, and after a reload that adds them; the task ends by itself when
    /// a reload turns them off).
    pub(super) fn start_c_relay_statistics(&mut self, pipeline: &Pipeline) {
        let wanted = matches!(
            pipeline.router().strategy(),
            crate::router::Strategy::CRelay(p) if p.statistics.is_some()
        );
        let running = self
            .c_relay_statistics
            .as_ref()
            .is_some_and(|t| !t.is_finished());
        if wanted && !running {
            self.c_relay_statistics = Some(tokio::spawn(super::c_relay_statistics::run(
                pipeline.clone(),
                self.stop.child_token(),
            )));
        }
    }

    /// (Re)starts the reporter with `config`'s telemetry settings.
    pub(super) async fn start_reporter(
        &mut self,
        pipeline: &Pipeline,
        books: Arc<dyn Books>,
        config: &Config,
    ) {
        if let Some((stop, task)) = self.reporter.take() {
            stop.cancel();
            let _ = task.await;
        }
        if let Some(interval) = config.telemetry.interval {
            let stop = self.stop.child_token();
            let task = tokio::spawn(reporter::run(
                pipeline.clone(),
                books,
                config.telemetry.clone(),
                interval,
                stop.clone(),
            ));
            self.reporter = Some((stop, task));
        }
    }

    /// (Re)starts the list watcher.
    pub(super) async fn start_lists(&mut self, watcher: Option<ListWatcher>) {
        if let Some((stop, task)) = self.lists.take() {
            stop.cancel();
            let _ = task.await;
        }
        if let Some(w) = watcher {
            let stop = self.stop.child_token();
            self.lists = Some((stop.clone(), tokio::spawn(w.run(stop))));
        }
    }
}

/// The admin listener.
pub(super) struct Admin {
    /// The address the configuration names (`None`: off, or an injected listener).
    pub(super) configured: Option<SocketAddr>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    pub(super) local: Option<SocketAddr>,
}

impl Admin {
    /// Serves `listener` (if any), answering for `shared`.
    pub(super) fn start(
        configured: Option<SocketAddr>,
        listener: Option<TcpListener>,
        shared: &Arc<Shared>,
    ) -> Self {
        let stop = CancellationToken::new();
        let local = listener.as_ref().and_then(|l| l.local_addr().ok());
        let task = listener.map(|l| {
            let state = AdminState {
                books: shared.clone() as Arc<dyn Books>,
                health: shared.health.clone(),
                counters: Arc::default(),
                overview: shared.overview.clone(),
            };
            tokio::spawn(admin::serve(l, state, stop.clone()))
        });
        Self {
            configured,
            stop,
            task,
            local,
        }
    }

    /// Stops serving.
    pub(super) async fn stop(self) {
        self.stop.cancel();
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

impl Relay {
    /// Startup: the admin listener first (so `/ready` can say "starting"), then the sources
    /// of extensions are prepared (a corrupt Kinesis checkpoint stops startup before any port
    /// is taken), then the
    /// receivers' sockets; destinations start before receivers, so nothing accepted waits for
    /// a destination to exist; then the self-metrics reporter and the list watcher. The relay
    /// is ready once all of that runs.
    pub(super) async fn start(self) -> Result<Running, RelayError> {
        let Relay {
            config,
            shared,
            queues,
            lists,
            aggregation,
            admin,
            line,
            pickle,
            protobuf,
            udp,
        } = self;
        let pipeline = shared.pipeline.clone();
        let admin = match (admin, config.admin_listen) {
            (Some(l), _) => Some(l),
            (None, Some(addr)) => {
                Some(
                    TcpListener::bind(addr)
                        .await
                        .map_err(|source| RelayError::Bind {
                            what: "admin listener",
                            addr,
                            source,
                        })?,
                )
            }
            (None, None) => None,
        };
        let admin = Admin::start(config.admin_listen, admin, &shared);
        let mut prepared = Vec::with_capacity(config.sources.len());
        for spec in &config.sources {
            prepared.push(spec.prepare().await.map_err(RelayError::Source)?);
        }
        let mut sockets = Vec::new();
        let injected = [
            (Kind::Line, line.map(Socket::Tcp)),
            (Kind::Pickle, pickle.map(Socket::Tcp)),
            (Kind::Protobuf, protobuf.map(Socket::Tcp)),
            (
                Kind::Udp,
                udp.map(|s| Socket::Udp(crate::receiver::udp::UdpReceiver::new(s))),
            ),
        ];
        for (kind, socket) in injected {
            match (socket, kind.configured(&config.listen)) {
                (Some(s), _) => sockets.push((kind, s.prepared(kind, &config.listen)?)),
                (None, Some(addr)) => {
                    sockets.push((kind, Socket::bind(kind, addr, &config.listen).await?));
                }
                (None, None) => {}
            }
        }
        for extra in &config.listen.extra_line {
            sockets.push(super::listeners::bind_extra(extra, &config.listen)?);
        }

        let destination_signals = ShutdownSignals::default();
        let active: Vec<Live> = config
            .destinations
            .iter()
            .zip(queues)
            .map(|(d, q)| Live::start(d.clone(), q, &destination_signals))
            .collect();

        let stop_receivers = CancellationToken::new();
        let connections = TaskTracker::new();
        let mut listeners = Listeners::new(
            listeners::ReceiverBase {
                pipeline: pipeline.clone(),
                shutdown: stop_receivers.clone(),
                tracker: connections.clone(),
            },
            &config.listen,
        );
        listeners.serve_all(sockets, &config);
        let sources = prepared
            .into_iter()
            .map(|source| start_source(source, &shared, &pipeline, &stop_receivers))
            .collect();

        let stop_background = CancellationToken::new();
        let mut background = Background {
            episodes: tokio::spawn(crate::telemetry::drop_episodes::run(
                shared.clone() as Arc<dyn Books>,
                stop_background.clone(),
            )),
            stop: stop_background,
            reporter: None,
            lists: None,
            aggregates: None,
            c_relay_statistics: None,
        };
        if let (Some(agg), Some(agg_config)) = (aggregation, config.aggregation.clone()) {
            shared.add_source(agg.clone());
            let stop = CancellationToken::new();
            background.aggregates = Some((
                stop.clone(),
                tokio::spawn(super::aggregates::run(
                    agg,
                    agg_config,
                    pipeline.clone(),
                    stop,
                )),
            ));
        } else if let crate::router::Strategy::CRelay(_) = pipeline.router().strategy() {
            // Started without aggregations too: a reload may add some.
            shared.add_source(Arc::new(super::c_relay_figures::CRelayFigures {
                pipeline: pipeline.clone(),
            }));
            let stop = CancellationToken::new();
            background.aggregates = Some((
                stop.clone(),
                tokio::spawn(super::c_relay_aggregates::run(pipeline.clone(), stop)),
            ));
        }
        background.start_c_relay_statistics(&pipeline);
        background
            .start_reporter(&pipeline, shared.clone() as Arc<dyn Books>, &config)
            .await;
        background.start_lists(lists).await;
        let running = Running {
            config,
            pipeline,
            destination_signals,
            active,
            retiring: Vec::new(),
            past: Vec::new(),
            listeners,
            stop_receivers,
            connections,
            sources,
            background,
            admin,
        };
        shared.health.set(Phase::Ready);
        running.log_running();
        shared.overview.set_config(running.summary());
        Ok(running)
    }
}

/// Starts a prepared source of an extension; it stops when `stop` is cancelled.
fn start_source(
    source: Box<dyn StreamSource>,
    shared: &Shared,
    pipeline: &crate::ingest::Pipeline,
    stop: &CancellationToken,
) -> (String, JoinHandle<()>) {
    let what = source.describe();
    shared.add_source(source.reporting());
    info!(source = %what, "source starting");
    let cx = SourceContext::new(pipeline.clone(), stop.clone());
    (what, tokio::spawn(source.run(cx)))
}

impl Running {
    /// The startup line: version, config file, listeners, destinations.
    pub(super) fn log_running(&self) {
        let addr = |a: Option<SocketAddr>| a.map_or_else(|| "off".to_string(), |a| a.to_string());
        let l = &self.listeners;
        info!(
            version = env!("CARGO_PKG_VERSION"),
            config = %self.config.source,
            line_tcp = %addr(l.local(Kind::Line)),
            pickle_tcp = %addr(l.local(Kind::Pickle)),
            protobuf_tcp = %addr(l.local(Kind::Protobuf)),
            line_udp = %addr(l.local(Kind::Udp)),
            admin = %addr(self.admin.local),
            destinations = %self.config.destination_names().join(","),
            spill = %self.spill_dirs(),
            "anthracite running"
        );
    }

    /// Where the destinations spill (absolute when the configuration file named a relative
    /// directory), or `off`.
    fn spill_dirs(&self) -> String {
        let dirs: Vec<String> = self
            .config
            .destinations
            .iter()
            .filter_map(|d| Some(d.spill.as_ref()?.dir.display().to_string()))
            .collect();
        if dirs.is_empty() {
            "off".to_string()
        } else {
            dirs.join(", ")
        }
    }

    /// The configuration in brief, for the status page: what the startup line says, plus the
    /// routing and the disk tier.
    pub(super) fn summary(&self) -> Vec<(String, String)> {
        let addr = |a: Option<SocketAddr>| a.map_or_else(|| "off".to_string(), |a| a.to_string());
        let l = &self.listeners;
        let c = &self.config;
        [
            ("config", c.source.clone()),
            ("line_tcp", addr(l.local(Kind::Line))),
            ("pickle_tcp", addr(l.local(Kind::Pickle))),
            ("protobuf_tcp", addr(l.local(Kind::Protobuf))),
            ("line_udp", addr(l.local(Kind::Udp))),
            ("admin", addr(self.admin.local)),
            ("routing", c.summary()),
            ("destinations", c.destination_names().join(", ")),
            ("spill", self.spill_dirs()),
            (
                "self-metrics",
                c.telemetry
                    .interval
                    .map_or("off".to_string(), |i| format!("every {i:?}")),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Shuts down upstream first, each phase bounded by one grace period and tracked to
    /// completion, never slept on.
    pub(super) async fn shut_down(mut self, shared: &Shared) -> ShutdownReport {
        info!("shutting down: receivers first");
        shared.health.set(Phase::ShuttingDown);
        let deadline = Instant::now() + self.config.shutdown_grace;
        self.stop_receivers(deadline).await;
        self.stop_background().await;
        self.drain_destinations(deadline).await;
        let report = self.settle_queues(shared).await;
        self.admin.stop().await;
        info!("shutdown complete");
        report
    }

    /// Phase 1: stop accepting; every connection parses what its client already sent and
    /// flushes; the sources of extensions flush what they parsed and commit their positions
    /// (Kinesis readers their final checkpoint, Kafka consumers what was delivered, leaving
    /// their groups).
    async fn stop_receivers(&mut self, deadline: Instant) {
        self.stop_receivers.cancel();
        self.listeners.stop().await;
        for (what, mut task) in std::mem::take(&mut self.sources) {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                warn!(source = %what, "still stopping at the end of the grace period; aborted before its final checkpoint or commit");
                task.abort();
            }
        }
        self.connections.close();
        if tokio::time::timeout_at(deadline, self.connections.wait())
            .await
            .is_err()
        {
            warn!("client connections still draining at the end of the grace period");
        }
    }

    /// Phase 2: the self-metrics reporter, the drop-episode logger and the list watcher stop.
    async fn stop_background(&mut self) {
        let b = &mut self.background;
        if let Some((stop, task)) = b.aggregates.take() {
            stop.cancel();
            let _ = task.await;
        }
        b.stop.cancel();
        for (_, task) in [b.reporter.take(), b.lists.take()].into_iter().flatten() {
            let _ = task.await;
        }
        if let Some(task) = b.c_relay_statistics.take() {
            let _ = task.await;
        }
        let _ = (&mut b.episodes).await;
    }

    /// Phase 3: retirements stop; queues close; destinations deliver what they hold until
    /// empty or the grace period ends (one known dead stops at once), then stop.
    async fn drain_destinations(&mut self, deadline: Instant) {
        info!("flushing destination queues");
        self.destination_signals.stop_retiring.cancel();
        for r in std::mem::take(&mut self.retiring) {
            if let Some(live) = r.interrupt().await {
                self.active.push(live);
            }
        }
        self.destination_signals.drain.cancel();
        for live in &self.active {
            live.queue.close();
        }
        for live in &mut self.active {
            live.join(deadline).await;
        }
    }

    /// Phase 4: what is still queued goes to the spill log (replayed first on the next start)
    /// or, for a memory-only queue, is counted as dropped (`shutdown`) and logged.
    async fn settle_queues(&self, shared: &Shared) -> ShutdownReport {
        let mut undelivered = Vec::new();
        let mut spilled = Vec::new();
        for live in &self.active {
            let q = &live.queue;
            let name = q.stats().name().to_string();
            let (dropped, on_disk) = q.shut_down().await;
            if on_disk > 0 {
                info!(destination = %name, datapoints = on_disk,
                    "left in the spill log for the next run");
                spilled.push((name.clone(), on_disk));
            }
            if dropped > 0 {
                warn!(destination = %name, datapoints = dropped, "undelivered at shutdown");
                undelivered.push((name, dropped));
            }
        }
        ShutdownReport {
            stats: shared.snapshot(),
            undelivered,
            spilled,
        }
    }
}
