//! One bounded queue per destination.
//!
//! Receivers push whole [`Batch`](crate::Batch)es; the destination task pops them, writes them
//! and then acknowledges (`ack`) or hands them back (`requeue`) when the write failed, so data
//! whose write failed is sent again after the reconnect. The queue is bounded in datapoints and
//! in bytes; what happens when a push does not fit is the destination's [`WhenFull`] policy.
//!
//! Accounting is exact and lives under the queue's lock: for every destination,
//! `routed = sent + dropped + queued`, where `queued` counts datapoints waiting and in flight.

pub mod memory;
pub mod spill;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

pub use memory::{DestinationQueue, PushOutcome, QueueLimits};

/// What a destination's queue does with a batch that does not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Keep what is queued and drop the datapoints that do not fit (counted as
    /// `queue_full`). Data loss: the newest datapoints for this destination only; other
    /// destinations are unaffected. This is carbon-relay's behaviour.
    #[default]
    DropNewest,
}

impl WhenFull {
    /// The policy's config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            WhenFull::DropNewest => "drop_newest",
        }
    }
}

/// Why a routed datapoint never reached its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DestinationDropReason {
    /// The queue was full and the policy dropped it (carbon's `fullQueueDrops`).
    QueueFull,
    /// Still queued when the shutdown grace period ended.
    Shutdown,
}

impl DestinationDropReason {
    /// Every reason.
    pub const ALL: [DestinationDropReason; 2] = [
        DestinationDropReason::QueueFull,
        DestinationDropReason::Shutdown,
    ];

    /// The `reason` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            DestinationDropReason::QueueFull => "queue_full",
            DestinationDropReason::Shutdown => "shutdown",
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
