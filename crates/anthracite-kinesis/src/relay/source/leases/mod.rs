//! # Shard leases: many relays, one stream
//!
//! With `lease_table` set, the relays reading one stream share its shards through a DynamoDB
//! table laid out like the Kinesis Client Library 2.x's, so KCL-aware tooling can read it. A
//! relay is a *worker*; it reads only the shards whose lease it holds, and keeps their
//! checkpoints in the lease rows instead of a local file. This is KCL 2.x's algorithm
//! (`LeaseTaker`, `LeaseRenewer`) with KCL 3.x's graceful lease handoff for balancing, without
//! KCL 3's leader election and CPU balancing. This module owns the table and the worker's
//! lease state; the coordinator asks it which shards to read, and it stops a reader whose
//! lease is gone or asked for.
//!
//! ## The table
//!
//! Hash key `leaseKey` (string), on-demand billing, created on first use. One row per shard
//! ([`lease::attr`] has the attribute names):
//!
//! | attribute | meaning |
//! |---|---|
//! | `leaseKey` | the shard id |
//! | `leaseOwner` | the worker holding the lease; absent when nobody does |
//! | `leaseCounter` | bumped by every ownership write: take, renew, release, shard end |
//! | `checkpoint` | last delivered sequence number, or `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP`, `SHARD_END` |
//! | `checkpointSubSequenceNumber` | the user record's index inside a KPL aggregate |
//! | `ownerSwitchesSinceCheckpoint` | takes from another owner since the last checkpoint |
//! | `parentShardId` | the shard's parents (a set; KCL's name) |
//! | `childShardIds` | its children, once resharding closed it |
//! | `startingHashKey`, `endingHashKey` | its hash key range |
//! | `handoffTo` | a worker that asked the owner to hand the lease over; absent otherwise |
//!
//! `handoffTo` is anthracite's own. KCL 3.x marks a handoff by moving `leaseOwner` to the new
//! owner and keeping the old one in `checkpointOwner`, which its leader-driven assignment
//! needs; here `leaseOwner` stays with the worker reading the shard until it releases, so KCL
//! 2.x tooling reads every row as it is.
//!
//! One table holds one stream. `worker_id` (default `<hostname>-<pid>`) must be unique among
//! the live workers.
//!
//! ## Worker state
//!
//! - **Held leases** (`held.rs`): per shard, the counter this worker last wrote, when the
//!   lease stops being valid (`valid_until` = send time of the last successful renewal or
//!   take + `lease_duration`), the checkpoint at take time, and a [`LeaseGuard`] shared with
//!   the shard's reader.
//! - **Observed rows** (`taker.rs`): the last scan, and for each row the instant (this worker's
//!   clock) it first saw the row's current counter.
//!
//! ## Every write and its condition
//!
//! | write | who, when | condition | effect |
//! |---|---|---|---|
//! | create row | shard sync | `attribute_not_exists(leaseKey)` | new unowned row, counter 0 |
//! | take | taker | `leaseCounter` and `leaseOwner` as last seen (owner absent if none) | owner = me, counter + 1, `ownerSwitchesSinceCheckpoint` + 1 from another owner, mark removed |
//! | mark | taker, to balance | `leaseCounter` and `leaseOwner` as last seen ∧ no mark | `handoffTo` = me; counter unchanged |
//! | renew | renewer, every `lease_duration / 3` | `leaseCounter = held ∧ leaseOwner = me` ∧ no mark | counter + 1 |
//! | checkpoint | checkpoint commit, handoff | `leaseCounter = held ∧ leaseOwner = me` | `checkpoint`, sub-sequence; owner switches 0; counter unchanged |
//! | shard end | commit when a reader reached SHARD_END | same | `SHARD_END`, owner and mark removed, counter + 1 |
//! | release | graceful shutdown, after the final checkpoint | same | owner and mark removed, counter + 1 |
//! | transfer | handoff, after the reader's final checkpoint | same | owner = the asker (mark kept), counter + 1, owner switches + 1 |
//! | add child | shard sync | `attribute_exists(leaseKey)` | `ADD childShardIds` (metadata only) |
//! | delete | shard sync, shard past retention | `checkpoint = SHARD_END` | row removed |
//!
//! Every write that touches ownership or a checkpoint is fenced on the counter and the owner:
//! after anyone else's take the counter differs, so a stale owner's renewal or checkpoint
//! fails ([`Outcome::Conflict`]) and can never overwrite the new owner's checkpoint. A
//! checkpoint does not move the counter, so peers judge liveness by renewals alone. A
//! conflict on a counter-moving write is double-checked by reading the row, because the SDK
//! may have retried a request that had landed.
//!
//! ## The algorithm
//!
//! - **Expiry** is judged by the observer's own clock: a lease whose counter has not changed
//!   for `lease_duration` since this worker first saw that counter is expired. No clocks are
//!   compared between machines.
//! - **Renewer**, every `lease_duration / 3`: renews every held lease. A renewal that fails
//!   its condition loses the lease at once; one that errors is retried next cycle, and a
//!   lease not renewed for `lease_duration` (this worker's clock) is dropped as expired.
//! - **Taker**, every `lease_duration / 3` and when woken (new rows, a shard ended): scans,
//!   then with `n` unfinished leases and `w` workers holding one (itself included), target
//!   ⌈n/w⌉ (1 if w ≥ n). Below target it takes unowned and expired leases, in random order;
//!   with none available it asks for at most one per cycle from the most loaded worker when
//!   that one holds more than the target, or exactly the target while this worker is short
//!   by two or more (a *handoff*, below). A lease marked for handoff counts for the worker
//!   that asked, in everyone's targets. Fleets settle at ⌈n/w⌉ or ⌊n/w⌋ each.
//! - **Readers** run only for held leases whose parents' rows all hold `SHARD_END` (or are
//!   gone with their shard past retention). Before every GetRecords call and right before
//!   every hand-over to the destination queues (nothing awaits between that check and the
//!   flush) a reader checks its [`LeaseGuard`]: lost, or not renewed within `lease_duration`
//!   by this worker's monotonic clock, and it stops, discarding what it fetched and parsed.
//!   Losing a lease cancels the guard, which stops the reader at once, even mid-call. Each
//!   loss is counted once (`leases_lost`, reason `taken` or `expired`), by whoever finds it
//!   first: the renewer, a checkpoint, or the reader.
//!
//! Safety rests on one inequality: a worker's lease is valid until `send time of its last
//! successful renewal + lease_duration`; a peer takes it no earlier than `the instant it first
//! saw that renewal's counter + lease_duration`, and it can only see the counter after the
//! write, which follows the send. With clocks that run at the same rate, the old owner's
//! validity has ended before a peer's take.
//!
//! ## Graceful handoff (balancing)
//!
//! KCL 3.x's graceful lease handoff, without its leader: a worker below target never takes a
//! live worker's lease outright, which made the new owner re-read everything delivered since
//! the old owner's last checkpoint. Instead:
//!
//! 1. **Mark.** The taker writes `handoffTo = me` on one lease of the most loaded worker,
//!    fenced on the counter and owner it saw and on no mark being there (one asker at a
//!    time). The counter does not move: the owner keeps its lease.
//! 2. **Owner learns at its next renewal.** Renewals require no mark, so the owner's next
//!    renewal of that lease fails its condition; the read that double-checks every failed
//!    counter write finds the row unchanged but marked, and the lease is flagged *handoff*
//!    instead of lost. It is no longer renewed and no new reader starts for it; its guard
//!    still runs out one lease duration after the last renewal, but the fenced checkpoint and
//!    transfer below may land later (on a loaded machine) as long as no peer has taken the
//!    lease meanwhile. The worker forgets the lease a second lease duration later.
//! 3. **Owner hands over.** The coordinator stops the shard's reader, which delivers the
//!    batch in hand and publishes its position; then it commits the checkpoint (fenced, as
//!    every checkpoint) and transfers the lease: `leaseOwner` = the asker, counter + 1, mark
//!    kept. A plain release would not do: a worker holding no lease is invisible to its
//!    peers' targets, so the old owner's own taker would take the lease straight back.
//! 4. **New owner resumes.** The asker's next taker cycle finds a row it owns and is marked
//!    for it but that it does not hold, and takes it (fenced; mark removed), valid at once
//!    (the old reader stopped before the transfer was sent), at exactly the position the old
//!    owner delivered: zero duplicates.
//!
//! Fallbacks, each today's take: an owner that dies mid-handoff stops renewing, so its lease
//! expires and is taken (by anyone) from its last checkpoint — the one written in step 3 if
//! it landed; an owner that keeps renewing but never hands over (a relay from before
//! handoffs, which ignores marks) loses the lease to a plain steal once the asker has seen its
//! mark for one lease duration by its own clock. A lease transferred to an asker that died
//! meanwhile stops being renewed and expires like any dead worker's.
//!
//! ## Checkpoints
//!
//! [`LeaseStore`] is the [`CheckpointStore`](super::CheckpointStore) of lease mode: the
//! coordinator commits exactly as with files (interval, shard end, shutdown), and the store
//! writes each held shard whose position moved forward since its row's checkpoint, fenced as
//! above. The at-least-once rule is unchanged: a reader publishes a position only after every
//! earlier line of its shard was accepted by the destination queues. A new owner resumes at
//! the row's checkpoint.
//!
//! ## Resharding
//!
//! Shard sync (`sync.rs`, on the coordinator's `shard_sync_interval` and at every shard end)
//! creates rows for listed shards that have none: when the table is empty, at the configured
//! initial position (or a migrated file position); afterwards, children of a reshard at
//! `TRIM_HORIZON`, their parents in `parentShardId` (from ListShards, since local servers do
//! not return `ChildShards`), and the children added to the parents' `childShardIds`. The
//! worker that reads a parent to its end writes `SHARD_END` and releases the lease in one
//! fenced write; a child is read only after all its parents' rows hold `SHARD_END`, on any
//! worker, so per-key order survives a split or merge while the fleet runs.
//!
//! ## Failure cases
//!
//! - **Crash** (kill -9, machine loss): nothing is released; each peer sees the counters stop
//!   and takes the leases `lease_duration` after it first saw the last renewal, within one
//!   taker cycle. The new owner re-reads from the row's checkpoint: at most one checkpoint
//!   interval of records is delivered twice.
//! - **Graceful shutdown** (SIGTERM): the taker and renewer stop, readers flush, the final
//!   checkpoint is written (fenced), then every lease is released; peers take them at their
//!   next taker cycle and resume exactly where this worker stopped: no duplicates.
//! - **Pause** longer than `lease_duration` (SIGSTOP, a frozen container): the monotonic
//!   clock runs on while the process is stopped, so on resume the guard has expired and the
//!   reader discards whatever it holds — a batch fetched before the pause, one fetched during
//!   it, parsed or not — before its next fetch or hand-over; the next renewal or checkpoint
//!   fails its condition and drops the lease. Only a flush already under way when the pause
//!   began (the queues taking batches the reader checked just before) completes late.
//! - **Table unreachable**: renewals fail; after `lease_duration` this worker stops reading
//!   (expired by its own clock), whether or not a peer could take over.
//! - **Handoff** (balancing): the owner learns at its next renewal, within
//!   `lease_duration / 3`, stops the shard's reader, checkpoints and transfers the lease; the
//!   asker takes it at its next taker cycle and resumes where the owner stopped: no
//!   duplicates.
//!   The owner dying meanwhile costs what a crash costs (records since its last checkpoint
//!   read twice, nothing lost).
//! - **Steal** (fallback, an owner that ignores marks for a lease duration): the old owner
//!   learns at its next renewal or checkpoint; records it delivered after its last
//!   checkpoint are read again by the new owner.
//!
//! ## Migration from a checkpoint file
//!
//! A relay configured with both `lease_table` and `checkpoint_dir` reads its file at startup;
//! if it is the worker that fills the empty table, each row starts at the file's position for
//! that shard (or `SHARD_END`), so the fleet does not re-read the stream.
//!
//! ## Testing
//!
//! The table sits behind [`LeaseTable`]: [`DynamoDbTable`] in production, [`MemTable`] (the
//! same conditional semantics in a map) in `model_tests`, which race several workers with
//! simulated clocks, crashes, pauses, shutdowns and handoffs (owners dying mid-handoff
//! included) against the invariants above. The
//! integration tests run real relays on DynamoDB Local and kinesalite.

mod dynamo;
mod held;
pub(crate) mod lease;
mod memory;
mod store;
pub(crate) mod sync;
mod table;
mod taker;
pub(crate) mod worker;

#[cfg(test)]
mod model_tests;

pub use dynamo::DynamoDbTable;
pub(crate) use held::LeaseGuard;
pub use lease::{Checkpoint, Lease};
pub use memory::MemTable;
pub(crate) use store::LeaseStore;
pub(crate) use table::TableError;
pub use table::{Fence, LeaseTable, Outcome, Update};
