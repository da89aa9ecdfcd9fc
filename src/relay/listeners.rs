//! The receivers' sockets and their accept loops, which a reload can rebind (a changed
//! address: the new socket is bound before the old one stops accepting) or serve again with
//! new settings (the same socket; connections already open keep the settings they started
//! with). Stopping an accept loop never closes its connections.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::RelayError;
use crate::config::{Config, ListenConfig};
use crate::ingest::{Pipeline, Source};
use crate::receiver::{ReceiverContext, framed, tcp, udp};

/// A receiver's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Line,
    Pickle,
    Protobuf,
    Udp,
}

impl Kind {
    pub(super) const ALL: [Kind; 4] = [Kind::Line, Kind::Pickle, Kind::Protobuf, Kind::Udp];

    /// What a bind error calls it.
    pub(super) fn what(self) -> &'static str {
        match self {
            Kind::Line => "line receiver",
            Kind::Pickle => "pickle receiver",
            Kind::Protobuf => "protobuf receiver",
            Kind::Udp => "udp receiver",
        }
    }

    /// The configured address.
    pub(super) fn configured(self, l: &ListenConfig) -> Option<SocketAddr> {
        match self {
            Kind::Line => l.line_tcp,
            Kind::Pickle => l.pickle_tcp,
            Kind::Protobuf => l.protobuf_tcp,
            Kind::Udp => l.line_udp,
        }
    }
}

/// A bound socket, not yet served.
pub(super) enum Socket {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

impl Socket {
    /// Binds `kind` on `addr`.
    pub(super) async fn bind(kind: Kind, addr: SocketAddr) -> Result<Self, RelayError> {
        let err = |source| RelayError::Bind {
            what: kind.what(),
            addr,
            source,
        };
        match kind {
            Kind::Udp => UdpSocket::bind(addr).await.map(Socket::Udp).map_err(err),
            _ => TcpListener::bind(addr).await.map(Socket::Tcp).map_err(err),
        }
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Socket::Tcp(l) => l.local_addr().ok(),
            Socket::Udp(s) => s.local_addr().ok(),
        }
    }
}

/// One served socket.
struct Served {
    kind: Kind,
    /// The address the configuration named for it (`None` for a socket an embedder
    /// injected while the configuration named none).
    configured: Option<SocketAddr>,
    local: Option<SocketAddr>,
    accepting: CancellationToken,
    task: JoinHandle<Socket>,
}

/// What every receiver's context shares, besides its settings.
#[derive(Clone)]
pub(super) struct Shared {
    pub(super) pipeline: Pipeline,
    /// Cancelled at shutdown: accept loops stop, connections drain.
    pub(super) shutdown: CancellationToken,
    pub(super) tracker: TaskTracker,
}

/// The served sockets.
pub(super) struct Listeners {
    shared: Shared,
    served: Vec<Served>,
}

impl Listeners {
    pub(super) fn new(shared: Shared) -> Self {
        Self {
            shared,
            served: Vec::new(),
        }
    }

    /// A receiver context with `config`'s settings (one connection semaphore for all).
    fn context(&self, config: &Config, connections: Arc<Semaphore>) -> ReceiverContext {
        let l = &config.listen;
        ReceiverContext {
            pipeline: self.shared.pipeline.clone(),
            shutdown: self.shared.shutdown.clone(),
            accepting: self.shared.shutdown.child_token(),
            tracker: self.shared.tracker.clone(),
            connections,
            idle_timeout: l.idle_timeout,
            max_line_length: l.max_line_length,
            max_pickle_frame: l.max_pickle_frame,
            max_protobuf_frame: l.max_protobuf_frame,
            tls: l.tls.clone(),
        }
    }

