//! The queue's policies and reasons: what a full queue does ([`WhenFull`]), how a producer
//! may wait ([`PushMode`]), and why a routed datapoint was dropped ([`DestinationDropReason`],
//! the `reason` label of the drop counters).

use serde::{Deserialize, Serialize};

/// What a destination's queue does with a batch that does not fit in its memory tier.
///
/// The default is [`WhenFull::Spill`] when a spill directory is configured
/// (`[destinations.spill] dir`), otherwise [`WhenFull::DropNewest`] — carbon-relay's own
/// behaviour, so a relay.toml without a spill directory never writes to disk unexpectedly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
    /// the spill log's design (`queue::spill`) for when duplicates can occur.
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
#[non_exhaustive]
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

/// Why a full memory tier's policy (spill, `drop_newest`, `drop_oldest`) applied to a batch
/// instead of holding its producer back (the `cause` label of
/// `anthracite_destination_overflows_total`). A destination whose writes make progress and
/// do not wait on its peer is never one of these: when the relay itself is the bottleneck its
/// producers wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OverflowCause {
    /// The destination is not connected, or its connection failed, was lost or timed out a
    /// write in the last minute (declared dead).
    Down,
    /// The destination stayed behind its input for a whole full wait while connected: its
    /// writes waited on the peer for at least half of it.
    Behind,
    /// Waiting does not apply: the producer cannot wait (UDP), `full_wait_ms = 0`, the batch
    /// is larger than the whole memory tier, or the spill log is refusing data.
    NoWait,
}

impl OverflowCause {
    /// Every cause.
    pub const ALL: [OverflowCause; 3] = [
        OverflowCause::Down,
        OverflowCause::Behind,
        OverflowCause::NoWait,
    ];

    /// The `cause` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            OverflowCause::Down => "down",
            OverflowCause::Behind => "behind",
            OverflowCause::NoWait => "no_wait",
        }
    }
}

/// How a producer hands a batch to a queue: whether it can wait, and for what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushMode {
    /// Never wait (UDP, a dropped `Ingestor`): `block` and a full hand-over buffer to the
    /// spill log drop what does not fit, counted as `queue_full`.
    NoWait,
    /// Wait where the policy says so: `block`, or a full hand-over buffer to the spill log
    /// (TCP receivers, embedders).
    Wait,
    /// A source that can pause (Kinesis): wait for room instead of applying a dropping policy
    /// (`drop_newest`, `drop_oldest`, or the spill fallback); `spill` still spills.
    Backpressure,
}
