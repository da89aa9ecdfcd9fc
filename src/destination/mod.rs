//! One task per destination: queue → socket.
//!
//! The task connects (capped exponential backoff with jitter between attempts), then loops:
//! take the oldest batch, keep taking while less than `flush_bytes` is encoded (waiting at most
//! `linger` for more), encode pickle messages of at most `max_datapoints_per_message` (or
//! lines), write them in one `write_all`, and acknowledge the batches. When a write fails the
//! batches go back to the front of the queue and are sent again after the reconnect, so a
//! datapoint is delivered at least once unless the peer accepted the bytes and then lost them
//! (carbon's protocol has no acknowledgements).
//!
//! While idle the task also watches the socket for EOF, so a carbon-cache that went away is
//! noticed before the next write rather than by losing that write. A slow or dead destination
//! only ever fills its own queue.
//!
//! ## Dead peers
//!
//! A carbon-cache that stops reading (a hung process, a silent partition) keeps its TCP
//! connection "up" for the kernel's retransmission timeout (~15 minutes). So every write must
//! make progress within `write_timeout` (10 s by default): a write that does not marks the
//! connection dead (counted as a write timeout), its batches go back to the queue (which fills
//! and spills like for any outage) and the task reconnects with backoff. TCP keepalive
//! (`keepalive`) finds a peer that vanished while the connection was idle. A hung destination
//! only ever holds its own task and queue, never another destination's or a receiver.
//!
//! Failures come in *episodes*: from the first failure until a connection has stayed healthy
//! for [`RECOVERY_WINDOW`]. The first failure of each kind in an episode (cannot connect,
//! connection lost, write timeout) is logged as a warning, the rest at debug level, and the end
//! of the episode once, with its counts. At shutdown a destination in an episode is known
//! dead: it stops at once (its queue is spilled or counted as undelivered) instead of holding
//! shutdown for the whole grace period; a write that stalls during shutdown gets
//! [`DEAD_AT_SHUTDOWN`] before the destination gives up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::batch::Batch;
use crate::protocol::{line, pickle};
use crate::queue::{DestinationQueue, QueueLimits};
use crate::router::DestinationSpec;

/// What a destination is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputProtocol {
    /// carbon's pickle protocol 2, length-prefixed (carbon-cache's `PICKLE_RECEIVER_PORT`).
    #[default]
    Pickle,
    /// Plaintext lines (carbon-cache's `LINE_RECEIVER_PORT`).
    Line,
}

/// Settings of one destination.
#[derive(Clone, Debug, PartialEq)]
pub struct DestinationConfig {
    /// Where it is and its ring identity.
    pub spec: DestinationSpec,
    /// Wire format.
    pub protocol: OutputProtocol,
    /// Largest pickle message, in datapoints.
    pub max_datapoints_per_message: usize,
    /// Queue bounds and full policy.
    pub queue: QueueLimits,
    /// Write once this many bytes are encoded.
    pub flush_bytes: usize,
    /// Longest wait for more data before a smaller write.
    pub linger: Duration,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// First reconnect delay.
    pub backoff_min: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
    /// A write making no progress for this long marks the connection dead (`None`: never).
    pub write_timeout: Option<Duration>,
    /// TCP keepalive idle time (`None`: no keepalive).
    pub keepalive: Option<Duration>,
    /// The disk tier (`None`: memory only).
    pub spill: Option<crate::queue::SpillSettings>,
}

/// Capped exponential backoff with jitter (each delay uniformly in `[d/2, d]`).
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    /// Starts at `min`, doubles to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            current: min,
        }
    }

    /// The next delay to wait.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        d.mul_f64(0.5 + fastrand::f64() * 0.5)
    }

    /// After a success.
    pub fn reset(&mut self) {
        self.current = self.min;
    }
}

/// Signals a destination task obeys.
#[derive(Clone, Debug, Default)]
pub struct DestinationSignals {
    /// Cancelled when shutdown starts draining the queues: a destination known dead stops
    /// now instead of waiting for the grace period.
    pub drain: CancellationToken,
    /// Cancelled when the shutdown grace period is over: stop now, leave the queue as it is.
    pub abort: CancellationToken,
}

/// How long a connection must stay healthy before a failure episode is over.
pub const RECOVERY_WINDOW: Duration = Duration::from_secs(30);

/// During shutdown, how long a destination in a failure episode may stall a write before it
/// gives up.
pub const DEAD_AT_SHUTDOWN: Duration = Duration::from_secs(1);

