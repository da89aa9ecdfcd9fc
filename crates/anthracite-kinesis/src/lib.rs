//! # anthracite-kinesis — AWS Kinesis Data Streams for the anthracite relay
//!
//! An [extension](anthracite::extension) of the relay: the `[[kinesis]]` section of
//! `relay.toml` (sources) and the destination protocol `protocol = "kinesis"`.
//!
//! - **source** — `src/source/`: one [`KinesisSource`] per stream. A coordinator lists the
//!   shards and runs one reader per shard (children after their parents, so per-key order
//!   survives resharding); a reader de-aggregates KPL records ([`kpl`]), decodes the payload
//!   (none, gzip, zlib, auto) and feeds each record's text to the relay as one message through
//!   an [`Ingestor`](anthracite::Ingestor). Positions are checkpointed only after what precedes
//!   them was flushed into the destination queues: at least once.
//! - **leases** — `src/source/leases/` (its module documentation is the design): relays sharing
//!   a stream share its shards through a DynamoDB lease table in the KCL 2.x layout;
//!   checkpoints live in the lease rows, and the shards of a relay that dies are taken over.
//! - **destination** — `src/destination.rs`: KPL-aggregated records into a stream with
//!   `PutRecords`, counted as sent only once the stream acknowledged them; the relay's queue,
//!   spill tier and failure episodes in front, as for a carbon-cache.
//! - **settings** — [`config`]: the raw TOML of both, with documented defaults, validated into
//!   [`KinesisConfig`] and [`KinesisTarget`]; [`metric_names`]: every self-metric name.
//!
//! ## Use
//!
//! Register [`Kinesis`] with the relay's configuration:
//!
//! ```no_run
//! use anthracite::extension::Extensions;
//! use anthracite::{Config, Relay};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let extensions = Extensions::new().with(anthracite_kinesis::Kinesis::new());
//! let config = Config::from_toml_str_with(
//!     r#"
//!     [destinations]
//!     servers = ["127.0.0.1:2104:a"]
//!     [[kinesis]]
//!     stream = "metrics"
//!     checkpoint_dir = "/var/lib/anthracite/kinesis"
//!     "#,
//!     &extensions,
//! )?;
//! let relay = Relay::builder(config).features(extensions.features()).build()?;
//! relay.run(std::future::pending::<()>()).await?;
//! # Ok(()) }
//! ```
//!
//! Or run a [`KinesisSource`] on a relay the program already has
//! ([`RelayHandle::source_context`](anthracite::RelayHandle::source_context)).
//!
//! ## Cargo features
//!
//! - `aws` (default): the source and the destination, on the AWS SDK. Without it the crate is
//!   the [`kpl`] codec and the [`config`] types alone (what the KPL fuzz target builds).
//! - `unstable`: internals for anthracite's own tests, with no stability promise.
#![warn(missing_docs)]
#![cfg_attr(not(feature = "unstable"), allow(dead_code, unused_imports))]

pub mod config;
pub mod kpl;
pub mod metric_names;
#[cfg(feature = "aws")]
mod relay;
#[cfg(feature = "unstable")]
#[doc(hidden)]
pub mod unstable;

pub use config::{KinesisConfig, KinesisTarget};
#[cfg(feature = "aws")]
pub use relay::*;
