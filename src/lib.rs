//! # anthracite — a carbon relay for Graphite
//!
//! anthracite accepts Graphite datapoints, routes each one exactly as carbon 1.1.10's
//! `carbon-relay` would, and delivers them to carbon-cache instances through one bounded queue
//! per destination. The data path reads top to bottom:
//!
//! 1. **accept** — [`receiver`]: plaintext over TCP and UDP, pickle over TCP. One task per
//!    connection reads into a buffer and hands whole lines or frames to the parser.
//! 2. **parse** — [`protocol`]: [`protocol::line`] and [`protocol::pickle`] decode bytes into
//!    `(name, timestamp, value)` with carbon's rules; no I/O, no allocation per datapoint.
//!    [`filter`] drops names on carbon's blacklist or off its whitelist (`USE_WHITELIST`),
//!    reloaded when the files change.
//! 3. **route** — [`router`]: carbon's consistent-hashing ring (`carbon_ch`, `fnv1a_ch`,
//!    `mmh3_ch`), fast-hashing and rules, with a per-connection route cache so repeated names
//!    never pay an MD5. The [`ingest::Ingestor`] ties parse → route → queue together and batches
//!    per connection.
//! 4. **queue** — [`queue`]: one bounded [`queue::DestinationQueue`] per destination with an
//!    explicit [`queue::WhenFull`] policy; every drop counted with a reason. With a spill
//!    directory the memory tier overflows into a per-destination [`queue::spill::SpillLog`]
//!    on disk, driven by a dedicated thread and replayed oldest first.
//! 5. **send** — [`destination`]: one task per destination drains its queue, encodes pickle or
//!    line messages, writes in large batches and reconnects with capped, jittered backoff.
//!
//! [`config`] reads `relay.toml`, or an unchanged carbon `carbon.conf` ([`config::carbon`]) with
//! its relay-rules and aggregation-rules files.
//!
//! [`relay`] wires the stages together and owns startup and shutdown order (receivers first,
//! then queues drain, then destinations close). [`telemetry`] holds the self-metric names and
//! the reporter that feeds `carbon.relays.<host>.*` back into the stream. Other sources join at
//! step 3 through an [`ingest::Ingestor`]: the Kinesis Data Streams reader
//! (`receiver::kinesis`, Cargo feature `kinesis`; its `leases` module shares a stream's shards
//! across relays through a DynamoDB lease table) and any embedding program, via
//! [`relay::RelayHandle::ingestor`].
//! [`bench`](mod@bench) is the capacity-planning harness behind `anthracite bench`.
//!
//! ## Embedding
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use anthracite::{Config, Relay};
//! let config = Config::from_toml_str(r#"
//!     [destinations]
//!     servers = ["127.0.0.1:2104:a", "127.0.0.1:2204:b"]
//! "#)?;
//! let line = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let relay = Relay::builder(config).line_listener(line).build()?;
//! relay.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod batch;
pub mod bench;
pub mod config;
pub mod destination;
pub mod filter;
pub mod ingest;
pub mod protocol;
pub mod queue;
pub mod receiver;
pub mod relay;
pub mod router;
pub mod telemetry;

pub use batch::{Batch, Datapoint};
pub use config::Config;
pub use relay::{Relay, RelayBuilder, RelayError, RelayHandle, ShutdownReport};
