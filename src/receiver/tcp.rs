//! TCP accept loop and the plaintext connection handler.

use std::future::Future;
use std::io;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

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
    F: Fn(TcpStream, ReceiverContext) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let stats = ctx.pipeline.stats().clone();
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
                    let handler_fut = handler(stream, ctx.clone());
                    ctx.tracker.spawn(handler_fut);
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
        let fut = handler(stream, conn_ctx);
        let stats = stats.clone();
        ctx.tracker.spawn(async move {
            stats.connection_delta(source, true);
            fut.await;
            stats.connection_delta(source, false);
            drop(permit);
        });
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
    stream: &mut TcpStream,
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

async fn drain_read(stream: &mut TcpStream, buf: &mut BytesMut) -> Read {
    match tokio::time::timeout(SHUTDOWN_DRAIN_WAIT, stream.read_buf(buf)).await {
        Ok(Ok(n)) if n > 0 => Read::Data,
        _ => Read::Eof,
    }
}

/// Serves one plaintext connection.
pub async fn serve_line(mut stream: TcpStream, ctx: ReceiverContext) {
    let mut ingestor: Ingestor = ctx.pipeline.ingestor(Source::LineTcp);
    let mut framer = LineFramer::new(ctx.max_line_length);
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    loop {
        match read_more(&mut stream, &mut buf, &ctx).await {
            Read::Data => {
                // A socket reader flushes after every read, so the flush hint never applies.
                framer.feed_batched(&mut buf, |lines| ingestor.lines(lines));
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
