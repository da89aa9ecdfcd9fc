//! One bounded queue per destination.
//!
//! Receivers push whole [`Batch`](crate::batch::Batch)es; the destination task pops them,
//! writes them and then acknowledges (`ack`) or hands them back (`requeue`) when the write
//! failed, so data whose write failed is sent again after the reconnect. The queue is bounded
//! in datapoints and in bytes; what happens when a push does not fit is the destination's
//! [`WhenFull`] policy.
//!
//! With a spill directory configured the queue has two tiers: the memory tier (bounded in
//! datapoints and bytes, waiting plus in flight) and the destination's [`spill::SpillLog`] on
//! disk, driven by one dedicated thread per destination so no tokio worker ever waits on the
//! disk.
//!
//! ## Layout
//!
//! - [`core`](self::core): the state under the queue's lock and the accounting every tier shares;
//!   imports nothing above the queue.
//! - `memory`: the memory tier's operations on that state.
//! - [`spill`]: the disk tier, in one home: the spill log (its module documentation is the
//!   design), the tier's hand-over, replay and shutdown (`spill::tier`) and its thread
//!   (`spill::thread`).
//! - `spares`: written batches kept for the ingestors to fill again.
//! - `hand_over`: waiting batches moved to another destination's queue, within its bounds.
//! - [`DestinationQueue`]: what producers and the destination task use; the policies choose
//!   the tier here.
//! - [`policy`]: [`WhenFull`], [`PushMode`], [`DestinationDropReason`]; [`destination_stats`]: the
//!   destination's books.
//!
//! ## Tiers and order
//!
//! The memory tier is a FIFO of whole batches bounded by `max_datapoints` and `max_bytes`,
//! counting both waiting and in-flight batches, so the bound is the memory the tier really
//! holds. With [`WhenFull::Spill`] a push that does not fit goes to the destination's spill
//! thread (`spill::thread`), which appends it to the [`SpillLog`](spill::SpillLog).
//! Entering *disk mode*, the batches waiting in memory go to the spill thread first (they are
//! older, and on disk they survive a killed process), except records replayed from disk that
//! are still unacknowledged in the log. From then on every push also goes to the spill
//! thread, behind what is already on disk, until the disk tier is empty again. So the order
//! per destination is: replayed records and in-flight batches in memory (oldest), then disk
//! records, then the batches still being handed over — FIFO across both tiers, and across a
//! restart.
//!
//! ## The full wait
//!
//! Before a policy applies to what does not fit (spill, `drop_newest`, `drop_oldest`), a
//! producer that can wait is held back for room up to [`QueueLimits::full_wait`] per episode,
//! while the destination is connected and has not failed lately: a burst that a healthy
//! destination is draining is then back-pressure on the clients instead of disk writes and
//! replays, or drops. The episode starts when the memory tier is first found full and ends when
//! it has drained below half; a destination that stays behind gets its policy once the wait is
//! used up.
//!
//! ## When the disk cannot take data
//!
//! **A full or failing disk never loses more than a memory-only queue.** The batches waiting
//! in memory are moved only when the log's budget looks big enough for all of them; a moved
//! batch the log refuses anyway (disk full, I/O error) goes back to memory, with the records
//! of the same move the log already took read back ahead of it. While the log refuses, the
//! memory tier keeps its batches and takes what fits, as a memory-only queue would; only the
//! overflow is offered to the log, and what it refuses gets `spill_fallback`. In that state
//! the memory tier can hold batches older than the disk records; they are delivered first,
//! but a shutdown then writes them behind the disk records, so after that restart they are
//! replayed after newer data (the one case where order across a restart is not kept).
//!
//! ## Replay
//!
//! When the memory tier has room for at least two chunks (see below) and the disk tier holds
//! data, the consumer side asks the spill thread for records worth at most the free room minus
//! one chunk; they are appended to the memory tier tagged *from disk*. They stay unacknowledged
//! in the log until the destination acknowledges them, so a crash replays them again
//! (at-least-once). The spill thread paces replay by `replay_rate` datapoints per second.
//!
//! Batches are split into chunks of at most 1/8 of each memory bound before they go to disk,
//! so a replayed record never overshoots the memory bound.
//!
//! ## Hand-over buffer
//!
//! Batches on their way to disk (queued in the spill thread's channel, or held by the `block`
//! fallback while the disk budget is exhausted) are bounded separately by `staging_bytes`
//! (1/8 of `max_bytes`). When it is full, a TCP or embedded producer waits in
//! [`Ingestor::flush`](crate::ingest::Ingestor::flush); UDP drops, counted as `queue_full`.
//! This is the only place a producer can wait on the disk, and only when the disk is slower
//! than the input.
//!
//! ## Shutdown
//!
//! [`DestinationQueue::shut_down`] writes whatever is still in memory to the log (a
//! batch replayed from disk is not written again: it is still in the log, unacknowledged) and
//! syncs it. In disk mode the only memory batches not from disk are those the destination
//! had in flight when the queue entered disk mode and then handed back after a failed write
//! (at most one `flush_bytes` write): they are the one case replayed after newer records on
//! the next start.
//!
//! ## Accounting
//!
//! Exact, and kept under the queue's lock: for every destination,
//! `routed + moved_in = sent + dropped + queued + moved_out`, where `moved_out` and
//! `moved_in` are datapoints handed from one destination's queue to another's (`hand_over`:
//! a carbon-c-relay cluster's member that is down gives its lines to the others; both are 0
//! anywhere else), and `queued = queued(memory) + queued(disk)`: memory
//! counts datapoints waiting and in flight, disk counts datapoints handed to the spill thread
//! and not yet replayed into memory. Every accepted datapoint also has a position
//! ([`core`](self::core)), which delivery receipts wait on.

pub(crate) mod core;
mod destination_queue;
pub(crate) mod destination_stats;
mod hand_over;
mod memory;
pub(crate) mod policy;
mod spares;
pub(crate) mod spill;

pub(crate) use self::core::PushOutcome;
pub use self::core::QueueLimits;
pub(crate) use self::core::{DEFAULT_FULL_WAIT, DEFAULT_MAX_BYTES};
pub use self::spares::{MAX_SPARE_BYTES, spare_bytes};
pub use destination_queue::DestinationQueue;
pub(crate) use destination_queue::Settled;
pub use destination_stats::{DestinationSnapshot, DestinationStats, LastError, SpillSnapshot};
pub use policy::{DestinationDropReason, WhenFull};
pub(crate) use policy::{OverflowCause, PushMode};
pub(crate) use spill::tier::SpillSettings;

#[cfg(test)]
mod tests;
