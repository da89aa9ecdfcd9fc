//! A client connection as the receivers read it: plain TCP, TLS, or a connection of another
//! kind of [`Listener`](super::Listener).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;

use super::listener::{Accepted, Io};

/// One accepted client connection, after the TLS handshake when the receivers use TLS.
pub(crate) enum ClientStream {
    /// Plaintext TCP: read with `try_read`, so a silent client holds no buffer.
    Plain(TcpStream),
    /// TLS over an accepted connection.
    Tls(Box<tokio_rustls::server::TlsStream<Accepted>>),
    /// Plaintext over another listener's connection.
    Other(Box<dyn Io>),
}

impl ClientStream {
    /// The peer's IP address: `None` for a Unix socket or another listener's connection.
    pub(crate) fn peer_ip(&self) -> Option<std::net::IpAddr> {
        match self {
            ClientStream::Plain(s) => s.peer_addr().ok().map(|a| a.ip()),
            ClientStream::Tls(s) => s.get_ref().0.peer_addr().map(|a| a.ip()),
            ClientStream::Other(_) => None,
        }
    }
}

impl std::fmt::Debug for ClientStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientStream::Plain(s) => f.debug_tuple("Plain").field(s).finish(),
            ClientStream::Tls(_) => f.write_str("Tls"),
            ClientStream::Other(_) => f.write_str("Other"),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            ClientStream::Other(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}
