//! Receivers: sockets → [`Ingestor`](crate::ingest::Ingestor) batches.
//!
//! - [`tcp`]: the accept loop shared by the TCP receivers (admission, idle timeout, accept
//!   errors, drain on shutdown, the TLS handshake when `listen.tls` is set), the read loop,
//!   and the plaintext connection handler;
//! - [`admission`]: the connection limit, and which idle connection makes room at it;
//! - [`buffer`]: a connection's read buffer and the relay-wide budget for large frames;
//! - [`framed`]: the pickle and protobuf connection handlers (4-byte big-endian length
//!   framing);
//! - [`compressed`]: the plaintext handler of a compressed connection (gzip, lz4, snappy,
//!   zstd), through [`crate::protocol::compression`];
//! - [`stream`]: a client connection, plain or TLS;
//! - [`udp`]: plaintext datagrams, with the kernel's drop counter (`SO_RXQ_OVFL`);
//!
//! Sources that are not sockets (a Kinesis stream, a Kafka consumer group) come from
//! extensions ([`crate::extension`]) and feed the same pipeline.
//!
//! Each connection owns an `Ingestor` and flushes it after every read, so counters and queue
//! locks are touched once per read, not per datapoint. On shutdown a connection stops waiting
//! for new data, parses what the kernel already holds for it, flushes, and closes.

pub(crate) mod admission;
pub(crate) mod buffer;
pub(crate) mod compressed;
pub(crate) mod framed;
mod listener;
pub(crate) mod stream;
pub(crate) mod tcp;
pub(crate) mod udp;
pub(crate) mod warnings;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ingest::Pipeline;

pub(crate) use admission::Admission;
pub use buffer::{MAX_COMPACT, READ_BUFFER};
pub(crate) use listener::StreamListener;
pub use listener::{Incoming, Listener};

/// Decoded bytes (names + 24 per datapoint) a frame may turn into without taking from the
/// decoded-size budget: about what one 64 KiB read of plaintext lines turns into, which every
/// connection may hold anyway.
pub(crate) const DECODED_FREE: usize = 256 << 10;

/// What every receiver task shares.
#[derive(Clone, Debug)]
pub(crate) struct ReceiverContext {
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
    /// Bytes, shared by every connection, for what frames decode into (names + 24 bytes per
    /// datapoint) past [`DECODED_FREE`] each, held until the frame's datapoints are flushed
    /// to the queues; as large as the frame budget (`listen.max_frame_buffer_bytes`).
    pub decoded_budget: Arc<Semaphore>,
    /// The size of `decoded_budget`: a frame decoding into more is dropped.
    pub decoded_budget_bytes: usize,
    /// Per-connection warnings, one episode per kind for the whole relay.
    pub warnings: Arc<warnings::ConnectionWarnings>,
    /// Close idle connections after this long.
    pub idle_timeout: Option<Duration>,
    /// Longest plaintext line.
    pub max_line_length: usize,
    /// Largest pickle frame.
    pub max_pickle_frame: usize,
    /// Largest protobuf frame.
    pub max_protobuf_frame: usize,
    /// TLS on every connection of the receiver (`None`: plaintext).
    pub tls: Option<crate::tls::ServerTls>,
    /// Stream compression of a plaintext receiver's connections.
    pub compression: crate::protocol::compression::Compression,
    /// Most bytes one unit of a compressed connection may decode into.
    pub max_decompressed_bytes: usize,
}
