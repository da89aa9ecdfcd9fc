//! What can fail in the spill log, and which operation failed (the label of its counter).

use std::io;

/// Which operation failed; doubles as the label of an error counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpillOp {
    /// Opening the directory, listing or scanning segments, reading the ledger.
    Open,
    /// Creating a segment or appending a record.
    Append,
    /// Reading a record.
    Read,
    /// `fsync` of a segment or the directory.
    Sync,
    /// Writing the ledger.
    Ledger,
    /// Deleting a consumed segment.
    Delete,
}

impl SpillOp {
    /// A short lowercase label.
    pub fn as_str(self) -> &'static str {
        match self {
            SpillOp::Open => "open",
            SpillOp::Append => "append",
            SpillOp::Read => "read",
            SpillOp::Sync => "sync",
            SpillOp::Ledger => "ledger",
            SpillOp::Delete => "delete",
        }
    }
}

impl std::fmt::Display for SpillOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors of the spill log. None of them leaves the log unusable: after an I/O error the
/// caller applies its fallback, counts, and may retry later.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpillError {
    /// The file system failed (disk full, permissions, a dead disk…).
    #[error("spill {op} failed: {source}")]
    Io {
        /// What the log was doing.
        op: SpillOp,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A configuration rule was broken; the message names the key.
    #[error("invalid spill config: {0}")]
    Config(&'static str),
    /// One batch encodes to more than a segment can hold; split it before spilling.
    #[error("batch encodes to {len} payload bytes, a segment holds at most {max}")]
    TooLarge {
        /// Payload bytes of the batch.
        len: u64,
        /// Largest payload allowed by `segment_bytes`.
        max: u64,
    },
}

impl SpillError {
    /// True for "no space left on device" (and quota exhaustion).
    pub fn is_disk_full(&self) -> bool {
        match self {
            SpillError::Io { source, .. } => {
                matches!(
                    source.kind(),
                    io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
                ) || source.raw_os_error() == Some(28)
            }
            _ => false,
        }
    }
}
