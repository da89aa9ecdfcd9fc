//! The crate's internals for its own tests, benchmarks and fuzz targets and for anthracite's
//! process-level tests, behind the Cargo feature `unstable` and hidden from the documentation.
//! **No stability promise.** Every item is listed by name.

/// Shard leases.
#[cfg(feature = "aws")]
pub mod leases {
    pub use crate::relay::source::leases::{
        Checkpoint, DynamoDbTable, Fence, Lease, LeaseTable, MemTable, Outcome, Update,
    };
}
