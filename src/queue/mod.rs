//! One bounded queue per destination.
//!
//! Receivers push whole [`Batch`](crate::Batch)es; the destination task pops them, writes them
//! and then acknowledges (`ack`) or hands them back (`requeue`) when the write failed, so data
//! whose write failed is sent again after the reconnect. The queue is bounded in datapoints and
//! in bytes; what happens when a push does not fit is the destination's [`WhenFull`] policy.
//!
//! With a spill directory configured the queue has two tiers: the memory tier (bounded in
//! datapoints and bytes, waiting plus in flight) and the destination's [`spill::SpillLog`] on
//! disk, driven by one dedicated thread per destination so no tokio worker ever waits on the
//! disk. How they interact (overflow, FIFO across tiers, replay, shutdown) is described in
//! [`memory`].
//!
//! Accounting is exact and lives under the queue's lock: for every destination,
//! `routed = sent + dropped + queued`, where `queued = queued(memory) + queued(disk)`: memory
//! counts datapoints waiting and in flight, disk counts datapoints handed to the spill thread
//! and not yet replayed into memory.

mod disk_tier;
pub mod memory;
pub mod spill;
mod worker;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

pub use disk_tier::SpillSettings;
pub use memory::{DestinationQueue, PushOutcome, QueueLimits};

/// What a destination's queue does with a batch that does not fit in its memory tier.
///
/// The default is [`WhenFull::Spill`] when a spill directory is configured
/// (`[destinations.spill] dir`), otherwise [`WhenFull::DropNewest`] — carbon-relay's own
/// behaviour, so a relay.toml without a spill directory never writes to disk unexpectedly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Keep what is queued and drop the datapoints that do not fit (counted as
    /// `queue_full`). Data loss: the newest datapoints for this destination only; other
    /// destinations are unaffected. This is carbon-relay's behaviour.
    #[default]
    DropNewest,
    /// Evict the oldest waiting batches to make room (counted as `drop_oldest`). Data loss: the
    /// oldest undelivered datapoints of this destination (carbon-c-relay's behaviour); what
    /// arrives is the most recent data.
    DropOldest,
    /// Back-pressure: the producer waits until the destination has taken enough. TCP receivers
    /// stop reading their client sockets (clients see TCP back-pressure), non-socket sources
    /// (Kinesis, embedders) wait in [`Ingestor::flush`](crate::ingest::Ingestor::flush); UDP
    /// cannot wait and drops, counted as `queue_full`. Data loss: none in the relay, but one
    /// stuck destination stalls every client whose data routes to it.
    Block,
    /// Overflow into the destination's spill log on disk (`[destinations.spill]`), replayed
    /// oldest first when the memory tier drains; order stays FIFO across both tiers. Data loss:
    /// none within the disk budget; past it the `spill_fallback` policy applies (counted as
    /// `spill_full`, or `spill_io` on a disk error). Delivery is at-least-once: see
    /// [`spill`] for when duplicates can occur.
    Spill,
}

impl WhenFull {
    /// The policy's config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            WhenFull::DropNewest => "drop_newest",
            WhenFull::DropOldest => "drop_oldest",
            WhenFull::Block => "block",
            WhenFull::Spill => "spill",
        }
    }
}

/// Why a routed datapoint never reached its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DestinationDropReason {
    /// The queue was full and the policy dropped it (carbon's `fullQueueDrops`).
    QueueFull,
    /// Still queued when the shutdown grace period ended (and no spill log took it).
    Shutdown,
    /// Evicted by `drop_oldest` (memory policy or spill fallback) to make room.
    DropOldest,
    /// The spill log's byte budget was exhausted and the fallback dropped it.
    SpillFull,
    /// A disk error prevented spilling it and the fallback dropped it.
    SpillIo,
    /// Replay found it older than `spill.max_age_secs`.
    SpillExpired,
    /// Replay found its record torn or corrupt (CRC mismatch); the rest of that segment was
    /// abandoned.
    SpillCorrupt,
    /// The destination's wire format cannot carry it: a protobuf timestamp outside `uint32` or
    /// a name that is not UTF-8, a plaintext line longer than a UDP datagram.
    Unencodable,
    /// The kernel refused the UDP datagram carrying it (e.g. `ECONNREFUSED`).
    SendFailed,
}

impl DestinationDropReason {
    /// Every reason.
    pub const ALL: [DestinationDropReason; 9] = [
        DestinationDropReason::QueueFull,
        DestinationDropReason::Shutdown,
        DestinationDropReason::DropOldest,
        DestinationDropReason::SpillFull,
        DestinationDropReason::SpillIo,
        DestinationDropReason::SpillExpired,
        DestinationDropReason::SpillCorrupt,
        DestinationDropReason::Unencodable,
        DestinationDropReason::SendFailed,
    ];

    /// The `reason` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            DestinationDropReason::QueueFull => "queue_full",
            DestinationDropReason::Shutdown => "shutdown",
            DestinationDropReason::DropOldest => "drop_oldest",
            DestinationDropReason::SpillFull => "spill_full",
            DestinationDropReason::SpillIo => "spill_io",
            DestinationDropReason::SpillExpired => "spill_expired",
            DestinationDropReason::SpillCorrupt => "spill_corrupt",
            DestinationDropReason::Unencodable => "unencodable",
            DestinationDropReason::SendFailed => "send_failed",
        }
    }
}

/// Current queue depth, readable without the queue's lock, and the peak since last read.
#[derive(Debug, Default)]
pub struct QueueDepth {
    datapoints: AtomicU64,
    bytes: AtomicU64,
    peak: AtomicU64,
}

impl QueueDepth {
    /// Records a new depth (datapoints waiting or in flight, bytes waiting).
    pub fn set(&self, datapoints: usize, bytes: usize) {
        self.datapoints.store(datapoints as u64, Relaxed);
        self.bytes.store(bytes as u64, Relaxed);
        self.peak.fetch_max(datapoints as u64, Relaxed);
    }

    /// Datapoints waiting or in flight.
    pub fn datapoints(&self) -> u64 {
        self.datapoints.load(Relaxed)
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// The largest depth seen since the previous call, then restarts from the current depth.
    pub fn take_peak(&self) -> u64 {
        self.peak.swap(self.datapoints.load(Relaxed), Relaxed)
    }
}
