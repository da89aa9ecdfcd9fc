//! The crate's internals for its own tests, benchmarks and fuzz targets and for anthracite's
//! process-level tests, behind the Cargo feature `unstable` and hidden from the documentation.
//! **No stability promise.** Every item is listed by name.

/// Checkpoints.
#[cfg(feature = "aws")]
pub mod checkpoint {
    pub use crate::relay::source::checkpoint::{
        FileStore, Position, SequenceNumber, ShardCheckpoint, StreamCheckpoint,
    };
}

/// Shard leases.
#[cfg(feature = "aws")]
pub mod leases {
    pub use crate::relay::source::leases::{
        Checkpoint, DynamoDbTable, Fence, Lease, LeaseTable, MemTable, Outcome, Update,
    };
}

/// Where a shard without a checkpoint starts.
pub use crate::config::InitialPosition;
