//! TCP accept loop, the read loop every TCP connection uses, and the plaintext handler.
//!
//! With `listen.tls` (or a receiver's own TLS: a carbon-c-relay `ssl` listener) every accepted
//! connection first completes a TLS handshake (in its own task, bounded by
//! [`TLS_HANDSHAKE_TIMEOUT`]); a client that does not speak TLS, or presents no acceptable
//! certificate when `client_ca` is set, is closed before anything is read. A compressed
//! stream is decompressed inside TLS.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use bytes::BufMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::ReceiverContext;
use super::admission::Admitted;
use super::buffer::{READ_BUFFER, ReadBuffer};
use super::listener::{Accepted, StreamListener};
use super::stream::ClientStream;
use crate::episode::{Episode, Line};
use crate::ingest::{Ingestor, Source};
use crate::protocol::line::LineFramer;

/// One accepted client connection and what its handler needs.
#[derive(Debug)]
pub(crate) struct Connection {
    /// The socket (after the TLS handshake when the receivers use TLS).
    pub(crate) stream: ClientStream,
    /// What every receiver shares.
    pub(crate) ctx: ReceiverContext,
    /// Its place under the connection limit (`None` for connections taken from the backlog
    /// at shutdown).
    pub(crate) admitted: Option<Admitted>,
}

