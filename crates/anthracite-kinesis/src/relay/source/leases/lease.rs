//! One lease row: a shard, its owner and its checkpoint, in the Kinesis Client Library 2.x
//! layout so KCL-aware tooling can read the table.

use std::fmt;

use crate::relay::source::checkpoint::{Position, SequenceNumber};

/// DynamoDB attribute names, exactly as KCL 2.x writes them (`DynamoDBLeaseSerializer`).
pub(crate) mod attr {
    /// S, the table's hash key: the shard id.
    pub(crate) const LEASE_KEY: &str = "leaseKey";
    /// S: the worker holding the lease; absent when nobody does.
    pub(crate) const LEASE_OWNER: &str = "leaseOwner";
    /// N: bumped by every ownership write (take, renew, release, shard end).
    pub(crate) const LEASE_COUNTER: &str = "leaseCounter";
    /// S: a sequence number, or `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP`, `SHARD_END`.
    pub(crate) const CHECKPOINT: &str = "checkpoint";
    /// N: the user record's index inside a KPL aggregate (0 for plain records and sentinels).
    pub(crate) const CHECKPOINT_SUB_SEQUENCE: &str = "checkpointSubSequenceNumber";
    /// N: owner changes since the last checkpoint write.
    pub(crate) const OWNER_SWITCHES: &str = "ownerSwitchesSinceCheckpoint";
    /// SS: the shard's parents. KCL names this attribute `parentShardId` (singular, though it
    /// is a set: two parents after a merge).
    pub(crate) const PARENT_SHARD_IDS: &str = "parentShardId";
    /// SS: the shard's children, once a split or merge closed it.
    pub(crate) const CHILD_SHARD_IDS: &str = "childShardIds";
    /// S: the first hash key of the shard's range (decimal).
    pub(crate) const STARTING_HASH_KEY: &str = "startingHashKey";
    /// S: the last hash key of the shard's range (decimal).
    pub(crate) const ENDING_HASH_KEY: &str = "endingHashKey";
    /// S: the worker that asked the owner to hand the lease over (anthracite's own attribute;
    /// absent when no handoff is pending).
    pub(crate) const HANDOFF_TO: &str = "handoffTo";
}

/// KCL's sentinel checkpoint values.
pub(crate) mod sentinel {
    /// Read from the oldest retained record.
    pub(crate) const TRIM_HORIZON: &str = "TRIM_HORIZON";
    /// Read from the newest record at the time the reader starts.
    pub(crate) const LATEST: &str = "LATEST";
    /// Read from the configured `initial_timestamp`.
    pub(crate) const AT_TIMESTAMP: &str = "AT_TIMESTAMP";
    /// The shard was read to its end: never read it again; its children may start.
    pub(crate) const SHARD_END: &str = "SHARD_END";
}

/// A lease's `checkpoint` and `checkpointSubSequenceNumber`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checkpoint {
    /// Nothing delivered yet; start at the oldest retained record.
    TrimHorizon,
    /// Nothing delivered yet; start at the newest record.
    Latest,
    /// Nothing delivered yet; start at the configured timestamp.
    AtTimestamp,
    /// Read to the end.
    ShardEnd,
    /// The last user record delivered.
    At(Position),
}

impl Checkpoint {
    /// The `checkpoint` string and `checkpointSubSequenceNumber`.
    pub fn to_attrs(&self) -> (&str, u64) {
        match self {
            Checkpoint::TrimHorizon => (sentinel::TRIM_HORIZON, 0),
            Checkpoint::Latest => (sentinel::LATEST, 0),
            Checkpoint::AtTimestamp => (sentinel::AT_TIMESTAMP, 0),
            Checkpoint::ShardEnd => (sentinel::SHARD_END, 0),
            Checkpoint::At(p) => (p.sequence.as_str(), p.sub_sequence),
        }
    }

    /// Parses the two attributes.
    pub fn from_attrs(checkpoint: &str, sub_sequence: u64) -> Result<Self, String> {
        Ok(match checkpoint {
            sentinel::TRIM_HORIZON => Checkpoint::TrimHorizon,
            sentinel::LATEST => Checkpoint::Latest,
            sentinel::AT_TIMESTAMP => Checkpoint::AtTimestamp,
            sentinel::SHARD_END => Checkpoint::ShardEnd,
            digits => Checkpoint::At(Position {
                sequence: SequenceNumber::new(digits)?,
                sub_sequence,
            }),
        })
    }

    /// The delivered position, if any.
    pub fn position(&self) -> Option<&Position> {
        match self {
            Checkpoint::At(p) => Some(p),
            _ => None,
        }
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checkpoint::At(p) => write!(f, "{}/{}", p.sequence, p.sub_sequence),
            other => f.write_str(other.to_attrs().0),
        }
    }
}

/// One row of the lease table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// `leaseKey`: the shard id.
    pub key: String,
    /// `leaseOwner`: the worker holding it.
    pub owner: Option<String>,
    /// `leaseCounter`.
    pub counter: u64,
    /// `checkpoint` and `checkpointSubSequenceNumber`.
    pub checkpoint: Checkpoint,
    /// `ownerSwitchesSinceCheckpoint`.
    pub owner_switches: u64,
    /// `parentShardId`, sorted.
    pub parents: Vec<String>,
    /// `childShardIds`, sorted.
    pub children: Vec<String>,
    /// `startingHashKey` and `endingHashKey`.
    pub hash_range: Option<(String, String)>,
    /// `handoffTo`: the worker waiting for the owner to hand the lease over.
    pub handoff: Option<String>,
}

impl Lease {
    /// A new, unowned row for `key` with counter 0.
    pub fn new(key: &str, checkpoint: Checkpoint) -> Self {
        Self {
            key: key.to_string(),
            owner: None,
            counter: 0,
            checkpoint,
            owner_switches: 0,
            parents: Vec::new(),
            children: Vec::new(),
            hash_range: None,
            handoff: None,
        }
    }

    /// The shard was read to its end.
    pub fn ended(&self) -> bool {
        self.checkpoint == Checkpoint::ShardEnd
    }
}
