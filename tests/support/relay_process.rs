//! Real `anthracite` processes (the fleets of the Kafka and Kinesis suites): each runs
//! `anthracite run` on its own relay.toml, logs to a file beside it, takes signals (SIGKILL,
//! SIGTERM, SIGSTOP, SIGCONT) by PID, and is stopped by PID on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use super::process::ManagedChild;

/// A relay process, stopped by PID on drop.
pub struct RelayProcess {
    /// Its name: the stem of its config and log files, for messages.
    pub name: String,
    child: ManagedChild,
}

impl RelayProcess {
    /// Writes `<dir>/<name>.toml` with `toml` and runs `anthracite run` on it, logging to
    /// `<dir>/<name>.log`; `env` adds to its environment.
    pub fn spawn(dir: &Path, name: &str, toml: &str, env: &[(&str, &str)]) -> RelayProcess {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, toml).expect("write relay.toml");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_anthracite"));
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied());
        let log = dir.join(format!("{name}.log"));
        RelayProcess {
            name: name.to_string(),
            child: ManagedChild::spawn(name, cmd, log),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`) to this process only.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{signal} {} ({})", self.pid(), self.name);
    }

    /// Waits for the process to exit (a deadline for a hung test, never a timing assertion).
    pub async fn exit_status(&mut self, limit: Duration) -> ExitStatus {
        let end = tokio::time::Instant::now() + limit;
        loop {
            if let Some(s) = self.child.exited() {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "{} did not exit:\n{}",
                self.name,
                self.child.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn assert_running(&mut self, what: &str) {
        self.child.assert_running(what);
    }

    /// Its whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.child.log).unwrap_or_default()
    }

    pub fn log_tail(&self, n: usize) -> String {
        self.child.log_tail(n)
    }

    pub fn log_path(&self) -> &Path {
        &self.child.log
    }
}

/// A scratch directory `target/tmp/<suite>/<test>/` for configs and logs, emptied first and
/// kept when a test fails.
pub fn scratch(suite: &str, test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(suite)
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}