/// First pause after a failed `accept`; it doubles up to [`ACCEPT_BACKOFF_MAX`].
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause after failed `accept`s.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long the accept loop waits for an evicted connection to leave.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// Accepts connections until `ctx.accepting` is cancelled, running `handler` for each on the
/// task tracker; then takes what is already in the backlog and returns the listener (a
/// reload that only changes settings serves it again).
///
/// At the connection limit the connection idle the longest makes room (see
/// [`admission`](super::admission)); with none idle the new one is refused. Both are counted
/// and logged once per episode. A failed `accept` (out of file descriptors) is counted and
/// retried after a pause that doubles up to a second; out of descriptors, the idlest
/// connection is closed to give one back.
pub(crate) async fn accept_loop<F, Fut>(
    mut listener: StreamListener,
    ctx: ReceiverContext,
    source: Source,
    handler: F,
) -> StreamListener
where
    F: Fn(Connection) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let stats = ctx.pipeline.stats().clone();
    let handler = std::sync::Arc::new(handler);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut accept_errors = Episode::default();
    let mut refusals = Episode::default();
    loop {
        let accepted = tokio::select! {
            biased;
            a = listener.accept() => a,
            _ = ctx.accepting.cancelled() => {
                // Connections already in the backlog have sent data the client believes was
                // accepted: take them too (at shutdown their handlers drain), then stop.
                while let Ok(Ok(stream)) =
                    tokio::time::timeout(Duration::ZERO, listener.accept()).await
                {
                    // At shutdown every one is drained (the backlog bounds them); a reload
                    // that only rebinds keeps the connection limit.
                    let admitted = ctx.admission.try_admit();
                    if admitted.is_none() && !ctx.shutdown.is_cancelled() {
                        stats.connection_rejected(source);
                        continue;
                    }
                    spawn_connection(stream, admitted, &ctx, source, &handler);
                }
                return listener;
            }
        };
        let stream = match accepted {
            Ok(stream) => {
                backoff = ACCEPT_BACKOFF_MIN;
                if let Some(Line::Ended(c)) = accept_errors.cleared(std::time::Instant::now()) {
                    info!(source = source.as_str(), errors = c.occurrences, over = ?c.over,
                        "accepting connections again");
                }
                stream
            }
            Err(e) => {
                stats.accept_failed(source);
                match accept_errors.occurred(1, std::time::Instant::now()) {
                    Some(Line::Started(_)) => warn!(source = source.as_str(), error = %e,
                        "accept failed; backing off"),
                    Some(Line::Ongoing(c)) => warn!(source = source.as_str(), error = %e,
                        errors = c.occurrences, over = ?c.over, "accept still failing"),
                    _ => {}
                }
                if e.raw_os_error().is_some_and(is_fd_exhaustion) {
                    // An idle client gives its descriptor back to the clients queued behind.
                    ctx.admission.evict_idlest();
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = ctx.accepting.cancelled() => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let admitted = match ctx.admission.try_admit() {
            Some(a) => Some(a),
            None if ctx.admission.evict_idlest() => ctx.admission.admit_within(EVICTION_WAIT).await,
            None => None,
        };
        let Some(admitted) = admitted else {
            stats.connection_rejected(source);
            match refusals.occurred(1, std::time::Instant::now()) {
                Some(Line::Started(_)) => warn!(source = source.as_str(),
                    idle_needed = ?ctx.admission.min_idle(),
                    "connection limit reached and no connection idle: refusing new connections"),
                Some(Line::Ongoing(c)) => warn!(source = source.as_str(), refused = c.occurrences,
                    over = ?c.over, "still refusing connections at the limit"),
                _ => {}
            }
            drop(stream);
            continue;
        };
        if let Some(Line::Ended(c)) = refusals.cleared(std::time::Instant::now()) {
            info!(source = source.as_str(), refused = c.occurrences, over = ?c.over,
                "admitting connections again");
        }
        spawn_connection(stream, Some(admitted), &ctx, source, &handler);
    }
}

/// Runs `handler` for an accepted connection on the task tracker (after the TLS handshake
/// when the receivers use TLS), counted as an active connection while it runs.
fn spawn_connection<F, Fut>(
    stream: Accepted,
    admitted: Option<Admitted>,
    ctx: &ReceiverContext,
    source: Source,
    handler: &std::sync::Arc<F>,
) where
    F: Fn(Connection) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if let Accepted::Tcp(s) = &stream {
        let _ = s.set_nodelay(true);
    }
    let ctx = ctx.clone();
    let handler = handler.clone();
    ctx.tracker.clone().spawn(async move {
        let stats = ctx.pipeline.stats().clone();
        stats.connection_delta(source, true);
        if let Some(stream) = handshake(stream, &ctx, source, admitted.as_ref()).await {
            handler(Connection {
                stream,
                ctx,
                admitted,
            })
            .await;
        }
        stats.connection_delta(source, false);
    });
}

/// Longest a client may take to complete the TLS handshake.
pub(crate) const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection as the handlers read it: the TLS handshake done when the receivers use TLS.
/// `None` when the handshake failed or timed out (logged at debug level: scanners and clients
/// speaking plaintext to a TLS port are common and carry no datapoints).
async fn handshake(
    stream: Accepted,
    ctx: &ReceiverContext,
    source: Source,
    admitted: Option<&Admitted>,
) -> Option<ClientStream> {
    let Some(tls) = &ctx.tls else {
        return Some(match stream {
            Accepted::Tcp(s) => ClientStream::Plain(s),
            Accepted::Other(s) => ClientStream::Other(s),
        });
    };
    let peer = stream.peer_addr();
    let stats = ctx.pipeline.stats();
    // A connection in its handshake holds an admitted slot like any other: it can be closed
    // to admit a newcomer (its slot counts as silent since it was admitted), so clients that
    // never finish their handshake cannot lock the others out.
    let outcome = tokio::select! {
        r = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(stream)) => r,
        _ = evicted(admitted) => {
            stats.connection_evicted(source);
            stats.tls_handshake_failed(source);
            return None;
        }
        _ = ctx.shutdown.cancelled() => return None,
    };
    match outcome {
        Ok(Ok(s)) => Some(ClientStream::Tls(Box::new(s))),
        Ok(Err(e)) => {
            stats.tls_handshake_failed(source);
            debug!(source = source.as_str(), ?peer, error = %e, "TLS handshake failed; connection closed");
            None
        }
        Err(_) => {
            stats.tls_handshake_failed(source);
            debug!(
                source = source.as_str(),
                ?peer,
                "TLS handshake timed out; connection closed"
            );
            None
        }
    }
}

/// `EMFILE` / `ENFILE`: the process or the system is out of file descriptors.
fn is_fd_exhaustion(errno: i32) -> bool {
    errno == nix::errno::Errno::EMFILE as i32 || errno == nix::errno::Errno::ENFILE as i32
}

/// Outcome of one read on a client connection.
#[derive(Debug)]
pub(crate) enum Read {
    /// Bytes arrived.
    Data,
    /// Peer closed, or shutdown drained what was there.
    Eof,
    /// Idle timeout.
    Idle,
    /// Closed to make room for a new connection at the limit.
    Evicted,
    /// The relay is shutting down (internal: `read_more` drains instead of returning it).
    Shutdown,
    /// Socket error.
    Failed(io::Error),
}

