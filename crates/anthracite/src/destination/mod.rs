//! One task per destination: queue → connection.
//!
//! The task connects (capped exponential backoff with jitter between attempts), then drains the
//! queue over that connection until it is lost, the queue is closed and empty, or the grace
//! period ends. How it connects and talks is a [`Transport`]; the core has two, chosen by
//! [`OutputProtocol`], and a third for a carbon-c-relay `file` member; a destination kind of
//! another crate (a Kinesis stream, a Kafka topic: [`StreamDestination`], validated by an [`Extension`](crate::extension::Extension))
//! brings its own. Every transport sees the queue through the same [`Outbox`], so the queue,
//! its spill tier, the failure episodes and shutdown behave alike for all of them:
//!
//! - `stream`: pickle, plaintext lines or protobuf over TCP, optionally inside TLS
//!   (carbon's `DESTINATION_TRANSPORT = ssl`). Writes are batched
//!   to `flush_bytes` or a `linger`; a write is counted as sent only once the connection is
//!   seen alive after it (carbon's protocols have no acknowledgement), and batches whose write
//!   failed go back to the front of the queue for the next connection.
//! - `file`: plaintext lines appended to a file (carbon-c-relay's `file` clusters); the file
//!   is the connection, reopened after a failed write and when its path was rotated.
//! - `udp`: plaintext lines packed into datagrams. UDP has no connection to lose: a datagram
//!   the kernel refuses is counted as dropped (`send_failed`).
//!
//! `encode` (private) turns in-flight batches into bytes for a stream write. A slow or dead
//! destination only ever fills its own queue; a TLS certificate that does not verify is a failed
//! connection attempt like a refused one (logged with the reason, counted, retried with
//! backoff), so the data waits in the queue or its spill log and is never sent in plaintext.
//!
//! ## Dead peers
//!
//! A carbon-cache that stops reading (a hung process, a silent partition) keeps its TCP
//! connection "up" for the kernel's retransmission timeout (~15 minutes). So every write must
//! make progress within `write_timeout` (10 s by default): a write that does not marks the
//! connection dead (counted as a write timeout), its batches go back to the queue (which fills
//! and spills like for any outage) and the task reconnects with backoff. The kernel's socket
//! buffers absorb a few MB first, so at low rates a hang is noticed only once they are full.
//! TCP keepalive (`keepalive`) finds a peer that vanished while the connection was idle. A
//! hung destination only ever holds its own task and queue, never another destination's or a
//! receiver.
//!
//! Failures come in *episodes*: from the first failure until a connection has stayed healthy
//! for `RECOVERY_WINDOW` (30 s). The first failure of each kind in an episode (cannot connect,
//! connection lost, write timeout) is logged as a warning, the rest at debug level, and the end
//! of the episode once, with its counts. At shutdown a destination in an episode is known
//! dead: it stops at once (its queue is spilled or counted as undelivered) instead of holding
//! shutdown for the whole grace period; a write that stalls during shutdown gets
//! [`DEAD_AT_SHUTDOWN`] before the destination gives up.

mod encode;
pub(crate) use encode::Encoder;
pub(crate) mod file;
mod outbox;
pub(crate) mod stream;
pub(crate) mod udp;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::queue::{DestinationQueue, QueueLimits};
use crate::router::DestinationSpec;
use crate::tls::ClientTls;

pub use crate::batch::Datapoint;
pub use outbox::{BoxFuture, DestinationSettings, Outbox, Served, StreamDestination, Transport};

/// What a destination of the core is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutputProtocol {
    /// carbon's pickle protocol 2, length-prefixed (carbon-cache's `PICKLE_RECEIVER_PORT`).
    #[default]
    Pickle,
    /// Plaintext lines (carbon-cache's `LINE_RECEIVER_PORT`).
    Line,
    /// carbon's protobuf `Payload`, length-prefixed (carbon-cache's `PROTOBUF_RECEIVER_PORT`).
    Protobuf,
    /// Plaintext lines in UDP datagrams (carbon-cache's `UDP_RECEIVER_PORT`).
    Udp,
}

