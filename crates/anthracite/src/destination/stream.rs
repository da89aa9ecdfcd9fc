//! Streams (TCP, or TLS over TCP): queue → batched writes, re-sent after a reconnect when a
//! write failed or the peer went away right after it.
//!
//! The sender takes the oldest batch, keeps taking while less than `flush_bytes` is queued
//! (waiting at most `linger` for more), encodes pickle, plaintext or protobuf messages, writes
//! them in one `write_all` + `flush`, and holds them as `Unconfirmed` until the connection
//! is seen alive afterwards. While idle it watches the socket for EOF, so a carbon-cache that
//! went away is noticed before the next write rather than by losing that write. Every write
//! and flush must make progress within the write timeout (see the
//! destination module docs, "Dead peers").

use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::encode::{Encoded, Encoder};
use super::{
    BoxFuture, DEAD_AT_SHUTDOWN, DestinationConfig, DestinationSignals, FailureEpisode, Outbox,
    Served, Transport, gather,
};
use crate::batch::Batch;
use crate::protocol::compression::{Compression, Compressor};
use crate::queue::{DestinationDropReason, DestinationQueue, DestinationStats};

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The two directions of one connection.
pub(crate) struct Halves {
    reader: Reader,
    writer: Writer,
}

impl Halves {
    /// A plain TCP connection.
    pub(crate) fn tcp(stream: TcpStream) -> Self {
        let (reader, writer) = stream.into_split();
        Self {
            reader: Box::new(reader),
            writer: Box::new(writer),
        }
    }

    /// A TLS connection (the handshake already done).
    pub(crate) fn tls(stream: tokio_rustls::client::TlsStream<TcpStream>) -> Self {
        let (reader, writer) = tokio::io::split(stream);
        Self {
            reader: Box::new(reader),
            writer: Box::new(writer),
        }
    }
}

/// The core's TCP transport (pickle, plaintext or protobuf, optionally inside TLS).
pub(crate) struct TcpTransport {
    config: DestinationConfig,
    sender: Sender,
    link: Option<Halves>,
}

impl TcpTransport {
    pub(crate) fn new(config: &DestinationConfig) -> Self {
        Self {
            config: config.clone(),
            sender: Sender::new(config),
            link: None,
        }
    }
}

impl Transport for TcpTransport {
    fn connect(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move {
            self.link = Some(super::connect_stream(&self.config).await?);
            Ok(())
        })
    }

    fn serve<'a>(&'a mut self, outbox: Outbox<'a>) -> BoxFuture<'a, Served> {
        Box::pin(async move {
            match self.link.take() {
                Some(halves) => {
                    self.sender
                        .serve(halves, outbox.queue, outbox.signals, outbox.episode)
                        .await
                }
                None => Served::Lost(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "not connected",
                )),
            }
        })
    }
}

/// Encoding state reused across connections.
pub(crate) struct Sender {
    name: String,
    encoder: Encoder,
    flush_bytes: usize,
    linger: Duration,
    write_timeout: Option<Duration>,
    buf: BytesMut,
    /// Each connection's stream compression, and `buf` compressed.
    compression: Compression,
    wire: BytesMut,
    in_flight: Vec<Batch>,
}

impl Sender {
    pub(crate) fn new(config: &DestinationConfig) -> Self {
        Self {
            name: config.spec.to_string(),
            encoder: Encoder::new(config.protocol, config.max_datapoints_per_message),
            flush_bytes: config.flush_bytes,
            linger: config.linger,
            write_timeout: config.write_timeout,
            buf: BytesMut::with_capacity(config.flush_bytes * 2),
            compression: config.compression,
            wire: BytesMut::new(),
            in_flight: Vec::new(),
        }
    }