impl Read {
    /// Counts and logs why a connection ended (every outcome but `Data`).
    pub(crate) fn note_end(&self, source: Source, ctx: &ReceiverContext) {
        let stats = ctx.pipeline.stats();
        match self {
            Read::Idle => stats.connection_idle_closed(source),
            Read::Evicted => stats.connection_evicted(source),
            Read::Failed(e) => debug!(source = source.as_str(), error = %e, "connection failed"),
            Read::Data | Read::Eof | Read::Shutdown => {}
        }
    }
}

/// After shutdown, how long a connection waits for more of what the client already sent.
const SHUTDOWN_DRAIN_WAIT: Duration = Duration::from_millis(100);

/// Waits for `deadline`, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the connection is evicted (never for one without a slot).
pub(crate) async fn evicted(admitted: Option<&Admitted>) {
    match admitted {
        Some(a) => a.slot().evicted().cancelled().await,
        None => std::future::pending().await,
    }
}

/// Reads more bytes into `rb`, honouring the idle timeout, eviction and shutdown. A plain TCP
/// client with nothing to send costs no buffer while the connection waits (a TLS connection
/// keeps its buffer: the TLS layer may hold decrypted bytes the socket does not show; so does
/// a connection of another listener, which has no readiness to wait on without reading). After
/// shutdown it keeps taking what the client already sent (each read waits at most
/// `SHUTDOWN_DRAIN_WAIT`), then reports `Eof`; the caller's grace period bounds the total.
pub(crate) async fn read_more(
    stream: &mut ClientStream,
    rb: &mut ReadBuffer,
    ctx: &ReceiverContext,
    admitted: Option<&Admitted>,
) -> Read {
    if ctx.shutdown.is_cancelled() {
        return drain_read(stream, rb).await;
    }
    let deadline = ctx.idle_timeout.map(|t| Instant::now() + t);
    let read = match &mut *stream {
        ClientStream::Plain(s) => read_plain(s, rb, ctx, admitted, deadline).await,
        other => {
            rb.prepare_read();
            tokio::select! {
                biased;
                r = other.read_buf(rb.bytes()) => match r {
                    Ok(0) => Read::Eof,
                    Ok(_) => {
                        rb.after_read();
                        Read::Data
                    }
                    Err(e) => Read::Failed(e),
                },
                _ = ctx.shutdown.cancelled() => Read::Shutdown,
                _ = evicted(admitted) => Read::Evicted,
                _ = until(deadline) => Read::Idle,
            }
        }
    };
    match read {
        Read::Shutdown => drain_read(stream, rb).await,
        Read::Data => {
            if let Some(a) = admitted {
                a.touch();
            }
            Read::Data
        }
        other => other,
    }
}

