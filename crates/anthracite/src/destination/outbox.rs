//! The seam between a destination's queue and its connection: [`Transport`] (how to connect and
//! deliver), [`Outbox`] (the queue, as a transport sees it while connected), [`Served`] (how a
//! connection ended), and [`StreamDestination`] (a destination kind of another crate).
//!
//! The core's destination task owns the loop around a transport: connect, serve, and on a
//! failure back off with jitter, count it, and log it once per failure episode; at shutdown it
//! gives up on a destination known dead instead of holding shutdown for the grace period. A
//! transport owns only its wire: what a connection is, how a write is encoded and when it
//! counts as delivered. So a Kinesis stream or a Kafka topic gets the same queue, spill tier,
//! episodes and shutdown as a carbon-cache.
//!
//! Delivery accounting follows the queue's identity `routed = sent + dropped + queued`: each
//! write a transport takes with [`Outbox::next_write`] ends in exactly one of
//! [`Outbox::delivered`] (sent, with datapoints the wire cannot carry counted as dropped) or
//! [`Outbox::requeue`] (back to the front of the queue, sent again after a reconnect: at least
//! once).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use super::{DEAD_AT_SHUTDOWN, DestinationSignals, FailureEpisode, gather};
use crate::batch::{Batch, Datapoint};
use crate::queue::{DestinationDropReason, DestinationQueue, DestinationStats};

/// A boxed future, as the object-safe [`Transport`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How one connection of a [`Transport`] ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Served {
    /// The queue is closed and empty: the destination is done.
    Drained,
    /// The grace period is over.
    Aborted,
    /// Shutdown is draining and the destination is known dead; its write was requeued.
    GaveUp,
    /// The connection failed (a write or read error, the peer went away); its write was
    /// requeued. The task counts it, backs off and reconnects.
    Lost(std::io::Error),
    /// A write made no progress for the write timeout; it was requeued. Counted as a write
    /// timeout, then like [`Served::Lost`].
    Hung(std::io::Error),
}

/// How a destination connects and delivers: the core's TCP (pickle, line, protobuf, TLS) and
/// UDP transports implement it, and so does every [`StreamDestination`] of another crate.
///
/// The destination task calls [`connect`](Self::connect) until it succeeds (backing off
/// between attempts), then [`serve`](Self::serve) with the queue until the connection ends,
/// and again. Neither method logs failures it returns: the task logs them once per episode.
pub trait Transport: Send {
    /// Opens a connection (or whatever this destination needs before it can deliver: the
    /// shard listing of a stream, a topic's metadata). Bounded by the transport's own timeout;
    /// an error is a failed attempt, counted and retried with backoff.
    fn connect(&mut self) -> BoxFuture<'_, std::io::Result<()>>;

    /// Delivers from `outbox` until the connection fails, the queue is closed and drained, or
    /// shutdown ends it. Every write taken from the outbox is delivered or requeued before
    /// this returns.
    fn serve<'a>(&'a mut self, outbox: Outbox<'a>) -> BoxFuture<'a, Served>;
}

/// A destination kind of another crate, validated from its `servers` entry by its
/// [`Extension`](crate::extension::Extension).
pub trait StreamDestination: Send + Sync + std::fmt::Debug {
    /// A transport for one destination (made once when the destination starts).
    fn transport(&self, settings: &DestinationSettings) -> Box<dyn Transport>;
}

/// What a transport may read of its destination's settings (`[destinations]` with the
/// server's overrides applied).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DestinationSettings {
    /// `host:port:instance`, the destination's name on the ring and in metrics.
    pub name: String,
    /// The host.
    pub host: String,
    /// The port.
    pub port: u16,
    /// carbon's instance, if any.
    pub instance: Option<String>,
    /// Largest message, in datapoints (`max_datapoints_per_message`).
    pub max_datapoints_per_message: usize,
    /// A write gathers this many bytes of datapoints, or what came within `linger`.
    pub flush_bytes: usize,
    /// Longest wait for more data before a smaller write.
    pub linger: Duration,
    /// Longest connection attempt.
    pub connect_timeout: Duration,
    /// A write making no progress for this long marks the connection dead (`None`: never).
    pub write_timeout: Option<Duration>,
    /// First delay between retries.
    pub backoff_min: Duration,
    /// Longest delay between retries.
    pub backoff_max: Duration,
}

/// The queue as a transport sees it while connected: the next write, its datapoints, and
/// whether it was delivered.
pub struct Outbox<'a> {
    pub(crate) queue: &'a DestinationQueue,
    pub(crate) signals: &'a DestinationSignals,
    pub(crate) episode: &'a mut FailureEpisode,
    pub(crate) in_flight: &'a mut Vec<Batch>,
    pub(crate) name: &'a str,
    pub(crate) flush_bytes: usize,
    pub(crate) linger: Duration,
    pub(crate) write_timeout: Option<Duration>,
    pub(crate) connected_at: Instant,
}