impl OutputProtocol {
    /// Every protocol of the core.
    pub const ALL: [OutputProtocol; 4] = [
        OutputProtocol::Pickle,
        OutputProtocol::Line,
        OutputProtocol::Protobuf,
        OutputProtocol::Udp,
    ];

    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutputProtocol::Pickle => "pickle",
            OutputProtocol::Line => "line",
            OutputProtocol::Protobuf => "protobuf",
            OutputProtocol::Udp => "udp",
        }
    }

    /// The protocol spelled `name` in the configuration, if the core has it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

/// A destination of another crate's kind, as validated by its extension: the protocol name,
/// the settings with their defaults resolved (what `anthracite check` prints, and what a
/// reload compares), and the kind that makes its transport.
#[derive(Clone, Debug)]
pub(crate) struct ExtensionDestination {
    /// The extension's name (`protocol = "…"`).
    pub protocol: &'static str,
    /// The destination's own settings, resolved.
    pub settings: toml::Table,
    /// Makes the transport.
    pub kind: Arc<dyn StreamDestination>,
}

impl PartialEq for ExtensionDestination {
    fn eq(&self, other: &Self) -> bool {
        self.protocol == other.protocol && self.settings == other.settings
    }
}

/// Appends `dp` as a Graphite plaintext line (`name value timestamp\n`), exactly as the
/// core's line destinations write it (carbon's value and timestamp formatting).
pub fn encode_line(dp: Datapoint<'_>, out: &mut bytes::BytesMut) {
    crate::protocol::line::encode_line(dp, out);
}

/// Appends one carbon pickle message of `points`: the 4-byte big-endian length, then a
/// protocol 2 pickle of `[(name, (timestamp, value)), …]`, as carbon-cache reads it.
pub fn encode_pickle<'a>(points: impl Iterator<Item = Datapoint<'a>>, out: &mut bytes::BytesMut) {
    crate::protocol::pickle::encode_message(points, out);
}

/// Largest payload a UDP datagram can carry (IPv4).
pub(crate) const MAX_UDP_PAYLOAD: usize = 65_507;

/// Default datapoints per pickle or protobuf message: carbon's `MAX_DATAPOINTS_PER_MESSAGE`.
pub(crate) const DEFAULT_MAX_DATAPOINTS_PER_MESSAGE: usize = 500;

/// Settings of one destination.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DestinationConfig {
    /// Where it is and its ring identity.
    pub spec: DestinationSpec,
    /// Wire format (of the core's transports; unused with `extension`).
    pub protocol: OutputProtocol,
    /// Largest pickle or protobuf message, in datapoints.
    pub max_datapoints_per_message: usize,
    /// Queue bounds and full policy.
    pub queue: QueueLimits,
    /// Write once this many bytes are encoded.
    pub flush_bytes: usize,
    /// Longest wait for more data before a smaller write.
    pub linger: Duration,
    /// TCP connect timeout (including the TLS handshake).
    pub connect_timeout: Duration,
    /// First reconnect delay.
    pub backoff_min: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
    /// The disk tier (`None`: memory only).
    pub spill: Option<crate::queue::SpillSettings>,
    /// TLS around the TCP connection (`None`: plaintext).
    pub tls: Option<ClientTls>,
    /// Stream compression of a `line` destination's connection (a new stream per
    /// connection).
    pub compression: crate::protocol::compression::Compression,
    /// With [`OutputProtocol::Udp`]: lines are packed into datagrams of at most this many
    /// bytes (a longer line goes alone in its own datagram).
    pub max_datagram_bytes: usize,
    /// A write making no progress for this long marks the connection dead (`None`: never).
    pub write_timeout: Option<Duration>,
    /// TCP keepalive idle time (`None`: no keepalive).
    pub keepalive: Option<Duration>,
    /// A destination of another crate's kind (`protocol = "kinesis"`, `"kafka"`, …).
    pub extension: Option<ExtensionDestination>,
    /// Lines appended to this file instead of sent (a carbon-c-relay `file` member).
    pub file: Option<std::path::PathBuf>,
}