    pub(crate) async fn serve(
        &mut self,
        halves: Halves,
        queue: &DestinationQueue,
        signals: &DestinationSignals,
        episode: &mut FailureEpisode,
    ) -> Served {
        let Halves {
            mut reader,
            mut writer,
        } = halves;
        let mut unconfirmed = Unconfirmed::default();
        // Every connection is a new compressed stream (a gzip header, a zstd stream).
        let mut compressor = Compressor::new(self.compression);
        let connected_at = Instant::now();
        let name = self.name.clone();
        let confirm = |unconfirmed: &mut Unconfirmed, episode: &mut FailureEpisode| {
            if unconfirmed.confirm(queue) {
                episode.delivered(&name, connected_at);
            }
        };
        loop {
            let first = tokio::select! {
                biased;
                _ = signals.abort.cancelled() => {
                    unconfirmed.requeue(queue);
                    return Served::Aborted;
                }
                b = queue.pop() => b,
                e = watch_eof(&mut reader) => {
                    unconfirmed.requeue(queue);
                    return Served::Lost(e);
                }
                // Idle with a write outstanding and the peer still there: it was received.
                _ = tokio::time::sleep(CONFIRM_IDLE), if !unconfirmed.is_empty() => {
                    confirm(&mut unconfirmed, episode);
                    continue;
                }
            };
            let Some(first) = first else {
                if let Err(e) = check_alive(&mut reader) {
                    unconfirmed.requeue(queue);
                    return Served::Lost(e);
                }
                confirm(&mut unconfirmed, episode);
                let _ = writer.shutdown().await;
                return Served::Drained;
            };
            gather(
                queue,
                first,
                self.flush_bytes,
                self.linger,
                &mut self.in_flight,
            )
            .await;
            // The previous write is confirmed only if the peer has not closed since: a carbon
            // cache that went away between two writes would otherwise silently swallow the
            // first write after its close.
            if let Err(e) = check_alive(&mut reader) {
                // Each requeue goes to the front: newer batches first, so the older
                // unconfirmed write ends up ahead of them (FIFO, and the queue's in-flight
                // bookkeeping expects the most recent batches back first).
                queue.requeue(std::mem::take(&mut self.in_flight));
                unconfirmed.requeue(queue);
                return Served::Lost(e);
            }
            confirm(&mut unconfirmed, episode);
            let encoded = self.encoder.encode(&self.in_flight, &mut self.buf);
            let limits = Limits {
                timeout: self.write_timeout,
                known_dead: episode.is_active(),
            };
            let wire = match &mut compressor {
                Some(c) => {
                    self.wire.clear();
                    match c.compress(&self.buf, &mut self.wire) {
                        Ok(()) => Ok(&self.wire[..]),
                        Err(e) => Err(e),
                    }
                }
                None => Ok(&self.buf[..]),
            };
            let write = match wire {
                Ok(bytes) => {
                    write_and_flush(&mut writer, bytes, limits, signals, queue.stats()).await
                }
                Err(e) => Err(WriteError::Io(e)),
            };
            self.buf.clear();
            let Err(e) = write else {
                unconfirmed.hold(&mut self.in_flight, encoded);
                continue;
            };
            // The peer may have part of the write: it is requeued whole and sent again after
            // the reconnect (at-least-once); at shutdown, counting it as still queued is the
            // conservative choice.
            queue.requeue(std::mem::take(&mut self.in_flight));
            return match e {
                WriteError::Io(e) => Served::Lost(e),
                WriteError::Stalled(e) => Served::Hung(e),
                WriteError::GaveUp => Served::GaveUp,
                WriteError::Aborted => Served::Aborted,
            };
        }
    }
}

/// Why [`write_and_flush`] stopped.
enum WriteError {
    Io(std::io::Error),
    /// No progress for the write timeout.
    Stalled(std::io::Error),
    /// Shutdown is draining and the destination is known dead.
    GaveUp,
    /// The grace period is over.
    Aborted,
}

/// How long one write may stall.
#[derive(Clone, Copy)]
struct Limits {
    /// The write timeout (`None`: no limit).
    timeout: Option<Duration>,
    /// The destination is in a failure episode: during shutdown it gets
    /// [`DEAD_AT_SHUTDOWN`] at most.
    known_dead: bool,
}

impl Limits {
    /// The limit, shortened or not.
    fn limit(self, shortened: bool) -> Option<Duration> {
        match (self.timeout, shortened) {
            (Some(t), true) => Some(t.min(DEAD_AT_SHUTDOWN)),
            (None, true) => Some(DEAD_AT_SHUTDOWN),
            (t, false) => t,
        }
    }
}

/// One write, pushed all the way to the socket (TLS buffers records until flushed). Each
/// `write` and the `flush` must make progress within the limit; time spent waiting for the
/// peer to take bytes is recorded in `stats` (the full wait judges by it).
async fn write_and_flush(
    writer: &mut Writer,
    bytes: &[u8],
    limits: Limits,
    signals: &DestinationSignals,
    stats: &DestinationStats,
) -> Result<(), WriteError> {
    let mut off = 0;
    while off < bytes.len() {
        let n = timed(writer.write(&bytes[off..]), limits, signals, stats).await?;
        if n == 0 {
            return Err(WriteError::Io(std::io::ErrorKind::WriteZero.into()));
        }
        off += n;
    }
    timed(writer.flush(), limits, signals, stats).await
}

