//! Receivers: sockets → [`Ingestor`](crate::ingest::Ingestor) batches.
//!
//! - [`tcp`]: the accept loop shared by the TCP receivers (admission, idle timeout, accept
//!   errors, drain on shutdown, the TLS handshake when `listen.tls` is set), the read loop,
//!   and the plaintext connection handler;
//! - [`admission`]: the connection limit, and which idle connection makes room at it;
//! - [`buffer`]: a connection's read buffer and the relay-wide budget for large frames;
//! - [`framed`]: the pickle and protobuf connection handlers (4-byte big-endian length
//!   framing);
//! - [`stream`]: a client connection, plain or TLS;
//! - [`udp`]: plaintext datagrams, with the kernel's drop counter (`SO_RXQ_OVFL`);
//! - `kinesis` (Cargo feature `kinesis`, on by default): AWS Kinesis Data Streams shards,
//!   read by one task per shard into the same pipeline;
//! - `kafka` (Cargo feature `kafka`): Apache Kafka partitions, read by one consumer thread
//!   per `[[kafka]]` entry as a member of a consumer group.
//!
//! Each connection owns an `Ingestor` and flushes it after every read, so counters and queue
//! locks are touched once per read, not per datapoint. On shutdown a connection stops waiting
//! for new data, parses what the kernel already holds for it, flushes, and closes.

pub mod admission;
pub mod buffer;
pub mod framed;
#[cfg(feature = "kafka")]
pub mod kafka;
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

pub use admission::Admission;
pub use buffer::{READ_BUFFER, ReadBuffer};

/// What every receiver task shares.
#[derive(Clone, Debug)]
pub struct ReceiverContext {
    /// Parse → route → queue.
    pub pipeline: Pipeline,
    /// Cancelled when receivers must stop.
    pub shutdown: CancellationToken,
    /// Cancelled when this listener must stop accepting (relay shutdown, or a reload that
    /// rebinds it); its connections go on until `shutdown`. A child of `shutdown`.
    pub accepting: CancellationToken,
    /// Tracks connection tasks so shutdown can wait for them.
    pub tracker: TaskTracker,
    /// The connection limit over all TCP receivers, and the registry that picks which idle
    /// connection makes room at it.
    pub admission: Arc<Admission>,
    /// Bytes, shared by every connection, for frames larger than [`READ_BUFFER`]
    /// (`listen.max_frame_buffer_bytes`).
    pub frame_budget: Arc<Semaphore>,
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
