//! anthracite's internals for its own benchmarks, fuzz targets, harness and process-level
//! tests, behind the Cargo feature `unstable` (off by default) and hidden from the
//! documentation. **No stability promise**: anything here may change or go away in any
//! release. Embedders use the crate root.
//!
//! Every item is listed by name, so what leaves the crate is a decision: a test that needs an
//! internal adds it here, beside the module path it lives at.

/// carbon-aggregator: rules, rewrite rules, buffers, the state file.
pub mod aggregator {
    pub use crate::aggregator::{AggregationRules, Aggregator, AggregatorLimits};
}

/// Batches: the unit that moves between stages.
pub mod batch {
    pub use crate::batch::{Batch, Datapoint, POINT_OVERHEAD};
}

/// Decoders and encoders.
pub mod protocol {
    pub use crate::protocol::normalize;

    /// Graphite plaintext.
    pub mod line {
        pub use crate::protocol::line::{LineFramer, encode_line, parse_line};
    }

    /// carbon's pickle framing.
    pub mod pickle {
        pub use crate::protocol::pickle::{
            DECODED_POINT_BYTES, DECODER_KEEP_BYTES, PickleDecoder, encode_message,
        };
    }

    /// Stream compression of plaintext connections (carbon-c-relay's transports, zstd).
    pub mod compression {
        pub use crate::protocol::compression::{
            Compression, Compressor, DecompressError, Decompressor, MIN_BUDGET, PIECE, UNIT_BYTES,
        };
    }

    /// carbon's protobuf framing.
    pub mod protobuf {
        pub use crate::protocol::protobuf::{ProtobufDecoder, ProtobufEncoder};
    }
}

/// The admin listener's limits.
pub mod admin {
    pub use crate::admin::MIN_IDLE_TO_EVICT;
}

/// carbon's rings, rules and aggregated routing; the route cache.
pub mod router {
    pub use crate::router::{
        DestinationSpec, HashType, NodeKeys, RelayMethod, RouteCache, Router, RouterSpec,
        carbon_hash,
    };

    /// carbon's aggregation rules, as `aggregated-consistent-hashing` reads them.
    pub mod aggregation {
        pub use crate::router::aggregation::{
            AggregationRule, Resolution, Template, TemplateFailure, TemplateNote, parse_rules,
        };
    }
}

/// Per-destination queues and the spill log.
pub mod queue {
    pub use crate::queue::{
        DestinationQueue, DestinationStats, MAX_SPARE_BYTES, QueueLimits, spare_bytes,
    };

    /// The spill log.
    pub mod spill {
        pub use crate::queue::spill::{
            AppendOutcome, FsyncPolicy, LedgerState, MemFs, SpillConfig, SpillError, SpillFs,
            SpillLog, SpillWriter,
        };

        /// The record format.
        pub mod record {
            pub use crate::queue::spill::record::{
                decode_batch, encode_record, payload_datapoints,
            };
        }

        /// The segment files.
        pub mod segment {
            pub use crate::queue::spill::segment::{SEGMENT_HEADER, file_name};
        }
    }
}

/// The destination writers' encoding.
pub mod destination {
    /// Appends `batches` to `out` as a destination writer does: pickle and protobuf in
    /// messages of at most `per_message` datapoints, lines otherwise. Returns the datapoints
    /// written.
    pub fn encode(
        protocol: crate::OutputProtocol,
        per_message: usize,
        batches: &[crate::batch::Batch],
        out: &mut bytes::BytesMut,
    ) -> usize {
        crate::destination::Encoder::new(protocol, per_message)
            .encode(batches, out)
            .datapoints
    }
}

/// The parse → route → queue pipeline.
pub mod ingest {
    pub use crate::ingest::{IngestStats, Pipeline};

    /// Feeds framed lines (what a plaintext receiver hands over) into `ingestor`.
    pub fn lines(ingestor: &mut crate::Ingestor, lines: &[Result<&[u8], crate::DropReason>]) {
        ingestor.lines(lines);
    }
}

/// Parts of the configuration the fuzz targets reach.
pub mod config {

    /// carbon.conf import.
    pub mod carbon {
        pub use crate::config::carbon::{from_text, parse_relay_rules};
    }

    /// carbon's INI dialect.
    pub mod ini {
        pub use crate::config::ini::Ini;
    }

    /// carbon-c-relay configuration import.
    pub mod c_relay {
        pub use crate::config::c_relay::check_text;
    }
}

/// Receiver constants and socket set-up the hostile-client tests depend on.
pub mod receiver {
    pub use crate::receiver::{MAX_COMPACT, READ_BUFFER};

    /// Connection admission.
    pub mod admission {
        pub use crate::receiver::admission::MIN_IDLE_TO_EVICT;
    }

    /// The UDP receiver.
    pub mod udp {
        pub use crate::receiver::udp::prepare_socket;
    }
}

/// A running relay's shared parts, for tests that look inside one, and its clocks.
pub mod relay {
    pub use crate::relay::FAIL_WAIT;

    /// The route cache every connection and source of the relay shares (the current
    /// routing generation's).
    pub fn route_cache(handle: &crate::RelayHandle) -> std::sync::Arc<crate::router::RouteCache> {
        handle.pipeline().route_cache()
    }
}

/// The shared pipeline behind a running relay (for tests that make their own ingestors).
pub fn pipeline(handle: &crate::RelayHandle) -> &crate::ingest::Pipeline {
    handle.pipeline()
}
