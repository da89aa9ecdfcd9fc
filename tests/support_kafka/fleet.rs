//! Real `anthracite` processes reading or writing Kafka ([`RelayProcess`], shared with the
//! Kinesis fleets): their relay.toml files, signals (SIGKILL, SIGTERM) by PID, and their admin
//! endpoint.

use std::path::{Path, PathBuf};

pub use crate::support::relay_process::RelayProcess;

impl RelayProcess {
    /// Writes `<dir>/<name>.toml` with `toml` and runs `anthracite run` on it, logging to
    /// `<dir>/<name>.log`.
    pub fn start(dir: &Path, name: &str, toml: &str) -> RelayProcess {
        RelayProcess::spawn(dir, name, toml, &[])
    }
}

/// A scratch directory for configs and logs, kept when a test fails (its path is printed).
pub fn scratch(test: &str) -> PathBuf {
    crate::support::relay_process::scratch("kafka-tests", test)
}
