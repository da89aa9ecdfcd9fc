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
use tracing::error;

use super::RelayError;
use crate::config::{Config, ExtraLine, ListenConfig, ListenerPem};
use crate::ingest::{Pipeline, Source};
use crate::protocol::compression::Compression;
use crate::receiver::udp::UdpReceiver;
use crate::receiver::warnings::ConnectionWarnings;
use crate::receiver::{Admission, ReceiverContext, StreamListener, framed, tcp, udp};
use crate::tls::ServerTls;

/// A receiver's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Line,
    /// A plaintext receiver beyond `line_tcp` (`listen.extra_line`: TCP or Unix), with its
    /// connections' compression.
    ExtraLine(Compression),
    Pickle,
    Protobuf,
    Udp,
}

impl Kind {
    pub(super) const ALL: [Kind; 4] = [Kind::Line, Kind::Pickle, Kind::Protobuf, Kind::Udp];

    /// What a bind error calls it.
    pub(super) fn what(self) -> &'static str {
        match self {
            Kind::Line | Kind::ExtraLine(_) => "line receiver",
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
            Kind::ExtraLine(_) => None,
        }
    }
}

/// A bound socket, not yet served.
pub(super) enum Socket {
    Tcp(StreamListener),
    /// A receiver with TLS of its own (a carbon-c-relay `listen … ssl PEMFILE`), kept with
    /// the socket so a reload serves it again as it was bound.
    OwnTls(StreamListener, ServerTls),
    Udp(UdpReceiver),
}

impl Socket {
    /// Binds `kind` on `addr` with `listen`'s backlog (TCP) or receive buffer (UDP).
    pub(super) async fn bind(
        kind: Kind,
        addr: SocketAddr,
        listen: &ListenConfig,
    ) -> Result<Self, RelayError> {
        let err = |source| RelayError::Bind {
            what: kind.what(),
            addr,
            source,
        };
        match kind {
            Kind::Udp => {
                let s = UdpSocket::bind(addr).await.map_err(err)?;
                Socket::Udp(UdpReceiver::new(s)).prepared(kind, listen)
            }
            _ => tcp_listen(addr, listen.backlog)
                .map(|l| Socket::Tcp(StreamListener::Tcp(l)))
                .map_err(err),
        }
    }

    /// A socket an embedder injected, given the settings the relay applies to the sockets it
    /// binds itself where they can still apply (a UDP socket's receive buffer and drop
    /// counter; a listening socket's backlog is the embedder's).
    pub(super) fn prepared(self, kind: Kind, listen: &ListenConfig) -> Result<Self, RelayError> {
        if let Socket::Udp(rx) = &self {
            let s = rx.socket();
            let addr = s
                .local_addr()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            udp::prepare_socket(s, listen.udp_recv_buffer).map_err(|source| RelayError::Bind {
                what: kind.what(),
                addr,
                source,
            })?;
        }
        Ok(self)
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Socket::Tcp(l) | Socket::OwnTls(l, _) => l.local_addr(),
            Socket::Udp(rx) => rx.socket().local_addr().ok(),
        }
    }
}

