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
//! 5. **send** — `src/destination/`: one task per destination drains its queue through a
//!    [`Transport`](destination::Transport): the core's encodes pickle, line or protobuf
//!    messages (or packs lines into UDP datagrams), writes in large batches, over TLS where
//!    configured; the task reconnects with capped, jittered backoff.
//!
//! `src/config/` reads `relay.toml`, or an unchanged carbon `carbon.conf` with its relay-rules
//! and aggregation-rules files, into a validated [`Config`].
//!
//! `src/relay/` wires the stages together and owns startup and shutdown order (receivers
//! first, then queues drain, then destinations close) and configuration reload (a new routing
//! generation swapped whole; `src/relay/reload.rs` is the design). `src/telemetry/` builds what
//! the relay says about itself from snapshots of the books, for both the reporter
//! (`carbon.relays.<host>.*` back into the stream) and `/metrics`; `src/admin.rs` serves
//! `/metrics`, `/healthz`, `/ready` and `/destinations`.
//!
//! Other sources join at step 3 through an [`Ingestor`]: any embedding program, via
//! [`RelayHandle::ingestor`], and the sources of **extensions** (`src/extension.rs`): crates
//! that add a `relay.toml` section of sources and a destination protocol, such as
//! `anthracite-kinesis` (Kinesis Data Streams, shard leases in DynamoDB, KPL) and
//! `anthracite-kafka` (consumer groups, topics). The core knows none of them by name.
//!
//! ## Layers
//!
//! Each module imports only its own layer or those below it (`tests/layers.rs` checks the
//! sources), bottom to top: `metric_names` (every self-metric name of the core), `episode`
//! (the rate limit of episode log lines), `figure` (what a reported value is), `pattern`,
//! `tls`, `batch` → `name_cache` → `protocol` → `router`, `filter`, `aggregator` → `queue` →
//! `destination` → `ingest` → `config`, `extension` → `receiver` → `telemetry` → `admin` →
//! `relay`.
//!
//! ## The API
//!
//! What the crate root exports is the stable API: [`Relay`] (built by [`RelayBuilder`] with
//! TCP listeners or any [`Listener`], observed and fed through a [`RelayHandle`]), its
//! [`Config`] (from a file, a carbon.conf, or [`ConfigBuilder`]) and [`Placement`], the
//! [`Ingestor`] with its delivery feedback ([`Pushed`], [`Flushed`], [`Receipt`]), the
//! counters ([`StatsSnapshot`]) and the error types. The seams for crates that add sources and
//! destinations are the modules [`extension`] (sections, sources, the registry),
//! [`destination`] (the [`Transport`](destination::Transport) and its
//! [`Outbox`](destination::Outbox)) and [`figure`] (self-metrics of their own); log lines of
//! recurring conditions are rate-limited with [`episode`]. Everything else is `pub(crate)`;
//! the Cargo feature `unstable` opens a hidden `unstable` module listing, by name, the
//! internals anthracite's own tests, benchmarks and fuzz targets use, with no stability
//! promise.
//!
//! The crate's dependencies hold no command-line, harness, AWS or Kafka crate; the
//! `anthracite` binary (the workspace root), the stream crates and the harness bring theirs.
//!
//! ## Embedding
//!
//! The lifecycle: a validated [`Config`] → [`Relay::builder`] with injected listeners →
//! [`Relay::run`] with a shutdown future → [`ShutdownReport`]; a [`RelayHandle`] feeds it
//! through [`Ingestor`]s, reads its counters and reloads it. The repository's
//! `docs/embedding.md` lists every builder setter with its default, what each error means, and
//! how the stream crates join a relay.
//!
//! ```no_run
//! use anthracite::{Config, Delivery, Relay};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::builder()
//!     .destinations(["127.0.0.1:2104:a", "127.0.0.1:2204:b"])
//!     .telemetry_interval(None)
//!     .build()?;
//! let line = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let relay = Relay::builder(config).line_listener(line).build()?;
//! let handle = relay.handle();
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let running = tokio::spawn(relay.run(async {
//!     let _ = stopped.await;
//! }));
//!
//! let mut ingestor = handle.ingestor();
//! ingestor.push(b"app.requests.count", 1_700_000_000.0, 42.0);
//! let flushed = ingestor.flush().await;
//! assert_eq!(flushed.dropped, 0);
//! assert_eq!(ingestor.receipt().delivered().await, Delivery::Settled);
//!
//! // A third destination, from code: applied whole or not at all.
//! let bigger = Config::builder()
//!     .destinations(["127.0.0.1:2104:a", "127.0.0.1:2204:b", "127.0.0.1:2304:c"])
//!     .telemetry_interval(None)
//!     .build()?;
//! let reloaded = handle.reload(bigger).await?;
//! println!("{:?}", reloaded.changes);
//!
//! let _ = stop.send(());
//! let report = running.await??;
//! println!("undelivered: {:?}", report.undelivered);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
// Items the `unstable` gate lists serve only anthracite's own tests, benchmarks and fuzz
// targets; without the feature nothing reaches them. The workspace's checks build with the
// feature on, where anything really unused is still reported.
#![cfg_attr(not(feature = "unstable"), allow(dead_code, unused_imports))]

mod admin;
mod aggregator;
mod batch;
mod config;
pub mod destination;
pub mod episode;
pub mod extension;
pub mod figure;
mod filter;
mod ingest;
mod metric_names;
mod name_cache;
mod pattern;
mod posix_regex;
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

pub use config::{
    CRelayFlags, CRelayImport, CRelayOptions, CarbonImport, CarbonOptions, Config, ConfigBuilder,
    ConfigError, LogFormat, Placement,
};
pub use destination::OutputProtocol;
pub use ingest::{
    Delivery, FLUSH_HINT_BYTES, Flushed, IngestSnapshot, Ingestor, MessageLines, Pushed, Receipt,
    Source, SourceSnapshot,
};
pub use protocol::{DropCounts, DropReason};
pub use queue::spill::SpillError;
pub use queue::{DestinationDropReason, DestinationSnapshot, LastError, SpillSnapshot, WhenFull};
pub use receiver::{Incoming, Listener};
pub use relay::{
    Relay, RelayBuilder, RelayError, RelayHandle, ReloadError, Reloaded, ShutdownReport,
};
pub use router::{HashType, RouterError};
pub use telemetry::{ReloadCounts, StatsSnapshot};
