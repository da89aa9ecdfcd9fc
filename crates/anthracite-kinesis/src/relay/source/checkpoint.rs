//! Checkpoints: how far each shard of a stream was delivered.
//!
//! A shard's checkpoint is the `(sequence, sub-sequence)` of the last user record whose every
//! line was accepted into the destination queues, plus whether the shard reached SHARD_END.
//! A reader resumes with `AT_SEQUENCE_NUMBER` and skips user records at or before the
//! checkpoint, which handles a restart in the middle of a KPL aggregate and costs one
//! re-read record otherwise.
//!
//! Sequence numbers are decimal strings of up to 128 bits and more; they are compared by
//! (length, text) and never parsed into a fixed-width integer.
//!
//! The store sits behind [`CheckpointStore`]; [`FileStore`] keeps one JSON file per stream and
//! replaces it atomically (write a temporary file, fsync, rename, fsync the directory). A file
//! that does not parse is an error naming the file, never silently reset. With a lease table,
//! [`LeaseStore`](super::leases::LeaseStore) keeps them in the lease rows instead.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use serde::{Deserialize, Serialize};

/// A Kinesis sequence number: decimal digits, ordered by (length, text).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SequenceNumber(String);

impl SequenceNumber {
    /// Checks that `s` is a canonical decimal number (digits, no leading zero).
    pub fn new(s: impl Into<String>) -> Result<Self, String> {
        let s = s.into();
        let canonical = !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit())
            && (s.len() == 1 || !s.starts_with('0'));
        if canonical {
            Ok(Self(s))
        } else {
            Err(format!("{s:?} is not a sequence number"))
        }
    }

    /// The digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl TryFrom<String> for SequenceNumber {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::new(s)
    }
}

impl From<SequenceNumber> for String {
    fn from(s: SequenceNumber) -> String {
        s.0
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The position of one user record: outer sequence number and index inside an aggregate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Position {
    /// The Kinesis record's sequence number.
    pub sequence: SequenceNumber,
    /// The user record's index inside a KPL aggregate (0 for a plain record).
    pub sub_sequence: u64,
}

/// One shard's checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardCheckpoint {
    /// Last delivered user record (`None`: nothing delivered yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
    /// The shard was read to SHARD_END: never read it again; its children may start.
    #[serde(default)]
    pub ended: bool,
}

/// Every shard of one stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCheckpoint {
    /// Format version (1).
    pub version: u32,
    /// The stream's name.
    pub stream: String,
    /// Per shard id.
    pub shards: BTreeMap<String, ShardCheckpoint>,
}

/// Errors of a checkpoint store.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading or writing failed.
    #[error("checkpoint file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file exists but is not a valid checkpoint.
    #[error(
        "checkpoint file {path} is corrupt ({message}); move it away to start from the configured initial position"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The file belongs to another stream.
    #[error("checkpoint file {path} is for stream {found:?}, not {expected:?}")]
    WrongStream {
        /// The file.
        path: PathBuf,
        /// The stream being read.
        expected: String,
        /// The stream the file names.
        found: String,
    },
    /// A write to the lease table failed (it is retried at the next commit).
    #[error(transparent)]
    LeaseTable(#[from] super::leases::TableError),
    /// The blocking task doing file I/O failed.
    #[error("checkpoint task failed: {0}")]
    Task(String),
}

/// What a [`CheckpointStore`] call returns.
pub(crate) type StoreFuture<'a, T> =
    Pin<Box<dyn std::future::Future<Output = Result<T, CheckpointError>> + Send + 'a>>;

/// Where checkpoints live.
pub trait CheckpointStore: Send + Sync + fmt::Debug {
    /// The stored checkpoint, or an empty one when none exists yet.
    fn load(&self) -> StoreFuture<'_, StreamCheckpoint>;
    /// Stores the checkpoint: every shard this store is responsible for.
    fn save<'a>(&'a self, checkpoint: &'a StreamCheckpoint) -> StoreFuture<'a, ()>;
}

/// One JSON file per stream: `<dir>/<stream>.checkpoint.json`.
#[derive(Clone, Debug)]
pub struct FileStore {
    dir: PathBuf,
    path: PathBuf,
    stream: String,
}

