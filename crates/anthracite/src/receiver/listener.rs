//! Where the TCP receivers' connections come from.
//!
//! The relay binds TCP listeners itself from the configuration, or serves the ones an
//! embedder injects. An embedder with another transport (a Unix socket, an in-memory stream,
//! connections it accepted and wrapped in TLS itself) implements [`Listener`], or hands a
//! `Stream` of connections to [`Incoming`], as hyper's and tonic's servers take any
//! `AsyncRead + AsyncWrite` connection. Such connections get everything a TCP client gets:
//! the connection limit (the idlest is evicted at the limit), the idle timeout, frame budgets,
//! the receivers' TLS when `listen.tls` is set, and a drain at shutdown.
//!
//! Internally a listener is one of two kinds: a `tokio::net::TcpListener` keeps its fast
//! read path (`try_read` on the socket, no buffer held by a silent client), any other is
//! boxed once and its connections are read through `AsyncRead`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A source of client connections for a TCP receiver (line, pickle or protobuf).
///
/// ```
/// // A Unix socket as the line receiver.
/// # async fn demo(dir: &std::path::Path) -> std::io::Result<()> {
/// let unix = tokio::net::UnixListener::bind(dir.join("line.sock"))?;
/// let config = anthracite::Config::builder()
///     .destinations(["127.0.0.1:2104:a"])
///     .build()
///     .expect("config");
/// let relay = anthracite::Relay::builder(config).line_connections(unix);
/// # let _ = relay; Ok(()) }
/// ```
pub trait Listener: Send + 'static {
    /// One accepted connection. The receivers only read from it; writing is needed only
    /// for the TLS handshake when `listen.tls` is set.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Waits for the next connection. An error is counted as a failed accept and retried
    /// after a pause (as `accept(2)` failing for want of file descriptors is).
    fn accept(&mut self) -> impl Future<Output = io::Result<Self::Io>> + Send;

    /// The address it listens on, where it has one (shown in logs and by the relay).
    fn local_addr(&self) -> Option<SocketAddr> {
        None
    }
}

impl Listener for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;

    async fn accept(&mut self) -> io::Result<Self::Io> {
        tokio::net::UnixListener::accept(self)
            .await
            .map(|(stream, _)| stream)
    }
}

/// Connections from a `Stream` (a channel of in-memory duplex streams, connections a proxy
/// hands over, …). When the stream ends, no more connections come; the receiver keeps
/// serving those it has.
#[derive(Debug)]
pub struct Incoming<S>(pub S);

impl<S, I> Listener for Incoming<S>
where
    S: Stream<Item = io::Result<I>> + Unpin + Send + 'static,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = I;

    async fn accept(&mut self) -> io::Result<I> {
        match std::future::poll_fn(|cx| Pin::new(&mut self.0).poll_next(cx)).await {
            Some(next) => next,
            None => std::future::pending().await,
        }
    }
}

/// A connection of a listener other than TCP, boxed once per connection.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The next connection of a boxed listener.
type AcceptFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Box<dyn Io>>> + Send + 'a>>;

/// Object-safe [`Listener`], so one accept loop serves every kind.
pub(crate) trait DynListener: Send {
    fn accept(&mut self) -> AcceptFuture<'_>;
    fn local_addr(&self) -> Option<SocketAddr>;
}

impl<L: Listener> DynListener for L {
    fn accept(&mut self) -> AcceptFuture<'_> {
        Box::pin(async move {
            Listener::accept(self)
                .await
                .map(|io| Box::new(io) as Box<dyn Io>)
        })
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Listener::local_addr(self)
    }
}

/// What a TCP receiver accepts from.
pub(crate) enum StreamListener {
    /// A TCP socket (bound by the relay or injected).
    Tcp(TcpListener),
    /// Anything else an embedder injected.
    Other(Box<dyn DynListener>),
}

impl std::fmt::Debug for StreamListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamListener::Tcp(l) => f.debug_tuple("Tcp").field(l).finish(),
            StreamListener::Other(l) => f.debug_tuple("Other").field(&l.local_addr()).finish(),
        }
    }
}

impl StreamListener {
    /// Boxes an embedder's listener.
    pub(crate) fn other(listener: impl Listener) -> Self {
        StreamListener::Other(Box::new(listener))
    }

    /// Waits for the next connection.
    pub(crate) async fn accept(&mut self) -> io::Result<Accepted> {
        match self {
            StreamListener::Tcp(l) => l.accept().await.map(|(s, _)| Accepted::Tcp(s)),
            StreamListener::Other(l) => l.accept().await.map(Accepted::Other),
        }
    }

    /// The address it listens on, where it has one.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            StreamListener::Tcp(l) => l.local_addr().ok(),
            StreamListener::Other(l) => l.local_addr(),
        }
    }
}

/// An accepted connection, before the TLS handshake.
pub(crate) enum Accepted {
    /// From a TCP listener.
    Tcp(TcpStream),
    /// From any other listener.
    Other(Box<dyn Io>),
}

impl Accepted {
    /// The peer's address, where there is one (for logs).
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            Accepted::Tcp(s) => s.peer_addr().ok(),
            Accepted::Other(_) => None,
        }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Accepted::Other(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Accepted::Other(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_flush(cx),
            Accepted::Other(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Accepted::Other(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
