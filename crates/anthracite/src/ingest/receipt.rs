//! Delivery receipts: wait until what an ingestor flushed has left the destination queues.

use std::sync::Arc;

use crate::queue::{DestinationQueue, Settled};

/// How a [`Receipt`] resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// Everything the receipt covers left its destination queues: written to the destination
    /// and the connection seen alive afterwards (carbon's protocols have no acknowledgement),
    /// or dropped and counted in the destination's drop counters.
    Settled,
    /// The relay shut down first. What was left is in the spill log, replayed on the next
    /// start, or was counted as dropped (`shutdown`).
    ShutDown,
}

/// What an ingestor had flushed when the receipt was taken, per destination: the queue and the
/// position after the last datapoint handed to it. Cheap to hold; waits without polling.
#[derive(Clone, Debug, Default)]
pub struct Receipt {
    marks: Vec<(Arc<DestinationQueue>, u64)>,
}

impl Receipt {
    pub(crate) fn new(marks: Vec<(Arc<DestinationQueue>, u64)>) -> Self {
        Self { marks }
    }

    /// True when the receipt covers nothing (nothing was flushed).
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// Resolves once every datapoint the receipt covers has left its destination queue, or the
    /// relay shut down first.
    pub async fn delivered(&self) -> Delivery {
        let mut outcome = Delivery::Settled;
        for (queue, mark) in &self.marks {
            if queue.settled(*mark).await == Settled::Stopped {
                outcome = Delivery::ShutDown;
            }
        }
        outcome
    }
}