impl DestinationConfig {
    /// A destination for unit tests: `spec` in `protocol`, the default queue, 10 ms backoffs, no
    /// spill, TLS, compression, write timeout or file.
    #[cfg(test)]
    pub(crate) fn for_test(spec: &str, protocol: OutputProtocol) -> Self {
        Self {
            spec: DestinationSpec::parse(spec).expect("a test destination"),
            protocol,
            extension: None,
            max_datapoints_per_message: DEFAULT_MAX_DATAPOINTS_PER_MESSAGE,
            queue: crate::queue::QueueLimits::default(),
            flush_bytes: 1 << 16,
            linger: Duration::ZERO,
            connect_timeout: Duration::from_secs(1),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(10),
            spill: None,
            tls: None,
            compression: Default::default(),
            max_datagram_bytes: 1432,
            write_timeout: None,
            keepalive: None,
            file: None,
        }
    }

    /// The settings every transport may read.
    pub(crate) fn settings(&self) -> DestinationSettings {
        DestinationSettings {
            name: self.spec.to_string(),
            host: self.spec.host.clone(),
            port: self.spec.port,
            instance: self.spec.instance.clone(),
            max_datapoints_per_message: self.max_datapoints_per_message,
            flush_bytes: self.flush_bytes,
            linger: self.linger,
            connect_timeout: self.connect_timeout,
            write_timeout: self.write_timeout,
            backoff_min: self.backoff_min,
            backoff_max: self.backoff_max,
        }
    }
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
pub(crate) struct DestinationSignals {
    /// Cancelled when shutdown starts draining the queues: a destination known dead stops
    /// now instead of waiting for the grace period.
    pub drain: CancellationToken,
    /// Cancelled when the shutdown grace period is over: stop now, leave the queue as it is.
    pub abort: CancellationToken,
}

/// How long a connection must stay healthy before a failure episode is over.
pub(crate) const RECOVERY_WINDOW: Duration = Duration::from_secs(30);

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
pub(crate) struct FailureEpisode {
    since: Option<Instant>,
    counts: [u64; 3],
}

impl FailureEpisode {
    /// True from the first failure until the recovery.
    pub(crate) fn is_active(&self) -> bool {
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

    /// A connection delivered; ends the episode once it has lasted the recovery window.
    pub(crate) fn delivered(&mut self, name: &str, connected_at: Instant) {
        if connected_at.elapsed() < RECOVERY_WINDOW {
            return;
        }
        if let Some(since) = self.since.take() {
            let [connect, lost, timeouts] = std::mem::take(&mut self.counts);
            info!(destination = %name, failed_connects = connect, lost_connections = lost,
                write_timeouts = timeouts, seconds = since.elapsed().as_secs(),
                "destination recovered");
        }
    }
}

/// The transport of a destination: its extension's, or the core's for its protocol.
fn transport(config: &DestinationConfig) -> Box<dyn Transport> {
    if let Some(path) = &config.file {
        return Box::new(file::FileTransport::new(config, path));
    }
    match (&config.extension, config.protocol) {
        (Some(e), _) => e.kind.transport(&config.settings()),
        (None, OutputProtocol::Udp) => Box::new(udp::UdpTransport::new(config)),
        (None, _) => Box::new(stream::TcpTransport::new(config)),
    }
}

/// Runs one destination until its queue is closed and drained, `signals.abort` fires, or it
/// is known dead when shutdown drains the queues.
pub(crate) async fn run(
    config: DestinationConfig,
    queue: Arc<DestinationQueue>,
    signals: DestinationSignals,
) {
    let name = config.spec.to_string();
    let stats = queue.stats().clone();
    let mut backoff = Backoff::new(config.backoff_min, config.backoff_max);
    let mut transport = transport(&config);
    let mut episode = FailureEpisode::default();
    let mut in_flight = Vec::new();
    let gave_up =
        || warn!(destination = %name, "known dead at shutdown: not waiting for the grace period");
    loop {
        if queue_closed_and_empty(&queue) {
            return;
        }
        let connected = tokio::select! {
            _ = signals.abort.cancelled() => return,
            c = transport.connect() => c,
        };
        let failure = match connected {
            Ok(()) => {
                debug!(destination = %name, "connected");
                backoff.reset();
                stats.set_connected(true);
                let outbox = Outbox {
                    queue: &queue,
                    signals: &signals,
                    episode: &mut episode,
                    in_flight: &mut in_flight,
                    name: &name,
                    flush_bytes: config.flush_bytes,
                    linger: config.linger,
                    write_timeout: config.write_timeout,
                    connected_at: Instant::now(),
                };
                let outcome = transport.serve(outbox).await;
                stats.set_connected(false);
                match outcome {
                    Served::Drained | Served::Aborted => return,
                    Served::GaveUp => {
                        gave_up();
                        return;
                    }
                    Served::Lost(e) => {
                        stats.connect_failed(&e);
                        queue.connection_lost();
                        (Failure::Lost, e)
                    }
                    Served::Hung(e) => {
                        stats.write_timed_out(&e);
                        queue.connection_lost();
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
            gave_up();
            return;
        }
        let delay = backoff.next_delay();
        tokio::select! {
            _ = signals.abort.cancelled() => return,
            _ = signals.drain.cancelled() => {
                gave_up();
                return;
            }
            _ = tokio::time::sleep(delay) => {}
            // Drained and closed while down: nothing left to deliver.
            _ = wait_closed_and_empty(&queue) => return,
        }
    }
}

/// Starts a write with `first` and keeps taking batches into `in_flight` until `flush_bytes`
/// are gathered, lingering once (at most `linger`) for more when the queue runs dry.
pub(crate) async fn gather(
    queue: &DestinationQueue,
    first: crate::batch::Batch,
    flush_bytes: usize,
    linger: Duration,
    in_flight: &mut Vec<crate::batch::Batch>,
) {
    let mut pending = first.size_bytes();
    in_flight.push(first);
    let mut lingered = false;
    while pending < flush_bytes {
        if let Some(b) = queue.try_pop() {
            pending += b.size_bytes();
            in_flight.push(b);
            continue;
        }
        if lingered || linger.is_zero() || queue.is_closed() {
            break;
        }
        lingered = true;
        tokio::select! {
            _ = tokio::time::sleep(linger) => {}
            _ = queue.changed() => {}
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

/// Opens a TCP connection (inside TLS where configured), bounded by the connect timeout
/// (TLS handshake included).
async fn connect_stream(config: &DestinationConfig) -> std::io::Result<stream::Halves> {
    let host = config.spec.host.as_str();
    let target = (host, config.spec.port);
    let attempt = async {
        let stream = TcpStream::connect(target).await?;
        stream.set_nodelay(true)?;
        if let Some(idle) = config.keepalive {
            let probes = socket2::TcpKeepalive::new()
                .with_time(idle)
                .with_interval((idle / 3).max(Duration::from_secs(1)))
                .with_retries(3);
            socket2::SockRef::from(&stream).set_tcp_keepalive(&probes)?;
        }
        match &config.tls {
            Some(tls) => {
                let tls_stream = tls.connect(stream, host).await?;
                Ok(stream::Halves::tls(tls_stream))
            }
            None => Ok(stream::Halves::tcp(stream)),
        }
    };
    let what = if config.tls.is_some() {
        "connect or TLS handshake timed out"
    } else {
        "connect timed out"
    };
    tokio::time::timeout(config.connect_timeout, attempt)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, what))?
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
