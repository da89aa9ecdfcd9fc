//! File access for the spill log, behind a small trait.
//!
//! [`SpillFs`] is everything the log does to a disk: create, append, read at an offset, sync,
//! rename, remove, list, plus a wall clock for record ages. [`StdFs`] is the real thing;
//! [`MemFs`] keeps files in memory and can simulate a crash — everything not yet synced is
//! dropped, optionally keeping a torn prefix of the last file written — so a property test can
//! model-check recovery without touching a disk.
//!
//! Metadata operations (create, rename, remove) are durable immediately in [`MemFs`]; [`StdFs`]
//! makes them durable with [`SpillFs::sync_dir`], which the log calls after creating a segment
//! and after renaming the ledger.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// A file opened for appending.
pub trait SpillWriter {
    /// Appends all of `buf` at the end of the file.
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
}

/// A file opened for positional reads.
pub trait SpillReader {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Current length of the file in bytes.
    fn file_len(&mut self) -> io::Result<u64>;

    /// Reads exactly `buf.len()` bytes at `offset`, or returns how many bytes were available
    /// before the end of the file.
    fn read_exact_at(&mut self, mut offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.read_at(offset, &mut buf[done..]) {
                Ok(0) => break,
                Ok(n) => {
                    done += n;
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
}

/// The file operations the spill log needs. Paths are always inside the log's directory.
pub trait SpillFs {
    /// Handle returned by [`SpillFs::create`].
    type Writer: SpillWriter;
    /// Handle returned by [`SpillFs::open`].
    type Reader: SpillReader;

    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates `path` empty (truncating any existing file) and opens it for appending.
    fn create(&self, path: &Path) -> io::Result<Self::Writer>;
    /// Opens an existing file for reading.
    fn open(&self, path: &Path) -> io::Result<Self::Reader>;
    /// Names of the regular files directly inside `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes directory entries (creations, renames, removals) in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Wall-clock milliseconds since the Unix epoch, stamped on records for age limits.
    fn now_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// The real file system through `std::fs`. Appends go straight to the kernel (no user-space
/// buffer), so a killed process loses nothing it appended; only unsynced data can be lost when
/// the machine itself goes down.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFs;

/// [`StdFs`]'s append handle.
#[derive(Debug)]
pub struct StdWriter(File);

/// [`StdFs`]'s read handle.
#[derive(Debug)]
pub struct StdReader(File);

impl SpillWriter for StdWriter {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl SpillReader for StdReader {
    #[cfg(unix)]
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.0, buf, offset)
    }
    #[cfg(not(unix))]
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        use std::io::{Read, Seek, SeekFrom};
        self.0.seek(SeekFrom::Start(offset))?;
        self.0.read(buf)
    }
    fn file_len(&mut self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl SpillFs for StdFs {
    type Writer = StdWriter;
    type Reader = StdReader;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn create(&self, path: &Path) -> io::Result<StdWriter> {
        OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)
            .map(StdWriter)
    }
    fn open(&self, path: &Path) -> io::Result<StdReader> {
        File::open(path).map(StdReader)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file()
                && let Ok(name) = entry.file_name().into_string()
            {
                names.push(name);
            }
        }
        Ok(names)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    #[cfg(unix)]
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
struct MemFile {
    data: Vec<u8>,
    synced: usize,
}

#[derive(Debug, Default)]
struct MemState {
    files: BTreeMap<PathBuf, MemFile>,
    /// The file most recently appended to: the one a crash may leave torn.
    last_written: Option<PathBuf>,
    now_millis: u64,
    /// When set, every operation fails with this error kind (simulates a dead disk).
    fail: Option<io::ErrorKind>,
}

/// An in-memory [`SpillFs`] that can simulate a crash. Clones share the same files.
#[derive(Clone, Debug, Default)]
pub struct MemFs {
    state: Arc<Mutex<MemState>>,
}

/// [`MemFs`]'s append handle.
#[derive(Debug)]
pub struct MemWriter {
    fs: MemFs,
    path: PathBuf,
}

/// [`MemFs`]'s read handle.
#[derive(Debug)]
pub struct MemReader {
    fs: MemFs,
    path: PathBuf,
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl MemFs {
    /// An empty file system whose clock reads 0 ms.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, MemState> {
        // A panic while holding the lock can only come from a test assertion; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check(&self) -> io::Result<MutexGuard<'_, MemState>> {
        let state = self.lock();
        match state.fail {
            Some(kind) => Err(io::Error::from(kind)),
            None => Ok(state),
        }
    }

    /// A deep copy: an independent file system with the same files and sync state.
    pub fn snapshot(&self) -> MemFs {
        let state = self.lock();
        MemFs {
            state: Arc::new(Mutex::new(MemState {
                files: state.files.clone(),
                last_written: state.last_written.clone(),
                now_millis: state.now_millis,
                fail: state.fail,
            })),
        }
    }

    /// Simulates a machine crash: every file loses what was appended since its last sync,
    /// except that the most recently written file keeps up to `keep_torn` bytes of its unsynced
    /// tail (a torn write).
    pub fn crash(&self, keep_torn: usize) {
        let mut state = self.lock();
        let last = state.last_written.take();
        for (path, file) in state.files.iter_mut() {
            let keep = if Some(path) == last.as_ref() {
                keep_torn.min(file.data.len() - file.synced)
            } else {
                0
            };
            file.data.truncate(file.synced + keep);
            file.synced = file.data.len();
        }
    }

    /// Sets the clock read by [`SpillFs::now_millis`].
    pub fn set_now_millis(&self, now: u64) {
        self.lock().now_millis = now;
    }

    /// Makes every later operation fail with `kind` (or succeed again with `None`).
    pub fn set_failure(&self, kind: Option<io::ErrorKind>) {
        self.lock().fail = kind;
    }

    /// Total length of the files in `dir` whose names end with `suffix`.
    pub fn bytes_in(&self, dir: &Path, suffix: &str) -> u64 {
        let state = self.lock();
        state
            .files
            .iter()
            .filter(|(p, _)| {
                p.parent() == Some(dir)
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with(suffix))
            })
            .map(|(_, f)| f.data.len() as u64)
            .sum()
    }

    /// Mutable access to a file's bytes (for corruption tests); `None` if it does not exist.
    pub fn with_file<T>(&self, path: &Path, f: impl FnOnce(&mut Vec<u8>) -> T) -> Option<T> {
        let mut state = self.lock();
        state.files.get_mut(path).map(|file| {
            let out = f(&mut file.data);
            file.synced = file.synced.min(file.data.len());
            out
        })
    }
}

impl SpillWriter for MemWriter {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut state = self.fs.check()?;
        let file = state.files.get_mut(&self.path).ok_or_else(not_found)?;
        file.data.extend_from_slice(buf);
        state.last_written = Some(self.path.clone());
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        let mut state = self.fs.check()?;
        let file = state.files.get_mut(&self.path).ok_or_else(not_found)?;
        file.synced = file.data.len();
        Ok(())
    }
}

impl SpillReader for MemReader {
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let state = self.fs.check()?;
        let file = state.files.get(&self.path).ok_or_else(not_found)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(file.data.len());
        let n = buf.len().min(file.data.len() - start);
        buf[..n].copy_from_slice(&file.data[start..start + n]);
        Ok(n)
    }
    fn file_len(&mut self) -> io::Result<u64> {
        let state = self.fs.check()?;
        let file = state.files.get(&self.path).ok_or_else(not_found)?;
        Ok(file.data.len() as u64)
    }
}

impl SpillFs for MemFs {
    type Writer = MemWriter;
    type Reader = MemReader;

    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        self.check().map(drop)
    }
    fn create(&self, path: &Path) -> io::Result<MemWriter> {
        let mut state = self.check()?;
        state.files.insert(path.to_path_buf(), MemFile::default());
        Ok(MemWriter {
            fs: self.clone(),
            path: path.to_path_buf(),
        })
    }
    fn open(&self, path: &Path) -> io::Result<MemReader> {
        let state = self.check()?;
        if !state.files.contains_key(path) {
            return Err(not_found());
        }
        Ok(MemReader {
            fs: self.clone(),
            path: path.to_path_buf(),
        })
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.check()?;
        Ok(state
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.check()?;
        let file = state.files.remove(from).ok_or_else(not_found)?;
        state.files.insert(to.to_path_buf(), file);
        if state.last_written.as_deref() == Some(from) {
            state.last_written = Some(to.to_path_buf());
        }
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut state = self.check()?;
        state.files.remove(path).map(drop).ok_or_else(not_found)
    }
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        self.check().map(drop)
    }
    fn now_millis(&self) -> u64 {
        self.lock().now_millis
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfs_crash_drops_unsynced_and_keeps_torn_prefix() -> io::Result<()> {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        let (a, b) = (dir.join("a"), dir.join("b"));
        let mut wa = fs.create(&a)?;
        wa.append(b"1234")?;
        wa.sync()?;
        wa.append(b"5678")?;
        let mut wb = fs.create(&b)?;
        wb.append(b"abcdef")?;
        fs.crash(3);
        let mut buf = [0u8; 16];
        assert_eq!(fs.open(&a)?.read_at(0, &mut buf)?, 4);
        assert_eq!(fs.open(&b)?.read_at(0, &mut buf)?, 3);
        assert_eq!(&buf[..3], b"abc");
        assert_eq!(fs.list(dir)?.len(), 2);
        Ok(())
    }
}