/// What went wrong with a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    Connect,
    Lost,
    WriteTimeout,
}

/// A destination's failure episode: from the first failure until a connection stays healthy
/// for [`RECOVERY_WINDOW`]. Logs the first failure of each kind and the recovery.
#[derive(Debug, Default)]
struct Episode {
    since: Option<Instant>,
    counts: [u64; 3],
}

impl Episode {
    fn is_active(&self) -> bool {
        self.since.is_some()
    }

    fn failed(
        &mut self,
        name: &str,
        kind: Failure,
        error: &std::io::Error,
        write_timeout: Option<Duration>,
    ) {
        self.since.get_or_insert_with(Instant::now);
        let n = &mut self.counts[kind as usize];
        *n += 1;
        if *n > 1 {
            debug!(destination = %name, error = %error, ?kind, "destination still failing");
            return;
        }
        match kind {
            Failure::Connect => warn!(destination = %name, error = %error,
                "cannot connect; queueing until it is reachable (further failures of this episode at debug level)"),
            Failure::Lost => warn!(destination = %name, error = %error,
                "connection lost; unsent data stays queued (further losses of this episode at debug level)"),
            Failure::WriteTimeout => warn!(destination = %name,
                write_timeout_ms = write_timeout.map_or(0, |d| d.as_millis() as u64),
                "destination not reading: a write made no progress for the write timeout; connection declared dead, its data requeued (further timeouts of this episode at debug level)"),
        }
    }

    fn recovered(&mut self, name: &str) {
        if let Some(since) = self.since.take() {
            let [connect, lost, timeouts] = std::mem::take(&mut self.counts);
            info!(destination = %name, failed_connects = connect, lost_connections = lost,
                write_timeouts = timeouts, seconds = since.elapsed().as_secs(),
                "destination recovered");
        }
    }
}

/// Runs one destination until its queue is closed and drained, `signals.abort` fires, or it
/// is known dead when shutdown drains the queues.
pub async fn run(
    config: DestinationConfig,
    queue: Arc<DestinationQueue>,
    signals: DestinationSignals,
) {
    let name = config.spec.to_string();
    let stats = queue.stats().clone();
    let mut backoff = Backoff::new(config.backoff_min, config.backoff_max);
    let mut sender = Sender::new(&config);
    let mut episode = Episode::default();
    loop {
        if queue_closed_and_empty(&queue) {
            return;
        }
        let connected = tokio::select! {
            _ = signals.abort.cancelled() => return,
            c = connect(&config) => c,
        };
        let failure = match connected {
            Ok(stream) => {
                debug!(destination = %name, "connected");
                backoff.reset();
                stats.set_connected(true);
                let outcome = sender.serve(stream, &queue, &signals, &mut episode).await;
                stats.set_connected(false);
                match outcome {
                    Served::Drained | Served::Aborted => return,
                    Served::GaveUp => {
                        warn!(destination = %name, "known dead at shutdown: not waiting for the grace period");
                        return;
                    }
                    Served::Lost(e) => {
                        stats.connect_failed(&e);
                        (Failure::Lost, e)
                    }
                    Served::Hung(e) => {
                        stats.write_timed_out(&e);
                        (Failure::WriteTimeout, e)
                    }
                }
            }
            Err(e) => {
                stats.connect_failed(&e);
                (Failure::Connect, e)
            }
        };
        episode.failed(&name, failure.0, &failure.1, config.write_timeout);
        if signals.drain.is_cancelled() {
            warn!(destination = %name, "known dead at shutdown: not waiting for the grace period");
            return;
        }
        let delay = backoff.next_delay();
        tokio::select! {
            _ = signals.abort.cancelled() => return,
            _ = signals.drain.cancelled() => {
                warn!(destination = %name, "known dead at shutdown: not waiting for the grace period");
                return;
            }
            _ = tokio::time::sleep(delay) => {}
            // Drained and closed while down: nothing left to deliver.
            _ = wait_closed_and_empty(&queue) => return,
        }
    }
}

fn queue_closed_and_empty(queue: &DestinationQueue) -> bool {
    queue.is_closed() && queue.queued() == 0
}

async fn wait_closed_and_empty(queue: &DestinationQueue) {
    loop {
        if queue_closed_and_empty(queue) {
            return;
        }
        queue.changed().await;
    }
}

