//! anthracite's internals, for its own tests, benchmarks, fuzz targets, the `anthracite`
//! binary and the benchmark harness. **No stability promise**: anything here may change or
//! go away in any release. Embedders use the crate root.

/// The admin HTTP listener (`/metrics`, `/healthz`, `/ready`, `/destinations`).
pub mod admin {
    pub use crate::admin::*;
}

/// Batches: the unit that moves between stages.
pub mod batch {
    pub use crate::batch::*;
}

/// The byte-bounded name caches shared by every connection (routes, list verdicts, tags).
pub mod cache {
    pub use crate::cache::*;
}

/// Decoders and encoders: plaintext lines, pickle, carbon's tag normalisation.
pub mod protocol {
    pub use crate::protocol::*;
}

/// carbon's rings, fast-hashing, rules, aggregated routing, the route cache.
pub mod router {
    pub use crate::router::*;
}

/// Per-destination queues and the spill log.
pub mod queue {
    pub use crate::queue::*;
}

/// The shared parse → route → queue pipeline.
pub mod ingest {
    pub use crate::ingest::*;
}

/// carbon's white/blacklists.
pub mod filter {
    pub use crate::filter::*;
}

/// The validated configuration's parts, carbon.conf import, the raw structs.
pub mod config {
    pub use crate::config::*;

    /// The routing part of a validated configuration.
    pub fn router_spec(config: &crate::Config) -> &crate::router::RouterSpec {
        &config.router
    }
}

/// A running relay's shared parts, for tests and tools that look inside one.
pub mod relay {
    /// The route cache every connection and source of the relay shares (the current
    /// routing generation's).
    pub fn route_cache(handle: &crate::RelayHandle) -> std::sync::Arc<crate::router::RouteCache> {
        handle.pipeline().route_cache()
    }
}

/// Self-metric names, the reporter, the snapshot.
pub mod telemetry {
    pub use crate::telemetry::*;
}

/// Python-compatible patterns (`regex` first, bounded backtracking for look-around).
pub mod pattern {
    pub use crate::pattern::*;
}

/// TLS to destinations and on receivers (rustls, ring provider).
pub mod tls {
    pub use crate::tls::*;
}

/// Receivers: the accept loop, admission, read buffers, UDP.
pub mod receiver {
    pub use crate::receiver::*;
}

/// The destination connection task.
pub mod destination {
    pub use crate::destination::*;
}

/// The Kinesis Data Streams source.
#[cfg(feature = "kinesis")]
pub mod kinesis {
    pub use crate::receiver::kinesis::*;
}

/// The Kafka source.
#[cfg(feature = "kafka")]
pub mod kafka {
    pub use crate::receiver::kafka::*;
}

/// KPL de-aggregation (Cargo feature `kpl`, part of `kinesis`).
#[cfg(feature = "kpl")]
pub mod kpl {
    pub use crate::protocol::kpl::*;
}

/// The shared pipeline behind a running relay (for sources that make their own ingestors,
/// such as a `KinesisSource` run by a test).
pub fn pipeline(handle: &crate::RelayHandle) -> &crate::ingest::Pipeline {
    handle.pipeline()
}
