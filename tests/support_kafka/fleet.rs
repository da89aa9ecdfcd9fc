//! Real `anthracite` processes reading or writing Kafka ([`RelayProcess`], shared with the
//! Kinesis fleets): their relay.toml files, signals (SIGKILL, SIGTERM) by PID, and their admin
//! endpoint.

use std::path::PathBuf;

#[allow(unused_imports)]
pub use crate::support::relay_process::RelayProcess;

/// A scratch directory for configs and logs, kept when a test fails (its path is printed).
pub fn scratch(test: &str) -> PathBuf {
    crate::support::relay_process::scratch("kafka-tests", test)
}
