//! A relay between startup and shutdown: what [`Relay::run`](super::Relay::run) started, and
//! the four shutdown phases, in order.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::{Relay, RelayError, ShutdownReport};
use crate::config::Config;
use crate::destination::{self, DestinationSignals};
use crate::ingest::{Pipeline, Source};
use crate::receiver::{Admission, ReceiverContext, framed, tcp, udp};
use crate::telemetry::{StatsSnapshot, reporter};

/// Everything a running relay owns, so that shutdown can stop it in order.
pub(super) struct Running {
    config: Config,
    pipeline: Pipeline,
    /// Cancelled when the grace period is over: destinations stop at once.
    abort: CancellationToken,
    destinations: JoinSet<()>,
    stop_receivers: CancellationToken,
    receivers: JoinSet<()>,
    connections: TaskTracker,
    #[cfg(feature = "kinesis")]
    kinesis: JoinSet<()>,
    /// Stops the self-metrics reporter and the list watcher.
    stop_background: CancellationToken,
    background: Vec<JoinHandle<()>>,
}

impl Relay {
    /// Startup: binds what was not injected, loads Kinesis checkpoints (a corrupt one stops
    /// startup), then starts destinations before receivers, so nothing accepted waits for a
    /// destination to exist, and finally the self-metrics reporter and the list watcher.
    pub(super) async fn start(self) -> Result<Running, RelayError> {
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
        let backlog = config.listen.backlog;
        let line = bind_tcp(line, config.listen.line_tcp, backlog, "line receiver")?;
        let pickle = bind_tcp(pickle, config.listen.pickle_tcp, backlog, "pickle receiver")?;
        let protobuf = bind_tcp(
            protobuf,
            config.listen.protobuf_tcp,
            backlog,
            "protobuf receiver",
        )?;
        let udp = bind_udp(udp, config.listen.line_udp, config.listen.udp_recv_buffer).await?;
        #[cfg(feature = "kinesis")]
        let kinesis_sources =
            crate::receiver::kinesis::prepare(&config.kinesis, aws.as_ref()).await?;

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
            admission: Arc::new(Admission::new(config.listen.max_connections)),
            frame_budget: Arc::new(Semaphore::new(config.listen.max_frame_buffer_bytes)),
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
        let kinesis = crate::receiver::kinesis::spawn(kinesis_sources, &pipeline, &stop_receivers);

        let stop_background = CancellationToken::new();
        let mut background = Vec::new();
        if let Some(interval) = config.telemetry.interval {
            background.push(tokio::spawn(reporter::run(
                pipeline.clone(),
                config.telemetry.clone(),
                interval,
                stop_background.clone(),
            )));
        }
        if let Some(w) = lists {
            background.push(tokio::spawn(w.run(stop_background.clone())));
        }
        Ok(Running {
            config,
            pipeline,
            abort,
            destinations,
            stop_receivers,
            receivers,
            connections,
            #[cfg(feature = "kinesis")]
            kinesis,
            stop_background,
            background,
        })
    }
}

impl Running {
    /// Shuts down upstream first, each phase bounded by one grace period and tracked to
    /// completion, never slept on.
    pub(super) async fn shut_down(mut self) -> ShutdownReport {
        info!("shutting down: receivers first");
        let deadline = Instant::now() + self.config.shutdown_grace;
        self.stop_receivers(deadline).await;
        self.stop_background().await;
        self.drain_destinations(deadline).await;
        let report = self.settle_queues().await;
        info!("shutdown complete");
        report
    }

    /// Phase 1: stop accepting; every connection parses what its client already sent and
    /// flushes; Kinesis readers flush what they parsed and commit their final checkpoint.
    async fn stop_receivers(&mut self, deadline: Instant) {
        self.stop_receivers.cancel();
        while self.receivers.join_next().await.is_some() {}
        #[cfg(feature = "kinesis")]
        crate::receiver::kinesis::join(std::mem::take(&mut self.kinesis), deadline).await;
        self.connections.close();
        if tokio::time::timeout_at(deadline, self.connections.wait())
            .await
            .is_err()
        {
            warn!("client connections still draining at the end of the grace period");
        }
    }

    /// Phase 2: the self-metrics reporter and the list watcher stop.
    async fn stop_background(&mut self) {
        self.stop_background.cancel();
        for task in self.background.drain(..) {
            let _ = task.await;
        }
    }

    /// Phase 3: queues close; destinations deliver what they hold until empty or the grace
    /// period ends, then stop at once.
    async fn drain_destinations(&mut self, deadline: Instant) {
        info!("flushing destination queues");
        for q in self.pipeline.queues.iter() {
            q.close();
        }
        let drained = tokio::time::timeout_at(deadline, async {
            while self.destinations.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            self.abort.cancel();
            while self.destinations.join_next().await.is_some() {}
        }
    }

    /// Phase 4: what is still queued goes to the spill log (replayed first on the next start)
    /// or, for a memory-only queue, is counted as dropped (`shutdown`) and logged.
    async fn settle_queues(self) -> ShutdownReport {
        let mut undelivered = Vec::new();
        let mut spilled = Vec::new();
        for q in self.pipeline.queues.iter() {
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
            stats: StatsSnapshot::collect(
                self.pipeline.stats().snapshot(),
                self.pipeline.queues.iter().map(|q| &**q.stats()),
            ),
            undelivered,
            spilled,
        }
    }
}

/// The injected listener, or one bound on `configured` with `backlog` (SO_REUSEADDR, as
/// tokio's own `bind` does).
fn bind_tcp(
    injected: Option<TcpListener>,
    configured: Option<SocketAddr>,
    backlog: u32,
    what: &'static str,
) -> Result<Option<TcpListener>, RelayError> {
    match (injected, configured) {
        (Some(l), _) => Ok(Some(l)),
        (None, Some(addr)) => listen(addr, backlog)
            .map(Some)
            .map_err(|source| RelayError::Bind { what, addr, source }),
        (None, None) => Ok(None),
    }
}

fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    // The kernel caps it at net.core.somaxconn; validated to 1..=65535.
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    TcpListener::from_std(socket.into())
}

/// The injected socket, or one bound on `configured`; either way with the configured
/// receive buffer and the kernel's drop counter on.
async fn bind_udp(
    injected: Option<UdpSocket>,
    configured: Option<SocketAddr>,
    recv_buffer: Option<usize>,
) -> Result<Option<UdpSocket>, RelayError> {
    let (socket, addr) = match (injected, configured) {
        (Some(s), _) => {
            let addr = s.local_addr().unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
            (s, addr)
        }
        (None, Some(addr)) => {
            let s = UdpSocket::bind(addr)
                .await
                .map_err(|source| RelayError::Bind {
                    what: "udp receiver",
                    addr,
                    source,
                })?;
            (s, addr)
        }
        (None, None) => return Ok(None),
    };
    udp::prepare_socket(&socket, recv_buffer).map_err(|source| RelayError::Bind {
        what: "udp receiver",
        addr,
        source,
    })?;
    Ok(Some(socket))
}