/// Binds one of `listen.extra_line` as a plaintext receiver, reading its own TLS
/// certificate first when it has one (a missing file refuses the start, as carbon-c-relay's
/// does). An IPv6 address takes only IPv6 (`IPV6_V6ONLY`, as carbon-c-relay binds it), so
/// that `[::]` and `0.0.0.0` on one port can both be bound.
pub(super) fn bind_extra(
    extra: &ExtraLine,
    listen: &ListenConfig,
) -> Result<(Kind, Socket), RelayError> {
    use socket2::{Domain, Type};
    let bind = |addr: SocketAddr, kind: Kind, ty: Type| {
        let err = move |source| RelayError::Bind {
            what: kind.what(),
            addr,
            source,
        };
        let socket = socket2::Socket::new(Domain::for_address(addr), ty, None).map_err(err)?;
        if addr.is_ipv6() {
            socket.set_only_v6(true).map_err(err)?;
        }
        socket.set_reuse_address(true).map_err(err)?;
        socket.set_nonblocking(true).map_err(err)?;
        socket.bind(&addr.into()).map_err(err)?;
        Ok::<_, RelayError>((socket, err))
    };
    // Read before anything is bound, so a refusal leaves no socket file behind.
    let tls = match extra {
        ExtraLine::Tcp(_, _, pem) | ExtraLine::Unix(_, _, pem) => pem
            .as_ref()
            .map(ListenerPem::load)
            .transpose()
            .map_err(RelayError::ListenerTls)?,
        ExtraLine::Udp(_) => None,
    };
    let with_tls = |l: StreamListener| match tls {
        Some(tls) => Socket::OwnTls(l, tls),
        None => Socket::Tcp(l),
    };
    match extra {
        ExtraLine::Tcp(addr, compression, _) => {
            let kind = Kind::ExtraLine(*compression);
            let (socket, err) = bind(*addr, kind, Type::STREAM)?;
            socket
                .listen(i32::try_from(listen.backlog).unwrap_or(i32::MAX))
                .map_err(err)?;
            let l = TcpListener::from_std(socket.into()).map_err(err)?;
            Ok((kind, with_tls(StreamListener::Tcp(l))))
        }
        ExtraLine::Udp(addr) => {
            let (socket, err) = bind(*addr, Kind::Udp, Type::DGRAM)?;
            let s = UdpSocket::from_std(socket.into()).map_err(err)?;
            Ok((
                Kind::Udp,
                Socket::Udp(UdpReceiver::new(s)).prepared(Kind::Udp, listen)?,
            ))
        }
        ExtraLine::Unix(path, compression, _) => {
            let err = |source| RelayError::BindUnix {
                path: path.clone(),
                source,
            };
            // A socket file left by an earlier run refuses the bind; carbon-c-relay removes
            // it too.
            if std::fs::symlink_metadata(path).is_ok_and(|m| {
                use std::os::unix::fs::FileTypeExt;
                m.file_type().is_socket()
            }) {
                std::fs::remove_file(path).map_err(err)?;
            }
            let l = tokio::net::UnixListener::bind(path).map_err(err)?;
            Ok((
                Kind::ExtraLine(*compression),
                with_tls(StreamListener::Other(Box::new(l))),
            ))
        }
    }
}

/// A listening socket on `addr` with `backlog` (SO_REUSEADDR, as tokio's own `bind` does).
fn tcp_listen(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    // The kernel caps it at net.core.somaxconn; validated to 1..=65535.
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    TcpListener::from_std(socket.into())
}

/// One served socket.
struct ServedSocket {
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
pub(super) struct ReceiverBase {
    pub(super) pipeline: Pipeline,
    /// Cancelled at shutdown: accept loops stop, connections drain.
    pub(super) shutdown: CancellationToken,
    pub(super) tracker: TaskTracker,
}

/// The served sockets.
pub(super) struct Listeners {
    base: ReceiverBase,
    served: Vec<ServedSocket>,
    /// The connection limit over every TCP receiver, for the relay's life (a reload changes
    /// its limit; the connections it admitted stay registered).
    admission: Arc<Admission>,
    /// The relay-wide budget for large frames, and its size. A reload that changes the size
    /// gives new connections a new budget; open ones finish on the old one.
    frame_budget: (Arc<Semaphore>, usize),
    /// The budget for what frames decode into, as large as the frame budget and replaced
    /// with it.
    decoded_budget: Arc<Semaphore>,
    /// Per-connection warnings, logged per episode for the relay's life.
    warnings: Arc<ConnectionWarnings>,
}

impl Listeners {
    pub(super) fn new(base: ReceiverBase, listen: &ListenConfig) -> Self {
        Self {
            base,
            served: Vec::new(),
            admission: Arc::new(Admission::new(
                listen.max_connections,
                crate::receiver::admission::MIN_IDLE_TO_EVICT,
            )),
            frame_budget: (
                Arc::new(Semaphore::new(listen.max_frame_buffer_bytes)),
                listen.max_frame_buffer_bytes,
            ),
            decoded_budget: Arc::new(Semaphore::new(listen.max_frame_buffer_bytes)),
            warnings: Arc::default(),
        }
    }

