//! One task per destination: queue → socket.
//!
//! The task connects (capped exponential backoff with jitter between attempts), then drains the
//! queue over that connection until it is lost, the queue is closed and empty, or the grace
//! period ends. How it talks depends on [`OutputProtocol`]:
//!
//! - [`stream`]: pickle, plaintext lines or protobuf over TCP, optionally inside TLS
//!   ([`crate::tls::ClientTls`], carbon's `DESTINATION_TRANSPORT = ssl`). Writes are batched
//!   to `flush_bytes` or a `linger`; a write is counted as sent only once the connection is
//!   seen alive after it (carbon's protocols have no acknowledgement), and batches whose write
//!   failed go back to the front of the queue for the next connection.
//! - [`udp`]: plaintext lines packed into datagrams. UDP has no connection to lose: a datagram
//!   the kernel refuses is counted as dropped (`send_failed`).
//!
//! `encode` (private) turns in-flight batches into bytes for either. A slow or dead destination only
//! ever fills its own queue; a TLS certificate that does not verify is a failed connection
//! attempt like a refused one (logged with the reason, counted, retried with backoff), so the
//! data waits in the queue or its spill log and is never sent in plaintext.

mod encode;
pub mod stream;
pub mod udp;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::batch::Batch;
use crate::queue::{DestinationQueue, QueueLimits};
use crate::router::DestinationSpec;
use crate::tls::ClientTls;

/// What a destination is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
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
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutputProtocol::Pickle => "pickle",
            OutputProtocol::Line => "line",
            OutputProtocol::Protobuf => "protobuf",
            OutputProtocol::Udp => "udp",
        }
    }
}

/// Largest payload a UDP datagram can carry (IPv4).
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// Settings of one destination.
#[derive(Clone, Debug, PartialEq)]
pub struct DestinationConfig {
    /// Where it is and its ring identity.
    pub spec: DestinationSpec,
    /// Wire format.
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
    /// With [`OutputProtocol::Udp`]: lines are packed into datagrams of at most this many
    /// bytes (a longer line goes alone in its own datagram).
    pub max_datagram_bytes: usize,
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
#[derive(Clone, Debug)]
pub struct DestinationSignals {
    /// Cancelled when the shutdown grace period is over: stop now, leave the queue as it is.
    pub abort: CancellationToken,
}

/// How one connection ended.
pub(crate) enum Served {
    /// Queue closed and empty: done.
    Drained,
    /// Grace period over.
    Aborted,
    /// Write or read failed; in-flight data was requeued.
    Lost(std::io::Error),
}

/// An open connection to a destination.
enum Link {
    /// TCP, or TLS over TCP.
    Stream(stream::Halves),
    /// A connected UDP socket.
    Datagram(tokio::net::UdpSocket),
}

/// Runs one destination until its queue is closed and drained, or `signals.abort` fires.
pub async fn run(
    config: DestinationConfig,
    queue: Arc<DestinationQueue>,
    signals: DestinationSignals,
) {
    let name = config.spec.to_string();
    let stats = queue.stats().clone();
    let mut backoff = Backoff::new(config.backoff_min, config.backoff_max);
    let mut stream_sender = stream::Sender::new(&config);
    let mut datagram_sender = udp::Sender::new(&config);
    let mut failures_in_row = 0u32;
    loop {
        if queue.queued() == 0 && queue_closed_and_empty(&queue) {
            return;
        }
        let connected = tokio::select! {
            _ = signals.abort.cancelled() => return,
            c = connect(&config) => c,
        };
        let link = match connected {
            Ok(l) => l,
            Err(e) => {
                stats.connect_failed();
                failures_in_row += 1;
                if failures_in_row == 1 {
                    warn!(destination = %name, error = %e, "cannot connect; queueing until it is reachable");
                }
                let delay = backoff.next_delay();
                tokio::select! {
                    _ = signals.abort.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                    // Drained and closed while down: nothing left to deliver.
                    _ = wait_closed_and_empty(&queue) => return,
                }
                continue;
            }
        };
        if failures_in_row > 0 {
            info!(destination = %name, attempts = failures_in_row, "connected");
        } else {
            debug!(destination = %name, "connected");
        }
        failures_in_row = 0;
        backoff.reset();
        stats.set_connected(true);
        let outcome = match link {
            Link::Stream(halves) => stream_sender.serve(halves, &queue, &signals).await,
            Link::Datagram(socket) => {
                datagram_sender
                    .serve(&socket, &queue, &signals, &name)
                    .await
            }
        };
        stats.set_connected(false);
        match outcome {
            Served::Drained | Served::Aborted => return,
            Served::Lost(e) => {
                stats.connect_failed();
                warn!(destination = %name, error = %e, "connection lost; unsent data stays queued");
                let delay = backoff.next_delay();
                tokio::select! {
                    _ = signals.abort.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// Starts a write with `first` and keeps taking batches into `in_flight` until `flush_bytes`
/// are gathered, lingering once (at most `linger`) for more when the queue runs dry.
pub(crate) async fn gather(
    queue: &DestinationQueue,
    first: Batch,
    flush_bytes: usize,
    linger: Duration,
    in_flight: &mut Vec<Batch>,
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

/// Opens a link of the destination's kind, bounded by the connect timeout (TLS handshake
/// included).
async fn connect(config: &DestinationConfig) -> std::io::Result<Link> {
    let host = config.spec.host.as_str();
    let target = (host, config.spec.port);
    let attempt = async {
        if config.protocol == OutputProtocol::Udp {
            return udp::connect(target).await.map(Link::Datagram);
        }
        let stream = TcpStream::connect(target).await?;
        stream.set_nodelay(true)?;
        match &config.tls {
            Some(tls) => {
                let tls_stream = tls.connect(stream, host).await?;
                Ok(Link::Stream(stream::Halves::tls(tls_stream)))
            }
            None => Ok(Link::Stream(stream::Halves::tcp(stream))),
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