/// Runs one I/O step (`write` or `flush`, both cancel-safe) within the limit; shortens the
/// limit when shutdown starts draining while the destination is known dead. A step that is
/// not ready at its first poll waits on the peer (the socket's send buffer is full): that
/// time goes to `stats` as the peer's, and a step that completes at once costs no clock read.
async fn timed<T>(
    step: impl std::future::Future<Output = std::io::Result<T>>,
    limits: Limits,
    signals: &DestinationSignals,
    stats: &DestinationStats,
) -> Result<T, WriteError> {
    tokio::pin!(step);
    let first = std::future::poll_fn(|cx| Poll::Ready(step.as_mut().poll(cx))).await;
    if let Poll::Ready(r) = first {
        return r.map_err(WriteError::Io);
    }
    super::outbox::on_peer(stats, timed_wait(step, limits, signals)).await
}

/// The rest of [`timed`]: the step waits on the peer.
async fn timed_wait<T>(
    mut step: Pin<&mut impl std::future::Future<Output = std::io::Result<T>>>,
    limits: Limits,
    signals: &DestinationSignals,
) -> Result<T, WriteError> {
    loop {
        let shortened = limits.known_dead && signals.drain.is_cancelled();
        let limit = limits.limit(shortened);
        let stall = async {
            match limit {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = signals.abort.cancelled() => return Err(WriteError::Aborted),
            r = &mut step => return r.map_err(WriteError::Io),
            // Shutdown began: start over with the shorter limit.
            _ = signals.drain.cancelled(), if limits.known_dead && !shortened => continue,
            _ = stall => {
                if shortened {
                    return Err(WriteError::GaveUp);
                }
                return Err(WriteError::Stalled(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("write made no progress for {:?}", limit.unwrap_or_default()),
                )));
            }
        }
    }
}

/// How long an idle connection must stay open after a write before that write counts as sent.
const CONFIRM_IDLE: Duration = Duration::from_millis(50);

/// Batches written to the socket but not yet known to have reached a live peer.
///
/// carbon's protocols have no acknowledgement. A write succeeds once the kernel has the bytes;
/// if the cache closed its end just before, those bytes are lost with no error. So the last
/// write is held here and counted as sent only when the connection is seen alive afterwards
/// (before the next write, or after [`CONFIRM_IDLE`] of quiet); if the peer is gone by then, the
/// batches go back to the queue. Delivery is therefore at-least-once: a cache that processed the
/// write and then closed gets it again after the reconnect.
#[derive(Default)]
struct Unconfirmed {
    batches: Vec<Batch>,
    encoded: Encoded,
}

impl Unconfirmed {
    fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Holds the write of `batches` (moved out: both vectors keep their room, so neither
    /// grows again on the next write).
    fn hold(&mut self, batches: &mut Vec<Batch>, encoded: Encoded) {
        self.batches.append(batches);
        self.encoded = encoded;
    }

    /// Counts the held write as sent; true if there was one.
    fn confirm(&mut self, queue: &DestinationQueue) -> bool {
        if self.batches.is_empty() {
            return false;
        }
        queue.recycle(self.batches.drain(..));
        let e = self.encoded;
        queue.settle(
            e.datapoints,
            e.messages,
            &[(DestinationDropReason::Unencodable, e.unencodable)],
        );
        true
    }

    fn requeue(&mut self, queue: &DestinationQueue) {
        if !self.batches.is_empty() {
            queue.requeue(std::mem::take(&mut self.batches));
        }
    }
}

/// `Ok` while the peer has not closed the connection (checked without waiting). Whatever the
/// peer sent is read and ignored (carbon-cache sends nothing; TLS may carry session tickets).
fn check_alive(reader: &mut Reader) -> std::io::Result<()> {
    let mut scratch = [0u8; 512];
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        let mut buf = ReadBuf::new(&mut scratch);
        match Pin::new(&mut *reader).poll_read(&mut cx, &mut buf) {
            Poll::Pending => return Ok(()),
            Poll::Ready(Ok(())) if buf.filled().is_empty() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "destination closed the connection",
                ));
            }
            Poll::Ready(Ok(())) => continue,
            Poll::Ready(Err(e)) => return Err(e),
        }
    }
}

/// Resolves when the peer closes the connection or it errors. carbon-cache never sends data;
/// anything it does send is read and ignored.
async fn watch_eof(reader: &mut Reader) -> std::io::Error {
    let mut scratch = [0u8; 512];
    loop {
        match reader.read(&mut scratch).await {
            Ok(0) => {
                return std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "destination closed the connection",
                );
            }
            Ok(_) => continue,
            Err(e) => return e,
        }
    }
}
