//! The lease table behind a small trait: DynamoDB in production ([`DynamoDbTable`]), an
//! in-memory map with the same conditional semantics in model tests ([`MemTable`]).
//!
//! [`DynamoDbTable`]: super::DynamoDbTable
//! [`MemTable`]: super::MemTable

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::lease::{Checkpoint, Lease};

/// What a table call returns.
pub(super) type TableFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, TableError>> + Send + 'a>>;

/// Errors of the lease table other than a failed condition (which is an [`Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The call failed (network, throttling after the SDK's retries, permissions, a missing
    /// table). Nothing is known about whether a write happened.
    #[error("lease table {table}: {operation} failed: {message}")]
    Service {
        /// The table.
        table: String,
        /// The API call.
        operation: &'static str,
        /// The error chain.
        message: String,
    },
    /// A row that does not hold a lease the way KCL writes one.
    #[error("lease table {table}: row {key:?} is not a valid lease: {message}")]
    Malformed {
        /// The table.
        table: String,
        /// The row's `leaseKey` (empty when missing).
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// The result of a conditional write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Outcome {
    /// The condition held and the row was written.
    Written,
    /// The condition failed: the row changed since it was read (or does not exist).
    Conflict,
}

/// The state a write expects the row to be in: `leaseCounter = counter` and `leaseOwner =
/// owner` (absent when `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The expected `leaseCounter`.
    pub counter: u64,
    /// The expected `leaseOwner`.
    pub owner: Option<String>,
}

/// A fenced update of one lease row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// `leaseOwner = worker`, counter + 1; `ownerSwitchesSinceCheckpoint` + 1 when the row had
    /// another owner.
    Take {
        /// The new owner.
        worker: String,
    },
    /// Counter + 1. Also requires that no handoff is pending: a renewal that fails on a mark
    /// tells the owner a peer asked for the lease.
    Renew,
    /// `checkpoint`, `checkpointSubSequenceNumber`; `ownerSwitchesSinceCheckpoint = 0`. The
    /// counter is unchanged: only ownership writes move it, so peers judge liveness by
    /// renewals alone.
    Checkpoint(Checkpoint),
    /// `checkpoint = SHARD_END`, owner removed, counter + 1: the shard is done and nobody needs
    /// to hold it.
    End,
    /// Owner removed, counter + 1: a peer may take it at once.
    Release,
    /// `handoffTo = worker`, counter unchanged: asks the owner to checkpoint and hand the
    /// lease over at its next renewal. Also requires that no handoff is pending.
    Mark {
        /// The worker asking for the lease.
        worker: String,
    },
    /// `leaseOwner = to` (the worker that marked it), counter and owner switches each one
    /// higher, the mark kept: the owner hands the lease over after its final checkpoint, and
    /// `to` takes the row it now owns but does not hold yet (that take removes the mark).
    Transfer {
        /// The new owner.
        to: String,
    },
}

impl Update {
    /// Whether the write moves `leaseCounter` (everything but a checkpoint and a mark).
    pub fn bumps_counter(&self) -> bool {
        !matches!(self, Update::Checkpoint(_) | Update::Mark { .. })
    }

    /// Whether the write also requires `attribute_not_exists(handoffTo)`.
    pub fn requires_unmarked(&self) -> bool {
        matches!(self, Update::Renew | Update::Mark { .. })
    }

    /// Whether the write's whole condition holds for `row` (the model of the condition
    /// expression).
    pub fn condition_holds(&self, fence: &Fence, row: &Lease) -> bool {
        fence.matches(row) && !(self.requires_unmarked() && row.handoff.is_some())
    }

    /// The owner the row has after the write, given the owner it had.
    pub fn owner_after<'a>(&'a self, before: Option<&'a str>) -> Option<&'a str> {
        match self {
            Update::Take { worker } => Some(worker),
            Update::Transfer { to } => Some(to),
            Update::Renew | Update::Checkpoint(_) | Update::Mark { .. } => before,
            Update::End | Update::Release => None,
        }
    }

    /// The API-level name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Update::Take { .. } => "take",
            Update::Renew => "renew",
            Update::Checkpoint(_) => "checkpoint",
            Update::End => "shard end",
            Update::Release => "release",
            Update::Mark { .. } => "handoff mark",
            Update::Transfer { .. } => "handoff transfer",
        }
    }

    /// Applies the update to a row whose fence matched (the model of the conditional write).
    pub fn apply(&self, row: &mut Lease) {
        if self.bumps_counter() {
            row.counter += 1;
        }
        match self {
            Update::Take { worker } => {
                if row.owner.as_deref().is_some_and(|o| o != worker) {
                    row.owner_switches += 1;
                }
                row.owner = Some(worker.clone());
                row.handoff = None;
            }
            Update::Renew => {}
            Update::Mark { worker } => row.handoff = Some(worker.clone()),
            Update::Transfer { to } => {
                row.owner = Some(to.clone());
                row.owner_switches += 1;
            }
            Update::Checkpoint(cp) => {
                row.checkpoint = cp.clone();
                row.owner_switches = 0;
            }
            Update::End => {
                row.checkpoint = Checkpoint::ShardEnd;
                row.owner_switches = 0;
                row.owner = None;
                row.handoff = None;
            }
            Update::Release => {
                row.owner = None;
                row.handoff = None;
            }
        }
    }
}

impl Fence {
    /// Whether `row` is in the expected state.
    pub fn matches(&self, row: &Lease) -> bool {
        row.counter == self.counter && row.owner == self.owner
    }
}

/// The lease table's operations. Every call is one request; conditional writes answer
/// [`Outcome::Conflict`] when their condition fails.
pub trait LeaseTable: Send + Sync + fmt::Debug {
    /// The table's name.
    fn name(&self) -> &str;
    /// Creates the table when it does not exist (hash key `leaseKey`, on-demand billing) and
    /// waits until it is active.
    fn ensure_table(&self) -> TableFuture<'_, ()>;
    /// Every row (strongly consistent).
    fn scan(&self) -> TableFuture<'_, Vec<Lease>>;
    /// One row (strongly consistent).
    fn get<'a>(&'a self, key: &'a str) -> TableFuture<'a, Option<Lease>>;
    /// Writes `lease` if no row has its key (`attribute_not_exists(leaseKey)`).
    fn create<'a>(&'a self, lease: &'a Lease) -> TableFuture<'a, Outcome>;
    /// Applies `update` if the row matches `fence` (and, for a renewal or a mark, has no
    /// pending handoff).
    fn update<'a>(
        &'a self,
        key: &'a str,
        fence: &'a Fence,
        update: &'a Update,
    ) -> TableFuture<'a, Outcome>;
    /// Adds `child` to `childShardIds` if the row exists. Metadata only: it touches neither
    /// owner, counter nor checkpoint, and adding to a set commutes with every other write.
    fn add_child<'a>(&'a self, key: &'a str, child: &'a str) -> TableFuture<'a, Outcome>;
    /// Deletes the row if its checkpoint is `SHARD_END`.
    fn delete_ended<'a>(&'a self, key: &'a str) -> TableFuture<'a, Outcome>;
}
