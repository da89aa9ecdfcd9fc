//! A copy of every counter of a relay, collected from the ingest side's books and each
//! destination's.

use crate::ingest::{IngestSnapshot, Source, SourceSnapshot};
use crate::protocol::DropCounts;
use crate::queue::{DestinationSnapshot, DestinationStats};

/// A copy of a relay's counters.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Datapoints accepted by every source.
    pub received: u64,
    /// Datapoints accepted, per source.
    pub received_by_source: Vec<(Source, u64)>,
    /// Rejected while parsing, per reason.
    pub invalid: DropCounts,
    /// Open client connections.
    pub active_connections: u64,
    /// Connections refused at the limit.
    pub rejected_connections: u64,
    /// Connections closed by the idle timeout.
    pub idle_closed_connections: u64,
    /// Idle connections closed to admit a new one at the limit.
    pub evicted_connections: u64,
    /// Failed `accept` calls.
    pub accept_errors: u64,
    /// Bytes held by client connections' read buffers and pickle decoders now.
    pub buffered_bytes: u64,
    /// Datagrams the kernel dropped on the UDP socket (receive buffer full).
    pub udp_kernel_drops: u64,
    /// Datapoints dropped because their name matched the blacklist.
    pub blacklist_matches: u64,
    /// Datapoints dropped because their name was not on a non-empty whitelist.
    pub whitelist_rejects: u64,
    /// Per destination, indexed like the router's destinations.
    pub destinations: Vec<DestinationSnapshot>,
    /// Destinations a configuration reload removed that still hold data (delivering it, or
    /// keeping it in their spill log).
    pub removed: Vec<DestinationSnapshot>,
    /// Per source, in [`Source::ALL`] order.
    pub sources: Vec<SourceSnapshot>,
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
            received: ingest.received,
            received_by_source: ingest.received_by_source,
            invalid: ingest.invalid,
            active_connections: ingest.active_connections,
            rejected_connections: ingest.rejected_connections,
            idle_closed_connections: ingest.idle_closed_connections,
            evicted_connections: ingest.evicted_connections,
            accept_errors: ingest.accept_errors,
            buffered_bytes: ingest.buffered_bytes,
            udp_kernel_drops: ingest.udp_kernel_drops,
            blacklist_matches: ingest.blacklist_matches,
            whitelist_rejects: ingest.whitelist_rejects,
            destinations: destinations.into_iter().map(|d| d.snapshot()).collect(),
            removed: Vec::new(),
            sources: ingest.sources,
            reloads: ReloadCounts::default(),
        }
    }
}
