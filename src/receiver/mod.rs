//! Receivers: sockets → [`Ingestor`](crate::ingest::Ingestor) batches.
//!
//! - [`tcp`]: the accept loop shared by the TCP receivers (connection limit, idle timeout,
//!   drain on shutdown, the TLS handshake when `listen.tls` is set) and the plaintext
//!   connection handler;
//! - [`framed`]: the pickle and protobuf connection handlers (4-byte big-endian length
//!   framing);
//! - [`stream`]: a client connection, plain or TLS;
//! - [`udp`]: plaintext datagrams;
//! - `kinesis` (Cargo feature `kinesis`, on by default): AWS Kinesis Data Streams shards,
//!   read by one task per shard into the same pipeline.
//!
//! Each connection owns an `Ingestor` and flushes it after every read, so counters and queue
//! locks are touched once per read, not per datapoint. On shutdown a connection stops waiting
//! for new data, parses what the kernel already holds for it, flushes, and closes.

pub mod framed;
#[cfg(feature = "kinesis")]
pub mod kinesis;
pub mod stream;
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
    /// Largest protobuf frame.
    pub max_protobuf_frame: usize,
    /// TLS on every TCP connection (`None`: plaintext).
    pub tls: Option<crate::tls::ServerTls>,
}

/// Size of a connection's read buffer (grows for large pickle frames).
pub const READ_BUFFER: usize = 64 << 10;