    /// Serves `socket` as `kind` with `config`'s settings.
    fn serve(&mut self, kind: Kind, socket: Socket, config: &Config, connections: &Arc<Semaphore>) {
        let ctx = self.context(config, connections.clone());
        let accepting = ctx.accepting.clone();
        let local = socket.local_addr();
        let task = match (kind, socket) {
            (Kind::Udp, Socket::Udp(s)) => {
                tokio::spawn(async move { Socket::Udp(udp::serve_udp(s, ctx).await) })
            }
            (Kind::Line, Socket::Tcp(l)) => tokio::spawn(async move {
                Socket::Tcp(tcp::accept_loop(l, ctx, Source::LineTcp, tcp::serve_line).await)
            }),
            (Kind::Pickle, Socket::Tcp(l)) => tokio::spawn(async move {
                Socket::Tcp(tcp::accept_loop(l, ctx, Source::PickleTcp, framed::serve_pickle).await)
            }),
            (Kind::Protobuf, Socket::Tcp(l)) => tokio::spawn(async move {
                Socket::Tcp(
                    tcp::accept_loop(l, ctx, Source::ProtobufTcp, framed::serve_protobuf).await,
                )
            }),
            // A socket of the wrong type never reaches here (bound by kind).
            (_, s) => tokio::spawn(async move { s }),
        };
        self.served.push(Served {
            kind,
            configured: kind.configured(&config.listen),
            local,
            accepting,
            task,
        });
    }

    /// Serves every socket in `sockets` with `config`'s settings.
    pub(super) fn serve_all(&mut self, sockets: Vec<(Kind, Socket)>, config: &Config) {
        let connections = Arc::new(Semaphore::new(config.listen.max_connections));
        for (kind, socket) in sockets {
            self.serve(kind, socket, config, &connections);
        }
    }

    /// The local address of `kind`, if served.
    pub(super) fn local(&self, kind: Kind) -> Option<SocketAddr> {
        self.served
            .iter()
            .find(|s| s.kind == kind)
            .and_then(|s| s.local)
    }

    /// For a reload: the kinds whose configured address changes (to bind anew), given the
    /// old and new listen settings.
    pub(super) fn rebinds(&self, new: &ListenConfig) -> Vec<(Kind, Option<SocketAddr>)> {
        Kind::ALL
            .into_iter()
            .filter_map(|kind| {
                let want = kind.configured(new);
                match self.served.iter().find(|s| s.kind == kind) {
                    Some(s) => (s.configured != want).then_some((kind, want)),
                    None => want.map(|a| (kind, Some(a))),
                }
            })
            .collect()
    }

    /// Applies a reload: `fresh` are the sockets bound for changed addresses (by kind; a kind
    /// listed with no socket is turned off); every other socket is served again with the new
    /// settings when they changed. Old accept loops stop accepting (taking their backlog
    /// first); their connections go on.
    pub(super) async fn reload(
        &mut self,
        fresh: Vec<(Kind, Option<Socket>)>,
        settings_changed: bool,
        config: &Config,
    ) {
        let connections = Arc::new(Semaphore::new(config.listen.max_connections));
        let mut keep = Vec::new();
        for s in std::mem::take(&mut self.served) {
            let rebound = fresh.iter().any(|(k, _)| *k == s.kind);
            if !rebound && !settings_changed {
                keep.push(s);
                continue;
            }
            s.accepting.cancel();
            let socket = s.task.await;
            if !rebound && let Ok(socket) = socket {
                // Same address, new settings: the same socket, served again.
                self.serve(s.kind, socket, config, &connections);
                if let Some(last) = self.served.last_mut() {
                    last.configured = s.configured;
                }
            }
        }
        self.served.append(&mut keep);
        for (kind, socket) in fresh {
            if let Some(socket) = socket {
                self.serve(kind, socket, config, &connections);
            }
        }
    }

    /// Shutdown: every accept loop stops (after taking its backlog).
    pub(super) async fn stop(&mut self) {
        for s in self.served.drain(..) {
            s.accepting.cancel();
            let _ = s.task.await;
        }
    }
}