impl std::fmt::Debug for Outbox<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("name", &self.name)
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl Outbox<'_> {
    /// The destination's name (`host:port:instance`).
    pub fn name(&self) -> &str {
        self.name
    }

    /// Waits for the next write: the oldest batches, up to `flush_bytes`, lingering once (at
    /// most `linger`) for more when the queue runs dry. `Err` when the transport must return
    /// instead: the grace period is over ([`Served::Aborted`]) or the queue is closed and
    /// drained ([`Served::Drained`]).
    pub async fn next_write(&mut self) -> Result<(), Served> {
        match next_write(
            self.queue,
            self.signals,
            self.flush_bytes,
            self.linger,
            self.in_flight,
        )
        .await
        {
            Some(end) => Err(end),
            None => Ok(()),
        }
    }

    /// The datapoints of the current write, oldest first.
    pub fn datapoints(&self) -> impl Iterator<Item = Datapoint<'_>> + '_ {
        self.in_flight.iter().flat_map(Batch::iter)
    }

    /// Datapoints in the current write.
    pub fn write_len(&self) -> usize {
        self.in_flight.iter().map(Batch::len).sum()
    }

    /// The current write was delivered: `datapoints` sent in `messages`, and `unencodable`
    /// datapoints the wire format cannot carry, counted as dropped (`unencodable`). Ends a
    /// failure episode once the connection has stayed healthy long enough.
    pub fn delivered(&mut self, datapoints: usize, messages: usize, unencodable: usize) {
        self.queue.recycle(self.in_flight.drain(..));
        self.queue.settle(
            datapoints,
            messages,
            &[(DestinationDropReason::Unencodable, unencodable)],
        );
        self.episode.delivered(self.name, self.connected_at);
    }

    /// The current write was not (or not surely) delivered: back to the front of the queue,
    /// sent again after the reconnect.
    pub fn requeue(&mut self) {
        if !self.in_flight.is_empty() {
            self.queue.requeue(std::mem::take(self.in_flight));
        }
    }

    /// Runs `wait`, a wait on the peer (an acknowledgement, a full send buffer), and counts
    /// its time as the peer's. A full memory tier holds producers back only while its
    /// destination keeps up; one whose writes wait on the peer for half of a `full_wait_ms`
    /// window is behind, and the tier's policy applies (spill). A transport whose waits are
    /// not counted looks like it keeps up while it takes nothing. The core's TCP transport
    /// counts its writes that do not complete at once the same way.
    pub async fn waiting_on_peer<F: Future>(&self, wait: F) -> F::Output {
        on_peer(self.queue.stats(), wait).await
    }

    /// Completes when the grace period is over: stop at once (requeue, return
    /// [`Served::Aborted`]).
    pub async fn aborted(&self) {
        self.signals.abort.cancelled().await;
    }

    /// True once the grace period is over.
    pub fn is_aborted(&self) -> bool {
        self.signals.abort.is_cancelled()
    }

    /// Shutdown is draining the queues and this destination is in a failure episode: a write
    /// that stalls now should give up ([`Served::GaveUp`]) after [`DEAD_AT_SHUTDOWN`].
    pub fn giving_up(&self) -> bool {
        self.episode.is_active() && self.signals.drain.is_cancelled()
    }

    /// How long a write may make no progress before the connection is declared dead: the
    /// write timeout, or at most [`DEAD_AT_SHUTDOWN`] while [`giving_up`](Self::giving_up).
    pub fn stall_limit(&self) -> Option<Duration> {
        if self.giving_up() {
            Some(
                self.write_timeout
                    .map_or(DEAD_AT_SHUTDOWN, |t| t.min(DEAD_AT_SHUTDOWN)),
            )
        } else {
            self.write_timeout
        }
    }
}

/// Runs `wait` with its time counted as a wait on the peer of `stats`'s destination; a wait
/// dropped before it completes (a `select!` that ends it) is counted up to then.
pub(crate) async fn on_peer<F: Future>(stats: &DestinationStats, wait: F) -> F::Output {
    struct Waiting<'s>(&'s DestinationStats);
    impl Drop for Waiting<'_> {
        fn drop(&mut self) {
            self.0.peer_wait_ended();
        }
    }
    stats.peer_wait_began();
    let _waiting = Waiting(stats);
    wait.await
}

/// Waits for the next batch, unless the task is aborted first, and gathers a write from it
/// into `in_flight` ([`gather`]). `Some` when the task ends instead: aborted, or its queue
/// closed and drained.
pub(crate) async fn next_write(
    queue: &DestinationQueue,
    signals: &DestinationSignals,
    flush_bytes: usize,
    linger: Duration,
    in_flight: &mut Vec<Batch>,
) -> Option<Served> {
    let first = tokio::select! {
        biased;
        _ = signals.abort.cancelled() => return Some(Served::Aborted),
        b = queue.pop() => b,
    };
    let Some(first) = first else {
        return Some(Served::Drained);
    };
    gather(queue, first, flush_bytes, linger, in_flight).await;
    None
}