/// [`read_more`] on a plain TCP connection: read what is waiting; with nothing waiting,
/// release an empty buffer and wait for the socket to become readable.
async fn read_plain(
    stream: &mut TcpStream,
    rb: &mut ReadBuffer,
    ctx: &ReceiverContext,
    admitted: Option<&Admitted>,
    deadline: Option<Instant>,
) -> Read {
    // With a buffer in hand, data may already be waiting: read before waiting (unless the
    // socket was just found empty).
    let mut try_now = rb.allocated() > 0 && !rb.take_drained();
    loop {
        if try_now {
            rb.prepare_read();
            match stream.try_read_buf(rb.bytes()) {
                Ok(0) => return Read::Eof,
                Ok(_) => {
                    rb.after_read();
                    return Read::Data;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Read::Failed(e),
            }
            // Nothing waiting: a silent client holds no buffer.
            rb.release_if_empty();
        }
        tokio::select! {
            biased;
            r = stream.readable() => {
                if let Err(e) = r {
                    return Read::Failed(e);
                }
            }
            _ = ctx.shutdown.cancelled() => return Read::Shutdown,
            _ = evicted(admitted) => return Read::Evicted,
            _ = until(deadline) => return Read::Idle,
        }
        try_now = true;
    }
}

async fn drain_read(stream: &mut ClientStream, rb: &mut ReadBuffer) -> Read {
    rb.prepare_read();
    match tokio::time::timeout(SHUTDOWN_DRAIN_WAIT, stream.read_buf(rb.bytes())).await {
        Ok(Ok(n)) if n > 0 => {
            rb.after_read();
            Read::Data
        }
        _ => Read::Eof,
    }
}

/// Flushes what `ingestor` holds to the queues. A flush that has to wait (a queue full)
/// compacts the read buffer first ([`ReadBuffer::compact`]): connections held back by a
/// full queue hold their unconsumed remainders while they wait, not a read buffer each.
pub(super) async fn flush_lean(ingestor: &mut Ingestor, rb: &mut ReadBuffer) {
    let mut flush = pin!(ingestor.flush());
    let first = std::future::poll_fn(|cx| Poll::Ready(flush.as_mut().poll(cx))).await;
    if first.is_pending() {
        rb.compact();
        flush.await;
    }
}

/// Most reads a plaintext connection parses before it flushes ([`more_before_flush`]).
const MAX_READS_PER_FLUSH: usize = 4;

/// Least room worth another read before a flush ([`more_before_flush`]).
const MIN_MORE: usize = 4 << 10;

/// After a read that filled its buffer (`full`: the client is ahead of the relay), reads
/// what the client already has waiting, without waiting, while each read fills the room it
/// is given and the ingestor has room for more ([`Ingestor::read_room`]: what waits for the
/// flush stays within one read's bound), up to [`MAX_READS_PER_FLUSH`] reads in all. `parse`
/// feeds each read to the ingestor. Returns how the connection ended if a read found it
/// ended; the caller flushes first either way. A client far ahead then has its flushes hand
/// each queue larger batches; clients that keep up (reads that do not fill the buffer) flush
/// after every read, so a thousand of them do not each hold several reads.
fn more_before_flush(
    stream: &mut ClientStream,
    rb: &mut ReadBuffer,
    ingestor: &mut Ingestor,
    admitted: Option<&Admitted>,
    mut full: bool,
    mut parse: impl FnMut(&mut ReadBuffer, &mut Ingestor),
) -> Option<Read> {
    let ClientStream::Plain(s) = stream else {
        return None;
    };
    for _ in 1..MAX_READS_PER_FLUSH {
        let room = ingestor.read_room(READ_BUFFER, rb.len());
        if !full || room < MIN_MORE {
            return None;
        }
        rb.prepare_read();
        match s.try_read_buf(&mut rb.bytes().limit(room)) {
            Ok(0) => return Some(Read::Eof),
            Ok(n) => {
                full = n == room || rb.is_full();
                rb.after_read();
                if let Some(a) = admitted {
                    a.touch();
                }
                parse(rb, ingestor);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                rb.note_drained();
                return None;
            }
            Err(e) => return Some(Read::Failed(e)),
        }
    }
    None
}

/// A plaintext connection's ingestor; when the routing writes the client's address (a
/// carbon-c-relay `file ip` cluster) it carries it (one system call per connection, only then).
pub(super) fn line_ingestor(ctx: &ReceiverContext, stream: &ClientStream) -> Ingestor {
    let mut ingestor = ctx.pipeline.ingestor(Source::LineTcp);
    if ingestor.wants_client() {
        ingestor.set_client(stream.peer_ip());
    }
    ingestor
}

/// Serves one plaintext connection (through a decompressor when its receiver has one).
pub(crate) async fn serve_line(conn: Connection) {
    if let Some(d) = crate::protocol::compression::Decompressor::new(
        conn.ctx.compression,
        conn.ctx.max_decompressed_bytes,
    ) {
        return super::compressed::serve(conn, d).await;
    }
    let Connection {
        mut stream,
        ctx,
        admitted,
    } = conn;
    let source = Source::LineTcp;
    let mut ingestor = line_ingestor(&ctx, &stream);
    let mut framer = LineFramer::new(ctx.max_line_length);
    let mut rb = ReadBuffer::new(ctx.pipeline.stats().clone());
    loop {
        match read_more(&mut stream, &mut rb, &ctx, admitted.as_ref()).await {
            Read::Data => {
                // A socket reader flushes after every few reads (at most one read's bound
                // pending), so the flush hint never applies.
                let full = rb.is_full();
                let mut parse = |rb: &mut ReadBuffer, ingestor: &mut Ingestor| {
                    framer.feed_batched(rb.bytes(), |lines| ingestor.lines(lines));
                    rb.shrink();
                };
                parse(&mut rb, &mut ingestor);
                let ended = more_before_flush(
                    &mut stream,
                    &mut rb,
                    &mut ingestor,
                    admitted.as_ref(),
                    full,
                    parse,
                );
                flush_lean(&mut ingestor, &mut rb).await;
                if let Some(end) = ended {
                    end.note_end(source, &ctx);
                    break;
                }
            }
            end => {
                end.note_end(source, &ctx);
                break;
            }
        }
    }
    if let Some(reason) = framer.finish(rb.bytes()) {
        ingestor.reject(reason);
    }
    ingestor.flush().await;
}
