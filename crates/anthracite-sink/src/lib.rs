//! A stand-in carbon-cache: the one sink behind `anthracite sink`, the benchmark harness and
//! every test that needs a destination.
//!
//! A [`Sink`] listens on a loopback port and takes any number of connections, as a
//! carbon-cache does. What it reads it decodes with code of its own — pickle with
//! `serde_pickle`, protobuf with its own prost types of carbon.proto, plaintext by hand —
//! never with the relay's decoders, so a test that reads a sink checks the relay's encoders
//! independently. It speaks:
//!
//! - **plaintext** (`path value timestamp\n`), **pickle** (4-byte big-endian length + pickle
//!   of `[(path, (timestamp, value)), …]`, protocols 0–5) or **protobuf** (4-byte length +
//!   carbon.proto `Payload`) over TCP, optionally behind TLS ([`SinkConfig::tls`]);
//!   [`SinkProtocol::Auto`] tells pickle from plaintext per connection by its first byte;
//! - plaintext datagrams over **UDP** ([`SinkProtocol::Udp`]).
//!
//! What it keeps is chosen per sink ([`Keep`]): every datapoint (tests), only counts with the
//! harness's latency figures, distinct names as well (the harness's placement check), or only
//! bytes (the harness measuring its own generator). Counters move once per read, never per
//! datapoint, and a counting sink decodes into typed values that skip what it does not keep,
//! so that in a benchmark the sink is not what limits the relay. With [`SinkConfig::echo`]
//! every datapoint is also written out as a line (`anthracite sink`).
//!
//! A sink can play a misbehaving carbon-cache: slow (a bytes/s budget per connection), hung
//! ([`Sink::pause`]: connections stay open, nothing is read), or dead ([`Sink::go_down`]: the
//! port refuses, every connection is dropped; [`Sink::come_back`] listens on the same port
//! again, and [`Sink::schedule_outage`] does both on a timer).
//!
//! Threads, not an async runtime: a sink works beside any runtime, in a test with none, and
//! its threads are not counted as the relay's when the harness measures a relay in-process.
//! One thread accepts, one serves each connection; [`Sink::stop`] (or dropping the sink)
//! closes the listener and every connection and joins them all.

#![warn(missing_docs)]

mod decode;
pub mod histogram;
mod proto;
mod server;
mod sink;
mod stats;

use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use decode::{Key, Received};
pub use histogram::Histogram;
pub use sink::Sink;
pub use stats::SinkStats;

/// Largest pickle or protobuf frame a sink accepts; a longer length prefix closes the
/// connection (counted as bad).
pub const MAX_FRAME: usize = 64 << 20;

/// What a sink expects to receive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SinkProtocol {
    /// Pickle or plaintext, decided per connection by its first byte: a pickle frame's
    /// big-endian length starts with a zero byte for any frame under 16 MiB, text never does.
    #[default]
    Auto,
    /// `path value timestamp\n` over TCP.
    Line,
    /// 4-byte big-endian length + pickle of `[(path, (timestamp, value)), …]` over TCP.
    Pickle,
    /// 4-byte big-endian length + carbon.proto `Payload` over TCP.
    Protobuf,
    /// `path value timestamp\n` lines in UDP datagrams, each datagram whole lines.
    Udp,
}

/// What a sink keeps of what it receives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Keep {
    /// Every datapoint, in arrival order per connection ([`Sink::received`]).
    #[default]
    All,
    /// Counts only (and latency, with a [`SinkConfig::clock`]): what a benchmark needs.
    Count,
    /// Counts and the distinct names received (each name should land on one sink).
    Names,
    /// Bytes only, nothing decoded: a discarding peer for measuring a sender.
    Bytes,
}

/// Where an echoing sink writes its lines (`anthracite sink`: standard output).
pub type Echo = Arc<Mutex<dyn Write + Send>>;

/// How a sink behaves.
#[derive(Clone)]
pub struct SinkConfig {
    /// What it stands for, in messages (the destination, or `anthracite sink`).
    pub label: String,
    /// What it expects.
    pub protocol: SinkProtocol,
    /// What it keeps.
    pub keep: Keep,
    /// The run's clock, when values carry send instants (microseconds since `clock`, as the
    /// harness's generator stamps them): each such value records `receive − send` in the
    /// latency histograms; other values are counted as unstamped. `None`: no latency.
    pub clock: Option<Instant>,
    /// Terminate TLS with this configuration (TCP protocols only).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Read at most this many bytes/s per connection (a slow carbon-cache).
    pub slow_bytes_per_sec: Option<u64>,
    /// The listener's receive buffer (`SO_RCVBUF`, inherited by its connections) instead of
    /// the kernel's autotuned one: a small one fills quickly when the sink is paused.
    pub receive_buffer: Option<usize>,
    /// Write every datapoint received as a line here: plaintext lines as received (trailing
    /// whitespace trimmed), pickle and protobuf datapoints as `path value timestamp`. Decode
    /// errors then also go to standard error, after the label.
    pub echo: Option<Echo>,
}

impl SinkConfig {
    /// A sink labelled `label` expecting `protocol` that keeps every datapoint.
    pub fn new(label: &str, protocol: SinkProtocol) -> SinkConfig {
        SinkConfig {
            label: label.to_owned(),
            protocol,
            ..SinkConfig::default()
        }
    }
}

impl Default for SinkConfig {
    fn default() -> Self {
        SinkConfig {
            label: "sink".to_owned(),
            protocol: SinkProtocol::Auto,
            keep: Keep::All,
            clock: None,
            tls: None,
            slow_bytes_per_sec: None,
            receive_buffer: None,
            echo: None,
        }
    }
}

impl fmt::Debug for SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkConfig")
            .field("label", &self.label)
            .field("protocol", &self.protocol)
            .field("keep", &self.keep)
            .field("clock", &self.clock)
            .field("tls", &self.tls.is_some())
            .field("slow_bytes_per_sec", &self.slow_bytes_per_sec)
            .field("receive_buffer", &self.receive_buffer)
            .field("echo", &self.echo.is_some())
            .finish()
    }
}
