//! Receivers: sockets → [`Ingestor`](crate::ingest::Ingestor) batches.
//!
//! - [`tcp`]: the accept loop shared by both TCP receivers (connection limit, idle timeout,
//!   drain on shutdown) and the plaintext connection handler;
//! - [`pickle`]: the pickle connection handler (4-byte big-endian length framing);
//! - [`udp`]: plaintext datagrams;
//! - `kinesis` (Cargo feature `kinesis`, on by default): AWS Kinesis Data Streams shards,
//!   read by one task per shard into the same pipeline.
//!
//! Each connection owns an `Ingestor` and flushes it after every read, so counters and queue
//! locks are touched once per read, not per datapoint. On shutdown a connection stops waiting
//! for new data, parses what the kernel already holds for it, flushes, and closes.

#[cfg(feature = "kinesis")]
pub mod kinesis;
pub mod pickle;
pub mod tcp;
pub mod udp;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ingest::Pipeline;

/// What every receiver task shares.
#[derive(Clone, Debug)]
pub struct ReceiverContext {
    /// Parse → route → queue.
    pub pipeline: Pipeline,
    /// Cancelled when receivers must stop.
    pub shutdown: CancellationToken,
    /// Tracks connection tasks so shutdown can wait for them.
    pub tracker: TaskTracker,
    /// Permits for concurrent connections.
    pub connections: Arc<Semaphore>,
    /// Close idle connections after this long.
    pub idle_timeout: Option<Duration>,
    /// Longest plaintext line.
    pub max_line_length: usize,
    /// Largest pickle frame.
    pub max_pickle_frame: usize,
}

/// Size of a connection's read buffer (grows for large pickle frames).
pub const READ_BUFFER: usize = 64 << 10;
