//! File destinations: plaintext lines appended to a file (carbon-c-relay's `file` and
//! `file ip` clusters).
//!
//! carbon-c-relay 3.7.3 treats a file member as a server whose connection is
//! `open(path, O_WRONLY | O_APPEND | O_CREAT, 0644)`: it gets the lines a TCP member would.
//! Here the file is the transport's "connection": [`connect`](Transport::connect) opens it
//! the same way, and each write takes the oldest batches from the queue (as the stream
//! transport does), appends their lines in one `write_all` and counts them as sent. The queue,
//! its spill tier, the failure episodes and shutdown stay the core's.
//!
//! A write that fails (a full disk, a file system gone read-only) requeues the whole write
//! and ends the "connection": the task counts and logs it once per episode, backs off and
//! reopens the file. Lines the failed write had already appended are written again after
//! the reopen (at least once, as over TCP). A write that makes no progress for the write
//! timeout (a hung network file system) is declared hung likewise.
//!
//! Rotation: before each write the path is compared with the open file (device and inode).
//! When logrotate has moved the file away (or deleted it), the path is opened again, so the
//! next lines go to a new file at the path. carbon-c-relay reopens its files only on a
//! SIGHUP that changes its configuration; here neither a SIGHUP nor a change is needed, and a
//! reload (which keeps an unchanged destination running) finds the file reopened all the
//! same. A `copytruncate` rotation needs nothing: the file is opened for appending.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::BytesMut;

use super::encode::{Encoded, Encoder};
use super::{BoxFuture, DestinationConfig, Outbox, OutputProtocol, Served, Transport};

/// The core's file transport: lines appended to the file at a path.
pub(crate) struct FileTransport {
    path: Arc<PathBuf>,
    encoder: Encoder,
    buf: BytesMut,
    file: Option<File>,
}

impl FileTransport {
    pub(crate) fn new(config: &DestinationConfig, path: &Path) -> Self {
        Self {
            path: Arc::new(path.to_path_buf()),
            encoder: Encoder::new(OutputProtocol::Line, config.max_datapoints_per_message),
            buf: BytesMut::with_capacity(config.flush_bytes * 2),
            file: None,
        }
    }
}

/// Opens `path` as carbon-c-relay does: write-only, appending, created `0644`.
fn open(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
}

/// True when `path` no longer names `file` (moved away, deleted or replaced).
fn rotated(path: &Path, file: &File) -> bool {
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(p), Ok(f)) => p.dev() != f.dev() || p.ino() != f.ino(),
        _ => true,
    }
}

/// One write on a blocking thread: reopens the file if the path was rotated, then appends
/// `bytes`. The file comes back unless the write failed.
fn append(path: &Path, file: File, bytes: &[u8]) -> std::io::Result<File> {
    let mut file = if rotated(path, &file) {
        open(path)?
    } else {
        file
    };
    file.write_all(bytes)?;
    Ok(file)
}

impl Transport for FileTransport {
    fn connect(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async move {
            let path = Arc::clone(&self.path);
            let file = tokio::task::spawn_blocking(move || open(&path))
                .await
                .map_err(std::io::Error::other)??;
            self.file = Some(file);
            Ok(())
        })
    }

    fn serve<'a>(&'a mut self, mut outbox: Outbox<'a>) -> BoxFuture<'a, Served> {
        Box::pin(async move {
            loop {
                if let Err(end) = outbox.next_write().await {
                    return end;
                }
                let Some(file) = self.file.take() else {
                    outbox.requeue();
                    return Served::Lost(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        "file not open",
                    ));
                };
                let encoded: Encoded = self.encoder.encode(&outbox.in_flight[..], &mut self.buf);
                let bytes = self.buf.split().freeze();
                let path = Arc::clone(&self.path);
                let write = tokio::task::spawn_blocking(move || append(&path, file, &bytes));
                let done = match outbox.stall_limit() {
                    Some(limit) => match tokio::time::timeout(limit, write).await {
                        Ok(done) => done,
                        Err(_) => {
                            // The blocking write keeps the file; the reconnect opens another.
                            outbox.requeue();
                            return Served::Hung(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                format!("file write made no progress for {limit:?}"),
                            ));
                        }
                    },
                    None => write.await,
                };
                match done.map_err(std::io::Error::other).and_then(|r| r) {
                    Ok(file) => {
                        self.file = Some(file);
                        outbox.delivered(encoded.datapoints, encoded.messages, encoded.unencodable);
                    }
                    Err(e) => {
                        outbox.requeue();
                        return Served::Lost(e);
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::batch::{Batch, VERBATIM};
    use crate::destination::{DestinationSignals, run};
    use crate::queue::{DestinationQueue, DestinationStats};

    fn config(path: &Path) -> DestinationConfig {
        DestinationConfig {
            backoff_max: Duration::from_millis(20),
            write_timeout: Some(Duration::from_secs(10)),
            file: Some(path.to_path_buf()),
            ..DestinationConfig::for_test("out:1:file", OutputProtocol::Line)
        }
    }

    /// Waits for `done`, bounded (a hung test's deadline, not a timing assertion).
    async fn until(what: &str, done: impl Fn() -> bool) {
        let wait = async {
            while !done() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .unwrap_or_else(|_| panic!("{what}: not within 10 s"));
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_opened_is_retried_counted_and_written_once_it_can() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Its directory does not exist yet: every open fails until it does.
        let path = dir.path().join("later").join("out.txt");
        let cfg = config(&path);
        let stats = Arc::new(DestinationStats::new(cfg.spec.to_string()));
        let queue = Arc::new(DestinationQueue::new(cfg.queue, stats.clone()));
        let mut b = Batch::new();
        for line in ["a.b 1 1700000000", "c.d 2.50 1700000060"] {
            b.push(line.as_bytes(), 0.0, VERBATIM)
                .expect("batch has room");
        }
        queue.push(b);
        let task = tokio::spawn(run(cfg, queue.clone(), DestinationSignals::default()));
        until("two failed opens", || {
            stats.snapshot().connect_failures >= 2
        })
        .await;
        assert_eq!(stats.snapshot().sent, 0);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the directory");
        until("both lines sent", || stats.snapshot().sent >= 2).await;
        queue.close();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the task ends once the queue is closed and empty")
            .expect("the task");
        assert_eq!(
            std::fs::read_to_string(&path).expect("the file"),
            "a.b 1 1700000000\nc.d 2.50 1700000060\n"
        );
        let s = stats.snapshot();
        assert_eq!((s.sent, s.queued, s.dropped.iter().sum::<u64>()), (2, 0, 0));
    }

    #[test]
    fn a_moved_file_is_reopened_at_its_path() {
        let dir = std::env::temp_dir().join(format!("anthracite-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let path = dir.join("out.txt");
        let _ = std::fs::remove_file(&path);
        let file = open(&path).expect("open");
        let file = append(&path, file, b"a 1 1\n").expect("append");
        assert!(!rotated(&path, &file));
        let moved = dir.join("out.txt.1");
        std::fs::rename(&path, &moved).expect("rotate");
        assert!(rotated(&path, &file));
        let file = append(&path, file, b"b 2 2\n").expect("append after the rotation");
        assert!(!rotated(&path, &file));
        assert_eq!(std::fs::read(&moved).expect("the rotated file"), b"a 1 1\n");
        assert_eq!(std::fs::read(&path).expect("the new file"), b"b 2 2\n");
        let mode = std::fs::metadata(&path).expect("metadata").mode() & 0o777;
        // The umask may only take bits away.
        assert_eq!(mode & !0o644, 0, "mode {mode:o}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