async fn connect(config: &DestinationConfig) -> std::io::Result<TcpStream> {
    let target = (config.spec.host.as_str(), config.spec.port);
    let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(target))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    if let Some(idle) = config.keepalive {
        let probes = socket2::TcpKeepalive::new()
            .with_time(idle)
            .with_interval((idle / 3).max(Duration::from_secs(1)))
            .with_retries(3);
        socket2::SockRef::from(&stream).set_tcp_keepalive(&probes)?;
    }
    Ok(stream)
}

enum Served {
    /// Queue closed and empty: done.
    Drained,
    /// Grace period over.
    Aborted,
    /// Shutdown is draining and the destination is known dead; in-flight data was requeued.
    GaveUp,
    /// Write or read failed; in-flight data was requeued.
    Lost(std::io::Error),
    /// A write made no progress for the write timeout; in-flight data was requeued.
    Hung(std::io::Error),
}

/// Why [`write_all_timed`] stopped.
enum WriteError {
    Io(std::io::Error),
    /// No progress for the write timeout.
    Stalled(std::io::Error),
    /// Shutdown is draining and the destination is known dead.
    GaveUp,
    /// The grace period is over.
    Aborted,
}

/// Writes all of `buf`; each `write` must make progress within `timeout` (shortened to
/// [`DEAD_AT_SHUTDOWN`] when shutdown drains and the destination is in a failure episode).
async fn write_all_timed(
    writer: &mut OwnedWriteHalf,
    buf: &[u8],
    timeout: Option<Duration>,
    signals: &DestinationSignals,
    known_dead: bool,
) -> Result<(), WriteError> {
    let mut off = 0;
    while off < buf.len() {
        let limit = match (timeout, known_dead && signals.drain.is_cancelled()) {
            (Some(t), true) => Some(t.min(DEAD_AT_SHUTDOWN)),
            (None, true) => Some(DEAD_AT_SHUTDOWN),
            (t, false) => t,
        };
        let stall = async {
            match limit {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        // `write` is cancel-safe: when another branch wins, nothing was written.
        let n = tokio::select! {
            biased;
            _ = signals.abort.cancelled() => return Err(WriteError::Aborted),
            r = writer.write(&buf[off..]) => r.map_err(WriteError::Io)?,
            _ = signals.drain.cancelled(), if known_dead && limit != Some(DEAD_AT_SHUTDOWN) => continue,
            _ = stall => {
                if known_dead && signals.drain.is_cancelled() {
                    return Err(WriteError::GaveUp);
                }
                return Err(WriteError::Stalled(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("write made no progress for {:?}", limit.unwrap_or_default()),
                )));
            }
        };
        if n == 0 {
            return Err(WriteError::Io(std::io::ErrorKind::WriteZero.into()));
        }
        off += n;
    }
    Ok(())
}

/// Encoding state reused across connections.
struct Sender {
    name: String,
    protocol: OutputProtocol,
    per_message: usize,
    flush_bytes: usize,
    linger: Duration,
    write_timeout: Option<Duration>,
    buf: BytesMut,
    in_flight: Vec<Batch>,
}

impl Sender {
    fn new(config: &DestinationConfig) -> Self {
        Self {
            name: config.spec.to_string(),
            protocol: config.protocol,
            per_message: config.max_datapoints_per_message,
            flush_bytes: config.flush_bytes,
            linger: config.linger,
            write_timeout: config.write_timeout,
            buf: BytesMut::with_capacity(config.flush_bytes * 2),
            in_flight: Vec::new(),
        }
    }

    async fn serve(
        &mut self,
        stream: TcpStream,
        queue: &DestinationQueue,
        signals: &DestinationSignals,
        episode: &mut Episode,
    ) -> Served {
        let (mut reader, mut writer) = stream.into_split();
        let mut unconfirmed = Unconfirmed::default();
        let connected_at = Instant::now();
        let name = self.name.clone();
        // A healthy connection ends a failure episode once it has lasted the recovery window.
        let confirm = |unconfirmed: &mut Unconfirmed, episode: &mut Episode| {
            if unconfirmed.confirm(queue)
                && episode.is_active()
                && connected_at.elapsed() >= RECOVERY_WINDOW
            {
                episode.recovered(&name);
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
                if let Err(e) = check_alive(&reader) {
                    unconfirmed.requeue(queue);
                    return Served::Lost(e);
                }
                confirm(&mut unconfirmed, episode);
                let _ = writer.shutdown().await;
                return Served::Drained;
            };
            let mut pending = first.size_bytes();
            self.in_flight.push(first);
            // Gather up to flush_bytes, lingering briefly for more when the queue runs dry.
            let mut lingered = false;
            while pending < self.flush_bytes {
                if let Some(b) = queue.try_pop() {
                    pending += b.size_bytes();
                    self.in_flight.push(b);
                    continue;
                }
                if lingered || self.linger.is_zero() || queue.is_closed() {
                    break;
                }
                lingered = true;
                tokio::select! {
                    _ = tokio::time::sleep(self.linger) => {}
                    _ = queue.changed() => {}
                }
            }
            // The previous write is confirmed only if the peer has not closed since: a carbon
            // cache that went away between two writes would otherwise silently swallow the
            // first write after its close.
            if let Err(e) = check_alive(&reader) {
                // Each requeue goes to the front: newer batches first, so the older
                // unconfirmed write ends up ahead of them (FIFO, and the queue's in-flight
                // bookkeeping expects the most recent batches back first).
                queue.requeue(std::mem::take(&mut self.in_flight));
                unconfirmed.requeue(queue);
                return Served::Lost(e);
            }
            confirm(&mut unconfirmed, episode);
            let (datapoints, messages) = self.encode();
            let write = write_all_timed(
                &mut writer,
                &self.buf,
                self.write_timeout,
                signals,
                episode.is_active(),
            )
            .await;
            self.buf.clear();
            if write.is_ok() {
                unconfirmed.hold(std::mem::take(&mut self.in_flight), datapoints, messages);
                continue;
            }
            // The peer may have part of the write: it is requeued whole and sent again after
            // the reconnect (at-least-once; counting it as still queued is the conservative
            // choice at shutdown).
            queue.requeue(std::mem::take(&mut self.in_flight));
            match write {
                Ok(()) => {}
                Err(WriteError::Io(e)) => return Served::Lost(e),
                Err(WriteError::Stalled(e)) => return Served::Hung(e),
                Err(WriteError::GaveUp) => return Served::GaveUp,
                Err(WriteError::Aborted) => return Served::Aborted,
            }
        }
    }

    /// Encodes every in-flight batch into `buf`; returns (datapoints, messages).
    fn encode(&mut self) -> (usize, usize) {
        let mut datapoints = 0;
        let mut messages = 0;
        match self.protocol {
            OutputProtocol::Line => {
                for b in &self.in_flight {
                    for dp in b.iter() {
                        line::encode_line(dp, &mut self.buf);
                    }
                    datapoints += b.len();
                }
                messages = usize::from(datapoints > 0);
            }
            OutputProtocol::Pickle => {
                let total: usize = self.in_flight.iter().map(Batch::len).sum();
                let mut points = self.in_flight.iter().flat_map(|b| b.iter());
                let mut left = total;
                while left > 0 {
                    let n = left.min(self.per_message);
                    pickle::encode_message(points.by_ref().take(n), &mut self.buf);
                    left -= n;
                    messages += 1;
                }
                datapoints = total;
            }
        }
        (datapoints, messages)
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
    datapoints: usize,
    messages: usize,
}

impl Unconfirmed {
    fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    fn hold(&mut self, batches: Vec<Batch>, datapoints: usize, messages: usize) {
        self.batches = batches;
        self.datapoints = datapoints;
        self.messages = messages;
    }

    /// Counts the held write as sent; true if there was one.
    fn confirm(&mut self, queue: &DestinationQueue) -> bool {
        if self.batches.is_empty() {
            return false;
        }
        self.batches.clear();
        queue.ack(self.datapoints, self.messages);
        true
    }

    fn requeue(&mut self, queue: &DestinationQueue) {
        if !self.batches.is_empty() {
            queue.requeue(std::mem::take(&mut self.batches));
        }
    }
}

/// `Ok` while the peer has not closed the connection (checked without waiting).
fn check_alive(reader: &OwnedReadHalf) -> std::io::Result<()> {
    let mut scratch = [0u8; 512];
    loop {
        match reader.try_read(&mut scratch) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "destination closed the connection",
                ));
            }
            // carbon-cache sends nothing; whatever it sent is ignored.
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Resolves when the peer closes the connection or it errors. carbon-cache never sends data;
/// anything it does send is read and ignored.
async fn watch_eof(reader: &mut OwnedReadHalf) -> std::io::Error {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let d: Vec<_> = (0..5).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d[1] >= Duration::from_millis(100) && d[1] <= Duration::from_millis(200));
        assert!(d[4] >= Duration::from_millis(200) && d[4] <= Duration::from_millis(400));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
