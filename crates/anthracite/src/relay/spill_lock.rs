//! One relay per spill directory.
//!
//! Two relays on one spill directory would both replay the same logs (duplicates) and each
//! acknowledge records the other still holds (losses). At build time the relay takes an
//! exclusive `flock` on `<dir>/anthracite.lock` in every spill root its destinations use
//! (`[destinations.spill] dir`), before any log is opened, and holds it for its life; a
//! second relay finds the lock taken and fails to build with [`RelayError::SpillLocked`]
//! (the binary exits as on a configuration error). The kernel drops the lock when the
//! process exits, however it exits, so a crash leaves nothing to clean up.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::RelayError;
use crate::destination::DestinationConfig;

/// File locked in each spill root.
pub(crate) const LOCK_FILE: &str = "anthracite.lock";

/// The locks a relay holds on its spill roots (released when dropped).
#[derive(Debug, Default)]
pub(crate) struct SpillLocks {
    _locks: Vec<Flock<File>>,
}

/// Locks every spill root of `destinations` (the parent of each destination's log directory).
pub(crate) fn lock_spill_roots(
    destinations: &[DestinationConfig],
) -> Result<SpillLocks, RelayError> {
    let roots: BTreeSet<PathBuf> = destinations
        .iter()
        .filter_map(|d| d.spill.as_ref())
        .filter_map(|s| s.dir.parent().map(Path::to_path_buf))
        .collect();
    let mut locks = Vec::with_capacity(roots.len());
    for root in roots {
        locks.push(lock_root(&root)?);
    }
    Ok(SpillLocks { _locks: locks })
}

fn lock_root(root: &Path) -> Result<Flock<File>, RelayError> {
    let path = root.join(LOCK_FILE);
    let io = |source: std::io::Error| RelayError::SpillLock {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(root).map_err(io)?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(RelayError::SpillLocked {
            dir: root.to_path_buf(),
        }),
        Err((_, errno)) => Err(io(std::io::Error::from(errno))),
    }
}