    /// A receiver context with `config`'s settings.
    fn context(&self, config: &Config) -> ReceiverContext {
        let l = &config.listen;
        ReceiverContext {
            pipeline: self.base.pipeline.clone(),
            shutdown: self.base.shutdown.clone(),
            accepting: self.base.shutdown.child_token(),
            tracker: self.base.tracker.clone(),
            admission: self.admission.clone(),
            frame_budget: self.frame_budget.0.clone(),
            decoded_budget: self.decoded_budget.clone(),
            decoded_budget_bytes: self.frame_budget.1,
            warnings: self.warnings.clone(),
            idle_timeout: l.idle_timeout,
            max_line_length: l.max_line_length,
            max_pickle_frame: l.max_pickle_frame,
            max_protobuf_frame: l.max_protobuf_frame,
            tls: l.tls.clone(),
            compression: Compression::Plain,
            max_decompressed_bytes: l.max_decompressed_bytes,
        }
    }

    /// Serves `socket` as `kind` with `config`'s settings.
    fn serve(&mut self, kind: Kind, socket: Socket, config: &Config) {
        let mut ctx = self.context(config);
        ctx.compression = match kind {
            Kind::Line => config.listen.line_tcp_compression,
            Kind::ExtraLine(c) => c,
            _ => Compression::Plain,
        };
        let accepting = ctx.accepting.clone();
        let local = socket.local_addr();
        let task = match (kind, socket) {
            (Kind::Udp, Socket::Udp(s)) => {
                tokio::spawn(async move { Socket::Udp(udp::serve_udp(s, ctx).await) })
            }
            (Kind::ExtraLine(_), Socket::OwnTls(l, tls)) => {
                ctx.tls = Some(tls.clone());
                tokio::spawn(async move {
                    let l = tcp::accept_loop(l, ctx, Source::LineTcp, tcp::serve_line).await;
                    Socket::OwnTls(l, tls)
                })
            }
            (Kind::Line | Kind::ExtraLine(_), Socket::Tcp(l)) => {
                if matches!(kind, Kind::ExtraLine(_)) {
                    // An extra receiver's TLS is its own: without it, plaintext.
                    ctx.tls = None;
                }
                tokio::spawn(async move {
                    Socket::Tcp(tcp::accept_loop(l, ctx, Source::LineTcp, tcp::serve_line).await)
                })
            }
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
        self.served.push(ServedSocket {
            kind,
            configured: kind.configured(&config.listen),
            local,
            accepting,
            task,
        });
    }

    /// Serves every socket in `sockets` with `config`'s settings.
    pub(super) fn serve_all(&mut self, sockets: Vec<(Kind, Socket)>, config: &Config) {
        for (kind, socket) in sockets {
            self.serve(kind, socket, config);
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
        self.admission.set_limit(config.listen.max_connections);
        let budget = config.listen.max_frame_buffer_bytes;
        if budget != self.frame_budget.1 {
            self.frame_budget = (Arc::new(Semaphore::new(budget)), budget);
            self.decoded_budget = Arc::new(Semaphore::new(budget));
        }
        let mut keep = Vec::new();
        for s in std::mem::take(&mut self.served) {
            let rebound = fresh.iter().any(|(k, _)| *k == s.kind);
            if !rebound && !settings_changed {
                keep.push(s);
                continue;
            }
            s.accepting.cancel();
            let socket = match s.task.await {
                Ok(socket) => Some(socket),
                Err(e) => {
                    error!(receiver = s.kind.what(), error = %e,
                        "receiver task failed; its socket is closed");
                    None
                }
            };
            if !rebound && let Some(socket) = socket {
                // Same address, new settings: the same socket, served again.
                self.serve(s.kind, socket, config);
                if let Some(last) = self.served.last_mut() {
                    last.configured = s.configured;
                }
            }
        }
        self.served.append(&mut keep);
        for (kind, socket) in fresh {
            if let Some(socket) = socket {
                self.serve(kind, socket, config);
            }
        }
    }

    /// Shutdown: every accept loop stops (after taking its backlog).
    pub(super) async fn stop(&mut self) {
        for s in self.served.drain(..) {
            s.accepting.cancel();
            if let Err(e) = s.task.await {
                error!(receiver = s.kind.what(), error = %e, "receiver task failed");
            }
        }
    }
}
