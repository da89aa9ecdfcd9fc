//! Checkpoints in the lease rows, behind the same [`CheckpointStore`] seam as the file store.

use std::fmt;
use std::sync::Arc;

use super::worker::Leases;
use crate::relay::source::checkpoint::{CheckpointStore, StoreFuture, StreamCheckpoint};

/// Writes each shard's checkpoint into its lease row, fenced by the lease this worker holds:
/// shards it does not hold are skipped, and a write that fails its condition loses the lease
/// (its reader stops at once) instead of overwriting the new owner's checkpoint.
#[derive(Clone)]
pub(crate) struct LeaseStore {
    leases: Arc<Leases>,
    stream: String,
}

impl LeaseStore {
    pub(crate) fn new(leases: Arc<Leases>, stream: &str) -> Self {
        Self {
            leases,
            stream: stream.to_string(),
        }
    }
}

impl fmt::Debug for LeaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseStore")
            .field("stream", &self.stream)
            .field("worker", &self.leases.worker())
            .finish()
    }
}

impl CheckpointStore for LeaseStore {
    /// Empty: positions arrive with each lease taken (the row's checkpoint), never for shards
    /// this worker does not hold.
    fn load(&self) -> StoreFuture<'_, StreamCheckpoint> {
        Box::pin(std::future::ready(Ok(StreamCheckpoint {
            version: 1,
            stream: self.stream.clone(),
            shards: Default::default(),
        })))
    }

    fn save<'a>(&'a self, checkpoint: &'a StreamCheckpoint) -> StoreFuture<'a, ()> {
        Box::pin(async move { Ok(self.leases.save(checkpoint).await?) })
    }
}
