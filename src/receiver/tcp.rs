//! TCP accept loop and the plaintext connection handler.
//!
//! With `listen.tls` every accepted connection first completes a TLS handshake (in its own
//! task, bounded by [`TLS_HANDSHAKE_TIMEOUT`]); a client that does not speak TLS, or presents
//! no acceptable certificate when `client_ca` is set, is closed before anything is read.

use std::future::Future;
use std::io;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::stream::ClientStream;
use super::{READ_BUFFER, ReceiverContext};
use crate::ingest::Ingestor;
use crate::ingest::Source;
use crate::protocol::line::LineFramer;

/// Accepts connections until shutdown, running `handler` for each on the task tracker.
pub async fn accept_loop<F, Fut>(
    listener: TcpListener,
    ctx: ReceiverContext,
    source: Source,
    handler: F,
) where
    F: Fn(ClientStream, ReceiverContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let stats = ctx.pipeline.stats().clone();
    let handler = std::sync::Arc::new(handler);
    let mut accept_errors = 0u64;
    loop {
        let accepted = tokio::select! {
            biased;
            a = listener.accept() => a,
            _ = ctx.shutdown.cancelled() => {
                // Connections already in the backlog have sent data the client believes was
                // accepted: take them too (their handlers drain in shutdown mode), then stop.
                while let Ok(Ok((stream, _))) =
                    tokio::time::timeout(Duration::ZERO, listener.accept()).await
                {
                    let handler = handler.clone();
                    let conn_ctx = ctx.clone();
                    ctx.tracker.spawn(async move {
                        if let Some(client) = handshake(stream, &conn_ctx, source).await {
                            handler(client, conn_ctx).await;
                        }
                    });
                }
                return;
            }
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                accept_errors = 0;
                a
            }
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                accept_errors += 1;
                if accept_errors == 1 {
                    warn!(source = source.as_str(), error = %e, "accept failed");
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = ctx.connections.clone().try_acquire_owned() else {
            stats.connection_rejected(source);
            debug!(%peer, "connection limit reached; closing new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let conn_ctx = ctx.clone();
        let handler = handler.clone();
        let stats = stats.clone();
        ctx.tracker.spawn(async move {
            stats.connection_delta(source, true);
            if let Some(client) = handshake(stream, &conn_ctx, source).await {
                handler(client, conn_ctx).await;
            }
            stats.connection_delta(source, false);
            drop(permit);
        });
    }
}

/// Longest a client may take to complete the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection as the handlers read it: the TLS handshake done when the receivers use TLS.
/// `None` when the handshake failed or timed out (logged at debug level: scanners and clients
/// speaking plaintext to a TLS port are common and carry no datapoints).
async fn handshake(
    stream: TcpStream,
    ctx: &ReceiverContext,
    source: Source,
) -> Option<ClientStream> {
    let Some(tls) = &ctx.tls else {
        return Some(ClientStream::Plain(stream));
    };
    let peer = stream.peer_addr().ok();
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
        Ok(Ok(s)) => Some(ClientStream::Tls(Box::new(s))),
        Ok(Err(e)) => {
            debug!(source = source.as_str(), ?peer, error = %e, "TLS handshake failed; connection closed");
            None
        }
        Err(_) => {
            debug!(
                source = source.as_str(),
                ?peer,
                "TLS handshake timed out; connection closed"
            );
            None
        }
    }
}

/// Outcome of one read on a client connection.
pub(crate) enum Read {
    /// `n` bytes arrived.
    Data,
    /// Peer closed, or shutdown drained what was there.
    Eof,
    /// Idle timeout.
    Idle,
    /// Socket error.
    Failed(io::Error),
}

/// After shutdown, how long a connection waits for more of what the client already sent.
const SHUTDOWN_DRAIN_WAIT: Duration = Duration::from_millis(100);

/// Reads more bytes into `buf`, honouring the idle timeout and shutdown. After shutdown it
/// keeps taking what the client already sent (each read waits at most
/// `SHUTDOWN_DRAIN_WAIT`), then reports `Eof`; the caller's grace period bounds the total.
pub(crate) async fn read_more(
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    ctx: &ReceiverContext,
) -> Read {
    if buf.capacity() - buf.len() < READ_BUFFER / 4 {
        buf.reserve(READ_BUFFER);
    }
    if ctx.shutdown.is_cancelled() {
        return drain_read(stream, buf).await;
    }
    let read = async {
        match ctx.idle_timeout {
            Some(t) => tokio::time::timeout(t, stream.read_buf(buf)).await.ok(),
            None => Some(stream.read_buf(buf).await),
        }
    };
    let outcome = tokio::select! {
        biased;
        r = read => Some(r),
        _ = ctx.shutdown.cancelled() => None,
    };
    match outcome {
        Some(None) => Read::Idle,
        Some(Some(Ok(0))) => Read::Eof,
        Some(Some(Ok(_))) => Read::Data,
        Some(Some(Err(e))) => Read::Failed(e),
        None => drain_read(stream, buf).await,
    }
}

async fn drain_read(stream: &mut ClientStream, buf: &mut BytesMut) -> Read {
    match tokio::time::timeout(SHUTDOWN_DRAIN_WAIT, stream.read_buf(buf)).await {
        Ok(Ok(n)) if n > 0 => Read::Data,
        _ => Read::Eof,
    }
}

/// Serves one plaintext connection.
pub async fn serve_line(mut stream: ClientStream, ctx: ReceiverContext) {
    let mut ingestor: Ingestor = ctx.pipeline.ingestor(Source::LineTcp);
    let mut framer = LineFramer::new(ctx.max_line_length);
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    loop {
        match read_more(&mut stream, &mut buf, &ctx).await {
            Read::Data => {
                // A socket reader flushes after every read, so the flush hint never applies.
                framer.feed(&mut buf, |line| {
                    let _ = match line {
                        Ok(l) => ingestor.line(l),
                        Err(reason) => ingestor.reject(reason),
                    };
                });
                ingestor.flush().await;
            }
            Read::Eof => break,
            Read::Idle => {
                ctx.pipeline.stats().connection_idle_closed(Source::LineTcp);
                break;
            }
            Read::Failed(e) => {
                debug!(error = %e, "line connection failed");
                break;
            }
        }
    }
    if let Some(reason) = framer.finish(&mut buf) {
        ingestor.reject(reason);
    }
    ingestor.flush().await;
}
