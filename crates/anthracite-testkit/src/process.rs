//! Child processes with bounded lifetimes: every wait has a deadline, and whatever we start we
//! stop by PID (SIGTERM, a bounded wait, then SIGKILL).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a child gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// A long-running child (carbon-cache, carbon-relay) whose stdout and stderr go to `log`.
/// Dropping it stops it: SIGTERM, up to 5 s, then SIGKILL.
pub struct ManagedChild {
    /// What this child is, for messages (`carbon-cache a`).
    pub label: String,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    child: Child,
}

impl ManagedChild {
    /// Spawns `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(label: &str, mut cmd: Command, log: PathBuf) -> ManagedChild {
        let out = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("{label}: create log {}: {e}", log.display()));
        let err = out.try_clone().expect("clone log file handle");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: spawn {cmd:?}: {e}"));
        ManagedChild {
            label: label.to_owned(),
            log,
            child,
        }
    }

    /// The child's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` if the child has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait on a child")
    }

    /// The last `n` lines of the child's log.
    pub fn log_tail(&self, n: usize) -> String {
        match std::fs::read(&self.log) {
            Ok(bytes) => super::venv::tail(&String::from_utf8_lossy(&bytes), n),
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }

    /// Panics (with the log tail) if the child has exited.
    pub fn assert_running(&mut self, waiting_for: &str) {
        if let Some(status) = self.exited() {
            panic!(
                "{} (pid {}) exited with {status} while waiting for {waiting_for}\n--- {} (tail) ---\n{}",
                self.label,
                self.pid(),
                self.log.display(),
                self.log_tail(40)
            );
        }
    }

    /// Waits for the child to exit (after a signal the test sent); panics with `what` and the
    /// log tail after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration, what: &str) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} (pid {}): {what}\n{}",
                self.label,
                self.pid(),
                self.log_tail(30)
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the child with SIGKILL (by PID) and reaps it: a crash, no chance to clean up.
    pub fn kill(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }

    /// Stops the child: SIGTERM, wait up to 5 s, then SIGKILL. Idempotent.
    pub fn stop(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + TERM_GRACE;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `VmHWM` (peak resident set) of a process, in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmHWM in /proc/<pid>/status")
}

/// Runs `cmd` to completion with `stdin` as its input, killing it (and panicking with its
/// stderr) if it is not done within `timeout`.
pub fn output_with_timeout(
    what: &str,
    mut cmd: Command,
    stdin: Vec<u8>,
    timeout: Duration,
) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: spawn {cmd:?}: {e}"));
    let mut input = child.stdin.take().expect("piped stdin");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    // Separate threads so large inputs and outputs cannot deadlock against each other.
    let writer = thread::spawn(move || {
        let _ = input.write_all(&stdin); // a child that exits early closes the pipe
    });
    let out_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = err_reader.join().unwrap_or_default();
            panic!(
                "{what}: not finished after {timeout:?}, killed.\n--- stderr (tail) ---\n{}",
                super::venv::tail(&String::from_utf8_lossy(&err), 40)
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}
