//! A copy of every counter of a relay, collected from the ingest side's books and each
//! destination's.

use crate::ingest::IngestSnapshot;
use crate::queue::{DestinationSnapshot, DestinationStats};

/// A copy of a relay's counters.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// What the receivers and other sources took in and rejected.
    pub ingest: IngestSnapshot,
    /// Per destination, indexed like the router's destinations.
    pub destinations: Vec<DestinationSnapshot>,
    /// Destinations a configuration reload removed that still hold data (delivering it, or
    /// keeping it in their spill log).
    pub removed: Vec<DestinationSnapshot>,
    /// Configuration reloads.
    pub reloads: ReloadCounts,
}

/// Configuration reloads so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadCounts {
    /// New configurations applied.
    pub applied: u64,
    /// New configurations rejected (invalid, or a change that needs a restart).
    pub rejected: u64,
}

impl StatsSnapshot {
    /// Assembles a snapshot from the ingest side's books and each destination's, in the
    /// router's destination order.
    pub fn collect<'a>(
        ingest: IngestSnapshot,
        destinations: impl IntoIterator<Item = &'a DestinationStats>,
    ) -> Self {
        StatsSnapshot {
            ingest,
            destinations: destinations.into_iter().map(|d| d.snapshot()).collect(),
            removed: Vec::new(),
            reloads: ReloadCounts::default(),
        }
    }
}
