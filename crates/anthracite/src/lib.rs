//! # anthracite — a carbon relay for Graphite
//!
//! anthracite accepts Graphite datapoints, routes each one exactly as carbon 1.1.10's
//! `carbon-relay` would, and delivers them to carbon-cache instances through one bounded queue
//! per destination. The data path reads top to bottom:
//!
//! 1. **accept** — `src/receiver/`: plaintext over TCP and UDP, pickle and protobuf over TCP,
//!    optionally inside TLS (`src/tls.rs`). One task per connection reads into a buffer and
//!    hands whole lines or frames to the parser.
//! 2. **parse** — `src/protocol/`: `line.rs`, `pickle/` and `protobuf.rs` decode bytes into
//!    `(name, timestamp, value)` with carbon's rules; no I/O, no allocation per datapoint.
//!    `src/filter.rs` drops names on carbon's blacklist or off its whitelist (`USE_WHITELIST`),
//!    reloaded when the files change.
//! 3. **route** — `src/router/`: carbon's consistent-hashing ring (`carbon_ch`, `fnv1a_ch`,
//!    `mmh3_ch`), fast-hashing and rules (patterns in Python `re` syntax through
//!    `src/pattern.rs`), with a route cache so repeated names never pay an MD5; pooled replicas
//!    (`router/pool.rs`) pick the least-loaded instance per `host:port`. The [`Ingestor`]
//!    (`src/ingest/`) ties parse → route → queue together and batches per connection.
//! 4. **queue** — `src/queue/`: one bounded queue per destination with an explicit
//!    [`WhenFull`] policy; every drop counted with a reason. With a spill directory the memory
//!    tier overflows into a per-destination spill log on disk (`src/queue/spill/`, whose
//!    module documentation is the design), driven by a dedicated thread and replayed oldest
//!    first.
//! 5. **send** — `src/destination/`: one task per destination drains its queue, encodes
//!    pickle, line or protobuf messages (or packs lines into UDP datagrams), writes in large
//!    batches, over TLS where configured, and reconnects with capped, jittered backoff; a
//!    `protocol = "kafka"` destination writes to a Kafka topic instead (`destination/kafka.rs`).
//!
//! `src/config/` reads `relay.toml`, or an unchanged carbon `carbon.conf` with its relay-rules
//! and aggregation-rules files, into a validated [`Config`].
//!
//! `src/relay/` wires the stages together and owns startup and shutdown order (receivers
//! first, then queues drain, then destinations close) and configuration reload (a new routing
//! generation swapped whole; `src/relay/reload.rs` is the design). `src/telemetry/` holds the
//! self-metric names, the figures both the reporter (`carbon.relays.<host>.*` back into the
//! stream) and `/metrics` report, and `src/admin.rs` serves `/metrics`, `/healthz`, `/ready`
//! and `/destinations`. Other
//! sources join at step 3 through an [`Ingestor`]: the Kinesis Data Streams reader
//! (`src/receiver/kinesis/`, Cargo feature `kinesis`; its `leases/` share a stream's shards across
//! relays through a DynamoDB lease table), the Kafka consumer (`src/receiver/kafka/`, Cargo
//! feature `kafka`; relays in one consumer group share a topic's partitions) and any embedding
//! program, via
//! [`RelayHandle::ingestor`]. `src/bench/` (Cargo feature `bench`) is the capacity-planning
//! harness behind `anthracite bench`.
//!
//! ## The API
//!
//! What the crate root exports is the stable API: [`Relay`] (built by [`RelayBuilder`],
//! observed and fed through a [`RelayHandle`]), its [`Config`] (from a file, a carbon.conf,
//! or [`ConfigBuilder`]), the [`Ingestor`] with its delivery feedback ([`Pushed`],
//! [`Flushed`], [`Receipt`]), the counters ([`StatsSnapshot`]) and the error types.
//! [`unstable`] exposes the internals for anthracite's own tests, benchmarks and tools, with
//! no stability promise.
//!
//! ## Cargo features
//!
//! - `kinesis`: the AWS Kinesis Data Streams source (the AWS SDK). Opt in when embedding.
//! - `kafka`: the Kafka source and destination (librdkafka, built from source); `kafka-tls`
//!   adds OpenSSL for TLS and SCRAM to the brokers.
//! - `cli`, `bench`: the `anthracite` binary and its benchmark harness.
//!
//! `default-features = false` gives the relay core alone (no clap, plotters, indicatif,
//! anyhow, tracing-subscriber or AWS SDK); the defaults are for the binary and the test suite.
//!
//! ## Embedding
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use anthracite::{Config, Relay};
//! let config = Config::builder()
//!     .destinations(["127.0.0.1:2104:a", "127.0.0.1:2204:b"])
//!     .build()?;
//! let line = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let relay = Relay::builder(config).line_listener(line).build()?;
//! relay.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod admin;
mod batch;
mod cache;
mod config;
mod destination;
mod episode;
mod figure;
mod filter;
mod ingest;
mod metric_names;
mod pattern;
mod protocol;
mod queue;
mod receiver;
mod relay;
mod router;
mod telemetry;
mod tls;
#[cfg(feature = "unstable")]
#[doc(hidden)]
pub mod unstable;

pub use batch::Datapoint;
pub use config::{
    CarbonImport, CarbonOptions, Config, ConfigBuilder, ConfigError, LogFormat, Placement,
};
pub use ingest::{Delivery, FLUSH_HINT_BYTES, Flushed, Ingestor, Pushed, Receipt, Source};
pub use protocol::{DropCounts, DropReason};
pub use queue::spill::SpillError;
pub use queue::{DestinationDropReason, DestinationSnapshot, SpillSnapshot, WhenFull};
pub use relay::{
    Relay, RelayBuilder, RelayError, RelayHandle, ReloadError, Reloaded, ShutdownReport,
};
pub use router::RouterError;
pub use telemetry::StatsSnapshot;