impl FileStore {
    /// The store of `stream` in `dir` (created on first save).
    pub fn new(dir: &Path, stream: &str) -> Self {
        Self {
            dir: dir.to_path_buf(),
            path: Self::path_for(dir, stream),
            stream: stream.to_string(),
        }
    }

    /// The file that holds `stream`'s checkpoint.
    pub fn path_for(dir: &Path, stream: &str) -> PathBuf {
        dir.join(format!("{stream}.checkpoint.json"))
    }

    /// The checkpoint file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> CheckpointError {
        CheckpointError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Reads the file (blocking); an empty checkpoint when it does not exist.
    pub fn read(&self) -> Result<StreamCheckpoint, CheckpointError> {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(StreamCheckpoint {
                    version: 1,
                    stream: self.stream.clone(),
                    shards: BTreeMap::new(),
                });
            }
            Err(e) => return Err(self.io(e)),
        };
        let cp: StreamCheckpoint =
            serde_json::from_slice(&text).map_err(|e| CheckpointError::Corrupt {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
        if cp.version != 1 {
            return Err(CheckpointError::Corrupt {
                path: self.path.clone(),
                message: format!("unknown version {}", cp.version),
            });
        }
        if cp.stream != self.stream {
            return Err(CheckpointError::WrongStream {
                path: self.path.clone(),
                expected: self.stream.clone(),
                found: cp.stream,
            });
        }
        Ok(cp)
    }

    /// Replaces the file atomically (blocking).
    pub fn write(&self, checkpoint: &StreamCheckpoint) -> Result<(), CheckpointError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io(e))?;
        let json = serde_json::to_vec_pretty(checkpoint).map_err(|e| CheckpointError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        let tmp = self
            .dir
            .join(format!(".{}.checkpoint.json.tmp", self.stream));
        let mut f = std::fs::File::create(&tmp).map_err(|e| self.io(e))?;
        f.write_all(&json).map_err(|e| self.io(e))?;
        f.sync_all().map_err(|e| self.io(e))?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(|e| self.io(e))?;
        // The rename is durable only once the directory entry is.
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl CheckpointStore for FileStore {
    fn load(&self) -> StoreFuture<'_, StreamCheckpoint> {
        let me = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || me.read())
                .await
                .map_err(|e| CheckpointError::Task(e.to_string()))?
        })
    }

    fn save<'a>(&'a self, checkpoint: &'a StreamCheckpoint) -> StoreFuture<'a, ()> {
        let (me, cp) = (self.clone(), checkpoint.clone());
        Box::pin(async move {
            tokio::task::spawn_blocking(move || me.write(&cp))
                .await
                .map_err(|e| CheckpointError::Task(e.to_string()))?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(s: &str) -> SequenceNumber {
        SequenceNumber::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn sequence_numbers_order_by_length_then_text() {
        assert!(seq("9") < seq("10"));
        assert!(seq("49590338271490256608559692538361571095921575989136588802") > seq("4959"));
        assert!(seq("123") < seq("124"));
        assert!(SequenceNumber::new("01").is_err());
        assert!(SequenceNumber::new("").is_err());
        assert!(SequenceNumber::new("12a").is_err());
        let a = Position {
            sequence: seq("100"),
            sub_sequence: 5,
        };
        let b = Position {
            sequence: seq("99"),
            sub_sequence: 9,
        };
        assert!(b < a);
    }

    #[test]
    fn file_store_roundtrip_and_corrupt_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store = FileStore::new(dir.path(), "s");
        let mut cp = store.read().unwrap_or_else(|e| panic!("{e}"));
        assert!(cp.shards.is_empty());
        cp.shards.insert(
            "shardId-000000000000".into(),
            ShardCheckpoint {
                position: Some(Position {
                    sequence: seq("340282366920938463463374607431768211457"),
                    sub_sequence: 2,
                }),
                ended: false,
            },
        );
        store.write(&cp).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.read().unwrap_or_else(|e| panic!("{e}")), cp);
        std::fs::write(store.path(), b"{\"version\":1,\"stream\":")
            .unwrap_or_else(|e| panic!("{e}"));
        let err = store.read().expect_err("corrupt");
        assert!(err.to_string().contains("corrupt"), "{err}");
        assert!(err.to_string().contains("s.checkpoint.json"), "{err}");
    }
}
